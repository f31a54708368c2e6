"""Peer: user-level DP-FedAvg of LEAF's Shakespeare character LSTM in pfl-research.

The pfl-research 0.6.0 side (PyTorch backend, CPU) of `benchmarks.lm`: the same
workload, clients and evaluation sets, read from the ``.npz`` that
`benchmarks.lm.export_clients` writes; run it with the ``pfl`` environment of
`benchmarks.run` (torch 2.13.0 CPU build).

  peer_pfl_lm.py --data clients.npz --serve      # serve mode (`benchmarks.common.serve`)
  peer_pfl_lm.py --data clients.npz              # warm-up + timed rounds, one record

Model (`CharLSTM`): ``nn.Embedding(81, 8)`` -> ``nn.LSTM(8, 256, num_layers=2,
batch_first=True)`` -> ``nn.Linear(256, 81)`` on the last time step, initialised with
fedjax_dp's initial parameters (exported with the data; `load_initial`), so both sides
start from the same model. torch's LSTM keeps two bias vectors per layer (``b_ih`` and
``b_hh``), so it has 2 x 4 x 256 = 2,048 parameters more than fedjax_dp's (820,185
against 818,137); they add two vector additions per step, not a matmul.

The round is pfl's own: ``FederatedAveraging.run`` on a ``SimulatedBackend`` with the
central-DP postprocessor ``CentrallyAppliedPrivacyMechanism(GaussianMechanism)``, as in
`benchmarks/peer_pfl.py` (whose docstring lists the steps of one central iteration:
per-user local torch SGD, l2 clip of the user's update, sum, one Gaussian draw on the
sum, division by the cohort size, central SGD step). To serve it one round per
command, ``run`` runs in a worker thread and the `Stepper` callback (the only callback)
holds it at the end of every central iteration until the next command arrives; the
main thread reads the commands (`benchmarks.common.serve`) and times from the command
to the end of that iteration, so a round's time covers exactly one central iteration.
pfl evaluates at iteration 0 whatever the frequency (see `benchmarks/peer_pfl.py`),
so the first round is a warm-up round; later rounds never evaluate. pfl computes no
training loss outside evaluation, so the per-round losses are NaN; the ``eval``
command gives the central model's mean cross-entropy on the two exported evaluation
sets (untimed, while the worker waits). ``profile`` runs one more round under
``cProfile`` (in the worker thread) and ``torch.profiler`` and reports where its time
went (Python functions by cumulative time, torch operators by self time).
"""

import argparse
import asyncio
import cProfile
import importlib.metadata
import json
import os
import pstats
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.peer_pfl import Classifier  # noqa: E402
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import NNTrainHyperParams  # noqa: E402
from pfl.metrics import Metrics  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism  # noqa: E402

# Where a profiled round's time goes: (label, file fragment, function name); each
# group's time is the cumulative time of its matching function (summed over calls).
PROFILE_GROUPS = (
    ("local training (do_multiple_epochs_of)", "pfl/model/pytorch.py",
     "do_multiple_epochs_of"),
    ("  loss + LSTM forward", "benchmarks/peer_pfl.py", "loss"),
    ("  backward", "torch/_tensor.py", "backward"),
    ("  optimizer step", "torch/optim/sgd.py", "step"),
    ("model difference + reset", "pfl/model/pytorch.py", "get_model_difference"),
    ("clip (constrain_sensitivity)", "pfl/privacy/privacy_mechanism.py",
     "constrain_sensitivity"),
    ("noise on the sum (add_noise)", "pfl/privacy/gaussian_mechanism.py", "add_noise"),
    ("central update (apply_model_update)", "pfl/model/pytorch.py", "apply_model_update"),
)


class CharLSTM(nn.Module):
  """LEAF's Shakespeare LSTM in torch: token ids ``[B, T]`` -> logits ``[B, vocab]``."""

  def __init__(self, vocab: int = 81, embed: int = 8, hidden: int = 256, layers: int = 2):
    super().__init__()
    self.embed = nn.Embedding(vocab, embed)
    self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
    self.out = nn.Linear(hidden, vocab)

  def forward(self, x):
    h, _ = self.lstm(self.embed(x))
    return self.out(h[:, -1])


class Stepper(TrainingProcessCallback):
  """Holds pfl's loop before every central iteration until a command arrives on
  ``go`` (``"round"``, ``"profile"`` or ``"stop"``); reports each finished iteration's
  index on ``done``. ``"profile"`` runs that iteration under ``cProfile``."""

  def __init__(self):
    self.go, self.done = queue.Queue(), queue.Queue()
    self.prof = self.torch_prof = None
    self.last_profile = None

  def _wait(self) -> bool:
    """Blocks until the next command; True for ``stop``; starts profiling for
    ``profile``."""
    cmd = self.go.get()
    if cmd == "stop":
      return True
    if cmd == "profile":
      self.torch_prof = torch.profiler.profile(
          activities=[torch.profiler.ProfilerActivity.CPU])
      self.torch_prof.__enter__()
      self.prof = cProfile.Profile()
      self.prof.enable()  # profiles this (the worker) thread
    return False

  def on_train_begin(self, *, model):
    if self._wait():
      raise SystemExit(0)
    return Metrics()

  def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
    if self.prof is not None:
      self.prof.disable()
      self.torch_prof.__exit__(None, None, None)
      self.last_profile = (self.prof, self.torch_prof)
      self.prof = self.torch_prof = None
    self.done.put(central_iteration)
    return self._wait(), Metrics()


