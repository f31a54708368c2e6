"""Algorithms composed from engine stages against DP-FedAvg on the same job (issue 31).

Builds DP-FedAvg, DP-FedProx and DP-SCAFFOLD exactly as ``fedjax-dp run --algorithm
NAME`` does with its defaults (HAR, the 1-D CNN, 30 clients, q = 0.5, one local epoch),
on a mesh of ``--devices`` JAX devices (default 2: the host CPU split in two, the
default mesh of ``fedjax-dp run`` on this 2-core machine), compiles each one's block of
``--block`` rounds, then times blocks in alternation (fedavg, fedprox, scaffold,
fedavg, ...) so that the machine's load hits them alike: the ratios, not the seconds,
are the result. Prints one JSON record and, with ``--out``, stores it.

  python -m benchmarks.stages [--devices 2] [--repeats 6] [--block 5] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ALGORITHMS = ("dp_fedavg", "dp_fedprox", "dp_scaffold")


def _build(name: str, devices: int):
  """(jitted block function, initial state, device population, hyper-parameters,
  floats of per-client state)."""
  import jax
  import numpy as np

  from fedjax_dp.federated import make_block_fn
  from fedjax_dp.runs import RunConfig
  from fedjax_dp.runs import setup as run_setup

  cfg = RunConfig.from_dict(dict(algorithm=name, devices=devices)).validate()
  setup = run_setup.make_setup(run_setup.with_default_noise_multiplier(cfg))
  alg, _ = run_setup.build(setup)
  data = run_setup.device_population(setup.data, setup.mesh)
  state = alg.init(jax.random.key(0))
  clients = sum(int(np.size(l)) for l in jax.tree_util.tree_leaves(state.clients))
  return (jax.jit(make_block_fn(alg.round_fn)), state, data, alg.hparams, clients)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--devices", type=int, default=2)
  p.add_argument("--repeats", type=int, default=6)
  p.add_argument("--block", type=int, default=5)
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  os.environ.setdefault("XLA_FLAGS",
                        f"--xla_force_host_platform_device_count={a.devices}")
  import jax
  import numpy as np

  from fedjax_dp.federated.driver import constant_schedule

  built = {n: _build(n, a.devices) for n in ALGORITHMS}
  key = jax.random.key(1)
  runs = {}
  for n, (fn, state, data, hp, _) in built.items():  # compile and warm up
    sched = constant_schedule(hp, a.block)
    state, m = fn(state, data, sched, key)
    jax.block_until_ready(state.params)
    runs[n] = [state, sched]
  times = {n: [] for n in ALGORITHMS}
  for _ in range(a.repeats):
    for n in ALGORITHMS:
      fn, _, data, _, _ = built[n]
      t0 = time.perf_counter()
      state, m = fn(runs[n][0], data, runs[n][1], key)
      jax.block_until_ready(state.params)
      times[n].append((time.perf_counter() - t0) / a.block)
      runs[n][0] = state
  base = float(np.median(times["dp_fedavg"]))
  record = {
      "devices": [str(d) for d in jax.devices()], "block": a.block, "repeats": a.repeats,
      "job": "fedjax-dp run defaults (har, har_cnn, 30 clients, q 0.5, 1 local epoch)",
      "rows": [{"algorithm": n, "median_s_per_round": float(np.median(times[n])),
                "min_s_per_round": float(np.min(times[n])),
                "max_s_per_round": float(np.max(times[n])),
                "x_dp_fedavg": float(np.median(times[n])) / base,
                "per_client_state_floats": built[n][4]} for n in ALGORITHMS]}
  print(json.dumps(record, indent=1))
  if a.out:
    with open(a.out, "w") as f:
      json.dump(record, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
