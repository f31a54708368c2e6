"""The reproduction standard's rules (experiments/scorecard.py) against independent
computations, on data where the rules' cases differ."""

import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "experiments"))
import scorecard as sc  # noqa: E402

# Student's t 0.975 quantiles from a printed table (not scipy): dof -> t.
T975 = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262}


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_mean_ci_is_the_t_interval(n):
  rng = np.random.default_rng(n)
  v = rng.normal(size=n)
  s = sc.summarize(v.tolist())
  half = T975[n - 1] * np.std(v, ddof=1) / math.sqrt(n)
  assert s.mean == pytest.approx(v.mean())
  assert s.lo == pytest.approx(v.mean() - half, rel=1e-3)
  assert s.hi == pytest.approx(v.mean() + half, rel=1e-3)
  assert s.n == n and s.values == tuple(v.tolist())


def test_one_value_has_no_interval_and_bad_values_are_refused():
  s = sc.summarize([0.5])
  assert s.mean == 0.5 and math.isnan(s.lo) and math.isnan(s.hi)
  with pytest.raises(ValueError, match="non-finite"):
    sc.summarize([0.1, float("nan")])
  with pytest.raises(ValueError, match="no values"):
    sc.summarize([None, None])


def test_pairing_by_seed_differs_from_welch():
  """Two settings that share a large per-seed effect: paired, the difference is
  significant; unpaired (Welch), the seed-to-seed spread hides it."""
  base = np.array([0.1, 0.5, 0.3, 0.9, 0.7])
  a, b = base + 0.02 + np.array([0.001, -0.001, 0.0, 0.002, -0.002]), base
  seeds = [0, 1, 2, 3, 4]
  paired = sc.difference(a, b, seeds_a=seeds, seeds_b=seeds)
  welch = sc.difference(a, b)
  assert paired.kind == "paired" and welch.kind == "welch"
  assert paired.lo > 0 and welch.lo < 0
  assert sc.greater(a, b, seeds_a=seeds, seeds_b=seeds).verdict == "holds"
  assert sc.greater(a, b).verdict == "inconclusive"
  # Pairing follows the seeds, not the order of the values.
  perm = [4, 2, 0, 1, 3]
  again = sc.difference(a[perm], b, seeds_a=[seeds[i] for i in perm], seeds_b=seeds)
  assert again.mean == pytest.approx(paired.mean) and again.lo == pytest.approx(paired.lo)


def test_welch_interval_against_a_hand_computation():
  a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 2.5, 2.0, 2.5, 2.0, 2.5]
  va, vb = np.var(a, ddof=1) / 5, np.var(b, ddof=1) / 6
  dof = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 5)
  from scipy import stats
  half = stats.t.ppf(0.975, dof) * math.sqrt(va + vb)
  d = sc.difference(a, b)
  assert d.mean == pytest.approx(3.0 - 2.25)
  assert d.hi - d.mean == pytest.approx(half)


def test_greater_margin_and_the_seed_minimum():
  seeds = list(range(5))
  flat_a = [0.500, 0.502, 0.499, 0.501, 0.500]
  flat_b = [0.500, 0.501, 0.500, 0.500, 0.501]
  # No effect: inconclusive without a margin, fails with a margin of one point.
  assert sc.greater(flat_a, flat_b, seeds_a=seeds, seeds_b=seeds).verdict == "inconclusive"
  assert sc.greater(flat_a, flat_b, margin=0.01, seeds_a=seeds,
                    seeds_b=seeds).verdict == "fails"
  reversed_ = sc.greater([0.1] * 4 + [0.11], [0.5] * 4 + [0.52])
  assert reversed_.verdict == "fails"
  three = sc.greater([0.9, 0.91, 0.92], [0.1, 0.11, 0.12])
  assert three.verdict == "inconclusive" and "n = 3 < 5" in three.detail
  assert "holds" in three.detail  # what the rule alone would say
  with pytest.raises(ValueError):
    sc.greater(flat_a, flat_b, margin=-1)


def _series(means, spread=0.002, n=5, seed=0):
  rng = np.random.default_rng(seed)
  return [list(m + spread * rng.standard_normal(n)) for m in means]


def test_monotone_rules():
  assert sc.monotone(_series([0.1, 0.2, 0.3])).verdict == "holds"
  assert sc.monotone(_series([0.3, 0.2, 0.1]), increasing=False).verdict == "holds"
  assert sc.monotone(_series([0.1, 0.3, 0.2])).verdict == "fails"  # a significant drop
  assert sc.monotone(_series([0.1, 0.1, 0.3])).verdict == "inconclusive"  # a flat step
  assert sc.monotone(_series([0.1, 0.1, 0.3]), margin=0.01).verdict == "fails"


def test_inverted_u_rules():
  assert sc.inverted_u(_series([0.1, 0.3, 0.2])).verdict == "holds"
  assert sc.inverted_u(_series([0.1, 0.2, 0.3, 0.4])).verdict == "fails"  # monotone
  assert sc.inverted_u(_series([0.1, 0.3, 0.3])).verdict == "inconclusive"  # plateau
  with pytest.raises(ValueError):
    sc.inverted_u(_series([0.1, 0.2]))


