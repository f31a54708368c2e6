"""fedjax_dp on the shared peer workloads (`benchmarks.workloads`).

Runs user-level DP-FedAvg with `fedjax_dp.algorithms.dp_fedavg` (fixed-size cohorts,
the same sampler as the peers), on the same synthetic examples, and prints one JSON
record (`benchmarks.common.throughput_record`). A round is timed until the new global
parameters are materialised; rounds run one per jitted call here (block size 1) so
that every round is timed separately, as for the peers.

  python -m benchmarks.throughput --workload mlp [--devices N] [--chunk-size N] [--out f.json]

``--devices`` (default: one per CPU core) splits the host CPU into that many JAX
devices (``--xla_force_host_platform_device_count``) and shards each cohort over them.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import time


from benchmarks import common, workloads


def build(w, chunk_size=None, mesh=None):
  """(algorithm, device population) for workload ``w``."""
  import jax.numpy as jnp
  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
  from fedjax_dp.federated import PopulationData

  fd, model = workloads.federated_data_and_model(w)
  alg = dp_fedavg(model, fd, clip_norm=w["clip_norm"],
                  noise_multiplier=w["noise_multiplier"], sampler="fixed_size",
                  clients_per_round=w["cohort_size"], local_epochs=w["local_epochs"],
                  batch_size=w["batch_size"], client_learning_rate=w["client_learning_rate"],
                  server_learning_rate=w["server_learning_rate"], chunk_size=chunk_size,
                  mesh=mesh)
  return alg, PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))


def time_rounds(alg, data, warm: int, timed: int, seed: int = 0):
  """Runs ``warm + timed`` rounds of ``alg`` (one jitted call each, block size 1), each
  timed until the new global parameters are materialised. Returns ``(times of the timed
  rounds [s], train loss of every round)``."""
  import jax
  from fedjax_dp.federated import make_block_fn
  from fedjax_dp.federated.driver import constant_schedule

  block = make_block_fn(alg.round_fn)
  sched = constant_schedule(alg.hparams, 1)
  key = jax.random.key(seed)
  state = alg.init(jax.random.key(seed))
  times, losses = [], []
  for r in range(warm + timed):
    t0 = time.perf_counter()
    state, metrics = block(state, data, sched, key)
    jax.block_until_ready(state.params)
    dt = time.perf_counter() - t0
    losses.append(float(metrics.train_loss[0]))
    if r >= warm:
      times.append(dt)
  return times, losses


def run(w, chunk_size=None, timed_rounds=None, warmup_rounds=None, seed=0):
  """Times ``timed_rounds`` rounds after ``warmup_rounds``; returns the JSON record."""
  import jax

  timed = timed_rounds or w["timed_rounds"]
  warm = w["warmup_rounds"] if warmup_rounds is None else warmup_rounds
  from fedjax_dp.federated.sharding import client_mesh
  mesh = client_mesh() if jax.device_count() > 1 else None
  alg, data = build(w, chunk_size, mesh)
  from fedjax_dp.federated.sharding import replicate
  data = replicate(data, mesh)
  times, losses = time_rounds(alg, data, warm, timed, seed)
  losses = losses[warm:]
  versions = {p: md.version(p) for p in ("jax", "jaxlib", "flax", "optax")}
  versions["fedjax_dp"] = md.version("fedjax_dp")
  return common.throughput_record(
      "fedjax_dp", versions, w, times, backend=jax.default_backend(),
      device=str(jax.devices()[0].device_kind), devices=jax.device_count(),
      chunk_size=chunk_size or "auto",
      first_round_loss=losses[0], last_round_loss=losses[-1],
      notes="DP-FedAvg (fixed-size cohort, per-client clip, central Gaussian noise on the "
            "sum, fixed denominator), one jitted call per round")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workload", choices=sorted(workloads.WORKLOADS), default="mlp")
  p.add_argument("--chunk-size", type=int, default=None)
  p.add_argument("--devices", type=int, default=os.cpu_count() or 1,
                 help="JAX CPU devices (one per core by default)")
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(a.devices)  # before JAX's first computation
  rec = run(workloads.WORKLOADS[a.workload], a.chunk_size, a.timed_rounds, a.warmup_rounds,
            a.seed)
  common.emit(rec, a.out)


if __name__ == "__main__":
  main()
