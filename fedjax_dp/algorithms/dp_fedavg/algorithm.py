"""DP-FedAvg and DP-FedSGD at user level, and the record-level (local DP-SGD) variant
(the functional builders; their `fedjax-dp run` plug-ins are
`fedjax_dp.algorithms.dp_fedavg.plugin`).

User level (McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018, Algorithm 1), per round t:

  C^t  <- Poisson sample, each user independently with probability q   (sampler)
  for k in C^t:  Delta_k <- ClientUpdate(k, theta^t)                    (local SGD, E epochs)
                 Delta_k <- Delta_k * min(1, S / ||Delta_k||)            (ClipFn, flat clipping)
  Delta  <- (sum_k w_k Delta_k + N(0, (z S)^2 I)) / (q W)              (fixed denominator f~_f)
  theta^{t+1} <- ServerOpt(theta^t, Delta)                            (sgd(1.0) = FedAvg)

with w_k = 1 (uniform) or min(n_k / cap, 1), and W = sum_k w_k over the population.
DP-FedSGD is the same round with one full-batch local gradient step per client.
Privacy (the round states it, `fedjax_dp.federated.round.round_relation`):

* Poisson cohorts: add/remove one user, sensitivity S, each round
  PoissonSampledDpEvent(q, GaussianDpEvent(z));
* fixed-size cohorts of m < N: replace-one, sensitivity 2S, each round
  SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z / 2)); m = N: GaussianDpEvent(z / 2);
* ``noise_placement="local"`` (each client adds N(0, (z_k S)^2) to its clipped update,
  z_k may differ by client): the server sees each upload with its sender
  (observation ``"attributable"``), so sampling gives no amplification; each round is
  VisibleParticipationDpEvent(q, GaussianDpEvent(z_k)) (the user's upload is a Gaussian
  release in the rounds it takes part in, probability q = m/N for fixed size, and the
  other rounds reveal nothing of it; `fedjax_dp.privacy.events`), under zero-out for
  Poisson cohorts (sensitivity S) and replace-one for fixed-size ones (2S); every client
  accounted with its own z_k in every round.

Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning
with Adaptive Clipping", NeurIPS 2021, arXiv:1905.03871, Algorithm 1 and Sec. 3.1;
``adaptive_clipping=AdaptiveClipping(...)``, ``--clip-norm adaptive``): the clip norm
C_t is server state; each round clips to C_t, releases the noisy sum (noise std
z_Delta Delta(C_t)) and the noisy count of unclipped updates (noise std sigma_b,
sensitivity Delta_b: 1/2 add/remove, 1 replace-one), and moves C_t geometrically toward
the gamma-quantile of the update norms. The two releases are one Gaussian mechanism of
noise multiplier z = (z_Delta^-2 + z_b^-2)^-1/2, z_b = sigma_b / Delta_b (Sec. 3.1): the
noise-multiplier hyper-parameter is that combined z, each round reports it, and the
events are exactly fixed-clip DP-FedAvg's (C_t is post-processing of earlier releases).

Record level (Abadi et al., CCS 2016, run inside each client): each sampled client
runs local DP-SGD (Poisson-sampled examples at rate q_r, per-example clipping to C_r,
noise N(0, (z_r C_r)^2), divided by the public expected batch size b); the server
averages the uploads with uniform weights over the cohort (post-processing: neither
depends on any client's records). Each round composes ``local_steps``
PoissonSampledDpEvent(q_r, GaussianDpEvent(z_r)) per example, add/remove one record;
amplification by client sampling is conservatively NOT claimed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from fedjax_dp.algorithms import canaries as canary_lib
from fedjax_dp.algorithms import fedavg_family as family
from fedjax_dp.algorithms import participation_spec
from fedjax_dp.algorithms.dp_fedavg import distributed as distributed_lib, noise_cohort
from fedjax_dp.algorithms.base import (Algorithm, PerClientPrivacySpec, PrivacySpec,
                                       require_learning_rates)
from fedjax_dp.federated import aggregation, engine, server, sharding, stages
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, init_mechanism_state,
                                       make_round, round_observation, round_relation)
from fedjax_dp.privacy import adaptive_clipping as adaptive_lib
from fedjax_dp.privacy import sensitivity
from fedjax_dp.privacy.adaptive_clipping import AdaptiveClipping
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_non_negative,
                                  check_positive)

__all__ = ["ADAPTIVE_NOTE", "COUNT_NOISE_FLOOR", "default_count_stddev",
           "adaptive_config", "check_adaptive_split", "adaptive_clipping_for",
           "dp_fedavg", "dp_fedsgd", "dp_fedavg_record_level"]


def _check_noise_multipliers(noise_multiplier, noise_placement: str, num_clients: int
                             ) -> Union[float, np.ndarray]:
  """A scalar z >= 0, or (local noise only) a ``[num_clients]`` vector of them."""
  check_choice("noise_placement", noise_placement, ("central", "local", "distributed"))
  z = np.asarray(noise_multiplier, np.float64)
  if z.ndim == 0:
    return check_non_negative("noise_multiplier", float(z))
  if noise_placement != "local":
    raise FedJaxDpError("a per-client noise_multiplier (one per client) needs "
                        "noise_placement='local': central noise is one draw per round.")
  if z.shape != (num_clients,) or not np.all(np.isfinite(z)) or np.any(z < 0):
    raise FedJaxDpError(f"noise_multiplier must be a scalar or a [num_clients={num_clients}] "
                        f"vector of finite values >= 0, got shape {z.shape} "
                        f"(min {np.nanmin(z) if z.size else None!r}).")
  return z.astype(np.float32)


#: The privacy note of an adaptive-clipping run (summary.json's ``privacy_note``).
ADAPTIVE_NOTE = (
    "adaptive clipping (Andrew et al. 2021, Sec. 3.1): every round releases the noisy sum "
    "of the updates clipped to the current clip norm C_t (noise multiplier z_Delta) and "
    "the noisy count of unclipped updates (z_b = count stddev / count sensitivity); the "
    "two are one Gaussian release with noise multiplier z = (z_Delta^-2 + z_b^-2)^-1/2, "
    "the z each round reports and the ledger composes (the same events as fixed-clip "
    "DP-FedAvg); C_t is post-processing of the earlier rounds' releases")

#: The count's default noise is at least this many times the combined z (in count
#: sensitivities), so that the count takes at most 1/9 of the combined release's
#: 1/z^2 (z_Delta at most 6% above z).
COUNT_NOISE_FLOOR = 3.0


def default_count_stddev(expected_cohort_size: float, event_noise_multiplier: float,
                         relation: str) -> float:
  """sigma_b when ``--clipped-count-stddev`` is not given: the paper's ``m / 20``
  (Andrew et al. 2021, Sec. 3.1: the noisy fraction then has standard deviation 0.05),
  raised for small cohorts to ``3 z Delta_b`` (`COUNT_NOISE_FLOOR`) so that the
  combined z can always be split (z_b = 3 z: z_Delta = z / sqrt(1 - 1/9), 6% above z).
  Both terms are public (the expected cohort size m, the event's noise multiplier z,
  the relation's count sensitivity Delta_b).

  Args:
    expected_cohort_size: m > 0.
    event_noise_multiplier: z >= 0 of the combined release's event.
    relation: ``"add_remove"`` or ``"replace_one"``
      (`fedjax_dp.privacy.adaptive_clipping.count_sensitivity`).

  Returns:
    sigma_b > 0 (float, in counts).
  """
  return max(float(expected_cohort_size) / 20.0,
             COUNT_NOISE_FLOOR * float(event_noise_multiplier)
             * adaptive_lib.count_sensitivity(relation))


def adaptive_config(adaptive: AdaptiveClipping) -> dict:
  """The fields of an `AdaptiveClipping` under their option names (summary.json's
  ``algorithm_config``)."""
  return dict(target_quantile=adaptive.target_quantile,
              clip_learning_rate=adaptive.learning_rate,
              initial_clip_norm=adaptive.initial_clip_norm,
              clipped_count_stddev=adaptive.count_stddev,
              adaptive_expected_cohort_size=adaptive.expected_cohort_size,
              clip_update_rule=adaptive.update_rule)


def _check_adaptive(adaptive, clip_norm, noise_placement: str, noise_multiplier) -> None:
  """The combinations adaptive clipping refuses (before anything is built)."""
  if not isinstance(adaptive, AdaptiveClipping):
    raise FedJaxDpError(f"adaptive_clipping must be a fedjax_dp.privacy.adaptive_clipping."
                        f"AdaptiveClipping or None, got {type(adaptive).__name__}.",
                        option="adaptive_clipping")
  if clip_norm is not None:
    raise FedJaxDpError(f"clip_norm={clip_norm!r} cannot be given with adaptive_clipping: "
                        "the clip norm is learned (its start is "
                        "AdaptiveClipping.initial_clip_norm).", option="clip_norm")
  if noise_placement != "central":
    raise FedJaxDpError(f"adaptive clipping needs noise_placement='central', got "
                        f"{noise_placement!r}: its count of unclipped updates is one "
                        "central release, accounted with the central sum's (Andrew et "
                        "al. 2021, Sec. 3.1).", option="noise_placement")
  if np.ndim(noise_multiplier) != 0:
    raise FedJaxDpError("adaptive clipping takes one noise_multiplier (the combined "
                        "release's), not one per client.", option="noise_multiplier")


def check_adaptive_split(event_noise_multiplier: float, count_noise_multiplier: float
                         ) -> float:
  """Host check that the combined event z can be split into the update sum's
  z_Delta and the count's z_b (`fedjax_dp.privacy.adaptive_clipping.check_noise_split`).

  Returns:
    z_Delta (float).

  Raises:
    FedJaxDpError: ``z >= z_b``, naming noise_multiplier and clipped_count_stddev.
  """
  try:
    return adaptive_lib.check_noise_split(event_noise_multiplier, count_noise_multiplier)
  except FedJaxDpError as e:
    raise FedJaxDpError(f"noise_multiplier / clipped_count_stddev: {e}",
                        option="noise_multiplier") from None


def adaptive_clipping_for(data, noise_multiplier: float, *,
                          sampling_rate: Optional[float] = None,
                          clients_per_round: Optional[int] = None,
                          sampler: str = "poisson", target_quantile: float = 0.5,
                          learning_rate: float = 0.2, initial_clip_norm: float = 0.1,
                          count_stddev: Optional[float] = None,
                          update_rule: str = "geometric") -> AdaptiveClipping:
  """The `AdaptiveClipping` of a `dp_fedavg` run on ``data`` with this cohort sampling:
  the expected cohort size m from the sampler (``q N``, or the cohort size), and
  ``count_stddev`` (None) from `default_count_stddev` at the combined event noise
  multiplier (``noise_multiplier``, halved for fixed-size cohorts). Defaults are the
  paper's (Andrew et al. 2021: gamma 0.5, eta_C 0.2, C_0 0.1, geometric).

  Raises:
    FedJaxDpError: a value out of range (naming the option).
  """
  samp = family.cohort_sampler(data, sampler, sampling_rate, clients_per_round, None)
  relation = "replace_one" if samp.kind == "fixed_size" else "add_remove"
  if count_stddev is None:
    z_event = check_non_negative("noise_multiplier", float(noise_multiplier)) / (
        sensitivity.sum_sensitivity(1.0, relation))
    count_stddev = default_count_stddev(samp.expected_cohort_size, z_event, relation)
  return AdaptiveClipping(target_quantile=target_quantile, learning_rate=learning_rate,
                          initial_clip_norm=initial_clip_norm, count_stddev=count_stddev,
                          expected_cohort_size=samp.expected_cohort_size,
                          update_rule=update_rule)


def dp_fedavg(model, data, *, clip_norm: Optional[float] = None,
              noise_multiplier: Union[float, Sequence[float], np.ndarray] = 1.0,
              sampling_rate: Optional[float] = None,
              clients_per_round: Optional[int] = None, sampler: str = "poisson",
              local_epochs: Optional[int] = 1, local_steps: Optional[int] = None,
              batch_size: int = 32, client_optimizer: str = "sgd",
              client_learning_rate: float = 0.1, server_optimizer: str = "fedavg",
              server_learning_rate: float = 1.0, weighting: str = "uniform",
              data_size_cap: Optional[float] = None, k_max: Optional[int] = None,
              fedsgd: bool = False, noise_placement: str = "central",
              population_weight: Optional[float] = None, client_update=None,
              chunk_size: Optional[int] = None, mesh=None,
              adaptive_clipping: Optional[AdaptiveClipping] = None,
              observed_client: Optional[int] = None, canaries=None,
              client_stage: Optional[Callable] = None,
              server_stage: Optional[Callable] = None,
              algorithm_hparams: Optional[dict] = None,
              noise_cohort_size: Optional[int] = None,
              participations_per_epoch: Optional[int] = None,
              min_separation: Optional[int] = None,
              distributed: Optional[distributed_lib.DistributedDp] = None) -> Algorithm:
  """User-level DP-FedAvg (or DP-FedSGD with ``fedsgd=True``), McMahan et al. 2018.

  Args:
    model: a `fedjax_dp.models.Model`.
    data: a `fedjax_dp.data.FederatedData` or a
      `fedjax_dp.federated.PooledPopulation` (its shape fixes the static cohort layout;
      only ``num_clients``, ``max_examples`` and ``counts`` are read here).
    clip_norm: S > 0, L2 bound on each client's update (same units as the parameters);
      default 1.0. Not with ``adaptive_clipping`` (the clip norm is then learned).
    noise_multiplier: z >= 0; central noise std ``z * S`` on the weighted sum. With
      ``noise_placement="local"`` each client adds std ``z * S`` to its own clipped
      update, and z may be a float ``[num_clients]`` vector (one per client, by
      population id; each client is then accounted with its own).
    sampling_rate / clients_per_round: q, or the expected cohort size ``q N``.
    sampler: ``"poisson"`` (the paper's), ``"fixed_size"``, ``"balls_in_bins"``,
      ``"random_allocation"`` or ``"cyclic_poisson"`` (`family.cohort_sampler`).
    participations_per_epoch / min_separation: k and b of the last two samplers.
    local_epochs / local_steps: local work (ignored for DP-FedSGD); giving
      ``local_steps`` replaces the default ``local_epochs=1``.
    batch_size: local minibatch size.
    client_optimizer / client_learning_rate: ``sgd`` | ``momentum`` | ``adam`` and its lr.
    server_optimizer / server_learning_rate: see `fedjax_dp.federated.server`.
    weighting: ``"uniform"`` (w_k = 1) or ``"data_size"`` (w_k = min(n_k / cap, 1),
      ``data_size_cap`` required).
    k_max: override the padded cohort size (default: overflow probability < 1e-9).
    fedsgd: DP-FedSGD: one full-batch gradient step per client.
    noise_placement: ``"central"`` (the paper's: one draw on the weighted sum) or
      ``"local"`` (every sampled client noises its own clipped update; accounted under
      zero-out for Poisson cohorts, `fedjax_dp.federated.round.round_relation`).
    population_weight: W of the fixed denominator ``q W``, a public constant; default
      ``sum_k w_k`` over this population (N for uniform weights). Like ``k_max`` it is a
      hyper-parameter computed from the population size, which is treated as public
      (as Opacus treats N): the guarantee is for the mechanism with these constants
      fixed, and a neighbouring population (one user more or fewer) runs with the same
      ones. Pass it to hold it fixed across populations (the canary audit does).
    client_update: replaces local training: any
      ``client_update(params, x, y, count, key, hparams) -> (update, ClientMetrics)``
      (`fedjax_dp.federated.client.make_client_update`'s signature), e.g. a client whose
      update is crafted (the canary audits); None: local SGD as configured.
    chunk_size: clients trained at once per device (None: automatic; see
      `fedjax_dp.federated.round.RoundConfig`).
    mesh: a `jax.sharding.Mesh` with a ``"clients"`` axis to shard the cohort over
      devices (`fedjax_dp.federated.sharding.client_mesh`), or None.
    adaptive_clipping: a `fedjax_dp.privacy.adaptive_clipping.AdaptiveClipping`:
      quantile-based adaptive clipping (Andrew et al. 2021; module docstring), or None
      (the fixed ``clip_norm``). Its ``expected_cohort_size`` is the public denominator
      m of the unclipped fraction (the sampler's expected cohort size, ``q N`` or the
      cohort size; `adaptive_clipping_for` fills it, and the defaults) and its
      ``count_stddev`` sigma_b the count's noise. ``noise_multiplier`` is then the
      combined release's z (hyper-parameter units: the event's is ``z / 2`` for
      fixed-size cohorts, as without it), which must lie below z_b = sigma_b / Delta_b;
      the update sum gets ``z_Delta = (z^-2 - z_b^-2)^-1/2``. Central noise, one z for
      all clients, user level only.
    observed_client: with local noise, a population client id whose upload the round
      also returns as the server receives it (``RoundConfig.observed_client``), for
      canary audits of attributable uploads; None otherwise.
    canaries: a `fedjax_dp.auditing.one_run.CanaryPlan` (K canaries, K/2 inserted: the
      sampler's population is N + K/2; `fedjax_dp.algorithms.canaries`), or None.
    client_stage: ``client_stage(trainer) -> ClientStage``
      (`fedjax_dp.federated.stages`), or None for FedAvg's local training: an
      algorithm's own client work composed with this privacy pipeline (DP-FedProx's
      proximal objective, DP-SCAFFOLD's control variates). ``trainer(grad_correction)``
      is `make_client_update` with these local-work arguments, or ``client_update``
      when given (a crafted client, e.g. a canary's, which ignores the correction).
      Not with ``fedsgd``.
    server_stage: ``server_stage(server_optimizer) -> ServerStage``, or None for the
      optax server step (`fedjax_dp.federated.stages.optax_server`).
    algorithm_hparams: the algorithm's own per-round hyper-parameters
      (``RoundHParams.algorithm``: a dict of float32 scalars), or None.
    noise_cohort_size: K' >= q N, or None: simulate a K'-client cohort's noise (central
      noise std ``(q N / K') z S``; `fedjax_dp.algorithms.dp_fedavg.noise_cohort`). The
      run's ledger accounts the noise added; the summary reports the K' deployment's.
    distributed: with ``noise_placement="distributed"``, a
      `fedjax_dp.algorithms.dp_fedavg.distributed.DistributedDp` (None: its defaults):
      every surviving client noises its own integer-encoded update and the server sees
      only their secure sum mod 2^b (distributed discrete Gaussian or Skellam); z is the
      planned survivors' summed noise std in units of S. Accounted under visible
      participation (`fedjax_dp.algorithms.secure_sum_spec.SecureSumSpec`), RDP only.

  Returns:
    An `Algorithm`. With ``adaptive_clipping`` its initial state carries the clip norm
    (``ServerState.mechanism["clip"]``) and its rounds report ``extras``:
    ``adaptive_clip_norm`` (the round's C_t), ``unclipped_fraction_dp`` (the noisy
    fraction b~_t), ``update_noise_multiplier`` (z_Delta) and
    ``count_noise_multiplier`` (z_b).

  Raises:
    FedJaxDpError: on invalid arguments (before anything is compiled); with
      ``adaptive_clipping``: a ``clip_norm`` given too, local noise, per-client noise
      multipliers, or a noise multiplier that cannot be split (``z >= z_b``, option
      ``noise_multiplier``).
  """
  adaptive = adaptive_clipping
  if canaries is not None:  # the sampler's population gains the K/2 inserted canaries
    data = canary_lib.checked_view(canaries, data, noise_multiplier, weighting, observed_client)
  clip_norm = _resolve_clip_norm(adaptive, clip_norm, noise_placement, noise_multiplier)
  z = _check_noise_multipliers(noise_multiplier, noise_placement, data.num_clients)
  _check_weighting(weighting, data_size_cap)
  samp = family.cohort_sampler(data, sampler, sampling_rate, clients_per_round, k_max,
                               participations_per_epoch, min_separation, family.ALL_SAMPLERS)
  family.check_structured(samp.kind, adaptive is not None, np.ndim(z) == 1)
  local_epochs, local_steps = family.local_work(local_epochs, local_steps)
  scale = noise_cohort.noise_scale(noise_cohort_size, samp.kind, samp.expected_cohort_size,
                                   noise_placement, adaptive is not None)
  secure = None
  if noise_placement == "distributed":
    distributed_lib.check_distributed(samp, z, client_stage)
    secure = distributed_lib.plan_secure_aggregation(
        distributed or distributed_lib.DistributedDp(), model, samp, clip_norm, float(z))
  elif distributed is not None:
    raise FedJaxDpError("distributed (the secure sum's options) needs "
                        "noise_placement='distributed'.", option="distributed")
  if fedsgd:
    local_epochs, local_steps, batch_size = None, 1, data.max_examples
  if client_stage is not None and fedsgd:
    raise FedJaxDpError("client_stage replaces local training: give it without fedsgd.",
                        option="client_stage")

  trainer = _trainer(model, data.max_examples, client_update, client_optimizer,
                     client_learning_rate, batch_size, local_epochs, local_steps)
  client = client_update or trainer()
  config = RoundConfig(
      clip_updates=True, noise=noise_placement, weighting=weighting, denominator="expected",
      data_size_cap=data_size_cap,
      population_weight=(aggregation.population_weight_total(data.counts, weighting,
                                                             data_size_cap)
                         if population_weight is None else
                         check_positive("population_weight", population_weight)),
      chunk_size=chunk_size, adaptive_clip=adaptive, observed_client=observed_client,
      noise_scale=scale, secure_aggregation=secure and secure[0])
  server_opt = family.server_optimizer(server_optimizer, server_learning_rate)
  compose = _compose if canaries is None else canary_lib.composer(canaries)
  round_fn, init_state = compose(client, samp, server_opt, config, mesh, data.num_clients,
                                  client_stage and client_stage(trainer),
                                  server_stage and server_stage(server_opt))
  name = "dp_fedsgd" if fedsgd else "dp_fedavg"
  privacy, extra_config = _privacy_statement(samp, config, clip_norm, z, noise_placement,
                                             adaptive, data.num_clients)
  if secure is not None:
    privacy, extra_config = _secure_statement(privacy, secure, clip_norm)
  extra_config.update(canaries.to_dict() if canaries is not None else {})
  return Algorithm(
      name=name, round_fn=round_fn, init=lambda key: init_state(model.init(key)),
      hparams=RoundHParams(clip_norm, z, samp.sampling_rate,
                           ClientHParams(learning_rate=client_learning_rate),
                           server_learning_rate, algorithm=algorithm_hparams),
      privacy=privacy, k_max=samp.k_max, sampling_rate=samp.sampling_rate, canaries=canaries,
      config={**dict(clip_norm=clip_norm, noise_multiplier=(
                         z.tolist() if isinstance(z, np.ndarray) else z),
                     noise_placement=noise_placement,
                     sampling_rate=samp.sampling_rate, sampler=samp.kind,
                     k_max=samp.k_max, expected_cohort_size=samp.expected_cohort_size,
                     local_epochs=local_epochs, local_steps=local_steps,
                     batch_size=batch_size, client_optimizer=client_optimizer,
                     client_learning_rate=client_learning_rate,
                     server_optimizer=server_optimizer,
                     server_learning_rate=server_learning_rate, weighting=weighting,
                     data_size_cap=data_size_cap), **extra_config,
              **(dict(noise_cohort_size=noise_cohort_size, noise_scale=scale)
                 if noise_cohort_size is not None else {})})


def _secure_statement(spec: PrivacySpec, secure, clip_norm: float
                      ) -> Tuple[PrivacySpec, Dict[str, Any]]:
  """`_privacy_statement`'s spec as a `SecureSumSpec` (the secure sum's events)."""
  from fedjax_dp.algorithms.secure_sum_spec import SecureSumSpec
  sa, fields = secure
  keep = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)
          if f.name not in ("event_scale", "note")}
  return SecureSumSpec(
      **keep, event_scale=1.0, mechanism=distributed_lib.mechanism_text(sa),
      facts=distributed_lib.accounting_facts(sa),
      equivalent=lambda z: distributed_lib.equivalent_noise_multiplier(sa, clip_norm, z),
      note=("distributed DP with secure aggregation: the server sees only the modular sum "
            "of the surviving clients' noised uploads and who took part, so no "
            "amplification by sampling is claimed; each round is accounted with the "
            "noise of the clients that survived (zCDP of the discrete sum as a Gaussian-"
            "equivalent noise multiplier, RDP only)")), fields


def _resolve_clip_norm(adaptive: Optional[AdaptiveClipping], clip_norm: Optional[float],
                       noise_placement: str, noise_multiplier) -> float:
  """The round's clip norm: S (default 1.0), or with adaptive clipping its initial C0
  (the round then reads C_t from its state).

  Raises:
    FedJaxDpError: S <= 0, or a combination adaptive clipping refuses.
  """
  if adaptive is not None:
    _check_adaptive(adaptive, clip_norm, noise_placement, noise_multiplier)
    return float(adaptive.initial_clip_norm)
  return check_positive("clip_norm", 1.0 if clip_norm is None else clip_norm)


def _check_weighting(weighting: str, data_size_cap: Optional[float]) -> None:
  """``"uniform"``, or ``"data_size"`` with the cap that bounds each client's weight.

  Raises:
    FedJaxDpError: another weighting, or data-size weights without a cap.
  """
  check_choice("weighting", weighting, ("uniform", "data_size"))
  if weighting == "data_size" and data_size_cap is None:
    raise FedJaxDpError(
        "weighting='data_size' under DP needs data_size_cap (weights min(n_k/cap, 1) <= 1 "
        "bound each client's influence).")


def _trainer(model, max_examples: int, client_update: Optional[Callable],
             client_optimizer: str, client_learning_rate: float, batch_size: int,
             local_epochs: Optional[int], local_steps: Optional[int]) -> Callable:
  """``trainer(grad_correction=None) -> client_update``: local SGD as configured
  (`make_client_update` with the correction hook of DP-FedProx and DP-SCAFFOLD), or the
  crafted ``client_update`` when given (audits; it ignores the correction). The client
  optimiser is built, and its options checked, when ``trainer`` is called."""

  def trainer(grad_correction=None):
    if client_update is not None:  # a crafted client (audits): no local objective
      crafted = client_update
      return lambda params, x, y, count, key, hp, context=None: crafted(
          params, x, y, count, key, hp)
    return make_client_update(
        model, family.client_optimizer(client_optimizer, client_learning_rate),
        batch_size=batch_size, max_examples=max_examples, local_epochs=local_epochs,
        local_steps=local_steps, grad_correction=grad_correction)

  return trainer


def _privacy_statement(samp, config: RoundConfig, clip_norm: float, noise_multiplier,
                       noise_placement: str, adaptive: Optional[AdaptiveClipping],
                       num_clients: int) -> Tuple[PrivacySpec, Dict[str, Any]]:
  """The user-level statement of a `dp_fedavg` round (module docstring): its relation,
  observation and event scale from the sampler and ``config``; per client (over every
  client) with per-client noise multipliers; with adaptive clipping, the combined
  release's (its split checked) and the configuration fields it adds.

  Returns:
    ``(privacy, extra_config)``.

  Raises:
    FedJaxDpError: with adaptive clipping, a noise multiplier that cannot be split.
  """
  relation = round_relation(samp, config)
  event_scale = clip_norm / sensitivity.sum_sensitivity(clip_norm, relation)
  observation = round_observation(config)
  note = ("every client adds its own noise (local placement) and the server sees each "
          "upload with its sender: no amplification by sampling is claimed; each round "
          "costs a client its Gaussian release with the probability it takes part "
          "(visible participation), accounted per client"
          + (" under zero-out" if samp.kind == "poisson" else "")
          if noise_placement == "local" else "")
  clipped = "each client's update (S)"
  extra_config: Dict[str, Any] = {}
  if adaptive is not None:
    z_count = adaptive.count_stddev / adaptive_lib.count_sensitivity(relation)
    check_adaptive_split(float(noise_multiplier) * event_scale, z_count)
    clipped = (f"each client's update, clip norm adaptive (initial C0 = "
               f"{adaptive.initial_clip_norm:g}, quantile gamma = "
               f"{adaptive.target_quantile:g})")
    note = ADAPTIVE_NOTE
    extra_config = dict(clip_norm="adaptive", **adaptive_config(adaptive),
                        count_noise_multiplier=z_count)
  fields: Dict[str, Any] = dict(
      sampling_rate=samp.sampling_rate, observation=observation,
      population_size=samp.population_size if samp.kind == "fixed_size" else None,
      cohort_size=samp.k_max if samp.kind == "fixed_size" else None,
      truncation=family.cohort_truncation(samp),
      event_scale=event_scale,
      clip_norm=None if adaptive is not None else clip_norm, clipped=clipped, note=note)
  if samp.kind in family.STRUCTURED_SAMPLERS:
    return participation_spec.for_sampler(samp, relation, **fields), extra_config
  if np.ndim(noise_multiplier) == 1:
    # Per-client noise multipliers: the per-client statement, over every client.
    return PerClientPrivacySpec("user-level", relation, samp.kind,
                                num_clients=num_clients, **fields), extra_config
  return PrivacySpec("user-level", relation, samp.kind, **fields), extra_config


def _compose(client_update, samp, server_opt, config: RoundConfig, mesh, num_clients: int,
             client_stage=None, server_stage=None):
  """The round and its initial state from engine stages: ``client_stage`` (else the
  stateless FedAvg client around ``client_update``) and ``server_stage`` (else the optax
  server step) composed by the engine with ``config``'s privacy pipeline.

  Returns:
    ``(round_fn, init_state)`` with ``init_state(params) -> ServerState`` (replicated
    over ``mesh``; per-client states ``[num_clients, ...]`` when the client has any).
  """
  if client_stage is None and server_stage is None:  # FedAvg's own (make_round)
    round_fn = make_round(client_update, samp, server_opt, config, mesh=mesh)
    server_init = server_opt
  else:
    client_stage = client_stage or stages.stateless_client(client_update)
    server_stage = server_stage or stages.optax_server(server_opt)
    round_fn = engine.make_engine_round(client_stage, samp, server_stage, config, mesh=mesh)
    server_init = server_stage

  def init_state(params):
    return sharding.replicate(server.init_server_state(
        params, server_init, init_mechanism_state(config, params),
        () if client_stage is None else
        stages.init_client_states(client_stage, params, num_clients)), mesh)

  return require_learning_rates(round_fn), init_state


def dp_fedsgd(model, data, **kwargs) -> Algorithm:
  """User-level DP-FedSGD (McMahan et al. 2018): `dp_fedavg` with ``fedsgd=True``."""
  return dp_fedavg(model, data, fedsgd=True, **kwargs)


# Re-exported: the record-level variant lives in its own module.
from fedjax_dp.algorithms.dp_fedavg.record_level import dp_fedavg_record_level  # noqa: E402
