"""The paper-004 (amplitude-varying noise) scorecard from the stored results: scorecard.py
trains nothing, writes the standard's table, reproduces the committed
results/scorecard.{md,json}, and the README opens with that table."""

import json
import os

from experiment_scripts import ROOT, SCORECARD_HEADER as HEADER, load_script
from experiment_scripts import scorecard_table as _table

card = load_script("amplitude_varying", "scorecard")
sc = card.sc
FOLDER = os.path.join(ROOT, "experiments", "amplitude_varying")
RESULTS = os.path.join(FOLDER, "results")


def test_scorecard_from_the_stored_runs(tmp_path):
  assert card.main(["--results", RESULTS, "--out", str(tmp_path)]) == 0
  md = (tmp_path / "scorecard.md").read_text()
  assert md.splitlines()[0] == HEADER
  rows = json.loads((tmp_path / "scorecard.json").read_text())["rows"]
  assert len(rows) >= 30
  for r in rows:
    assert r["verdict"] in sc.VERDICTS and r["detail"] and r["setup"]
    assert any(r["cause"].startswith(c) for c in sc.CAUSES)
    if min(s["n"] for s in r["ours"].values()) < sc.MIN_SEEDS:
      assert r["verdict"] == "inconclusive"
  # the headline figures re-run at 5 seeds: Fig. 2 and Fig. 4 at M = 30
  fig2 = [r for r in rows if r["claim"].startswith("Fig. 2")]
  assert fig2 and all(s["n"] >= sc.MIN_SEEDS for r in fig2 for s in r["ours"].values())
  assert any(r["claim"].startswith("Fig. 4: the loss falls") for r in rows)
  assert md == open(os.path.join(RESULTS, "scorecard.md")).read()
  assert rows == json.load(open(os.path.join(RESULTS, "scorecard.json")))["rows"]


def test_untestable_claims_are_inconclusive_with_their_cause():
  v = card.untestable("MNIST levels")
  assert v.verdict == "inconclusive" and "not testable" in v.detail


def test_readme_opens_with_the_scorecard():
  readme = open(os.path.join(FOLDER, "README.md")).read().splitlines()
  stored = open(os.path.join(RESULTS, "scorecard.md")).read().splitlines()
  assert _table(readme) == _table(stored)
  first_table = next(i for i, l in enumerate(readme) if l.startswith("|"))
  assert readme[first_table] == HEADER
