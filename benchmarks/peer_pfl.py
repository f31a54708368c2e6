"""Peer benchmark: user-level DP-FedAvg in Apple's pfl-research (PyTorch backend).

Workloads: the shared ones of `benchmarks.workloads` (``mlp``, ``cnn``) and
``cifar10_pfl``, pfl-research's own CIFAR-10 benchmark shape (cohort 50, 50 points per
user, local batch 10, 1 epoch, its simple CNN, CIFAR-shaped random data:
`benchmarks.gpu.cifar10`). ``--device cpu|cuda|cuda:N`` (default cpu) is pfl's torch
device (``PFL_PYTORCH_DEVICE``: the model, and every batch as pfl moves it there);
with CUDA each round's end is taken after ``torch.cuda.synchronize()``.

  peer_pfl.py --workload mlp [--device cuda] [--timed-rounds R] [--warmup-rounds W]

What is measured
----------------
pfl drives the whole loop itself (``FederatedAveraging.run``), so a
``TrainingProcessCallback`` records ``time.perf_counter()`` at the start of training
and after every central iteration; a round's time is the gap between consecutive
marks. It is the callback listed first, pfl adds no default callbacks, and
``send_metrics_to_platform=False`` (pfl would otherwise print every round's metrics),
so each gap covers exactly one central iteration of pfl's loop:

1. ``get_next_central_contexts`` (hyper-parameter snapshot, cohort seed);
2. ``SimulatedBackend.async_gather_results``: for each of the ``cohort_size`` users
   (``MinimizeReuseUserSampler``, data pre-built in memory) ``simulate_one_user``
   snapshots the global parameters, runs 1 local epoch of torch SGD
   (``local_steps(w)`` batches of ``batch_size``), takes the model difference and
   resets the model; the difference goes through the postprocessor
   ``CentrallyAppliedPrivacyMechanism(GaussianMechanism)``, whose
   ``postprocess_one_user`` calls ``GaussianMechanism.constrain_sensitivity`` = l2
   clipping of this user's whole update to ``clip_norm`` (``NormClipping``); the
   clipped update is summed (``SumAggregator``, weight 1 per user). After the cohort,
   ``postprocess_server`` calls ``GaussianMechanism.add_noise`` ONCE on the sum:
   N(0, (clip_norm * noise_multiplier)^2) per coordinate;
3. ``FederatedAveraging.process_aggregated_statistics``: divide the noisy sum by the
   total weight (= cohort size) and apply it with the central torch SGD optimizer
   (lr ``server_learning_rate`` = 1: plain FedAvg); eager CPU torch is synchronous, so
   the new global model is materialised when the callback fires (on CUDA the callback
   synchronises first).

pfl 0.6.0's ``SimulatedBackend`` has no ``central_privacy_mechanism`` argument: central
DP is a postprocessor, exactly as above. pfl evaluates users before/after local
training when ``iteration % evaluation_frequency == 0``, which is always true at
iteration 0, so at least one warm-up round is required; later rounds never evaluate.
Training loss is therefore the central model's mean cross-entropy on 1000 held-out
synthetic examples (clients ``num_clients..num_clients+k``), computed after the last
warm-up round and after the last timed round, outside the timed region.
"""

import argparse
import importlib.metadata
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks import common, workloads  # noqa: E402
from benchmarks.gpu.cifar10 import CIFAR10_PFL  # noqa: E402
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import NNTrainHyperParams  # noqa: E402
from pfl.metrics import Metrics, Weighted  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism  # noqa: E402


WORKLOADS = dict(workloads.WORKLOADS, cifar10_pfl=CIFAR10_PFL)


