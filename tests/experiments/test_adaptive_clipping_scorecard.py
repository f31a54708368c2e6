"""experiments/adaptive_clipping/scorecard.py on the stored results (no training): one
row per stored setting with the standard's columns, verdicts computed by the rules."""

import json

from experiment_scripts import ROOT, load_script

HEADER = "| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict | cause |"


def test_scorecard_from_the_stored_results(tmp_path):
  mod = load_script("adaptive_clipping", "scorecard")
  stored = json.load(open(f"{ROOT}/experiments/adaptive_clipping/results/compare.json"))
  rows = mod.main(["--out", str(tmp_path / "scorecard")])
  assert len(rows) == len(stored["results"]) >= 2
  md = (tmp_path / "scorecard.md").read_text()
  assert md.splitlines()[0] == HEADER
  assert "best fixed, on the mean" in md                        # the grid's table
  saved = json.loads((tmp_path / "scorecard.json").read_text())
  for r, res in zip(saved["rows"], stored["results"]):
    assert r["verdict"] in ("holds", "fails", "inconclusive")
    assert ("n = " in r["detail"] and "<" in r["detail"]) == (len(res["seeds"]) < 5)
    assert (r["cause"] == "none") == (r["verdict"] == "holds")
    ours = r["ours"]["adaptive - best"]
    assert ours["kind"] == "paired" and ours["n"] == len(res["seeds"])
