"""The round engine: one federated round composed from stages, as one pure function.

``round_fn(state, data, hp, root_key) -> (ServerState, RoundMetrics)`` (jit it, scan
it with `fedjax_dp.federated.driver`) runs

1. cohort sampling (Poisson padded to ``k_max`` with a mask, or fixed size) at the
   sampler's rate and the aggregation weights (`RoundConfig.weighting`; custom weights
   scale the sensitivity by their maximum);
2. the release's calibration: its L2 sensitivity under the round's neighbouring
   relation (`fedjax_dp.federated.round.round_relation`) and its noise standard
   deviation (`_calibrate`);
3. the cohort's slots split over the devices of the mesh (``shard_map``) and, on each
   device, ``lax.scan`` over chunks of ``chunk_size`` clients; per chunk: gather the
   clients' data and persistent states, run the `ClientStage` (vmapped, keys folded by
   round and population id), detect non-finite uploads, clip (per client, jointly over
   the whole upload pytree), add local noise, and add the weighted uploads to running
   sums; memory is O(chunk_size x upload size) whatever the cohort size;
4. one ``psum`` of the per-device sums (the round's single cross-device reduction);
   updated client states are scattered back for the clients that took part;
5. central noise on the weighted sum (independent Gaussian, a correlated generator, the
   server's top-up with local noise), adaptive clipping's count release, division by
   the public denominator ``q W`` or the actual weight sum;
6. the `ServerStage` (by default the optax server optimiser).

Everything the privacy ledger needs is an *output* of the round (`RoundMetrics`), so
accounting reads what the code actually did; what the server observes
(`fedjax_dp.federated.round.round_observation`) follows from the noise stage.

Any algorithm built from stages gets the engine's sampling, chunking, sharding over
every device count, non-finite handling and the metrics' defaults by construction.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.flatten_util
import jax.numpy as jnp

from fedjax_dp.federated import aggregation, chunking, keys as keylib, sharding
from fedjax_dp.federated import secure_aggregation
from fedjax_dp.federated.cohort_loop import sum_over_cohort
from fedjax_dp.federated.population import PooledPopulation, gather_clients
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, RoundMetrics,
                                       check_sampling_rate, round_relation)
from fedjax_dp.federated.server import ServerState
from fedjax_dp.federated.stages import ClientStage, ServerStage
from fedjax_dp.privacy import adaptive_clipping, clipping, noise, sensitivity
from fedjax_dp.validation import FedJaxDpError

PyTree = Any

__all__ = ["make_engine_round", "default_metrics", "sum_over_cohort", "client_data_bytes"]


class _Partial(NamedTuple):
  """Per-device partial sums over its cohort slots (combined with one psum)."""
  total: Any            # sum_k w_k * (clipped [+ local noise]) upload_k
  loss: jax.Array       # sum_k mask_k * loss_k
  clipped: jax.Array    # participants whose upload norm exceeded C
  norm_sum: jax.Array   # sum of pre-clip norms over participants
  nonfinite: jax.Array  # participants whose upload was NaN/Inf (zeroed)
  weight_sum: jax.Array
  example_clip: jax.Array
  batch_truncated: jax.Array
  observed: Any = ()    # RoundConfig.observed_client's upload, flat [P] (or ())


class _Cohort(NamedTuple):
  ids: jax.Array
  mask: jax.Array
  counts: jax.Array
  weights: jax.Array
  cohort: Any


class _Calibration(NamedTuple):
  """The release's sensitivity and noise, and adaptive clipping's parts."""
  delta_s: jax.Array          # L2 sensitivity of the released sum
  std: jax.Array              # noise std of the release (the worst client's)
  std_clients: jax.Array      # [K] per-slot local noise std
  client_z: Any               # [N] per-client noise multipliers, or None
  z_combined: Any = None      # adaptive clipping: the combined event's z
  z_sum: Any = None
  z_count: Any = None


def client_data_bytes(data) -> int:
  """Bytes of one client's padded features and labels."""
  if isinstance(data, PooledPopulation):
    feat = int(jnp.dtype(data.pool_x.dtype).itemsize) * int(
        math.prod(data.pool_x.shape[1:]))
    return data.max_examples * (feat + 4)
  feat = int(jnp.dtype(data.x.dtype).itemsize) * int(math.prod(data.x.shape[2:]))
  return int(data.x.shape[1]) * (feat + 4)


