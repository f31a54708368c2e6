"""Recorded runs of every algorithm through `fedjax-dp run`, to show that a restructuring
keeps behaviour identical (issue 14: "metrics.jsonl is identical, or differs only by
float summation order, stated").

  python tests/behaviour/record.py --record            # write baseline/ (before a change)
  python tests/behaviour/record.py --compare [CASE ...] # re-run and compare (after)

Each case is a command line of `fedjax-dp run` with a fixed seed. The baseline keeps
each case's metrics.jsonl and the summary fields listed in `SUMMARY_FIELDS`; timing
fields are dropped. `compare` reports, per case, the fields whose values changed and the
largest relative change, and exits 1 if any value moved by more than ``--rtol``
(default 0: identical). The test `test_behaviour_unchanged.py` runs the quick cases.

The recorded values depend on the machine (2 CPU devices, one per core) and on the
jax/XLA version (`baseline/versions.json`); re-record the baseline, never edit it, when
either changes on purpose.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import math
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.path.join(HERE, "baseline")

# Per-client noise multipliers for the HAR population (30 clients): one low-noise client.
PER_CLIENT_Z = [0.8] + [3.0] * 29

SYNTH = ["--dataset", "synthetic", "--num-clients", "20"]
# name -> (argv after `run`, quick): quick cases run in the test suite.
CASES: Dict[str, tuple] = {
    "default": ([], False),
    "dp_fedavg_poisson": (["--rounds", "6", "--eval-every", "3"], True),
    "dp_fedavg_fixed_size": (["--rounds", "6", "--sampler", "fixed_size",
                              "--clients-per-round", "10", "--eval-every", "3"], True),
    "dp_fedavg_local_per_client": (["--rounds", "5", "--noise-placement", "local",
                                    "--client-noise-multipliers", "{per_client}",
                                    "--eval-every", "5"], True),
    "dp_fedavg_calibrated": (["--rounds", "6", "--target-epsilon", "3",
                              "--eval-every", "3", "--accountant", "pld"], True),
    "dp_fedavg_budget_guard": (["--rounds", "30", "--noise-multiplier", "1.0",
                                "--target-epsilon", "4", "--eval-every", "5",
                                "--server-optimizer", "fedadam", "--server-lr", "0.01"],
                               True),
    "dp_fedsgd": (["--algorithm", "dp_fedsgd", "--rounds", "5", "--eval-every", "5"], True),
    "dp_fedavg_record_level": (["--algorithm", "dp_fedavg_record_level", "--rounds", "3",
                                "--local-steps", "2", "--batch-size", "16",
                                "--eval-every", "3"], True),
    "fedavg": (["--algorithm", "fedavg", "--rounds", "5", "--eval-every", "5",
                "--client-optimizer", "momentum"], True),
    "amplitude_varying": (["--algorithm", "amplitude_varying", *SYNTH, "--model", "mlp",
                           "--hidden", "8", "--activation", "linear", "--epsilon", "10",
                           "--vartheta", "1.05", "--rounds", "6", "--clients-per-round",
                           "5", "--param-clip-norm", "2", "--eval-every", "2"], True),
    "amplitude_varying_refinement": (["--algorithm", "amplitude_varying", *SYNTH,
                                      "--model", "linear", "--epsilon", "5", "--vartheta",
                                      "1.1", "--rounds", "10", "--clients-per-round", "5",
                                      "--alpha-d", "0.8", "--refinement-mode",
                                      "exact_budget", "--client-lr", "2.0",
                                      "--param-clip-norm", "0.5"], True),
    "amplitude_varying_clipped": (["--algorithm", "amplitude_varying", *SYNTH,
                                   "--model", "linear", "--epsilon", "10", "--rounds", "4",
                                   "--clients-per-round", "5", "--param-clip-norm", "2",
                                   "--local-steps", "1", "--sensitivity-mode",
                                   "clipped_gradients", "--grad-clip-norm", "1"], True),
    "padpfl": (["--algorithm", "padpfl", "--dataset", "mnist", "--scenario", "4",
                "--impact-factors", "0-1-2>2-1-0", "--epsilon", "20", "--delta", "0.01",
                "--rounds", "3", "--clip-bound", "5", "--hidden", "8", "--local-steps",
                "1", "--client-lr", "0.02", "--eval-every", "3"], True),
    "padpfl_clipped": (["--algorithm", "padpfl", "--dataset", "mnist", "--epsilon", "20",
                        "--delta", "0.01", "--rounds", "2", "--clip-bound", "5", "--hidden",
                        "8", "--local-steps", "1", "--client-lr", "0.02",
                        "--sensitivity-mode", "clipped_gradients", "--grad-clip-norm",
                        "2", "--eval-every", "2"], True),
}

DROP = {"wall_time_s"}  # timing: differs run to run
SUMMARY_FIELDS = ("algorithm", "dataset", "rounds", "final_test_accuracy",
                  "final_test_loss", "epsilon", "epsilon_rdp", "epsilon_pld", "delta",
                  "delta_total", "truncation_probability", "noise_multiplier",
                  "sampling_rate", "privacy_unit", "neighboring_relation", "k_max",
                  "num_clients", "epsilon_conditional_rdp", "epsilon_paper",
                  "epsilon_worst_client", "client_epsilons", "noise_stddevs")


def argv_for(name: str, out: str, per_client_file: str) -> List[str]:
  args, _ = CASES[name]
  args = [a.replace("{per_client}", per_client_file) for a in args]
  return ["run", *args, "--seed", "0", "--no-progress", "--out", out]


#: Every case runs in a fresh process on this many CPU devices (the cohort is sharded
#: over them, and the device count changes float summation order): a process that has
#: already started JAX could not change it.
DEVICES = 2


def run_case(name: str, workdir: str) -> dict:
  """Runs one case in a fresh ``python -m fedjax_dp.cli`` process on `DEVICES` CPU
  devices, in ``workdir``; returns {"metrics": [...], "summary": {...}}.

  Raises:
    RuntimeError: the run failed (its output is in the message).
  """
  pc = os.path.join(workdir, "per_client_z.json")
  with open(pc, "w") as f:
    json.dump(PER_CLIENT_Z, f)
  out = os.path.join(workdir, name)
  root = os.path.dirname(os.path.dirname(HERE))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}",
             PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
  proc = subprocess.run([sys.executable, "-m", "fedjax_dp.cli", *argv_for(name, out, pc)],
                        cwd=workdir, env=env, capture_output=True, text=True)
  if proc.returncode != 0:
    raise RuntimeError(f"case {name}: fedjax-dp run exited with {proc.returncode}:\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
  with open(os.path.join(out, "metrics.jsonl")) as f:
    rows = [{k: v for k, v in json.loads(line).items() if k not in DROP} for line in f]
  with open(os.path.join(out, "summary.json")) as f:
    s = json.load(f)
  return {"metrics": rows, "summary": {k: s[k] for k in SUMMARY_FIELDS if k in s}}


def _diff(a, b, path: str, rtol: float, out: Dict[str, float]) -> None:
  """Collects {path: relative change} of every leaf where a and b differ."""
  if isinstance(a, dict) and isinstance(b, dict):
    for k in sorted(set(a) | set(b)):
      if k not in a or k not in b:
        out[f"{path}.{k} ({'added' if k not in a else 'removed'})"] = math.inf
      else:
        _diff(a[k], b[k], f"{path}.{k}", rtol, out)
  elif isinstance(a, list) and isinstance(b, list):
    if len(a) != len(b):
      out[f"{path} (length {len(a)} -> {len(b)})"] = math.inf
    for i, (x, y) in enumerate(zip(a, b)):
      _diff(x, y, f"{path}[{i}]", rtol, out)
  elif (isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool)):
    if a == b or (isinstance(a, float) and isinstance(b, float)
                  and math.isnan(a) and math.isnan(b)):
      return
    rel = abs(a - b) / max(abs(a), abs(b), 1e-300)
    out[path] = rel
  elif a != b:
    out[path] = math.inf


def compare_case(base: dict, new: dict) -> Dict[str, float]:
  """{field path: relative change} of every value that differs (inf: not numeric)."""
  changes: Dict[str, float] = {}
  _diff(base, new, "", 0.0, changes)
  return changes


def load_baseline(name: str) -> dict:
  with open(os.path.join(BASELINE, f"{name}.json")) as f:
    return json.load(f)


def versions() -> dict:
  return {p: md.version(p) for p in ("jax", "jaxlib", "optax", "flax", "dp-accounting",
                                     "numpy")} | {"devices": DEVICES}


def main(argv: Optional[List[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  g = p.add_mutually_exclusive_group(required=True)
  g.add_argument("--record", action="store_true")
  g.add_argument("--compare", action="store_true")
  p.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
  p.add_argument("--rtol", type=float, default=0.0)
  a = p.parse_args(argv)
  names = a.cases or list(CASES)
  for n in names:
    if n not in CASES:
      p.error(f"unknown case {n!r}; choose from {', '.join(CASES)}")
  worst = 0.0
  with tempfile.TemporaryDirectory() as tmp:
    for n in names:
      res = run_case(n, tmp)
      if a.record:
        os.makedirs(BASELINE, exist_ok=True)
        with open(os.path.join(BASELINE, f"{n}.json"), "w") as f:
          json.dump(res, f, indent=1, sort_keys=True)
        print(f"recorded {n}: {len(res['metrics'])} rounds")
        continue
      ch = compare_case(load_baseline(n), res)
      top = max(ch.values(), default=0.0)
      worst = max(worst, top)
      print(f"{n}: {'identical' if not ch else f'{len(ch)} values differ, max rel {top:.3g}'}")
      for k, v in sorted(ch.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {k}: {v:.3g}")
  if a.record:
    with open(os.path.join(BASELINE, "versions.json"), "w") as f:
      json.dump(versions(), f, indent=1)
    return 0
  return 0 if worst <= a.rtol else 1


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
  sys.exit(main())
