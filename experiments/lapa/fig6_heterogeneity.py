"""LAPA, Fig. 6: the four allocators under IID/non-IID device compositions, ideal
channel (Sec. V-C), on MNIST (the 5,000-image subset) and Fashion-MNIST.

The paper's compositions are 3/12, 5/10, 7/8, 9/6 IID/non-IID devices and one labelled
"0 IID + 15 Non-IID" that its text discusses as all IID; the reduced CPU scale
runs 3, 9 and 15 IID devices (say --compositions 0,3,5,7,9,15 for all six). Paper's
claims (no numbers): LAPA beats uniform DP and ARB in every composition and approaches
no DP as the IID share grows.

  python experiments/lapa/fig6_heterogeneity.py            # the reduced CPU scale
  python experiments/lapa/fig6_heterogeneity.py --quick    # CI
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lapa_common as lc  # noqa: E402

METHODS = (("no DP", "none"), ("uniform", "uniform"), ("ARB-approx", "arb"),
           ("LAPA", "lapa"))
EPSILON_TOTAL = 60.0


def settings(scale, compositions):
  rows = []
  for ds in scale.datasets:
    for k in compositions:
      for name, alloc in METHODS:
        rows.append((ds, f"{name} {k} IID", {
            "channel": "ideal", "allocator": alloc, "epsilon_total": EPSILON_TOTAL,
            "num_iid": k, "num_non_iid": 15 - k}))
  return rows


def report(res, scale, compositions):
  lines = ["| dataset | IID devices | " + " | ".join(n for n, _ in METHODS) + " |",
           "|---|---|" + "---|" * len(METHODS)]
  beats, gaps = [], []
  for ds in scale.datasets:
    for k in compositions:
      acc = {n: lc.final(res, ds, f"{n} {k} IID") for n, _ in METHODS}
      lines.append(f"| {ds} | {k} | " + " | ".join(lc.fmt(*acc[n]) for n, _ in METHODS)
                   + " |")
      m = {n: v[0] for n, v in acc.items()}
      if None not in m.values():
        beats.append(m["LAPA"] > m["uniform"] and m["LAPA"] > m["ARB-approx"])
        gaps.append((ds, k, m["no DP"] - m["LAPA"]))
  lines.append("")
  v = None if not beats else all(beats)
  lines.append(f"- LAPA beats uniform DP and ARB-approx in every composition: "
               f"**{lc.verdict(v)}** ({sum(beats)}/{len(beats)})")
  for ds in scale.datasets:
    g = [(k, gap) for d, k, gap in gaps if d == ds]
    if len(g) >= 2:
      shrinks = all(b[1] <= a[1] + 0.01 for a, b in zip(g, g[1:]))
      lines.append(f"- {ds}: the gap no DP - LAPA shrinks as the IID share grows: "
                   f"**{lc.verdict(shrinks)}** (" + ", ".join(
                       f"{k} IID: {gap * 100:.2f}" for k, gap in g) + " points)")
  return lines


def main(argv=None):
  ap = lc.parser(__doc__.splitlines()[0])
  ap.add_argument("--compositions", default=None,
                  help="comma list of IID device counts (0..15)")
  args = ap.parse_args(argv)
  scale = lc.scale_from(args)
  if args.compositions:
    comps = tuple(int(v) for v in args.compositions.split(","))
  else:
    comps = (5,) if scale.quick else (3, 9, 15)
  rows = settings(scale, comps)
  res = lc.sweep("fig6_heterogeneity", rows, scale, args.out, args.resume,
                 meta={"compositions": list(comps), "epsilon_total": EPSILON_TOTAL})
  lc.write_markdown(res, "Fig. 6: allocators under IID/non-IID compositions",
                    report(res, scale, comps), scale)
  labels = sorted({r["label"] for r in res.runs})
  lc.plot_curves(res, res.path[:-5] + ".png", "LAPA Fig. 6: compositions",
                 scale.datasets, labels)
  return res


if __name__ == "__main__":
  main()
