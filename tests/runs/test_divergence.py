"""Divergence (fedjax_dp.runs.divergence): the rule on records, a diverged run stopped
with its outputs and exit status 3, --allow-divergence, a diverged sweep member, and a
healthy run unaffected."""

import json
import logging
import math

from fedjax_dp import cli
from fedjax_dp.runs import divergence

SYNTH = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
         "--batch-size", "8", "--eval-every", "2", "--sampling-rate", "0.5",
         "--clip-norm", "0.5", "--logger", "none", "--no-progress"]


def _rec(rnd, bad=0, n=10, loss=1.0, test=None):
  r = {"round": rnd, "nonfinite_updates": bad, "num_clients": n, "train_loss": loss}
  if test is not None:
    r["test_loss"] = None if not math.isfinite(test) else test
  return r


def test_rule_nonfinite_updates_need_three_consecutive_rounds():
  recs = [_rec(1), _rec(2, bad=6), _rec(3, bad=10, loss=None), _rec(4, bad=2),
          _rec(5, bad=5), _rec(6, bad=0, n=0), _rec(7, bad=9, loss=None)]
  assert divergence.detect(recs[:4], 0) is None  # the streak broke at round 4
  assert divergence.detect(recs[:6], 4) is None  # rounds 5 (and 6: nobody) only
  found = divergence.detect(recs + [_rec(8, bad=10)], 6)  # 5, (6 skipped), 7, 8
  assert found["round"] == 8 and found["reason"] == "nonfinite_updates"
  assert "from round 5 to round 8" in found["detail"]


def test_rule_test_loss_explosion():
  assert divergence.detect([_rec(1, loss=2.0), _rec(2, test=150.0)], 1) is None  # < 200
  found = divergence.detect([_rec(1, loss=2.0), _rec(2, test=250.0)], 1)
  assert found["round"] == 2 and found["reason"] == "test_loss"
  # Below the absolute floor of 10 nothing explodes, whatever the ratio.
  assert divergence.detect([_rec(1, loss=0.01), _rec(2, test=9.0)], 0) is None
  found = divergence.detect([_rec(1), _rec(2, test=float("nan"))], 0)
  assert found["reason"] == "test_loss" and "not finite" in found["detail"]
  # A healthy run's records: nothing.
  assert divergence.detect([_rec(r, loss=1.0 / r, test=1.0 / r) for r in range(1, 9)],
                           0) is None


def test_diverged_run_stops_with_exit_3_and_keeps_its_outputs(tmp_path, capsys):
  """The issue's case, small: --target-epsilon 0.001 calibrates z of several hundred,
  the model blows up; the run stops at the end of that block, exit status 3, with a
  message naming the round, the noise multiplier and what to try."""
  out = tmp_path / "run"
  rc = cli.main(["run", *SYNTH, "--target-epsilon", "0.001", "--rounds", "8",
                 "--out", str(out)])
  printed = capsys.readouterr().out
  assert rc == divergence.EXIT_DIVERGED == 3
  s = json.loads((out / "summary.json").read_text())
  div = s["diverged"]
  assert div["stopped"] and div["round"] <= div["rounds_done"] < 8
  assert s["rounds"] == div["rounds_done"]
  rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
  assert [r["round"] for r in rows] == list(range(1, div["rounds_done"] + 1))
  assert (out / "curves.png").exists() and (out / "checkpoints").is_dir()
  assert f"the run diverged at round {div['round']}" in printed
  assert "noise multiplier" in printed and "--target-epsilon" in printed
  assert "--allow-divergence" in printed and "exit status 3" in printed
  assert s["summary_disclosure"]["diverged"]["kind"] == "diagnostic"
  assert s["epsilon"] == rows[-1]["epsilon"]  # the rounds run, as accounted


def test_allow_divergence_runs_to_the_end_with_a_warning(tmp_path, capsys, caplog):
  out = tmp_path / "run"
  with caplog.at_level(logging.WARNING, logger="fedjax_dp"):
    rc = cli.main(["run", *SYNTH, "--target-epsilon", "0.001", "--rounds", "6",
                   "--allow-divergence", "--out", str(out)])
  assert rc == 0
  printed = capsys.readouterr().out
  s = json.loads((out / "summary.json").read_text())
  assert s["rounds"] == 6 and s["diverged"] and not s["diverged"]["stopped"]
  assert "warning: the run diverged" in printed
  assert any("diverged" in r.getMessage() for r in caplog.records)  # while it trains


def test_sweep_reports_the_diverged_member_and_keeps_the_others(tmp_path, capsys):
  out = tmp_path / "sweep"
  rc = cli.main(["sweep", *SYNTH, "--rounds", "6", "--noise-multiplier", "1,600",
                 "--out", str(out)])
  printed = capsys.readouterr().out
  assert rc == 3
  healthy = json.loads((out / "noise_multiplier=1.0,seed=0" / "summary.json").read_text())
  broken = json.loads((out / "noise_multiplier=600.0,seed=0" / "summary.json").read_text())
  assert healthy["diverged"] is None and healthy["rounds"] == 6
  assert broken["diverged"]["stopped"] and broken["rounds"] < 6
  rows = open(out / "noise_multiplier=600.0,seed=0" / "metrics.jsonl").readlines()
  assert len(rows) == broken["rounds"]
  assert "noise_multiplier=600.0,seed=0: DIVERGED" in printed
  assert "1 of 2 configurations diverged" in printed
