"""The GPU kit: one command on the GPU machine runs the prepared suite (issue 32).

  python3 benchmarks/gpu/run_kit.py --out DIR [--budget-s 520] [--tiny]
                                    [--sections info,scale,dpsgd,cifar10,sweep,micro]

Run ``python -m benchmarks.gpu.prepare`` here first (downloads the wheels the GPU machine
lacks into ``benchmarks/gpu/wheels/``); README.md ("GPU kit") gives the device tool's
call. The kit

1. installs the carried wheels without touching the machine's own packages
   (``pip install --no-index --find-links benchmarks/gpu/wheels --no-deps --target``):
   `wheels.MAIN` and fedjax_dp itself (built from this working tree) into
   ``<work>/site``, pfl-research and its older dp-accounting (`wheels.PFL`) into
   ``<work>/pfl_site``, which only the pfl process sees (``PYTHONPATH``);
2. runs the sections in order of importance, every measurement in its own process,
   one after the other, on the same accelerator, within a wall-clock budget (the
   install counts): a measurement whose estimated time no longer fits is skipped and
   the reason recorded, and every process is killed at the end of the budget;
3. writes ``kit.json`` (every record, the device, the versions, what was skipped and
   why) and ``kit.md`` into ``--out`` after every section, so a run cut short still
   leaves its results.

Sections:

``info``: JAX's backend and device kind, torch's CUDA device (``torch.cuda.
get_device_name``), nvidia-smi, the versions.
``scale``: user-level DP-FedAvg (workload-(a) MLP) on a population of 10^6 clients at
cohorts 10^2, 10^3, 10^4 (`benchmarks.scale`'s worker, one process per cohort, plus the
accelerator's peak memory).
``dpsgd``: record-level DP-SGD, federated, on the MLP (``dpsgd_mlp``) and the flax
``nn.Conv`` user CNN (``dpsgd_user_cnn``; ``dpsgd_cnn`` while that workload is not in
`benchmarks.workloads`): fedjax_dp (`benchmarks.dpsgd`) against Opacus
(``peer_opacus.py``, hooks and ghost) on the same GPU (``--device cuda``).
``cifar10``: pfl-research's CIFAR-10 benchmark shape (`benchmarks.gpu.cifar10`) on
fedjax_dp and on pfl (``peer_pfl.py --workload cifar10_pfl --device cuda``).
``sweep``: `benchmarks.sweep` (the sweep in one program against the same runs one by
one), parts (a) and (b), 4 seeds of the default HAR job.
``micro``: the one-batch clipped-gradient microbenchmark (`benchmarks.dpsgd --micro`,
``peer_opacus.py --micro``), if time is left.

Precision: the fedjax_dp processes run with ``JAX_DEFAULT_MATMUL_PRECISION=highest``
(``--jax-precision``): on NVIDIA GPUs JAX's default computes float32 matmuls and
convolutions in TF32, torch's default computes float32 matmuls in float32, so the
default would compare unlike arithmetic (and TF32 sums would fail the 1e-4 checks of
the microbenchmark). torch's cuDNN convolutions keep torch's default (TF32 allowed),
which can only favour the torch peers' CNN rows.

On a machine without a GPU (or with ``--tiny``) the same code runs on JAX's CPU
backend and torch's CPU: ``--tiny`` shrinks every size so that the whole kit checks its
plumbing in minutes; ``--torch-python`` names an interpreter with torch when this one
has none (the GPU machine's python3 has both).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, ROOT)

from benchmarks import common, workloads  # noqa: E402
from benchmarks import run as bench_run  # noqa: E402
from benchmarks.gpu import cifar10, wheels  # noqa: E402

SECTIONS = ("info", "scale", "dpsgd", "cifar10", "sweep", "micro")
DEFAULT_BUDGET_S = 520.0
POPULATION = 1_000_000
SCALE_COHORTS = (100, 1_000, 10_000)
SWEEP_SEEDS = 4
# Estimated seconds of each measurement on the GPU machine (process start, JAX/CUDA
# initialisation, compilation, rounds), and in --tiny mode on a 2-core CPU: a
# measurement starts only if its estimate fits in the budget left.
ESTIMATE_S = {
    "info": (25, 20), "scale": (45, 25), "dpsgd_fedjax_dp": (40, 25),
    "dpsgd_opacus": (45, 20), "cifar10_fedjax_dp": (45, 25), "cifar10_pfl": (60, 25),
    "sweep": (170, 90), "micro_fedjax_dp": (40, 25), "micro_opacus": (40, 20),
}


class Kit:
  """The budget, the environments and the result of one kit run."""

  def __init__(self, a):
    self.a = a
    self.t0 = time.monotonic()
    self.deadline = self.t0 + a.budget_s
    self.tiny = a.tiny
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    self.result: Dict[str, Any] = {
        "benchmark": "gpu_kit", "timestamp": now, "tiny": a.tiny,
        "budget_s": a.budget_s, "machine": common.machine_info(), "sections": {},
        "skipped": [], "errors": []}
    self.site = os.path.join(a.work, "site")
    self.pfl_site = os.path.join(a.work, "pfl_site")
    self.torch_python = a.torch_python or sys.executable
    self.env = dict(os.environ)
    if a.jax_precision != "default":
      self.env["JAX_DEFAULT_MATMUL_PRECISION"] = a.jax_precision
    self.result["jax_default_matmul_precision"] = a.jax_precision
    self.torch: Optional[dict] = None

  # --- time ---------------------------------------------------------------------------
  def left(self) -> float:
    return self.deadline - time.monotonic()

  def fits(self, what: str, label: Optional[str] = None) -> bool:
    need = ESTIMATE_S[what][1 if self.tiny else 0]
    if self.left() >= need:
      return True
    self.skip(label or what, f"needs about {need} s, {max(self.left(), 0):.0f} s of the "
              "budget left")
    return False

  def skip(self, label: str, reason: str) -> None:
    print(f"[kit] skipped {label}: {reason}", flush=True)
    self.result["skipped"].append({"what": label, "reason": reason})

  # --- processes ----------------------------------------------------------------------
  def call(self, label: str, cmd: List[str], env: Optional[dict] = None) -> Optional[dict]:
    """Runs one measurement (`benchmarks.run._run`: JSON on the last stdout line) with
    the budget left as its timeout; None (and the error recorded) if it fails."""
    timeout = max(int(self.left()), 1)
    print(f"[kit] {label} (at {time.monotonic() - self.t0:.0f} s)", flush=True)
    t = time.monotonic()
    try:
      rec = bench_run._run(cmd, env=env or self.env, timeout=timeout)  # pylint: disable=protected-access
    except subprocess.TimeoutExpired:
      self.error(label, f"killed at the end of the budget ({timeout} s)")
      return None
    except Exception as e:  # pylint: disable=broad-except
      self.error(label, str(e)[-3000:])
      return None
    rec["kit_wall_s"] = round(time.monotonic() - t, 2)
    print(f"[kit] {label}: {rec['kit_wall_s']:.1f} s", flush=True)
    return rec

  def error(self, label: str, message: str) -> None:
    print(f"[kit] FAILED {label}: {message}", flush=True)
    self.result["errors"].append({"what": label, "error": message})

  def module(self, *args: str) -> List[str]:
    return [sys.executable, "-m", *args]

  def peer(self, script: str, *args: str) -> List[str]:
    return [self.torch_python, os.path.join(BENCH, script), *args]

  # --- install ------------------------------------------------------------------------
  def install(self) -> None:
    """The carried wheels into <work>/site and <work>/pfl_site (module docstring)."""
    wdir = self.a.wheels
    sec = self.result["sections"].setdefault("install", {})
    if self.a.no_install:
      sec["status"] = "not asked (--no-install): this environment's packages"
      return
    if not os.path.isdir(wdir) or not any(f.endswith(".whl") for f in os.listdir(wdir)):
      sec["status"] = (f"no wheels in {wdir} (run python -m benchmarks.gpu.prepare "
                       "there): this environment's packages")
      print(f"[kit] {sec['status']}", flush=True)
      return
    t = time.monotonic()
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
           wdir, "--no-deps", "--no-compile", "--disable-pip-version-check", "--target"]
    for path in (self.site, self.pfl_site):
      shutil.rmtree(path, ignore_errors=True)
    steps = [("main wheels", pip + [self.site, *wheels.MAIN]),
             ("pfl wheels", pip + [self.pfl_site, *wheels.PFL]),
             ("fedjax_dp", pip + [self.site, ROOT])]
    for label, cmd in steps:
      out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                           timeout=max(int(self.left()), 1))
      if out.returncode == 0:
        continue
      self.error(f"install {label}", out.stderr[-3000:])
      if label == "pfl wheels":
        self.pfl_site = None
      elif label == "fedjax_dp":  # the sources load from the working tree anyway
        self._metadata_only(self.site)
    self.env["PYTHONPATH"] = os.pathsep.join(
        [self.site] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    sec.update(status="installed", seconds=round(time.monotonic() - t, 1),
               site=self.site, pfl_site=self.pfl_site, wheels_dir=wdir)
    man = os.path.join(wdir, "manifest.json")
    if os.path.exists(man):
      with open(man) as f:
        sec["wheels_mib"] = json.load(f).get("total_mib")
    print(f"[kit] installed the wheels in {sec['seconds']:.1f} s", flush=True)

  @staticmethod
  def _metadata_only(site: str) -> None:
    """fedjax_dp's distribution metadata alone (its version for the records), if
    building it failed: the processes import fedjax_dp from the working tree."""
    import re
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
      version = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    info = os.path.join(site, f"fedjax_dp-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
      f.write(f"Metadata-Version: 2.1\nName: fedjax_dp\nVersion: {version}\n")
    print("[kit] building fedjax_dp failed: metadata only, sources from the working "
          "tree", flush=True)

  def peer_env(self, name: str) -> dict:
    env = bench_run.peer_env(name)
    if name == "pfl":
      if self.pfl_site and os.path.isdir(self.pfl_site):
        env["PYTHONPATH"] = self.pfl_site  # pfl's dp-accounting, never fedjax_dp's
      else:
        env.pop("PYTHONPATH", None)
    else:
      env["PYTHONPATH"] = self.env.get("PYTHONPATH", "")
    return env

  # --- sections -----------------------------------------------------------------------
  def info(self) -> None:
    sec: Dict[str, Any] = {}
    if self.fits("info", "info jax"):
      sec["jax"] = self.call("info jax", self.module("benchmarks.gpu.workers", "info"))
    if shutil.which("nvidia-smi"):
      out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True)
      sec["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
    self.probe_torch()
    sec["torch"] = self.torch
    self.result["sections"]["info"] = sec
    backend = (sec.get("jax") or {}).get("backend")
    if sec.get("nvidia_smi") and backend == "cpu" and "JAX_PLATFORMS" not in os.environ:
      # JAX fell back to its CPU backend (its CUDA plugin failed): make every later JAX
      # process fail at once with JAX's own message rather than run full sizes on CPU.
      self.error("info jax", "JAX runs on its CPU backend although nvidia-smi sees a "
                 "GPU; later JAX processes get JAX_PLATFORMS=cuda")
      self.env["JAX_PLATFORMS"] = "cuda"

  def probe_torch(self) -> None:
    """``self.torch``: the torch interpreter's versions and device (None: no torch)."""
    if not self.fits("info", "torch probe"):
      return
    cmd = [self.torch_python, "-m", "benchmarks.gpu.workers", "torch_info"]
    try:
      out = subprocess.run(cmd, cwd=ROOT, env=self.peer_env("opacus"), text=True,
                           capture_output=True, timeout=max(int(self.left()), 1))
      if out.returncode == 0:
        self.torch = json.loads(out.stdout.strip().splitlines()[-1])
        return
      why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
      why = repr(e)
    self.skip("torch peers (Opacus, pfl)", f"{self.torch_python} has no usable torch "
              f"({why}); --torch-python names another interpreter")

  def torch_device(self) -> str:
    return "cuda" if self.torch and self.torch.get("cuda_available") else "cpu"

  def opacus_ok(self, label: str) -> bool:
    if not self.torch:
      self.skip(label, "no torch (see 'torch peers')")
      return False
    if not self.torch.get("opacus_importable"):
      self.skip(label, "Opacus is not importable: "
                f"{self.torch.get('opacus_error', '')} (prepare the wheels)")
      return False
    return True

  def opacus_device_args(self) -> List[str]:
    """``--device cuda`` when torch sees a GPU and peer_opacus.py has the option."""
    with open(os.path.join(BENCH, "peer_opacus.py")) as f:
      has_flag = '"--device"' in f.read()
    dev = self.torch_device()
    if dev == "cpu":
      return []
    if not has_flag:
      self.result["sections"].setdefault("dpsgd", {})["note"] = (
          "peer_opacus.py has no --device option yet: Opacus ran on the CPU")
      return []
    return ["--device", dev]

  def scale(self) -> None:
    cohorts = (10, 100) if self.tiny else SCALE_COHORTS
    pop = 20_000 if self.tiny else POPULATION
    rounds = 1 if self.tiny else 2
    res = []
    sec = {"population": pop, "pool_examples": 10_000, "rounds": rounds, "results": res}
    self.result["sections"]["scale"] = sec
    for k in cohorts:
      if not self.fits("scale", f"scale K={k}"):
        continue
      rec = self.call(f"scale K={k}", self.module(
          "benchmarks.gpu.workers", "scale", str(k), str(rounds), str(pop)))
      if rec:
        res.append(rec)
      self.save()

  def dpsgd(self) -> None:
    names = ["dpsgd_mlp", "dpsgd_user_cnn" if "dpsgd_user_cnn" in workloads.DPSGD_WORKLOADS
             else "dpsgd_cnn"]
    sec = self.result["sections"].setdefault("dpsgd", {})
    sec.update(federated=[], micro=[])
    if names[1] == "dpsgd_cnn":
      sec["note_cnn"] = ("workload dpsgd_user_cnn (flax nn.Conv) is not in "
                         "benchmarks.workloads yet: ran dpsgd_cnn")
    ours = (["--cohort-size", "4", "--warmup-rounds", "1", "--timed-rounds", "2",
             "--matmul-size", "256"] if self.tiny else [])
    peer_rounds = (["--cohort-size", "4", "--warmup-rounds", "1", "--timed-rounds", "2"]
                   if self.tiny else list(bench_run.DPSGD_PEER_ROUNDS))
    flag, variants = bench_run.DPSGD_PEER_VARIANTS["opacus"]
    dev = None
    for w in names:
      if self.fits("dpsgd_fedjax_dp", f"dpsgd {w} fedjax_dp"):
        rec = self.call(f"dpsgd {w} fedjax_dp", self.module(
            "benchmarks.dpsgd", "--workload", w, *ours))
        if rec:
          sec["federated"].append(rec)
      for v in variants:
        label = f"dpsgd {w} opacus {v}"
        if not (self.opacus_ok(label) and self.fits("dpsgd_opacus", label)):
          continue
        dev = self.opacus_device_args() if dev is None else dev
        rec = self.call(label, self.peer("peer_opacus.py", "--workload", w, flag, v,
                                         *peer_rounds, *dev), self.peer_env("opacus"))
        if rec:
          sec["federated"].append(rec)
      self.save()

  def micro(self) -> None:
    sec = self.result["sections"].setdefault("dpsgd", {"federated": [], "micro": []})
    sec.setdefault("micro", [])
    arch = "user_cnn" if "user_cnn" in workloads.DPSGD_FLOPS_PER_EXAMPLE else "cnn"
    models = "mlp" if self.tiny else f"mlp,{arch}"
    sizes = ["--batch-sizes", "20", "--repeat", "3"] if self.tiny else []
    if self.fits("micro_fedjax_dp", "micro fedjax_dp"):
      rec = self.call("micro fedjax_dp", self.module(
          "benchmarks.dpsgd", "--micro", "--models", models, *sizes,
          *(["--matmul-size", "256"] if self.tiny else [])))
      if rec:
        sec["micro"].append(rec)
    if self.opacus_ok("micro opacus") and self.fits("micro_opacus", "micro opacus"):
      rec = self.call("micro opacus", self.peer(
          "peer_opacus.py", "--micro", "--models", models, *sizes,
          *self.opacus_device_args()), self.peer_env("opacus"))
      if rec:
        sec["micro"].append(rec)

  def cifar(self) -> None:
    w = cifar10.tiny() if self.tiny else cifar10.CIFAR10_PFL
    sec = {"workload": dict(w), "records": []}
    self.result["sections"]["cifar10"] = sec
    if self.fits("cifar10_fedjax_dp", "cifar10 fedjax_dp"):
      rec = self.call("cifar10 fedjax_dp", self.module(
          "benchmarks.gpu.cifar10", *(["--tiny"] if self.tiny else [])))
      if rec:
        sec["records"].append(rec)
    self.save()
    label = "cifar10 pfl"
    if not self.torch:
      self.skip(label, "no torch (see 'torch peers')")
      return
    if not self.fits("cifar10_pfl", label):
      return
    sizes = (["--num-clients", str(w["num_clients"]), "--cohort-size",
              str(w["cohort_size"])] if self.tiny else [])
    rec = self.call(label, self.peer(
        "peer_pfl.py", "--workload", "cifar10_pfl", "--device", self.torch_device(),
        "--warmup-rounds", "1", "--timed-rounds", str(w["timed_rounds"]) if self.tiny
        else "5", *sizes),
        self.peer_env("pfl"))
    if rec:
      rec["gflops"] = cifar10.flops_per_round(w) / rec["median_round_s"] / 1e9
      sec["records"].append(rec)

  def sweep(self) -> None:
    """`SWEEP_SEEDS` seeds, or 2 when only that many fit (the estimate is for 4: two
    sweep processes and four runs; 2 seeds take about two thirds of it)."""
    seeds = 2 if self.tiny else SWEEP_SEEDS
    if not self.tiny and self.left() < ESTIMATE_S["sweep"][0]:
      seeds = 2
      if self.left() < ESTIMATE_S["sweep"][0] * 2 / 3:
        self.skip("sweep", f"needs about {ESTIMATE_S['sweep'][0] * 2 // 3} s with 2 "
                  f"seeds, {max(self.left(), 0):.0f} s of the budget left")
        return
    elif not self.fits("sweep"):
      return
    out = os.path.join(self.a.work, "sweep.json")
    args = (["--quick", "--seeds", "2"] if self.tiny else ["--seeds", str(seeds)])
    rec = self.call("sweep", self.module("benchmarks.gpu.workers", "sweep", *args,
                                         "--parts", "a,b", "--out", out))
    if rec:
      self.result["sections"]["sweep"] = rec

  # --- output -------------------------------------------------------------------------
  def save(self) -> None:
    self.result["wall_s"] = round(time.monotonic() - self.t0, 1)
    os.makedirs(self.a.out, exist_ok=True)
    with open(os.path.join(self.a.out, "kit.json"), "w") as f:
      json.dump(self.result, f, indent=1, default=str)
    with open(os.path.join(self.a.out, "kit.md"), "w") as f:
      f.write(markdown(self.result))


