"""The scorecard rows of experiments/padpfl/report.py on hand-made runs (no training):
claims that hold, fail and are inconclusive under the reproduction standard
(experiments/scorecard.py), their causes, and the files `main` writes."""

import json

import pytest

from experiment_scripts import load_script

report = load_script("padpfl", "report")
sc = report.sc

META = dict(scenario=1, dataset="fashion_mnist", hidden=64, rounds=30, local_steps=10,
            clip_bound=9.0, quick=False, setup="hand-made")


def _run(ratio, eps, seed, loss):
  return dict(ratio=ratio, private=eps is not None, epsilon=eps, seed=seed,
              final_test_loss=loss, best_test_loss=loss, final_test_accuracy=0.5,
              wall_time_s=1.0)


def _runs(tmp_path, runs, name="scenario1_fashion_mnist", meta=META):
  path = tmp_path / f"{name}.json"
  path.write_text(json.dumps(dict(meta=meta, runs=runs)))
  return report.Runs(str(path))


NOISE = [0.000, 0.004, -0.003, 0.002, -0.001]  # per-seed wiggle shared by both sides


def _claim(tag="a", scenario=1):
  return next(c for c in report.claims() if c.tag == tag and c.scenario == scenario)


def test_claims_cover_the_papers_comparisons():
  cs = report.claims()
  assert len(cs) == 21
  assert [c.scenario for c in cs if c.tag == "a"] == [1, 2, 3, 4]
  assert {c.scenario for c in cs if c.tag == "b"} == {1, 2, 3}
  assert {c.scenario for c in cs if c.tag == "c"} == {4}
  assert sum(c.tag == "equal ε" for c in cs) == 8
  # the equal-epsilon comparison is the paper's in scenarios 2 and 3 only
  stated = {(c.scenario, c.a[1]) for c in cs if c.tag == "equal ε" and "ours" not in c.paper}
  assert stated == {(2, 5.0), (2, 20.0), (3, 20.0)}


def test_a_clear_win_over_five_seeds_holds(tmp_path):
  runs = [_run("0-1-2", None, s, 0.80 + w) for s, w in enumerate(NOISE)]
  runs += [_run("1-1-1", None, s, 0.86 + w) for s, w in enumerate(NOISE)]
  row = report.claim_row(_claim(), _runs(tmp_path, runs))
  assert row.verdict.verdict == "holds" and row.cause == "none"
  diff = row.ours["B − A"]
  assert diff.kind == "paired" and diff.n == 5
  assert diff.mean == pytest.approx(0.06) and diff.lo == pytest.approx(0.06)


def test_a_clear_loss_fails_with_the_claims_cause(tmp_path):
  runs = [_run("0-1-2", 5.0, s, 2.4 + w) for s, w in enumerate(NOISE)]
  runs += [_run("1-1-1", 20.0, s, 1.2 - w) for s, w in enumerate(NOISE)]
  claim = next(c for c in report.claims() if c.tag == "b" and c.a == ("0-1-2", 5.0))
  row = report.claim_row(claim, _runs(tmp_path, runs))
  assert row.verdict.verdict == "fails"
  assert row.cause.startswith("paper: its eq. (13)")


def test_overlapping_seeds_are_inconclusive(tmp_path):
  runs = [_run("0-1-2", None, s, 0.80 + 10 * w) for s, w in enumerate(NOISE)]
  runs += [_run("1-1-1", None, s, 0.80 - 10 * w) for s, w in enumerate(NOISE)]
  row = report.claim_row(_claim(), _runs(tmp_path, runs))
  assert row.verdict.verdict == "inconclusive"
  assert row.cause.startswith("scale: the 95% CI at n = 5")


def test_three_seeds_are_inconclusive_and_say_compute(tmp_path):
  runs = [_run("0-1-2", 5.0, s, 2.4 + w) for s, w in enumerate(NOISE[:3])]
  runs += [_run("1-1-1", 20.0, s, 1.2 + w) for s, w in enumerate(NOISE[:3])]
  claim = next(c for c in report.claims() if c.tag == "b" and c.a == ("0-1-2", 5.0))
  current = report.claim_row(claim, _runs(tmp_path, runs))
  assert current.verdict.verdict == "inconclusive"
  assert "the rule alone: fails" in current.verdict.detail
  assert current.cause.startswith("scale: compute (n = 3") and "predate" not in current.cause
  stale = report.claim_row(claim, _runs(tmp_path, runs, "scenario2_fashion_mnist"))
  assert "predate the noise-draw change" in stale.cause


def test_a_missing_side_gives_no_row(tmp_path):
  runs = [_run("0-1-2", None, s, 0.8) for s in range(5)]
  assert report.claim_row(_claim(), _runs(tmp_path, runs)) is None


def test_main_writes_the_scorecard(tmp_path):
  res = tmp_path / "res"
  res.mkdir()
  runs = [_run(r, None, s, v + w) for r, v in (("0-1-2", 0.8), ("1-1-1", 0.86))
          for s, w in enumerate(NOISE)]
  (res / "scenario1_fashion_mnist.json").write_text(json.dumps(dict(meta=META, runs=runs)))
  assert report.main(["--results", str(res), "--out", str(tmp_path)]) == 0
  md = (tmp_path / "scorecard.md").read_text().splitlines()
  assert md[0] == "| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict | cause |"
  assert len([l for l in md if l.startswith("| 1 |")]) == 1
  data = json.loads((tmp_path / "scorecard.json").read_text())
  (row,) = data["rows"]
  assert row["verdict"] == "holds" and row["ours"]["B − A"]["n"] == 5
  assert data["meta"]["seeds"] == {"scenario1": [0, 1, 2, 3, 4]}
  assert (tmp_path / "tables.md").exists() and (tmp_path / "noise.md").exists()
