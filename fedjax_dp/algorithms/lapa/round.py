"""LAPA's compiled round, stage by stage (Algorithm 1; what each line does and
what it releases is stated in `fedjax_dp.algorithms.lapa.algorithm`'s docstring): its
hyper-parameters (`LapaHParams`), state (`LapaState`), static structure (`LapaConfig`),
`make_round` and `initial_state`. Every stage is a pure jnp function of the round's
arrays; `make_round` runs them in the order of Algorithm 1's lines.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal, NamedTuple, Tuple, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from fedjax_dp.algorithms.lapa import aggregation, allocators, calibration, channel
from fedjax_dp.algorithms.lapa.privacy import (CLIPPINGS, LABEL_STATISTICS,
                                               label_histograms, label_statistics)
from fedjax_dp.federated.engine import default_metrics
from fedjax_dp.federated.round import RoundMetrics
from fedjax_dp.federated.server import ServerState
from fedjax_dp.privacy import per_example
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

__all__ = ["Aggregator", "ErrorScale", "AGGREGATORS", "ERROR_SCALES", "FILTER_MARGIN",
           "LapaHParams", "LapaState", "LapaConfig", "LocalGradients", "Uploads",
           "RoundPrivacy", "device_gradient", "release_labels", "filter_uploads",
           "transmit", "aggregate", "next_budgets", "switch_off", "round_privacy",
           "round_metrics", "make_round", "initial_state"]

#: The aggregators and the PID error's scalarisations (`LapaConfig`; the tuples:
#: their values).
Aggregator = Literal["fedavg", "beda", "wasserstein"]
ErrorScale = Literal["direction", "first", "clip"]
AGGREGATORS: Tuple[str, ...] = get_args(Aggregator)
ERROR_SCALES: Tuple[str, ...] = get_args(ErrorScale)
#: The round admits an upload while the filter's spend stays below budget (1 - this)
#: in float32 (the host-side ledger checks the float64 sum against the budget).
FILTER_MARGIN = 1e-4
_LABEL_STREAM = 0x1ABE1        # fold_in constant of the label-noise key (round 1)


class LapaHParams(NamedTuple):
  """Per-round hyper-parameters (arrays: sweeps never recompile).

  Attributes:
    learning_rate: eta (eq. 3), float32 scalar.
    clip_norm: C (eq. 17), float32 scalar.
    gaussian_constant: c of the classical Gaussian mechanism, sqrt(2 ln(1.25/delta)).
    paper_sensitivity: float32 ``[N]``: Delta_s of the paper's calibration per device
      (eq. 18: 2C/|D_i|, or the provable one when calibrating with it).
    sensitivity: float32 scalar: the sensitivity the code enforces (the ledger's).
    channel_std: float32 ``[N]``: sigma_c,i, decoded channel noise SD per coordinate in
      gradient units (0: ideal channel).
    static_weights: float32 ``[N]``: rho of the FedAvg aggregator (eq. 2), summing to 1
      over the scheduled devices (the Wasserstein weights come from the label release
      of round 1, in the state; BEDA's every round).
    counts: float32 ``[N]``: |D_i| (BEDA's data-size factor; the global label PMF's
      weights), public under replace-one.
    selected: float32 ``[N]``: 1 for a scheduled device (eq. 22), else 0.
    rho_budget: float32 ``[N]``: the privacy filter's budget on each device's sum of
      (sensitivity / sigma_i[t])^2 over its uploads (`privacy.upload_budgets`).
    label_noise_std: float32 scalar sigma_h: the SD per count of the label-histogram
      release (Wasserstein aggregator; 0: exact label statistics, no noise).
  """
  learning_rate: Any
  clip_norm: Any
  gaussian_constant: Any
  paper_sensitivity: Any
  sensitivity: Any
  channel_std: Any
  static_weights: Any
  counts: Any
  selected: Any
  rho_budget: Any
  label_noise_std: Any


class LapaState(NamedTuple):
  """Algorithm state besides the model (``ServerState.opt_state``).

  Attributes:
    allocator: `allocators.AllocatorState` (budgets of the round about to run).
    switched: bool scalar: artificial noise is off (eq. 23).
    switch_round: int32: the 1-based round from which no artificial noise is added
      (T_th), 0 while not switched.
    beda_angles: float32 ``[N]``: BEDA's smoothed angles (eq. 14 form).
    error_norm: float32: ||g~[1]||, the first round's global gradient norm (0 before
      round 1): Z of the PID error with ``error_scale="first"``.
    rho_spent: float32 ``[N]``: the filter's spend, each device's sum of
      (sensitivity / sigma_i[t])^2 over its uploads (inf after an upload without
      artificial noise).
    label_hist: float32 ``[N, K]``: the label histograms as the BS received them in round
      1 (noisy; exact with ``label_statistics="exact"``); zeros before round 1 and
      without the Wasserstein aggregator.
    label_distances: float32 ``[N]``: W1 of each device's label PMF to the global one
      (eq. 20), post-processing of ``label_hist``.
    label_weights: float32 ``[N]``: the Wasserstein softmax weights (eqs. 21-22) over
      the scheduled devices.
  """
  allocator: Any
  switched: Any
  switch_round: Any
  beda_angles: Any
  error_norm: Any
  rho_spent: Any
  label_hist: Any
  label_distances: Any
  label_weights: Any


@dataclasses.dataclass(frozen=True)
class LapaConfig:
  """Static structure of the LAPA round (changing it recompiles).

  Attributes:
    allocator: `allocators.AllocatorConfig` (kind, eps_T, T, PID, Gompertz, split).
    aggregator: ``"fedavg"``, ``"beda"`` or ``"wasserstein"``.
    clipping: ``"per_example"`` (default) or ``"aggregate"`` (eq. 17 on the mean).
    batch_size: B >= 1, each device's minibatch per round.
    switch: the dynamic noise control of eq. 23 (off: artificial noise throughout).
    beda_alpha: FedAdp's Gompertz alpha (BEDA only).
    error_scale: how eq. 10's vector difference becomes the scalar E ([D]):
      ``"direction"`` (default): E = ||g~[i_s]/||g~[i_s]|| - g~[i_s-1]/||g~[i_s-1]||||,
      the change of the global gradient's direction, in [0, 2]; ``"first"``:
      E = ||g~[i_s] - g~[i_s-1]|| / ||g~[1]||; ``"clip"``: ... / C (our first
      choice). With magnitudes (first, clip) the feedback is unstable under DP noise:
      noisier rounds give larger differences, a larger e, a smaller eps and more noise
      (measured: e[t] in the thousands, exp(-e) = 0 and rounds with no budget); the
      direction is scale-free, so e <= 2 (K_p + K_s) and eps[t] >= exp(-2(K_p + K_s))
      of the even share.
    max_noise_ratio: R: a device uploads only while its artificial noise's expected
      norm sigma sqrt(d) is at most R C (beyond it the upload is pure noise that would
      wreck the aggregate, or overflow float32); it skips the round otherwise (no
      release, recorded in ``device_uploaded``).
    label_statistics: ``"dp"`` (noisy label histograms, released once) or ``"exact"``
      (the paper's; not covered): only the names of the label fields depend on it
      (``*_exact`` fields are diagnostics); the noise is ``hp.label_noise_std``.
    num_classes: K, the label histograms' length (Wasserstein aggregator).
    ground_cost: eq. 20's ground cost between labels: ``"index"`` (|a - b|) or
      ``"discrete"`` (1{a != b}, numbering-invariant; `aggregation.label_distance`).
  """
  allocator: allocators.AllocatorConfig
  aggregator: str = "wasserstein"
  clipping: str = "per_example"
  batch_size: int = 32
  switch: bool = True
  beda_alpha: float = 5.0
  error_scale: str = "direction"
  max_noise_ratio: float = 1e3
  label_statistics: str = "dp"
  num_classes: int = 10
  ground_cost: str = "index"

  def __post_init__(self):
    check_choice("aggregator", self.aggregator, AGGREGATORS)
    check_choice("label_statistics", self.label_statistics, LABEL_STATISTICS)
    check_int("num_classes", self.num_classes, minimum=1)
    check_choice("ground_cost", self.ground_cost, aggregation.GROUND_COSTS)
    check_choice("clipping", self.clipping, CLIPPINGS)
    check_int("batch_size", self.batch_size, minimum=1)
    check_choice("error_scale", self.error_scale, ERROR_SCALES)
    if not self.max_noise_ratio > 0:
      raise FedJaxDpError(f"max_noise_ratio must be > 0, got {self.max_noise_ratio}.",
                          option="max_noise_ratio")
    if not isinstance(self.switch, bool):
      raise FedJaxDpError(f"switch must be True or False, got {self.switch!r}.",
                          option="switch")


class LocalGradients(NamedTuple):
  """Lines 8-9's output, every device: ``grads`` float32 ``[N, d]`` (clipped, eq. 17),
  ``losses`` and ``clipped_frac`` ``[N]`` (minibatch mean loss, fraction clipped)."""
  grads: Any
  losses: Any
  clipped_frac: Any


class Uploads(NamedTuple):
  """Line 10 under the privacy filter, every device ``[N]``: ``sigma`` the artificial
  noise SD, ``active`` (bool) / ``actf`` (float) whether it uploads, ``capped`` whether
  the filter raised its noise, ``inc`` its upload's (sensitivity / sigma)^2, ``rho_spent``
  the filter's spend after it, ``eps_used`` the budget spent in the paper's terms."""
  sigma: Any
  active: Any
  actf: Any
  capped: Any
  inc: Any
  rho_spent: Any
  eps_used: Any


class RoundPrivacy(NamedTuple):
  """What the round's releases cost, every device ``[N]``: ``z`` the noise multiplier
  the ledger composes, ``z_channel`` / ``z_cond`` under the paper's assumptions, and
  ``violation`` the switched devices whose channel noise misses their budget."""
  z: Any
  z_channel: Any
  z_cond: Any
  violation: Any


def _minibatch(key, count, max_examples: int, batch: int):
  """B distinct indices of ``[0, count)`` (uniform without replacement) and their mask
  (False past ``count`` when count < B)."""
  u = jax.random.uniform(key, (max_examples,))
  u = jnp.where(jnp.arange(max_examples) < count, u, -1.0)
  vals, idx = jax.lax.top_k(u, min(batch, max_examples))
  return idx, vals >= 0.0


def _z_of_rho(rho):
  """The noise multiplier of a Gaussian composition with sum of z^-2 ``rho``: +inf for
  rho = 0 (no release), 0 for rho = inf (a release without noise)."""
  rho = jnp.asarray(rho, jnp.float32)
  safe = jnp.where((rho > 0) & jnp.isfinite(rho), rho, 1.0)
  return jnp.where(rho > 0, jnp.where(jnp.isfinite(rho), safe ** -0.5, 0.0), jnp.inf)


def device_gradient(config: LapaConfig, model, params, x, y, count, key, clip):
  """Lines 8-9 for one device: its clipped minibatch gradient (flat ``[d]``; eq. 17
  per example then the mean over B, or on the minibatch mean), mean loss and clip
  fraction."""
  bsz = int(config.batch_size)
  idx, mask = _minibatch(key, count, x.shape[0], bsz)
  xb, yb, w = x[idx], y[idx], mask.astype(jnp.float32)
  n_real = jnp.maximum(jnp.sum(w), 1.0)
  if config.clipping == "per_example":
    out = per_example.clipped_grad_sum(model, params, xb, yb, w, clip, method="auto")
    frac = jnp.sum((out.norms > clip) * w) / n_real
    return ravel_pytree(out.total)[0] / bsz, jnp.sum(out.loss * w) / n_real, frac

  def mean_loss(p):
    loss = model.per_example_loss(model.apply(p, xb), yb)
    return jnp.sum(loss * w) / bsz, loss

  (_, loss), g = jax.value_and_grad(mean_loss, has_aux=True)(params)
  flat = ravel_pytree(g)[0]
  norm = jnp.linalg.norm(flat)
  flat = jnp.where(jnp.isfinite(norm), flat, 0.0)                     # eq. 17
  flat = flat * jnp.where(norm > clip, clip / jnp.maximum(norm, 1e-30), 1.0)
  return flat, jnp.sum(loss * w) / n_real, (norm > clip).astype(jnp.float32)


def release_labels(config: LapaConfig, hp: LapaHParams, data, key, selected, first,
                   aux: LapaState) -> Tuple[Any, Any, Any, Any]:
  """The label histograms (Wasserstein aggregator): released once, in round 1, before
  the aggregation; the BS keeps what it received (`algorithm`'s docstring).

  Returns:
    ``(label_hist, label_distances, label_weights, label_inc)``: the state's label
    fields after this round and the release's sum of z^-2 (inf: released without noise;
    0 in later rounds and without the Wasserstein aggregator).
  """
  label_hist, label_dist, label_w = aux.label_hist, aux.label_distances, aux.label_weights
  if config.aggregator != "wasserstein":
    return label_hist, label_dist, label_w, jnp.float32(0.0)
  hist = label_histograms(data.y, data.counts, config.num_classes)
  k_label = jax.random.fold_in(key, _LABEL_STREAM)
  noisy = hist + hp.label_noise_std * jax.random.normal(k_label, hist.shape)
  _, dist_new, w_new = label_statistics(noisy, hp.counts, selected, config.ground_cost)
  label_hist = jnp.where(first, noisy, label_hist)
  label_dist = jnp.where(first, dist_new, label_dist)
  label_w = jnp.where(first, w_new, label_w)
  # z_h = sigma_h / sqrt(2) (replace-one: two counts move by 1); 0: exact, no noise
  label_inc = jnp.where(hp.label_noise_std > 0,
                        2.0 / jnp.maximum(hp.label_noise_std, 1e-30) ** 2, jnp.inf)
  label_inc = jnp.where(first, label_inc, 0.0)
  return label_hist, label_dist, label_w, label_inc


def filter_uploads(config: LapaConfig, hp: LapaHParams, private: bool, dim: int, switched,
                   eps, selected, rho_spent, clip) -> Uploads:
  """Line 10's artificial noise SD (eqs. 18-19) under the privacy filter: an upload's
  (sensitivity / sigma)^2 may not exceed what is left of the device's budget; where the
  paper's sigma would, the noise is raised to spend exactly what is left (none left: no
  upload). After the paper's switch the uploads carry no artificial noise: nothing
  bounds them, the guarantee is inf. A device whose noise would swamp its upload
  (`LapaConfig.max_noise_ratio`) skips the round."""
  art_on = jnp.logical_and(jnp.asarray(private), jnp.logical_not(switched))
  sigma_paper = calibration.noise_std(hp.gaussian_constant, hp.paper_sensitivity, eps)
  left = jnp.maximum(hp.rho_budget * (1.0 - FILTER_MARGIN) - rho_spent, 0.0)
  sigma_floor = jnp.where(left > 0, hp.sensitivity / jnp.sqrt(jnp.where(
      left > 0, left, 1.0)), jnp.inf)
  capped = art_on & selected & (left > 0) & (sigma_floor > sigma_paper)
  sigma_art = jnp.where(art_on, jnp.maximum(sigma_paper, sigma_floor), 0.0)
  active = selected & (sigma_art * np.sqrt(dim) <= config.max_noise_ratio * clip)
  sigma_art = jnp.where(active, sigma_art, 0.0)
  actf = active.astype(jnp.float32)
  inc = jnp.where(sigma_art > 0, (hp.sensitivity / jnp.where(sigma_art > 0, sigma_art,
                                                              1.0)) ** 2, jnp.inf)
  # a capped device has spent its budget (its last upload): nothing is left for later
  # rounds, so float32 crumbs never turn into pure-noise uploads
  rho_spent = jnp.where(capped, hp.rho_budget * (1.0 - FILTER_MARGIN),
                        rho_spent + jnp.where(active, inc, 0.0))
  # the budget the upload actually spent, in the paper's terms (c Delta_s / sigma)
  eps_used = jnp.where(active & art_on, hp.gaussian_constant * hp.paper_sensitivity /
                       jnp.where(sigma_art > 0, sigma_art, 1.0), 0.0)
  return Uploads(sigma_art, active, actf, capped, inc, rho_spent, eps_used)


def transmit(hp: LapaHParams, k_dp, k_ch, dev, dim: int, grads, up: Uploads):
  """Line 10: artificial noise (eq. 19); line 12: channel noise (eqs. 4, 6). Returns
  the received gradients ``[N, d]`` (zero for a device that does not upload)."""
  dp_keys = jax.vmap(lambda i: jax.random.fold_in(k_dp, i))(dev)
  noise = jax.vmap(lambda k: jax.random.normal(k, (dim,)))(dp_keys)
  sent = grads + up.sigma[:, None] * noise
  received = channel.add_channel_noise(k_ch, sent, hp.channel_std)
  return received * up.actf[:, None]


def aggregate(config: LapaConfig, hp: LapaHParams, t, received, up: Uploads, beda_theta,
              label_w):
  """Line 13's aggregation weights rho (eqs. 2, 20-22; BEDA/FedAdp's angle weights) and
  the global gradient.

  Returns:
    ``(rho, global_grad, beda_theta)``: float32 ``[N]``, ``[d]`` and BEDA's smoothed
    angles after this round (unchanged for the other aggregators).
  """
  if config.aggregator == "beda":
    pre_w = hp.counts * up.actf / jnp.maximum(jnp.sum(hp.counts * up.actf), 1e-30)
    pre = jnp.sum(pre_w[:, None] * received, axis=0)
    theta = aggregation.deviation_angles(received, pre)
    beda_theta = jnp.where(up.active,
                           aggregation.smoothed_angles(beda_theta, theta, t), beda_theta)
    rho = aggregation.fedadp_angle_weights(beda_theta, hp.counts, up.active,
                                           config.beda_alpha)
  else:
    static = label_w if config.aggregator == "wasserstein" else hp.static_weights
    w = static * up.actf
    rho = w / jnp.maximum(jnp.sum(w), 1e-30)
  rho = rho.astype(jnp.float32)
  global_grad = jnp.sum(rho[:, None] * received, axis=0)
  return rho, global_grad, beda_theta


def next_budgets(config: LapaConfig, alloc, t, z_err, global_grad, received, selected,
                 k_alloc):
  """Lines 14-19: the allocator's budgets of round t + 1 from this round's global and
  received gradients, scaled as `LapaConfig.error_scale` says.

  Returns:
    ``(allocator_state, error_norm)``.
  """
  acfg = config.allocator
  g_norm = jnp.linalg.norm(global_grad)
  z_err = jnp.where(t == 1, g_norm, z_err)
  if acfg.kind != "lapa" or config.error_scale == "clip":
    inv = jnp.float32(1.0)                       # ARB compares raw norms
  elif config.error_scale == "first":            # units of ||g~[1]||
    inv = 1.0 / jnp.where(z_err > 0, z_err, 1.0)
  else:                                          # "direction": unit global gradients
    inv = 1.0 / jnp.where(g_norm > 0, g_norm, 1.0)
  new_alloc = allocators.step(acfg, alloc, t, global_grad * inv, received * inv,
                              selected, k_alloc)
  return new_alloc, z_err


def switch_off(config: LapaConfig, hp: LapaHParams, private: bool, switched, t_switch, t,
               new_alloc, selected):
  """Line 20, the switch (eq. 23): once every scheduled device's next artificial SD is
  at most its channel SD, artificial noise stops for good (T_th = t + 1).

  Returns:
    ``(switched, switch_round)`` after this round.
  """
  sigma_next = calibration.noise_std(hp.gaussian_constant, hp.paper_sensitivity,
                                     new_alloc.epsilon_devices)
  ready = calibration.switch_ready(sigma_next, hp.channel_std, selected)
  flip = (jnp.asarray(config.switch and private) & jnp.logical_not(switched) & ready)
  new_switched = jnp.logical_or(switched, flip)
  new_t_switch = jnp.where(flip, t + 1, t_switch).astype(jnp.int32)
  return new_switched, new_t_switch


def round_privacy(hp: LapaHParams, up: Uploads, label_inc, switched, eps) -> RoundPrivacy:
  """The privacy of this round's releases (`algorithm`'s docstring): the artificial
  noise alone, composed in round 1 with the label release (rho = sum of z^-2; inf: no
  noise); beside it the paper's channel assumption and its conditional sensitivity,
  and the switched devices that miss the paper's claim."""
  up_inc = jnp.where(up.active, up.inc, 0.0)
  z = _z_of_rho(up_inc + label_inc)
  total_sd = jnp.sqrt(up.sigma ** 2 + hp.channel_std ** 2)
  ch_inc = jnp.where(up.active, (hp.sensitivity / jnp.maximum(total_sd, 1e-30)) ** 2, 0.0)
  z_channel = _z_of_rho(ch_inc + label_inc)        # the paper's channel assumption
  z_cond = jnp.where(up.active, total_sd / hp.paper_sensitivity, jnp.inf)
  # the paper's claim after the switch: c Delta_s / sigma_c <= eps_i[t]
  eff = hp.gaussian_constant * hp.paper_sensitivity / jnp.maximum(hp.channel_std, 1e-30)
  violation = switched & up.active & (eff > eps * (1.0 + 1e-6))
  return RoundPrivacy(z, z_channel, z_cond, violation)