def test_within_and_matches_value():
  seeds = list(range(5))
  a = [0.800, 0.805, 0.795, 0.802, 0.798]
  assert sc.within(a, [x - 0.003 for x in a], 0.01, seeds_a=seeds,
                   seeds_b=seeds).verdict == "holds"
  assert sc.within(a, [x - 0.05 for x in a], 0.01, seeds_a=seeds,
                   seeds_b=seeds).verdict == "fails"
  wide = [0.7, 0.9, 0.75, 0.85, 0.8]
  assert sc.within(wide, a, 0.01).verdict == "inconclusive"
  # Non-inferiority: better by any amount holds (within would fail), a CI
  # straddling -tol is inconclusive, a CI below it fails.
  better = [x + 0.05 for x in a]
  assert sc.not_worse(better, a, 0.01, seeds_a=seeds, seeds_b=seeds).verdict == "holds"
  assert sc.within(better, a, 0.01, seeds_a=seeds, seeds_b=seeds).verdict == "fails"
  assert sc.not_worse([x - 0.05 for x in a], a, 0.01, seeds_a=seeds,
                      seeds_b=seeds).verdict == "fails"
  jitter = [-0.012, -0.006, -0.010, -0.004, -0.011]
  assert sc.not_worse([x + j for x, j in zip(a, jitter)], a, 0.01, seeds_a=seeds,
                      seeds_b=seeds).verdict == "inconclusive"
  assert sc.matches_value(a, 0.80, 0.01).verdict == "holds"
  assert sc.matches_value(a, 0.90, 0.01).verdict == "fails"
  assert sc.matches_value(wide, 0.80, 0.01).verdict == "inconclusive"


def test_rows_render_and_write(tmp_path):
  s = sc.summarize([0.5, 0.52, 0.51, 0.49, 0.5])
  row = sc.Row("Fig. 2: larger epsilon, higher accuracy", "increasing",
               {"eps 2": s}, sc.Verdict("inconclusive", "rule text"), "scale: 30 clients",
               setup="T = 200")
  lines = sc.render([row])
  assert lines[0].startswith("| # | claim | paper | ours")
  assert "0.504 [" in lines[2] and "(n = 5)" in lines[2] and "**inconclusive**" in lines[2]
  assert lines[-1] == "1. rule text. Setup: T = 200."
  sc.write(str(tmp_path / "card"), [row], meta=dict(paper="003"))
  data = json.loads((tmp_path / "card.json").read_text())
  assert data["rows"][0]["ours"]["eps 2"]["values"] == [0.5, 0.52, 0.51, 0.49, 0.5]
  assert data["standard"] == dict(min_seeds=5, level=0.95)
  assert (tmp_path / "card.md").read_text().startswith("| # | claim")
  with pytest.raises(ValueError, match="cause"):
    sc.Row("c", "p", {}, sc.Verdict("holds", "d"), "because")
  with pytest.raises(ValueError, match="verdict"):
    sc.Row("c", "p", {}, sc.Verdict("maybe", "d"), "none")


def test_update_readme_replaces_only_the_marked_table(tmp_path):
  s = sc.summarize([0.5, 0.52, 0.51, 0.49, 0.5])
  row = sc.Row("claim", "p", {"x": s}, sc.Verdict("holds", "d"), "none")
  readme = tmp_path / "README.md"
  readme.write_text(f"# T\n\nintro\n{sc.BEGIN}\nold table\n{sc.END}\n\n## rest\n")
  sc.update_readme(str(readme), [row])
  text = readme.read_text()
  assert "old table" not in text and text.startswith("# T\n\nintro\n")
  assert text.endswith(f"{sc.END}\n\n## rest\n") and "| 1 | claim | p |" in text
  readme.write_text("no markers")
  with pytest.raises(ValueError, match="scorecard:begin"):
    sc.update_readme(str(readme), [row])


def test_results_files_take_runs_from_two_writers(tmp_path):
  """Two processes filling one figure's file (results_store.Results with resume): each
  sees the other's finished runs and neither overwrites them; without resume the
  first add starts the file afresh."""
  import results_store
  path = str(tmp_path / "fig.json")
  results_store.Results(path, {}, resume=False).add({"label": "old", "seed": 0})
  a = results_store.Results(path, {"m": 1}, resume=True)
  b = results_store.Results(path, {"m": 1}, resume=True)
  a.add({"label": "x", "seed": 0})
  assert b.has(label="x", seed=0)
  b.add({"label": "y", "seed": 0})
  a.add({"label": "x", "seed": 1})
  stored = json.loads(open(path).read())["runs"]
  assert [(r["label"], r["seed"]) for r in stored] == [("old", 0), ("x", 0), ("y", 0),
                                                       ("x", 1)]
  fresh = results_store.Results(path, {}, resume=False)
  assert fresh.has(label="x", seed=0) is False
  fresh.add({"label": "z", "seed": 0})
  assert [r["label"] for r in json.loads(open(path).read())["runs"]] == ["z"]
