"""Peer benchmark: record-level DP-SGD in Meta's Opacus (1.6, PyTorch; CPU by default).

Two measurements (section "dpsgd" of `benchmarks.run`), each printing one JSON record:

``--workload dpsgd_mlp|dpsgd_cnn``: federated record-level DP-SGD as an Opacus user
writes it, one process, clients in a Python loop. Built once, before timing:

* the torch net (``make_net``: the same architectures as ``peer_pfl.py``), wrapped by
  ``PrivacyEngine.make_private(..., poisson_sampling=True, grad_sample_mode=MODE)``:
  a ``GradSampleModule`` (``hooks``: per-sample gradients from forward/backward hooks,
  Opacus's default; ``ghost``: ``GradSampleModuleFastGradientClipping``, ghost
  clipping: per-sample norms without per-sample gradients, two backward passes) and a
  ``DPOptimizer`` over ``torch.optim.SGD(lr=client_learning_rate)`` with
  ``noise_multiplier``, ``max_grad_norm = clip_norm``, ``expected_batch_size`` = 20;
* one ``DPDataLoader`` per client (``DPDataLoader.from_data_loader`` of a
  ``DataLoader(TensorDataset(x, y), batch_size=expected_batch_size)``): each
  iteration is one epoch of ``len(loader)`` = 100 / 20 = ``local_steps`` Poisson batches
  with sample rate 1 / len(loader) = q = 0.2 (Opacus's ``UniformWithReplacementSampler``).

One round (timed with ``time.perf_counter`` until the new global parameters exist; eager
CPU torch is synchronous): for each of the ``cohort_size`` clients, copy the global
parameters into the wrapped model, run the client's loader (each batch:
``optimizer.zero_grad()``, forward, mean cross-entropy (the ghost criterion wrapper
for ``ghost``), ``backward()``, ``optimizer.step()`` = per-sample clip to C, sum,
Gaussian noise of std z C, divide by the expected batch size, SGD step), add
``local - global`` to a running sum; then the server adds
``server_learning_rate * sum / cohort_size`` to the global parameters.

``--serve`` (with ``--workload``): build and warm up once, then one timed round per
``round`` line on stdin (`benchmarks.common.serve`, driven by `benchmarks.interleave`).

``--device cpu|cuda|cuda:N`` (default cpu): the torch device of the net, the data and
the optimiser state (rounds and calls are timed after ``torch.cuda.synchronize()``).
Every record holds ``torch_build`` (`torch_build`: torch version, ``torch.version.cuda``
(None for a CPU wheel), mkldnn, threads, Opacus version, device).

  peer_opacus.py --workload dpsgd_mlp --mode ghost [--device cuda] [--serve]
  peer_opacus.py --micro [--models mlp,cnn] [--batch-sizes 20,256] [--device cuda]

``--micro``: the per-example clipped gradient sum of one batch (no noise, no update):
``hooks``: ``zero_grad``, forward, mean loss, ``backward()`` (per-sample gradients in
``p.grad_sample``), ``DPOptimizer.clip_and_accumulate()`` (per-sample norms, clip
factors, sum into ``p.summed_grad``); ``ghost``: ``zero_grad``, forward, the ghost
criterion, ``backward()`` (the clipped sum in ``p.grad``). Both methods run on the same
parameters and data, and their sums must agree (a sanity check), as must the norm
bound ``||sum|| <= B C``. Times: median of ``--repeat`` calls after 3 warm-up calls.
"""

import argparse
import importlib.metadata
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from benchmarks import common, workloads  # noqa: E402

warnings.filterwarnings("ignore")  # Opacus warns about secure_mode and the new dataset
MODES = ("hooks", "ghost")


