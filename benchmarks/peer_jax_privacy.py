"""Peer benchmark: record-level DP-SGD with Google DeepMind's jax-privacy (2.0, CPU).

jax-privacy 2.0 is a toolbox, not a trainer: ``jax_privacy.clipped_grad`` (the sum of
per-example clipped gradients, vmapped, with an ``is_padding_example`` mask),
``jax_privacy.noise_addition.gaussian_privatizer`` (an optax transformation adding
N(0, stddev^2) to the clipped sum) and ``jax_privacy.batch_selection`` (host-side
Poisson batch indices, ``CyclicPoissonSampling``; ``split_and_pad_global_batch`` for
fixed-shape minibatches padded with -1). The user writes the loop; this script does
it the two ways a JAX user would (``--variant``), on flax linen models of the same
architectures (``MLP``, ``CNN``: flax's standard ``nn.Dense`` / ``nn.Conv``):

* ``loop``: clients and steps in Python. Per client: copy of the global parameters, a
  fresh ``optax.chain(gaussian_privatizer(z C), scale(1 / E[batch]), sgd(lr))``, and per
  step the Poisson indices of ``CyclicPoissonSampling(q, local_steps)`` split into
  padded minibatches of ``--minibatch`` (32: one minibatch unless more than 32 of the
  100 examples are drawn, p < 1e-3); each minibatch goes through a jitted
  ``clipped_grad`` (sums accumulated), then a jitted optimiser update.
* ``vmap``: the host draws every client's Poisson indices for the round (the same
  strategy with ``truncated_batch_size`` = the padded batch), padded to a static
  ``[clients, steps, padded batch]``, and ONE jitted call trains all clients:
  ``vmap`` over clients of a ``lax.scan`` over the steps of the same per-step code,
  then the mean of the deltas. ``--padded-batch`` defaults to 53, the static batch
  fedjax_dp uses (`workloads.poisson_max_batch`: overflow probability < 1e-12).

Both print the `common.dpsgd_record`; the round is timed with ``time.perf_counter``
(host sampling included) until ``jax.block_until_ready`` on the new global parameters.

``--serve`` (with ``--workload``): build and warm up once, then one timed round per
``round`` line on stdin (`benchmarks.common.serve`, driven by `benchmarks.interleave`).

``--micro``: the jitted ``clipped_grad`` on one batch of B real examples (no noise, no
update), checked against an independent per-example ``vmap(grad)``, clip and sum
(`common.check_sum`); best and median of ``--repeat`` calls after 3 warm-up calls.
"""

import argparse
import importlib.metadata
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax_privacy  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax_privacy import batch_selection, noise_addition  # noqa: E402

from benchmarks import common, workloads  # noqa: E402
from benchmarks.flax_nets import CNN  # noqa: E402


class MLP(nn.Module):
  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(200)(x))
    x = nn.relu(nn.Dense(200)(x))
    return nn.Dense(self.num_classes)(x)