@torch.no_grad()
def load_initial(net: CharLSTM, d: dict) -> None:
  """Copies fedjax_dp's initial parameters (``init.*`` of the export) into ``net``:
  the same gate order (i, f, g, o), kernels transposed to torch's ``[out, in]``, the
  input bias as ``b_ih`` and ``b_hh = 0``, so both sides start from the same model."""
  net.embed.weight.copy_(torch.from_numpy(d["init.embed.embedding"]))
  for l in range(net.lstm.num_layers):
    pre = f"init.lstm_{l}."
    getattr(net.lstm, f"weight_ih_l{l}").copy_(torch.from_numpy(d[pre + "input.kernel"].T))
    getattr(net.lstm, f"bias_ih_l{l}").copy_(torch.from_numpy(d[pre + "input.bias"]))
    getattr(net.lstm, f"weight_hh_l{l}").copy_(
        torch.from_numpy(d[pre + "recurrence.recurrent_kernel"].T))
    getattr(net.lstm, f"bias_hh_l{l}").zero_()
  net.out.weight.copy_(torch.from_numpy(d["init.out.kernel"].T))
  net.out.bias.copy_(torch.from_numpy(d["init.out.bias"]))


def tensors(x, y):
  """uint8 token arrays -> torch int64 tensors (embedding indices, class labels)."""
  return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))


def build(d: dict, w: dict, seed: int):
  """pfl's objects for the exported clients: ``(model, backend, algorithm params,
  train params)``."""
  torch.manual_seed(seed)
  np.random.seed(seed)  # pfl draws its central / sampling seeds from numpy
  n = len(d["x"])
  users = {c: Dataset(raw_data=list(tensors(d["x"][c], d["y"][c])), user_id=str(c))
           for c in range(n)}
  train_data = FederatedDataset(make_dataset_fn=users.__getitem__,
                                user_sampler=get_user_sampler("minimize_reuse",
                                                              list(range(n))))
  net = CharLSTM(w["vocab_size"], w["embed_dim"], w["hidden"], w["num_layers"])
  load_initial(net, d)
  module = Classifier(net)
  model = PyTorchModel(
      model=module, local_optimizer_create=torch.optim.SGD,
      central_optimizer=torch.optim.SGD(module.parameters(), lr=w["server_learning_rate"]))
  dp = CentrallyAppliedPrivacyMechanism(GaussianMechanism(
      clipping_bound=w["clip_norm"], relative_noise_stddev=w["noise_multiplier"]))
  backend = SimulatedBackend(training_data=train_data, val_data=None, postprocessors=[dp])
  many = 10**9  # the loop ends when the Stepper says stop
  algo_params = NNAlgorithmParams(central_num_iterations=many,
                                  evaluation_frequency=many + 1,
                                  train_cohort_size=w["cohort_size"], val_cohort_size=None)
  train_params = NNTrainHyperParams(local_num_epochs=w["local_epochs"],
                                    local_learning_rate=w["client_learning_rate"],
                                    local_batch_size=w["batch_size"])
  return model, backend, algo_params, train_params


def evaluator(model, d: dict, batch: int = 128):
  """``fn() -> {"train": CE, "test": CE}``: the central model's mean cross-entropy on
  the two exported evaluation sets."""
  sets = {k: tensors(d[f"eval_{k}_x"], d[f"eval_{k}_y"]) for k in ("train", "test")}

  @torch.no_grad()
  def fn():
    net = model.pytorch_model
    net.eval()
    out = {}
    for k, (x, y) in sets.items():
      total = sum(float(nn.functional.cross_entropy(net(x[i:i + batch]), y[i:i + batch],
                                                    reduction="sum"))
                  for i in range(0, len(y), batch))
      out[k] = total / len(y)
    return out

  return fn


