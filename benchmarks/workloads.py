"""The shared workload definitions (standard library only: peers import this file).

Every framework runs exactly these settings; a peer script reads them from here so
that no number is typed twice.
"""

# (a) User-level DP-FedAvg, MLP 784-200-200-10 on synthetic 28x28 inputs.
MLP = dict(
    name="mlp",
    model="mlp 784-200-200-10",
    feature_shape=(28, 28),
    num_classes=10,
    hidden=(200, 200),
    num_clients=1000,
    examples_per_client=100,
    cohort_size=100,
    local_epochs=1,
    batch_size=20,
    client_learning_rate=0.1,
    server_learning_rate=1.0,
    clip_norm=1.0,
    noise_multiplier=1.0,
    warmup_rounds=2,
    timed_rounds=20,
)

# (a') The FedJAX EMNIST CNN (conv32-conv64-maxpool-dense128-dense62, no dropout in any
# framework) at a cohort that fits a 2-core CPU: FedJAX's own EMNIST default of 10.
# Noise multiplier 0.01: with z = 1, a cohort of 10 and 1.2M parameters the noise (norm
# about 110 per round) swamps the clipped updates and the loss diverges in every
# framework; the noise draw costs the same at any z, so timing is unaffected and the
# loss check stays meaningful.
CNN = dict(
    name="cnn",
    model="emnist cnn conv32-conv64-maxpool-dense128-dense62 (no dropout)",
    feature_shape=(28, 28, 1),
    num_classes=62,
    num_clients=1000,
    examples_per_client=100,
    cohort_size=10,
    local_epochs=1,
    batch_size=20,
    client_learning_rate=0.1,
    server_learning_rate=1.0,
    clip_norm=1.0,
    noise_multiplier=0.01,
    warmup_rounds=1,
    timed_rounds=5,
)

WORKLOADS = {"mlp": MLP, "cnn": CNN}

# Matmul FLOPs of one training example in one local step (forward, weight gradients and
# the input gradients that backpropagation needs; none for the first layer's input).
# MLP: forward 2 * (784*200 + 200*200 + 200*10) = 397,600; x2 with weight gradients;
#   + 2 * (200*200 + 200*10) = 84,000 of input gradients.
# CNN: conv1 2*26*26*32*9 = 389,376; conv2 2*24*24*64*288 = 21,233,664; dense
#   2*9216*128 = 2,359,296; out 2*128*62 = 15,872 (forward 23,998,208); x2 with weight
#   gradients; + input gradients of conv2, dense and out.
FLOPS_PER_EXAMPLE_STEP = {
    "mlp": 2 * 397_600 + 84_000,
    "cnn": 2 * 23_998_208 + 21_233_664 + 2_359_296 + 15_872,
}


def flops_per_round(w) -> int:
  """Matmul FLOPs of one round's local training (cohort x steps x batch x per example)."""
  return (w["cohort_size"] * local_steps(w) * w["batch_size"] *
          FLOPS_PER_EXAMPLE_STEP[w["name"]])


def local_steps(w) -> int:
  """Local SGD steps per client per round."""
  return w["local_epochs"] * -(-w["examples_per_client"] // w["batch_size"])


def synthetic_client_data(w, client_id: int, seed: int = 0):
  """One client's synthetic data as numpy ``(x float32 [n, *shape], y int32 [n])``.

  Class-dependent Gaussian blobs (label-dependent mean plus unit noise), generated from
  ``(seed, client_id)`` so every framework sees the same examples.
  """
  import numpy as np  # every peer environment has numpy
  rng = np.random.default_rng([seed, client_id])
  n = w["examples_per_client"]
  d = 1
  for s in w["feature_shape"]:
    d *= s
  means = np.random.default_rng([seed, 10**9]).normal(
      0.0, 1.0, (w["num_classes"], d)).astype(np.float32)
  y = rng.integers(0, w["num_classes"], n).astype(np.int32)
  x = (means[y] + rng.normal(0.0, 1.0, (n, d)).astype(np.float32)).reshape(
      (n,) + tuple(w["feature_shape"]))
  return x.astype(np.float32), y