def _custom_weights(hp, data) -> jax.Array:
  source = hp.client_weights if hp.client_weights is not None else data.weights
  if source is None:
    raise FedJaxDpError("RoundConfig(weighting='custom') needs "
                        "RoundHParams.client_weights or PopulationData.weights "
                        "[num_clients].")
  return jnp.asarray(source, jnp.float32)


def _sample_cohort(sampler, config: RoundConfig, state, data, hp, rkey,
                   root_key=None) -> _Cohort:
  """Step 1: the cohort, its example counts and its aggregation weights. Samplers whose
  ``needs_root_key`` is True (an epoch's assignment, `fedjax_dp.federated.participation`)
  also get the run's root key."""
  q = jnp.asarray(hp.sampling_rate, jnp.float32)
  extra = ({"root_key": root_key} if getattr(sampler, "needs_root_key", False) else {})
  cohort = sampler.sample(keylib.stream(rkey, keylib.SAMPLING), q, round_index=state.round,
                          **extra)
  ids, mask = cohort.indices, cohort.mask
  counts = jnp.where(mask, data.counts[ids], 0)
  if config.weighting == "uniform":
    weights = aggregation.uniform_weights(mask)
  elif config.weighting == "data_size":
    weights = aggregation.data_size_weights(counts, mask, config.data_size_cap)
  else:
    weights = _custom_weights(hp, data)[ids] * mask.astype(jnp.float32)
  return _Cohort(ids, mask, counts, weights, cohort)


def _calibrate(config: RoundConfig, relation: str, hp, data, ids) -> _Calibration:
  """Step 2: the L2 sensitivity of what is released, under the round's relation, and
  the noise standard deviation (Andrew et al. 2021, Sec. 3.1 with adaptive clipping).
  """
  clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
  z = jnp.asarray(hp.noise_multiplier, jnp.float32)
  if z.ndim == 1 and not config.local_noise:
    raise FedJaxDpError("per-client noise multipliers (a [num_clients] noise_multiplier) "
                        "need local noise (RoundConfig(noise='local')): central noise is "
                        "one draw for the whole cohort.")
  w_max = 1.0
  if config.clip_updates:
    if config.local_noise:  # each upload is released (then weighted: post-processing)
      delta_s = sensitivity.sum_sensitivity(clip_norm, relation)
    else:
      if config.weighting == "custom":
        w_max = jnp.max(_custom_weights(hp, data))
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
  adaptive = config.adaptive_clip
  z_combined = z_sum = z_count = None
  if adaptive is not None:
    # z C / Delta without C (Delta is linear in C): the same float every round while C
    # moves, so the ledger composes one run of identical events.
    z_combined = z / sensitivity.sum_sensitivity(1.0, relation, w_max)
    z_count = adaptive.count_stddev / adaptive_clipping.count_sensitivity(relation)
    z_sum = adaptive_clipping.update_noise_multiplier(z_combined, z_count)
    std_all = z_sum * delta_s
  elif hp.noise_stddev is not None:
    std_all = jnp.broadcast_to(jnp.asarray(hp.noise_stddev, jnp.float32), z.shape)
  else:
    std_all = z * clip_norm * config.noise_scale  # noise_scale: a larger noise cohort's
  if config.noise == "none":
    std_all = jnp.zeros_like(std_all)
  if config.distributed:  # the slots carry each client's integer noise std
    std_all = secure_aggregation.local_stddev(config.secure_aggregation, z, clip_norm)
  client_z = None
  if std_all.ndim == 1:  # per population client: each is accounted with its own
    std_clients = std_all[ids]
    client_z = std_all / delta_s
    std = jnp.min(std_all)  # the worst client's, whether sampled or not
  else:
    std_clients = jnp.broadcast_to(std_all, ids.shape)
    std = std_all
  return _Calibration(delta_s, std, std_clients, client_z, z_combined, z_sum, z_count)


