"""Peer benchmark: user-level DP-FedAvg in Google's FedJAX (0.0.17, jit backend, CPU).

What is measured
----------------
FedJAX has no differential privacy, so this is FedJAX's own FedAvg
(``fedjax.algorithms.fed_avg``: ``for_each_client`` + streaming sum of client deltas +
server optimizer) with the thinnest possible DP step added. One round is:

1. ``UniformGetClientSampler`` draws ``cohort_size`` of the ``num_clients`` clients
   uniformly without replacement from an ``InMemoryFederatedData`` built from
   ``workloads.synthetic_client_data`` (building it is not timed);
2. ``fedjax.for_each_client`` with FedJAX's DEFAULT backend (``ForEachClientJitBackend``:
   jitted ``client_init``/``client_step``/``client_final``, one Python loop over
   clients and batches) runs 1 local epoch of SGD (``fedjax.optimizers.sgd``, lr
   ``client_learning_rate``) per client over ``ClientDataset.shuffle_repeat_batch``
   (``num_epochs=1``, ``batch_size``), softmax cross-entropy
   (``fedjax.metrics.unreduced_cross_entropy_loss``);
3. DP, part 1 -- ``client_final`` computes the client delta (FedJAX's sign convention,
   ``global - local``, i.e. a pseudo-gradient) and clips it to global L2 norm
   ``clip_norm`` with ``fedjax.tree_util.tree_clip_by_global_norm`` (``for_each_client``'s
   docs name ``client_final`` as the place for update clipping);
4. the clipped deltas are summed as they stream out (``tree_util.tree_add``, as
   ``fed_avg`` does), unweighted (user-level DP: each user counts once);
5. DP, part 2 -- one jitted server step adds Gaussian noise
   N(0, (noise_multiplier * clip_norm)^2 I) ONCE to the sum, divides by the cohort size
   and applies it with ``fedjax.optimizers.sgd(server_learning_rate)`` (lr 1: FedAvg).

``warmup_rounds`` untimed rounds (compilation) are followed by ``timed_rounds`` rounds,
each timed with ``time.perf_counter`` from sampling until ``jax.block_until_ready`` on
the new global params. The mean client training loss (mean over clients of the mean
batch loss during local training) of the first and last timed rounds is read back
after timing.
"""

import argparse
import importlib.metadata
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fedjax  # noqa: E402
import haiku as hk  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import common, workloads  # noqa: E402

# Workaround: FedJAX 0.0.17's tree_util.tree_zeros_like / tree_weight (and regularizers)
# call ``jax.tree_map``, an alias that jax removed (0.6); restore it as the identical
# ``jax.tree_util.tree_map``. Nothing else in FedJAX's code path needs patching.
if not hasattr(jax, "tree_map"):
  jax.tree_map = jax.tree_util.tree_map


def forward_fn(name, num_classes):
  """Haiku forward pass for workload ``name`` (``batch['x']`` -> logits)."""

  def mlp(batch):
    return hk.Sequential([hk.Flatten(), hk.Linear(200), jax.nn.relu, hk.Linear(200),
                          jax.nn.relu, hk.Linear(num_classes)])(batch["x"])

  def cnn(batch):  # fedjax.models.emnist.ConvDropoutModule minus its two Dropouts.
    x = jax.nn.relu(hk.Conv2D(32, (3, 3), padding="VALID")(batch["x"]))
    x = jax.nn.relu(hk.Conv2D(64, (3, 3), padding="VALID")(x))
    x = hk.MaxPool(window_shape=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="VALID")(x)
    x = jax.nn.relu(hk.Linear(128)(hk.Flatten()(x)))
    return hk.Linear(num_classes)(x)

  return {"mlp": mlp, "cnn": cnn}[name]


def build_model(w):
  sample = {"x": np.zeros((1,) + tuple(w["feature_shape"]), np.float32),
            "y": np.zeros((1,), np.int32)}
  return fedjax.create_model_from_haiku(
      transformed_forward_pass=hk.transform(forward_fn(w["name"], w["num_classes"])),
      sample_batch=sample,
      train_loss=lambda b, p: fedjax.metrics.unreduced_cross_entropy_loss(b["y"], p))