def _device_line(res: dict) -> str:
  info = res["sections"].get("info", {})
  jx = info.get("jax") or {}
  tc = info.get("torch") or {}
  v = jx.get("versions", {})
  parts = []
  if jx:
    parts.append(f"JAX {v.get('jax')} ({jx.get('backend')}: {jx.get('device_kind')} x "
                 f"{jx.get('device_count')}), flax {v.get('flax')}, optax "
                 f"{v.get('optax')}, fedjax_dp {v.get('fedjax_dp')}")
  if tc:
    parts.append(f"torch {tc.get('torch')} (CUDA {tc.get('torch_cuda')}: "
                 f"{tc.get('device_name') or 'no GPU'}), Opacus {tc.get('opacus')}")
  if info.get("nvidia_smi"):
    parts.append(f"nvidia-smi: {info['nvidia_smi']}")
  m = res["machine"]
  parts.append(f"host {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB")
  return "; ".join(parts)


def _scale_md(sc: dict) -> List[str]:
  lines = ["### User-level DP-FedAvg at scale", "",
           f"`benchmarks.scale`'s worker: population {sc['population']:,} clients "
           f"(pooled over {sc['pool_examples']:,} shared examples), workload-(a) MLP, "
           f"fixed-size cohort of K, {sc['rounds']} timed round(s) after one warm-up, one "
           "process per K.", "",
           "| cohort K | s/round | client-updates/s | peak device MiB | peak RSS MiB | "
           "process s |", "|---|---|---|---|---|---|"]
  for r in sc["results"]:
    dev = r.get("device_peak_mib")
    lines.append(f"| {r['cohort_size']:,} | {r['seconds_per_round']:.3f} | "
                 f"{r['client_updates_per_s']:,.0f} | "
                 f"{'' if dev is None else f'{dev:,.0f}'} | {r['peak_rss_mib']:,.0f} | "
                 f"{r.get('kit_wall_s', '')} |")
  return lines + [""]


