"""Amplitude-varying perturbation: Algorithm 1 of Yuan, Ni, Ding, Wei, Li, Poor,
"Amplitude-Varying Perturbation for Balancing Privacy and Utility in Federated Learning"
(IEEE TIFS 2023; equation numbers are the paper's).

Per round m = 1..M (Algorithm 1, note section 2.5):

  1. K of the U clients are drawn uniformly without replacement (q = K/U).
  2. Each runs tau full-batch gradient steps from omega(m-1), eq. (2), and after every
     step clips its *parameters*: w <- w / max(1, ||w|| / C) (Algorithm 1, line 9).
  3. Each adds its own noise N(0, Theta(m) I) to its model, eq. (3), with the geometric
     variance Theta(m) = vartheta^(m-1) sigma^2, eq. (6), and sigma from eq. (8).
  4. The server averages, omega(m) = sum_k p_k (w_k + n_k), p_k = |D_k| / sum_j |D_j|
     over the sampled clients, eq. (4).

The compiled round reads sigma_m from the schedule array, so sweeping vartheta, M or
epsilon never recompiles (`fedjax_dp.algorithms.amplitude_varying.schedules` computes
the schedules).
Online refinement (Theorem 2, eq. 9) is `OnlineRefinement`, a host-side controller fed
the test loss after each round; `train_algorithm1` runs either in a plain loop (`fedjax-dp run` uses the plug-in in
`plugin`).

Privacy statement: record-level (one example of one client's local dataset),
replace-one. The example's client is in the cohort with probability K/U, drawn without
replacement, and its noisy model is the release. The server weights each upload by its
sender's p_k (eq. 4), so it sees every upload with its sender (observation
``"attributable"``): the client's participation is visible and gives no amplification.
Each round is ``VisibleParticipationDpEvent(K/U, GaussianDpEvent(sigma_m / Delta))``
(`fedjax_dp.privacy.events`: the example's upload is a Gaussian release in the rounds
its client takes part in and the other rounds reveal nothing of it; exact, RDP and PLD)
with Delta the sensitivity of a client's trained model. (Earlier versions
accounted as ``SampledWithoutReplacementDpEvent(U, K, ...)``, an amplification the
visible sender does not allow.) Which Delta?

* The paper's Delta_s = 2C / min_k |D_k| (section III-C, after NbAFL) assumes that
  full-batch GD moves a model by at most that much when one example is replaced. The
  client's gradients are not clipped, so this does not hold (a single example with
  large features moves a linear model by far more; tests/algorithms/amplitude_varying/
  test_amplitude_varying.py measures it). It is the paper's *calibration* (eq. 8), kept
  as written, and an epsilon computed with it is reported as *conditional*
  (``epsilon_conditional_rdp`` in summary.json).
* ``sensitivity_mode="paper"`` (default): the guarantee the code enforces uses
  Delta = 2C, the diameter of the parameter ball every trained model is projected onto
  (`fedjax_dp.privacy.sensitivity.ball_sensitivity`). With the paper's small noise it
  is a very large epsilon: it is what the run provably has.
* ``sensitivity_mode="clipped_gradients"``: local training clips every per-example
  gradient to ``grad_clip_norm`` G, Delta is
  `fedjax_dp.privacy.sensitivity.clipped_gd_sensitivity` (``2 eta G / |D_k|`` for one
  local step), and eq. (8) calibrates the noise with this Delta: provable, and the
  paper's formula otherwise unchanged.

The paper's own epsilon (`schedules.paper_epsilon`) is reported beside both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import (Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union,
                    get_args)

import jax
import numpy as np
import optax

from fedjax_dp.algorithms.amplitude_varying import schedules
from fedjax_dp.algorithms.base import Algorithm, PrivacySpec, require_learning_rates
from fedjax_dp.federated import server, sharding
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, make_round,
                                       round_observation, round_relation)
from fedjax_dp.federated.sampling import FixedSizeSampler
from fedjax_dp.privacy import sensitivity
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_int, check_positive)

__all__ = ["Mechanism", "MECHANISMS", "amplitude_varying", "schedule_hparams",
           "hparams_for", "OnlineRefinement", "NoiseController", "train_algorithm1"]

#: The noise of `amplitude_varying` (the tuple: its values).
Mechanism = Literal["gaussian", "laplace", "none"]
MECHANISMS: Tuple[str, ...] = get_args(Mechanism)


def amplitude_varying(model, data, *, epsilon: float = 10.0, delta: float = 1e-3,
                      vartheta: float = 1.0, rounds: int = 30, clients_per_round: int = 10,
                      local_steps: int = 5, learning_rate: float = 0.1,
                      clip_norm: float = 5.0, mechanism: str = "gaussian",
                      laplace_mode: str = "pure_dp_split", batch_size: Optional[int] = None,
                      sensitivity_mode: str = "paper",
                      grad_clip_norm: Optional[float] = None,
                      chunk_size: Optional[int] = None, mesh=None,
                      observed_client: Optional[int] = None) -> Algorithm:
  """Algorithm 1 of the paper, instantiated for one dataset and model.

  Args:
    model: a `fedjax_dp.models.Model` (e.g. ``create_model("mlp", ..., hidden=(32,),
      activation="linear")``, the paper's 784-32-10 MLP).
    data: `FederatedData` (or a population with ``num_clients``, ``max_examples``,
      ``counts``); Delta_s uses ``min_k |D_k|``.
    epsilon, delta: the target (epsilon, delta) of eq. (8) (epsilon > 0).
    vartheta: ratio of the geometric variance series, eq. (6) (> 0; 1 = persistent).
    rounds: M, the planned number of aggregations.
    clients_per_round: K; q = K / U.
    local_steps: tau, local full-batch GD steps per round, eq. (2).
    learning_rate: eta (the paper does not state it; note section 9 item 1).
    clip_norm: C, the bound on each client's parameter norm after every step.
    mechanism: ``"gaussian"`` (the paper's), ``"laplace"`` (its "Lap" baseline,
      constant variance, calibrated by ``laplace_mode``; `schedules.laplace_scale`) or
      ``"none"`` (no noise, clipping kept: the paper's "no DP").
    batch_size: local minibatch size; None = full batch (the paper's GD; note section
      9 item 2).
    sensitivity_mode: ``"paper"`` (eq. 8 with the paper's Delta_s; the guarantee uses
      2C) or ``"clipped_gradients"`` (per-example gradients clipped to
      ``grad_clip_norm``; eq. 8 and the guarantee use the provable Delta). See the
      module docstring.
    grad_clip_norm: G > 0, required with ``"clipped_gradients"``.
    chunk_size, mesh: see `fedjax_dp.federated.round.make_round`.
    observed_client: a client id whose upload the round also returns as the server
      receives it (``RoundConfig.observed_client``; canary audits), or None.

  Returns:
    An `Algorithm` whose ``hparams`` hold round 1's values and whose ``config``
    holds ``sensitivity`` (the Delta the guarantee uses), ``sensitivity_paper``
    (Delta_s), ``calibration_sensitivity`` (the Delta of eq. 8), ``stddevs`` (the
    planned [M] schedule of sigma_m) and the paper's parameters. Build per-round
    hyper-parameters with `hparams_for`.

  Raises:
    FedJaxDpError: invalid arguments (named), before anything is compiled.
  """
  check_choice("mechanism", mechanism, MECHANISMS)
  eps = check_epsilon(epsilon)
  delta = check_delta(delta)
  vartheta = check_positive("vartheta", vartheta)
  rounds = check_int("rounds", rounds, minimum=1)
  tau = check_int("local_steps", local_steps, minimum=1)
  eta = check_positive("learning_rate", learning_rate)
  c = check_positive("clip_norm", clip_norm)
  u = int(data.num_clients)
  k = check_int("clients_per_round", clients_per_round, minimum=1, maximum=u)
  counts = np.asarray(data.counts)
  if counts.min() < 1:
    raise FedJaxDpError("every client needs at least one example (Delta_s = 2C/|D_k|).")
  sampler = FixedSizeSampler.create(u, k)
  q = k / u
  full_batch = int(data.max_examples)
  b_size = full_batch if batch_size is None else check_int("batch_size", batch_size,
                                                            minimum=1)
  sens = sensitivity.model_upload_sensitivity(
      sensitivity_mode, schedules.sensitivity(c, int(counts.min())),  # Sec. III-C
      c, eta, tau, min(b_size, int(counts.min())), grad_clip_norm)
  stddevs = _noise_schedule(mechanism, model, eps, delta, q, sens.calibration, vartheta,
                            rounds, laplace_mode)
  client = make_client_update(model, optax.sgd(1.0), batch_size=b_size,
                              max_examples=full_batch, local_steps=tau)
  config = RoundConfig(
      clip_updates=False, noise="local" if mechanism != "none" else "none",
      noise_distribution="laplace" if mechanism == "laplace" else "gaussian",
      weighting="data_size", denominator="actual", chunk_size=chunk_size,  # eq. (4)
      observed_client=observed_client if mechanism != "none" else None)
  server_opt = optax.sgd(1.0)  # omega(m) = the weighted average itself (no server step)
  round_fn = require_learning_rates(make_round(client, sampler, server_opt, config,
                                               mesh=mesh))
  alg_config = dict(
      epsilon=eps, delta=delta, vartheta=vartheta, rounds=rounds, num_clients=u,
      clients_per_round=k, sampling_rate=q, local_steps=tau, learning_rate=eta,
      clip_norm=c, mechanism=mechanism, laplace_mode=laplace_mode, batch_size=b_size,
      sensitivity_mode=sensitivity_mode, grad_clip_norm=sens.grad_clip_norm,
      sensitivity=sens.guarantee, sensitivity_paper=sens.paper,
      calibration_sensitivity=sens.calibration, min_local_dataset_size=int(counts.min()),
      stddevs=[float(s) for s in stddevs])
  privacy = (_privacy_statement(sampler, config, c, sens, sensitivity_mode)
             if mechanism == "gaussian" else None)
  hp = hparams_for(alg_config, stddevs[:1])
  return Algorithm(
      name="amplitude_varying", round_fn=round_fn,
      init=lambda key: sharding.replicate(
          server.init_server_state(model.init(key), server_opt), mesh),
      hparams=jax.tree_util.tree_map(lambda a: float(np.ravel(a)[0]), hp),
      privacy=privacy, k_max=sampler.k_max, config=alg_config, sampling_rate=q)


def _noise_schedule(mechanism: str, model, eps: float, delta: float, q: float,
                    delta_s: float, vartheta: float, rounds: int, laplace_mode: str
                    ) -> np.ndarray:
  """sigma_m ``[M]``: eq. (8)'s geometric schedule calibrated with ``delta_s`` (the
  Delta of eq. 8), the "Lap" baseline's constant one, or zeros (no noise)."""
  if mechanism == "gaussian":
    return schedules.geometric_schedule(eps, delta, q, delta_s, vartheta, rounds)
  if mechanism == "laplace":                                        # "Lap", constant
    gauss = schedules.initial_amplitude(eps, delta, q, delta_s, 1.0, rounds)
    # Pure DP needs the L1 sensitivity: sqrt(P) times the L2 one.
    dim = sum(int(np.size(l)) for l in jax.tree_util.tree_leaves(
        jax.eval_shape(model.init, jax.random.key(0))))
    b = schedules.laplace_scale(eps, math.sqrt(dim) * delta_s, rounds, laplace_mode, gauss)
    return schedules.constant_noise_schedule(math.sqrt(2.0) * b, rounds)
  return np.zeros(rounds)


def _privacy_statement(sampler: FixedSizeSampler, config: RoundConfig, c: float,
                       sens: sensitivity.ModelUploadSensitivity, sensitivity_mode: str
                       ) -> PrivacySpec:
  """The record-level statement of the Gaussian mechanism (module docstring): each
  sampled client's noisy model seen with its sender, the sensitivity the code enforces."""
  u, k = sampler.population_size, sampler.cohort_size
  relation = round_relation(sampler, config)
  return PrivacySpec(
      "record-level", relation, sampler.kind, sampling_rate=k / u,
      population_size=u, cohort_size=k, clip_norm=c,
      observation=round_observation(config),  # p_k needs each sender
      clipped="each client's parameters after every local step (C)",
      note=(f"amplitude-varying perturbation: noise N(0, Theta(m) I) on each sampled "
            f"client's model; the guarantee uses the sensitivity the code enforces, Delta = "
            f"{sens.guarantee:.4g} ("
            + ("2C, the parameter ball" if sensitivity_mode == "paper" else
               "clipped per-example gradients") + "); "
            + (f"epsilon_conditional_rdp assumes the paper's Delta_s = 2C/min|D_k| = "
               f"{sens.paper:.4g}, which the unclipped local GD does not guarantee"
               if sensitivity_mode == "paper" else "eq. (8) calibrated with it")))


def schedule_hparams(stddevs: Union[Sequence[float], np.ndarray], sensitivity: float,
                     sampling_rate: float, learning_rate: float, clip_norm: float,
                     grad_clip_norm: Optional[float] = None) -> RoundHParams:
  """Per-round `RoundHParams` ``[M]`` for a schedule of standard deviations sigma_m.

  The round adds local noise of std sigma_m (``noise_stddev``) to each sampled client's
  model and reports ``z_m = sigma_m / sensitivity`` (the Delta the guarantee uses),
  the noise multiplier the ledger composes. The client's parameter clipping C, its
  per-example gradient clipping G (``clipped_gradients`` mode) and learning rate eta
  ride in `ClientHParams`.
  """
  s = np.asarray(stddevs, np.float32)
  m = s.shape[0]
  full = lambda v: np.full(m, v, np.float32)
  return RoundHParams(
      clip_norm=full(np.inf), noise_multiplier=full(0.0),
      sampling_rate=full(sampling_rate),
      client=ClientHParams(learning_rate=full(learning_rate), param_clip_norm=full(clip_norm),
                           grad_clip_norm=None if grad_clip_norm is None else
                           full(grad_clip_norm)),
      server_learning_rate=full(1.0), noise_stddev=s, sensitivity=full(sensitivity))


def hparams_for(config: Dict[str, Any], stddevs: Union[Sequence[float], np.ndarray]
                ) -> RoundHParams:
  """`schedule_hparams` for an algorithm's ``config`` (its Delta, q, eta, C and G) and
  the per-round standard deviations ``stddevs`` ``[M]``."""
  return schedule_hparams(stddevs, config["sensitivity"], config["sampling_rate"],
                          config["learning_rate"], config["clip_norm"],
                          config.get("grad_clip_norm"))


@dataclasses.dataclass
class OnlineRefinement:
  """Online refinement of the series (Theorem 2, eq. 9; note section 2.9).

  When the test loss stops decreasing (``L_m >= L_{m-1}``), at the next aggregation the
  horizon becomes ``M' = ceil(alpha_d M_cur)`` and the base amplitude is recomputed with
  `schedules.refined_amplitude` (``mode="paper"``: eq. (9) as printed;
  ``"exact_budget"``: our variant that never exceeds the budget). Training stops
  when ``M'`` does not exceed the rounds already run. Host-side and data-dependent.

  Attributes:
    alpha_d: shrink factor in (0, 1) (the paper uses 0.8 and 0.9).
    mode: ``"paper"`` or ``"exact_budget"``.
  """
  alpha_d: float
  mode: str = "paper"

  def __post_init__(self):
    if not (0.0 < float(self.alpha_d) < 1.0):
      raise FedJaxDpError(f"alpha_d must be in (0, 1), got {self.alpha_d!r}.")
    check_choice("mode", self.mode, schedules.REFINEMENT_MODES)


class NoiseController:
  """Host-side choice of each round's sigma_m, with optional online refinement.

  Without refinement it reads the planned schedule (eqs. 6 and 8). With an
  `OnlineRefinement` it follows our reconstruction of Theorem 2 (Sec. III-D, Appendix B):
  a test loss that does not decrease marks the next aggregation, where the horizon
  becomes ``M' = ceil(alpha_d M_cur)`` and sigma is recomputed (eq. 9); training stops
  when ``M'`` does not exceed the rounds already run.

  Attributes:
    planned: the current horizon M_cur.
    used: the standard deviations of the rounds run so far.
  """

  def __init__(self, config: Dict[str, Any], refinement: Optional[OnlineRefinement] = None):
    self.config = config
    self.refinement = refinement if config["mechanism"] == "gaussian" else None
    self.planned = int(config["rounds"])
    self.sigma = float(config["stddevs"][0]) if config["stddevs"] else 0.0
    self.used: List[float] = []
    self.prev_loss = math.inf
    self.pending = False

  def next_stddev(self) -> Optional[float]:
    """sigma_m of the next round m, or None when training is over."""
    cfg, m = self.config, len(self.used) + 1
    if m > self.planned:
      return None
    if self.refinement is None:
      return float(cfg["stddevs"][m - 1])
    if self.pending:                                        # "at the next aggregation"
      new_planned = math.ceil(self.refinement.alpha_d * self.planned)  # M' = ceil(a M)
      if new_planned <= m - 1:
        return None                                         # no round is left
      self.planned = new_planned
      self.sigma = schedules.refined_amplitude(              # eq. (9)
          cfg["epsilon"], cfg["delta"], cfg["sampling_rate"], cfg["calibration_sensitivity"],
          cfg["vartheta"], m - 1, self.planned, self.refinement.mode, self.used)
      self.pending = False
    return math.sqrt(cfg["vartheta"] ** (m - 1)) * self.sigma  # Theta(m), eq. (6)

  def observe(self, stddev: float, test_loss: Optional[float]) -> None:
    """Records the round just run and its test loss ("stops decreasing": L_m >= L_m-1)."""
    self.used.append(float(stddev))
    if test_loss is not None:
      if test_loss >= self.prev_loss:
        self.pending = True
      self.prev_loss = test_loss

  def restore(self, records: Sequence[Dict[str, Any]]) -> None:
    """Replays the rounds of a resumed run (each record's ``noise_stddev`` and
    ``test_loss``), so the next sigma_m is what the uninterrupted
    run would have used: the same decisions are replayed (they are deterministic given
    the losses), and the recorded sigma_m is kept."""
    for r in records:
      self.next_stddev()  # applies a pending refinement exactly as the run did
      self.observe(r["noise_stddev"], r.get("test_loss"))

  def epsilon_paper(self) -> Optional[float]:
    """The paper's epsilon of the rounds run so far (`schedules.paper_epsilon`)."""
    if self.config["mechanism"] != "gaussian" or not self.used:
      return None
    c = self.config
    return schedules.paper_epsilon(self.used, c["sampling_rate"], c["calibration_sensitivity"],
                                   c["delta"])


def train_algorithm1(alg: Algorithm, population, root_key: jax.Array, *,
          evaluate: Callable[[Any], Dict[str, float]],
          refinement: Optional[OnlineRefinement] = None,
          on_round: Optional[Callable[[Dict[str, Any]], None]] = None):
  """Runs Algorithm 1 for ``alg.config["rounds"]`` rounds (fewer if refinement stops it).

  Args:
    alg: from `amplitude_varying`.
    population: device `PopulationData`.
    root_key: PRNG key of the run.
    evaluate: ``evaluate(params) -> {"loss": ..., "accuracy": ...}`` on the server's
      test set, after every aggregation (step 14; the refinement trigger reads it).
    refinement: an `OnlineRefinement`, or None for the fixed schedule.
    on_round: called with each round's record as it finishes.

  Returns:
    ``(state, records)``; each record has the round's metrics, ``test_loss``,
    ``test_accuracy``, ``noise_stddev`` (sigma_m), ``noise_multiplier`` (z_m =
    sigma_m / Delta, the guarantee's), ``noise_multiplier_conditional`` (sigma_m /
    Delta_s), ``planned_rounds`` (M_cur) and the paper's running epsilon
    ``epsilon_paper``.
  """
  cfg = alg.config
  control = NoiseController(cfg, refinement)
  step = jax.jit(alg.round_fn)
  state = alg.init(jax.random.fold_in(root_key, 1 << 20))
  records: List[Dict[str, Any]] = []
  while (std := control.next_stddev()) is not None:
    hp = jax.tree_util.tree_map(lambda a: np.ravel(a)[0], hparams_for(cfg, [std]))
    state, metrics = step(state, population, hp, root_key)   # steps 6-13
    ev = evaluate(state.params)                              # step 14
    control.observe(std, ev["loss"])
    rec = {k: (v.item() if hasattr(v, "item") else v) for k, v in metrics._asdict().items()}
    rec.update(test_loss=ev["loss"], test_accuracy=ev["accuracy"], noise_stddev=std,
               noise_multiplier=std / cfg["sensitivity"],
               noise_multiplier_conditional=std / cfg["sensitivity_paper"],
               planned_rounds=control.planned,
               epsilon_paper=control.epsilon_paper())
    records.append(rec)
    if on_round is not None:
      on_round(rec)
  return state, records
