"""LAPA, Fig. 7: dynamic noise control with optimised transmit powers on a
practical channel (Sec. V-D).

Per dataset and seed: a pilot LAPA run without the switch records the artificial-noise
schedule sigma_i[t]; DDPG minimises Theorem 1's bound Phi(p) (eq. 24) over the powers
with that schedule (our surrogate environment, Algorithm 3 of
`fedjax_dp.algorithms.lapa.ddpg`); then three runs:
Configuration 5 (LAPA + DDPG powers + switch), LAPA at the average power (every device at
the mean of DDPG's powers, switch on) and ARB-approx at the average power
(artificial noise throughout). Paper's quoted differences (MNIST / Fashion-MNIST):
Configuration 5 vs LAPA at average power +1.465 / +0.910 points; vs ARB at average power
+5.872 / +2.705.

Two channel settings (``--setting``): ``paper`` (P_max = 20 dBm, eps_T = 60, our
[D]): the channel noise is 10-100x below the artificial noise, so eq. 23's switch never
fires and Configuration 5 is LAPA at average power; ``fires`` (P_max = 0 dBm, eps_T =
800): the channel noise meets the artificial noise within the run, so the switch fires
and DDPG's powers matter. Each run stores its switch round; the report and the scorecard
give the rounds run without artificial noise (T - T_th + 1).

  python experiments/lapa/fig7_power.py --setting fires --datasets mnist \
      --seeds 0,1,2,3,4 --resume --out experiments/lapa/results/fig7_power_fires.json
  python experiments/lapa/fig7_power.py --quick    # CI
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lapa_common as lc  # noqa: E402

PAPER = {"Config 5 - LAPA avg": (1.465, 0.910), "Config 5 - ARB avg": (5.872, 2.705)}
LABELS = ("Config 5: LAPA + DDPG power + switch", "LAPA, average power",
          "ARB-approx, average power")
#: The channel settings: P_max (dBm) and eps_T.
SETTINGS = {"paper": {"p_max_dbm": 20.0, "epsilon_total": 60.0},
            "fires": {"p_max_dbm": 0.0, "epsilon_total": 800.0}}


def run_all(scale, res, setting="paper"):
  base = {"channel": "practical", **SETTINGS[setting]}
  if scale.quick:
    base.update(ddpg_episodes=4, ddpg_steps=10)
  for ds in scale.datasets:
    for seed in scale.seeds:
      if all(res.has(dataset=ds, label=lab, seed=seed) for lab in LABELS):
        continue
      with tempfile.TemporaryDirectory() as tmp:
        pilot = os.path.join(tmp, "pilot")
        lc.run_lapa(ds, scale.rounds, seed, scale.eval_every, out=pilot, allocator="lapa",
                    switch=False, **base)
        c5 = lc.run_lapa(ds, scale.rounds, seed, scale.eval_every, allocator="lapa",
                         powers="ddpg:" + os.path.join(pilot, "metrics.jsonl"), **base)
      avg = c5["summary"]["ddpg"]["average_w"]
      runs = {LABELS[0]: c5,
              LABELS[1]: lc.run_lapa(ds, scale.rounds, seed, scale.eval_every,
                                     allocator="lapa", powers=repr(avg), **base),
              LABELS[2]: lc.run_lapa(ds, scale.rounds, seed, scale.eval_every,
                                     allocator="arb", switch=False, powers=repr(avg),
                                     **base)}
      for lab, r in runs.items():
        res.add({"dataset": ds, "label": lab, "seed": seed, "options": base, **r})
        print(f"fig7: {ds} {lab} seed {seed}: accuracy {r['final_accuracy']:.4f}",
              flush=True)


def report(res, scale):
  lines = ["| setting | " + " | ".join(scale.datasets) + " |",
           "|---|" + "---|" * len(scale.datasets)]
  for lab in LABELS:
    lines.append(f"| {lab} | " + " | ".join(lc.fmt(*lc.final(res, ds, lab))
                                             for ds in scale.datasets) + " |")
  lines += ["", "| difference (points) | paper MNIST | ours MNIST | paper FMNIST | ours "
            "FMNIST |", "|---|---|---|---|---|"]
  acc = {ds: {lab: lc.final(res, ds, lab)[0] for lab in LABELS} for ds in scale.datasets}
  d = lambda ds, a, b: (None if ds not in acc or None in (acc[ds][a], acc[ds][b])
                        else (acc[ds][a] - acc[ds][b]) * 100)
  for key, other in (("Config 5 - LAPA avg", LABELS[1]), ("Config 5 - ARB avg", LABELS[2])):
    pm, pf = PAPER[key]
    cells = [d(ds, LABELS[0], other) for ds in ("mnist", "fashion_mnist")]
    f = lambda v: "n/a" if v is None else f"{v:+.3f}"
    lines.append(f"| {key} | {pm:+.3f} | {f(cells[0])} | {pf:+.3f} | {f(cells[1])} |")
  lines.append("")
  for ds in scale.datasets:
    a = acc[ds]
    ok = None if None in a.values() else a[LABELS[0]] > a[LABELS[1]]
    lines.append(f"- {ds}: DDPG power beats average power (Config 5 > LAPA avg): "
                 f"**{lc.verdict(ok)}**")
    ok = None if None in a.values() else a[LABELS[1]] > a[LABELS[2]]
    lines.append(f"- {ds}: LAPA > ARB-approx at average power: **{lc.verdict(ok)}**")
    dd = [r["summary"]["ddpg"] for r in res.runs if r["dataset"] == ds
          and r["label"] == LABELS[0] and r["summary"].get("ddpg")]
    if dd:
      x = dd[0]
      lines.append(f"- {ds} (seed {[r['seed'] for r in res.runs if r['dataset'] == ds][0]})"
                   f": bound Phi at DDPG's powers {x['phi']:.4g} (T_th {x['switch_round']}), "
                   f"at their average {x['phi_average']:.4g} (T_th "
                   f"{x['switch_round_average']}), best common power {x['phi_grid']:.4g}, "
                   f"P_max {x['phi_max']:.4g}; DDPG {x['seconds']:.1f} s")
    for lab in LABELS[:2]:
      sw = [r["summary"].get("switch_round") for r in res.runs if r["dataset"] == ds
            and r["label"] == lab]
      lines.append(f"- {ds}: {lab}: switch-off round T_th per seed {sw}; rounds without "
                   f"artificial noise {[switched_rounds(v, scale.rounds) for v in sw]}")
  sc = lc.lapa_scorecard()
  return lines + [""] + sc.render_rows(rows(res.runs, os.path.basename(res.path)))


def switched_rounds(switch_round, rounds: int) -> int:
  """Rounds run without artificial noise: T - T_th + 1 (0 when it never fired)."""
  return 0 if not switch_round else max(int(rounds) - int(switch_round) + 1, 0)


def rows(runs, source):
  """Scorecard rows: Config 5 beats LAPA and ARB-approx at average power (paired by
  seed), with the rounds switched shown beside."""
  sc = lc.lapa_scorecard()
  out = []
  for ds in sorted({r["dataset"] for r in runs}, reverse=True):
    pm, pf = PAPER["Config 5 - LAPA avg"]
    qm, qf = PAPER["Config 5 - ARB avg"]
    opts = next(r["options"] for r in runs if r["dataset"] == ds)
    rounds = max(len(r.get("records") or []) for r in runs if r["dataset"] == ds) or 60
    extra = {}
    for lab in LABELS[:2]:
      sw = [switched_rounds(r["summary"].get("switch_round"), rounds) for r in runs
            if r["dataset"] == ds and r["label"] == lab]
      if sw:
        extra[f"{lab}: rounds without artificial noise"] = sc.SC.summarize(sw)
    setup = (f"{ds}, practical channel, P_max = {opts.get('p_max_dbm', 20.0):g} dBm, "
             f"eps_T = {opts.get('epsilon_total', 60.0):g}, seeds paired; rule a > b "
             f"(margin 0); {source}")
    cause = ("our reconstruction: DDPG on the surrogate bound ([D]) and the switch of "
             "eq. 23; " + (sc.MNIST if ds == "mnist" else sc.SCALE))
    for other, (p1, p2) in ((LABELS[1], (pm, pf)), (LABELS[2], (qm, qf))):
      if sc.have(runs, ds, LABELS[0], other):
        out.append(sc.compare(runs, ds, LABELS[0], other,
                              f"Fig. 7 ({ds}): Config 5 beats {other}",
                              f"+{p1 if ds == 'mnist' else p2:.3f} points", cause, setup,
                              extra=extra))
  return out


def main(argv=None):
  ap = lc.parser(__doc__.splitlines()[0])
  ap.add_argument("--setting", choices=tuple(SETTINGS), default="paper",
                  help="channel setting: paper (20 dBm, eps_T 60: the switch never "
                  "fires) or fires (0 dBm, eps_T 800)")
  args = ap.parse_args(argv)
  scale = lc.scale_from(args)
  name = "fig7_power" + ("" if args.setting == "paper" else "_" + args.setting)
  path = args.out or os.path.join(lc.RESULTS, name + ("_quick" if scale.quick
                                                      else "") + ".json")
  res = lc.Results(path, {"script": "fig7_power", "rounds": scale.rounds,
                          "seeds": list(scale.seeds), "quick": scale.quick,
                          "paper_differences_points": PAPER,
                          "setting": {args.setting: SETTINGS[args.setting]},
                          "datasets": {d: lc.dataset_note(d) for d in scale.datasets}},
                   resume=args.resume)
  run_all(scale, res, args.setting)
  lc.write_markdown(res, "Fig. 7: dynamic noise control and DDPG powers (practical "
                    "channel)", report(res, scale), scale)
  lc.plot_curves(res, res.path[:-5] + ".png", "LAPA Fig. 7: power control",
                 scale.datasets, LABELS)
  return res


if __name__ == "__main__":
  main()
