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
import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.flatten_util
import jax.numpy as jnp
import optax

from fedjax_dp.federated import aggregation, chunking, keys as keylib, server, sharding
from fedjax_dp.federated.client import ClientHParams
from fedjax_dp.federated.population import (  # PopulationData: re-exported here
    PooledPopulation, PopulationData, gather_clients)
from fedjax_dp.privacy import adaptive_clipping, clipping, noise, sensitivity
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int, check_positive

PyTree = Any

NOISE_MODES = ("none", "central", "local", "local_and_central")
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
    sampling_rate: float32 Poisson rate q (fixed-size sampling reports m / N).
    client: `ClientHParams` for local training (learning rate, record-level DP-SGD).
    server_learning_rate: float32 eta_s multiplying the server optimiser's step, or
      None (the optimiser's own rate); see `fedjax_dp.federated.server.server_update`.
    client_weights: float32 ``[num_clients]`` aggregation weights in [0, 1] indexed by
      population client id (e.g. PADPFL's impact factors p_i), read by
      ``weighting="custom"`` instead of ``PopulationData.weights``; as a schedule
      ``[rounds, num_clients]``, so time-varying weights never recompile. None: use
      the population's.
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

  The algorithms in `fedjax_dp.algorithms` build their optimisers with learning rate 1
  and read both rates from here: start from ``alg.hparams`` and ``_replace`` fields.
  """
  clip_norm: Any
  noise_multiplier: Any
  sampling_rate: Any
  client: ClientHParams = ClientHParams()
  server_learning_rate: Any = None
  client_weights: Any = None
  server_noise_stddev: Any = None
  noise_stddev: Any = None
  sensitivity: Any = None


class RoundMetrics(NamedTuple):
  """Scalars per round (stacked to ``[rounds]`` by the driver).

  ``noise_multiplier``, ``sampling_rate`` and ``dp_steps`` are what the ledger composes:
  for user-level DP the round's (``noise_stddev / sensitivity``, q, 1) under
  `round_relation`, q the cohort's sampling rate (hidden sampling or visible
  participation, by `round_observation`); for record-level DP the local DP-SGD
  (z_r, q_r, local steps) under add/remove of one record. With per-client noise multipliers, ``noise_multiplier`` is
  the smallest over the *population* (the worst client, whether sampled or not) and
  ``client_noise_multipliers`` holds every client's ``[num_clients]`` (None otherwise).
  ``sensitivity`` is the L2 sensitivity the noise multiplier is relative to.

  Several releases per round (`fedjax_dp.algorithms.base.PrivacySpec.releases`, e.g.
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

  def __post_init__(self):
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
  def local_noise(self) -> bool:
    """Whether each client adds its own noise to its upload."""
    return self.noise in ("local", "local_and_central")


def round_relation(sampler, config: RoundConfig) -> str:
  """The neighbouring relation (`fedjax_dp.privacy.sensitivity.RELATIONS`) under which
  a round built from ``sampler`` and ``config`` reports its noise multiplier.

  * record-level (local DP-SGD): ``"add_remove"`` of one record;
  * fixed-size cohorts: ``"replace_one"`` (what sampling without replacement needs);
  * Poisson cohorts with central noise: ``"add_remove"`` of one user;
  * Poisson cohorts whose clients add their own noise: ``"zero_out"``: a user whose
    data is replaced by a null dataset still takes part and still adds noise. Under
    add/remove the absent user's upload would be missing too, and the server sees who
    uploads (`round_observation`), which no Gaussian DpEvent covers.
  """
  if config.record_level:
    return "add_remove"
  if sampler.kind == "fixed_size":
    return "replace_one"
  return "zero_out" if config.local_noise else "add_remove"


def round_observation(config: RoundConfig) -> str:
  """What the server observes of a round built from ``config`` (any sampler)
  (`fedjax_dp.privacy.events.OBSERVATIONS`):

  * ``"attributable"`` when every client noises its own upload (local noise, user or
    record level through the model upload): the server receives each upload from its
    sender, so whether a unit took part is visible and the cohort's sampling gives no
    amplification (the ledger composes `VisibleParticipationDpEvent`s: exact);
  * ``"aggregate"`` otherwise: central noise on the cohort's sum (who was sampled stays
    hidden), and record-level local DP-SGD, whose record sampling the client's upload
    hides (the client's own participation is visible and not claimed: its steps are
    accounted in every round).
  """
  return "attributable" if config.local_noise and not config.record_level else "aggregate"


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
  one (model-upload papers 000 and 004, whose sensitivity 2R is the ball's diameter,
  `fedjax_dp.privacy.sensitivity.ball_sensitivity`): ``P_R(w0) - w0``, so that the
  client uploads the projection of the public global model onto the ball, a point
  inside it that does not depend on any client's data. Uploading ``w0`` itself could lie
  outside the ball (``w0`` averages noisy models) and break the 2R bound (issue 30,
  F10).

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


class _Partial(NamedTuple):
  """Per-device partial sums over its cohort slots (combined with one psum)."""
  total: Any            # sum_k w_k * (clipped [+ local noise]) update_k
  loss: jax.Array       # sum_k mask_k * loss_k
  clipped: jax.Array    # participants whose update norm exceeded C
  norm_sum: jax.Array   # sum of pre-clip norms over participants
  nonfinite: jax.Array  # participants whose update was NaN/Inf (zeroed)
  weight_sum: jax.Array
  example_clip: jax.Array
  batch_truncated: jax.Array
  observed: Any = ()    # RoundConfig.observed_client's upload, flat [P] (or ())


def _client_data_bytes(data) -> int:
  """Bytes of one client's padded features and labels."""
  if isinstance(data, PooledPopulation):
    feat = int(jnp.dtype(data.pool_x.dtype).itemsize) * int(
        math.prod(data.pool_x.shape[1:]))
    return data.max_examples * (feat + 4)
  feat = int(jnp.dtype(data.x.dtype).itemsize) * int(math.prod(data.x.shape[2:]))
  return int(data.x.shape[1]) * (feat + 4)


def make_round(client_update: Callable, sampler, server_optimizer: optax.GradientTransformation,
               config: RoundConfig, *, mesh: Optional[jax.sharding.Mesh] = None) -> Callable:
  """Builds ``round_fn(state, data, hp, root_key) -> (ServerState, RoundMetrics)``.

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

  Raises:
    FedJaxDpError: a mesh without a ``"clients"`` axis.
  """
  vmapped_client = jax.vmap(client_update, in_axes=(None, 0, 0, 0, 0, None))
  num_shards = sharding.mesh_size(mesh)

  relation = round_relation(sampler, config)

  def device_partial(params, data, hp, rkey, ids, mask, counts, weights, std_clients,
                     chunk_size):
    """Trains, clips, noises (local) and sums this device's slots chunk by chunk."""
    clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
    per_chunk = lambda a: a.reshape((-1, chunk_size) + a.shape[1:])

    def one_chunk(acc, xs):
      cid, cmask, ccounts, cw, cstd = xs
      x, y, _ = gather_clients(data, cid)
      # Local training, one independent key per population client id.
      train_keys = keylib.client_keys(keylib.stream(rkey, keylib.TRAINING), cid)
      # Padding slots and clients without examples have count 0: a zero update.
      updates, cm = vmapped_client(params, x, y, ccounts, train_keys, hp.client)
      # User-level clipping (McMahan et al. 2018, Alg. 1, ClipFn); non-finite -> zeros.
      local = config.noise in ("local", "local_and_central")
      if config.clip_updates and not local:
        # The fused hot path: two passes over the chunk's updates.
        summed, norms, finite = aggregation.clipped_weighted_sum(updates, cw, clip_norm)
      else:
        if config.clip_updates:
          updates, norms, finite = clipping.clip_per_client(updates, clip_norm)
        else:
          finite = jax.vmap(clipping.is_finite)(updates)
          fallback = nonfinite_fallback_update(params, hp.client)  # F10: inside the ball
          updates = jax.vmap(lambda u, f: jax.tree_util.tree_map(
              lambda l, b: jnp.where(f, l, b.astype(l.dtype)), u, fallback))(updates, finite)
          norms = jax.vmap(clipping.global_norm)(updates)
        if local:
          nkeys = keylib.client_keys(keylib.stream(rkey, keylib.LOCAL_NOISE), cid)
          updates = noise.add_local_noise(nkeys, updates, cstd,
                                          config.noise_distribution)
        summed = aggregation.weighted_sum(updates, cw)
      observed = acc.observed
      if config.observed_client is not None:  # what the server sees of that sender
        sel = ((cid == config.observed_client) & cmask).astype(jnp.float32)
        flat = jax.vmap(lambda u: jax.flatten_util.ravel_pytree(u)[0])(updates)
        observed = observed + jnp.sum(flat.astype(jnp.float32) * sel[:, None], axis=0)
      m = cmask.astype(jnp.float32)
      part = _Partial(
          total=jax.tree_util.tree_map(jnp.add, acc.total, summed),
          loss=acc.loss + jnp.sum(cm.loss * m),
          clipped=acc.clipped + jnp.sum((norms > clip_norm) * m),
          norm_sum=acc.norm_sum + jnp.sum(norms * m),
          nonfinite=acc.nonfinite + jnp.sum((~finite) & cmask).astype(jnp.int32),
          weight_sum=acc.weight_sum + jnp.sum(cw),
          example_clip=acc.example_clip + jnp.sum(cm.example_clip_fraction * m),
          batch_truncated=acc.batch_truncated + jnp.sum(cm.batch_truncated * cmask),
          observed=observed)
      return part, jnp.where(cmask, norms, 0.0)

    zero = jnp.zeros((), jnp.float32)
    izero = jnp.zeros((), jnp.int32)
    observed0 = (() if config.observed_client is None else
                 jnp.zeros(sum(l.size for l in jax.tree_util.tree_leaves(params)), jnp.float32))
    init = _Partial(jax.tree_util.tree_map(lambda l: jnp.zeros(l.shape, jnp.float32), params),
                    zero, zero, zero, izero, zero, zero, izero, observed0)
    part, norms = jax.lax.scan(
        one_chunk, init, tuple(per_chunk(a) for a in (ids, mask, counts, weights, std_clients)))
    return part, jnp.max(norms)

  def round_fn(state: server.ServerState, data, hp: RoundHParams, root_key: jax.Array):
    # NumPy leaves (a population built on the host) become device arrays, so that a
    # call outside jit indexes them with traced ids like a call inside jit does.
    data = jax.tree_util.tree_map(jnp.asarray, data)
    rkey = keylib.round_key(root_key, state.round)
    q = jnp.asarray(hp.sampling_rate, jnp.float32)
    adaptive = config.adaptive_clip
    if adaptive is not None:  # this round's clip norm is the one learned so far
      hp = hp._replace(clip_norm=state.mechanism["clip"].clip_norm)
    cohort = sampler.sample(keylib.stream(rkey, keylib.SAMPLING), q, round_index=state.round)
    ids, mask = cohort.indices, cohort.mask
    counts = jnp.where(mask, data.counts[ids], 0)

    # Weights (bounded in [0, 1] for DP) and padding mask: padded slots weigh 0.
    if config.weighting == "uniform":
      weights = aggregation.uniform_weights(mask)
    elif config.weighting == "data_size":
      weights = aggregation.data_size_weights(counts, mask, config.data_size_cap)
    else:
      source = hp.client_weights if hp.client_weights is not None else data.weights
      if source is None:
        raise FedJaxDpError("RoundConfig(weighting='custom') needs "
                            "RoundHParams.client_weights or PopulationData.weights "
                            "[num_clients].")
      weights = jnp.asarray(source, jnp.float32)[ids] * mask.astype(jnp.float32)

    clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
    z = jnp.asarray(hp.noise_multiplier, jnp.float32)
    if z.ndim == 1 and not config.local_noise:
      raise FedJaxDpError("per-client noise multipliers (a [num_clients] noise_multiplier) "
                          "need local noise (RoundConfig(noise='local')): central noise is "
                          "one draw for the whole cohort.")
    # The sensitivity of what is released, under the round's relation.
    if config.clip_updates:
      if config.local_noise:  # each upload is released (then weighted: post-processing)
        delta_s = sensitivity.sum_sensitivity(clip_norm, relation)
      else:
        w_max = 1.0
        if config.weighting == "custom":
          w_max = jnp.max(jnp.asarray(hp.client_weights if hp.client_weights is not None
                                      else data.weights, jnp.float32))
        delta_s = sensitivity.sum_sensitivity(clip_norm, relation, w_max)
    elif config.noise != "none" and not config.record_level:
      if hp.sensitivity is None:
        raise FedJaxDpError(
            "RoundHParams.sensitivity is required with RoundConfig(clip_updates=False) and "
            "noise: the round does not clip, so the algorithm must state the L2 "
            f"sensitivity of one upload under the round's relation ({relation}).")
      delta_s = jnp.asarray(hp.sensitivity, jnp.float32)
    else:
      delta_s = jnp.asarray(jnp.inf, jnp.float32)
    if adaptive is not None:
      # Andrew et al. 2021, Sec. 3.1: z (combined event) -> z_Delta for the update sum.
      # z C / Delta without C (Delta is linear in C): the same float every round while C
      # moves, so the ledger composes one run of identical events.
      z_combined = z / sensitivity.sum_sensitivity(1.0, relation, w_max)
      z_count = adaptive.count_stddev / adaptive_clipping.count_sensitivity(relation)
      z_sum = adaptive_clipping.update_noise_multiplier(z_combined, z_count)
      std_all = z_sum * delta_s
    elif hp.noise_stddev is not None:
      std_all = jnp.broadcast_to(jnp.asarray(hp.noise_stddev, jnp.float32), z.shape)
    else:
      std_all = z * clip_norm
    if config.noise == "none":
      std_all = jnp.zeros_like(std_all)
    client_z = None
    if std_all.ndim == 1:  # per population client: each is accounted with its own
      std_clients = std_all[ids]
      client_z = std_all / delta_s
      std = jnp.min(std_all)  # the worst client's, whether sampled or not
    else:
      std_clients = jnp.broadcast_to(std_all, ids.shape)
      std = std_all

    # Chunk layout (static): pad the cohort to shards x chunks x chunk_size slots.
    k = ids.shape[0]
    chunk_size = config.chunk_size or chunking.auto_chunk_size(
        -(-k // num_shards), sum(l.size for l in jax.tree_util.tree_leaves(state.params)),
        _client_data_bytes(data))
    layout = chunking.chunk_layout(k, chunk_size, num_shards)
    pad = layout.padded_size - k
    slots = [jnp.pad(a, (0, pad)) for a in (ids, mask, counts, weights, std_clients)]

    partial = functools.partial(device_partial, chunk_size=layout.chunk_size)
    if mesh is None:
      part, max_norm = partial(state.params, data, hp, rkey, *slots)
    else:
      P = jax.sharding.PartitionSpec

      def sharded(params, data, hp, rkey, *slots):
        part, max_norm = partial(params, data, hp, rkey, *slots)
        # The round's one cross-device reduction: the update sum and the metric sums
        # travel as one flat float32 vector (plus a scalar max for the metrics).
        flat, unravel = jax.flatten_util.ravel_pytree(part)
        return (unravel(jax.lax.psum(flat, sharding.CLIENTS_AXIS)),
                jax.lax.pmax(max_norm, sharding.CLIENTS_AXIS))

      # check_vma=False: the replicated global model becomes per-device inside the
      # client's own lax.scan, which the varying-axes type check would reject.
      part, max_norm = jax.shard_map(
          sharded, mesh=mesh,
          in_specs=(P(), P(), P(), P()) + (P(sharding.CLIENTS_AXIS),) * 5,
          out_specs=(P(), P()), check_vma=False)(state.params, data, hp, rkey, *slots)

    total = part.total
    mechanism = state.mechanism
    if config.noise == "central" and config.central_noise is not None:
      corr, noise_state = config.central_noise.sample(
          mechanism["noise"], keylib.stream(rkey, keylib.NOISE), total, std)
      total = jax.tree_util.tree_map(jnp.add, total, corr)
      mechanism = {**mechanism, "noise": noise_state}
    elif config.noise == "central":
      total = noise.add_gaussian_noise(keylib.stream(rkey, keylib.NOISE), total, std)
    extras = None
    if adaptive is not None:  # the count release and the next clip norm (Alg. 1)
      n_in = jnp.sum(mask.astype(jnp.float32))
      fraction = adaptive_clipping.noisy_unclipped_fraction(
          keylib.stream(rkey, keylib.CLIP_COUNT), n_in - part.clipped, n_in, adaptive)
      mechanism = {**mechanism, "clip": adaptive_clipping.ClipState(
          adaptive_clipping.next_clip_norm(clip_norm, fraction, adaptive))}
      extras = {"adaptive_clip_norm": clip_norm, "unclipped_fraction_dp": fraction,
                "update_noise_multiplier": z_sum, "count_noise_multiplier": z_count}
    if config.observed_client is not None:
      took_part = jnp.any((ids == config.observed_client) & mask).astype(jnp.float32)
      extras = {**(extras or {}), "observed_upload": part.observed,
                "observed_participation": took_part}
    server_std = jnp.zeros(())
    if config.noise == "local_and_central":
      if hp.server_noise_stddev is None:
        raise FedJaxDpError("RoundConfig(noise='local_and_central') needs "
                            "RoundHParams.server_noise_stddev.")
      server_std = jnp.asarray(hp.server_noise_stddev, jnp.float32)
      total = noise.add_gaussian_noise(keylib.stream(rkey, keylib.NOISE), total, server_std)
    if config.denominator == "expected":
      denom = q * config.population_weight
    else:
      denom = jnp.maximum(part.weight_sum, 1e-12)
    delta = jax.tree_util.tree_map(lambda t, p: (t / denom).astype(p.dtype), total,
                                   state.params)
    new_state = server.server_update(
        state, delta, server_optimizer,
        1.0 if hp.server_learning_rate is None else hp.server_learning_rate)
    new_state = new_state._replace(mechanism=mechanism)

    n_part = jnp.sum(mask.astype(jnp.float32))
    safe = jnp.maximum(n_part, 1.0)
    if config.record_level:  # local DP-SGD: add/remove one record, Delta = C_r
      delta_event = jnp.asarray(hp.client.record_clip_norm, jnp.float32)
      std_event = jnp.asarray(hp.client.record_noise_multiplier, jnp.float32) * delta_event
    else:
      delta_event, std_event = jnp.asarray(delta_s, jnp.float32), std
    z_event = jnp.where(std_event > 0, std_event / delta_event, 0.0)
    if adaptive is not None:  # the combined release (sum and count) is what is accounted
      z_event = jnp.where(z_combined > 0, z_combined, 0.0)
    metrics = RoundMetrics(
        round=state.round,
        train_loss=part.loss / safe,
        num_clients=n_part.astype(jnp.int32),
        num_sampled=cohort.num_sampled,
        num_truncated=cohort.num_truncated,
        clip_fraction=part.clipped / safe if config.clip_updates else jnp.zeros(()),
        mean_update_norm=part.norm_sum / safe,
        max_update_norm=max_norm,
        nonfinite_updates=part.nonfinite,
        noise_multiplier=z_event,
        noise_stddev=std_event,
        sampling_rate=(jnp.asarray(hp.client.record_sampling_rate, jnp.float32)
                       if config.record_level else q),
        dp_steps=jnp.asarray(config.dp_steps, jnp.int32),
        example_clip_fraction=part.example_clip / safe,
        batch_truncated=part.batch_truncated,
        aggregate_norm=clipping.global_norm(delta),
        server_noise_stddev=server_std,
        sensitivity=delta_event,
        client_noise_multipliers=client_z,
        extras=extras,
    )
    return new_state, metrics

  return round_fn