def _fix_opacus_unfold2d():
  """Workaround: Opacus 1.6's ``unfold2d`` (used by the Conv2d per-sample gradients of
  ``hooks`` and the conv norms of ``ghost``) builds an ``as_strided`` view from
  contiguous-NCHW strides, but torch 2.13's CPU convolution returns channels-last
  outputs here (strides ``(21632, 1, 832, 32)`` for the second conv's input), so the
  second conv's per-sample gradients come out wrong (relative error about 1.2 against
  per-example autograd; the clipped sum off by about 17%). Making the input contiguous
  first (one copy of the activation) restores exact results; `micro` checks every
  method against a ``torch.func`` reference, so a wrong method cannot post a time."""
  from opacus.grad_sample import conv
  from opacus.utils.tensor_utils import unfold2d
  conv.unfold2d = lambda input, **kw: unfold2d(input.contiguous(), **kw)


def make_net(arch: str, num_classes: int) -> nn.Module:
  """The torch nets of ``peer_pfl.py`` (same architectures as fedjax_dp's) and the user
  CNN of workload ``dpsgd_user_cnn`` (`benchmarks.flax_nets.UserCNN` in torch:
  ``padding=1`` is flax's SAME for a 3x3 kernel; the flatten order differs from flax's
  NHWC, a permutation of the dense weight's rows, the same function class)."""
  if arch == "user_cnn":  # NCHW input 3x32x32.
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
        nn.Linear(8 * 8 * 32, num_classes))
  if arch == "mlp":
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(),
                         nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, num_classes))
  return nn.Sequential(  # FedJAX EMNIST CNN, no dropout; NCHW input 1x28x28.
      nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
      nn.Linear(128, num_classes))


def client_tensors(w, client_id: int, seed: int = 0, device: str = "cpu"):
  """The shared synthetic data of one client as torch tensors (NCHW for the CNNs) on
  ``device``."""
  x, y = workloads.synthetic_client_data(w, client_id, seed)
  x = torch.from_numpy(x)
  if x.dim() == 4:  # NHWC -> NCHW
    x = x.permute(0, 3, 1, 2).contiguous()
  return x.to(device), torch.from_numpy(y).long().to(device)


def synchronize(device: str) -> None:
  """Waits for the device's queued work (CUDA kernels are asynchronous; CPU is not)."""
  if str(device).startswith("cuda"):
    torch.cuda.synchronize()


def make_private(w, mode: str, loader, seed: int, device: str = "cpu"):
  """(module, optimizer, criterion) from ``PrivacyEngine.make_private``."""
  from opacus import PrivacyEngine
  torch.manual_seed(seed)
  net = make_net(w["arch"], w["num_classes"]).to(device)
  opt = torch.optim.SGD(net.parameters(), lr=w["client_learning_rate"])
  out = PrivacyEngine().make_private(
      module=net, optimizer=opt, data_loader=loader, criterion=nn.CrossEntropyLoss(),
      noise_multiplier=w["noise_multiplier"], max_grad_norm=w["clip_norm"],
      poisson_sampling=True, grad_sample_mode=mode)
  if mode == "ghost":
    module, optimizer, criterion, _ = out
  else:
    (module, optimizer, _), criterion = out, nn.CrossEntropyLoss()
  assert optimizer.expected_batch_size == w["expected_batch_size"], \
      optimizer.expected_batch_size
  return module, optimizer, criterion


def versions():
  ver = importlib.metadata.version
  return {"opacus": ver("opacus"), "torch": torch.__version__, "numpy": ver("numpy")}


def torch_build(device: str = "cpu"):
  """Which torch build runs (CPU and CUDA wheels of one version differ on a CPU: the
  CUDA wheel bundles other BLAS/oneDNN paths): version, CUDA version (None for a CPU
  wheel), oneDNN (mkldnn) availability, intra-op threads, Opacus version, device."""
  return {"torch": torch.__version__, "cuda": torch.version.cuda,
          "mkldnn": bool(torch.backends.mkldnn.is_available()),
          "num_threads": torch.get_num_threads(),
          "opacus": importlib.metadata.version("opacus"), "device": str(device),
          "device_name": (torch.cuda.get_device_name(0) if str(device).startswith("cuda")
                          else "cpu")}