class Classifier(nn.Module):
  """A torch module with the ``loss``/``metrics`` methods pfl's PyTorchModel calls."""

  def __init__(self, net: nn.Module):
    super().__init__()
    self.net = net

  def forward(self, x):
    return self.net(x)

  def loss(self, x, y, eval=False):  # noqa: A002 (pfl's keyword)
    self.eval() if eval else self.train()
    return nn.functional.cross_entropy(self(x), y)

  @torch.no_grad()
  def metrics(self, x, y, eval=False):  # noqa: A002
    self.eval() if eval else self.train()
    loss = nn.functional.cross_entropy(self(x), y, reduction="sum").item()
    return {"loss": Weighted(loss, len(y))}


def simple_cnn(num_classes: int) -> nn.Module:
  """pfl-research's ``simple_cnn`` for 32x32x3 inputs (its benchmarks' model), without
  its two dropout layers (see `benchmarks.gpu.cifar10`); NCHW input, Glorot-uniform
  weights as pfl initialises them."""
  net = nn.Sequential(
      nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
      nn.Flatten(), nn.Linear(14 * 14 * 64, 128), nn.ReLU(), nn.Linear(128, num_classes))
  for m in net.modules():
    if isinstance(m, (nn.Conv2d, nn.Linear)):
      nn.init.xavier_uniform_(m.weight)
  return net


def make_net(w) -> nn.Module:
  if w["name"] == "cifar10_pfl":
    return simple_cnn(w["num_classes"])
  if w["name"] == "mlp":
    h1, h2 = w["hidden"]
    return nn.Sequential(nn.Flatten(), nn.Linear(784, h1), nn.ReLU(),
                         nn.Linear(h1, h2), nn.ReLU(), nn.Linear(h2, w["num_classes"]))
  return nn.Sequential(  # FedJAX EMNIST CNN, no dropout; NCHW input 1x28x28.
      nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
      nn.Linear(128, w["num_classes"]))


def client_tensors(w, client_id: int, seed: int):
  """The shared synthetic data of one client as torch tensors (NCHW for the CNN)."""
  x, y = workloads.synthetic_client_data(w, client_id, seed)
  x = torch.from_numpy(x)
  if x.dim() == 4:  # NHWC -> NCHW
    x = x.permute(0, 3, 1, 2).contiguous()
  return x, torch.from_numpy(y).long()


