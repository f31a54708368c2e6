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


# --- Record-level DP-SGD (section "dpsgd" of `benchmarks.run`) ------------------------
#
# Federated record-level DP: every client of the population takes part in every round
# and runs ``local_steps`` steps of local DP-SGD (Abadi et al. 2016): each step
# Poisson-samples each of its examples with probability ``record_sampling_rate``,
# clips every per-example gradient to ``clip_norm``, adds N(0, (noise_multiplier *
# clip_norm)^2) to the sum and divides by the public expected batch size
# ``expected_batch_size`` (= q * examples_per_client), then an SGD step with
# ``client_learning_rate``; the server averages the client deltas uniformly and applies
# them with ``server_learning_rate`` (1: plain FedAvg).

DPSGD_MLP = dict(
    name="dpsgd_mlp",
    arch="mlp",
    model="mlp 784-200-200-10",
    feature_shape=(28, 28),
    num_classes=10,
    hidden=(200, 200),
    num_clients=100,
    cohort_size=100,
    examples_per_client=100,
    local_steps=5,
    record_sampling_rate=0.2,
    expected_batch_size=20,
    clip_norm=1.0,
    noise_multiplier=1.0,
    client_learning_rate=0.1,
    server_learning_rate=1.0,
    warmup_rounds=2,
    timed_rounds=10,
)

# The same round with the FedJAX EMNIST CNN of workload (a'). 10 clients (FedJAX's own
# EMNIST cohort, as for workload (a')): a round is then 10 x 5 x 20 = 1,000 expected
# per-example gradients of 72 MFLOP each (72 GFLOP), about a second at the dense-matmul
# rate of the 2-core benchmark machine and tens of seconds for the slowest peer, so
# that 1 warm-up and 3 timed rounds of every framework fit in a few minutes.
DPSGD_CNN = dict(
    DPSGD_MLP,
    name="dpsgd_cnn",
    arch="cnn",
    model="emnist cnn conv32-conv64-maxpool-dense128-dense62 (no dropout)",
    feature_shape=(28, 28, 1),
    num_classes=62,
    hidden=None,
    num_clients=10,
    cohort_size=10,
    warmup_rounds=1,
    timed_rounds=3,
)

# A small CIFAR-shaped CNN as a user writes it in each framework (issue 32): fedjax_dp
# and jax-privacy get the flax linen module `benchmarks.flax_nets.UserCNN` (``nn.Conv(16,
# (3, 3))``, ``nn.avg_pool``, ``nn.Conv(32, (3, 3))``, ``nn.avg_pool``, ``nn.Dense(10)``;
# fedjax_dp through `fedjax_dp.models.from_module`, not its own layers), Opacus the
# same torch net (``Conv2d(padding=1)`` for SAME, ``AvgPool2d``, ``Linear``). 20 clients
# x 4 local steps x expected batch 16: 64 examples per client at q = 0.25, so that one
# Opacus DPDataLoader epoch (1 / q batches) is exactly the 4 local steps.
DPSGD_USER_CNN = dict(
    DPSGD_MLP,
    name="dpsgd_user_cnn",
    arch="user_cnn",
    model="user cnn (flax nn.Conv) conv3x3(16)-avgpool-conv3x3(32)-avgpool-dense(10)",
    feature_shape=(32, 32, 3),
    num_classes=10,
    hidden=None,
    num_clients=20,
    cohort_size=20,
    examples_per_client=64,
    local_steps=4,
    record_sampling_rate=0.25,
    expected_batch_size=16,
    warmup_rounds=1,
    timed_rounds=5,
)

DPSGD_WORKLOADS = {"dpsgd_mlp": DPSGD_MLP, "dpsgd_cnn": DPSGD_CNN,
                   "dpsgd_user_cnn": DPSGD_USER_CNN}

# The workload of each architecture (the microbenchmark's model, data and clip norm).
DPSGD_BY_ARCH = {w["arch"]: w for w in DPSGD_WORKLOADS.values()}

# Microbenchmark: the sum of per-example clipped gradients of one batch (no noise, no
# update), for each model and batch size.
DPSGD_MICRO_BATCH_SIZES = (20, 256)

# Training FLOPs of one example, counted as 3 x forward (forward, input gradients and
# weight gradients each cost about one forward; the usual 6 x MACs estimate), matmul /
# convolution FLOPs only (bias, activation, pooling and the per-example norms and
# clipping are not counted; nor are padded batch slots).
# MLP: 3 x 2 x (784*200 + 200*200 + 200*10) = 3 x 2 x 198,800 = 1,192,800.
# CNN: 3 x 23,998,208 (forward: conv1 389,376 + conv2 21,233,664 + dense 2,359,296 +
#   out 15,872) = 71,994,624.
# User CNN (32x32x3, SAME padding, the padded border counted as full windows): conv1
#   2*32*32*16*27 = 884,736; conv2 (16x16x16 after the pool) 2*16*16*32*144 =
#   2,359,296; dense 2*(8*8*32)*10 = 40,960; forward 3,284,992, x 3 = 9,854,976.
DPSGD_FLOPS_PER_EXAMPLE = {
    "mlp": 3 * 2 * (784 * 200 + 200 * 200 + 200 * 10),
    "cnn": 3 * 23_998_208,
    "user_cnn": 3 * (2 * 32 * 32 * 16 * 27 + 2 * 16 * 16 * 32 * 144 + 2 * 2048 * 10),
}


def dpsgd_examples_per_round(w) -> float:
  """Expected per-example gradients of one round: clients x steps x E[batch]."""
  return w["cohort_size"] * w["local_steps"] * w["expected_batch_size"]


def dpsgd_flops_per_round(w) -> float:
  """Training FLOPs of the expected real examples of one round
  (`DPSGD_FLOPS_PER_EXAMPLE`)."""
  return dpsgd_examples_per_round(w) * DPSGD_FLOPS_PER_EXAMPLE[w["arch"]]


def poisson_max_batch(n: int, q: float, overflow_prob: float = 1e-12) -> int:
  """Smallest b with P(Binomial(n, q) > b) <= overflow_prob, plus one, capped at n:
  the static padded batch of a Poisson-sampled step (the rule of
  `fedjax_dp.federated.client.DpSgdConfig`; standard library, exact sums)."""
  import math
  tail, b = 0.0, n
  # P(X > k) = sum_{j > k} C(n, j) q^j (1 - q)^(n - j), accumulated from the top.
  for k in range(n - 1, -1, -1):
    tail += math.comb(n, k + 1) * q ** (k + 1) * (1 - q) ** (n - k - 1)
    if tail > overflow_prob:
      b = k + 1
      break
  return max(1, min(n, b + 1))


def federated_data_and_model(w):
  """Workload ``w``'s population (a `fedjax_dp.data.FederatedData` of its synthetic
  clients) and its model (the MLP or the CNN), as every fedjax_dp benchmark builds them."""
  from fedjax_dp.data.federated_data import from_client_lists
  from fedjax_dp.models import create_model

  xs, ys = zip(*(synthetic_client_data(w, k) for k in range(w["num_clients"])))
  fd = from_client_lists(f"synthetic_{w['name']}", list(xs), list(ys),
                         num_classes=w["num_classes"])
  if w["name"] == "mlp":
    return fd, create_model("mlp", w["feature_shape"], w["num_classes"], hidden=w["hidden"])
  return fd, create_model("cnn", w["feature_shape"], w["num_classes"])
