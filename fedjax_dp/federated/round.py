"""One federated round as a single pure function (jit it, scan it).

``round_fn(state, data, hp, root_key) -> (state, RoundMetrics)`` runs

1. sample a cohort (Poisson padded to ``k_max`` with a mask, or fixed size);
2. split the cohort slots over the devices of a mesh (optional) and, on each device,
   ``lax.scan`` over chunks of ``chunk_size`` clients; for each chunk:
   a. gather the chunk's padded data (static shapes);
   b. ``client_update`` vmapped over the chunk, keys folded by round and population id;
   c. user-level clipping of each client's update to ``clip_norm`` (pre-clip norms
      kept; non-finite updates zeroed and counted);
   d. local noise (per client) if asked;
   e. add the weighted updates to the running sum;
   so memory is O(chunk_size x P), whatever the cohort size K;
3. one ``psum`` of the per-device sums over the mesh's ``"clients"`` axis;
4. central noise, once on the weighted sum (``"local_and_central"``: both, as NbAFL /
   PADPFL's client noise plus server top-up);
5. division by a fixed public denominator ``q W`` (DP-FedAvg) or by the actual weight
   sum (non-private FedAvg);
6. the server optimiser (optax) applied to the aggregated delta, scaled by the
   server learning rate.

Everything the privacy ledger needs is an *output* of the round, so accounting reads
what the code actually did: the noise standard deviation ``sigma``, the L2 sensitivity
``Delta`` of the released quantity under the round's own neighbouring relation
(`round_relation`: add/remove for Poisson cohorts with central noise, zero-out for
Poisson cohorts whose clients add their own noise, replace-one for fixed-size cohorts;
`fedjax_dp.privacy.sensitivity`), the noise multiplier ``z = sigma / Delta`` that the
ledger composes as given, the sampling rate and the number of DP steps. What the server
observes (`round_observation`: the aggregate with central noise, each upload with its
sender with local noise) decides whether the sampling rate amplifies
(`fedjax_dp.privacy.events.make_dp_event`).
Privacy parameters enter as arrays in `RoundHParams`: sweeping them never recompiles.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.core  # explicit: `jax.core.Tracer` (value checks skip traced arrays)
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.federated.client import ClientHParams
from fedjax_dp.federated.population import PopulationData

__all__ = ["RoundHParams", "RoundMetrics", "RoundConfig", "PopulationData", "make_round",
           "round_relation", "round_observation", "nonfinite_fallback_update",
           "init_mechanism_state", "check_sampling_rate", "make_ledger", "NOISE_MODES",
           "WEIGHTINGS", "DENOMINATORS"]
from fedjax_dp.privacy import adaptive_clipping, clipping, noise
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int, check_positive

PyTree = Any

NOISE_MODES = ("none", "central", "local", "local_and_central", "distributed")
WEIGHTINGS = ("uniform", "data_size", "custom")
DENOMINATORS = ("expected", "actual")


class RoundHParams(NamedTuple):
  """Per-round hyper-parameters as arrays (a leading ``[rounds]`` axis in a schedule).

  Attributes:
    clip_norm: float32 user-level clip norm C (ignored when not clipping).
    noise_multiplier: float32 z; the noise standard deviation is ``z * C`` (central:
      on the weighted sum; local: per client). With local noise it may be a float32
      ``[num_clients]`` vector indexed by population client id (a noise multiplier per
      client; every client is then accounted with its own, `PerClientLedger`). This is
      the hyper-parameter (noise std / clip norm); the round reports the noise
      multiplier of its DpEvent, ``std / sensitivity`` (`RoundMetrics`), which is z/2
      for fixed-size cohorts.
    sampling_rate: None (recommended), or float32 q in (0, 1]. None: the sampler's
      rate (``PoissonSampler.sampling_rate``; ``m / N`` for a `FixedSizeSampler`), so
      the rate is given once, to the sampler, which sizes the padded cohort ``k_max``
      for it. A value given here must equal the sampler's (to float32 precision) in
      every round: `run_rounds` and an eager call of the round refuse a mismatch with
      a ``ValueError`` (`check_sampling_rate`), since a larger rate than ``k_max`` was
      sized for drops clients and a fixed-size cohort ignores it.
    client: `ClientHParams` for local training (learning rate, record-level DP-SGD).
    server_learning_rate: float32 eta_s multiplying the server optimiser's step, or
      None (the optimiser's own rate); see `fedjax_dp.federated.server.server_update`.
    client_weights: float32 ``[num_clients]`` aggregation weights >= 0 (public, finite)
      indexed by population client id (e.g. PADPFL's impact factors p_i), read by
      ``weighting="custom"`` instead of ``PopulationData.weights``; as a schedule
      ``[rounds, num_clients]``, so time-varying weights never recompile. None: use
      the population's. Weights above 1 are allowed and accounted: with central noise
      the round's sensitivity is ``C * max_k w_k`` (add/remove, zero-out) or
      ``2 C max_k w_k`` (replace-one), the maximum over the population's weights that
      round (`fedjax_dp.privacy.sensitivity.sum_sensitivity`), so the reported noise
      multiplier is ``z / max_k w_k``: weights above 1 cost privacy, weights below 1
      do not gain it unless all are. With local noise each upload is released before
      weighting, so weights do not change the sensitivity.
    server_noise_stddev: float32 sigma_S >= 0, the standard deviation (parameter units)
      of the server's Gaussian noise on the weighted sum with
      ``noise="local_and_central"`` (PADPFL eq. 13); ignored otherwise.
    noise_stddev: float32 sigma >= 0 in parameter units, or None: the noise standard
      deviation itself (replaces ``z * C``), for algorithms whose uploads are bounded
      by the client (e.g. parameter clipping) rather than by the round's clipping.
    sensitivity: float32 Delta > 0, or None: with ``RoundConfig(clip_updates=False)``
      and noise, the L2 sensitivity of one upload under the round's relation
      (`round_relation`), as guaranteed by the client; required then, because the round
      cannot know what bounds an upload it does not clip. With clipping the round
      computes it (`fedjax_dp.privacy.sensitivity.sum_sensitivity`) and this is ignored.
    algorithm: an algorithm's own per-round hyper-parameters (a dict of float32
      arrays, e.g. DP-FedProx's ``{"prox_mu": mu}``), read by its stages
      (`fedjax_dp.federated.stages`), or None. Scheduled and swept like the rest.

  The algorithms in `fedjax_dp.algorithms` build their optimisers with learning rate 1
  and read both rates from here: start from ``alg.hparams`` and ``_replace`` fields.
  """
  clip_norm: Any
  noise_multiplier: Any
  sampling_rate: Any = None
  client: ClientHParams = ClientHParams()
  server_learning_rate: Any = None
  client_weights: Any = None
  server_noise_stddev: Any = None
  noise_stddev: Any = None
  sensitivity: Any = None
  algorithm: Any = None


class RoundMetrics(NamedTuple):
  """Scalars per round (stacked to ``[rounds]`` by the driver).

  ``round`` (int32) is the round's 1-based number: ``ServerState.round + 1`` of the
  state it started from, i.e. the number of rounds completed after it. Records
  (`fedjax_dp.federated.driver.run_rounds`), metrics.jsonl and TensorBoard steps carry
  the same number.

  ``noise_multiplier``, ``sampling_rate`` and ``dp_steps`` are what the ledger composes:
  for user-level DP the round's (``noise_stddev / sensitivity``, q, 1) under
  `round_relation`, q the cohort's sampling rate (hidden sampling or visible
  participation, by `round_observation`); for record-level DP the local DP-SGD
  (z_r, q_r, local steps) under add/remove of one record. With per-client noise multipliers, ``noise_multiplier`` is
  the smallest over the *population* (the worst client, whether sampled or not) and
  ``client_noise_multipliers`` holds every client's ``[num_clients]`` (None otherwise).
  ``sensitivity`` is the L2 sensitivity the noise multiplier is relative to.

  Several releases per round (`fedjax_dp.algorithms.multi_release_spec.MultiReleaseSpec.releases`, e.g.
  federated MAML's inner and outer DP-SGD stages): ``releases`` maps each release's
  name to a dict with the keys ``noise_multiplier`` (z of its event, ``noise_stddev /
  sensitivity``), ``sampling_rate``, ``dp_steps`` (int32), ``noise_stddev`` and
  ``sensitivity``, scalars (``[rounds]`` after the driver's scan); the ledger
  (`fedjax_dp.privacy.multi_release.MultiReleaseLedger`) composes those. The round's
  top-level ``noise_multiplier`` is then the smallest of the releases', its
  ``sampling_rate`` the largest and its ``dp_steps`` the total: a summary for reading,
  not what is accounted. None (the default) for one release per round.
  ``extras`` maps names to float32 (or int32) scalars, or ``[N]`` vectors with one entry
  per client (e.g. which devices took part): an algorithm's own per-round metrics (it
  labels them for disclosure in its ``metric_labels``); None by default. The driver
  writes both into each record (`fedjax_dp.federated.driver.metrics_to_records`).
  """
  round: jax.Array
  train_loss: jax.Array
  num_clients: jax.Array
  num_sampled: jax.Array
  num_truncated: jax.Array
  clip_fraction: jax.Array
  mean_update_norm: jax.Array
  max_update_norm: jax.Array
  nonfinite_updates: jax.Array
  noise_multiplier: jax.Array
  noise_stddev: jax.Array
  sampling_rate: jax.Array
  dp_steps: jax.Array
  example_clip_fraction: jax.Array
  batch_truncated: jax.Array
  aggregate_norm: jax.Array
  server_noise_stddev: jax.Array
  sensitivity: jax.Array
  client_noise_multipliers: Any = None
  releases: Any = None
  extras: Any = None


@dataclasses.dataclass(frozen=True)
class RoundConfig:
  """Static structure of a round (changing these recompiles; privacy values do not).

  Attributes:
    clip_updates: clip each client's update to ``hp.clip_norm`` (user-level DP).
    noise: ``"none"``, ``"central"`` (on the weighted sum), ``"local"`` (per client)
      or ``"local_and_central"`` (per client with ``z * C``, then
      ``hp.server_noise_stddev`` on the weighted sum).
    weighting: ``"uniform"``, ``"data_size"`` (``min(n_k / cap, 1)`` when
      ``data_size_cap`` is set) or ``"custom"`` (``data.weights[client_id]``, any
      weight vector given with the population).
    denominator: ``"expected"`` (fixed public ``q W``) or ``"actual"`` (sum of cohort
      weights).
    data_size_cap: cap for data-size weights (required for DP with data-size weights).
    population_weight: ``W = sum_k w_k`` over the population (host constant), e.g.
      the number of clients N for uniform weights
      (`fedjax_dp.federated.aggregation.population_weight_total`). Required (> 0)
      with ``denominator="expected"``, whose fixed denominator is ``q W``.
    record_level: local DP-SGD is on; the ledger then composes the local steps.
    dp_steps: DP releases per round composed by the ledger (1 for user level).
    noise_distribution: ``"gaussian"`` or ``"laplace"`` (local noise only): the
      per-coordinate distribution of standard deviation ``z * C``.
    chunk_size: clients trained at once per device; the cohort is scanned in chunks
      with running sums, so memory is O(chunk_size x P) instead of O(K x P). ``None``
      picks it from the parameter count, the data size and free memory
      (`fedjax_dp.federated.chunking.auto_chunk_size`). Results do not depend on it
      beyond float summation order.
    adaptive_clip: a `fedjax_dp.privacy.adaptive_clipping.AdaptiveClipping`, or None
      (the clip norm is ``hp.clip_norm``). With it the round clips to the clip norm in
      ``state.mechanism["clip"]``, releases the noisy count of unclipped updates beside
      the noisy sum and moves the clip norm toward the target quantile (Andrew et al.
      2021). ``hp.noise_multiplier`` is then the *combined* release's z (in
      hyper-parameter units, like ``z`` without it): the update sum gets
      ``z_Delta = (z_ev^-2 - z_b^-2)^-1/2`` (`adaptive_clipping.update_noise_multiplier`)
      and the round reports z_ev, the combined event's noise multiplier. Needs
      ``clip_updates`` and ``noise="central"``.
    central_noise: a correlated noise generator for the central noise, or None
      (independent Gaussian noise every round). A generator has
      ``init(params) -> state`` and ``sample(state, key, like, stddev) -> (noise,
      state)``: ``noise`` has ``like``'s structure (float32 leaves) and is the round's
      share of a correlated Gaussian whose underlying i.i.d. draws have standard
      deviation ``stddev`` (e.g. DP-FTRL's tree aggregation, banded matrix
      factorisation: `fedjax_dp.algorithms.dp_ftrl`); its state rides in
      ``state.mechanism["noise"]``. The round still reports ``noise_stddev =
      stddev`` and ``z = stddev / sensitivity``; what that z means over the run is the
      generator's algorithm's ledger's business. Needs ``noise="central"``.
    observed_client: a population client id, or None. For canary audits of attributable
      uploads (`round_observation`): the round then also returns, in
      ``RoundMetrics.extras``, ``"observed_upload"`` (float32 ``[P]``: that client's
      upload exactly as the server receives it, clipped and noised, zeros when it is not
      in the cohort) and ``"observed_participation"`` (float32, 1 when it took part),
      i.e. what the server observes of that sender. Needs local noise.
    noise_scale: s in (0, 1], a static factor on the central noise's standard
      deviation (default 1): the round adds ``s z C`` instead of ``z C``. With ``s = K /
      K'`` a cohort of expected size K carries, on its average, the noise of a K'-client
      cohort with noise multiplier z (the simulation of a larger noise cohort,
      pfl-research's ``noise_cohort_size``). The round reports the noise it added
      (``noise_stddev = s z C``), so its ledger accounts this run's own, weaker,
      guarantee; what the K' deployment would have is the algorithm's to report. Needs
      ``noise="central"`` and no ``adaptive_clip``.
    secure_aggregation: with ``noise="distributed"`` (and only then), a
      `fedjax_dp.federated.secure_aggregation.SecureAggregation`: every client encodes
      its clipped upload (scale, random rotation, conditional rounding, integer noise,
      mod 2^b) and the server receives only the modular sum of the surviving uploads
      (distributed DP with secure aggregation; Kairouz, Liu, Steinke 2021; Agarwal,
      Kairouz, Liu 2021). Needs clipping, uniform weights and the expected denominator.
  """
  clip_updates: bool = True
  noise: str = "central"
  weighting: str = "uniform"
  denominator: str = "expected"
  data_size_cap: Optional[float] = None
  population_weight: Optional[float] = None
  record_level: bool = False
  dp_steps: int = 1
  chunk_size: Optional[int] = None
  noise_distribution: str = "gaussian"
  adaptive_clip: Optional[adaptive_clipping.AdaptiveClipping] = None
  central_noise: Any = None
  observed_client: Optional[int] = None
  noise_scale: float = 1.0
  secure_aggregation: Any = None

  def __post_init__(self):
    _check_distributed(self)
    check_positive("noise_scale", self.noise_scale)
    if self.noise_scale > 1.0:
      raise FedJaxDpError(f"noise_scale must be in (0, 1] (a larger noise cohort's noise "
                          f"on this cohort), got {self.noise_scale!r}.", option="noise_scale")
    if self.noise_scale != 1.0 and (self.noise != "central" or self.adaptive_clip
                                    is not None):
      raise FedJaxDpError("noise_scale (a larger noise cohort's noise) needs noise='central' "
                          "and no adaptive clipping (its count release is not scaled).",
                          option="noise_scale")
    if self.observed_client is not None:
      check_int("observed_client", self.observed_client, minimum=0)
      if self.noise not in ("local", "local_and_central"):
        raise FedJaxDpError("RoundConfig.observed_client (what the server sees of one "
                            "sender) needs local noise: with central noise the server sees "
                            "only the aggregate.", option="observed_client")
    if self.adaptive_clip is not None and not (self.clip_updates and self.noise == "central"
                                               and not self.record_level):
      raise FedJaxDpError("adaptive clipping (RoundConfig.adaptive_clip) needs "
                          "clip_updates=True and noise='central' at user level: its "
                          "count release is accounted with the central sum's.")
    if self.central_noise is not None and self.noise != "central":
      raise FedJaxDpError("RoundConfig.central_noise (a correlated noise generator) needs "
                          f"noise='central', got noise={self.noise!r}.")
    if self.chunk_size is not None:
      check_int("chunk_size", self.chunk_size, minimum=1)
    check_choice("noise", self.noise, NOISE_MODES)
    check_choice("noise_distribution", self.noise_distribution, noise.DISTRIBUTIONS)
    if self.noise_distribution == "laplace" and self.noise != "local":
      raise FedJaxDpError("noise_distribution='laplace' is only available with "
                          "noise='local'.")
    check_choice("weighting", self.weighting, WEIGHTINGS)
    check_choice("denominator", self.denominator, DENOMINATORS)
    if self.denominator == "expected":
      if self.population_weight is None:
        raise FedJaxDpError(
            "population_weight is required with denominator='expected' (the fixed "
            "public denominator is sampling_rate * population_weight; for uniform "
            "weights population_weight is the number of clients N).")
      check_positive("population_weight", self.population_weight)

  @property
  def distributed(self) -> bool:
    """Whether clients noise integer uploads that the server sees only as a secure sum."""
    return self.noise == "distributed"

  @property
  def local_noise(self) -> bool:
    """Whether each client adds its own noise to its upload."""
    return self.noise in ("local", "local_and_central")


def _check_distributed(config: RoundConfig) -> None:
  """Distributed noise needs its `SecureAggregation` and the plain pipeline around it.

  Raises:
    FedJaxDpError: naming ``secure_aggregation``.
  """
  if (config.noise == "distributed") != (config.secure_aggregation is not None):
    raise FedJaxDpError("RoundConfig(noise='distributed') and secure_aggregation go "
                        f"together, got noise={config.noise!r} with secure_aggregation="
                        f"{config.secure_aggregation!r}.", option="secure_aggregation")
  if config.noise != "distributed":
    return
  bad = [name for name, ok in (
      ("clip_updates=True", config.clip_updates), ("weighting='uniform'",
                                                    config.weighting == "uniform"),
      ("denominator='expected'", config.denominator == "expected"),
      ("no adaptive_clip", config.adaptive_clip is None),
      ("no central_noise", config.central_noise is None),
      ("no observed_client", config.observed_client is None),
      ("noise_scale=1", config.noise_scale == 1.0),
      ("record_level=False", not config.record_level)) if not ok]
  if bad:
    raise FedJaxDpError("noise='distributed' (a secure sum of integer uploads, each "
                        "noised on its device) needs " + ", ".join(bad) + ".",
                        option="secure_aggregation")


def round_relation(sampler, config: RoundConfig) -> str:
  """The neighbouring relation (`fedjax_dp.privacy.sensitivity.RELATIONS`) under which
  a round built from ``sampler`` and ``config`` reports its noise multiplier.

  * record-level (local DP-SGD): ``"add_remove"`` of one record;
  * fixed-size cohorts: ``"replace_one"`` (what sampling without replacement needs);
  * Poisson cohorts with central noise: ``"add_remove"`` of one user;
  * Poisson cohorts whose clients add their own noise (local or distributed):
    ``"zero_out"``: a user whose data is replaced by a null dataset still takes part
    and still adds noise. Under
    add/remove the absent user's upload would be missing too, and the server sees who
    uploads (`round_observation`), which no Gaussian DpEvent covers.
  """
  if config.record_level:
    return "add_remove"
  if sampler.kind == "fixed_size":
    return "replace_one"
  return "zero_out" if config.local_noise or config.distributed else "add_remove"


def round_observation(config: RoundConfig) -> str:
  """What the server observes of a round built from ``config`` (any sampler)
  (`fedjax_dp.privacy.events.OBSERVATIONS`):

  * ``"attributable"`` when every client noises its own upload (local noise, user or
    record level through the model upload): the server receives each upload from its
    sender, so whether a unit took part is visible and the cohort's sampling gives no
    amplification (the ledger composes `VisibleParticipationDpEvent`s: exact);
  * ``"secure_sum"`` with distributed noise: the modular sum of the surviving uploads
    and who took part in the secure aggregation (visible participation, no
    amplification: `fedjax_dp.privacy.events`);
  * ``"aggregate"`` otherwise: central noise on the cohort's sum (who was sampled stays
    hidden), and record-level local DP-SGD, whose record sampling the client's upload
    hides (the client's own participation is visible and not claimed: its steps are
    accounted in every round).
  """
  if config.distributed:
    return "secure_sum"
  return "attributable" if config.local_noise and not config.record_level else "aggregate"


def check_sampling_rate(sampler, sampling_rate: Any,
                        where: str = "RoundHParams.sampling_rate") -> None:
  """Refuses a round's sampling rate that differs from its sampler's (host-side).

  The sampler is the one source of truth of the rate: it sizes a Poisson cohort's
  padded ``k_max`` for it (a larger rate would drop clients) and a fixed-size cohort
  draws ``m`` clients whatever the hyper-parameter says (while the denominator ``q W``
  and the ledger would read the hyper-parameter). Leave ``RoundHParams.sampling_rate``
  None to use the sampler's.

  Args:
    sampler: a `PoissonSampler` or `FixedSizeSampler` (its ``sampling_rate``).
    sampling_rate: None (nothing to check), a scalar or an array of rates (e.g. a
      schedule ``[rounds]``); values still being traced under ``jit`` are not checked.
    where: how the rate was given, for the message.

  Raises:
    FedJaxDpError (a ``ValueError``): an entry that is not the sampler's rate to
      float32 precision, naming both arguments and values (option ``sampling_rate``).
  """
  if sampling_rate is None or isinstance(sampling_rate, jax.core.Tracer):
    return
  rates = np.asarray(sampling_rate, np.float64).ravel()
  want = float(np.float32(sampler.sampling_rate))
  bad = ~np.isclose(rates, want, rtol=1e-6, atol=0.0)
  if np.any(bad):
    i = int(np.argmax(bad))
    got = float(rates[i])
    entry = f" (entry {i})" if rates.size > 1 else ""
    owner = ("PoissonSampler.create(..., sampling_rate=...)" if sampler.kind == "poisson"
             else "FixedSizeSampler cohort_size / population_size")
    raise FedJaxDpError(
        f"{where}={got!r}{entry} differs from the sampler's sampling_rate="
        f"{float(sampler.sampling_rate)!r} ({owner}); give the rate once, to the "
        "sampler, and leave RoundHParams.sampling_rate=None (it then follows the "
        "sampler).", option="sampling_rate")


def make_ledger(sampler, config: RoundConfig, delta: float, *,
                num_clients: Optional[int] = None, dp_sgd: Any = None,
                max_examples: Optional[int] = None, **ledger_options: Any):
  """The recommended way to build the privacy ledger of a round built with `make_round`
  (or `fedjax_dp.federated.engine.make_engine_round`) from ``sampler`` and ``config``:
  every accounting choice is read from the round itself, so the ledger composes what
  the round reports under the round's own neighbouring relation (`round_relation`),
  observation (`round_observation`), sampler and truncation. (Ready-made algorithms
  make theirs with ``alg.privacy.make_ledger(delta)``, the same statement for their
  rounds.)

  Args:
    sampler: the round's `PoissonSampler` or `FixedSizeSampler`.
    config: the round's `RoundConfig`.
    delta: target delta in (0, 1).
    num_clients: N for per-client noise multipliers (a ``[num_clients]``
      ``RoundHParams.noise_multiplier`` with local noise): a
      `fedjax_dp.privacy.per_client.PerClientLedger` is returned; None: one
      `fedjax_dp.privacy.ledger.PrivacyLedger`.
    dp_sgd: the client's `fedjax_dp.federated.client.DpSgdConfig`; required with
      ``config.record_level`` (its padded Poisson batches' truncation adds to delta).
    max_examples: the largest client's examples (required with ``dp_sgd``).
    **ledger_options: ``orders`` and/or ``pld_value_discretization_interval`` of
      `PrivacyLedger`.

  Returns:
    An empty ledger (`fedjax_dp.privacy.ledger_protocol.Ledger`): user level, the
    sampler's kind, population and (fixed size) cohort sizes; a Poisson cohort's
    truncation at ``k_max`` (`fedjax_dp.privacy.events.Truncation`); record level:
    record-level Poisson DP-SGD with its batch truncation.

  Raises:
    FedJaxDpError: ``dp_sgd`` or ``max_examples`` missing for a record-level round, an
      option that is not ``orders`` / ``pld_value_discretization_interval``, or invalid
      values (as `PrivacyLedger`).
  """
  from fedjax_dp.privacy import events, ledger as ledger_lib, per_client
  unknown = sorted(set(ledger_options) - {"orders", "pld_value_discretization_interval"})
  if unknown:
    raise FedJaxDpError(f"make_ledger takes no {', '.join(unknown)}: the sampler, relation, "
                        "observation, sizes and truncation follow from the round.",
                        option=unknown[0])
  kwargs: dict[str, Any]
  if sampler.kind in events.SCHEDULED_SAMPLERS and not config.record_level:
    return _participation_ledger(sampler, config, delta, num_clients)
  if config.record_level:
    if dp_sgd is None or max_examples is None:
      raise FedJaxDpError("make_ledger needs dp_sgd (the client's DpSgdConfig) and "
                          "max_examples for a record-level round (RoundConfig("
                          "record_level=True)).", option="dp_sgd")
    kwargs = dict(sampler="poisson", privacy_unit="record",
                  relation=round_relation(sampler, config),
                  observation=round_observation(config),
                  truncation=dp_sgd.truncation(max_examples, sampler.k_max))
  else:
    kwargs = dict(sampler=sampler.kind, privacy_unit="user",
                  relation=round_relation(sampler, config),
                  observation=round_observation(config),
                  population_size=sampler.population_size,
                  cohort_size=(sampler.cohort_size if sampler.kind == "fixed_size"
                               else None),
                  truncation=(events.Truncation(sampler.population_size, sampler.k_max, 1)
                              if sampler.kind == "poisson" else None))
  kwargs.update(ledger_options)
  if num_clients is not None:
    return per_client.PerClientLedger(num_clients, delta, **kwargs)
  return ledger_lib.PrivacyLedger(delta, **kwargs)


def _ball_radius(client_hp) -> Any:
  """The radius of the parameter ball every trained client model is projected onto
  (``param_clip_norm`` after every step, ``final_param_clip_norm`` once; the smaller
  if both), or None when local training projects onto no ball."""
  radii = [jnp.asarray(r, jnp.float32) for r in (client_hp.param_clip_norm,
                                                 client_hp.final_param_clip_norm)
           if r is not None]
  if not radii:
    return None
  return radii[0] if len(radii) == 1 else jnp.minimum(radii[0], radii[1])


def nonfinite_fallback_update(params, client_hp) -> Any:
  """The update that replaces a client's non-finite update in an unclipped round.

  Without a parameter ball: zeros (the client uploads the received model ``w0``). With
  one (the model-upload algorithms PADPFL and amplitude-varying perturbation, whose
  sensitivity 2R is the ball's diameter,
  `fedjax_dp.privacy.sensitivity.ball_sensitivity`): ``P_R(w0) - w0``, so that the
  client uploads the projection of the public global model onto the ball, a point
  inside it that does not depend on any client's data. Uploading ``w0`` itself could lie
  outside the ball (``w0`` averages noisy models) and break the 2R bound.

  Args:
    params: the global model ``w0`` (pytree).
    client_hp: the round's `ClientHParams`.

  Returns:
    A pytree like ``params`` (float32 leaves as the updates).
  """
  radius = _ball_radius(client_hp)
  if radius is None:
    return jax.tree_util.tree_map(jnp.zeros_like, params)
  projected, _, _ = clipping.clip_by_global_norm(params, radius)
  return jax.tree_util.tree_map(lambda p, w: (p - w).astype(w.dtype), projected, params)


def init_mechanism_state(config: RoundConfig, params) -> Any:
  """``ServerState.mechanism`` before round 1 for a round built with ``config``: ``()``
  when its clip norm and noise are memoryless, else a dict with ``"clip"``
  (`adaptive_clipping.ClipState`) and/or ``"noise"`` (``central_noise.init(params)``)."""
  out = {}
  if config.adaptive_clip is not None:
    out["clip"] = adaptive_clipping.init_clip_state(config.adaptive_clip)
  if config.central_noise is not None:
    out["noise"] = config.central_noise.init(params)
  return out or ()


def _participation_ledger(sampler, config: RoundConfig, delta: float,
                          num_clients: Optional[int]):
  """`make_ledger` for a structured-participation sampler
  (`fedjax_dp.federated.participation`): a
  `fedjax_dp.privacy.participation_ledger.ParticipationLedger`."""
  from fedjax_dp.privacy import events, participation_ledger
  if num_clients is not None:
    raise FedJaxDpError(f"sampler {sampler.kind!r} does not support per-client noise "
                        "multipliers.", option="num_clients")
  allocation = sampler.kind != "cyclic_poisson"
  return participation_ledger.ParticipationLedger(
      delta, sampler.kind, relation=round_relation(sampler, config),
      observation=round_observation(config),
      min_separation=None if allocation else sampler.cycle_length,
      epoch_length=sampler.epoch_length if allocation else None,
      participations=sampler.participations if allocation else 1,
      truncation=(events.Truncation(sampler.population_size, sampler.k_max, 1)
                  if allocation else None))


def make_round(client_update: Callable, sampler, server_optimizer: optax.GradientTransformation,
               config: RoundConfig, *, mesh: Optional[jax.sharding.Mesh] = None) -> Callable:
  """Builds ``round_fn(state, data, hp, root_key) -> (ServerState, RoundMetrics)`` of
  FedAvg-style local training: the engine (`fedjax_dp.federated.engine
  .make_engine_round`) composed with a stateless client stage around ``client_update``
  and the optax server stage (`fedjax_dp.federated.stages.optax_server`).

  Args:
    client_update: from `fedjax_dp.federated.client.make_client_update`.
    sampler: a `PoissonSampler` or `FixedSizeSampler`.
    server_optimizer: optax transform (see `fedjax_dp.federated.server`).
    config: `RoundConfig` (its ``chunk_size`` bounds the clients trained at once).
    mesh: a `jax.sharding.Mesh` with a ``"clients"`` axis
      (`fedjax_dp.federated.sharding.client_mesh`) to split the cohort over its
      devices, or None for one device. ``data`` is replicated on every device.

  Returns:
    A pure function; jit it directly or run many rounds with `fedjax_dp.federated.driver`.
    ``data`` may be a `PopulationData` or a `PooledPopulation`.
  """
  from fedjax_dp.federated import engine, stages  # engine imports this module's types
  client = stages.stateless_client(
      client_update, fallback=lambda params, hp: nonfinite_fallback_update(params, hp.client))
  return engine.make_engine_round(client, sampler, stages.optax_server(server_optimizer),
                                  config, mesh=mesh)
