"""A run on JAX's distributed runtime: 2 processes x 1 CPU device each (gloo collectives
between them, launched on localhost with ``fedjax-dp run --coordinator-address ...
--num-processes 2 --process-id I``) is the same run as 1 process x 2 devices for the
same seed: final parameters (from the checkpoint), every metrics.jsonl row and epsilon.

Tolerance: floats are compared with rtol 1e-5 (atol 1e-6 for values near 0). Both
layouts put the cohort on a mesh of 2 devices with the same slots on each, so the
compiled program and the one cross-device sum (a + b, commutative) are the same; what
may differ is XLA CPU's intra-op threading (2 devices share one process's thread pool
in one layout, and have one each in the other), which can change the summation order
inside a matmul: an ulp per round, far below 1e-5 after a few rounds. Measured on the
2-core machine: identical bits. Epsilon is host float64 arithmetic on those same
metrics: compared with rtol 1e-9. That the 2-process run really is one run across both
processes (not two copies of a 1-device run, which float tolerance could not tell from
it) is checked by its summary: 2 devices on the mesh, 2 processes, and files written
once, by process 0.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from fedjax_dp import cli

SMALL = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
         "--rounds", "4", "--eval-every", "2", "--sampling-rate", "0.5", "--batch-size",
         "8", "--no-progress"]
CASES = {
    # user-level DP-FedAvg, central Gaussian noise on the sum of clipped updates
    "dp_fedavg": [],
    # record-level: local DP-SGD in every client, a cohort split over the processes
    "dp_fedavg_record_level": ["--algorithm", "dp_fedavg_record_level", "--local-steps",
                               "2", "--record-sampling-rate", "0.5"],
}
TIMEOUT_S = 240


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _env(devices: int, log_path) -> dict:
  """The environment of one launched process: CPU, ``devices`` host devices, and a
  compilation cache of its own (beside its log), never the suite's shared one.
  XLA rebuilds a cached executable from the compile options it was written with,
  device assignment included (openxla/xla#18286), so executables of a multi-process
  run are kept out of the folder that the suite's single-process runs read."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env.update(JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             FEDJAX_DP_CACHE_DIR=f"{log_path}.jax-cache")
  return env


def _start(argv, devices, log_path):
  log = open(log_path, "w")
  proc = subprocess.Popen([sys.executable, "-m", "fedjax_dp.cli", "run", *argv],
                          env=_env(devices, log_path), stdout=log,
                          stderr=subprocess.STDOUT)
  proc.log_path = log_path
  log.close()
  return proc


def _tail(proc, n=4000):
  with open(proc.log_path) as f:
    return f.read()[-n:]


def _wait_all(procs, ok=(0,), timeout=TIMEOUT_S):
  """Waits for every process and returns their exit codes; once one has exited with a
  code not in ``ok`` (its peers would wait for it in their next collective) or at the
  timeout, kills the rest (through their own Popen handles)."""
  deadline = time.monotonic() + timeout
  while any(p.poll() is None for p in procs):
    failed = any(p.poll() not in (None, *ok) for p in procs)
    if failed or time.monotonic() > deadline:
      for p in procs:
        if p.poll() is None:
          p.kill()
          p.wait()
      break
    time.sleep(0.1)
  return [p.returncode for p in procs]


def _fail(procs, codes, what):
  pytest.fail(f"{what}: exit codes {codes}\n" + "\n".join(
      f"--- {' '.join(p.args[4:])}\n{_tail(p)}" for p in procs))


def _launch(argv, out_multi, out_single, tmp_path):
  """2 processes x 1 device into ``out_multi`` and 1 process x 2 devices into
  ``out_single``, all three at once."""
  port = _free_port()
  procs = [_start([*argv, "--out", str(out_multi), "--coordinator-address",
                   f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)],
                  1, tmp_path / f"p{i}.log") for i in range(2)]
  procs.append(_start([*argv, "--out", str(out_single)], 2, tmp_path / "single.log"))
  codes = _wait_all(procs)
  if codes != [0, 0, 0]:
    _fail(procs, codes, "a run failed or timed out")
  return procs