def build_round(w, model):
  """Returns ``run_round(params, opt_state, clients, noise_key, seed)``."""
  client_opt = fedjax.optimizers.sgd(w["client_learning_rate"])
  server_opt = fedjax.optimizers.sgd(w["server_learning_rate"])
  per_example_loss = fedjax.model_per_example_loss(model)
  value_and_grad = jax.value_and_grad(
      lambda p, b, r: jnp.mean(per_example_loss(p, b, r)))
  clip_norm = w["clip_norm"]
  noise_std = w["noise_multiplier"] * w["clip_norm"]
  cohort = w["cohort_size"]
  steps = workloads.local_steps(w)  # batches per client (every client has n examples)

  def client_init(server_params, client_rng):
    return {"params": server_params, "opt_state": client_opt.init(server_params),
            "rng": client_rng, "loss_sum": jnp.zeros(())}

  def client_step(state, batch):
    rng, use_rng = jax.random.split(state["rng"])
    loss, grads = value_and_grad(state["params"], batch, use_rng)
    opt_state, params = client_opt.apply(grads, state["opt_state"], state["params"])
    return {"params": params, "opt_state": opt_state, "rng": rng,
            "loss_sum": state["loss_sum"] + loss}

  def client_final(server_params, state):
    # DP part 1: user-level L2 clipping of the whole model update.
    delta = jax.tree_util.tree_map(jnp.subtract, server_params, state["params"])
    clipped = fedjax.tree_util.tree_clip_by_global_norm(delta, clip_norm)
    return clipped, state["loss_sum"] / steps

  train_for_each_client = fedjax.for_each_client(client_init, client_step, client_final)

  @jax.jit
  def server_step(params, opt_state, delta_sum, noise_key):
    # DP part 2: Gaussian noise added once to the sum of clipped deltas.
    leaves, treedef = jax.tree_util.tree_flatten(delta_sum)
    keys = jax.random.split(noise_key, len(leaves))
    noisy = [l + noise_std * jax.random.normal(k, l.shape, l.dtype)
             for l, k in zip(leaves, keys)]
    mean_delta = jax.tree_util.tree_map(lambda x: x / cohort,
                                        jax.tree_util.tree_unflatten(treedef, noisy))
    return server_opt.apply(mean_delta, opt_state, params)

  hparams = lambda s: fedjax.ShuffleRepeatBatchHParams(  # noqa: E731
      batch_size=w["batch_size"], num_epochs=w["local_epochs"], seed=s % 2**32)

  def run_round(params, opt_state, clients, noise_key, seed):
    batch_clients = [(cid, cds.shuffle_repeat_batch(hparams(seed + i)), crng)
                     for i, (cid, cds, crng) in enumerate(clients)]
    delta_sum = fedjax.tree_util.tree_zeros_like(params)
    losses = []
    for _, (clipped, loss) in train_for_each_client(params, batch_clients):
      delta_sum = fedjax.tree_util.tree_add(delta_sum, clipped)
      losses.append(loss)
    opt_state, params = server_step(params, opt_state, delta_sum, noise_key)
    return params, opt_state, losses

  return server_opt, run_round


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--workload", choices=sorted(workloads.WORKLOADS), required=True)
  ap.add_argument("--timed-rounds", type=int, default=None)
  ap.add_argument("--warmup-rounds", type=int, default=None)
  ap.add_argument("--out", default=None)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  w = dict(workloads.WORKLOADS[args.workload])
  if args.timed_rounds is not None:
    w["timed_rounds"] = args.timed_rounds
  if args.warmup_rounds is not None:
    w["warmup_rounds"] = args.warmup_rounds

  # Population (untimed): same synthetic examples as every other framework.
  data = {}
  for cid in range(w["num_clients"]):
    x, y = workloads.synthetic_client_data(w, cid, seed=args.seed)
    data[b"%06d" % cid] = {"x": x, "y": y}
  fd = fedjax.InMemoryFederatedData(data)
  sampler = fedjax.client_samplers.UniformGetClientSampler(
      fd, num_clients=w["cohort_size"], seed=args.seed)

  model = build_model(w)
  server_opt, run_round = build_round(w, model)
  params = model.init(jax.random.PRNGKey(args.seed))
  opt_state = server_opt.init(params)
  noise_key = jax.random.PRNGKey(args.seed + 1)

  round_seconds, round_losses = [], []
  for r in range(w["warmup_rounds"] + w["timed_rounds"]):
    noise_key, round_key = jax.random.split(noise_key)
    t0 = time.perf_counter()
    clients = sampler.sample()
    shuffle_seed = args.seed * 1_000_003 + r * w["cohort_size"]
    params, opt_state, losses = run_round(params, opt_state, clients, round_key,
                                          shuffle_seed)
    jax.block_until_ready(params)
    dt = time.perf_counter() - t0
    if r >= w["warmup_rounds"]:
      round_seconds.append(dt)
      round_losses.append(losses)

  mean_loss = lambda ls: float(np.mean([float(l) for l in ls]))  # noqa: E731
  v = importlib.metadata.version
  record = common.throughput_record(
      framework="fedjax",
      versions={p: v(p) for p in ("fedjax", "jax", "jaxlib", "dm-haiku", "optax")},
      workload=w, round_seconds=round_seconds, backend="jit",
      first_round_loss=mean_loss(round_losses[0]) if round_losses else None,
      last_round_loss=mean_loss(round_losses[-1]) if round_losses else None,
      notes="FedJAX FedAvg (for_each_client, jit backend) + user-level DP: client_final "
            "clips each client delta to L2 clip_norm (tree_clip_by_global_norm); the "
            "clipped deltas are summed unweighted; one jitted server step adds "
            "N(0,(noise_multiplier*clip_norm)^2) once to the sum, divides by the cohort "
            "size and applies server SGD (lr 1).")
  common.emit(record, args.out)


if __name__ == "__main__":
  main()
