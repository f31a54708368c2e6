"""LAPA, Fig. 4: aggregation strategies on a practical channel (Sec. V-B).

FedAvg (Benchmark 1, eq. 2), BEDA/FedAdp (Benchmark 2), the Wasserstein softmax
(Configuration 1, eqs. 20-21; W1 on the label indices, our [D]), the same with the
label-numbering-invariant discrete ground cost (W1 = total variation; ours) and
the Wasserstein softmax with SER-threshold device selection at three thresholds
(Configuration 2, eq. 22), with channel noise on every upload and no artificial DP noise
(the paper does not say whether Fig. 4 uses DP; we leave it out to isolate aggregation).
Paper's quoted differences (MNIST / Fashion-MNIST): Wasserstein vs FedAvg +2.470 / +1.413
points, BEDA vs FedAvg +2.073 / +1.333, best SER threshold vs BEDA +2.367 / +1.137.
Verdicts: experiments/lapa/scorecard.py (paired by seed, experiments/scorecard.py rules).

  python experiments/lapa/fig4_aggregation.py --datasets mnist --seeds 0,1,2,3,4 --vmap \\
      --resume                                         # the 5-seed scorecard rows
  python experiments/lapa/fig4_aggregation.py --quick  # CI
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lapa_common as lc  # noqa: E402

THRESHOLDS = (1e-1, 1e-2, 1e-3)
#: The paper's quoted differences in points (Sec. V-B), MNIST then Fashion-MNIST.
PAPER = {"Wasserstein - FedAvg": (2.470, 1.413), "BEDA - FedAvg": (2.073, 1.333),
         "best SER - BEDA": (2.367, 1.137)}
#: Every setting, in the order run (``--labels`` picks some).
LABELS = ("FedAvg", "BEDA", "Wasserstein", "Wasserstein (discrete cost)") + tuple(
    f"Wasserstein + SER <= {t:g}" for t in THRESHOLDS)


def settings(scale, labels=None):
  base = {"allocator": "none", "channel": "practical"}
  opts = {"FedAvg": {"aggregator": "fedavg"}, "BEDA": {"aggregator": "beda"},
          "Wasserstein": {"aggregator": "wasserstein"},
          "Wasserstein (discrete cost)": {"aggregator": "wasserstein",
                                          "ground_cost": "discrete"}}
  opts.update({f"Wasserstein + SER <= {t:g}": {"aggregator": "wasserstein",
                                               "ser_threshold": t} for t in THRESHOLDS})
  quick = ("FedAvg", "Wasserstein", "Wasserstein (discrete cost)", LABELS[4])
  chosen = labels or (quick if scale.quick else LABELS)
  return [(ds, lab, {**base, **opts[lab]}) for ds in scale.datasets for lab in chosen]


def report(res, scale):
  labels = [lab for lab in LABELS if any(r["label"] == lab for r in res.runs)]
  lines = ["| setting | " + " | ".join(scale.datasets) + " |",
           "|---|" + "---|" * len(scale.datasets)]
  for lab in labels:
    cells = [lc.fmt(*lc.final(res, ds, lab)) for ds in scale.datasets]
    lines.append(f"| {lab} | " + " | ".join(cells) + " |")
  lines += ["", "Scheduled devices per setting (of 15): " + "; ".join(
      f"{lab}: " + ", ".join(f"{ds} {_n_selected(res, ds, lab)}" for ds in scale.datasets)
      for lab in labels), ""]
  sc = lc.lapa_scorecard()
  rows = sc.fig4_rows(res.runs, scale.datasets, source=os.path.basename(res.path))
  lines += sc.render_rows(rows)
  return lines


def _n_selected(res, ds, lab):
  runs = [r for r in res.runs if r["dataset"] == ds and r["label"] == lab]
  if not runs or runs[0]["summary"].get("selected_devices") is None:
    return "n/a"
  return str(sum(bool(v) for v in runs[0]["summary"]["selected_devices"]))


def main(argv=None):
  ap = lc.parser(__doc__.splitlines()[0])
  ap.add_argument("--labels", default=None,
                  help="comma list of settings to run (default all): " + ", ".join(LABELS))
  args = ap.parse_args(argv)
  scale = lc.scale_from(args)
  labels = None
  if args.labels:
    labels = [s.strip() for s in args.labels.split(",") if s.strip()]
    bad = [s for s in labels if s not in LABELS]
    if bad:
      raise SystemExit(f"--labels: unknown {bad} (allowed: {', '.join(LABELS)})")
  res = lc.sweep("fig4_aggregation", settings(scale, labels), scale, args.out,
                 args.resume, meta={"paper_differences_points": PAPER})
  lc.write_markdown(res, "Fig. 4: aggregation strategies (practical channel, no DP noise)",
                    report(res, scale), scale)
  labs = [lab for lab in LABELS if any(r["label"] == lab for r in res.runs)]
  lc.plot_curves(res, res.path[:-5] + ".png", "LAPA Fig. 4: aggregation",
                 scale.datasets, labs)
  return res


if __name__ == "__main__":
  main()