def _clip_and_noise(config: RoundConfig, client: ClientStage, uploads, broadcast, hp,
                    rkey, cid, cw, cstd):
  """Step 3, per chunk: non-finite handling, clipping and local noise, then the
  weighted sum. Returns ``(summed, uploads as the server receives them, norms,
  finite)``."""
  clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
  if config.distributed:  # each client encodes; the chunk's uploads add mod 2^32
    sa = config.secure_aggregation
    uploads, norms, finite = clipping.clip_per_client(uploads, clip_norm)
    flat = jax.vmap(lambda u: jax.flatten_util.ravel_pytree(u)[0])(uploads)
    alive = secure_aggregation.survivors(sa, rkey, cid, cw > 0)
    enc = secure_aggregation.encode_chunk(sa, flat, rkey, cid, alive, jnp.max(cstd))
    return enc, uploads, norms, finite
  if config.clip_updates and not config.local_noise:
    # The fused hot path: two passes over the chunk's uploads.
    summed, norms, finite = aggregation.clipped_weighted_sum(uploads, cw, clip_norm)
    return summed, uploads, norms, finite
  if config.clip_updates:
    uploads, norms, finite = clipping.clip_per_client(uploads, clip_norm)
  else:
    finite = jax.vmap(clipping.is_finite)(uploads)
    fallback = (jax.tree_util.tree_map(jnp.zeros_like, jax.tree_util.tree_map(
        lambda l: l[0], uploads)) if client.fallback is None
                else client.fallback(broadcast, hp))
    uploads = jax.vmap(lambda u, f: jax.tree_util.tree_map(
        lambda l, b: jnp.where(f, l, b.astype(l.dtype)), u, fallback))(uploads, finite)
    norms = jax.vmap(clipping.global_norm)(uploads)
  if config.local_noise:
    nkeys = keylib.client_keys(keylib.stream(rkey, keylib.LOCAL_NOISE), cid)
    uploads = noise.add_local_noise(nkeys, uploads, cstd, config.noise_distribution)
  return aggregation.weighted_sum(uploads, cw), uploads, norms, finite


def _device_partial(client: ClientStage, config: RoundConfig, upload_like, chunk_size,
                    broadcast, data, hp, rkey, client_states, ids, mask, counts, weights,
                    std_clients):
  """Step 3 on one device: trains, clips, noises and sums its slots chunk by chunk.

  Returns ``(_Partial, max pre-clip norm, new client states of its slots)``."""
  clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
  per_chunk = lambda a: a.reshape((-1, chunk_size) + a.shape[1:])
  vmapped = jax.vmap(client.update, in_axes=(None, 0, 0, 0, 0, None, 0))

  def one_chunk(acc, xs):
    cid, cmask, ccounts, cw, cstd = xs
    x, y, _ = gather_clients(data, cid)
    cstate = jax.tree_util.tree_map(lambda a: a[cid], client_states)
    train_keys = keylib.client_keys(keylib.stream(rkey, keylib.TRAINING), cid)
    # Padding slots and clients without examples have count 0: a zero upload.
    uploads, new_states, cm = vmapped(broadcast, x, y, ccounts, train_keys, hp, cstate)
    summed, sent, norms, finite = _clip_and_noise(config, client, uploads, broadcast, hp,
                                                  rkey, cid, cw, cstd)
    observed = acc.observed
    if config.observed_client is not None:  # what the server sees of that sender
      sel = ((cid == config.observed_client) & cmask).astype(jnp.float32)
      flat = jax.vmap(lambda u: jax.flatten_util.ravel_pytree(u)[0])(sent)
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
    return part, (jnp.where(cmask, norms, 0.0), new_states)

  zero = jnp.zeros((), jnp.float32)
  izero = jnp.zeros((), jnp.int32)
  size = sum(l.size for l in jax.tree_util.tree_leaves(upload_like))
  observed0 = () if config.observed_client is None else jnp.zeros(size, jnp.float32)
  total0 = (secure_aggregation.zero_sum(config.secure_aggregation) if config.distributed
            else jax.tree_util.tree_map(lambda l: jnp.zeros(l.shape, jnp.float32),
                                        upload_like))
  init = _Partial(total0, zero, zero, zero, izero, zero, zero, izero, observed0)
  part, (norms, states) = jax.lax.scan(
      one_chunk, init, tuple(per_chunk(a) for a in (ids, mask, counts, weights, std_clients)))
  states = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), states)
  return part, jnp.max(norms), states