def round_runner(w, mode: str, seed: int, device: str = "cpu"):
  """``(run_round, sampled)``: ``run_round(r) -> mean loss`` runs one federated round
  (clients in a Python loop) and returns once the new global parameters exist;
  ``sampled`` collects each round's number of sampled examples."""
  from opacus.data_loader import DPDataLoader
  torch.manual_seed(seed)
  loaders = []
  for cid in range(w["num_clients"]):
    x, y = client_tensors(w, cid, seed, device)
    base = DataLoader(TensorDataset(x, y), batch_size=w["expected_batch_size"])
    assert len(base) == w["local_steps"], (len(base), w["local_steps"])
    loaders.append(DPDataLoader.from_data_loader(base))
  module, optimizer, criterion = make_private(w, mode, loaders[0], seed, device)
  params = [p for p in module.parameters() if p.requires_grad]
  global_params = [p.detach().clone() for p in params]
  sampled = []

  def run_round(r):
    acc = [torch.zeros_like(g) for g in global_params]
    loss_sum, n_batches, n_examples = 0.0, 0, 0
    for k in range(w["cohort_size"]):
      with torch.no_grad():
        for p, g in zip(params, global_params):
          p.copy_(g)
      for xb, yb in loaders[k]:
        # A no-op on the device's own tensors; an empty Poisson batch comes from
        # Opacus's collate on the CPU.
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = criterion(module(xb), yb)
        loss.backward()
        optimizer.step()
        if len(yb):
          loss_sum += float(loss.item())
          n_batches += 1
          n_examples += len(yb)
      with torch.no_grad():
        for a, p, g in zip(acc, params, global_params):
          a.add_(p - g)
    with torch.no_grad():
      scale = w["server_learning_rate"] / w["cohort_size"]
      for g, a in zip(global_params, acc):
        g.add_(a, alpha=scale)
    synchronize(device)
    sampled.append(n_examples)
    return loss_sum / max(n_batches, 1)
  return run_round, sampled


def federated(w, mode: str, warmup: int, timed: int, seed: int, device: str = "cpu",
              serve: bool = False):
  """Times ``warmup + timed`` rounds; returns the JSON record. With ``serve``: serves
  the timed rounds on stdin/stdout instead (`common.serve`) and returns None."""
  run_round, sampled = round_runner(w, mode, seed, device)

  def finish(seconds, losses):
    return record(w, mode, seconds, losses, sampled[warmup:], device)
  if serve:
    common.serve(run_round, warmup, finish, {"framework": "opacus", "method": mode,
                                             "torch_build": torch_build(device)})
    return None
  seconds, losses = common.timed_rounds(run_round, warmup, timed)
  return finish(seconds, losses)


def record(w, mode, seconds, losses, sampled, device):
  return common.dpsgd_record(
      "opacus", versions(), w, seconds, losses, method=mode,
      padded_batch="none (variable Poisson batches, eager)",
      sampled_examples_per_round=sampled, torch_threads=torch.get_num_threads(),
      torch_build=torch_build(device), device=str(device),
      notes=(f"PrivacyEngine.make_private(poisson_sampling=True, grad_sample_mode="
             f"'{mode}') once; one DPDataLoader per client; clients in a Python loop, "
             "global parameters copied into the wrapped model before each client; "
             "server averages the deltas (lr 1)."))


def reference_clipped_sum(net: nn.Module, x, y, clip_norm: float) -> torch.Tensor:
  """The clipped gradient sum from ``torch.func`` (vmap of per-example grads), flat."""
  from torch.func import functional_call, grad, vmap
  params = {k: v.detach() for k, v in net.named_parameters()}

  def loss(p, xe, ye):
    return nn.functional.cross_entropy(functional_call(net, p, (xe[None],)), ye[None])

  g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
  flat = torch.cat([g[k].reshape(len(x), -1) for k in params], 1)
  factor = (clip_norm / (flat.norm(dim=1) + 1e-6)).clamp(max=1.0)
  return (factor[:, None] * flat).sum(0)