def round_metrics(config: LapaConfig, hp: LapaHParams, r, aux: LapaState, eps,
                  local: LocalGradients, up: Uploads, priv: RoundPrivacy, rho, label_inc,
                  label_dist, global_grad) -> RoundMetrics:
  """The round's `RoundMetrics`: its own fields in ``extras`` (e[t], eps[t], the
  per-device budgets, SDs, weights, uploads, switch, filter and noise multipliers; the
  switch fields are the state's before this round) and the engine's defaults for what
  it does not do."""
  n_active = jnp.sum(up.active).astype(jnp.int32)
  f32 = lambda v: jnp.asarray(v, jnp.float32)
  norms = jnp.linalg.norm(local.grads, axis=1)
  exact = config.label_statistics == "exact" and config.aggregator == "wasserstein"
  tag = "_exact" if exact else ""
  switched = aux.switched
  extras = {
      "pid_error": f32(aux.allocator.error),
      "epsilon_round": f32(aux.allocator.epsilon_round),
      "epsilon_devices": f32(jnp.where(switched, jnp.where(up.active, eps, 0.0),
                                       up.eps_used)),
      "sigma_devices": f32(up.sigma), "sigma_channel": f32(hp.channel_std),
      "aggregation_weights" + tag: f32(rho),
      "device_uploaded": up.active.astype(jnp.int32),
      "switched": switched.astype(jnp.int32), "switch_round": aux.switch_round,
      "switch_violations": jnp.sum(priv.violation).astype(jnp.int32),
      "device_noise_multiplier": f32(priv.z),
      "device_noise_multiplier_conditional": f32(priv.z_cond),
      "device_noise_multiplier_channel_assumption": f32(priv.z_channel),
      "device_rho_budget": f32(hp.rho_budget),
      "filter_capped": up.capped.astype(jnp.int32),
      "label_noise_multiplier": f32(_z_of_rho(label_inc)),
  }
  if config.aggregator == "wasserstein":
    extras["label_distances" + tag] = f32(label_dist)
  # Its own round (every device every round, per-device budgets and channel noise);
  # the engine's metric defaults for what it does not do.
  actf = up.actf
  return default_metrics(
      r, train_loss=f32(jnp.sum(local.losses * actf) / jnp.maximum(n_active, 1)),
      num_clients=n_active, num_sampled=n_active,
      clip_fraction=f32(jnp.sum(local.clipped_frac * actf) / jnp.maximum(n_active, 1)),
      mean_update_norm=f32(jnp.sum(norms * actf) / jnp.maximum(n_active, 1)),
      max_update_norm=f32(jnp.max(norms * actf)),
      noise_multiplier=f32(jnp.min(priv.z)),
      noise_stddev=f32(jnp.max(up.sigma)),
      sampling_rate=f32(1.0), dp_steps=jnp.int32(1),
      aggregate_norm=f32(jnp.linalg.norm(global_grad)), sensitivity=f32(hp.sensitivity),
      client_noise_multipliers=priv.z, extras=extras)


