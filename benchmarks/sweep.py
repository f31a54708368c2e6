"""A sweep in one compiled program against the same runs one by one (issue 19, part 5).

  python -m benchmarks.sweep                 # 8 seeds of the default HAR job (~15 min)
  python -m benchmarks.sweep --quick         # 2 seeds, 3 rounds of synthetic data

The job is ``fedjax-dp run``'s default (user-level DP-FedAvg on HAR, 50 rounds, har_cnn,
z = 2, q = 0.5), with seeds 0 .. S-1 (S = ``--seeds``, default 8), timed three ways on
the same machine, one after the other:

(a) ``fedjax-dp sweep --seeds 0-7``: one process, every seed in one vmapped program
    (`fedjax_dp.runs.sweep`); run twice, first with an empty compilation cache (cold),
    then again with the cache the first left (warm);
(b) ``fedjax-dp run --seed s`` for each seed, S fresh processes one after another, as a
    user would type them, with the default compilation cache in a fresh folder: the
    first run compiles (cold), the others load its programs (warm);
(c) S sequential `fedjax_dp.runs.run` calls in one Python process (the same fresh-cache
    setting: the first call compiles, the others find its programs in the cache);
(d) (b) again with ``--chunk-size 1``: the same runs up to the order of the float sums
    (chunking never changes a client's keys). Its accuracies against (b)'s show how far
    rounding alone moves this job after 50 rounds: the yardstick for (a) against (b),
    whose vmapped program also sums in another order.

Every process is timed from its start (interpreter, imports, data, compilation,
training, files) to its exit. The split of the time (``profile``) comes from the runs'
own records: ``training`` is the last round's ``wall_time_s``; ``compile_estimate`` is
the first block's time minus the steady per-round time for its rounds; ``setup`` is the
run's ``wall_time_s`` minus training (data, build, tracing, writing); ``process`` is
the rest (interpreter start, imports, JAX start-up). Per-seed results: each seed's
final test accuracy and epsilon in (a) and (b) (the default job's HAR partition is the
natural one, which does not depend on the seed, so (b) runs on the sweep's data).

The machine is shared: the load average is recorded before and after every part.
Writes ``benchmarks/results/sweep.json`` (``--out``) and prints the Markdown lines for
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata as md
from typing import Any, Dict, List

from benchmarks import common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: ``--quick``: synthetic data (which depends on the data seed: fixed to 0 everywhere).
QUICK_ARGS = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
              "--rounds", "3", "--eval-every", "3", "--data-seed", "0"]
TARGET = 3.0


def _fedjax_dp() -> List[str]:
  """The ``fedjax-dp`` command of this interpreter's environment."""
  script = os.path.join(os.path.dirname(sys.executable), "fedjax-dp")
  return [script] if os.path.exists(script) else [sys.executable, "-m", "fedjax_dp.cli"]


def _timed(cmd: List[str], env: Dict[str, str]) -> float:
  """Runs ``cmd`` in ROOT; its wall time (s). Raises RuntimeError if it fails."""
  t = time.perf_counter()
  out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t
  if out.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
  return wall