def micro(models, batch_sizes, repeat: int, seed: int, device: str = "cpu"):
  """Per-example clipped gradient sum of one batch, both Opacus methods, each checked
  against `reference_clipped_sum` on the same initial parameters and data."""
  results = []
  for arch in models:
    base_w = workloads.DPSGD_BY_ARCH[arch]
    for b in batch_sizes:
      w = dict(base_w, examples_per_client=b, expected_batch_size=b)
      x, y = client_tensors(w, 0, seed, device)
      loader = DataLoader(TensorDataset(x, y), batch_size=b)
      torch.manual_seed(seed)  # make_private seeds the same way: same parameters
      ref = reference_clipped_sum(make_net(arch, w["num_classes"]).to(device), x, y,
                                  w["clip_norm"])
      for mode in MODES:
        module, optimizer, criterion = make_private(w, mode, loader, seed, device)
        params = [p for p in module.parameters() if p.requires_grad]

        def call(module=module, optimizer=optimizer, criterion=criterion, params=params,
                 mode=mode, x=x, y=y):
          optimizer.zero_grad()
          loss = criterion(module(x), y)
          loss.backward()
          if mode == "hooks":
            optimizer.clip_and_accumulate()
            out = [p.summed_grad for p in params]
          else:
            out = [p.grad for p in params]
          synchronize(device)
          return out

        for _ in range(3):
          call()
        secs = []
        for _ in range(repeat):
          t0 = time.perf_counter()
          out = call()
          secs.append(time.perf_counter() - t0)
        got = torch.cat([g.reshape(-1) for g in out]).detach()
        results.append(common.micro_result(arch, b, mode, secs, **common.check_sum(
            got.cpu().numpy(), ref.cpu().numpy(), b, w["clip_norm"])))
  return common.micro_record("opacus", versions(), results,
                             torch_threads=torch.get_num_threads(),
                             torch_build=torch_build(device), device=str(device))


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workload", choices=sorted(workloads.DPSGD_WORKLOADS))
  p.add_argument("--mode", choices=MODES, default="hooks")
  p.add_argument("--micro", action="store_true", help="the one-batch microbenchmark")
  p.add_argument("--models", default="mlp,cnn")
  p.add_argument("--batch-sizes", default=",".join(
      map(str, workloads.DPSGD_MICRO_BATCH_SIZES)))
  p.add_argument("--repeat", type=int, default=10)
  p.add_argument("--cohort-size", type=int, default=None,
                 help="override the workload's clients (quick checks)")
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--no-unfold-fix", action="store_true",
                 help="run Opacus as installed (see _fix_opacus_unfold2d)")
  p.add_argument("--device", default="cpu",
                 help="torch device: cpu (default), cuda or cuda:N")
  p.add_argument("--serve", action="store_true",
                 help="with --workload: serve rounds on stdin (benchmarks.interleave)")
  p.add_argument("--out", default=None)
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args()
  if a.micro == (a.workload is not None):
    p.error("give exactly one of --workload and --micro")
  if a.device.split(":")[0] not in ("cpu", "cuda"):
    p.error(f"--device: cpu, cuda or cuda:N, got {a.device!r}")
  if a.device.startswith("cuda") and not torch.cuda.is_available():
    p.error(f"--device {a.device}: torch {torch.__version__} sees no CUDA device "
            f"(torch.version.cuda = {torch.version.cuda})")
  np.random.seed(a.seed)
  if not a.no_unfold_fix:
    _fix_opacus_unfold2d()
  if a.micro:
    rec = micro(a.models.split(","), [int(b) for b in a.batch_sizes.split(",")], a.repeat,
                a.seed, a.device)
  else:
    w = workloads.DPSGD_WORKLOADS[a.workload]
    if a.cohort_size:
      w = dict(w, cohort_size=a.cohort_size, num_clients=a.cohort_size)
    warm = w["warmup_rounds"] if a.warmup_rounds is None else a.warmup_rounds
    timed = w["timed_rounds"] if a.timed_rounds is None else a.timed_rounds
    rec = federated(w, a.mode, warm, timed, a.seed, a.device, a.serve)
    if rec is None:  # served
      return
  common.emit(rec, a.out)


if __name__ == "__main__":
  main()