class RoundTimer(TrainingProcessCallback):
  """Wall-clock per central iteration, plus the held-out loss outside the timing."""

  def __init__(self, warmup: int, total: int, eval_fn, device: str = "cpu"):
    self.warmup, self.total, self.eval_fn = warmup, total, eval_fn
    self.seconds, self.first_loss, self.last_loss = [], None, None
    self.cuda = str(device).startswith("cuda")

  def _sync(self):
    if self.cuda:
      torch.cuda.synchronize()

  def on_train_begin(self, *, model):
    self._sync()
    self.t_prev = time.perf_counter()
    return Metrics()

  def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
    self._sync()
    now = time.perf_counter()
    self.seconds.append(now - self.t_prev)
    if central_iteration == self.warmup - 1:
      self.first_loss = self.eval_fn(model)
    if central_iteration == self.total - 1:
      self.last_loss = self.eval_fn(model)
    self._sync()
    self.t_prev = time.perf_counter()  # excludes the evaluation above
    return False, Metrics()


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
  p.add_argument("--device", default="cpu",
                 help="pfl's torch device: cpu (default), cuda or cuda:N")
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--out", default=None)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--num-clients", type=int, default=None,
                 help="override the workload's population (quick checks)")
  p.add_argument("--cohort-size", type=int, default=None,
                 help="override the workload's cohort (quick checks)")
  args = p.parse_args()
  w = dict(WORKLOADS[args.workload])
  for key in ("num_clients", "cohort_size"):
    if getattr(args, key) is not None:
      w[key] = getattr(args, key)
  # pfl reads its device from here at every use (pfl.internal.ops.pytorch_ops).
  os.environ["PFL_PYTORCH_DEVICE"] = args.device
  warmup = w["warmup_rounds"] if args.warmup_rounds is None else args.warmup_rounds
  timed = w["timed_rounds"] if args.timed_rounds is None else args.timed_rounds
  if warmup < 1 or timed < 1:
    p.error("need >= 1 warm-up round (pfl always evaluates at iteration 0) and "
            ">= 1 timed round")
  total = warmup + timed
  torch.manual_seed(args.seed)
  np.random.seed(args.seed)  # pfl draws its central / sampling seeds from numpy

  # Per-user data, built once and cached before timing.
  users = {}
  for cid in range(w["num_clients"]):
    users[cid] = Dataset(raw_data=client_tensors(w, cid, args.seed), user_id=str(cid))
  train_data = FederatedDataset(
      make_dataset_fn=users.__getitem__,
      user_sampler=get_user_sampler("minimize_reuse", list(range(w["num_clients"]))))
  held = [client_tensors(w, w["num_clients"] + k, args.seed)
          for k in range(-(-1000 // w["examples_per_client"]))]
  x_eval = torch.cat([x for x, _ in held])[:1000].to(args.device)
  y_eval = torch.cat([y for _, y in held])[:1000].to(args.device)

  module = Classifier(make_net(w))
  model = PyTorchModel(
      model=module, local_optimizer_create=torch.optim.SGD,
      central_optimizer=torch.optim.SGD(module.parameters(), lr=w["server_learning_rate"]))
  dp = CentrallyAppliedPrivacyMechanism(GaussianMechanism(
      clipping_bound=w["clip_norm"], relative_noise_stddev=w["noise_multiplier"]))
  backend = SimulatedBackend(training_data=train_data, val_data=None,
                             postprocessors=[dp])
  algo_params = NNAlgorithmParams(
      central_num_iterations=total, evaluation_frequency=total + 1,
      train_cohort_size=w["cohort_size"], val_cohort_size=None)
  train_params = NNTrainHyperParams(
      local_num_epochs=w["local_epochs"], local_learning_rate=w["client_learning_rate"],
      local_batch_size=w["batch_size"])

  def eval_loss(m):
    with torch.no_grad():
      return float(m.pytorch_model.loss(x_eval, y_eval, eval=True))

  timer = RoundTimer(warmup, total, eval_loss, args.device)
  FederatedAveraging().run(algorithm_params=algo_params, backend=backend, model=model,
                           model_train_params=train_params, model_eval_params=None,
                           callbacks=[timer], send_metrics_to_platform=False)
  assert len(timer.seconds) == total, timer.seconds

  ver = importlib.metadata.version
  record = common.throughput_record(
      framework="pfl-research",
      versions={"pfl": ver("pfl"), "torch": torch.__version__,
                "dp-accounting": ver("dp-accounting"), "numpy": ver("numpy")},
      workload=w, round_seconds=timer.seconds[warmup:],
      warmup_rounds=warmup, local_steps=workloads.local_steps(w),
      torch_threads=torch.get_num_threads(), device=args.device,
      device_name=(torch.cuda.get_device_name(torch.device(args.device))
                   if args.device.startswith("cuda") else "cpu"),
      torch_cuda=torch.version.cuda,
      first_round_loss=timer.first_loss, last_round_loss=timer.last_loss,
      notes=(f"pfl FederatedAveraging.run on SimulatedBackend ({args.device}, eager "
             "torch); "
             "user sampler minimize_reuse; central DP = postprocessor "
             "CentrallyAppliedPrivacyMechanism(GaussianMechanism): per-user l2 clip "
             "of the whole model update in postprocess_one_user, one Gaussian noise "
             "draw (std clip*z) on the cohort sum in postprocess_server, then "
             "FedAvg divides by cohort size and applies with torch SGD lr=1. "
             "Round time = gap between after_central_iteration callbacks; no "
             "evaluation after iteration 0 (a warm-up round); losses are the "
             "central model's mean CE on 1000 held-out synthetic examples after "
             "the last warm-up round and after the last timed round (untimed)."))
  common.emit(record, args.out)


if __name__ == "__main__":
  main()
