"""What the issue-20 mechanisms cost per round, side by side with plain DP-FedAvg.

Two measurements in one process, each variant timed in alternation with the others (so
that the machine's noise hits them alike):

1. **Rounds** on a shared peer workload (`benchmarks.workloads`, fixed-size cohorts as in
   `benchmarks.throughput`): plain DP-FedAvg (i.i.d. Gaussian noise), adaptive clipping
   (Andrew et al. 2021: one more noisy count and a clip-norm update), DP-FTRL's tree
   aggregation (Kairouz et al. 2021: a ``[levels, P]`` node buffer) and banded matrix
   factorisation (Choquette-Choo et al. 2023: a ``[bands, P]`` buffer through jax-privacy's
   streaming C^-1). Reported: median seconds per round and the ratio to DP-FedAvg.
2. **Noise alone** for P parameters (10^6 and 4 x 10^6): one round's noise of each
   generator, against the same-run memory roofline: the bytes a generator must touch
   (draw P normals, read and write its state, write the noise) over the bandwidth of a
   large array copy measured in the same run.

  python -m benchmarks.mechanisms [--workload mlp] [--quick] [--out f.json]
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Dict, List

from benchmarks import common, workloads

#: Bands of the banded-MF variants (1 would be i.i.d. noise through the MF code path).
BANDS = (4, 16, 64)
#: The tree's restart period (levels = floor(log2(64)) + 1 = 7).
TREE_RESTART = 64


def _generators(rounds: int) -> Dict[str, Any]:
  """name -> correlated-noise generator (None: i.i.d. noise)."""
  from fedjax_dp.algorithms.dp_ftrl.noise import BandedNoise, TreeNoise
  gens: Dict[str, Any] = {"iid": None, "tree": TreeNoise(TREE_RESTART)}
  for b in BANDS:
    gens[f"banded_b{b}"] = BandedNoise.create(max(rounds, b), b, strategy="sqrt")
  return gens


def _state_floats(gen, params) -> int:
  """float32 entries of a generator's state for ``params``."""
  import jax
  import numpy as np
  if gen is None:
    return 0
  state = gen.init(params)
  return int(sum(np.size(l) for l in jax.tree_util.tree_leaves(state)
                 if np.issubdtype(np.asarray(l).dtype, np.floating)))


def build_rounds(w, rounds: int):
  """``({variant: (round_fn, init_state, hparams, generator or None)}, device population,
  parameter count)``."""
  import jax
  import jax.numpy as jnp
  from fedjax_dp.federated import PopulationData, server
  from fedjax_dp.federated.client import ClientHParams, make_client_update
  from fedjax_dp.federated.round import (RoundConfig, RoundHParams, init_mechanism_state,
                                         make_round)
  from fedjax_dp.federated.sampling import FixedSizeSampler
  from fedjax_dp.privacy.adaptive_clipping import AdaptiveClipping
  import optax

  fd, model = workloads.federated_data_and_model(w)
  client = make_client_update(model, optax.sgd(1.0), batch_size=w["batch_size"],
                              max_examples=fd.max_examples, local_epochs=w["local_epochs"])
  samp = FixedSizeSampler.create(fd.num_clients, w["cohort_size"])
  opt = optax.sgd(1.0)
  hp = RoundHParams(w["clip_norm"], w["noise_multiplier"], samp.sampling_rate,
                    ClientHParams(learning_rate=w["client_learning_rate"]),
                    w["server_learning_rate"])
  base = dict(clip_updates=True, noise="central", weighting="uniform",
              denominator="expected", population_weight=float(fd.num_clients))
  params = model.init(jax.random.key(0))
  configs = {"dp_fedavg": RoundConfig(**base),
             "adaptive_clipping": RoundConfig(**base, adaptive_clip=AdaptiveClipping(
                 initial_clip_norm=w["clip_norm"], count_stddev=w["cohort_size"] / 20,
                 expected_cohort_size=w["cohort_size"]))}
  gens = _generators(rounds)
  for name, gen in gens.items():
    if gen is not None:
      configs[name] = RoundConfig(**base, central_noise=gen)
  variants = {}
  for name, cfg in configs.items():
    hp_v = hp
    if cfg.adaptive_clip is not None:  # the combined z must stay below the count's z_b
      hp_v = hp._replace(noise_multiplier=min(w["noise_multiplier"],
                                              0.5 * 2 * cfg.adaptive_clip.count_stddev))
    state = server.init_server_state(params, opt, init_mechanism_state(cfg, params))
    variants[name] = (make_round(client, samp, opt, cfg), state, hp_v, cfg.central_noise)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return variants, data, sum(int(l.size) for l in jax.tree_util.tree_leaves(params))


def time_interleaved(fns: Dict[str, Callable[[], Any]], warm: int, timed: int
                     ) -> Dict[str, List[float]]:
  """Calls every ``fns[name]()`` ``warm`` times, then ``timed`` rounds of all of them in
  turn (A B C A B C ...); returns the timed seconds per name."""
  for f in fns.values():
    for _ in range(warm):
      f()
  out: Dict[str, List[float]] = {k: [] for k in fns}
  for _ in range(timed):
    for k, f in fns.items():
      t0 = time.perf_counter()
      f()
      out[k].append(time.perf_counter() - t0)
  return out