def make_round(config: LapaConfig, model, num_devices: int, dim: int
               ) -> Callable[..., Tuple[ServerState, RoundMetrics]]:
  """The compiled-round function of Algorithm 1 (`algorithm`'s docstring).

  Args:
    config: a `LapaConfig`.
    model: a `fedjax_dp.models.Model`.
    num_devices: N.
    dim: d, the number of model parameters.

  Returns:
    ``round_fn(state, data, hp, root_key) -> (state, RoundMetrics)``; ``data`` is a
    `fedjax_dp.federated.PopulationData` (``x [N, n_max, ...]``, ``y``, ``counts``),
    ``hp`` a `LapaHParams`. Pure and jittable. ``client_noise_multipliers`` are every
    device's artificial-noise SD over ``hp.sensitivity``, composed in round 1 with its
    label release (+inf: no release; 0: a release without noise); ``extras`` holds
    e[t], eps[t], the per-device eps_i[t] spent, sigma_i[t], channel SDs, weights, the
    scheduled/uploading devices, the switch state, the filter's budgets and caps, the
    label release's noise multiplier and distances, and the noise multipliers under the
    paper's assumptions (conditional, channel).
  """
  n = int(num_devices)
  private = config.allocator.kind != "none"

  def round_fn(state: ServerState, data, hp: LapaHParams, root_key):
    params, aux, r = state.params, state.opt_state, state.round
    t = r + 1
    _, unravel = ravel_pytree(params)
    key = jax.random.fold_in(root_key, r)
    k_batch, k_dp, k_ch, k_alloc = jax.random.split(key, 4)
    dev = jnp.arange(n)
    batch_keys = jax.vmap(lambda i: jax.random.fold_in(k_batch, i))(dev)
    clip = jnp.asarray(hp.clip_norm, jnp.float32)
    # lines 8-9: clipped local gradients (eq. 17)
    local = LocalGradients(*jax.vmap(
        lambda x, y, c, k: device_gradient(config, model, params, x, y, c, k, clip))(
            data.x, data.y, data.counts, batch_keys))
    eps = aux.allocator.epsilon_devices
    selected = hp.selected > 0
    label_hist, label_dist, label_w, label_inc = release_labels(
        config, hp, data, key, selected, r == 0, aux)
    up = filter_uploads(config, hp, private, dim, aux.switched, eps, selected,
                        aux.rho_spent, clip)
    received = transmit(hp, k_dp, k_ch, dev, dim, local.grads, up)
    # line 13: the weights and the global step w[t+1] = w[t] - eta g~[t] (eq. 3)
    rho, global_grad, beda_theta = aggregate(config, hp, t, received, up,
                                             aux.beda_angles, label_w)
    flat_params = ravel_pytree(params)[0]
    new_params = unravel(flat_params - hp.learning_rate * global_grad)
    new_alloc, z_err = next_budgets(config, aux.allocator, t, aux.error_norm, global_grad,
                                    received, selected, k_alloc)
    new_switched, new_t_switch = switch_off(config, hp, private, aux.switched,
                                            aux.switch_round, t, new_alloc, selected)
    priv = round_privacy(hp, up, label_inc, aux.switched, eps)
    new_state = ServerState(new_params, LapaState(new_alloc, new_switched, new_t_switch,
                                                  beda_theta, z_err, up.rho_spent,
                                                  label_hist, label_dist, label_w), r + 1)
    return new_state, round_metrics(config, hp, r, aux, eps, local, up, priv, rho,
                                    label_inc, label_dist, global_grad)

  return round_fn


def initial_state(model, key, allocator_config, num_devices: int, selected,
                  num_classes: int = 10) -> ServerState:
  """Round-1 state: the model's initial parameters, the allocator's round-1 budgets
  (`allocators.init_state`), no switch, nothing spent, no label release yet."""
  params = model.init(key)
  dim = int(ravel_pytree(params)[0].shape[0])
  alloc = allocators.init_state(allocator_config, num_devices, dim,
                                jnp.asarray(selected, bool))
  zeros = jnp.zeros((num_devices,), jnp.float32)
  aux = LapaState(alloc, jnp.asarray(False), jnp.zeros((), jnp.int32), zeros,
                  jnp.zeros((), jnp.float32), zeros,
                  jnp.zeros((num_devices, int(num_classes)), jnp.float32), zeros, zeros)
  return ServerState(params, aux, jnp.zeros((), jnp.int32))
