"""LAPA-DNC: wireless DP-FL with per-device adaptive budgets (paper 001, Algorithm 1 of
its implementation note, section 2.12; equation numbers are the paper's).

One round t (1-based; ``state.round`` is t - 1), every device vmapped:

  line 8-9   each scheduled device i takes a minibatch of B of its examples (without
             replacement) and computes its clipped gradient g~_i (eq. 17): per-example
             clipping to C then the mean over B (default), or the paper's eq. 17 on
             the minibatch mean;
  line 10    before the switch, artificial Gaussian noise of SD
             sigma_i[t] = c Delta_s / eps_i[t] (eqs. 18-19, the paper's classical
             calibration, `calibration.noise_std`); after it, none (line 11);
  line 12    the uplink adds the decoded channel noise sigma_c,i (eqs. 4, 6; zero on an
             ideal channel, `channel.add_channel_noise`);
  line 13    the BS aggregates the received gradients with weights rho (FedAvg eq. 2,
             Wasserstein softmax eqs. 20-22, or BEDA/FedAdp's angle weights) and steps
             w[t+1] = w[t] - eta g~[t] (eq. 3);
  line 14-19 the allocator (`allocators.step`: LAPA eqs. 10-16, uniform, ARB, none)
             turns the history of global gradients and the received gradients into the
             budgets eps_i[t+1];
  line 20    the switch (eq. 23): once every scheduled device's next artificial SD is
             at most its channel SD, artificial noise stops for good (T_th = t + 1).

Devices that are not scheduled (SER above the threshold, eq. 22) or whose budget is spent
(eps_i = 0 before the switch, or nothing left of their privacy filter's budget, below)
neither compute nor upload that round.

The Wasserstein aggregator's label statistics (eqs. 20-22) are computed from each
device's labels. By default (``label_statistics="dp"``) each device releases its label
histogram once, in round 1 before the aggregation, with Gaussian noise of SD sigma_h =
z_h sqrt(2) per count (replace-one of one record changes two counts by 1: L2
sensitivity sqrt(2)); the BS keeps the noisy histograms (``LapaState.label_hist``) and
post-processes them (`label_statistics`): projected onto the histograms with the
device's record count |D_i| (public under replace-one: a neighbouring data set has the
same counts) and normalised into each device's label PMF, the global PMF their mean
weighted by |D_i|, then the W1 distances and the softmax weights.
``label_statistics="exact"`` is the paper's (exact label PMFs): not covered by any
guarantee (every device's first release then has noise multiplier 0: epsilon inf).

Privacy (what each round reports, `fedjax_dp.privacy.device_ledger.DeviceLedger`):
record-level DP of each device's own data, replace-one, no amplification from the
minibatch draw; the BS observes each device's upload with its sender. A device's upload
in round t is a Gaussian mechanism whose noise is the *artificial* noise sigma_i[t]
alone; its noise multiplier is sigma_i[t] over the sensitivity the code enforces,
``hp.sensitivity``: 2C/B with per-example clipping (the minibatch mean with the fixed
denominator B; replacing one record changes one clipped term), 2C with eq. 17's
clipping of the minibatch mean. The decoded channel noise is not counted: the paper's
link is digital (BPSK/QPSK), so a demodulated coordinate arrives exactly or with bit
errors, not with Gaussian noise; it would act as DP noise only for analog (uncoded)
transmission with a receiver no better than assumed. After the switch (eq. 23) an upload
carries no artificial noise: its noise multiplier is 0 and the guarantee is inf. The
round-1 multiplier also composes the label-histogram release (z_h; 0 with exact label
statistics). The paper calibrates with Delta_s = 2C/|D_i| (eq. 18 as its note
reconstructs it, NbAFL's form), which neither clipping enforces for a minibatch
gradient; the accountant with that sensitivity (and the channel noise) is reported as
conditional (``device_noise_multiplier_conditional``), the enforced sensitivity with the
channel noise as the paper's channel assumption
(``device_noise_multiplier_channel_assumption``).

Budgets eps_i[t] are chosen adaptively from earlier noisy releases, so the realised
composition is not a guarantee. The round enforces a privacy filter: each device's sum
of (Delta / sigma_i[t])^2 over its uploads never exceeds a budget ``hp.rho_budget``
fixed from the configuration before training (`upload_budgets`): where the paper's
sigma_i[t] would exceed what is left, the round raises the noise to spend exactly what
is left (``filter_capped``: the device's last upload; nothing left: no upload). With
the histogram's 1 / z_h^2 added, fully adaptive composition of Gaussian mechanisms
(Smith and Thakurta 2022) makes each device mu-GDP with mu^2 = rho_budget + 1 / z_h^2:
the ledger's bound (`DeviceLedger` with ``budgets``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from fedjax_dp.algorithms.lapa import aggregation, allocators, calibration, channel
# The privacy pieces (label statistics, the filter's budgets, the enforced sensitivity)
# are in `privacy`; re-exported here for existing callers.
from fedjax_dp.algorithms.lapa.privacy import (  # noqa: F401
    CLIPPINGS, DEFAULT_LABEL_NOISE_MULTIPLIER, FILTER_BUDGETS, LABEL_STATISTICS,
    UNIFORM_BUDGET_SLACK, label_histograms, label_statistics, project_histograms,
    provable_sensitivity, upload_budgets)
from fedjax_dp.federated.engine import default_metrics
from fedjax_dp.federated.server import ServerState
from fedjax_dp.privacy import per_example
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

AGGREGATORS = ("fedavg", "beda", "wasserstein")
ERROR_SCALES = ("direction", "first", "clip")
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
      (sensitivity / sigma_i[t])^2 over its uploads (`upload_budgets`).
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
    error_scale: how eq. 10's vector difference becomes the scalar E (note B2 [D]):
      ``"direction"`` (default): E = ||g~[i_s]/||g~[i_s]|| - g~[i_s-1]/||g~[i_s-1]||||,
      the change of the global gradient's direction, in [0, 2]; ``"first"``:
      E = ||g~[i_s] - g~[i_s-1]|| / ||g~[1]||; ``"clip"``: ... / C (the note's first
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
  """
  allocator: Any
  aggregator: str = "wasserstein"
  clipping: str = "per_example"
  batch_size: int = 32
  switch: bool = True
  beda_alpha: float = 5.0
  error_scale: str = "direction"
  max_noise_ratio: float = 1e3
  label_statistics: str = "dp"
  num_classes: int = 10

  def __post_init__(self):
    check_choice("aggregator", self.aggregator, AGGREGATORS)
    check_choice("label_statistics", self.label_statistics, LABEL_STATISTICS)
    check_int("num_classes", self.num_classes, minimum=1)
    check_choice("clipping", self.clipping, CLIPPINGS)
    check_int("batch_size", self.batch_size, minimum=1)
    check_choice("error_scale", self.error_scale, ERROR_SCALES)
    if not self.max_noise_ratio > 0:
      raise FedJaxDpError(f"max_noise_ratio must be > 0, got {self.max_noise_ratio}.",
                          option="max_noise_ratio")
    if not isinstance(self.switch, bool):
      raise FedJaxDpError(f"switch must be True or False, got {self.switch!r}.",
                          option="switch")


