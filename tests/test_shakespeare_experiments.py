"""The Shakespeare comparison (experiments/shakespeare/compare.py) in its --quick size:
every variant runs, each DP variant spends its target epsilon, and the scorecard reads
the results."""

import json
import math
import os
import subprocess
import sys

import pytest

from fedjax_dp.data.sources import shakespeare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "experiments", "shakespeare")


@pytest.mark.slow
@pytest.mark.skipif(not shakespeare.is_prepared(),
                    reason="run `fedjax-dp datasets prepare shakespeare` first")
def test_quick_comparison_and_scorecard(tmp_path):
  out = tmp_path / "compare.json"
  subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "--quick", "--out",
                  str(out)], check=True, cwd=ROOT, timeout=900)
  data = json.loads(out.read_text())
  kinds = {r["kind"] for r in data["runs"]}
  assert kinds == {"fedavg", "dp_fedavg", "adaptive", "adaptive_slow", "tree", "banded"}
  for r in data["runs"]:
    assert 0.0 <= r["final_accuracy"] <= 1.0
    if r["target_epsilon"] is not None:
      assert math.isclose(r["epsilon"], r["target_epsilon"], rel_tol=0.01), r
  assert (tmp_path / "compare.md").read_text().count("\n| ") >= 6
  import importlib.util
  spec = importlib.util.spec_from_file_location("shakespeare_scorecard",
                                                os.path.join(HERE, "scorecard.py"))
  card = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(card)  # imports experiments/scorecard.py as `scorecard`
  rows = card.rows_of(data)
  assert len(rows) == 5 and all(r.verdict.verdict == "inconclusive" for r in rows)  # 1 seed