def _dpsgd_md(sec: dict) -> List[str]:
  notes = [f"Note: {sec[k]}" for k in ("note", "note_cnn") if sec.get(k)]
  try:
    lines = bench_run.dpsgd_markdown(sec, bench_run.dpsgd_ratios(sec))
  except Exception as e:  # pylint: disable=broad-except
    lines = ["### Record-level DP-SGD", "", f"(table failed: {e!r})", ""]
    for r in sec.get("federated", []):
      lines.append(f"- {r['workload']} {r['framework']} {r.get('method', '')}: "
                   f"{r['per_example_grads_per_s']:,.0f} per-example grads/s, median "
                   f"{r['median_round_s']:.4f} s/round, loss ok {r.get('loss_ok')}")
  return lines[:1] + ([""] + notes if notes else []) + lines[1:] + [""]


def _cifar_md(sec: dict) -> List[str]:
  w = sec["workload"]
  recs = sec["records"]
  lines = ["### pfl-research's CIFAR-10 benchmark shape", "",
           f"`benchmarks.gpu.cifar10`: {w['num_clients']:,} users x "
           f"{w['examples_per_client']} CIFAR-shaped random points, cohort "
           f"{w['cohort_size']}, local batch {w['batch_size']}, {w['local_epochs']} epoch, "
           f"{w['model']}, central DP clip {w['clip_norm']}, z {w['noise_multiplier']}. "
           f"GFLOP/s: matmul/conv FLOPs of local training over the round time.", "",
           "| framework | versions | device | median s/round | client-updates/s | GFLOP/s "
           "| loss first -> last | fedjax_dp speed-up |", "|---|---|---|---|---|---|---|---|"]
  ours = [r for r in recs if r["framework"] == "fedjax_dp"]
  for r in recs:
    ver = ", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items()))
    sp = ""
    if ours and r["framework"] != "fedjax_dp":
      sp = f"{ours[0]['client_updates_per_s'] / r['client_updates_per_s']:.1f}x"
    dev = r.get("device_name") or r.get("device") or ""
    fl, la = r.get("first_round_loss"), r.get("last_round_loss")
    loss = f"{fl:.3f} -> {la:.3f}" if fl is not None and la is not None else ""
    lines.append(f"| {r['framework']} | {ver} | {dev} | {r['median_round_s']:.4f} | "
                 f"{r['client_updates_per_s']:,.1f} | {r.get('gflops', 0):.1f} | {loss} | "
                 f"{sp} |")
  return lines + [""]


