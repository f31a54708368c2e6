"""One federated round as a single pure function (jit it, scan it).

``round_fn(state, data, hp, root_key) -> (state, RoundMetrics)`` runs

1. sample a cohort (Poisson padded to ``k_max`` with a mask, or fixed size);
2. gather the cohort's padded data on the device (static shapes);
3. ``client_update`` vmapped over the cohort, keys folded by round and population id;
4. user-level clipping of each client's update to ``clip_norm`` (pre-clip norms kept;
   non-finite updates zeroed and counted);
5. noise: central (once on the weighted sum) or local (per client) Gaussian;
6. aggregation: weighted sum divided by a fixed public denominator ``q W`` (DP-FedAvg)
   or by the actual weight sum (non-private FedAvg);
7. the server optimiser (optax) applied to the aggregated delta.

Everything the privacy ledger needs (noise multiplier, sampling rate, number of DP
steps) is an *output* of the round, so accounting reads what the code actually did.
Privacy parameters enter as arrays in `RoundHParams`: sweeping them never recompiles.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from fedjax_dp.federated import aggregation, keys as keylib, server
from fedjax_dp.federated.client import ClientHParams
from fedjax_dp.privacy import clipping, noise
from fedjax_dp.validation import FedJaxDpError, check_choice, check_positive

PyTree = Any

NOISE_MODES = ("none", "central", "local")
WEIGHTINGS = ("uniform", "data_size", "custom")
DENOMINATORS = ("expected", "actual")


class PopulationData(NamedTuple):
  """Device-resident population: ``x [N, max_n, ...]``, ``y [N, max_n]``, ``counts [N]``.

  ``weights`` (float32 ``[N]``, optional) are per-population-client aggregation
  weights, read only with ``RoundConfig(weighting="custom")``; under DP they must lie
  in [0, 1] so that one client moves the weighted sum by at most the clip norm
  (validate them with `fedjax_dp.federated.aggregation.custom_weights`).
  """
  x: jax.Array
  y: jax.Array
  counts: jax.Array
  weights: Optional[jax.Array] = None


class RoundHParams(NamedTuple):
  """Per-round hyper-parameters as arrays (a leading ``[rounds]`` axis in a schedule).

  Attributes:
    clip_norm: float32 user-level clip norm C (ignored when not clipping).
    noise_multiplier: float32 z; the noise standard deviation is ``z * C`` (central:
      on the weighted sum; local: per client).
    sampling_rate: float32 Poisson rate q (fixed-size sampling reports m / N).
    client: `ClientHParams` for local training (record-level DP-SGD values).
  """
  clip_norm: Any
  noise_multiplier: Any
  sampling_rate: Any
  client: ClientHParams = ClientHParams()


class RoundMetrics(NamedTuple):
  """Scalars per round (stacked to ``[rounds]`` by the driver).

  ``noise_multiplier``, ``sampling_rate`` and ``dp_steps`` are what the ledger composes:
  for user-level DP the round's (z, q, 1); for record-level DP the local DP-SGD
  (z_r, q_r, local steps).
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


@dataclasses.dataclass(frozen=True)
class RoundConfig:
  """Static structure of a round (changing these recompiles; privacy values do not).

  Attributes:
    clip_updates: clip each client's update to ``hp.clip_norm`` (user-level DP).
    noise: ``"none"``, ``"central"`` (on the weighted sum) or ``"local"`` (per client).
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
  """
  clip_updates: bool = True
  noise: str = "central"
  weighting: str = "uniform"
  denominator: str = "expected"
  data_size_cap: Optional[float] = None
  population_weight: Optional[float] = None
  record_level: bool = False
  dp_steps: int = 1

  def __post_init__(self):
    check_choice("noise", self.noise, NOISE_MODES)
    check_choice("weighting", self.weighting, WEIGHTINGS)
    check_choice("denominator", self.denominator, DENOMINATORS)
    if self.denominator == "expected":
      if self.population_weight is None:
        raise FedJaxDpError(
            "population_weight is required with denominator='expected' (the fixed "
            "public denominator is sampling_rate * population_weight; for uniform "
            "weights population_weight is the number of clients N).")
      check_positive("population_weight", self.population_weight)


