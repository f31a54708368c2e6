"""Tiny runs shared by the tests of a run's trackers and plots (test_writers.py,
test_plots.py): each configuration runs once per test process."""

import os

from fedjax_dp.runs import RunConfig, run

#: 4 rounds of DP-FedAvg on 20 synthetic clients with a linear model, evaluated at
#: rounds 2 and 4.
BASE = dict(algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
            batch_size=8, rounds=4, eval_every=2, sampling_rate=0.5, clip_norm=1.0)

_DONE = {}


def tiny_run(tmp_path_factory, **overrides):
  """``(out folder, RunResult)`` of `BASE` with ``overrides`` (run on the first call
  with these overrides, then reused)."""
  key = tuple(sorted(overrides.items()))
  if key not in _DONE:
    name = "_".join(f"{k}-{v}" for k, v in key).replace(",", "+") or "base"
    out = os.path.join(str(tmp_path_factory.mktemp("tiny_runs")), name)
    res = run(RunConfig.from_dict({**BASE, **overrides, "out": out}), progress=False)
    _DONE[key] = (out, res)
  return _DONE[key]