def _rows(out):
  with open(os.path.join(out, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def _final_params(out):
  """The parameters of the newest checkpoint, as host arrays."""
  import orbax.checkpoint as ocp
  from fedjax_dp.checkpoint import RunCheckpointer
  step = RunCheckpointer(os.path.join(out, "checkpoints")).latest()
  path = os.path.join(out, "checkpoints", str(step), "state")
  ckpt = ocp.StandardCheckpointer()
  meta = ckpt.metadata(path).item_metadata
  target = jax.tree_util.tree_map(lambda m: np.zeros(m.shape, m.dtype), dict(meta))
  return step, jax.tree_util.tree_map(np.asarray, ckpt.restore(path, target)["params"])


def _assert_same(a, b, where):
  if isinstance(a, dict):
    assert a.keys() == b.keys(), where
    for k in a:
      if k not in ("wall_time_s",):
        _assert_same(a[k], b[k], f"{where}.{k}")
  elif isinstance(a, float) or isinstance(b, float):
    assert a == pytest.approx(b, rel=1e-5, abs=1e-6), where
  else:
    assert a == b, where


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_two_processes_give_the_two_device_run(case, tmp_path):
  multi, single = tmp_path / "multi", tmp_path / "single"
  procs = _launch(SMALL + CASES[case], multi, single, tmp_path)

  s_multi = json.load(open(multi / "summary.json"))
  s_single = json.load(open(single / "summary.json"))
  # One run over both processes' devices, reported once (by process 0).
  assert (s_multi["devices"], s_multi["processes"]) == (2, 2)
  assert (s_single["devices"], s_single["processes"]) == (2, 1)
  assert "final test accuracy" in _tail(procs[0])
  assert "final test accuracy" not in _tail(procs[1])  # process 1 prints no report
  assert sorted(os.listdir(multi)) == sorted(os.listdir(single))

  rows_multi, rows_single = _rows(multi), _rows(single)
  assert len(rows_multi) == len(rows_single) == 4
  for i, (a, b) in enumerate(zip(rows_multi, rows_single)):
    _assert_same(a, b, f"metrics.jsonl row {i}")
  assert all(r["epsilon"] > 0 for r in rows_multi)
  assert len({r["train_loss"] for r in rows_multi}) > 1  # it trained
  for key in ("epsilon", "epsilon_rdp", "epsilon_pld", "final_test_accuracy",
              "final_test_loss", "noise_multiplier", "sampling_rate"):
    if isinstance(s_single[key], float):
      assert s_multi[key] == pytest.approx(s_single[key], rel=1e-9 if "eps" in key
                                           else 1e-5), key
    else:
      assert s_multi[key] == s_single[key], key

  step_m, params_m = _final_params(str(multi))
  step_s, params_s = _final_params(str(single))
  assert step_m == step_s == 4
  leaves_m, leaves_s = (np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(p)])
                        for p in (params_m, params_s))
  np.testing.assert_allclose(leaves_m, leaves_s, rtol=1e-5, atol=1e-6)
  assert np.max(np.abs(leaves_m)) > 0


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_after_the_same_block(tmp_path):
  """SLURM's SIGTERM may reach one process before the other: both stop after the same
  block (agreed after each block), process 0 writes the interrupted summary, and the
  run can be resumed from its checkpoint."""
  out = tmp_path / "run"
  port = _free_port()
  argv = [*SMALL[:SMALL.index("--rounds")], "--rounds", "400",
          *SMALL[SMALL.index("--rounds") + 2:], "--out", str(out),
          "--coordinator-address", f"localhost:{port}", "--num-processes", "2"]
  procs = [_start([*argv, "--process-id", str(i)], 1, tmp_path / f"p{i}.log")
           for i in range(2)]
  try:
    deadline = time.monotonic() + TIMEOUT_S
    while not (out / "metrics.jsonl").exists() or len(_rows(out)) < 4:
      if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
        _fail(procs, [p.poll() for p in procs], "the run did not get going")
      time.sleep(0.2)
    procs[1].send_signal(signal.SIGTERM)  # process 1 only
  finally:
    codes = _wait_all(procs, ok=(128 + signal.SIGTERM,))
  if codes != [128 + signal.SIGTERM] * 2:
    _fail(procs, codes, "both processes should stop on SIGTERM (exit 143)")
  summary = json.load(open(out / "summary.json"))
  stop = summary["interrupted"]
  assert stop["signal"] == "SIGTERM" and 4 <= stop["rounds_done"] < 400
  assert summary["rounds"] == stop["rounds_done"] == len(_rows(out))
  step, _ = _final_params(str(out))
  assert step == stop["rounds_done"]  # the summary is of the newest checkpoint


@pytest.mark.parametrize("flags,needle", [
    (["--coordinator-address", "localhost"], "--coordinator-address"),
    (["--coordinator-address", "localhost:70000"], "--coordinator-address"),
    (["--num-processes", "0"], "--num-processes"),
    (["--num-processes", "2", "--process-id", "2"], "--process-id"),
    (["--process-id", "-1"], "--process-id"),
])
def test_bad_distributed_flags_are_refused_by_name(flags, needle, tmp_path, capsys):
  """Refused before JAX's distributed runtime is started (nothing joins, nothing runs)."""
  rc = cli.main(["run", *SMALL, "--out", str(tmp_path / "run"), *flags])
  err = capsys.readouterr().err
  assert rc == 2 and needle in err, err
  assert not (tmp_path / "run").exists()