def _reduce(partial: Callable, mesh, args, slots):
  """Step 4: runs ``partial`` on every device's slots and combines the partial sums
  with the round's one ``psum`` (no mesh: one device)."""
  if mesh is None:
    return partial(*args, *slots)
  P = jax.sharding.PartitionSpec

  def sharded(*a):
    part, max_norm, states = partial(*a)
    # The round's one cross-device reduction: the upload sum and the metric sums travel
    # as one flat float32 vector (plus a scalar max for the metrics). A secure sum's
    # uint32 total travels on its own (wrapping integer addition, not float).
    secure = isinstance(part.total, secure_aggregation.EncodedSum)
    total = part.total.total if secure else None
    if secure:
      part = part._replace(total=part.total._replace(total=jnp.zeros((0,), jnp.float32)))
    flat, unravel = jax.flatten_util.ravel_pytree(part)
    part = unravel(jax.lax.psum(flat, sharding.CLIENTS_AXIS))
    if secure:
      part = part._replace(total=part.total._replace(
          total=jax.lax.psum(total, sharding.CLIENTS_AXIS)))
    return part, jax.lax.pmax(max_norm, sharding.CLIENTS_AXIS), states

  # check_vma=False: the replicated global model becomes per-device inside the
  # client's own lax.scan, which the varying-axes type check would reject. Updated
  # client states stay with their slots (sharded) and are scattered after.
  return jax.shard_map(
      sharded, mesh=mesh, in_specs=(P(),) * len(args) + (P(sharding.CLIENTS_AXIS),) * 5,
      out_specs=(P(), P(), P(sharding.CLIENTS_AXIS)), check_vma=False)(*args, *slots)


def _scatter_states(clients, slot_ids, slot_mask, states):
  """Writes the updated states of the slots that took part back to ``[N, ...]``."""
  if not jax.tree_util.tree_leaves(clients):
    return clients
  n = jax.tree_util.tree_leaves(clients)[0].shape[0]
  idx = jnp.where(slot_mask, slot_ids, n)  # padding slots point past the end: dropped
  return jax.tree_util.tree_map(lambda a, s: a.at[idx].set(s.astype(a.dtype), mode="drop"),
                                clients, states)


def _central_stages(config: RoundConfig, state, hp, rkey, part, cal: _Calibration, co,
                    clip_norm):
  """Step 5: central noise (independent or correlated), the server's top-up,
  adaptive clipping's count release. Returns ``(total, mechanism, extras,
  server_std)``."""
  total, mechanism, extras = part.total, state.mechanism, None
  if config.noise == "central" and config.central_noise is not None:
    corr, noise_state = config.central_noise.sample(
        mechanism["noise"], keylib.stream(rkey, keylib.NOISE), total, cal.std)
    total = jax.tree_util.tree_map(jnp.add, total, corr)
    mechanism = {**mechanism, "noise": noise_state}
  elif config.noise == "central":
    total = noise.add_gaussian_noise(keylib.stream(rkey, keylib.NOISE), total, cal.std)
  adaptive = config.adaptive_clip
  if adaptive is not None:  # the count release and the next clip norm (Alg. 1)
    n_in = jnp.sum(co.mask.astype(jnp.float32))
    fraction = adaptive_clipping.noisy_unclipped_fraction(
        keylib.stream(rkey, keylib.CLIP_COUNT), n_in - part.clipped, n_in, adaptive)
    mechanism = {**mechanism, "clip": adaptive_clipping.ClipState(
        adaptive_clipping.next_clip_norm(clip_norm, fraction, adaptive))}
    extras = {"adaptive_clip_norm": clip_norm, "unclipped_fraction_dp": fraction,
              "update_noise_multiplier": cal.z_sum, "count_noise_multiplier": cal.z_count}
  if config.observed_client is not None:
    took_part = jnp.any((co.ids == config.observed_client) & co.mask).astype(jnp.float32)
    extras = {**(extras or {}), "observed_upload": part.observed,
              "observed_participation": took_part}
  server_std = jnp.zeros(())
  if config.noise == "local_and_central":
    if hp.server_noise_stddev is None:
      raise FedJaxDpError("RoundConfig(noise='local_and_central') needs "
                          "RoundHParams.server_noise_stddev.")
    server_std = jnp.asarray(hp.server_noise_stddev, jnp.float32)
    total = noise.add_gaussian_noise(keylib.stream(rkey, keylib.NOISE), total, server_std)
  return total, mechanism, extras, server_std