def _minibatch(key, count, max_examples: int, batch: int):
  """B distinct indices of ``[0, count)`` (uniform without replacement) and their mask
  (False past ``count`` when count < B)."""
  u = jax.random.uniform(key, (max_examples,))
  u = jnp.where(jnp.arange(max_examples) < count, u, -1.0)
  vals, idx = jax.lax.top_k(u, min(batch, max_examples))
  return idx, vals >= 0.0


def make_round(config: LapaConfig, model, num_devices: int, dim: int):
  """The compiled-round function of the note's Algorithm 1 (module docstring).

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
  acfg = config.allocator
  n = int(num_devices)
  bsz = int(config.batch_size)
  private = acfg.kind != "none"

  def device_grad(params, x, y, count, key, clip):
    """One device's clipped minibatch gradient (flat [d]), mean loss, clip fraction."""
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

  def round_fn(state: ServerState, data, hp: LapaHParams, root_key):
    params, aux, r = state.params, state.opt_state, state.round
    alloc, switched, t_switch, beda_theta, z_err = aux[:5]
    rho_spent, label_hist, label_dist, label_w = aux[5:]
    t = r + 1
    _, unravel = ravel_pytree(params)
    key = jax.random.fold_in(root_key, r)
    k_batch, k_dp, k_ch, k_alloc = jax.random.split(key, 4)
    dev = jnp.arange(n)
    batch_keys = jax.vmap(lambda i: jax.random.fold_in(k_batch, i))(dev)
    clip = jnp.asarray(hp.clip_norm, jnp.float32)

    # lines 8-9: clipped local gradients (eq. 17)
    grads, losses, clipped_frac = jax.vmap(
        lambda x, y, c, k: device_grad(params, x, y, c, k, clip))(
            data.x, data.y, data.counts, batch_keys)

    eps = alloc.epsilon_devices
    selected = hp.selected > 0
    first = r == 0

    # the label histograms (Wasserstein aggregator): released once, in round 1, before
    # the aggregation; the BS keeps what it received (module docstring)
    if config.aggregator == "wasserstein":
      hist = label_histograms(data.y, data.counts, config.num_classes)
      k_label = jax.random.fold_in(key, _LABEL_STREAM)
      noisy = hist + hp.label_noise_std * jax.random.normal(k_label, hist.shape)
      _, dist_new, w_new = label_statistics(noisy, hp.counts, selected)
      label_hist = jnp.where(first, noisy, label_hist)
      label_dist = jnp.where(first, dist_new, label_dist)
      label_w = jnp.where(first, w_new, label_w)
      # z_h = sigma_h / sqrt(2) (replace-one: two counts move by 1); 0: exact, no noise
      label_inc = jnp.where(hp.label_noise_std > 0,
                            2.0 / jnp.maximum(hp.label_noise_std, 1e-30) ** 2, jnp.inf)
      label_inc = jnp.where(first, label_inc, 0.0)
    else:
      label_inc = jnp.float32(0.0)

    art_on = jnp.logical_and(jnp.asarray(private), jnp.logical_not(switched))
    sigma_paper = calibration.noise_std(hp.gaussian_constant, hp.paper_sensitivity, eps)
    # the privacy filter: an upload's (sensitivity / sigma)^2 may not exceed what is left
    # of the device's budget; where the paper's sigma would, the noise is raised to
    # spend exactly what is left (none left: no upload). After the paper's switch the
    # uploads carry no artificial noise: nothing bounds them, the guarantee is inf.
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

    # line 10: artificial noise (eq. 19); line 12: channel noise (eqs. 4, 6)
    dp_keys = jax.vmap(lambda i: jax.random.fold_in(k_dp, i))(dev)
    noise = jax.vmap(lambda k: jax.random.normal(k, (dim,)))(dp_keys)
    sent = grads + sigma_art[:, None] * noise
    received = channel.add_channel_noise(k_ch, sent, hp.channel_std)
    received = received * actf[:, None]

    # line 13: aggregation weights and the global step (eqs. 2, 3, 20-22)
    if config.aggregator == "beda":
      pre_w = hp.counts * actf / jnp.maximum(jnp.sum(hp.counts * actf), 1e-30)
      pre = jnp.sum(pre_w[:, None] * received, axis=0)
      theta = aggregation.deviation_angles(received, pre)
      beda_theta = jnp.where(active, aggregation.smoothed_angles(beda_theta, theta, t),
                             beda_theta)
      rho = aggregation.fedadp_angle_weights(beda_theta, hp.counts, active,
                                             config.beda_alpha)
    else:
      static = label_w if config.aggregator == "wasserstein" else hp.static_weights
      w = static * actf
      rho = w / jnp.maximum(jnp.sum(w), 1e-30)
    rho = rho.astype(jnp.float32)
    global_grad = jnp.sum(rho[:, None] * received, axis=0)
    flat_params = ravel_pytree(params)[0]
    new_params = unravel(flat_params - hp.learning_rate * global_grad)

    # lines 14-19: next round's budgets
    eps_round = alloc.epsilon_round
    error = alloc.error
    g_norm = jnp.linalg.norm(global_grad)
    z_err = jnp.where(t == 1, g_norm, z_err)
    if acfg.kind != "lapa" or config.error_scale == "clip":
      inv = jnp.float32(1.0)                       # ARB compares raw norms
    elif config.error_scale == "first":            # units of ||g~[1]|| (note B2)
      inv = 1.0 / jnp.where(z_err > 0, z_err, 1.0)
    else:                                          # "direction": unit global gradients
      inv = 1.0 / jnp.where(g_norm > 0, g_norm, 1.0)
    new_alloc = allocators.step(acfg, alloc, t, global_grad * inv, received * inv,
                                selected, k_alloc)

    # line 20: the switch (eq. 23)
    sigma_next = calibration.noise_std(hp.gaussian_constant, hp.paper_sensitivity,
                                       new_alloc.epsilon_devices)
    ready = calibration.switch_ready(sigma_next, hp.channel_std, selected)
    flip = (jnp.asarray(config.switch and private) & jnp.logical_not(switched) & ready)
    new_switched = jnp.logical_or(switched, flip)
    new_t_switch = jnp.where(flip, t + 1, t_switch).astype(jnp.int32)

    # privacy of this round's releases (module docstring): the artificial noise alone,
    # composed in round 1 with the label release (rho = sum of z^-2; inf: no noise)
    up_inc = jnp.where(active, inc, 0.0)
    z = _z_of_rho(up_inc + label_inc)
    total_sd = jnp.sqrt(sigma_art ** 2 + hp.channel_std ** 2)
    ch_inc = jnp.where(active, (hp.sensitivity / jnp.maximum(total_sd, 1e-30)) ** 2, 0.0)
    z_channel = _z_of_rho(ch_inc + label_inc)        # the paper's channel assumption
    z_cond = jnp.where(active, total_sd / hp.paper_sensitivity, jnp.inf)
    # the paper's claim after the switch: c Delta_s / sigma_c <= eps_i[t] (note 8.9)
    eff = hp.gaussian_constant * hp.paper_sensitivity / jnp.maximum(hp.channel_std, 1e-30)
    violation = switched & active & (eff > eps * (1.0 + 1e-6))

    new_state = ServerState(new_params, LapaState(new_alloc, new_switched, new_t_switch,
                                                  beda_theta, z_err, rho_spent,
                                                  label_hist, label_dist, label_w), r + 1)
    n_active = jnp.sum(active).astype(jnp.int32)
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    norms = jnp.linalg.norm(grads, axis=1)
    exact = config.label_statistics == "exact" and config.aggregator == "wasserstein"
    tag = "_exact" if exact else ""
    extras = {
        "pid_error": f32(error), "epsilon_round": f32(eps_round),
        "epsilon_devices": f32(jnp.where(switched, jnp.where(active, eps, 0.0),
                                         eps_used)),
        "sigma_devices": f32(sigma_art), "sigma_channel": f32(hp.channel_std),
        "aggregation_weights" + tag: f32(rho),
        "device_uploaded": active.astype(jnp.int32),
        "switched": switched.astype(jnp.int32), "switch_round": t_switch,
        "switch_violations": jnp.sum(violation).astype(jnp.int32),
        "device_noise_multiplier": f32(z),
        "device_noise_multiplier_conditional": f32(z_cond),
        "device_noise_multiplier_channel_assumption": f32(z_channel),
        "device_rho_budget": f32(hp.rho_budget),
        "filter_capped": capped.astype(jnp.int32),
        "label_noise_multiplier": f32(_z_of_rho(label_inc)),
    }
    if config.aggregator == "wasserstein":
      extras["label_distances" + tag] = f32(label_dist)
    # Its own round (every device every round, per-device budgets and channel noise);
    # the engine's metric defaults for what it does not do.
    metrics = default_metrics(
        r, train_loss=f32(jnp.sum(losses * actf) / jnp.maximum(n_active, 1)),
        num_clients=n_active, num_sampled=n_active,
        clip_fraction=f32(jnp.sum(clipped_frac * actf) / jnp.maximum(n_active, 1)),
        mean_update_norm=f32(jnp.sum(norms * actf) / jnp.maximum(n_active, 1)),
        max_update_norm=f32(jnp.max(norms * actf)),
        noise_multiplier=f32(jnp.min(z)),
        noise_stddev=f32(jnp.max(sigma_art)),
        sampling_rate=f32(1.0), dp_steps=jnp.int32(1),
        aggregate_norm=f32(jnp.linalg.norm(global_grad)), sensitivity=f32(hp.sensitivity),
        client_noise_multipliers=z, extras=extras)
    return new_state, metrics

  return round_fn