def make_round(client_update: Callable, sampler, server_optimizer: optax.GradientTransformation,
               config: RoundConfig) -> Callable:
  """Builds ``round_fn(state, data, hp, root_key) -> (ServerState, RoundMetrics)``.

  Args:
    client_update: from `fedjax_dp.federated.client.make_client_update`.
    sampler: a `PoissonSampler` or `FixedSizeSampler`.
    server_optimizer: optax transform (see `fedjax_dp.federated.server`).
    config: `RoundConfig`.

  Returns:
    A pure function; jit it directly or run many rounds with `fedjax_dp.federated.driver`.
  """
  vmapped_client = jax.vmap(client_update, in_axes=(None, 0, 0, 0, 0, None))

  def round_fn(state: server.ServerState, data: PopulationData, hp: RoundHParams,
               root_key: jax.Array):
    rkey = keylib.round_key(root_key, state.round)
    q = jnp.asarray(hp.sampling_rate, jnp.float32)
    cohort = sampler.sample(keylib.stream(rkey, keylib.SAMPLING), q)
    ids, mask = cohort.indices, cohort.mask
    counts = jnp.where(mask, data.counts[ids], 0)

    # Local training, one independent key per population client id.
    train_keys = keylib.client_keys(keylib.stream(rkey, keylib.TRAINING), ids)
    updates, cm = vmapped_client(state.params, data.x[ids], data.y[ids],
                                 jnp.maximum(counts, 1), train_keys, hp.client)

    # User-level clipping (McMahan et al. 2018, Alg. 1, ClipFn); non-finite -> zeros.
    clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
    if config.clip_updates:
      updates, norms, finite = clipping.clip_per_client(updates, clip_norm)
    else:
      finite = jax.vmap(clipping.is_finite)(updates)
      updates = jax.vmap(lambda u, f: jax.tree_util.tree_map(
          lambda l: jnp.where(f, l, jnp.zeros_like(l)), u))(updates, finite)
      norms = jax.vmap(clipping.global_norm)(updates)

    # Weights (bounded in [0, 1] for DP) and padding mask: padded slots weigh 0.
    if config.weighting == "uniform":
      weights = aggregation.uniform_weights(mask)
    elif config.weighting == "data_size":
      weights = aggregation.data_size_weights(counts, mask, config.data_size_cap)
    else:
      if data.weights is None:
        raise FedJaxDpError("RoundConfig(weighting='custom') needs "
                            "PopulationData.weights [num_clients].")
      weights = jnp.asarray(data.weights, jnp.float32)[ids] * mask.astype(jnp.float32)

    z = jnp.asarray(hp.noise_multiplier, jnp.float32)
    if z.ndim == 1:  # per-population-client noise multipliers (local noise)
      z_clients = z[ids]
      z_report = jnp.min(jnp.where(mask, z_clients, jnp.inf))
    else:
      z_clients = jnp.broadcast_to(z, ids.shape)
      z_report = z
    std = z_report * clip_norm if config.noise != "none" else jnp.zeros(())

    if config.noise == "local":
      nkeys = keylib.client_keys(keylib.stream(rkey, keylib.LOCAL_NOISE), ids)
      updates = noise.add_local_noise(nkeys, updates, z_clients * clip_norm)
    total = aggregation.weighted_sum(updates, weights)
    if config.noise == "central":
      total = noise.add_gaussian_noise(keylib.stream(rkey, keylib.NOISE), total, std)

    if config.denominator == "expected":
      denom = q * config.population_weight
    else:
      denom = jnp.maximum(jnp.sum(weights), 1e-12)
    delta = jax.tree_util.tree_map(lambda l: l / denom, total)
    new_state = server.server_update(state, delta, server_optimizer)

    maskf = mask.astype(jnp.float32)
    n_part = jnp.sum(maskf)
    safe = jnp.maximum(n_part, 1.0)
    metrics = RoundMetrics(
        round=state.round,
        train_loss=jnp.sum(cm.loss * maskf) / safe,
        num_clients=n_part.astype(jnp.int32),
        num_sampled=cohort.num_sampled,
        num_truncated=cohort.num_truncated,
        clip_fraction=(jnp.sum((norms > clip_norm) * maskf) / safe
                       if config.clip_updates else jnp.zeros(())),
        mean_update_norm=jnp.sum(norms * maskf) / safe,
        max_update_norm=jnp.max(jnp.where(mask, norms, 0.0)),
        nonfinite_updates=jnp.sum((~finite) & mask).astype(jnp.int32),
        noise_multiplier=(jnp.asarray(hp.client.record_noise_multiplier, jnp.float32)
                          if config.record_level else
                          (z_report if config.noise != "none" else jnp.zeros(()))),
        noise_stddev=(jnp.asarray(hp.client.record_noise_multiplier, jnp.float32) *
                      jnp.asarray(hp.client.record_clip_norm, jnp.float32)
                      if config.record_level else std),
        sampling_rate=(jnp.asarray(hp.client.record_sampling_rate, jnp.float32)
                       if config.record_level else q),
        dp_steps=jnp.asarray(config.dp_steps, jnp.int32),
        example_clip_fraction=jnp.sum(cm.example_clip_fraction * maskf) / safe,
        batch_truncated=jnp.sum(cm.batch_truncated * mask).astype(jnp.int32),
        aggregate_norm=clipping.global_norm(delta),
    )
    return new_state, metrics

  return round_fn
