"""PADPFL: priority-based aggregation with adaptive differential privacy.

Talaei and Izadi, "Enhancing Federated Learning with Adaptive Differential Privacy and
Priority-Based Aggregation" (arXiv:2406.18491, 2024; equation numbers are the paper's;
line numbers are those of our numbered restatement of its algorithm: lines 12-14 local
training, 15 weight clipping, 16 client noise, 18-19 aggregation and server noise).

NbAFL (Wei et al. 2020) with non-uniform, possibly time-varying aggregation weights
("impact factors") p_i. Every client trains locally on a FedProx objective anchored at
the received noisy model, clips its *weights* to ``||x_i|| <= B``, adds Gaussian noise
of one common SD sigma_C (eq. 8) and uploads; the server averages with weights p and
adds sigma_S (eq. 13) so that the broadcast model carries total noise sigma_A. Every
client takes part in every round (no sampling). The non-private mode has no clipping
and no noise (our reading of the paper's "non-private mode").

Mapping onto the engine (`fedjax_dp.federated.round`): the client's final weights are
clipped by ``ClientHParams.final_param_clip_norm = B``; the round adds local noise of
SD sigma_C (``RoundHParams.noise_stddev``) to every upload and reports
``z = sigma_C / Delta`` with Delta the sensitivity the guarantee uses (below); the
weighted sum uses
``RoundHParams.client_weights = p^(t)`` with the fixed denominator 1 (``sum p = 1``,
eq. 2), so ``x = sum_i p_i x~_i`` (eq. 11); ``RoundHParams.server_noise_stddev`` adds
sigma_S. ``p`` and every sigma are per-round arrays: changing them never recompiles.

Privacy: the paper's (epsilon, delta) is the classical Gaussian mechanism scaled
linearly by R (uplink) and T (downlink) (`fedjax_dp.algorithms.padpfl.nbafl.nominal_privacy`).
Its calibration uses the upload sensitivity 2B / m_min (eq. 7, after NbAFL), which
assumes that local training moves a client's model by at most that much when one
example is replaced; the client's gradients are not clipped, so the code does not
enforce it. Hence (``sensitivity_mode``):

* ``"paper"`` (default): the noise follows eqs. (8) and (13) as written; the guarantee
  the run reports (its ledger: every one of the T uploads, record-level, replace-one,
  every client in every round, so plain Gaussian events) uses Delta = 2B, the diameter
  of the ball the final weights are clipped to, which holds whatever the training did;
  the accountant's epsilons with the paper's 2B / m_min are reported as *conditional*
  (`nominal_and_accountant_epsilons`, ``*_conditional``).
* ``"clipped_gradients"``: local training clips each per-example gradient to
  ``grad_clip_norm`` G, Delta = `fedjax_dp.privacy.sensitivity.clipped_gd_sensitivity`
  (FedProx's contraction included, at most 2B), and eqs. (8) and (13) calibrate the
  noise with this Delta in place of 2B / m_min: provable.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np
import optax

from fedjax_dp.algorithms.base import Algorithm, PrivacySpec, require_learning_rates
from fedjax_dp.algorithms.padpfl import impact_factors as impact
from fedjax_dp.algorithms.padpfl import nbafl
from fedjax_dp.federated import server, sharding
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.federated.driver import run_rounds
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, make_round,
                                       round_observation, round_relation)
from fedjax_dp.federated.sampling import FixedSizeSampler
from fedjax_dp.privacy import sensitivity
from fedjax_dp.validation import (FedJaxDpError, check_delta, check_epsilon,
                                  check_int, check_non_negative, check_positive)

__all__ = ["padpfl", "schedule_hparams", "train_phases", "downlink_noise_multiplier",
           "nominal_and_accountant_epsilons"]


def padpfl(model, data, *, impact_factors: Any, epsilon: float = 5.0, delta: float = 0.01,
           rounds: int = 30, exposures: int = 1, clip_bound: float = 20.0,
           learning_rate: float = 0.02, local_steps: int = 10,
           batch_size: Optional[int] = None, prox_mu: float = 0.01, private: bool = True,
           sensitivity_mode: str = "paper", grad_clip_norm: Optional[float] = None,
           chunk_size: Optional[int] = None, mesh=None,
           observed_client: Optional[int] = None) -> Algorithm:
  """PADPFL instantiated for one dataset and model.

  Args:
    model: a `fedjax_dp.models.Model` (the paper's: an MLP with one ReLU hidden layer).
    data: `FederatedData` (or anything with ``num_clients``, ``max_examples`` and
      ``counts``); m_min = ``min_i counts[i]`` over all N clients (the paper's
      literal "for all i").
    impact_factors: p, float ``[N]`` (fixed) or ``[T, N]`` (row ``t - 1`` is
      ``p^(t)``, the weights of aggregation round t; Sec. V, eq. 51); entries in
      [0, 1], every row summing to 1 (eq. 2). See `fedjax_dp.algorithms.padpfl.impact_factors`
      (``resolve("0-1-2", part_of_client=...)``, ``switch_schedule``).
    epsilon, delta: the calibration target of eqs. (8) and (13) (epsilon > 0,
      delta in (0, 1); the paper: delta = 0.01, epsilon in {5, 20}).
    rounds: T, aggregation rounds (>= 1); a ``[T, N]`` schedule must have T rows.
    exposures: R, the uploads an adversary may see, 1 <= R <= T (unstated; our default 1).
    clip_bound: B > 0, the bound on each client's weight norm (unstated in the paper;
      our choice: about the norm of the non-private local models, ~20 for 784-256-10).
    learning_rate: local SGD step size (the paper: 0.02).
    local_steps: tau local steps per round (unstated; our default: 10 full-batch steps).
    batch_size: local minibatch size; None = the full local dataset (the DP
      derivation's "batch size equal to the local dataset size").
    prox_mu: FedProx mu >= 0 (eqs. 4, 30; unstated, our default 0.01; 0 = FedAvg).
    private: False = the non-private mode (no clipping, no noise).
    sensitivity_mode: ``"paper"`` or ``"clipped_gradients"`` (module docstring).
    grad_clip_norm: G > 0, the per-example gradient clip norm; required with
      ``"clipped_gradients"``.
    chunk_size, mesh: see `fedjax_dp.federated.round.make_round`.
    observed_client: a client id whose upload the round also returns as the server
      receives it (``RoundConfig.observed_client``; canary audits), or None.

  Returns:
    An `Algorithm`; ``config`` holds the p schedule (``impact_factors`` ``[T][N]``),
    the per-round ``sigma_c``, ``sigma_ac``, ``sigma_a``, ``sigma_s`` (lists ``[T]``,
    zeros when not private), ``sensitivity`` (the Delta of the guarantee),
    ``sensitivity_paper`` (2B/m_min) and ``calibration_sensitivity`` (the Delta of
    eqs. 8 and 13). Build the per-round hyper-parameters with `schedule_hparams`.

  Raises:
    FedJaxDpError: invalid arguments (named), before anything is compiled.
  """
  eps = check_epsilon(epsilon)
  delta = check_delta(delta)
  t = check_int("rounds", rounds, minimum=1)
  r = check_int("exposures", exposures, minimum=1, maximum=t)
  b = check_positive("clip_bound", clip_bound)
  eta = check_positive("learning_rate", learning_rate)
  tau = check_int("local_steps", local_steps, minimum=1)
  mu = check_non_negative("prox_mu", prox_mu)
  if not isinstance(private, bool):
    raise FedJaxDpError(f"private must be True or False, got {private!r}.")
  n = int(data.num_clients)
  counts = np.asarray(data.counts)
  if counts.min() < 1:
    raise FedJaxDpError("every client needs at least one example (Delta f = 2B/m_i, eq. 7).")
  m_min = int(counts.min())
  p = _impact_schedule(impact_factors, t, n)

  sampler = FixedSizeSampler.create(n, n)                            # every client
  full = int(data.max_examples)
  bsize = full if batch_size is None else check_int("batch_size", batch_size, minimum=1)
  sens = sensitivity.model_upload_sensitivity(
      sensitivity_mode, 2.0 * b / m_min, b, eta, tau, min(bsize, m_min),  # eq. (7)
      grad_clip_norm, prox_mu=mu)
  levels = _noise_levels(p, b, r, m_min, eps, delta, sens, private)
  client = make_client_update(model, optax.sgd(1.0), batch_size=bsize, max_examples=full,
                              local_steps=tau)                        # lines 12-14
  config = RoundConfig(
      clip_updates=False, noise="local_and_central" if private else "none",
      weighting="custom", denominator="expected", population_weight=1.0,  # eq. (11)
      chunk_size=chunk_size, observed_client=observed_client if private else None)
  server_opt = optax.sgd(1.0)  # x~(t+1) = the noisy weighted average itself (line 19)
  round_fn = require_learning_rates(make_round(client, sampler, server_opt, config,
                                               mesh=mesh))
  alg_config = dict(
      epsilon=eps, delta=delta, rounds=t, exposures=r, clip_bound=b, learning_rate=eta,
      local_steps=tau, batch_size=bsize, prox_mu=mu, private=private, num_clients=n,
      sampling_rate=1.0, min_local_dataset_size=m_min, sensitivity=sens.guarantee,
      sensitivity_paper=sens.paper, calibration_sensitivity=sens.calibration,
      sensitivity_mode=sensitivity_mode, grad_clip_norm=sens.grad_clip_norm,
      gaussian_constant=nbafl.gaussian_constant(delta),
      impact_factors=p.tolist(),
      sigma_c=[float(v) for v in levels.sigma_c], sigma_ac=[float(v) for v in levels.sigma_ac],
      sigma_a=[float(v) for v in levels.sigma_a], sigma_s=[float(v) for v in levels.sigma_s])
  privacy = (_privacy_statement(sampler, config, b, sens, sensitivity_mode) if private
             else None)
  hp0 = jax.tree_util.tree_map(lambda a: np.asarray(a)[0] if np.ndim(a) else a,
                               schedule_hparams(alg_config))
  return Algorithm(
      name="padpfl", round_fn=round_fn,
      init=lambda key: sharding.replicate(
          server.init_server_state(model.init(key), server_opt), mesh),
      hparams=hp0, privacy=privacy, k_max=sampler.k_max, config=alg_config,
      sampling_rate=1.0)


def _impact_schedule(impact_factors: Any, rounds: int, num_clients: int) -> np.ndarray:
  """The impact factors as a checked ``[T, N]`` schedule (a fixed ``[N]`` repeated).

  Raises:
    FedJaxDpError: an invalid schedule (`impact.check_impact_factor_schedule`) or shape.
  """
  t, n = rounds, num_clients
  p = np.asarray(impact_factors, np.float64)
  if p.ndim == 1:
    p = impact.constant_impact_factors(p, t)
  p = impact.check_impact_factor_schedule(p, name="impact_factors")
  if p.shape != (t, n):
    raise FedJaxDpError(f"impact_factors must be [num_clients={n}] or [rounds={t}, "
                        f"num_clients={n}], got shape {p.shape}.")
  return p


def _noise_levels(p: np.ndarray, b: float, r: int, m_min: int, eps: float, delta: float,
                  sens: sensitivity.ModelUploadSensitivity, private: bool
                  ) -> nbafl.NoiseLevels:
  """Lines 1-3 and 7-9: c, m_min, sigma_C (eq. 8); sigma_A and sigma_S (eq. 13) per
  round, all proportional to the upload sensitivity: scaled when it is not 2B / m_min;
  zeros when not private."""
  levels = nbafl.noise_levels_per_round(p, b, r, m_min, eps, delta)
  levels = nbafl.NoiseLevels(*(np.asarray(v) * (sens.calibration / sens.paper)
                               for v in levels))
  if not private:
    levels = nbafl.NoiseLevels(*(np.zeros(len(p)) for _ in range(4)))
  return levels


def _privacy_statement(sampler: FixedSizeSampler, config: RoundConfig, b: float,
                       sens: sensitivity.ModelUploadSensitivity, sensitivity_mode: str
                       ) -> PrivacySpec:
  """The record-level statement of a private PADPFL run (module docstring): every
  client's every upload seen with its sender, z = sigma_C / Delta."""
  n = sampler.population_size
  return PrivacySpec(
      "record-level", round_relation(sampler, config), sampler.kind, sampling_rate=1.0,
      population_size=n, cohort_size=n, clip_norm=b,
      observation=round_observation(config),  # each upload with its sender
      clipped="each client's final weights (B)",
      note=("PADPFL: weights clipped to B, client noise sigma_C (eq. 8) on "
            "every upload, server noise sigma_S (eq. 13); the ledger composes every "
            f"round's upload (all T uploads seen) with z = sigma_C / Delta, Delta = "
            f"{sens.guarantee:.4g} ("
            + ("2B, the weight ball: provable; epsilon_*_conditional assume the "
               f"paper's 2B/m_min = {sens.paper:.4g}, which unclipped local training "
               "does not guarantee" if sensitivity_mode == "paper" else
               "clipped per-example gradients: provable")
            + "); the paper's own epsilon assumes R uploads seen and is the classical "
            "Gaussian mechanism scaled linearly"))


def schedule_hparams(config: Dict[str, Any], start: int = 0,
                     stop: Optional[int] = None) -> RoundHParams:
  """Per-round `RoundHParams` for rounds ``start .. stop - 1`` (0-based) of a PADPFL run.

  ``noise_stddev`` is sigma_C and ``sensitivity`` the Delta of the guarantee (the round
  reports ``sigma_C / Delta``, what the ledger composes); ``client_weights`` is p^(t)
  ``[T, N]`` and ``server_noise_stddev`` sigma_S ``[T]``; B, mu, eta and G ride in
  `ClientHParams` (B, G and mu are left out, i.e. not compiled, when not private / not
  clipped / mu = 0).
  """
  stop = config["rounds"] if stop is None else stop
  sl = slice(start, stop)
  m = len(range(config["rounds"])[sl])
  full = lambda v: np.full(m, v, np.float32)
  sigma_c = np.asarray(config["sigma_c"], np.float32)[sl]
  private = config["private"]
  g = config.get("grad_clip_norm")
  client = ClientHParams(
      learning_rate=full(config["learning_rate"]),
      final_param_clip_norm=full(config["clip_bound"]) if private else None,
      prox_mu=full(config["prox_mu"]) if config["prox_mu"] > 0 else None,
      grad_clip_norm=full(g) if (private and g is not None) else None)
  return RoundHParams(
      clip_norm=full(np.inf), noise_multiplier=full(0.0),
      sampling_rate=full(1.0), client=client, server_learning_rate=full(1.0),
      client_weights=np.asarray(config["impact_factors"], np.float32)[sl],
      server_noise_stddev=np.asarray(config["sigma_s"], np.float32)[sl],
      noise_stddev=sigma_c, sensitivity=full(config["sensitivity"]))


def train_phases(alg: Algorithm, phases: Sequence[Tuple[int, Any]], root_key: jax.Array, *,
          state=None, start_round: int = 0, stop_round: Optional[int] = None,
          **run_kwargs) -> Tuple[Any, List[Dict[str, Any]]]:
  """Runs PADPFL over data phases (scenario 4 changes the clients' data at t = 11).

  Args:
    alg: from `padpfl`.
    phases: ``[(first_round, population), ...]``: from aggregation round
      ``first_round`` (1-based, the first phase's is 1) the clients train on
      ``population`` (a `PopulationData`; all phases share shapes, so one program
      serves them all).
    root_key: the run's root key.
    state: a `ServerState` to continue from (default ``alg.init``).
    start_round, stop_round: run rounds ``start_round .. stop_round - 1`` (0-based;
      default all T).
    **run_kwargs: passed to `fedjax_dp.federated.driver.run_rounds` (ledger,
      device_evaluator, on_round, block_fn, eval_every, block_size, on_block).

  Returns:
    ``(state, records)`` with one record per round run.

  Raises:
    FedJaxDpError: phases that do not start at round 1 or are not increasing.
  """
  t = alg.config["rounds"]
  stop = t if stop_round is None else stop_round
  starts = [int(s) for s, _ in phases]
  if not starts or starts[0] != 1 or any(b <= a for a, b in zip(starts, starts[1:])):
    raise FedJaxDpError(f"phases must start at round 1 and increase, got starts {starts}.")
  if state is None:
    state = alg.init(jax.random.fold_in(root_key, 1 << 20))
  records: List[Dict[str, Any]] = []
  bounds = starts[1:] + [t + 1]
  for (first, pop), end in zip(phases, bounds):
    lo, hi = max(first - 1, start_round), min(end - 1, stop)
    if hi <= lo:
      continue
    state, recs = run_rounds(alg.round_fn, state, pop, schedule_hparams(alg.config, lo, hi),
                             root_key, rounds=hi - lo, **run_kwargs)
    records += recs
  return state, records


def downlink_noise_multiplier(config: Dict[str, Any], round_index: int, sigma_c: float,
                              sigma_s: float, conditional: bool = False) -> float:
  """z of round ``round_index``'s broadcast (0-based): the SD of the noise in
  ``sum_i p_i x~_i + n_s``, ``sqrt(sigma_C^2 sum p^2 + sigma_S^2)`` (eqs. 12, 14), over
  its sensitivity ``max p * Delta`` (eq. 10 with the upload sensitivity Delta: the
  guarantee's, or with ``conditional`` the paper's 2B / m_min); 0 when not private.
  ``sigma_c`` and ``sigma_s`` are what the round reported (``noise_stddev``,
  ``server_noise_stddev``).
  """
  if not config["private"]:
    return 0.0
  p = np.asarray(config["impact_factors"][round_index], np.float64)
  std = math.sqrt(float(sigma_c) ** 2 * float(np.sum(p ** 2)) + float(sigma_s) ** 2)
  upload = config["sensitivity_paper"] if conditional else config["sensitivity"]
  return std / (float(np.max(p)) * upload)


def nominal_and_accountant_epsilons(config: Dict[str, Any]) -> Dict[str, Any]:
  """The paper's epsilon beside the accountant's for a PADPFL ``config`` (RDP).

  Returns a dict with ``epsilon_paper`` (the calibration target, classical Gaussian
  mechanism with linear R/T scaling; `nbafl.nominal_privacy`) and the accountant's
  epsilons of the noise added *if* the upload sensitivity is the one eqs. (8) and (13)
  were calibrated with (the paper's 2B/m_min in ``"paper"`` mode, where they are
  conditional on its assumption; the provable one in ``"clipped_gradients"`` mode):
  ``epsilon_rdp_uplink_conditional`` (R uploads seen),
  ``epsilon_rdp_uplink_all_uploads_conditional`` (all T),
  ``epsilon_rdp_downlink_conditional`` (T broadcasts) and ``z_uplink_conditional``;
  infinities when the run is not private.
  """
  if not config["private"]:
    inf = float("inf")
    return dict(epsilon_paper=inf, epsilon_rdp_uplink_conditional=inf,
                epsilon_rdp_uplink_all_uploads_conditional=inf,
                epsilon_rdp_downlink_conditional=inf, z_uplink_conditional=0.0)
  acc = nbafl.accountant_epsilon(
      np.asarray(config["impact_factors"]), config["clip_bound"], config["rounds"],
      config["exposures"], config["min_local_dataset_size"], config["epsilon"],
      config["delta"])
  return dict(epsilon_paper=config["epsilon"],
              epsilon_rdp_uplink_conditional=acc["uplink_epsilon"],
              epsilon_rdp_uplink_all_uploads_conditional=acc["uplink_all_uploads_epsilon"],
              epsilon_rdp_downlink_conditional=acc["downlink_epsilon"],
              z_uplink_conditional=acc["z_uplink"])
