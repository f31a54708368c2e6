"""The GPU kit's small subprocesses (`benchmarks.gpu.run_kit` starts each in its own
process, so that the kit's own process never initialises a JAX backend or CUDA):

  python -m benchmarks.gpu.workers info            # JAX side: versions, backend, device
  python -m benchmarks.gpu.workers torch_info      # torch side (the torch interpreter)
  python -m benchmarks.gpu.workers scale K ROUNDS POPULATION
  python -m benchmarks.gpu.workers sweep [benchmarks.sweep's flags]

``scale``: `benchmarks.scale.worker` (one cohort size of the 10^6 population, in this
process) plus the accelerator's peak memory (``memory_stats()['peak_bytes_in_use']``;
none on the CPU backend). ``sweep``: `benchmarks.sweep` with its processes on the GPU
when there is one (``JAX_PLATFORMS=cuda``; `benchmarks.sweep` defaults to the CPU),
printing the sweep's record as the last line. Each prints one JSON line last.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys


def _version(dist: str):
  try:
    return md.version(dist)
  except md.PackageNotFoundError:
    return None


def info() -> dict:
  import jax
  dev = jax.devices()[0]
  stats = dev.memory_stats() or {}
  out = {"backend": jax.default_backend(), "device_kind": str(dev.device_kind),
         "platform": dev.platform, "device_count": jax.device_count(),
         "device_memory_gib": (round(stats["bytes_limit"] / 2**30, 1)
                               if "bytes_limit" in stats else None),
         "versions": {d: _version(d) for d in (
             "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax", "optax",
             "chex", "orbax-checkpoint", "numpy", "scipy", "dp-accounting", "jax-privacy",
             "tyro", "tensorboardX", "fedjax_dp")},
         "python": sys.version.split()[0]}
  import fedjax_dp
  out["fedjax_dp_path"] = os.path.dirname(fedjax_dp.__file__)
  return out


def torch_info() -> dict:
  import torch
  cuda = torch.cuda.is_available()
  out = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
         "cuda_available": cuda,
         "device_name": torch.cuda.get_device_name(0) if cuda else None,
         "opacus": _version("opacus"), "python": sys.version.split()[0]}
  try:
    import opacus  # noqa: F401  (importable with the kit's site directory?)
    out["opacus_importable"] = True
  except Exception as e:  # pylint: disable=broad-except
    out["opacus_importable"] = False
    out["opacus_error"] = f"{type(e).__name__}: {e}"
  return out


def scale(k: int, rounds: int, population: int) -> dict:
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(None)  # as `benchmarks.scale.run`: one JAX CPU device per core (no
  # effect on a GPU backend); before JAX's first computation
  from benchmarks import scale as scale_mod
  rec = scale_mod.worker(k, rounds, population)
  import jax
  dev = jax.devices()[0]
  stats = dev.memory_stats() or {}
  rec["device_kind"] = str(dev.device_kind)
  rec["device_peak_mib"] = (stats["peak_bytes_in_use"] / 2**20
                            if "peak_bytes_in_use" in stats else None)
  return rec


def sweep(argv) -> dict:
  """`benchmarks.sweep` on the GPU when there is one: its runs take the backend from
  ``JAX_PLATFORMS``, set here to ``cuda`` when ``nvidia-smi`` exists (JAX itself is not
  started in this process: it would take the GPU's memory from the sweep's runs)."""
  import shutil
  from benchmarks import sweep as sweep_mod
  if "JAX_PLATFORMS" not in os.environ and shutil.which("nvidia-smi"):
    os.environ["JAX_PLATFORMS"] = "cuda"
  return sweep_mod.main(argv)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  what, rest = argv[0], argv[1:]
  if what == "info":
    rec = info()
  elif what == "torch_info":
    rec = torch_info()
  elif what == "scale":
    rec = scale(int(rest[0]), int(rest[1]), int(rest[2]))
  elif what == "sweep":
    rec = sweep(rest)
  else:
    raise SystemExit(f"unknown worker {what!r}")
  print(json.dumps(rec), flush=True)


if __name__ == "__main__":
  main()
