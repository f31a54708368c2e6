"""fedjax_dp on the record-level DP-SGD workloads (`benchmarks.workloads.DPSGD_WORKLOADS`).

Two measurements, each printing one JSON record (section "dpsgd" of `benchmarks.run`):

``--workload dpsgd_mlp|dpsgd_cnn|dpsgd_user_cnn``: federated record-level DP-SGD with the public
algorithm `fedjax_dp.algorithms.dp_fedavg.dp_fedavg_record_level` (every client of the
population in every round: fixed-size cohort of all ``num_clients``; ``local_steps`` local DP-SGD
steps with Poisson rate ``record_sampling_rate``, clip ``clip_norm``, noise
``noise_multiplier``, divided by the public expected batch; uniform server average,
server lr 1), on the same synthetic examples as the peers. The round is built once and
called once per round (block size 1, as `benchmarks.throughput`), sharded over all host
CPU devices (`fedjax_dp.federated.sharding.split_host_cpu`: one device per core by
default), each round timed until the new global parameters are materialised. The record
also holds the same-process dense 2048 x 2048 float32 matmul rate
(`benchmarks.roofline.matmul_gflops`, best of the rates measured before and after the
rounds), the reference of the ">= 40% of the dense-matmul rate" target.

``--micro``: `fedjax_dp.privacy.per_example.clipped_grad_sum` (``method`` auto, ghost and
vmap) on one batch of B real examples (weights 1), jitted, checked against an
independent per-example ``vmap(grad)``, clip and sum (`benchmarks.common.check_sum`);
best and median of ``--repeat`` calls after 3 warm-up calls; this process's dense
matmul rate is measured before and after (the micro rows' reference).

  python -m benchmarks.dpsgd --workload dpsgd_mlp [--devices N] [--out f.json]
  python -m benchmarks.dpsgd --workload dpsgd_user_cnn --serve   # benchmarks.interleave
  python -m benchmarks.dpsgd --micro [--models mlp,cnn] [--batch-sizes 20,256]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import time

from benchmarks import common, workloads

METHODS = ("auto", "ghost", "vmap")


def make_model(w):
  """The workload's model: fedjax_dp's MLP or CNN, or (``user_cnn``) the flax module
  `benchmarks.flax_nets.UserCNN` through `fedjax_dp.models.from_module`, as a user
  brings their own flax ``nn.Conv`` network."""
  from fedjax_dp.models import create_model, from_module
  if w["arch"] == "user_cnn":
    from benchmarks.flax_nets import UserCNN
    return from_module(UserCNN(w["num_classes"]), w["feature_shape"], w["num_classes"],
                       name="UserCNN")
  if w["arch"] == "mlp":
    return create_model("mlp", w["feature_shape"], w["num_classes"], hidden=w["hidden"])
  return create_model("cnn", w["feature_shape"], w["num_classes"])


def versions():
  v = {p: md.version(p) for p in ("jax", "jaxlib", "flax", "optax")}
  v["fedjax_dp"] = md.version("fedjax_dp")
  return v


def build(w, mesh=None, chunk_size=None):
  """(algorithm, device population) for DP-SGD workload ``w``."""
  import jax.numpy as jnp
  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg_record_level
  from fedjax_dp.data.federated_data import from_client_lists
  from fedjax_dp.federated import PopulationData

  xs, ys = zip(*(workloads.synthetic_client_data(w, k) for k in range(w["num_clients"])))
  fd = from_client_lists(f"synthetic_{w['name']}", list(xs), list(ys),
                         num_classes=w["num_classes"])
  alg = dp_fedavg_record_level(
      make_model(w), fd, record_clip_norm=w["clip_norm"],
      record_noise_multiplier=w["noise_multiplier"],
      record_sampling_rate=w["record_sampling_rate"], sampler="fixed_size",
      clients_per_round=w["cohort_size"], local_steps=w["local_steps"],
      batch_size=w["expected_batch_size"], client_learning_rate=w["client_learning_rate"],
      server_learning_rate=w["server_learning_rate"], chunk_size=chunk_size, mesh=mesh)
  return alg, PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))


def round_runner(w, chunk_size=None, seed=0):
  """(algorithm, ``run_round(r) -> loss``): one jitted call per round (block size 1, as
  `benchmarks.throughput.time_rounds`), returning once the new global parameters exist."""
  import jax
  from fedjax_dp.federated import make_block_fn
  from fedjax_dp.federated.driver import constant_schedule
  from fedjax_dp.federated.sharding import client_mesh, replicate

  mesh = client_mesh() if jax.device_count() > 1 else None
  alg, data = build(w, mesh, chunk_size)
  data = replicate(data, mesh)
  block = make_block_fn(alg.round_fn)
  sched = constant_schedule(alg.hparams, 1)
  key = jax.random.key(seed)
  state = [alg.init(jax.random.key(seed))]

  def run_round(r):
    state[0], metrics = block(state[0], data, sched, key)
    jax.block_until_ready(state[0].params)
    return float(metrics.train_loss[0])
  return alg, run_round


def federated(w, timed_rounds=None, warmup_rounds=None, chunk_size=None, seed=0,
              matmul_size=2048, serve=False):
  """Times the rounds of workload ``w``; returns the `common.dpsgd_record`. With
  ``serve``, serves the timed rounds on stdin/stdout instead (`common.serve`: warm-up
  rounds first, then one round per ``round`` command) and prints the record at ``done``."""
  from benchmarks.roofline import matmul_gflops

  timed = w["timed_rounds"] if timed_rounds is None else timed_rounds
  warm = w["warmup_rounds"] if warmup_rounds is None else warmup_rounds
  mm_before = matmul_gflops(matmul_size)
  alg, run_round = round_runner(w, chunk_size, seed)

  def finish(times, losses):
    return _federated_record(w, alg, times, losses, chunk_size, matmul_size,
                             [mm_before, matmul_gflops(matmul_size)])
  if serve:
    common.serve(run_round, warm, finish, {"framework": "fedjax_dp",
                                           "method": "dp_fedavg_record_level"},
                 extras={"profile": lambda: profile_round(run_round)})
    return None
  times, losses = common.timed_rounds(run_round, warm, timed)
  return finish(times, losses)


# Profiler events that are bookkeeping, not XLA work, or containers whose time is
# their inner operations' (loops, conditionals).
_NOT_OPS = ("ThreadpoolListener", "end: ", "ThunkExecutor", "while.", "while ",
            "conditional.", "call.")


def profile_round(run_round, top=12):
  """One more round under ``jax.profiler.trace`` (the profile behind a missed target):
  its seconds, the trace directory (TensorBoard / Perfetto) and the ``top`` XLA
  operations by total time over the CPU client's threads (``ms``, share of the summed
  op time, calls). Threads run in parallel, so shares are of thread time, not wall."""
  import collections
  import glob
  import tempfile

  import jax
  from jax.profiler import ProfileData
  trace_dir = tempfile.mkdtemp(prefix="fedjax_dp_profile_")
  t0 = time.perf_counter()
  with jax.profiler.trace(trace_dir):
    run_round(-1)
  seconds = time.perf_counter() - t0
  (path,) = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[-1:]
  plane = ProfileData.from_file(path).find_plane_with_name("/host:CPU")
  total, calls = collections.Counter(), collections.Counter()
  for line in plane.lines if plane else []:
    if line.name == "python":
      continue
    for e in line.events:
      if not e.name.startswith(_NOT_OPS):
        total[e.name] += e.duration_ns / 1e6
        calls[e.name] += 1
  op_ms = sum(total.values()) or 1.0
  return {"seconds": seconds, "trace_dir": trace_dir, "op_ms_total": op_ms,
          "top_ops": [{"op": k, "ms": v, "share": v / op_ms, "calls": calls[k]}
                      for k, v in total.most_common(top)]}


def _federated_record(w, alg, times, losses, chunk_size, matmul_size, mm):
  import jax
  mm_before, mm_after = mm
  rec = common.dpsgd_record(
      "fedjax_dp", versions(), w, times, losses, method="dp_fedavg_record_level",
      padded_batch=str(alg.config["max_batch_size"]) + (
          f" (micro-batches of {alg.config['micro_batch_size']})"
          if alg.config.get("micro_batch_size") else ""), backend=jax.default_backend(),
      device=str(jax.devices()[0].device_kind), devices=jax.device_count(),
      chunk_size=chunk_size or "auto",
      matmul_gflops=max(mm_before, mm_after), matmul_gflops_before_after=[mm_before,
                                                                          mm_after],
      matmul_size=matmul_size,
      notes="dp_fedavg_record_level (fixed-size cohort = every client, local DP-SGD with "
            "Poisson sampling, per-example clip, Gaussian noise per step, uniform "
            "average), one jitted call per round, sharded over the host CPU devices")
  rec["fraction_of_matmul"] = rec["gflops"] / rec["matmul_gflops"]
  return rec


def reference_clipped_sum(model, params, x, y, clip_norm):
  """Independent reference: per-example ``vmap(grad)``, clip, sum (flat float64)."""
  import jax
  import numpy as np

  def loss(p, xe, ye):
    return model.per_example_loss(model.apply(p, xe[None]), ye[None])[0]

  g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y)
  flat = np.concatenate([np.asarray(l, np.float64).reshape(len(x), -1)
                         for l in jax.tree_util.tree_leaves(g)], 1)
  norms = np.linalg.norm(flat, axis=1)
  return (flat * np.minimum(1.0, clip_norm / np.maximum(norms, 1e-30))[:, None]).sum(0)


def micro(models=("mlp", "cnn"), batch_sizes=workloads.DPSGD_MICRO_BATCH_SIZES,
          methods=METHODS, repeat=10, seed=0, matmul_size=2048):
  """`clipped_grad_sum` on one batch per (model, B, method); returns the record, with
  the dense matmul rate measured in this process before and after (the best)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from fedjax_dp.privacy.per_example import clipped_grad_sum, resolve_method

  from benchmarks.roofline import matmul_gflops
  mm_before = matmul_gflops(matmul_size)
  results = []
  for arch in models:
    base_w = workloads.DPSGD_BY_ARCH[arch]
    model = make_model(base_w)
    params = model.init(jax.random.key(seed))
    c = base_w["clip_norm"]
    for b in batch_sizes:
      w = dict(base_w, examples_per_client=b)
      x, y = workloads.synthetic_client_data(w, 0, seed)
      x, y = jnp.asarray(x), jnp.asarray(y)
      weights = jnp.ones((b,), jnp.float32)
      ref = reference_clipped_sum(model, params, x, y, c)
      for m in methods:
        fn = jax.jit(lambda p, x, y, wt, cn, m=m, model=model: clipped_grad_sum(
            model, p, x, y, wt, cn, method=m).total)
        cn = jnp.float32(c)
        for _ in range(3):
          jax.block_until_ready(fn(params, x, y, weights, cn))
        secs = []
        for _ in range(repeat):
          t0 = time.perf_counter()
          out = jax.block_until_ready(fn(params, x, y, weights, cn))
          secs.append(time.perf_counter() - t0)
        got = np.concatenate([np.asarray(l).reshape(-1)
                              for l in jax.tree_util.tree_leaves(out)])
        label = m if m != "auto" else f"auto ({resolve_method(model, params, x, m)})"
        results.append(common.micro_result(arch, b, label, secs,
                                           **common.check_sum(got, ref, b, c)))
  mm_after = matmul_gflops(matmul_size)
  return common.micro_record("fedjax_dp", versions(), results,
                             backend=jax.default_backend(), devices=jax.device_count(),
                             matmul_gflops=max(mm_before, mm_after),
                             matmul_gflops_before_after=[mm_before, mm_after],
                             matmul_size=matmul_size)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workload", choices=sorted(workloads.DPSGD_WORKLOADS))
  p.add_argument("--micro", action="store_true", help="the one-batch microbenchmark")
  p.add_argument("--models", default="mlp,cnn")
  p.add_argument("--batch-sizes", default=",".join(
      map(str, workloads.DPSGD_MICRO_BATCH_SIZES)))
  p.add_argument("--methods", default=",".join(METHODS))
  p.add_argument("--repeat", type=int, default=10)
  p.add_argument("--chunk-size", type=int, default=None)
  p.add_argument("--cohort-size", type=int, default=None,
                 help="override the workload's clients (quick checks)")
  p.add_argument("--devices", type=int, default=os.cpu_count() or 1,
                 help="JAX CPU devices (one per core by default)")
  p.add_argument("--matmul-size", type=int, default=2048)
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--serve", action="store_true",
                 help="with --workload: serve rounds on stdin (benchmarks.interleave)")
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  if a.micro == (a.workload is not None):
    p.error("give exactly one of --workload and --micro")
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(a.devices)  # before JAX's first computation
  if a.micro:
    rec = micro(a.models.split(","), [int(b) for b in a.batch_sizes.split(",")],
                a.methods.split(","), a.repeat, a.seed, a.matmul_size)
  else:
    w = workloads.DPSGD_WORKLOADS[a.workload]
    if a.cohort_size:
      w = dict(w, cohort_size=a.cohort_size, num_clients=a.cohort_size)
    rec = federated(w, a.timed_rounds, a.warmup_rounds, a.chunk_size, a.seed,
                    a.matmul_size, serve=a.serve)
    if rec is None:  # served
      return
  common.emit(rec, a.out)


if __name__ == "__main__":
  main()
