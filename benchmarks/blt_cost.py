"""What DP-FTRL's correlated-noise mechanisms cost per round: tree vs banded MF vs BLT.

One process, one model (the MLP 784-200-200-10 of `benchmarks.workloads`, flax
``nn.Dense`` layers, on a smaller synthetic population so that a CPU run stays short), the
three mechanisms of ``fedjax-dp run --algorithm dp_ftrl`` built for the same ``--rounds``
and cycle length R (tree restarted every R rounds: ``floor(log2 R) + 1`` node buffers;
banded with ``b = min(R, rounds)`` bands: b buffers; BLT optimised by jax-privacy for the
rounds at min-separation R: nbuf buffers). Two measurements, each variant timed in
alternation with the others (`benchmarks.mechanisms.time_interleaved`, so that the
machine's noise hits them alike):

1. the full jitted round (cohort training, clipping, noise, server step): median seconds;
2. the noise alone (one ``sample`` of the generator for the model's parameters): median
   milliseconds;

and the bytes of the noise state the mechanism carries between rounds (float32 buffers
shaped like the model: ``levels x P``, ``b x P``, ``nbuf x P``).

  python -m benchmarks.blt_cost [--rounds 200] [--cycle-length 20] [--quick] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Dict, List

from benchmarks import common, workloads
from benchmarks.mechanisms import time_interleaved

MECHANISMS = ("tree", "banded", "blt")


def _population(num_clients: int, examples: int):
  w = dict(workloads.MLP, num_clients=num_clients, examples_per_client=examples)
  return w, workloads.federated_data_and_model(w)


def _state_bytes(state) -> int:
  import jax
  import numpy as np
  return int(sum(np.asarray(l).nbytes for l in jax.tree_util.tree_leaves(state)))


def build(rounds: int, cycle_length: int, num_clients: int, examples: int):
  """``({mechanism: Algorithm}, device population, workload)``."""
  import jax.numpy as jnp
  from fedjax_dp.algorithms.dp_ftrl.algorithm import dp_ftrl
  from fedjax_dp.federated import PopulationData
  w, (fd, model) = _population(num_clients, examples)
  algs = {m: dp_ftrl(model, fd, mechanism=m, clip_norm=w["clip_norm"], noise_multiplier=1.0,
                     rounds=rounds, cycle_length=cycle_length, batch_size=w["batch_size"],
                     client_learning_rate=w["client_learning_rate"],
                     server_optimizer="fedavgm", server_learning_rate=1.0)
          for m in MECHANISMS}
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return algs, data, w


def measure(rounds: int = 200, cycle_length: int = 20, num_clients: int = 200,
            examples: int = 20, warm: int = 2, timed: int = 10) -> Dict[str, Any]:
  """Both measurements (module docstring) and the state bytes, per mechanism."""
  import jax
  algs, data, _ = build(rounds, cycle_length, num_clients, examples)
  key = jax.random.key(0)
  states = {m: a.init(jax.random.key(1)) for m, a in algs.items()}
  rounds_fn = {m: jax.jit(a.round_fn) for m, a in algs.items()}

  def full(m):
    def f():
      states[m], _ = rounds_fn[m](states[m], data, algs[m].hparams, key)
      jax.block_until_ready(states[m].params)
    return f

  t_round = time_interleaved({m: full(m) for m in algs}, warm, timed)
  params = states["tree"].params
  gens = {m: states[m].mechanism["noise"] for m in algs}
  configs = {m: a.config for m, a in algs.items()}
  from fedjax_dp.algorithms.dp_ftrl.algorithm import noise_generator
  sample, nstate = {}, {}
  for m, a in algs.items():
    c = a.config
    g, _, _ = noise_generator(m, c["cycle_length"], rounds,
                              c["restart_every"] if m == "tree" else None,
                              c["bands"] if m == "banded" else None)
    nstate[m] = g.init(params)
    sample[m] = jax.jit(lambda s, k, g=g: g.sample(s, k, params, 1.0))

  def noise(m):
    def f():
      n, nstate[m] = sample[m](nstate[m], key)
      jax.block_until_ready(n)
    return f

  t_noise = time_interleaved({m: noise(m) for m in algs}, warm, 3 * timed)
  num_params = sum(int(l.size) for l in jax.tree_util.tree_leaves(params))
  rows = []
  for m in algs:
    c = configs[m]
    slots = {"tree": c["restart_every"] and (int(c["restart_every"]).bit_length()),
             "banded": c["bands"], "blt": len(c.get("blt_buf_decay") or ())}[m]
    rows.append({"mechanism": m, "buffers": slots,
                 "state_bytes": _state_bytes(gens[m]),
                 "median_round_s": common._median(t_round[m]),
                 "median_noise_ms": 1e3 * common._median(t_noise[m]),
                 "round_seconds": t_round[m], "noise_seconds": t_noise[m]})
  return {"machine": common.machine_info(), "rounds": rounds, "cycle_length": cycle_length,
          "num_clients": num_clients, "num_params": num_params, "rows": rows}


def markdown(rec: Dict[str, Any]) -> List[str]:
  """The table."""
  lines = [f"DP-FTRL noise state and time per round: MLP 784-200-200-10 "
           f"({rec['num_params']:,} parameters), {rec['rounds']} planned rounds, R = "
           f"{rec['cycle_length']}, {rec['num_clients']} clients; interleaved timing.", "",
           "| mechanism | buffers | state MiB | state / model | median s/round | "
           "median noise ms |", "|---|---|---|---|---|---|"]
  for r in rec["rows"]:
    lines.append(f"| {r['mechanism']} | {r['buffers']} | {r['state_bytes'] / 2**20:.2f} | "
                 f"{r['state_bytes'] / (4 * rec['num_params']):.1f} | "
                 f"{r['median_round_s']:.4f} | {r['median_noise_ms']:.2f} |")
  return lines


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=200)
  p.add_argument("--cycle-length", type=int, default=20)
  p.add_argument("--num-clients", type=int, default=200)
  p.add_argument("--quick", action="store_true", help="2 warm-up, 4 timed rounds")
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  rec = measure(a.rounds, a.cycle_length, a.num_clients, timed=4 if a.quick else 10)
  print("\n".join(markdown(rec)))
  if a.out:
    with open(a.out, "w") as f:
      json.dump(rec, f, indent=1)


if __name__ == "__main__":
  main()