def _sweep_md(rec: dict) -> List[str]:
  from benchmarks import sweep as sweep_mod
  try:
    return [("#" + l if l.startswith("## ") else l)  # a subsection of the kit's report
            for l in sweep_mod.markdown(rec)] + [""]
  except Exception as e:  # pylint: disable=broad-except
    return ["### Sweep", "", f"(table failed: {e!r})", ""]


def markdown(res: dict) -> str:
  lines = [f"## GPU kit, {res['timestamp']}{' (tiny)' if res['tiny'] else ''}", "",
           _device_line(res), "",
           f"Wall time {res.get('wall_s', 0):.0f} s of a {res['budget_s']:.0f} s budget; "
           "every measurement in its own process, one after the other, on the same "
           "device (`python3 benchmarks/gpu/run_kit.py`). JAX matmul precision: "
           f"{res.get('jax_default_matmul_precision')} (torch peers: torch's defaults, "
           "float32 matmuls; cuDNN convolutions may use TF32).", ""]
  ins = res["sections"].get("install", {})
  if ins:
    lines += [f"Install: {ins.get('status')}"
              + (f" in {ins['seconds']} s ({ins.get('wheels_mib')} MiB of wheels)"
                 if "seconds" in ins else "") + ".", ""]
  secs = res["sections"]
  if secs.get("scale", {}).get("results"):
    lines += _scale_md(secs["scale"])
  if secs.get("dpsgd", {}).get("federated") or secs.get("dpsgd", {}).get("micro"):
    lines += _dpsgd_md(secs["dpsgd"])
  if secs.get("cifar10", {}).get("records"):
    lines += _cifar_md(secs["cifar10"])
  if secs.get("sweep"):
    lines += _sweep_md(secs["sweep"])
  if res["skipped"]:
    lines += ["Skipped:", ""] + [f"- {s['what']}: {s['reason']}" for s in res["skipped"]]
    lines.append("")
  if res["errors"]:
    lines += ["Failed:", ""] + [f"- {e['what']}: `{e['error'][-500:].strip()}`"
                                for e in res["errors"]]
    lines.append("")
  return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", required=True, help="folder for kit.json and kit.md")
  p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                 help="wall-clock budget of the whole kit, install included")
  p.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU plumbing check)")
  p.add_argument("--sections", default=",".join(SECTIONS),
                 help=f"comma-separated subset of {','.join(SECTIONS)}, run in that order")
  p.add_argument("--wheels", default=os.path.join(HERE, "wheels"))
  p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                 "fedjax_dp_gpu_kit"),
                 help="where the wheels are installed and scratch files go")
  p.add_argument("--no-install", action="store_true",
                 help="use this environment's packages as they are")
  p.add_argument("--torch-python", default=None,
                 help="interpreter with torch for Opacus and pfl (default: this one)")
  p.add_argument("--jax-precision", default="highest",
                 help="JAX_DEFAULT_MATMUL_PRECISION of the fedjax_dp processes: highest "
                      "(default: float32 matmuls and convolutions, as torch's matmuls; no "
                      "TF32 on the GPU) or default (JAX's own: TF32 on NVIDIA GPUs)")
  a = p.parse_args(argv)
  wanted = [s for s in a.sections.split(",") if s]
  unknown = set(wanted) - set(SECTIONS)
  if unknown:
    p.error(f"--sections: unknown {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
  os.makedirs(a.work, exist_ok=True)
  kit = Kit(a)
  kit.install()
  kit.save()
  order = {"info": kit.info, "scale": kit.scale, "dpsgd": kit.dpsgd,
           "cifar10": kit.cifar, "sweep": kit.sweep, "micro": kit.micro}
  if "info" not in wanted and any(s in wanted for s in ("dpsgd", "cifar10", "micro")):
    kit.probe_torch()
  for name in SECTIONS:
    if name in wanted:
      t = time.monotonic()
      order[name]()
      kit.result.setdefault("section_seconds", {})[name] = round(time.monotonic() - t, 1)
      kit.save()
  print(markdown(kit.result), flush=True)
  print(f"[kit] wrote {os.path.join(a.out, 'kit.json')} and kit.md in "
        f"{kit.result['wall_s']:.0f} s", flush=True)
  return kit.result


if __name__ == "__main__":
  main()
