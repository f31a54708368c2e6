"""The DP fine-tuning experiment (experiments/shakespeare/finetune.py) in its --quick
size: every variant runs with a finite accuracy, each DP variant spends its target
epsilon, and the markdown table is written."""

import json
import math
import os
import subprocess
import sys

import pytest

from fedjax_dp.data.sources import shakespeare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "experiments", "shakespeare", "finetune.py")
VARIANTS = {"scratch_dp", "full_dp", "lora4_dp", "full_fedavg", "lora4_fedavg"}


@pytest.mark.slow
@pytest.mark.skipif(not shakespeare.is_prepared(),
                    reason="run `fedjax-dp datasets prepare shakespeare` first")
def test_quick_finetune(tmp_path):
  out = tmp_path / "finetune.json"
  subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(out)], check=True,
                 cwd=ROOT, timeout=900)
  data = json.loads(out.read_text())
  runs = data["runs"]
  assert {r["variant"] for r in runs} == VARIANTS
  target = data["meta"]["settings"]["target_epsilon"]
  for r in runs:
    assert math.isfinite(r["final_accuracy"]) and 0.0 <= r["final_accuracy"] <= 1.0, r
    assert r["trainable_params"] > 0
    assert r["upload_bytes_per_client"] == 4 * r["trainable_params"]
    if r["algorithm"] == "dp_fedavg":
      assert math.isclose(r["epsilon"], target, rel_tol=0.01), r
    else:
      assert r["epsilon"] is None
  lora_runs = [r for r in runs if r["variant"].startswith("lora")]
  full_runs = [r for r in runs if r["variant"].startswith("full")]
  assert all(a["trainable_params"] < b["trainable_params"]
             for a in lora_runs for b in full_runs)
  pre = data["meta"]["pretraining"]
  assert 0.0 <= pre["zero_shot_accuracy"] <= 1.0
  assert (tmp_path / "finetune.pretrained.npz").exists()
  assert len(data["meta"]["verdicts"]) >= 3
  assert (tmp_path / "finetune.md").read_text().count("\n| ") >= 8
