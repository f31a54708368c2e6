"""Roofline: local training against a dense matmul, the DP hot path against a stream.

Both references are measured in the same process, just before the measured code, so
the ratios hold on a noisy machine:

* ``matmul``: a 2048 x 2048 float32 matmul (best of 5): the machine's dense GFLOP/s.
* ``local_training``: the workload-(a) cohort's local training (100 clients x 5 SGD
  steps of batch 20 on the 784-200-200-10 MLP), run exactly as the round runs it
  (sharded over the CPU devices, chunks of vmapped clients under ``lax.scan``).
  Achieved GFLOP/s counts the matmul FLOPs of forward and backward passes (879,200
  per example step; the input gradient of the first layer is not needed).
* ``hot_path``: `fedjax_dp.federated.aggregation.dp_aggregate` (clip -> weighted sum
  -> Gaussian noise) on materialised ``[K, P]`` float32 updates, against a streaming
  read of the same array (``jnp.sum(x)``, the fastest full read XLA offers here).
  Bandwidth counts the ``4 K P`` bytes that must be read at least once.

  python -m benchmarks.roofline [--quick] [--devices N] [--out f.json]
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks import common, workloads

MLP_FLOPS_PER_EXAMPLE_STEP = workloads.FLOPS_PER_EXAMPLE_STEP["mlp"]


def _best(fn, *args, repeat=5):
  import jax
  jax.block_until_ready(fn(*args))  # compile and warm
  best = float("inf")
  for _ in range(repeat):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t0)
  return best


def matmul_gflops(n: int = 2048, repeat: int = 5) -> float:
  import jax
  import jax.numpy as jnp
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
  t = _best(jax.jit(jnp.matmul), a, b, repeat=repeat)
  return 2 * n**3 / t / 1e9


def local_training(w=workloads.MLP, chunk_size=None, repeat=3, devices=None,
                   skip_nonfinite_steps=False):
  """Seconds and GFLOP/s of one cohort's local training, run as the round runs it: the
  cohort sharded over the devices, each device scanning over chunks of vmapped clients
  and summing their deltas (then one psum)."""
  import jax
  import jax.numpy as jnp
  import optax
  from jax.sharding import NamedSharding, PartitionSpec as P
  from fedjax_dp.federated import chunking, sharding
  from fedjax_dp.federated.client import ClientHParams, make_client_update
  from fedjax_dp.models import count_params, create_model

  model = create_model("mlp", w["feature_shape"], w["num_classes"], hidden=w["hidden"])
  mesh = sharding.client_mesh(jax.devices()[:devices] if devices else None)
  shards = sharding.mesh_size(mesh)
  params = sharding.replicate(model.init(jax.random.key(0)), mesh)
  k, n = w["cohort_size"], w["examples_per_client"]
  client = make_client_update(model, optax.sgd(1.0), batch_size=w["batch_size"],
                              max_examples=n, local_epochs=w["local_epochs"],
                              skip_nonfinite_steps=skip_nonfinite_steps)
  split = NamedSharding(mesh, P(sharding.CLIENTS_AXIS))
  x = jax.device_put(jax.random.normal(jax.random.key(1), (k, n) + tuple(w["feature_shape"])),
                     split)
  y = jax.device_put(jax.random.randint(jax.random.key(2), (k, n), 0, w["num_classes"]), split)
  counts = jax.device_put(jnp.full((k,), n, jnp.int32), split)
  hp = ClientHParams(learning_rate=w["client_learning_rate"])
  c = chunk_size or chunking.auto_chunk_size(k // shards, count_params(params),
                                             n * (784 * 4 + 4))
  if k % shards:
    raise ValueError(f"cohort {k} must split evenly over {shards} devices")
  c = max(d for d in range(1, c + 1) if (k // shards) % d == 0)  # no padded slots here
  lay = chunking.chunk_layout(k, c, shards)
  vclient = jax.vmap(client, in_axes=(None, 0, 0, 0, 0, None))

  def per_device(params, x, y, counts):
    keys = jax.random.split(jax.random.key(3), x.shape[0])

    def body(acc, xs):
      u, _ = vclient(params, *xs, hp)
      # A tensordot, as the round sums: XLA:CPU's reduction along a leading axis is slow.
      return jax.tree_util.tree_map(
          lambda a, b: a + jnp.tensordot(jnp.ones(b.shape[0]), b, axes=(0, 0)), acc, u), None

    blocks = tuple(a.reshape((lay.chunks_per_shard, lay.chunk_size) + a.shape[1:])
                   for a in (x, y, counts, keys))
    acc = jax.lax.scan(body, jax.tree_util.tree_map(jnp.zeros_like, params), blocks)[0]
    return jax.lax.psum(acc, sharding.CLIENTS_AXIS)

  train = jax.jit(jax.shard_map(
      per_device, mesh=mesh, in_specs=(P(),) + (P(sharding.CLIENTS_AXIS),) * 3,
      out_specs=P(), check_vma=False))
  t = _best(train, params, x, y, counts, repeat=repeat)
  steps = workloads.local_steps(w)
  flops = k * steps * w["batch_size"] * MLP_FLOPS_PER_EXAMPLE_STEP
  return {"seconds": t, "devices": shards, "chunk_size": lay.chunk_size,
          "skip_nonfinite_steps": skip_nonfinite_steps,
          "matmul_flops": flops, "gflops": flops / t / 1e9, "clients": k,
          "steps_per_client": steps}


def hot_path(k: int, p: int, repeat: int = 3):
  """The DP hot path on a materialised [k, p] float32 array against a streaming read.

  Reports ``clip_sum`` (clip -> weighted sum, `clipped_weighted_sum`), ``hot_path``
  (clip -> sum -> Gaussian noise, `dp_aggregate`) and ``noise`` (the p-sized Gaussian
  draw alone), each as seconds and as effective GB/s = ``4 k p`` bytes / time.
  """
  import jax
  import jax.numpy as jnp
  from fedjax_dp.federated import aggregation
  from fedjax_dp.privacy import noise

  @jax.jit
  def make(key):
    row = jax.random.uniform(key, (k, 1), jnp.float32, 0.5, 2.0)
    col = jnp.sin(jnp.arange(p, dtype=jnp.float32))[None]
    return row * col / jnp.sqrt(p)

  x = make(jax.random.key(0))
  w = jnp.ones((k,), jnp.float32)
  key = jax.random.key(1)
  # XLA:CPU reduces a whole array far faster than along one axis; the fastest full
  # read is the fair reference.
  t_stream = _best(jax.jit(lambda u: jnp.sum(u)), x, repeat=repeat)
  t_clip = _best(jax.jit(lambda u, w: aggregation.clipped_weighted_sum(u, w, 1.0)[0]), x, w,
                 repeat=repeat)
  t_hot = _best(jax.jit(lambda u, w, key: aggregation.dp_aggregate(u, w, 1.0, 1.0, key)),
                x, w, key, repeat=repeat)
  t_noise = _best(jax.jit(lambda key: noise.gaussian_like(key, x[0], 1.0)), key,
                  repeat=repeat)
  nbytes = 4 * k * p
  del x
  gbps = lambda t: nbytes / t / 1e9
  return {"K": k, "P": p, "bytes": nbytes, "stream_s": t_stream, "clip_sum_s": t_clip,
          "hot_path_s": t_hot, "noise_s": t_noise, "stream_gbps": gbps(t_stream),
          "clip_sum_gbps": gbps(t_clip), "hot_path_gbps": gbps(t_hot),
          "clip_sum_ratio": t_stream / t_clip, "ratio": t_stream / t_hot}


def run(quick: bool = False, max_bytes: float = 4e9):
  import importlib.metadata as md
  import jax
  mm = matmul_gflops(1024 if quick else 2048)
  lt = local_training(dict(workloads.MLP, cohort_size=10) if quick else workloads.MLP)
  # The profile behind the engine's CPU choices: the same cohort on one device (XLA
  # spreads each small matmul over all cores), with whole-cohort vmapping (batched
  # matmuls), and with the optional per-step non-finite check.
  lw = dict(workloads.MLP, cohort_size=10) if quick else workloads.MLP
  ablation = [dict(label="engine default (sharded over all devices, auto chunk)", **lt)]
  for label, kw in (("1 device, chunk 1", dict(devices=1, chunk_size=1)),
                    ("1 device, whole cohort vmapped", dict(devices=1,
                                                            chunk_size=lw["cohort_size"])),
                    ("1 device, chunk 1, per-step non-finite check",
                     dict(devices=1, chunk_size=1, skip_nonfinite_steps=True))):
    ablation.append(dict(label=label, **local_training(lw, **kw)))
  mm_after = matmul_gflops(1024 if quick else 2048)
  ks = (10, 100) if quick else (10, 100, 1000, 10000)
  ps = (10**4, 10**5) if quick else (10**4, 10**5, 10**6, 10**7)
  hot = [hot_path(k, p) for k in ks for p in ps if 4 * k * p <= max_bytes]
  return {"benchmark": "roofline", "machine": common.machine_info(),
          "backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind),
          "versions": {p: md.version(p) for p in ("jax", "jaxlib")},
          "matmul_gflops": max(mm, mm_after), "matmul_gflops_before_after": [mm, mm_after],
          "local_training": lt, "local_training_fraction_of_matmul": lt["gflops"] / max(
              mm, mm_after), "local_training_ablation": ablation,
          "hot_path": hot, "peak_rss_mib": common.peak_rss_mib()}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
  p.add_argument("--max-bytes", type=float, default=4e9,
                 help="largest [K, P] array of the hot-path grid, bytes")
  p.add_argument("--devices", type=int, default=os.cpu_count() or 1,
                 help="JAX CPU devices (one per core by default)")
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(a.devices)  # before JAX's first computation
  common.emit(run(a.quick, a.max_bytes), a.out)


if __name__ == "__main__":
  main()
