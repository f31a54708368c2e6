"""Adaptive clipping against a sweep of fixed clip norms, at equal epsilon.

Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive
Clipping", NeurIPS 2021 (arXiv:1905.03871): DP-FedAvg whose clip norm tracks the
gamma-quantile of the client update norms, estimated privately (noisy count of
unclipped updates, geometric update), accounted as one Gaussian release with the
combined noise multiplier (Sec. 3.1). The paper's claim (abstract): adaptive clipping
to the median update norm "works well across a range of realistic federated learning
tasks, sometimes outperforming even the best fixed clip chosen in hindsight, and
without the need to tune any clipping hyperparameter".

In each setting (HAR, 30 natural clients, q = 0.5: about 15 clients a round;
Fashion-MNIST, 100 Dirichlet(0.5) clients, q = 0.5: 50 a round; Fashion-MNIST, 1,000
Dirichlet(0.5) clients, q = 0.15: 150 a round, the paper's regime of a hundred and more)
this script runs user-level DP-FedAvg with every fixed clip norm of the setting's grid
(one vmapped program: the clip norm is a hyper-parameter array,
`fedjax_dp.runs.sweep.run_sweep`) and with ``--clip-norm adaptive`` at the paper's
defaults (gamma 0.5, eta_C 0.2, C_0 0.1, geometric; the count's noise from
`fedjax_dp.algorithms.dp_fedavg.default_count_stddev`), all with the same rounds,
sampling rate and seeds, and z calibrated to the same ``--target-epsilon`` (the
events do not depend on the clip norm, so every run spends exactly that epsilon).
The claim "adaptive within 1 accuracy point of the best fixed clip" (the best chosen
on the mean over the seeds, in hindsight) is judged by `scorecard.within` with tol 0.01
on the seed-paired differences (`verdict`); ``scorecard.py`` beside this script writes
the paper's scorecard from the stored per-seed values.

Usage:
  python experiments/adaptive_clipping/compare.py           # full: 3 settings, seeds 0-4
  python experiments/adaptive_clipping/compare.py --datasets har   # one setting: its entry
                                            # in the stored JSON is replaced, others kept
  python experiments/adaptive_clipping/compare.py --quick   # CI: HAR, small model, 1 seed
  python experiments/adaptive_clipping/compare.py --out DIR/compare.json

Writes ``compare.json`` (every run's final accuracy and clip norm, the settings, the
verdicts) and ``compare.md`` (the table) beside it; default
``experiments/adaptive_clipping/results/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))

import scorecard  # noqa: E402  (experiments/scorecard.py)

from fedjax_dp.algorithms.dp_fedavg.plugin import DpFedAvgOptions  # noqa: E402
from fedjax_dp.runs import RunConfig, json_safe  # noqa: E402
from fedjax_dp.runs.sweep import run_sweep  # noqa: E402

#: The fixed clip norms swept (a factor ~3 apart, covering the update norms seen).
CLIP_NORMS = (0.1, 0.3, 1.0, 3.0)
#: One accuracy point: the claim's tolerance (`scorecard.within`).
TOLERANCE = 0.01
DELTA = 1e-3
PAPER = {
    "citation": ("Galen Andrew, Om Thakkar, H. Brendan McMahan, Swaroop Ramaswamy, "
                 "\"Differentially Private Learning with Adaptive Clipping\", NeurIPS "
                 "2021, arXiv:1905.03871"),
    "claim": ("adaptive clipping to the median update norm works well across a range of "
              "realistic federated learning tasks, sometimes outperforming even the best "
              "fixed clip chosen in hindsight, and without the need to tune any clipping "
              "hyperparameter (abstract)"),
    "defaults": "gamma = 0.5, eta_C = 0.2, C_0 = 0.1, geometric update, sigma_b = m / 20",
}

#: Per setting: the run's options (RunConfig fields), DP-FedAvg's, and optionally its
#: own delta (< 1 / clients) and fixed clip-norm grid.
SETTINGS: Dict[str, Dict[str, Any]] = {
    "fashion_mnist": dict(run=dict(dataset="fashion_mnist", model="mlp", hidden="32"),
                          options=dict(sampling_rate=0.5, batch_size=32)),
    "har": dict(run=dict(dataset="har"), options=dict(sampling_rate=0.5)),
    # 1,000 clients, 150 a round; 1 local epoch of batch 32 on 11..184 examples is 1..6
    # steps, so the update norms are smaller: the grid moves down by one step.
    "fashion_mnist_1000": dict(
        run=dict(dataset="fashion_mnist", num_clients=1000, model="mlp", hidden="32"),
        options=dict(sampling_rate=0.15, batch_size=32), delta=1e-4,
        clip_norms=(0.03, 0.1, 0.3, 1.0, 3.0)),
}
FULL = dict(datasets=("har", "fashion_mnist", "fashion_mnist_1000"), rounds=50,
            seeds=(0, 1, 2, 3, 4), epsilon=5.0, clip_norms=CLIP_NORMS)
#: CI: HAR only, a small MLP, 3 rounds, one seed, two fixed clip norms.
QUICK = dict(datasets=("har",), rounds=3, seeds=(0,), epsilon=5.0, clip_norms=(0.3, 1.0),
             overrides={"har": dict(model="mlp", hidden="16")})


def verdict(runs: Sequence[Dict[str, Any]], tolerance: float = TOLERANCE
            ) -> Dict[str, Any]:
  """The claim "adaptive within 1 accuracy point of the best fixed clip".

  The best fixed clip is the grid's label with the highest mean final accuracy over
  the seeds (chosen in hindsight); the verdict is `scorecard.within` (tol
  ``tolerance``) on adaptive minus best, paired by seed.

  Args:
    runs: per-seed run dicts with ``label`` ("adaptive" or a fixed clip's),
      ``seed`` and ``final_test_accuracy``.
    tolerance: the band, in accuracy (fraction) units.

  Returns:
    ``{"best_fixed", "gap" (best mean - adaptive mean), "verdict", "detail"}``.
  """
  by_label: Dict[str, List[Dict[str, Any]]] = {}
  for r in runs:
    by_label.setdefault(r["label"], []).append(r)
  acc = lambda rs: [r["final_test_accuracy"] for r in rs]  # noqa: E731
  fixed = {k: v for k, v in by_label.items() if k != "adaptive"}
  best = max(fixed, key=lambda k: statistics.mean(acc(fixed[k])))
  ad = by_label["adaptive"]
  v = scorecard.within(acc(ad), acc(fixed[best]), tolerance,
                       seeds_a=[r["seed"] for r in ad],
                       seeds_b=[r["seed"] for r in fixed[best]])
  gap = statistics.mean(acc(fixed[best])) - statistics.mean(acc(ad))
  return {"best_fixed": best, "gap": gap, "verdict": v.verdict, "detail": v.detail}


#: The paper's clip-norm learning rate (Andrew et al. 2021, Sec. 4), pinned here: the
#: command line's default is lower (`fedjax_dp.algorithms.dp_fedavg.plugin.ADAPTIVE_DEFAULTS`).
PAPER_ADAPTIVE = dict(clip_learning_rate=0.2)


def _base(name: str, cfg: Dict[str, Any], clip_norm) -> RunConfig:
  s = SETTINGS[name]
  run_kw = {**s["run"], **cfg.get("overrides", {}).get(name, {})}
  return RunConfig(algorithm="dp_fedavg", rounds=cfg["rounds"], eval_every=cfg["rounds"],
                   target_epsilon=cfg["epsilon"], delta=s.get("delta", DELTA),
                   seed=cfg["seeds"][0],
                   out=None, logger="none", **run_kw,
                   options=DpFedAvgOptions(clip_norm=clip_norm, **s["options"],
                                           **(PAPER_ADAPTIVE if clip_norm == "adaptive"
                                              else {})))


def _member(m, label: str) -> Dict[str, Any]:
  s, rows = m.summary, m.records
  out = {"label": label, "seed": m.axes["seed"],
         "final_test_accuracy": s["final_test_accuracy"], "epsilon": s["epsilon"],
         "epsilon_rdp": s["epsilon_rdp"], "noise_multiplier": s["noise_multiplier"],
         "mean_update_norm_last": rows[-1].get("mean_update_norm"),
         "clip_fraction_last": rows[-1].get("clip_fraction")}
  if s.get("final_clip_norm") is not None:
    out.update(final_clip_norm=s["final_clip_norm"],
               clip_norms=[r["adaptive_clip_norm"] for r in rows],
               update_noise_multiplier=s["update_noise_multiplier"],
               count_noise_multiplier=s["count_noise_multiplier"])
  return out


def run_dataset(name: str, cfg: Dict[str, Any]) -> Dict[str, Any]:
  """The fixed-clip sweep and the adaptive runs of one dataset, and their verdict."""
  t0 = time.perf_counter()
  clips = list(cfg["clip_norms"] if cfg.get("quick") else
               SETTINGS[name].get("clip_norms", cfg["clip_norms"]))
  fixed = run_sweep(_base(name, cfg, clips[0]), axes={"clip_norm": clips},
                    seeds=list(cfg["seeds"]), progress=False)
  t1 = time.perf_counter()
  adaptive = run_sweep(_base(name, cfg, "adaptive"), seeds=list(cfg["seeds"]),
                       progress=False)
  t2 = time.perf_counter()
  runs = ([_member(m, f"C = {m.axes['clip_norm']:g}") for m in fixed.members]
          + [_member(m, "adaptive") for m in adaptive.members])
  eps = [r["epsilon"] for r in runs]
  data = fixed.members[0].summary
  return summarised({"dataset": name, "dataset_description": data["dataset_description"],
          "model": data["model"], "num_clients": data["num_clients"],
          "sampling_rate": data["sampling_rate"], "rounds": cfg["rounds"],
          "seeds": list(cfg["seeds"]), "target_epsilon": cfg["epsilon"],
          "delta": SETTINGS[name].get("delta", DELTA), "clip_norms": clips,
          "local_epochs": 1, "batch_size": SETTINGS[name]["options"].get("batch_size", 16),
          "epsilon_range": [min(eps), max(eps)], "runs": runs,
          "wall_time_s": {"fixed_sweep": t1 - t0, "adaptive": t2 - t1}})


def summarised(res: Dict[str, Any]) -> Dict[str, Any]:
  """``res`` with its ``rows`` (mean and 95% CI per label), ``best_fixed`` and
  ``verdict`` (re)computed from its per-seed ``runs``."""
  runs, rows = res["runs"], []
  for label in dict.fromkeys(r["label"] for r in runs):
    rs = [r for r in runs if r["label"] == label]
    sm = scorecard.summarize([r["final_test_accuracy"] for r in rs])
    row = {"label": label, "mean": sm.mean, "ci": [sm.lo, sm.hi], "seeds": len(rs),
           "epsilon": rs[0]["epsilon"], "noise_multiplier": rs[0]["noise_multiplier"]}
    if label == "adaptive":
      row["final_clip_norm_mean"] = statistics.mean(r["final_clip_norm"] for r in rs)
    rows.append(row)
  v = verdict(runs)
  return dict(res, rows=rows, best_fixed=v["best_fixed"], verdict=v)


def _fmt(row: Dict[str, Any]) -> str:
  """``mean [lo, hi]`` in accuracy points (no interval for one seed)."""
  lo, hi = row.get("ci") or (None, None)
  if lo is None or lo != lo:
    return f"{100 * row['mean']:.1f}"
  return f"{100 * row['mean']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def markdown(results: List[Dict[str, Any]], quick: bool) -> str:
  lines = [f"# Adaptive vs fixed clipping at equal epsilon{' (--quick)' if quick else ''}",
           "", f"Paper: {PAPER['citation']}. Claim: {PAPER['claim']}.", ""]
  for res in results:
    v = res["verdict"]
    ad = next(r for r in res["rows"] if r["label"] == "adaptive")
    best = next(r for r in res["rows"] if r["label"] == res["best_fixed"])
    lines += [f"## {res['dataset']} ({res['model']}, {res['num_clients']} clients, q = "
              f"{res['sampling_rate']:g}, {res['rounds']} rounds, seeds {res['seeds']})",
              "", f"epsilon = {res['target_epsilon']:g} at delta = {res['delta']:g} for "
              f"every run (RDP, user level, add/remove; measured "
              f"{res['epsilon_range'][0]:.4f}..{res['epsilon_range'][1]:.4f}), noise "
              f"multiplier z = {res['rows'][0]['noise_multiplier']:.4f}.", "",
              "| clip norm | final test accuracy % (mean [95% CI]) |", "|---|---|"]
    for r in res["rows"]:
      extra = (f" (final C = {r['final_clip_norm_mean']:.3g})" if r["label"] == "adaptive"
               else "")
      lines.append(f"| {r['label']}{extra} | {_fmt(r)} |")
    lines += ["", f"Claim \"adaptive within 1 accuracy point of the best fixed clip\" "
              f"(best on the mean: {res['best_fixed']} {_fmt(best)}; adaptive {_fmt(ad)}; "
              f"gap {100 * v['gap']:+.1f} points): **{v['verdict']}** ({v['detail']}).",
              ""]
  return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="CI: HAR, small model, 1 seed")
  p.add_argument("--datasets", default=None,
                 help="comma list of har, fashion_mnist, fashion_mnist_1000 (their "
                      "entries in --out are replaced, the others kept)")
  p.add_argument("--rounds", type=int, default=None, help="rounds per run")
  p.add_argument("--add-clips", default=None,
                 help="comma list of fixed clip norms: only these run (one vmapped "
                      "sweep over the seeds) and join the stored runs of --datasets")
  p.add_argument("--out", default=None,
                 help="the JSON file (default: results/compare.json, with --quick "
                      "results/compare_quick.json)")
  args = p.parse_args(argv)
  if args.out is None:
    args.out = os.path.join(HERE, "results",
                            "compare_quick.json" if args.quick else "compare.json")
  absl_log = logging.getLogger("absl")
  level = absl_log.level
  absl_log.setLevel(logging.ERROR)  # dp_accounting's RDP order notes
  try:
    return _run_and_write(args)
  finally:
    absl_log.setLevel(level)


def _run_and_write(args) -> dict:
  """Runs the comparison of `main` and writes its JSON and markdown."""
  cfg = dict(QUICK if args.quick else FULL, quick=args.quick)
  if args.datasets:
    cfg["datasets"] = tuple(args.datasets.split(","))
  if args.rounds:
    cfg["rounds"] = args.rounds
  kept = _kept_results(args.out) if args.datasets else []
  if args.add_clips:
    return _add_clips(args, cfg, kept)
  results = []
  for name in cfg["datasets"]:
    results.append(run_dataset(name, cfg))
    print(markdown(results[-1:], args.quick), flush=True)
  new = {r["dataset"] for r in results}
  results += [summarised(r) for r in kept if r["dataset"] not in new]
  order = {n: i for i, n in enumerate(FULL["datasets"])}
  results.sort(key=lambda r: order.get(r["dataset"], len(order)))
  out = {"meta": {"paper": PAPER, "quick": args.quick, "clip_norms": list(cfg["clip_norms"]),
                  "tolerance": TOLERANCE,
                  "wall_time_s": sum(sum(r["wall_time_s"].values()) for r in results),
                  "adaptive_options": "the paper's defaults (gamma 0.5, eta_C 0.2, C_0 0.1, "
                                      "geometric); count noise default_count_stddev"},
         "results": results}
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(json_safe(out), f, indent=1)
  with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
    f.write(markdown(results, args.quick))
  return out


def _add_clips(args, cfg: Dict[str, Any], kept: List[Dict[str, Any]]) -> dict:
  """``--add-clips``: the stored setting of ``--datasets`` gains the runs of more fixed
  clip norms (same rounds, seeds, epsilon), then is re-summarised and rewritten."""
  (name,) = cfg["datasets"]
  res = next(r for r in kept if r["dataset"] == name)
  clips = [float(c) for c in args.add_clips.split(",")]
  t0 = time.perf_counter()
  sweep = run_sweep(_base(name, dict(cfg, seeds=res["seeds"], rounds=res["rounds"]),
                          clips[0]), axes={"clip_norm": clips}, seeds=list(res["seeds"]),
                    progress=False)
  res["runs"] = ([r for r in res["runs"] if r["label"] != "adaptive"]
                 + [_member(m, f"C = {m.axes['clip_norm']:g}") for m in sweep.members]
                 + [r for r in res["runs"] if r["label"] == "adaptive"])
  res["clip_norms"] = sorted(set(res["clip_norms"]) | set(clips))
  res["wall_time_s"][f"added_clips {args.add_clips}"] = time.perf_counter() - t0
  out = {"meta": dict(json.load(open(args.out))["meta"]),
         "results": [summarised(r) for r in kept]}
  out["meta"]["wall_time_s"] = sum(sum(r["wall_time_s"].values()) for r in kept)
  with open(args.out, "w") as f:
    json.dump(json_safe(out), f, indent=1)
  with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
    f.write(markdown(out["results"], False))
  print(markdown([summarised(res)], False), flush=True)
  return out


def _kept_results(path: str) -> List[Dict[str, Any]]:
  """The per-setting results already stored in ``path`` (none if it is absent)."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return json.load(f)["results"]


if __name__ == "__main__":
  main()