def _secure_sum_stage(config: RoundConfig, part, rkey, upload_like, cal: _Calibration):
  """Step 5 of a distributed round: the server decodes the secure sum; the event is the
  sum's (its Gaussian-equivalent noise multiplier ``1 / sqrt(2 rho)`` with the noise of
  the clients that survived). Returns ``(total, extras, (z, std, Delta))``."""
  sa = config.secure_aggregation
  enc = part.total
  flat_like, unravel = jax.flatten_util.ravel_pytree(jax.tree_util.tree_map(
      lambda l: jnp.zeros(l.shape, l.dtype), upload_like))  # (abstract shapes)
  total = unravel(secure_aggregation.decode(sa, enc.total, rkey, flat_like.shape[0]))
  sigma = jnp.max(cal.std_clients)
  rho = secure_aggregation.round_rho(sa, sigma, enc.survivors)
  z_event = jnp.where(jnp.isfinite(rho) & (rho > 0), 1.0 / jnp.sqrt(2.0 * rho), 0.0)
  event = (z_event, jnp.sqrt(enc.survivors) * sigma * sa.granularity,
           jnp.asarray(sa.sensitivity_factor * sa.l2_bound * sa.granularity, jnp.float32))
  return total, secure_aggregation.diagnostics(sa, enc, sigma, rho), event


def default_metrics(rounds_done, **fields) -> RoundMetrics:
  """A `RoundMetrics` with the engine's defaults (zeros: no clipping, no noise, no
  release, nothing sampled) for every field not given, for a round that really needs
  its own code (`RoundMetrics` documents each field; ``noise_multiplier``,
  ``sampling_rate`` and ``dp_steps`` are what its ledger composes, so a private
  round must give them).

  Args:
    rounds_done: int32 scalar, the rounds completed before this one (the incoming
      ``ServerState.round``); the metrics' ``round`` is ``rounds_done + 1``, this
      round's 1-based number (the one convention of records, metrics.jsonl and
      TensorBoard).
    **fields: `RoundMetrics` fields (scalars; float32 or int32 as documented there).

  Raises:
    FedJaxDpError: a name that is not a `RoundMetrics` field.
  """
  unknown = sorted(set(fields) - set(RoundMetrics._fields))
  if unknown:
    raise FedJaxDpError(f"default_metrics: unknown RoundMetrics fields {unknown}.")
  zero, izero = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
  ints = {"num_clients", "num_sampled", "num_truncated", "nonfinite_updates", "dp_steps",
          "batch_truncated"}
  base = {f: (izero if f in ints else zero) for f in RoundMetrics._fields[1:18]}
  base["sensitivity"] = jnp.asarray(jnp.inf, jnp.float32)
  base.update(fields)
  return RoundMetrics(round=jnp.asarray(rounds_done, jnp.int32) + 1, **base)


def _round_metrics(config, state, hp, co, part, max_norm, cal, aggregate, server_std,
                   extras, event=None) -> RoundMetrics:
  """Step 7: the round's metrics; the event fields describe the release that ran."""
  n_part = jnp.sum(co.mask.astype(jnp.float32))
  safe = jnp.maximum(n_part, 1.0)
  if config.record_level:  # local DP-SGD: add/remove one record, Delta = C_r
    delta_event = jnp.asarray(hp.client.record_clip_norm, jnp.float32)
    std_event = jnp.asarray(hp.client.record_noise_multiplier, jnp.float32) * delta_event
  else:
    delta_event, std_event = jnp.asarray(cal.delta_s, jnp.float32), cal.std
  z_event = jnp.where(std_event > 0, std_event / delta_event, 0.0)
  if config.adaptive_clip is not None:  # the combined release (sum and count)
    z_event = jnp.where(cal.z_combined > 0, cal.z_combined, 0.0)
  if event is not None:  # a secure sum's (`_secure_sum_stage`)
    z_event, std_event, delta_event = event
  return RoundMetrics(
      round=state.round + 1, train_loss=part.loss / safe,
      num_clients=n_part.astype(jnp.int32), num_sampled=co.cohort.num_sampled,
      num_truncated=co.cohort.num_truncated,
      clip_fraction=part.clipped / safe if config.clip_updates else jnp.zeros(()),
      mean_update_norm=part.norm_sum / safe, max_update_norm=max_norm,
      nonfinite_updates=part.nonfinite, noise_multiplier=z_event, noise_stddev=std_event,
      sampling_rate=(jnp.asarray(hp.client.record_sampling_rate, jnp.float32)
                     if config.record_level else jnp.asarray(hp.sampling_rate, jnp.float32)),
      dp_steps=jnp.asarray(config.dp_steps, jnp.int32),
      example_clip_fraction=part.example_clip / safe,
      batch_truncated=part.batch_truncated,
      aggregate_norm=clipping.global_norm(aggregate), server_noise_stddev=server_std,
      sensitivity=delta_event, client_noise_multipliers=cal.client_z, extras=extras)


