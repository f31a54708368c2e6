"""Paper 002's (DP-MOCHA) scorecard from the stored results (no training): the script
writes the standard's table, every verdict is computed from the stored per-seed values
by the standard's rules, the README opens with exactly that table, and the sigma sweep's
epsilons are Theorem 5 inverted."""

from __future__ import annotations

import json
import math
import os

import pytest

from experiment_scripts import ROOT, load_json, load_script

RESULTS = os.path.join(ROOT, "experiments", "dp_mocha", "results")
HEAD = "| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict | cause |"
VERDICTS = ("holds", "fails", "inconclusive")


@pytest.fixture(scope="module")
def card(tmp_path_factory):
  """The scorecard written from the stored results into a temporary folder."""
  out = tmp_path_factory.mktemp("dp_mocha_scorecard")
  assert load_script("dp_mocha", "dp_mocha_scorecard").main(["--out", str(out)]) == 0
  with open(out / "scorecard.md") as f:
    md = f.read()
  return load_json(out / "scorecard.json"), md


def test_scorecard_has_the_standard_columns_and_one_row_per_claim(card):
  data, md = card
  assert md.splitlines()[0] == HEAD
  assert data["standard"]["min_seeds"] == 5
  claims = [r["claim"] for r in data["rows"]]
  for needle in ("Fig. 2", "Fig. 3", "Fig. 4: the private error at P = 0.2 is 0.097",
                 "Fig. 5: the error keeps decreasing"):
    assert any(c.startswith(needle) for c in claims), needle
  for r in data["rows"]:
    assert r["verdict"] in VERDICTS and r["cause"] and r["setup"]
    ns = [s["n"] for s in r["ours"].values()]
    if r["verdict"] != "inconclusive":  # the standard: >= 5 seeds for a verdict
      assert min(ns) >= 5, r["claim"]
    for s in r["ours"].values():
      assert len(s["values"]) == s["n"]


def test_verdicts_recomputed_from_the_stored_runs(card):
  data, _ = card
  sc_mod = load_script("dp_mocha", "dp_mocha_claims").sc
  fig4 = load_json(os.path.join(RESULTS, "fig4.json"))
  vals = sorted((r["trial"], r["final_test_error"]) for r in fig4["runs"]
                if r["label"] == "drop=0.2, private eps=8")
  row = next(r for r in data["rows"] if "is 0.097" in r["claim"])
  assert row["verdict"] == sc_mod.matches_value([v for _, v in vals], 0.097,
                                                0.02).verdict
  assert row["ours"]["P 0.2"]["n"] == len(vals) >= 5
  # Fig. 5's "decreasing" is the monotone rule, not a tolerance on the means.
  fig5 = next(r for r in data["rows"] if r["claim"].startswith("Fig. 5"))
  assert "step 1:" in fig5["detail"] and "monotone decreasing" in fig5["setup"]


def test_readme_opens_with_the_scorecard(card):
  _, md = card
  with open(os.path.join(ROOT, "experiments", "dp_mocha", "README.md")) as f:
    readme = f.read()
  table = [ln for ln in md.splitlines() if ln.startswith("|")]
  first = readme.index("| # | claim |")
  assert readme[:first].count("\n|") == 0  # no other table before it
  assert "\n".join(table) in readme  # the README's table is the script's, verbatim
  with open(os.path.join(RESULTS, "scorecard.md")) as f:
    assert f.read() == md  # the stored scorecard is current


def test_sigma_sweep_analysis_inverts_theorem5():
  from fedjax_dp.algorithms.dp_mocha import paper_calibration
  res = load_json(os.path.join(RESULTS, "sigma_sweep.json"))
  m, an = res["meta"], res["meta"]["analysis"]
  rounds = m["outer_rounds"] * m["inner_rounds"]
  q, p = 1 - m["tau"] / 2, 1 - m["drop"]  # the worst device (n_t = n_min)
  for t in an["table"]:
    assert t["error"]["n"] >= 5
    if t["sigma"] == 0:
      continue
    for k, key in ((rounds, "eps_theorem5_run"), (20000, "eps_theorem5_paper")):
      assert t[key] == pytest.approx(paper_calibration.theorem5_epsilon(
          t["sigma"], m["delta"], q, p, k), rel=1e-9)
  match = an["match"]
  pos = [t for t in an["table"] if t["sigma"] > 0]
  below = [t["sigma"] for t in pos if t["error"]["mean"] <= 0.097]
  above = [t["sigma"] for t in pos if t["error"]["mean"] >= 0.097]
  assert max(below) <= match["sigma"] <= min(above)
  assert match["eps_theorem5_paper"] == pytest.approx(
      match["eps_theorem5_run"] * math.sqrt(20000 / rounds), rel=1e-9)
  with open(os.path.join(RESULTS, "sigma_sweep.md")) as f:
    assert f"{match['sigma']:.3g}" in f.read()
  json.dumps(an, allow_nan=False)  # JSON-safe (no inf / NaN)