def _z_of_rho(rho):
  """The noise multiplier of a Gaussian composition with sum of z^-2 ``rho``: +inf for
  rho = 0 (no release), 0 for rho = inf (a release without noise)."""
  rho = jnp.asarray(rho, jnp.float32)
  safe = jnp.where((rho > 0) & jnp.isfinite(rho), rho, 1.0)
  return jnp.where(rho > 0, jnp.where(jnp.isfinite(rho), safe ** -0.5, 0.0), jnp.inf)


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


def static_weights(aggregator: str, counts, label_distances, selected) -> np.ndarray:
  """rho ``[N]`` of the aggregators whose weights do not change during the run (host
  side): FedAvg's data sizes (eq. 2, Benchmark 1) or the Wasserstein softmax of the
  distances ``label_distances`` (eqs. 21-22, Configurations 1-2; the round computes its
  own from the label release of round 1); BEDA's are computed every round (uniform here,
  unused)."""
  sel = np.asarray(selected, bool)
  if aggregator == "fedavg":
    return np.asarray(aggregation.fedavg_weights(np.asarray(counts, np.float64), sel))
  if aggregator == "wasserstein":
    return np.asarray(aggregation.wasserstein_weights(np.asarray(label_distances), sel))
  return sel / max(sel.sum(), 1)




