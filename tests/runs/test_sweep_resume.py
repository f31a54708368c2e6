"""One driver for runs and sweeps (issue 31): a run is a sweep of one member, and a sweep
stops safely on SIGTERM / Ctrl-C and resumes (`fedjax-dp sweep --resume`) to exactly the
uninterrupted sweep, refusing a resume whose options differ from the saved sweep's."""

import json
import os
import shutil
import signal
import threading
import time

import jax
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.runs import RunConfig, run, sweep
from fedjax_dp.validation import FedJaxDpError
from run_outputs import read_metrics as _metrics

main_thread_only = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals are delivered to the main thread only")

#: 4 rounds of DP-FedAvg on 20 synthetic clients with a linear model, evaluated (and so
#: compiled in blocks) every 2 rounds; 2 noise multipliers x 2 seeds.
BASE = dict(algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
            batch_size=8, rounds=4, eval_every=2, sampling_rate=0.5, clip_norm=1.0,
            logger="none")
AXES = {"noise_multiplier": [1.0, 2.0]}
SEEDS = [0, 1]
ARGS = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
        "--batch-size", "8", "--rounds", "4", "--eval-every", "2", "--sampling-rate", "0.5",
        "--clip-norm", "1", "--logger", "none", "--no-progress", "--seeds", "0-1",
        "--noise-multiplier", "1,2"]
NAMES = ["noise_multiplier=1.0,seed=0", "noise_multiplier=1.0,seed=1",
         "noise_multiplier=2.0,seed=0", "noise_multiplier=2.0,seed=1"]


def _base(**kw):
  return RunConfig.from_dict({**BASE, **kw})


def _summary(folder):
  with open(os.path.join(folder, "summary.json")) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """The uninterrupted sweep."""
  out = str(tmp_path_factory.mktemp("straight") / "s")
  return sweep.run_sweep(_base(out=out), AXES, SEEDS, progress=False)


def _signal_on_save(monkeypatch, nth, signum=signal.SIGTERM):
  """Sends ``signum`` to this process during the ``nth`` checkpoint write (1-based), as
  tests/test_interrupts.py does for a run; returns the rounds of every write."""
  calls = []
  original = RunCheckpointer.save

  def save(self, rounds_done, state, meta):
    calls.append(rounds_done)
    if len(calls) == nth:
      os.kill(os.getpid(), signum)
      time.sleep(0.05)  # the handler runs here, inside the critical section
    return original(self, rounds_done, state, meta)
  monkeypatch.setattr(RunCheckpointer, "save", save)
  return calls


@pytest.mark.slow
@main_thread_only
def test_an_interrupted_sweep_resumes_to_the_uninterrupted_one(tmp_path, monkeypatch,
                                                               straight, capsys):
  """SIGTERM while the first member's checkpoint after round 2 is written: the block's
  records and every member's checkpoint are completed, the sweep stops there (exit
  status 143) with each member summarised; --resume ends exactly where the
  uninterrupted sweep ends, for every member."""
  out = tmp_path / "sw"
  calls = _signal_on_save(monkeypatch, len(NAMES) + 1)  # round 0's writes, then round 2's
  assert cli.main(["sweep", *ARGS, "--out", str(out)]) == 143
  assert calls == [0] * 4 + [2] * 4  # every member's checkpoint, and no block after it
  printed = capsys.readouterr().out
  assert "interrupted (SIGTERM) after 2 of 4 rounds" in printed
  assert f"fedjax-dp sweep --resume {out}" in printed
  for name in NAMES:
    s = _summary(out / name)
    assert s["interrupted"] == {"signal": "SIGTERM", "rounds_done": 2, "rounds_planned": 4,
                                "resume": f"fedjax-dp sweep --resume {out}"}
    assert s["rounds"] == 2 == len(_metrics(out / name))
    assert RunCheckpointer(str(out / name / "checkpoints")).latest() == 2
    assert _metrics(out / name) == _metrics(os.path.join(straight.out, name))[:2]
  assert json.loads((out / "sweep.json").read_text())["interrupted"]["rounds_done"] == 2
  monkeypatch.undo()
  assert cli.main(["sweep", "--resume", str(out), "--no-progress"]) == 0
  for m in straight.members:
    assert _metrics(out / m.name) == _metrics(os.path.join(straight.out, m.name)), m.name
    s = _summary(out / m.name)
    assert s["interrupted"] is None and s["rounds"] == 4
    for k in ("epsilon_rdp", "epsilon_pld", "final_test_accuracy", "final_test_loss"):
      assert s[k] == m.summary[k], (m.name, k)
  doc = json.loads((out / "sweep.json").read_text())
  assert doc["interrupted"] is None and doc["configurations"] == 4


