"""The PADPFL (paper 000) scorecard from the stored results: report.py trains nothing,
writes the standard's table, reproduces the committed results/scorecard.{md,json}, and
the README opens with that table."""

import json
import os

from experiment_scripts import ROOT, SCORECARD_HEADER as HEADER, load_script
from experiment_scripts import scorecard_table as _table

report = load_script("padpfl", "report")
sc = report.sc
FOLDER = os.path.join(ROOT, "experiments", "padpfl")
RESULTS = os.path.join(FOLDER, "results")


def test_scorecard_from_the_stored_runs(tmp_path):
  assert report.main(["--results", RESULTS, "--out", str(tmp_path)]) == 0
  md = (tmp_path / "scorecard.md").read_text()
  assert md.splitlines()[0] == HEADER
  data = json.loads((tmp_path / "scorecard.json").read_text())
  rows = data["rows"]
  assert len(rows) == len(report.claims())
  for r in rows:
    assert r["verdict"] in sc.VERDICTS and r["detail"] and r["setup"]
    assert any(r["cause"].startswith(c) for c in sc.CAUSES)
    n = min(s["n"] for s in r["ours"].values())
    if n < sc.MIN_SEEDS:
      assert r["verdict"] == "inconclusive" and r["cause"].startswith("scale: compute")
  # scenario 1, the headline: every row at 5 seeds, paired
  s1 = [r for r in rows if "scenario 1:" in r["claim"]]
  assert s1 and all(s["n"] >= sc.MIN_SEEDS for r in s1 for s in r["ours"].values())
  assert all(r["ours"]["B − A"]["kind"] == "paired" for r in s1)
  # the committed files are what the stored runs give
  assert md == open(os.path.join(RESULTS, "scorecard.md")).read()
  assert rows == json.load(open(os.path.join(RESULTS, "scorecard.json")))["rows"]


def test_readme_opens_with_the_scorecard():
  readme = open(os.path.join(FOLDER, "README.md")).read().splitlines()
  card = open(os.path.join(RESULTS, "scorecard.md")).read().splitlines()
  assert _table(readme) == _table(card)
  first_table = next(i for i, l in enumerate(readme) if l.startswith("|"))
  assert readme[first_table] == HEADER
