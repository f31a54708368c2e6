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
