"""Stopping a run (issue 14): Ctrl-C / SIGTERM at any time leave a resumable run with
summary.json for the rounds of its newest checkpoint; an earlier run's folder is never
overwritten silently; a finished run can be extended with --resume DIR --rounds N."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fedjax_dp import cli
from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.interrupts import GracefulInterrupts, RunInterrupted
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError
from run_outputs import read_metrics as _metrics

main_thread_only = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals are delivered to the main thread only")

SYNTH = dict(dataset="synthetic", num_clients=20, model="linear", seed=3, eval_every=2)
ARGS = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear", "--seed", "3",
        "--eval-every", "2", "--no-progress"]


def _summary(out):
  with open(os.path.join(out, "summary.json")) as f:
    return json.load(f)


@main_thread_only
def test_a_signal_inside_a_critical_section_is_raised_after_it():
  previous = signal.getsignal(signal.SIGTERM)
  done = []
  with pytest.raises(RunInterrupted) as info:
    with GracefulInterrupts() as g:
      with g.critical():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        done.append("finished")  # the signal did not cut the section short
      done.append("not reached")
  assert done == ["finished"]
  assert info.value.signum == signal.SIGTERM and info.value.exit_code == 143
  assert isinstance(info.value, KeyboardInterrupt)
  assert signal.getsignal(signal.SIGTERM) is previous  # handlers restored


@main_thread_only
def test_only_the_first_signal_is_raised():
  with GracefulInterrupts() as g:
    with pytest.raises(RunInterrupted):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)  # noted, not raised: the summary must finish
    time.sleep(0.05)
    assert g.received == signal.SIGINT


def _signal_on_save(monkeypatch, nth, signum=signal.SIGTERM):
  """Sends ``signum`` to this process during the ``nth`` checkpoint write (1-based)."""
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
@pytest.mark.parametrize("nth", [1, 3])
def test_sigterm_keeps_the_newest_checkpoint_summarised_and_resumable(tmp_path, monkeypatch,
                                                                      nth):
  """SIGTERM during the initial checkpoint (nth=1: nothing trained yet) or during the
  checkpoint after round 4 (nth=3): that checkpoint is completed, the run stops there
  with summary.json and metrics.jsonl of its rounds, and resuming ends exactly where an
  uninterrupted run ends."""
  out = tmp_path / "stopped"
  calls = _signal_on_save(monkeypatch, nth)
  res = run(RunConfig(**SYNTH, rounds=12, out=str(out)), progress=False)
  done = calls[-1]
  assert done == 2 * (nth - 1) and len(calls) == nth  # no block after the signal
  s = _summary(out)
  assert s["interrupted"] == {"signal": "SIGTERM", "rounds_done": done,
                              "rounds_planned": 12, "resume": f"fedjax-dp run --resume {out}"}
  assert s["rounds"] == done == len(_metrics(out)) == len(res.records)
  assert RunCheckpointer(str(out / "checkpoints")).latest() == done
  assert not [n for n in os.listdir(out / "checkpoints") if "tmp" in n]
  assert s["epsilon_rdp"] == (0.0 if done == 0 else pytest.approx(
      _metrics(out)[-1]["epsilon"], rel=1e-9))
  monkeypatch.undo()
  resumed = run(RunConfig(resume=str(out)), progress=False)
  straight = run(RunConfig(**SYNTH, rounds=12, out=str(tmp_path / "straight")),
                 progress=False)
  assert _metrics(out) == _metrics(tmp_path / "straight")
  assert resumed.summary["interrupted"] is None
  for k in ("epsilon_rdp", "epsilon_pld", "final_test_accuracy", "final_test_loss"):
    assert resumed.summary[k] == straight.summary[k], k


@pytest.mark.slow
def test_ctrl_c_from_outside_stops_at_a_checkpoint(tmp_path):
  """A real training process gets SIGINT mid-run: exit status 130, the summary, the
  metrics and the newest checkpoint agree on the rounds done, no partial checkpoint."""
  out = tmp_path / "k"
  # Its own compilation cache: the process compiles (and writes entries) from scratch
  # while it is stopped, and reads nothing that other tests' processes wrote.
  env = dict(os.environ, JAX_PLATFORMS="cpu", FEDJAX_DP_CACHE_DIR=str(tmp_path / "jax"))
  proc = subprocess.Popen([sys.executable, "-m", "fedjax_dp.cli", "run", *ARGS, "--rounds",
                           "5000", "--out", str(out)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 300
  while time.time() < deadline:
    names = os.listdir(out / "checkpoints") if (out / "checkpoints").exists() else []
    if any(n.isdigit() and int(n) >= 6 for n in names):
      break
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    time.sleep(0.2)
  proc.send_signal(signal.SIGINT)
  stdout, stderr = proc.communicate(timeout=300)
  assert proc.returncode == 130, stderr[-2000:]
  assert "interrupted (SIGINT)" in stdout and f"--resume {out}" in stdout
  assert "Traceback" not in stderr
  s = _summary(out)
  latest = RunCheckpointer(str(out / "checkpoints")).latest()
  assert s["rounds"] == s["interrupted"]["rounds_done"] == latest == len(_metrics(out))
  assert latest >= 6 and not [n for n in os.listdir(out / "checkpoints") if "tmp" in n]


def test_an_earlier_run_is_not_overwritten(tmp_path, caplog):
  out = tmp_path / "run"
  first = run(RunConfig(**SYNTH, rounds=2, out=str(out)), progress=False)
  before = (out / "metrics.jsonl").read_text()
  second = run(RunConfig(**SYNTH, rounds=4, out=str(out)), progress=False)
  assert (out / "metrics.jsonl").read_text() == before  # the first run is intact
  assert second.summary["config"]["out"] == f"{out}-2" and len(_metrics(f"{out}-2")) == 4
  assert "holds an earlier run; this run writes to" in caplog.text
  run(RunConfig(**SYNTH, rounds=4, out=str(out)), progress=False)
  assert len(_metrics(f"{out}-3")) == 4
  third = run(RunConfig(**SYNTH, rounds=4, out=str(out), overwrite=True), progress=False)
  assert third.summary["config"]["out"] == str(out) and len(_metrics(out)) == 4
  assert RunCheckpointer(str(out / "checkpoints")).latest() == 4
  assert first.summary["rounds"] == 2


@pytest.mark.slow
def test_extending_a_finished_run_equals_the_longer_run(tmp_path, capsys):
  """--resume DIR --rounds N continues a finished run to N rounds, with the noise
  multiplier it was calibrated with (not one re-calibrated for N rounds)."""
  short, long = tmp_path / "short", tmp_path / "long"
  calibrated = ["--target-epsilon", "3", "--rounds"]
  assert cli.main(["run", *ARGS, *calibrated, "4", "--out", str(short)]) == 0
  assert cli.main(["run", "--resume", str(short), "--rounds", "8", "--no-progress"]) == 0
  assert cli.main(["run", *ARGS, *calibrated, "4", "--out", str(long)]) == 0
  assert cli.main(["run", "--resume", str(long), "--rounds", "6", "--no-progress"]) == 0
  assert cli.main(["run", "--resume", str(long), "--rounds", "8", "--no-progress"]) == 0
  assert _metrics(short) == _metrics(long) and len(_metrics(short)) == 8
  s = _summary(short)
  assert s["rounds"] == 8 and s["config"]["rounds"] == 8
  assert s["epsilon_rdp"] > 3.0  # calibrated for 4 rounds; 8 spend more, reported as is
  z4 = RunConfig.from_dict(dict(SYNTH, rounds=4, noise_multiplier=None,
                                target_epsilon=3.0, out=None))
  assert s["noise_multiplier"] == run(z4, progress=False).summary["noise_multiplier"]
  capsys.readouterr()
  assert cli.main(["run", "--resume", str(short), "--rounds", "8", "--no-progress"]) == 2
  assert "must be more than the 8 rounds" in capsys.readouterr().err


def test_extending_is_refused_where_the_configuration_depends_on_the_rounds(tmp_path,
                                                                           capsys):
  out = tmp_path / "av"
  assert cli.main(["run", "--algorithm", "amplitude_varying", "--dataset", "synthetic",
                   "--num-clients", "20", "--model", "linear", "--epsilon", "10",
                   "--rounds", "3", "--clients-per-round", "5", "--param-clip-norm", "2",
                   "--no-progress", "--out", str(out)]) == 0
  capsys.readouterr()
  assert cli.main(["run", "--resume", str(out), "--rounds", "6", "--no-progress"]) == 2
  err = capsys.readouterr().err
  assert "configuration depends on the number of rounds" in err and "stddevs" in err
  assert len(_metrics(out)) == 3  # untouched


def test_resume_rounds_needs_resume():
  with pytest.raises(FedJaxDpError, match="resume_rounds .* needs resume"):
    RunConfig(resume_rounds=5).validate()
