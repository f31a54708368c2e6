"""experiments/dp_ftrl/scorecard.py on the stored results (no training): four claims at
each stored epsilon, the standard's columns, verdicts computed by the rules and paired by
seed."""

import json

from experiment_scripts import ROOT, load_script

HEADER = "| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict | cause |"


def test_scorecard_from_the_stored_results(tmp_path):
  mod = load_script("dp_ftrl", "scorecard")
  stored = json.load(open(f"{ROOT}/experiments/dp_ftrl/results/compare.json"))
  rows = mod.main(["--out", str(tmp_path / "scorecard")])
  eps = stored["meta"]["settings"]["epsilons"]
  assert len(rows) == 4 * len(eps)
  md = (tmp_path / "scorecard.md").read_text()
  assert md.splitlines()[0] == HEADER
  saved = json.loads((tmp_path / "scorecard.json").read_text())
  for r in saved["rows"]:
    assert r["verdict"] in ("holds", "fails", "inconclusive")
    assert (r["cause"] == "none") == (r["verdict"] == "holds")
    (diff, *_) = r["ours"].values()
    assert diff["kind"] == "paired"
    assert (diff["n"] < 5) == ("< 5 seeds" in r["detail"])


def test_rows_follow_the_rules():
  mod = load_script("dp_ftrl", "scorecard")
  runs = []
  for seed in range(5):
    for kind, acc in (("tree", 0.70), ("banded", 0.76), ("independent", 0.66),
                      ("dp_fedavg", 0.78)):
      runs.append(dict(kind=kind, epsilon=2.0, seed=seed,
                       final_accuracy=acc + 0.002 * seed * (kind == "banded")))
  data = dict(runs=runs, meta=dict(settings=dict(num_clients=1000, rounds=100,
                                                  cycle_length=20, epsilons=[2.0])))
  v = [r.verdict.verdict for r in mod.rows(data)]
  # banded > independent, tree > independent, banded > tree: hold; tree is 0.08
  # below amplified DP-FedAvg: outside the 0.01 band.
  assert v == ["holds", "holds", "holds", "fails"]
