"""Checkpoint and resume (issue 4, part 1): a resumed run equals the uninterrupted one,
also after a real SIGKILL of the training process."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError
from run_outputs import read_metrics as _metrics

ARGS = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear", "--seed", "3"]


def _final_params(out, rounds):
  ckpt = RunCheckpointer(os.path.join(out, "checkpoints"))
  assert ckpt.latest() == rounds
  meta = ckpt.restore_meta()
  cfg = RunConfig.from_dict({**meta["config"], "out": None})
  from fedjax_dp.runs.loop import build, make_setup, with_default_noise_multiplier
  alg, _ = build(make_setup(with_default_noise_multiplier(cfg)))
  state, _ = ckpt.restore(alg.init(jax.random.key(0)))
  return state


def _assert_same_state(a, b):
  assert int(a.round) == int(b.round)
  for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_resume_after_a_lost_checkpoint_equals_the_straight_run(tmp_path):
  cfg = RunConfig(dataset="synthetic", num_clients=20, model="linear", seed=3, rounds=20,
                  eval_every=5, out=str(tmp_path / "a"))
  straight = run(cfg, progress=False)
  b = tmp_path / "b"
  shutil.copytree(tmp_path / "a", b)
  # The run "died" after round 15's checkpoint, having written more metrics lines.
  shutil.rmtree(b / "checkpoints" / "20")
  with open(b / "metrics.jsonl", "a") as f:
    f.write('{"round": 99, "partial": true}\n')
  resumed = run(RunConfig(resume=str(b)), progress=False)
  assert _metrics(tmp_path / "a") == _metrics(b)
  assert resumed.summary["epsilon_rdp"] == straight.summary["epsilon_rdp"]
  assert resumed.summary["epsilon_pld"] == straight.summary["epsilon_pld"]
  assert resumed.summary["final_test_accuracy"] == straight.summary["final_test_accuracy"]
  _assert_same_state(straight.state, resumed.state)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
  missing = tmp_path / "never_ran"
  with pytest.raises(FedJaxDpError, match="resume must be the output folder"):
    run(RunConfig(resume=str(missing)), progress=False)
  assert not missing.exists()  # nothing is created while refusing
  (tmp_path / "checkpoints").mkdir()  # the folder, but no complete checkpoint in it
  with pytest.raises(FedJaxDpError, match="no complete checkpoint"):
    run(RunConfig(resume=str(tmp_path)), progress=False)


def _start_and_kill_mid_write(out, common, env):
  """Starts a training process and SIGKILLs it while orbax is writing a checkpoint (a
  ``<step>.orbax-checkpoint-tmp`` folder exists) after at least 20 rounds. Returns True
  if the folder was still there after the kill (the write was really cut short)."""
  proc = subprocess.Popen([sys.executable, "-m", "fedjax_dp.cli", "run", *common, "--out",
                           str(out)], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  ckpt_dir = out / "checkpoints"
  deadline = time.time() + 300
  while time.time() < deadline:
    names = os.listdir(ckpt_dir) if ckpt_dir.exists() else []
    steps = [int(p) for p in names if p.isdigit()]  # complete checkpoints only
    if steps and max(steps) >= 20 and any("tmp" in n for n in names):
      break
    if proc.poll() is not None:
      pytest.fail("the training process ended before it could be killed")
    time.sleep(0.002)  # a write takes tens of ms; a busy loop would take a core from it
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  return any("tmp" in n for n in os.listdir(ckpt_dir))


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_then_resume(tmp_path):
  """A real training process (checkpointing every 2 rounds) is killed with SIGKILL in
  the middle of a checkpoint write; the previous checkpoint stays readable, and the
  resumed run ends exactly where an uninterrupted run ends."""
  rounds = 60  # killed after >= 20 rounds: 20 more checkpoint writes to land in
  common = ARGS + ["--rounds", str(rounds), "--eval-every", "2", "--no-progress"]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  for attempt in range(5):  # the kill nearly always lands in a write; retry if not
    killed = tmp_path / f"killed{attempt}"
    if _start_and_kill_mid_write(killed, common, env):
      break
  else:
    pytest.fail("no kill landed during a checkpoint write in 5 attempts")
  ckpt = RunCheckpointer(str(killed / "checkpoints"))
  step = ckpt.latest()
  assert step is not None and 20 <= step < rounds
  assert ckpt.restore_meta()["rounds_done"] == step  # the previous checkpoint is readable
  out = subprocess.run([sys.executable, "-m", "fedjax_dp.cli", "run", "--resume",
                        str(killed), "--no-progress"], env=env, capture_output=True,
                       text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  straight = tmp_path / "straight"
  out = subprocess.run([sys.executable, "-m", "fedjax_dp.cli", "run", *common, "--out",
                        str(straight)], env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  assert _metrics(killed) == _metrics(straight)
  sk = json.load(open(killed / "summary.json"))
  ss = json.load(open(straight / "summary.json"))
  for k in ("epsilon_rdp", "epsilon_pld", "final_test_accuracy", "final_test_loss"):
    assert sk[k] == ss[k], k
  _assert_same_state(_final_params(str(killed), rounds), _final_params(str(straight), rounds))


def test_budget_guard_stops_before_the_round_that_would_pass_the_target(tmp_path):
  """Fixed z with --target-epsilon: the ledger decides; the run stops after T rounds
  with eps(T) <= E < eps(T + 1), saves a checkpoint of round T and says so."""
  from fedjax_dp import cli
  from fedjax_dp.privacy import accountants
  out = tmp_path / "g"
  rc = cli.main(["run", *ARGS, "--rounds", "40", "--noise-multiplier", "2",
                 "--target-epsilon", "3", "--no-progress", "--out", str(out)])
  assert rc == 0
  s = json.load(open(out / "summary.json"))
  t = s["budget_guard"]["rounds_run"]
  assert s["budget_guard"] == {"target_epsilon": 3.0, "rounds_planned": 40, "rounds_run": t,
                               "stopped_early": True}
  q = s["sampling_rate"]
  assert accountants.compute_epsilon(2.0, q, t, 1e-3) <= 3.0
  assert accountants.compute_epsilon(2.0, q, t + 1, 1e-3) > 3.0
  assert s["rounds"] == t == len(_metrics(out)) and s["epsilon_rdp"] <= 3.0
  assert RunCheckpointer(str(out / "checkpoints")).latest() == t
  assert s["privacy_unit"] == "user-level" and s["accountant"] == "rdp"


def test_budget_guard_below_one_round_is_a_clear_error(tmp_path, capsys):
  from fedjax_dp import cli
  rc = cli.main(["run", *ARGS, "--rounds", "5", "--noise-multiplier", "0.5",
                 "--target-epsilon", "0.01", "--no-progress", "--out", str(tmp_path / "x")])
  assert rc == 2
  assert "target_epsilon=0.01 is below the epsilon of a single round" in capsys.readouterr().err


def test_a_checkpoint_of_the_old_metrics_format_is_refused(tmp_path):
  """Before issue 13, fixed-size rounds reported z relative to the add/remove sensitivity;
  resuming such a run would compose two conventions, so its checkpoint is refused."""
  out = tmp_path / "run"
  run(RunConfig(dataset="synthetic", num_clients=20, model="linear", rounds=2, eval_every=2,
                out=str(out)), progress=False)
  ckpt = RunCheckpointer(str(out / "checkpoints"))
  meta = ckpt.restore_meta()
  assert meta["metrics_format"] == 2
  state, _ = ckpt.restore(_final_params(str(out), 2))
  old = {k: v for k, v in meta.items() if k != "metrics_format"}
  shutil.rmtree(out / "checkpoints")
  RunCheckpointer(str(out / "checkpoints")).save(2, state, old)
  with pytest.raises(FedJaxDpError, match="earlier fedjax_dp"):
    run(RunConfig(resume=str(out)), progress=False)