def lapa(model, data, *, allocator, aggregator: str = "wasserstein",
         clipping: str = "per_example", batch_size: int = 32, learning_rate: float = 0.03,
         clip_norm: float = 1.0, delta: float = 1e-5, channel_std=None, selected=None,
         calibration_sensitivity: str = "paper", switch: bool = True,
         beda_alpha: float = 5.0, error_scale: str = "direction",
         label_statistics: str = "dp",
         label_noise_multiplier: float = DEFAULT_LABEL_NOISE_MULTIPLIER,
         filter_budget="uniform"):
  """LAPA-DNC (the note's Algorithm 1) as an `fedjax_dp.algorithms.base.Algorithm`.

  Args:
    model: a `fedjax_dp.models.Model` (the paper's: ``cnn_fc50``).
    data: a `fedjax_dp.data.FederatedData` (one client per device, N = num_clients).
    allocator: an `allocators.AllocatorConfig` (kind, eps_T, T, ...).
    aggregator: ``"wasserstein"`` (eqs. 20-22), ``"fedavg"`` (eq. 2) or ``"beda"``.
    clipping: ``"per_example"`` or ``"aggregate"`` (eq. 17 on the minibatch mean).
    batch_size: B, each device's minibatch per round.
    learning_rate: eta (eq. 3), > 0.
    clip_norm: C (eq. 17), > 0.
    delta: delta of the classical calibration c = sqrt(2 ln(1.25/delta)) (per round, the
      paper's) and of the ledger's epsilons, in (0, 1).
    channel_std: float ``[N]`` sigma_c,i in gradient units (`channel.decoded_noise_std`),
      or None for the ideal channel (no channel noise). Simulated, never counted as DP
      noise (module docstring).
    selected: bool ``[N]`` scheduled devices (eq. 22), or None for all.
    calibration_sensitivity: ``"paper"`` (Delta_s = 2C/|D_i|, eq. 18 as reconstructed)
      or ``"provable"`` (the sensitivity the code enforces, `provable_sensitivity`).
    switch: the dynamic noise control (eq. 23, the paper's): after it no artificial
      noise, so no guarantee.
    beda_alpha: FedAdp's alpha (BEDA only).
    error_scale: eq. 10's scalarisation (`LapaConfig`): ``"direction"``, ``"first"``
      or ``"clip"``.
    label_statistics: the Wasserstein aggregator's label statistics: ``"dp"`` (each
      device's label histogram released once with Gaussian noise, z_h =
      ``label_noise_multiplier``) or ``"exact"`` (the paper's; not covered by the
      guarantee: the run's epsilon is inf).
    label_noise_multiplier: z_h > 0: the histogram's noise SD is z_h sqrt(2) per count.
    filter_budget: the privacy filter's budget (`upload_budgets`): ``"uniform"``,
      ``"cap"`` or an epsilon.

  Returns:
    An `Algorithm` with ``hparams`` a `LapaHParams`; ``privacy`` is per device
    (`fedjax_dp.privacy.device_ledger.DeviceLedger` with the filter's budgets),
    record-level, replace-one, or None when no artificial noise is ever added (allocator
    ``none``: the channel noise is not DP noise).

  Raises:
    FedJaxDpError: invalid arguments, named, before anything is compiled.
  """
  from fedjax_dp.algorithms.base import Algorithm, PerClientPrivacySpec
  from fedjax_dp.privacy.device_ledger import DeviceLedger
  from fedjax_dp.validation import check_delta, check_positive
  n_classes = int(data.num_classes)
  config = LapaConfig(allocator, aggregator, clipping, int(batch_size), bool(switch),
                      float(beda_alpha), error_scale, label_statistics=label_statistics,
                      num_classes=n_classes)
  check_choice("calibration_sensitivity", calibration_sensitivity, ("paper", "provable"))
  eta = check_positive("learning_rate", learning_rate)
  c_norm = check_positive("clip_norm", clip_norm)
  z_h = check_positive("label_noise_multiplier", label_noise_multiplier)
  delta = check_delta(delta)
  n = int(data.num_clients)
  counts = np.asarray(data.counts, np.float64)
  sel = np.ones(n, bool) if selected is None else np.asarray(selected, bool)
  if sel.shape != (n,):
    raise FedJaxDpError(f"selected must have shape ({n},), got {sel.shape}.",
                        option="selected")
  if not sel.any():
    raise FedJaxDpError("selected must schedule at least one device (every device's SER "
                        "is above the threshold: raise ser_threshold).", option="selected")
  ch = np.zeros(n) if channel_std is None else np.asarray(channel_std, np.float64)
  if ch.shape != (n,) or np.any(~np.isfinite(ch)) or np.any(ch < 0):
    raise FedJaxDpError(f"channel_std must be {n} finite values >= 0.",
                        option="channel_std")
  c_const = calibration.gaussian_constant(delta)
  prov = provable_sensitivity(c_norm, config.batch_size, clipping)
  paper_sens = (2.0 * c_norm / counts if calibration_sensitivity == "paper"
                else np.full(n, prov))
  uses_labels = aggregator == "wasserstein"
  exact = uses_labels and label_statistics == "exact"
  sigma_h = 0.0 if exact else z_h * math.sqrt(2.0)
  # the label release's share of each device's budget (exact: none can be given; the
  # round reports a noise multiplier 0, so the ledger's epsilon is inf)
  label_rho = 1.0 / z_h ** 2 if uses_labels and not exact else 0.0
  budgets = upload_budgets(filter_budget, allocator, c_const, paper_sens, prov, sel,
                           label_rho, delta)
  budgets_total = budgets + label_rho
  rho = (static_weights(aggregator, counts, None, sel) if aggregator != "wasserstein"
         else np.zeros(n))
  dummy = model.init(jax.random.PRNGKey(0))
  dim = int(ravel_pytree(dummy)[0].shape[0])
  round_fn = make_round(config, model, n, dim)
  private = allocator.kind != "none"

  def init(key):
    return initial_state(model, key, allocator, n, sel, n_classes)

  spec = None
  if private:
    if not uses_labels:
      labels_txt = ""
    elif exact:
      labels_txt = ("; the Wasserstein weights use each device's EXACT label histogram "
                    "(the paper's): not covered, so no guarantee (epsilon inf)")
    else:
      labels_txt = (f"; the Wasserstein weights use each device's label histogram, "
                    f"released once with Gaussian noise (z_h = {z_h:g}, L2 sensitivity "
                    "sqrt(2)) and composed into its ledger; the record counts |D_i| are "
                    "public under replace-one")
    spec = PerClientPrivacySpec(
        unit="record-level", relation="replace_one", sampler="fixed_size",
        population_size=config.batch_size, cohort_size=config.batch_size,
        num_clients=n,
        ledger_factory=lambda d: DeviceLedger(n, d, config.batch_size,
                                              budgets=budgets_total),
        observation="attributable",  # each device's upload with its sender
        clip_norm=c_norm, clipped=("each example's gradient" if clipping == "per_example"
                                   else "each device's minibatch gradient (eq. 17)"),
        note=("record-level DP of each device's own data (replace one record), every "
              "device accounted separately, the worst device reported; observed by the "
              "server: each device's upload with its sender (no amplification from the "
              "minibatch draw or from scheduling); each upload is a Gaussian mechanism "
              "whose noise is the ARTIFICIAL noise alone, over the sensitivity the "
              f"clipping enforces ({prov:.4g}); the wireless channel's noise is not "
              "counted (a digitally modulated link delivers bits, not Gaussian noise); "
              "after the paper's switch-off (eq. 23) uploads carry no artificial noise and "
              "the guarantee is inf; budgets are chosen adaptively from earlier noisy "
              "releases, so the guarantee is a privacy filter's: each device's sum of "
              "z^-2 is capped before training (filter_budget "
              f"{filter_budget!r}), an upload that would exceed it getting more noise "
              "(exactly what is left; nothing left: no upload) "
              "(fully adaptive composition of Gaussian mechanisms, Smith and Thakurta "
              "2022)" + labels_txt))
  f32 = lambda v: np.asarray(v, np.float32)
  hp = LapaHParams(f32(eta), f32(c_norm), f32(c_const), f32(paper_sens), f32(prov),
                   f32(ch), f32(rho), f32(counts), f32(sel), f32(budgets), f32(sigma_h))
  return Algorithm(
      name="lapa", round_fn=round_fn, init=init, hparams=hp, privacy=spec, k_max=n,
      config={"allocator": allocator.kind, "epsilon_total": allocator.epsilon_total,
              "rounds": allocator.rounds, "aggregator": aggregator, "clipping": clipping,
              "batch_size": config.batch_size, "learning_rate": eta, "clip_norm": c_norm,
              "delta": delta, "gaussian_constant": c_const,
              "calibration_sensitivity": calibration_sensitivity,
              "paper_sensitivity": paper_sens.tolist(), "sensitivity": prov,
              "channel_std": ch.tolist(), "selected": sel.tolist(),
              "static_weights": (None if aggregator == "wasserstein"
                                 else np.asarray(rho).tolist()),
              "label_statistics": label_statistics if uses_labels else None,
              "label_noise_multiplier": (z_h if uses_labels and not exact else
                                         (0.0 if exact else None)),
              "label_noise_std": sigma_h if uses_labels else None,
              "label_rho": label_rho,
              "filter_budget": filter_budget, "rho_budget": budgets.tolist(),
              "rho_budget_total": budgets_total.tolist(),
              "switch": bool(switch),
              "split": allocator.split, "error_scale": error_scale, "num_params": dim,
              "private": private, "num_classes": n_classes},
      sampling_rate=1.0)