def make_engine_round(client: ClientStage, sampler, server: ServerStage,
                      config: RoundConfig, *, mesh: Optional[jax.sharding.Mesh] = None
                      ) -> Callable:
  """Builds ``round_fn(state, data, hp, root_key) -> (ServerState, RoundMetrics)``.

  Args:
    client: the `ClientStage` (local work; optional persistent per-client state in
      ``state.clients``, made by `fedjax_dp.federated.stages.init_client_states`).
    sampler: a `PoissonSampler` or `FixedSizeSampler`.
    server: the `ServerStage` (`fedjax_dp.federated.stages.optax_server` for FedAvg).
    config: `RoundConfig`: clipping, noise, weighting, denominator, chunking.
    mesh: a `jax.sharding.Mesh` with a ``"clients"`` axis
      (`fedjax_dp.federated.sharding.client_mesh`) to split the cohort over its
      devices, or None for one device. ``data`` and ``state`` are replicated.

  Returns:
    A pure function; ``data`` may be a `PopulationData` or a `PooledPopulation`. Its
    attributes ``sampler`` and ``config`` are the arguments (for `run_rounds`' checks
    and `fedjax_dp.federated.round.make_ledger`). ``hp.sampling_rate`` None means the
    sampler's rate.

  Raises:
    FedJaxDpError: called eagerly (not under ``jit``) with ``hp.sampling_rate`` other
      than the sampler's (`fedjax_dp.federated.round.check_sampling_rate`).
    FedJaxDpError: when traced, for a round configuration that needs a hyper-parameter
      that is missing (``sensitivity`` without clipping, ``client_weights`` for custom
      weights, ``server_noise_stddev`` with local-and-central noise).
  """
  num_shards = sharding.mesh_size(mesh)
  relation = round_relation(sampler, config)

  def round_fn(state: ServerState, data, hp: RoundHParams, root_key: jax.Array):
    # NumPy leaves (a population built on the host) become device arrays, so that a
    # call outside jit indexes them with traced ids like a call inside jit does.
    data = jax.tree_util.tree_map(jnp.asarray, data)
    # The sampler is the one source of truth of the sampling rate (RoundHParams).
    if hp.sampling_rate is None:
      hp = hp._replace(sampling_rate=jnp.asarray(sampler.sampling_rate, jnp.float32))
    else:
      check_sampling_rate(sampler, hp.sampling_rate)  # eager calls; traced: run_rounds
    rkey = keylib.round_key(root_key, state.round)
    if config.adaptive_clip is not None:  # this round's clip norm is the one learned
      hp = hp._replace(clip_norm=state.mechanism["clip"].clip_norm)
    co = _sample_cohort(sampler, config, state, data, hp, rkey, root_key)
    cal = _calibrate(config, relation, hp, data, co.ids)
    broadcast = server.broadcast(state)
    upload_like = _upload_shape(client, broadcast, data, hp, rkey, state.clients)

    # Chunk layout (static): pad the cohort to shards x chunks x chunk_size slots.
    k = co.ids.shape[0]
    chunk_size = config.chunk_size or _auto_chunk(
        client, -(-k // num_shards), upload_like, (broadcast, data, hp, rkey, state.clients))
    layout = chunking.chunk_layout(k, chunk_size, num_shards)
    pad = layout.padded_size - k
    slots = [jnp.pad(a, (0, pad)) for a in (co.ids, co.mask, co.counts, co.weights,
                                            cal.std_clients)]
    partial = functools.partial(_device_partial, client, config, upload_like,
                                layout.chunk_size)
    part, max_norm, slot_states = _reduce(
        partial, mesh, (broadcast, data, hp, rkey, state.clients), slots)
    clients = _scatter_states(state.clients, slots[0], slots[1], slot_states)

    clip_norm = jnp.asarray(hp.clip_norm, jnp.float32)
    event = None
    if config.distributed:
      total, extras, event = _secure_sum_stage(config, part, rkey, upload_like, cal)
      mechanism, server_std = state.mechanism, jnp.zeros(())
    else:
      total, mechanism, extras, server_std = _central_stages(config, state, hp, rkey,
                                                             part, cal, co, clip_norm)
    if config.denominator == "expected":
      assert config.population_weight is not None  # RoundConfig requires it
      denom = jnp.asarray(hp.sampling_rate, jnp.float32) * config.population_weight
      if config.distributed:  # the expected survivors' weight
        denom = denom * (1.0 - config.secure_aggregation.dropout_rate)
    else:
      denom = jnp.maximum(part.weight_sum, 1e-12)
    aggregate = jax.tree_util.tree_map(lambda t, u: (t / denom).astype(u.dtype), total,
                                       upload_like)
    new_state = server.apply(state, aggregate, hp)._replace(mechanism=mechanism,
                                                            clients=clients)
    metrics = _round_metrics(config, state, hp, co, part, max_norm, cal, aggregate,
                             server_std, extras, event)
    return new_state, metrics

  # Read by `fedjax_dp.federated.driver.run_rounds` (its host-side sampling rate check).
  round_fn.sampler = sampler  # type: ignore[attr-defined]
  round_fn.config = config  # type: ignore[attr-defined]
  return round_fn


def _one_client_args(broadcast, data, hp, rkey, clients) -> tuple:
  """The arguments of `ClientStage.update` for one client (abstract use only)."""
  ids = jnp.zeros((1,), jnp.int32)
  x, y, _ = gather_clients(data, ids)
  key = keylib.client_keys(keylib.stream(rkey, keylib.TRAINING), ids)[0]
  one_state = jax.tree_util.tree_map(lambda a: a[0], clients)
  return broadcast, x[0], y[0], jnp.zeros((), jnp.int32), key, hp, one_state


def _upload_shape(client: ClientStage, broadcast, data, hp, rkey, clients):
  """The shape and dtype of one client's upload (``jax.ShapeDtypeStruct`` leaves),
  traced abstractly (no computation)."""
  out = jax.eval_shape(client.update, *_one_client_args(broadcast, data, hp, rkey, clients))
  return out[0]


def _auto_chunk(client: ClientStage, per_device: int, upload_like, args) -> int:
  """`chunking.auto_chunk_size` for this round; the client update's FLOP estimate (one
  more lowering of it) is taken only when the other rules allow more than one client."""
  num_params = sum(l.size for l in jax.tree_util.tree_leaves(upload_like))
  data_bytes = client_data_bytes(args[1])
  chunk = chunking.auto_chunk_size(per_device, num_params, data_bytes)
  if chunk <= 1:
    return chunk
  return chunking.auto_chunk_size(per_device, num_params, data_bytes,
                                  client_flops=_client_flops(client, *args))


def _client_flops(client: ClientStage, broadcast, data, hp, rkey, clients) -> float:
  """XLA's FLOP estimate of one client's update (its lowered program's cost analysis;
  a loop body counts once), for `chunking.auto_chunk_size` on a CPU; 0.0 on other
  platforms or when the backend gives no estimate. Lowered only, never compiled."""
  if jax.default_backend() != "cpu":
    return 0.0
  try:  # leaves may be arrays, tracers or Python numbers (a direct, un-jitted call)
    args = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(jnp.shape(a), getattr(a, "dtype", None)
                                       or jnp.result_type(a)),
        _one_client_args(broadcast, data, hp, rkey, clients))
    cost = jax.jit(client.update).lower(*args).cost_analysis()
  except Exception:  # an estimate only: without one the chunk follows parameters alone
    return 0.0
  cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
  return float(cost.get("flops", 0.0)) if isinstance(cost, dict) else 0.0