@pytest.mark.slow
def test_a_resume_with_a_changed_option_is_refused(tmp_path, straight, capsys):
  copy = tmp_path / "copy"
  shutil.copytree(straight.out, copy)
  before = {n: (copy / n / "metrics.jsonl").read_text() for n in NAMES}
  for extra, option, needle in (
      (["--clip-norm", "0.5"], "--clip-norm", "clip_norm of the sweep"),
      (["--noise-multiplier", "1,3"], "--noise-multiplier", "noise_multiplier of the sweep"),
      (["--seeds", "0,2"], "--seeds", "seeds of the sweep"),
      (["--rounds", "6"], "--rounds", "cannot be extended")):
    args = [a for a in ARGS] + extra
    assert cli.main(["sweep", *args, "--resume", str(copy)]) == 2
    err = capsys.readouterr().err
    assert needle in err and f"(option {option})" in err and "Traceback" not in err, err
  with pytest.raises(FedJaxDpError, match="noise_multiplier of the sweep") as e:
    sweep.run_sweep(_base(resume=str(copy)), {"noise_multiplier": [1.0, 3.0]}, SEEDS,
                    progress=False)
  assert e.value.option == "noise_multiplier"
  with pytest.raises(FedJaxDpError, match="algorithm of the sweep") as e:
    sweep.run_sweep(RunConfig(algorithm="fedavg", resume=str(copy)), progress=False)
  assert e.value.option == "algorithm"
  assert {n: (copy / n / "metrics.jsonl").read_text() for n in NAMES} == before
  # The sweep's own options again (or none) are accepted: a finished sweep stays as is.
  assert cli.main(["sweep", *ARGS, "--resume", str(copy)]) == 0
  assert {n: (copy / n / "metrics.jsonl").read_text() for n in NAMES} == before


def test_resume_continues_from_the_round_every_member_reached(tmp_path, straight):
  """A sweep killed while writing its members' checkpoints (one member's newest is
  missing) continues every member from the newest round all of them reached."""
  copy = tmp_path / "killed"
  shutil.copytree(straight.out, copy)
  shutil.rmtree(copy / NAMES[1] / "checkpoints" / "4")
  res = sweep.run_sweep(RunConfig(resume=str(copy)), progress=False)
  assert res.interrupted is None and list(res.axes) == ["noise_multiplier"]
  for m in straight.members:
    assert _metrics(copy / m.name) == _metrics(os.path.join(straight.out, m.name)), m.name
    assert RunCheckpointer(str(copy / m.name / "checkpoints")).steps() == [2, 4]


def test_a_run_is_a_sweep_of_one_member(tmp_path):
  """`run` and a sweep of that one configuration go through the same driver and give
  the same records, files and state (bit for bit; wall times aside)."""
  one = run(_base(seed=3, out=str(tmp_path / "run")), progress=False)
  swept = sweep.run_sweep(_base(seed=3, out=str(tmp_path / "sweep")), progress=False)
  (m,) = swept.members
  assert m.name == "seed=3" and swept.programs == 1
  strip = lambda recs: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in recs]
  assert strip(m.records) == strip(one.records)
  assert _metrics(tmp_path / "sweep" / m.name) == _metrics(tmp_path / "run")
  for a, b in zip(jax.tree_util.tree_leaves(one.state), jax.tree_util.tree_leaves(m.state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  skip = {"wall_time_s", "time_per_round_s", "steady_time_per_round_s", "config", "sweep",
          "summary_disclosure"}
  assert {k: v for k, v in m.summary.items() if k not in skip} == {
      k: v for k, v in one.summary.items() if k not in skip}
  assert set(m.summary["summary_disclosure"]) - set(one.summary["summary_disclosure"]) == {
      "sweep"}