def make_model(w):
  """(initial params, mean loss) of the workload's flax module: ``MLP``, ``CNN`` or
  (``user_cnn``) `benchmarks.flax_nets.UserCNN`, the module fedjax_dp's side gets."""
  from benchmarks.flax_nets import UserCNN
  module = {"mlp": MLP, "cnn": CNN, "user_cnn": UserCNN}[w["arch"]](w["num_classes"])
  params = module.init(jax.random.key(0),
                       jnp.zeros((1,) + tuple(w["feature_shape"]), jnp.float32))["params"]

  def loss(params, x, y):
    """Mean cross-entropy of a batch (``clipped_grad`` passes one example, [1, ...])."""
    logits = module.apply({"params": params}, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

  return params, loss


def clipped_sum_fn(loss, clip_norm: float):
  """``(params, x, y, is_padding) -> (clipped sum, per-example losses)``."""
  g = jax_privacy.clipped_grad(loss, l2_clip_norm=clip_norm, batch_argnums=(1, 2),
                               return_values=True)

  def fn(params, x, y, is_padding):
    grads, aux = g(params, x, y, is_padding_example=is_padding)
    return grads, aux.values
  return fn


def versions():
  ver = importlib.metadata.version
  return {p: ver(p) for p in ("jax-privacy", "jax", "jaxlib", "flax", "optax")}


def client_optimizer(w, key):
  """The DP-SGD optimiser of one client: Gaussian noise z C on the clipped sum, divide
  by the public expected batch size, SGD."""
  return optax.chain(
      noise_addition.gaussian_privatizer(stddev=w["noise_multiplier"] * w["clip_norm"],
                                         prng_key=key),
      optax.scale(1.0 / w["expected_batch_size"]), optax.sgd(w["client_learning_rate"]))


def loop_runner(w, data, minibatch, seed):
  """``run_round(r) -> mean loss`` of variant ``loop`` (returns once the new global
  parameters exist)."""
  params, loss = make_model(w)
  clipped = clipped_sum_fn(loss, w["clip_norm"])

  @jax.jit
  def grad_sum(p, x, y, pad):
    g, vals = clipped(p, x, y, pad)
    return g, jnp.sum(jnp.where(pad, 0.0, vals))

  @jax.jit
  def apply(p, opt_state, g, key):
    updates, opt_state = client_optimizer(w, key).update(g, opt_state, p)
    return optax.apply_updates(p, updates), opt_state

  @jax.jit
  def server(global_p, delta_sum):
    return jax.tree.map(lambda a, d: a + w["server_learning_rate"] * d / w["cohort_size"],
                        global_p, delta_sum)

  strategy = batch_selection.CyclicPoissonSampling(
      sampling_prob=w["record_sampling_rate"], iterations=w["local_steps"])
  n = w["examples_per_client"]
  state = {"params": params}

  def run_round(r):
    params = state["params"]
    delta_sum = jax.tree.map(jnp.zeros_like, params)
    loss_terms, loss_n = [], 0
    for k in range(w["cohort_size"]):
      key = jax.random.fold_in(jax.random.key(seed), r * 100_003 + k)
      opt_state = client_optimizer(w, key).init(params)
      p = params
      x, y = data[k]
      for idx in strategy.batch_iterator(n, rng=[seed, r, k]):
        g = None
        for mb in batch_selection.split_and_pad_global_batch(idx, minibatch):
          pad = mb < 0
          safe = np.where(pad, 0, mb)
          gm, lsum = grad_sum(p, x[safe], y[safe], pad)
          g = gm if g is None else jax.tree.map(jnp.add, g, gm)
          loss_terms.append(lsum)
          loss_n += int((~pad).sum())
        p, opt_state = apply(p, opt_state, g, key)
      delta_sum = jax.tree.map(lambda s, a, b: s + (a - b), delta_sum, p, params)
    state["params"] = params = server(params, delta_sum)
    jax.block_until_ready(params)
    return float(sum(float(l) for l in loss_terms)) / max(loss_n, 1)
  return run_round


def vmap_runner(w, data, padded, seed):
  """``run_round(r) -> mean loss`` of variant ``vmap`` (host sampling included)."""
  params, loss = make_model(w)
  grad_sum = clipped_sum_fn(loss, w["clip_norm"])
  k_clients, n, steps = w["cohort_size"], w["examples_per_client"], w["local_steps"]
  strategy = batch_selection.CyclicPoissonSampling(
      sampling_prob=w["record_sampling_rate"], iterations=steps,
      truncated_batch_size=padded)
  xs = jnp.asarray(np.stack([d[0] for d in data[:k_clients]]))
  ys = jnp.asarray(np.stack([d[1] for d in data[:k_clients]]))

  def client(global_p, x, y, idx, pad, key):
    opt = client_optimizer(w, key)

    def step(carry, batch):
      p, opt_state = carry
      i, m = batch
      g, vals = grad_sum(p, x[i], y[i], m)
      updates, opt_state = opt.update(g, opt_state, p)
      return (optax.apply_updates(p, updates), opt_state), jnp.sum(vals * ~m)

    (p, _), loss_sums = jax.lax.scan(step, (global_p, opt.init(global_p)), (idx, pad))
    return jax.tree.map(jnp.subtract, p, global_p), jnp.sum(loss_sums)

  @jax.jit
  def round_fn(global_p, idx, pad, key):
    keys = jax.random.split(key, k_clients)
    deltas, loss_sums = jax.vmap(client, in_axes=(None, 0, 0, 0, 0, 0))(
        global_p, xs, ys, idx, pad, keys)
    new = jax.tree.map(lambda a, d: a + w["server_learning_rate"] * jnp.mean(d, 0),
                       global_p, deltas)
    return new, jnp.sum(loss_sums) / jnp.maximum(jnp.sum(~pad), 1)

  state = {"params": params}

  def run_round(r):
    idx = np.full((k_clients, steps, padded), -1, np.int64)
    for k in range(k_clients):
      for s, b in enumerate(strategy.batch_iterator(n, rng=[seed, r, k])):
        idx[k, s, :len(b)] = b
    pad = idx < 0
    state["params"], l = round_fn(state["params"], np.where(pad, 0, idx), pad,
                                  jax.random.fold_in(jax.random.key(seed), r))
    jax.block_until_ready(state["params"])
    return float(l)
  return run_round


def federated(w, variant, warmup, timed, minibatch, padded, seed, serve=False):
  """Times ``warmup + timed`` rounds of ``variant``; returns the JSON record. With
  ``serve``: serves the timed rounds on stdin/stdout instead (`common.serve`)."""
  data = [workloads.synthetic_client_data(w, k, seed) for k in range(w["num_clients"])]
  if variant == "loop":
    run_round = loop_runner(w, data, minibatch, seed)
    pb = f"minibatches of {minibatch} (split_and_pad_global_batch)"
  else:
    run_round = vmap_runner(w, data, padded, seed)
    pb = f"{padded} (truncated Poisson)"

  def finish(seconds, losses):
    return record(w, variant, pb, seconds, losses)
  if serve:
    common.serve(run_round, warmup, finish, {"framework": "jax-privacy",
                                             "method": variant})
    return None
  seconds, losses = common.timed_rounds(run_round, warmup, timed)
  return finish(seconds, losses)


def record(w, variant, pb, seconds, losses):
  return common.dpsgd_record(
      "jax-privacy", versions(), w, seconds, losses, method=variant, padded_batch=pb,
      backend=jax.default_backend(), devices=jax.device_count(),
      notes=("jax_privacy.clipped_grad + noise_addition.gaussian_privatizer in an optax "
             "chain with scale(1/E[batch]) and sgd; batch_selection.CyclicPoissonSampling "
             f"indices on the host; variant '{variant}'."))


def reference_clipped_sum(loss, params, x, y, clip_norm):
  """Independent reference: vmap of per-example grads, clip, sum (flat float64)."""
  g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x[:, None], y[:, None])
  flat = np.concatenate([np.asarray(l, np.float64).reshape(len(x), -1)
                         for l in jax.tree.leaves(g)], 1)
  norms = np.linalg.norm(flat, axis=1)
  return (flat * np.minimum(1.0, clip_norm / np.maximum(norms, 1e-30))[:, None]).sum(0)


