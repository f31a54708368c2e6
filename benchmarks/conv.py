"""A user's ``flax.linen.Conv`` CNN against our patch `fedjax_dp.models.layers.Conv`.

Issue 32's "done when": a CNN written with ``nn.Conv`` and passed through
`fedjax_dp.models.from_module` is never slower than the same network written with our
patch convolution, in record-level DP-SGD and in user-level training. Every variant is
built and compiled once in this process, then the variants run **interleaved round by
round** (in a new random order each round, seeded), so a slow minute on a shared
machine hits all of them and no variant always follows the same neighbour; ratios are the median of per-round ratios against the reference variant of
the same regime.

Variants (architecture `benchmarks.flax_nets.UserCNN`, workload
`benchmarks.workloads.DPSGD_USER_CNN`: 20 clients x 4 local steps, CIFAR-shaped data):

* ``dpsgd/<conv>/<method>``: record-level DP-SGD
  (`fedjax_dp.algorithms.dp_fedavg.dp_fedavg_record_level`; q 0.25, C 1, z 1), with
  ``<conv>`` = ``nn.Conv`` (default lowering: patches x kernel), ``nn.Conv-native``
  (``conv_lowering="native"``: flax's convolution in the forward pass) or
  ``patch-Conv`` (`fedjax_dp.models.layers.Conv`, the reference), and ``<method>`` the
  per-example method (``auto``, ``ghost``, ``vmap``);
* ``user/<conv>``: user-level DP-FedAvg (`fedjax_dp.algorithms.dp_fedavg.dp_fedavg`,
  4 local SGD steps of batch 16, clip 1, z 1, the same cohort) with each convolution.

  python -m benchmarks.conv [--rounds 6] [--quick] [--out f.json] [--markdown]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Callable, Dict, List

from benchmarks import common, workloads

CONVS = ("nn.Conv", "nn.Conv-native", "patch-Conv")
REFERENCE = {"dpsgd": "dpsgd/patch-Conv/auto", "user": "user/patch-Conv"}


def _model(conv: str, w):
  from benchmarks.flax_nets import UserCNN
  from fedjax_dp.models import from_module, layers
  module = UserCNN(num_classes=w["num_classes"],
                   conv_cls=layers.Conv if conv == "patch-Conv" else None)
  return from_module(module, w["feature_shape"], w["num_classes"], name=f"user_cnn[{conv}]",
                     conv_lowering="native" if conv == "nn.Conv-native" else "patches")


def _data(w):
  from fedjax_dp.data.federated_data import from_client_lists
  xs, ys = zip(*(workloads.synthetic_client_data(w, k) for k in range(w["num_clients"])))
  return from_client_lists(f"synthetic_{w['name']}", list(xs), list(ys),
                           num_classes=w["num_classes"])


def _algorithm(regime: str, model, fd, w, method: str):
  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, dp_fedavg_record_level
  common_kw = dict(sampler="fixed_size", clients_per_round=w["cohort_size"],
                   local_steps=w["local_steps"], batch_size=w["expected_batch_size"],
                   client_learning_rate=w["client_learning_rate"],
                   server_learning_rate=w["server_learning_rate"])
  if regime == "dpsgd":
    return dp_fedavg_record_level(
        model, fd, record_clip_norm=w["clip_norm"],
        record_noise_multiplier=w["noise_multiplier"],
        record_sampling_rate=w["record_sampling_rate"], per_example_method=method,
        **common_kw)
  return dp_fedavg(model, fd, clip_norm=w["clip_norm"],
                   noise_multiplier=w["noise_multiplier"], **common_kw)


def variants(quick: bool) -> List[tuple]:
  """``(name, regime, conv, method)`` of every variant measured."""
  out = []
  methods = ("auto",) if quick else ("auto", "ghost", "vmap")
  for conv in CONVS:
    for m in methods:
      out.append((f"dpsgd/{conv}/{m}", "dpsgd", conv, m))
  for conv in CONVS:
    out.append((f"user/{conv}", "user", conv, "auto"))
  return out


def _runner(regime, conv, method, w, fd) -> Callable[[int], float]:
  import jax
  import jax.numpy as jnp
  from fedjax_dp.federated import PopulationData, make_block_fn
  from fedjax_dp.federated.driver import constant_schedule
  alg = _algorithm(regime, _model(conv, w), fd, w, method)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  block = jax.jit(make_block_fn(alg.round_fn))
  sched = constant_schedule(alg.hparams, 1)
  state = alg.init(jax.random.key(0))

  def run(r: int) -> float:
    _, metrics = block(state, data, sched, jax.random.key(r))
    return float(metrics.train_loss[0])  # blocks until the round is done
  return run


def measure(rounds: int, quick: bool) -> Dict:
  """Builds every variant, warms each (compile + 1 round), then times ``rounds`` rounds
  of each, interleaved with a rotating order. Returns the JSON record."""
  import jax
  w = dict(workloads.DPSGD_USER_CNN)
  if quick:
    w.update(num_clients=2, cohort_size=2, local_steps=2)
  fd = _data(w)
  runs, compile_s = {}, {}
  for name, regime, conv, method in variants(quick):
    t0 = time.perf_counter()
    runs[name] = _runner(regime, conv, method, w, fd)
    runs[name](0)
    compile_s[name] = time.perf_counter() - t0
    print(f"[conv] {name}: compiled + 1 round in {compile_s[name]:.1f} s", flush=True)
  names = list(runs)
  times: Dict[str, List[float]] = {n: [] for n in names}
  losses: Dict[str, List[float]] = {n: [] for n in names}
  rng = random.Random(0)
  for r in range(rounds):
    order = rng.sample(names, len(names))  # a fresh order each round: no fixed neighbours
    for n in order:
      t0 = time.perf_counter()
      losses[n].append(runs[n](r + 1))
      times[n].append(time.perf_counter() - t0)
  return {"workload": w["name"], "quick": quick, "rounds": rounds,
          "devices": [str(d) for d in jax.devices()], "machine": common.machine_info(),
          "compile_plus_first_round_s": compile_s, "seconds_per_round": times,
          "train_loss": losses, "summary": summarise(times)}


def summarise(times: Dict[str, List[float]]) -> Dict[str, Dict[str, float]]:
  """Per variant: median/min/max s per round and the median per-round ratio of its
  time to its regime's reference (`REFERENCE`; < 1 is faster than the reference)."""
  out = {}
  for n, ts in times.items():
    ref = times.get(REFERENCE[n.split("/")[0]])
    ratios = sorted(t / r for t, r in zip(ts, ref)) if ref else []
    out[n] = {"median_s": sorted(ts)[len(ts) // 2], "min_s": min(ts), "max_s": max(ts),
              "time_over_reference": ratios[len(ratios) // 2] if ratios else float("nan")}
  return out


def markdown(rec: Dict) -> List[str]:
  """The RESULTS.md lines of one `measure` record."""
  lines = ["### A user's nn.Conv CNN against our patch Conv (same process, interleaved)", "",
           f"`python -m benchmarks.conv`: workload {rec['workload']} (UserCNN, "
           f"{'quick sizes' if rec['quick'] else '20 clients x 4 local steps x batch 16'}), "
           f"{rec['rounds']} rounds per variant, interleaved round by round (a new random "
           "order each round); time / "
           "reference is the median of per-round ratios against `patch-Conv` (auto) of the "
           "same regime (< 1: faster). dpsgd = record-level DP-SGD, user = user-level "
           "DP-FedAvg. `nn.Conv` and `patch-Conv` trace to the same jaxpr (tested in "
           "tests/models/test_conv_lowering.py): any difference between them is noise.", "",
           "| variant | median s/round | min | max | time / reference |", "|---|---|---|---|---|"]
  for n, s in rec["summary"].items():
    lines.append(f"| {n} | {s['median_s']:.3f} | {s['min_s']:.3f} | {s['max_s']:.3f} | "
                 f"{s['time_over_reference']:.2f} |")
  return lines + [""]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=int, default=6)
  ap.add_argument("--quick", action="store_true", help="tiny sizes (checks the plumbing)")
  ap.add_argument("--out", default=None, help="also write the JSON record here")
  ap.add_argument("--markdown", action="store_true", help="print the Markdown table too")
  args = ap.parse_args(argv)
  rec = measure(args.rounds, args.quick)
  if args.markdown:
    print("\n".join(markdown(rec)))
  common.emit(rec, args.out)
  return rec


if __name__ == "__main__":
  main()