def _env(cache: str) -> Dict[str, str]:
  """The runs' environment: a fresh cache folder; JAX on the CPU unless the caller's
  ``JAX_PLATFORMS`` names a backend (the GPU kit passes ``cuda``)."""
  env = dict(os.environ, FEDJAX_DP_CACHE_DIR=cache,
             JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS") or "cpu")
  env.pop("FEDJAX_DP_COMPILATION_CACHE", None)  # the default: on
  return env


def _load() -> List[float]:
  return [round(v, 2) for v in os.getloadavg()]


def profile(summary: Dict[str, Any], records: List[Dict[str, Any]],
            process_wall: float) -> Dict[str, Any]:
  """Where one run's (or sweep member's) time went (module docstring)."""
  walls = [r["wall_time_s"] for r in records]
  training = walls[-1]
  first = walls.count(walls[0])
  steady = (walls[-1] - walls[0]) / (len(walls) - first) if first < len(walls) else None
  compile_est = walls[0] - steady * first if steady is not None else None
  return {"process_s": process_wall, "run_wall_s": summary["wall_time_s"],
          "training_s": training, "steady_s_per_round": steady,
          "compile_estimate_s": compile_est,
          "setup_s": summary["wall_time_s"] - training,
          "process_overhead_s": process_wall - summary["wall_time_s"]}


def _read(folder: str):
  with open(os.path.join(folder, "summary.json")) as f:
    summary = json.load(f)
  with open(os.path.join(folder, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  return summary, records


def _inner_c(args) -> None:
  """Part (c) inside its own process: S sequential `run` calls (as the CLI sets up
  JAX: one CPU device per core, the compilation cache on); prints one JSON line."""
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(None)
  from fedjax_dp import cli, compilation_cache
  compilation_cache.enable(None)
  from fedjax_dp.runs import run
  walls = []
  out = {}
  for s in range(args.seeds):
    t = time.perf_counter()
    cfg, _, _, _ = cli.parse_run_args(
        (QUICK_ARGS if args.quick else []) + ["--seed", str(s), "--out",
                                              os.path.join(args.inner_c, f"seed{s}")])
    res = run(cfg, progress=False)
    walls.append(time.perf_counter() - t)
    out[str(s)] = {"final_test_accuracy": res.summary["final_test_accuracy"],
              "epsilon": res.summary["epsilon"], "wall_time_s": res.summary["wall_time_s"],
              "steady_time_per_round_s": res.summary["steady_time_per_round_s"]}
  print(json.dumps({"walls": walls, "runs": out}))


def main(argv=None) -> Dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--seeds", type=int, default=8)
  p.add_argument("--quick", action="store_true", help="synthetic data, 2 seeds, 3 rounds")
  p.add_argument("--parts", default="a,b,c,d", help="comma list of a, b, c, d")
  p.add_argument("--out", default=os.path.join(HERE, "results", "sweep.json"))
  p.add_argument("--inner-c", default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.quick and args.seeds == 8:
    args.seeds = 2
  if args.inner_c:
    _inner_c(args)
    return {}
  parts = args.parts.split(",")
  job = QUICK_ARGS if args.quick else []
  seeds = list(range(args.seeds))
  tmp = tempfile.mkdtemp(prefix="bench_sweep_")
  rec: Dict[str, Any] = {
      "benchmark": "sweep", "timestamp": dt.datetime.now(dt.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "quick": args.quick, "machine": common.machine_info(),
      "versions": {k: md.version(k) for k in ("jax", "jaxlib", "flax", "fedjax_dp")},
      "job": "fedjax-dp run defaults (dp_fedavg on har, 50 rounds)" if not args.quick
      else " ".join(QUICK_ARGS), "seeds": seeds, "target_ratio_b_over_a": TARGET}
  fx = _fedjax_dp()
  try:
    if "a" in parts:
      cache = os.path.join(tmp, "cache_a")
      for label in ("cold", "warm"):
        out = os.path.join(tmp, f"a_{label}")
        load0 = _load()
        wall = _timed(fx + ["sweep", *job, "--seeds", f"0-{args.seeds - 1}",
                            "--no-progress", "--out", out], _env(cache))
        with open(os.path.join(out, "sweep.json")) as f:
          sw = json.load(f)
        members = {}
        for m in sw["members"]:
          summary, records = _read(os.path.join(out, m["folder"]))
          members[str(m["axes"]["seed"])] = {
              "final_test_accuracy": summary["final_test_accuracy"],
              "epsilon": summary["epsilon"],
              "profile": profile(summary, records, wall)}
        rec[f"a_{label}"] = {"wall_s": wall, "sweep_wall_s": sw["wall_time_s"],
                             "programs": sw["programs"], "load_before": load0,
                             "load_after": _load(), "members": members,
                             "rows": sw["rows"]}
        print(f"(a) sweep, {label} cache: {wall:.1f} s", flush=True)
    if "b" in parts:
      cache = os.path.join(tmp, "cache_b")
      runs, load0 = {}, _load()
      for s in seeds:
        out = os.path.join(tmp, f"b_seed{s}")
        wall = _timed(fx + ["run", *job, "--seed", str(s), "--no-progress", "--out", out],
                      _env(cache))
        summary, records = _read(out)
        runs[str(s)] = {"wall_s": wall, "cache": "cold" if s == seeds[0] else "warm",
                   "final_test_accuracy": summary["final_test_accuracy"],
                   "epsilon": summary["epsilon"],
                   "profile": profile(summary, records, wall)}
        print(f"(b) run --seed {s}: {wall:.1f} s", flush=True)
      rec["b"] = {"wall_s": sum(r["wall_s"] for r in runs.values()), "load_before": load0,
                  "load_after": _load(), "runs": runs}
    if "d" in parts:
      cache = os.path.join(tmp, "cache_b")
      runs, load0 = {}, _load()
      for s in seeds:
        out = os.path.join(tmp, f"d_seed{s}")
        wall = _timed(fx + ["run", *job, "--seed", str(s), "--chunk-size", "1",
                            "--no-progress", "--out", out], _env(cache))
        summary, records = _read(out)
        runs[str(s)] = {"wall_s": wall, "final_test_accuracy": summary[
            "final_test_accuracy"], "epsilon": summary["epsilon"]}
      rec["d"] = {"wall_s": sum(r["wall_s"] for r in runs.values()), "load_before": load0,
                  "load_after": _load(), "runs": runs}
      print(f"(d) {args.seeds} runs with --chunk-size 1: {rec['d']['wall_s']:.1f} s",
            flush=True)
    if "c" in parts:
      load0 = _load()
      t = time.perf_counter()
      out = subprocess.run(
          [sys.executable, "-m", "benchmarks.sweep", "--seeds", str(args.seeds),
           "--inner-c", os.path.join(tmp, "c")] + (["--quick"] if args.quick else []),
          cwd=ROOT, env=_env(os.path.join(tmp, "cache_c")), capture_output=True,
          text=True)
      wall = time.perf_counter() - t
      if out.returncode != 0:
        raise RuntimeError(f"part (c) failed:\n{out.stderr[-3000:]}")
      inner = json.loads(out.stdout.strip().splitlines()[-1])
      rec["c"] = {"wall_s": wall, "run_walls_s": inner["walls"], "runs": inner["runs"],
                  "load_before": load0, "load_after": _load()}
      print(f"(c) {args.seeds} run() calls in one process: {wall:.1f} s", flush=True)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  rec["summary"] = summarise(rec)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(rec, f, indent=1)
  print("\n".join(markdown(rec)))
  return rec


def summarise(rec: Dict[str, Any]) -> Dict[str, Any]:
  """Ratios and the per-seed comparison of (a) and (b)."""
  out: Dict[str, Any] = {}
  a = rec.get("a_cold")
  if a and "b" in rec:
    out["ratio_b_over_a_cold"] = rec["b"]["wall_s"] / a["wall_s"]
    if "a_warm" in rec:
      out["ratio_b_over_a_warm"] = rec["b"]["wall_s"] / rec["a_warm"]["wall_s"]
    diffs = {s: abs(a["members"][s]["final_test_accuracy"] - r["final_test_accuracy"])
             for s, r in rec["b"]["runs"].items()}
    out["max_abs_accuracy_difference_a_b"] = max(diffs.values())
    out["accuracies_identical_a_b"] = all(d == 0.0 for d in diffs.values())
    out["epsilons_identical_a_b"] = all(
        a["members"][s]["epsilon"] == r["epsilon"] for s, r in rec["b"]["runs"].items())
  if a and "c" in rec:
    out["ratio_c_over_a_cold"] = rec["c"]["wall_s"] / a["wall_s"]
  if "b" in rec and "d" in rec:
    out["max_abs_accuracy_difference_b_d"] = max(
        abs(r["final_test_accuracy"] - rec["b"]["runs"][s]["final_test_accuracy"])
        for s, r in rec["d"]["runs"].items())
  return out


def markdown(rec: Dict[str, Any]) -> List[str]:
  """The lines for benchmarks/RESULTS.md."""
  s = rec["summary"]
  n = len(rec["seeds"])
  lines = [f"## Sweep: {n} seeds in one program ({rec['timestamp']})", "",
           f"Job: {rec['job']}, seeds 0-{n - 1}; {rec['machine']['cpu']}, "
           f"{rec['machine']['cores']} cores (shared: load averages recorded); "
           f"`python -m benchmarks.sweep`.", "",
           "| way | wall (s) | per seed (s) | note |", "|---|---|---|---|"]
  for key, note in (("a_cold", f"`fedjax-dp sweep --seeds 0-{n - 1}`, empty compilation "
                               "cache"),
                    ("a_warm", "the same again, cache warm")):
    if key in rec:
      lines.append(f"| (a) sweep, {key[2:]} | {rec[key]['wall_s']:.1f} | "
                   f"{rec[key]['wall_s'] / n:.1f} | {note}; load "
                   f"{rec[key]['load_before'][0]}-{rec[key]['load_after'][0]} |")
  if "b" in rec:
    lines.append(f"| (b) {n} x `fedjax-dp run --seed s` | {rec['b']['wall_s']:.1f} | "
                 f"{rec['b']['wall_s'] / n:.1f} | fresh processes, first cold, then warm "
                 f"cache; load {rec['b']['load_before'][0]}-{rec['b']['load_after'][0]} |")
  if "c" in rec:
    lines.append(f"| (c) {n} x `run()` in one process | {rec['c']['wall_s']:.1f} | "
                 f"{rec['c']['wall_s'] / n:.1f} | first cold, then warm cache; load "
                 f"{rec['c']['load_before'][0]}-{rec['c']['load_after'][0]} |")
  if "ratio_b_over_a_cold" in s:
    lines += ["", f"Ratio (b) / (a): {s['ratio_b_over_a_cold']:.2f}x cold"
              + (f", {s['ratio_b_over_a_warm']:.2f}x warm" if "ratio_b_over_a_warm" in s
                 else "")
              + f" (target {TARGET:g}x); per-seed final accuracies "
              + ("identical" if s["accuracies_identical_a_b"] else
                 f"within {s['max_abs_accuracy_difference_a_b']:.2g}")
              + ", epsilons " + ("identical" if s["epsilons_identical_a_b"] else "differ")
              + " between (a) and (b)"
              + (f"; the same runs with --chunk-size 1 (d: another summation order) "
                 f"differ from (b) by up to {s['max_abs_accuracy_difference_b_d']:.2g}."
                 if "max_abs_accuracy_difference_b_d" in s else ".")]
  return lines


if __name__ == "__main__":
  main()
