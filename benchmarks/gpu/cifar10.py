"""pfl-research's CIFAR-10 benchmark shape, on fedjax_dp (``python -m benchmarks.gpu.cifar10``)
and on pfl (``benchmarks/peer_pfl.py --workload cifar10_pfl``), for the GPU kit.

The shape is that of pfl-research's image-classification benchmark
(``benchmarks/image_classification/configs/baseline.yaml`` with its PyTorch ``train.py``
in the pfl-research repository): user-level FedAvg with a cohort of 50 users, a constant
50 data points per user (CIFAR-10's 50,000 training images make 1,000 users), local
batch 10 for 1 local epoch (5 local SGD steps, local learning rate 0.1), the central
model updated by SGD with learning rate 1 on the (unweighted, per-user) average, central
DP as in its ``gaussian_moments_accountant`` runs: every user's update clipped to
l2 norm 0.4, one Gaussian draw on the cohort's sum. Noise: pfl's ``noise_cohort_size``
(1,000) scales the noise of a cohort of 50 down by 50 / 1,000, so the noise multiplier
here is 0.05 (z = 1 at the noise cohort); timing does not depend on it.

The model is pfl's ``simple_cnn`` for 32x32x3 inputs (``benchmarks/model/pytorch/cnn.py``
there): conv 3x3 (32, VALID) - ReLU - conv 3x3 (64, VALID) - ReLU - max-pool 2x2 -
dense 128 - ReLU - dense 10, 1,626,442 parameters; its two dropout layers are left out
in both frameworks (fedjax_dp's per-example machinery takes deterministic modules, and
every other benchmark here runs without dropout). fedjax_dp gets it as a flax linen
module through `fedjax_dp.models.from_module` (``nn.Conv``, as a user writes it), pfl as
the torch ``nn.Sequential`` of `benchmarks.peer_pfl.make_net`.

Data: CIFAR-shaped random data (`benchmarks.workloads.synthetic_client_data`:
class-dependent Gaussian blobs, float32 [50, 32, 32, 3] per user, 10 classes), the same
examples in both frameworks. No CIFAR download anywhere.

Standard library at import time (the pfl peer imports `CIFAR10_PFL` from here).

  python -m benchmarks.gpu.cifar10 [--num-clients N] [--cohort-size K] [--timed-rounds R]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md

from benchmarks import common, workloads

CIFAR10_PFL = dict(
    name="cifar10_pfl",
    model="pfl simple_cnn conv32-conv64-maxpool-dense128-dense10 (no dropout)",
    feature_shape=(32, 32, 3),
    num_classes=10,
    num_clients=1000,
    examples_per_client=50,
    cohort_size=50,
    local_epochs=1,
    batch_size=10,
    client_learning_rate=0.1,
    server_learning_rate=1.0,
    clip_norm=0.4,
    noise_multiplier=0.05,
    warmup_rounds=2,
    timed_rounds=20,
)

# Matmul / convolution FLOPs of one example in one local step, counted as in
# `benchmarks.workloads.FLOPS_PER_EXAMPLE_STEP` (forward, weight gradients, and the
# input gradients backpropagation needs: none for the first layer's input).
# Forward: conv1 2*30*30*32*27 = 1,555,200; conv2 2*28*28*64*288 = 28,901,376;
# dense 2*12544*128 = 3,211,264; out 2*128*10 = 2,560 (total 33,670,400).
_FWD = (2 * 30 * 30 * 32 * 27, 2 * 28 * 28 * 64 * 288, 2 * 12544 * 128, 2 * 128 * 10)
FLOPS_PER_EXAMPLE_STEP = 2 * sum(_FWD) + sum(_FWD[1:])


def tiny(w=CIFAR10_PFL):
  """The ``--tiny`` sizes of the GPU kit (a CPU check of the plumbing)."""
  return dict(w, num_clients=10, cohort_size=2, warmup_rounds=1, timed_rounds=1)


def flops_per_round(w) -> int:
  return (w["cohort_size"] * workloads.local_steps(w) * w["batch_size"] *
          FLOPS_PER_EXAMPLE_STEP)


def flax_module(num_classes: int):
  """pfl's simple_cnn (without dropout) as a flax linen module (NHWC input): the same
  architecture as FedJAX's EMNIST CNN, `benchmarks.flax_nets.CNN`."""
  from benchmarks.flax_nets import CNN
  return CNN(num_classes)


def build(w, mesh=None):
  """(algorithm, device population) of workload ``w`` in fedjax_dp."""
  import jax.numpy as jnp
  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
  from fedjax_dp.data.federated_data import from_client_lists
  from fedjax_dp.federated import PopulationData
  from fedjax_dp.models import from_module

  xs, ys = zip(*(workloads.synthetic_client_data(w, c) for c in range(w["num_clients"])))
  fd = from_client_lists("synthetic_cifar10", list(xs), list(ys),
                         num_classes=w["num_classes"])
  model = from_module(flax_module(w["num_classes"]), w["feature_shape"], w["num_classes"],
                      name="pfl_simple_cnn")
  alg = dp_fedavg(model, fd, clip_norm=w["clip_norm"],
                  noise_multiplier=w["noise_multiplier"], sampler="fixed_size",
                  clients_per_round=w["cohort_size"], local_epochs=w["local_epochs"],
                  batch_size=w["batch_size"], client_learning_rate=w["client_learning_rate"],
                  server_learning_rate=w["server_learning_rate"], mesh=mesh)
  return alg, PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))


def run(w, seed: int = 0) -> dict:
  """Times the rounds (`benchmarks.throughput.time_rounds`); the throughput record."""
  import jax
  from benchmarks.throughput import time_rounds
  from fedjax_dp.federated.sharding import client_mesh, replicate

  mesh = client_mesh() if jax.device_count() > 1 else None
  alg, data = build(w, mesh)
  data = replicate(data, mesh)
  times, losses = time_rounds(alg, data, w["warmup_rounds"], w["timed_rounds"], seed)
  versions = {p: md.version(p) for p in ("jax", "jaxlib", "flax", "optax")}
  versions["fedjax_dp"] = md.version("fedjax_dp")
  med = sorted(times)[len(times) // 2]
  return common.throughput_record(
      "fedjax_dp", versions, w, times, backend=jax.default_backend(),
      device=str(jax.devices()[0].device_kind), devices=jax.device_count(),
      warmup_rounds=w["warmup_rounds"], local_steps=workloads.local_steps(w),
      round_losses=losses, first_round_loss=losses[0], last_round_loss=losses[-1],
      loss_ok=common.losses_ok(losses), gflops=flops_per_round(w) / med / 1e9,
      notes="dp_fedavg (fixed-size cohort, per-user clip 0.4, one Gaussian draw on the "
            "sum, server SGD lr 1) with pfl's simple_cnn as a flax module through "
            "models.from_module; one jitted call per round; losses: the mean local "
            "training loss of the first (warm-up) and the last round")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--num-clients", type=int, default=None)
  p.add_argument("--cohort-size", type=int, default=None)
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--tiny", action="store_true", help="the GPU kit's --tiny sizes")
  p.add_argument("--devices", type=int, default=None,
                 help="JAX CPU devices (default one per core; no effect on a GPU)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  w = tiny() if a.tiny else dict(CIFAR10_PFL)
  for key in ("num_clients", "cohort_size", "timed_rounds", "warmup_rounds"):
    if getattr(a, key) is not None:
      w[key] = getattr(a, key)
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(a.devices)  # before JAX's first computation
  common.emit(run(w, a.seed), a.out)


if __name__ == "__main__":
  main()