def rounds_section(w, warm: int, timed: int) -> Dict[str, Any]:
  """Median round time of every variant on workload ``w`` and its ratio to DP-FedAvg."""
  import jax
  variants, data, num_params = build_rounds(w, warm + timed + 1)
  key = jax.random.key(0)
  states = {k: v[1] for k, v in variants.items()}
  jitted = {k: jax.jit(v[0]) for k, v in variants.items()}

  def step(name):
    def f():
      states[name], m = jitted[name](states[name], data, variants[name][2], key)
      jax.block_until_ready(states[name].params)
      return m
    return f

  times = time_interleaved({k: step(k) for k in variants}, warm, timed)
  base = common._median(times["dp_fedavg"])
  rows = []
  for k, ts in times.items():
    gen = variants[k][3]
    rows.append({"variant": k, "median_round_s": common._median(ts),
                 "ratio_to_dp_fedavg": common._median(ts) / base,
                 "state_floats": _state_floats(gen, variants[k][1].params),
                 "round_seconds": ts})
  return {"workload": w["name"], "num_params": num_params,
          "cohort_size": w["cohort_size"], "rows": rows}


def copy_bandwidth(num_floats: int, repeats: int = 5) -> float:
  """Bytes per second of ``y = x + 1`` on a float32 array (read + write), best of
  ``repeats``: the same-run memory roofline."""
  import jax
  import jax.numpy as jnp
  x = jnp.ones((num_floats,), jnp.float32)
  f = jax.jit(lambda a: a + 1.0)
  jax.block_until_ready(f(x))
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(f(x))
    best = min(best, time.perf_counter() - t0)
  return 2 * 4 * num_floats / best


def noise_section(sizes, warm: int, timed: int) -> Dict[str, Any]:
  """Seconds per round of each generator's noise alone for ``P`` float32 parameters,
  with the roofline time of the bytes it must touch."""
  import jax
  import jax.numpy as jnp
  from fedjax_dp.privacy import noise as iid_noise
  out = []
  for p in sizes:
    like = {"w": jnp.zeros((p,), jnp.float32)}
    bw = copy_bandwidth(p)
    gens = _generators(warm + timed + 1)
    fns, states = {}, {}
    for name, gen in gens.items():
      if gen is None:
        f = jax.jit(lambda k, t: iid_noise.add_gaussian_noise(k, t, 1.0))
        fns[name] = (lambda f=f: jax.block_until_ready(f(jax.random.key(1), like)))
        continue
      states[name] = gen.init(like)
      g = jax.jit(lambda s, k, gen=gen: gen.sample(s, k, like, 1.0))

      def call(name=name, g=g):
        n, states[name] = g(states[name], jax.random.key(1))
        jax.block_until_ready(n)
      fns[name] = call
    times = time_interleaved(fns, warm, timed)
    rows = []
    for name, ts in times.items():
      state = _state_floats(gens[name], like)
      # draw P normals (write), read + write the state, write the noise: 4 bytes each
      touched = 4 * (2 * p + 2 * state)
      rows.append({"generator": name, "median_s": common._median(ts),
                   "state_floats": state, "bytes_touched": touched,
                   "roofline_s": touched / bw,
                   "fraction_of_roofline": (touched / bw) / common._median(ts)})
    out.append({"num_params": p, "copy_bandwidth_gb_s": bw / 1e9, "rows": rows})
  return {"results": out}


def markdown(rec: Dict[str, Any]) -> List[str]:
  """The RESULTS.md section."""
  r = rec["rounds"]
  lines = ["### Mechanisms of issue 20: cost per round against DP-FedAvg", "",
           f"Workload `{r['workload']}` ({r['num_params']:,} parameters, cohort "
           f"{r['cohort_size']}), each variant timed in alternation with the others in one "
           "process; state = float32 entries the mechanism carries between rounds.", "",
           "| variant | median s/round | x DP-FedAvg | state floats |", "|---|---|---|---|"]
  for row in r["rows"]:
    lines.append(f"| {row['variant']} | {row['median_round_s']:.4f} | "
                 f"{row['ratio_to_dp_fedavg']:.3f} | {row['state_floats']:,} |")
  lines += ["", "Noise alone (one round's noise, P float32 parameters), against the same-run "
            "copy bandwidth:", "",
            "| P | generator | median ms | x iid | state floats | roofline ms | "
            "% of roofline |", "|---|---|---|---|---|---|---|"]
  for res in rec["noise"]["results"]:
    iid = [r["median_s"] for r in res["rows"] if r["generator"] == "iid"][0]
    for row in res["rows"]:
      lines.append(f"| {res['num_params']:,} | {row['generator']} | "
                   f"{1e3 * row['median_s']:.2f} | {row['median_s'] / iid:.2f} | "
                   f"{row['state_floats']:,} | "
                   f"{1e3 * row['roofline_s']:.2f} | "
                   f"{100 * row['fraction_of_roofline']:.0f}% |")
  return lines + [""]


def run(workload: str = "mlp", quick: bool = False) -> Dict[str, Any]:
  """Both sections; ``quick``: few rounds and P = 10^5 only (CI)."""
  w = workloads.WORKLOADS[workload]
  warm, timed = (1, 3) if quick else (2, 15)
  sizes = (10**5,) if quick else (10**6, 4 * 10**6)
  rec = {"machine": common.machine_info(), "rounds": rounds_section(w, warm, timed),
         "noise": noise_section(sizes, warm, 3 if quick else 10)}
  rec["markdown"] = "\n".join(markdown(rec))
  return rec


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workload", choices=sorted(workloads.WORKLOADS), default="mlp")
  p.add_argument("--quick", action="store_true")
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  rec = run(a.workload, a.quick)
  print(rec["markdown"])
  common.emit(rec, a.out)


if __name__ == "__main__":
  main()