def profile_summary(prof: cProfile.Profile, torch_prof, seconds: float,
                    top: int = 15) -> dict:
  """The `PROFILE_GROUPS` times and the ``top`` Python functions by cumulative time of
  one profiled round (``seconds``: its wall time under both profilers), and the
  ``top`` torch operators by self CPU time (``torch.profiler``, same round)."""
  ops = sorted(torch_prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
  op_total = sum(e.self_cpu_time_total for e in ops) or 1.0
  torch_ops = [{"op": e.key, "self_ms": e.self_cpu_time_total / 1e3,
                "self_share": e.self_cpu_time_total / op_total,
                "total_ms": e.cpu_time_total / 1e3, "calls": e.count} for e in ops[:top]]
  stats = pstats.Stats(prof).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
  groups = {}
  for label, frag, name in PROFILE_GROUPS:
    hits = [(v[3], v[1]) for (f, _, fn), v in stats.items()
            if fn == name and f.replace(os.sep, "/").endswith(frag)]
    ct, calls = max(hits) if hits else (0.0, 0)
    groups[label] = {"s": ct, "calls": calls}
  rows = sorted(stats.items(), key=lambda kv: -kv[1][3])[:top]
  return {"seconds": seconds, "groups": groups, "torch_ops": torch_ops,
          "torch_op_self_ms_total": op_total / 1e3,
          "top_cumulative": [{"function": f"{os.path.basename(f)}:{ln}:{fn}",
                              "cumulative_s": v[3], "own_s": v[2], "calls": v[1]}
                             for (f, ln, fn), v in rows]}


class PflServer:
  """pfl's loop in a worker thread, stepped one central iteration per call."""

  def __init__(self, d: dict, w: dict, seed: int):
    self.model, backend, algo_params, train_params = build(d, w, seed)
    self.stepper = Stepper()
    self.error = None

    def work():
      # pfl's SimulatedBackend runs asyncio.get_event_loop(), which only the main
      # thread gets implicitly.
      asyncio.set_event_loop(asyncio.new_event_loop())
      try:
        FederatedAveraging().run(algorithm_params=algo_params, backend=backend,
                                 model=self.model, model_train_params=train_params,
                                 model_eval_params=None, callbacks=[self.stepper],
                                 send_metrics_to_platform=False)
      except BaseException as e:  # noqa: BLE001 (reported by the next call)
        self.error = e
        self.stepper.done.put(None)

    self.thread = threading.Thread(target=work, daemon=True)
    self.thread.start()

  def step(self, cmd: str = "round") -> int:
    """Runs one central iteration; returns its index once the new model exists."""
    self.stepper.go.put(cmd)
    it = self.stepper.done.get()
    if it is None:
      raise RuntimeError(f"pfl's loop failed: {self.error!r}")
    return it

  def profile(self) -> dict:
    """One more central iteration under the profilers; `profile_summary`."""
    t0 = time.perf_counter()
    self.step("profile")
    return profile_summary(*self.stepper.last_profile, time.perf_counter() - t0)

  def stop(self) -> None:
    """Ends pfl's loop after the current iteration."""
    self.stepper.go.put("stop")
    self.thread.join(timeout=60)


def record(w: dict, meta: dict, seconds, initial, warmup: int) -> dict:
  """`benchmarks.common.throughput_record` of the timed rounds."""
  ver = importlib.metadata.version
  return common.throughput_record(
      "pfl-research", {"pfl": ver("pfl"), "torch": torch.__version__,
                       "dp-accounting": ver("dp-accounting"), "numpy": ver("numpy")},
      w, list(seconds), warmup_rounds=warmup, torch_threads=torch.get_num_threads(),
      torch_mkldnn=torch.backends.mkldnn.is_available(), torch_cuda=torch.version.cuda,
      omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"), initial_eval=initial,
      params=sum(p.numel() for p in CharLSTM(w["vocab_size"], w["embed_dim"], w["hidden"],
                                               w["num_layers"]).parameters()),
      data=meta["data"],
      notes="pfl FederatedAveraging.run on SimulatedBackend (cpu, eager torch), stepped "
            "one central iteration per command by a callback; user sampler "
            "minimize_reuse; central DP = CentrallyAppliedPrivacyMechanism("
            "GaussianMechanism): per-user l2 clip of the whole update, one Gaussian draw "
            "(std C z) on the cohort sum, FedAvg divides by the cohort size and applies "
            "with torch SGD lr 1. Round time = from the round command to the end of the "
            "central iteration; no evaluation after iteration 0 (the warm-up round).")


def main():
  """Command line: serve mode, or warm-up + timed rounds and one JSON record."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--data", required=True, help="benchmarks.lm.export_clients's .npz")
  p.add_argument("--serve", action="store_true")
  p.add_argument("--timed-rounds", type=int, default=None)
  p.add_argument("--warmup-rounds", type=int, default=None)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None)
  args = p.parse_args()
  with np.load(args.data) as f:
    d = {k: f[k] for k in f.files}
  meta = json.loads(str(d["meta"]))
  w = meta["workload"]
  warmup = w["warmup_rounds"] if args.warmup_rounds is None else args.warmup_rounds
  if warmup < 1:
    p.error("need >= 1 warm-up round (pfl always evaluates at iteration 0)")
  server = PflServer(d, w, args.seed)
  evaluate = evaluator(server.model, d)
  initial = evaluate()

  def run_round(r):
    server.step()
    return float("nan")

  def finish(seconds, losses):
    server.stop()
    return record(w, meta, seconds, initial, warmup)

  if args.serve:
    common.serve(run_round, warmup, finish,
                 ready_info={"framework": "pfl-research", "initial_eval": initial},
                 extras={"eval": lambda: {"loss": evaluate()}, "profile": server.profile})
    return
  timed = w["timed_rounds"] if args.timed_rounds is None else args.timed_rounds
  seconds, _ = common.timed_rounds(run_round, warmup, timed)
  rec = finish(seconds, None)
  rec.update(final_eval=evaluate())
  common.emit(rec, args.out)


if __name__ == "__main__":
  main()