def micro(models, batch_sizes, repeat, seed):
  results = []
  for arch in models:
    base_w = workloads.DPSGD_BY_ARCH[arch]
    params, loss = make_model(base_w)
    fn = jax.jit(clipped_sum_fn(loss, base_w["clip_norm"]))
    for b in batch_sizes:
      w = dict(base_w, examples_per_client=b)
      x, y = workloads.synthetic_client_data(w, 0, seed)
      x, y = jnp.asarray(x), jnp.asarray(y)
      pad = jnp.zeros((b,), bool)
      for _ in range(3):
        jax.block_until_ready(fn(params, x, y, pad))
      secs = []
      for _ in range(repeat):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(params, x, y, pad)[0])
        secs.append(time.perf_counter() - t0)
      got = np.concatenate([np.asarray(l).reshape(-1) for l in jax.tree.leaves(out)])
      ref = reference_clipped_sum(loss, params, x, y, w["clip_norm"])
      results.append(common.micro_result(arch, b, "clipped_grad", secs, **common.check_sum(
          got, ref, b, w["clip_norm"])))
  return common.micro_record("jax-privacy", versions(), results,
                             backend=jax.default_backend(), devices=jax.device_count())


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workload", choices=sorted(workloads.DPSGD_WORKLOADS))
  p.add_argument("--variant", choices=("loop", "vmap"), default="vmap")
  p.add_argument("--minibatch", type=int, default=32)
  p.add_argument("--padded-batch", type=int, default=None)
  p.add_argument("--micro", action="store_true", help="the one-batch microbenchmark")
  p.add_argument("--models", default="mlp,cnn")
  p.add_argument("--batch-sizes", default=",".join(
      map(str, workloads.DPSGD_MICRO_BATCH_SIZES)))
  p.add_argument("--repeat", type=int, default=10)
  p.add_argument("--cohort-size", type=int, default=None)
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--serve", action="store_true",
                 help="with --workload: serve rounds on stdin (benchmarks.interleave)")
  p.add_argument("--out", default=None)
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args()
  if a.micro == (a.workload is not None):
    p.error("give exactly one of --workload and --micro")
  if a.micro:
    rec = micro(a.models.split(","), [int(b) for b in a.batch_sizes.split(",")], a.repeat,
                a.seed)
  else:
    w = workloads.DPSGD_WORKLOADS[a.workload]
    if a.cohort_size:
      w = dict(w, cohort_size=a.cohort_size, num_clients=a.cohort_size)
    warm = w["warmup_rounds"] if a.warmup_rounds is None else a.warmup_rounds
    timed = w["timed_rounds"] if a.timed_rounds is None else a.timed_rounds
    padded = a.padded_batch or workloads.poisson_max_batch(w["examples_per_client"],
                                                           w["record_sampling_rate"])
    rec = federated(w, a.variant, warm, timed, a.minibatch, padded, a.seed, a.serve)
    if rec is None:  # served
      return
  common.emit(rec, a.out)


if __name__ == "__main__":
  main()
