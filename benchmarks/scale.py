"""Scale: a population of 1,000,000 clients, cohorts up to 10,000, memory flat in K.

The population is a `fedjax_dp.federated.PooledPopulation`: 10,000 synthetic 28x28
examples (the workload-(a) generator) shared by 10^6 clients of 100 examples each, so
it takes a few MB instead of 300 GB. Each cohort size runs in its own process (peak
resident memory is per process): user-level DP-FedAvg with the workload-(a) MLP and
local work, a fixed-size cohort of K clients, the engine's automatic chunking and one
JAX device per CPU core. Reported per K: seconds per round (after one warm-up round)
and peak RSS, plus RSS before the first round.

  python -m benchmarks.scale [--cohorts 1000,3000,10000] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks import common, workloads

POPULATION = 1_000_000
POOL = 10_000


def worker(k: int, rounds: int, population: int, chunk_size=None) -> dict:
  """One cohort size, in this process."""
  import jax
  import numpy as np
  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
  from fedjax_dp.federated import make_block_fn, make_pooled_population, sharding
  from fedjax_dp.federated.driver import constant_schedule
  from fedjax_dp.models import create_model

  w = workloads.MLP
  xs, ys = zip(*(workloads.synthetic_client_data(w, c) for c in range(
      POOL // w["examples_per_client"])))
  mesh = sharding.client_mesh() if jax.device_count() > 1 else None
  pop = make_pooled_population(np.concatenate(xs), np.concatenate(ys),
                               np.full(population, w["examples_per_client"], np.int32))
  pop = sharding.replicate(pop, mesh)
  model = create_model("mlp", w["feature_shape"], w["num_classes"], hidden=w["hidden"])
  alg = dp_fedavg(model, pop, clip_norm=w["clip_norm"],
                  noise_multiplier=w["noise_multiplier"], sampler="fixed_size",
                  clients_per_round=k, local_epochs=w["local_epochs"],
                  batch_size=w["batch_size"], client_learning_rate=w["client_learning_rate"],
                  mesh=mesh, chunk_size=chunk_size)
  block = make_block_fn(alg.round_fn)
  state = alg.init(jax.random.key(0))
  sched = constant_schedule(alg.hparams, 1)
  rss_before = common.peak_rss_mib()
  times, losses = [], []
  for r in range(rounds + 1):
    t0 = time.perf_counter()
    state, m = block(state, pop, sched, jax.random.key(1))
    jax.block_until_ready(state.params)
    if r > 0:
      times.append(time.perf_counter() - t0)
      losses.append(float(m.train_loss[0]))
  return {"cohort_size": k, "population": population, "round_seconds": times,
          "seconds_per_round": sum(times) / len(times),
          "client_updates_per_s": k * len(times) / sum(times), "train_loss": losses,
          "peak_rss_mib": common.peak_rss_mib(), "rss_before_rounds_mib": rss_before,
          "devices": jax.device_count(), "backend": jax.default_backend()}


def run(cohorts=(1000, 3000, 10000), rounds: int = 2, population: int = POPULATION,
        devices: int | None = None) -> dict:
  """Runs each cohort size in a fresh subprocess and collects the records."""
  from fedjax_dp.federated.sharding import split_host_cpu
  env = split_host_cpu(devices, dict(os.environ))
  results = []
  for k in cohorts:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--worker", str(k), "--rounds",
         str(rounds), "--population", str(population)],
        env=env, capture_output=True, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if out.returncode != 0:
      raise RuntimeError(f"scale worker K={k} failed:\n{out.stderr[-3000:]}")
    results.append(json.loads(out.stdout.strip().splitlines()[-1]))
  peaks = [r["peak_rss_mib"] for r in results]
  return {"benchmark": "scale", "machine": common.machine_info(), "population": population,
          "pool_examples": POOL, "results": results,
          "peak_rss_growth_first_to_last": peaks[-1] / peaks[0] - 1.0}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--cohorts", default="1000,3000,10000")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--population", type=int, default=POPULATION)
  p.add_argument("--devices", type=int, default=None)
  p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
  p.add_argument("--chunk-size", type=int, default=None)
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  if a.worker is not None:
    print(json.dumps(worker(a.worker, a.rounds, a.population, a.chunk_size)), flush=True)
    return
  common.emit(run(tuple(int(c) for c in a.cohorts.split(",")), a.rounds, a.population,
                  a.devices), a.out)


if __name__ == "__main__":
  main()
