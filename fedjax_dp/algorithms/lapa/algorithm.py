"""LAPA-DNC: wireless DP-FL with per-device adaptive budgets (LAPA, arXiv 2505.19823;
Algorithm 1, our numbered reconstruction of the paper's round, listed below; equation
numbers are the paper's).

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

import math
from typing import Any, Dict, NamedTuple, Optional, Union

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from fedjax_dp.algorithms.base import Algorithm, PerClientPrivacySpec
from fedjax_dp.algorithms.lapa import aggregation, calibration
# The privacy pieces (label statistics, the filter's budgets, the enforced sensitivity)
# are in `privacy`, the compiled round in `round`; re-exported here for existing callers.
from fedjax_dp.algorithms.lapa.privacy import (
    CLIPPINGS, DEFAULT_LABEL_NOISE_MULTIPLIER, FILTER_BUDGETS, LABEL_STATISTICS,
    UNIFORM_BUDGET_SLACK, label_histograms, label_statistics, project_histograms,
    provable_sensitivity, upload_budgets)
from fedjax_dp.algorithms.lapa.round import (AGGREGATORS, ERROR_SCALES, FILTER_MARGIN,
                                             LapaConfig, LapaHParams, LapaState,
                                             initial_state, make_round)
from fedjax_dp.privacy.device_ledger import DeviceLedger
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta,
                                  check_positive)

__all__ = ["lapa", "static_weights", "LapaConfig", "LapaHParams", "LapaState",
           "make_round", "initial_state", "AGGREGATORS", "ERROR_SCALES", "FILTER_MARGIN",
           "CLIPPINGS", "DEFAULT_LABEL_NOISE_MULTIPLIER", "FILTER_BUDGETS",
           "LABEL_STATISTICS", "UNIFORM_BUDGET_SLACK", "label_histograms",
           "label_statistics", "project_histograms", "provable_sensitivity",
           "upload_budgets"]


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
         filter_budget: Union[float, str] = "uniform",
         ground_cost: str = "index") -> Algorithm:
  """LAPA-DNC (Algorithm 1) as an `fedjax_dp.algorithms.base.Algorithm`.

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
    ground_cost: eq. 20's ground cost between labels (Wasserstein aggregator):
      ``"index"`` (|a - b| on the label numbers) or ``"discrete"`` (1{a != b}: the
      total variation, independent of the numbering).

  Returns:
    An `Algorithm` with ``hparams`` a `LapaHParams`; ``privacy`` is per device
    (`fedjax_dp.privacy.device_ledger.DeviceLedger` with the filter's budgets),
    record-level, replace-one, or None when no artificial noise is ever added (allocator
    ``none``: the channel noise is not DP noise).

  Raises:
    FedJaxDpError: invalid arguments, named, before anything is compiled.
  """
  n_classes = int(data.num_classes)
  config = LapaConfig(allocator, aggregator, clipping, int(batch_size), bool(switch),
                      float(beda_alpha), error_scale, label_statistics=label_statistics,
                      num_classes=n_classes, ground_cost=ground_cost)
  check_choice("calibration_sensitivity", calibration_sensitivity, ("paper", "provable"))
  eta = check_positive("learning_rate", learning_rate)
  c_norm = check_positive("clip_norm", clip_norm)
  z_h = check_positive("label_noise_multiplier", label_noise_multiplier)
  delta = check_delta(delta)
  n = int(data.num_clients)
  counts = np.asarray(data.counts, np.float64)
  sel, ch = _check_devices(n, selected, channel_std)
  cal = _calibrate(config, calibration_sensitivity, c_norm, counts, sel, delta, z_h,
                   filter_budget)
  rho = (static_weights(aggregator, counts, None, sel) if aggregator != "wasserstein"
         else np.zeros(n))
  dummy = model.init(jax.random.PRNGKey(0))
  dim = int(ravel_pytree(dummy)[0].shape[0])
  round_fn = make_round(config, model, n, dim)
  private = allocator.kind != "none"

  def init(key):
    return initial_state(model, key, allocator, n, sel, n_classes)

  spec = (_privacy_statement(config, n, c_norm, cal, filter_budget, z_h) if private
          else None)
  f32 = lambda v: np.asarray(v, np.float32)
  hp = LapaHParams(f32(eta), f32(c_norm), f32(cal.gaussian_constant),
                   f32(cal.paper_sensitivity), f32(cal.sensitivity), f32(ch), f32(rho),
                   f32(counts), f32(sel), f32(cal.budgets), f32(cal.label_noise_std))
  return Algorithm(
      name="lapa", round_fn=round_fn, init=init, hparams=hp, privacy=spec, k_max=n,
      config=_summary_config(
          config, cal, learning_rate=eta, clip_norm=c_norm, delta=delta,
          calibration_sensitivity=calibration_sensitivity, channel_std=ch, selected=sel,
          rho=rho, label_noise_multiplier=z_h, filter_budget=filter_budget, dim=dim,
          private=private),
      sampling_rate=1.0)


def _check_devices(n: int, selected, channel_std):
  """The scheduled devices (bool ``[N]``, default all) and the channel noise SDs
  (float64 ``[N]``, default 0: the ideal channel).

  Raises:
    FedJaxDpError: a wrong shape, no device scheduled, or an SD not finite and >= 0.
  """
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
  return sel, ch


class Calibration(NamedTuple):
  """The noise calibration and the privacy filter's budgets of a `lapa` run (host side).

  Attributes:
    gaussian_constant: c = sqrt(2 ln(1.25/delta)) of the classical calibration.
    sensitivity: the sensitivity the clipping enforces (`provable_sensitivity`).
    paper_sensitivity: float64 ``[N]``: Delta_s of the calibration per device (2C/|D_i|,
      or the provable one).
    label_noise_std: sigma_h = z_h sqrt(2) of the label release (0: exact statistics).
    label_rho: the label release's 1 / z_h^2 in each device's budget (0 without one or
      with exact statistics).
    budgets: float64 ``[N]``: the filter's budget on the uploads (`upload_budgets`).
    budgets_total: ``budgets + label_rho``: the ledger's per-device budget.
  """
  gaussian_constant: float
  sensitivity: float
  paper_sensitivity: np.ndarray
  label_noise_std: float
  label_rho: float
  budgets: np.ndarray
  budgets_total: np.ndarray


def _calibrate(config: LapaConfig, calibration_sensitivity: str, c_norm: float,
               counts: np.ndarray, sel: np.ndarray, delta: float, z_h: float,
               filter_budget) -> Calibration:
  """The run's `Calibration` from its checked arguments (`lapa`'s)."""
  c_const = calibration.gaussian_constant(delta)
  prov = provable_sensitivity(c_norm, config.batch_size, config.clipping)
  paper_sens = (2.0 * c_norm / counts if calibration_sensitivity == "paper"
                else np.full(len(counts), prov))
  uses_labels = config.aggregator == "wasserstein"
  exact = uses_labels and config.label_statistics == "exact"
  sigma_h = 0.0 if exact else z_h * math.sqrt(2.0)
  # the label release's share of each device's budget (exact: none can be given; the
  # round reports a noise multiplier 0, so the ledger's epsilon is inf)
  label_rho = 1.0 / z_h ** 2 if uses_labels and not exact else 0.0
  budgets = upload_budgets(filter_budget, config.allocator, c_const, paper_sens, prov,
                           sel, label_rho, delta)
  return Calibration(c_const, prov, paper_sens, sigma_h, label_rho, budgets,
                     budgets + label_rho)


def _privacy_statement(config: LapaConfig, n: int, c_norm: float, cal: Calibration,
                       filter_budget, z_h: float) -> PerClientPrivacySpec:
  """The statement of a private `lapa` run (module docstring): record level, per
  device, replace-one, each upload seen with its sender, the filter's budgets."""
  if config.aggregator != "wasserstein":
    labels_txt = ""
  elif config.label_statistics == "exact":
    labels_txt = ("; the Wasserstein weights use each device's EXACT label histogram "
                  "(the paper's): not covered, so no guarantee (epsilon inf)")
  else:
    labels_txt = (f"; the Wasserstein weights use each device's label histogram, "
                  f"released once with Gaussian noise (z_h = {z_h:g}, L2 sensitivity "
                  "sqrt(2)) and composed into its ledger; the record counts |D_i| are "
                  "public under replace-one")
  budgets_total = cal.budgets_total
  return PerClientPrivacySpec(
      unit="record-level", relation="replace_one", sampler="fixed_size",
      population_size=config.batch_size, cohort_size=config.batch_size,
      num_clients=n,
      ledger_factory=lambda d: DeviceLedger(n, d, config.batch_size,
                                            budgets=budgets_total),
      observation="attributable",  # each device's upload with its sender
      clip_norm=c_norm, clipped=("each example's gradient"
                                 if config.clipping == "per_example"
                                 else "each device's minibatch gradient (eq. 17)"),
      note=("record-level DP of each device's own data (replace one record), every "
            "device accounted separately, the worst device reported; observed by the "
            "server: each device's upload with its sender (no amplification from the "
            "minibatch draw or from scheduling); each upload is a Gaussian mechanism "
            "whose noise is the ARTIFICIAL noise alone, over the sensitivity the "
            f"clipping enforces ({cal.sensitivity:.4g}); the wireless channel's noise is "
            "not counted (a digitally modulated link delivers bits, not Gaussian noise); "
            "after the paper's switch-off (eq. 23) uploads carry no artificial noise and "
            "the guarantee is inf; budgets are chosen adaptively from earlier noisy "
            "releases, so the guarantee is a privacy filter's: each device's sum of "
            "z^-2 is capped before training (filter_budget "
            f"{filter_budget!r}), an upload that would exceed it getting more noise "
            "(exactly what is left; nothing left: no upload) "
            "(fully adaptive composition of Gaussian mechanisms, Smith and Thakurta "
            "2022)" + labels_txt))


def _summary_config(config: LapaConfig, cal: Calibration, *, learning_rate: float,
                    clip_norm: float, delta: float, calibration_sensitivity: str,
                    channel_std: np.ndarray, selected: np.ndarray, rho: np.ndarray,
                    label_noise_multiplier: float, filter_budget: Union[float, str],
                    dim: int, private: bool) -> Dict[str, Any]:
  """``Algorithm.config`` of a `lapa` run (summary.json's ``algorithm_config``)."""
  allocator, aggregator = config.allocator, config.aggregator
  uses_labels = aggregator == "wasserstein"
  exact = uses_labels and config.label_statistics == "exact"
  z_h: Optional[float] = (label_noise_multiplier if uses_labels and not exact else
                          (0.0 if exact else None))
  return {"allocator": allocator.kind, "epsilon_total": allocator.epsilon_total,
          "rounds": allocator.rounds, "aggregator": aggregator,
          "clipping": config.clipping, "batch_size": config.batch_size,
          "learning_rate": learning_rate, "clip_norm": clip_norm,
          "delta": delta, "gaussian_constant": cal.gaussian_constant,
          "calibration_sensitivity": calibration_sensitivity,
          "paper_sensitivity": cal.paper_sensitivity.tolist(),
          "sensitivity": cal.sensitivity,
          "channel_std": channel_std.tolist(), "selected": selected.tolist(),
          "static_weights": (None if aggregator == "wasserstein"
                             else np.asarray(rho).tolist()),
          "label_statistics": config.label_statistics if uses_labels else None,
          "label_noise_multiplier": z_h,
          "label_noise_std": cal.label_noise_std if uses_labels else None,
          "label_rho": cal.label_rho,
          "filter_budget": filter_budget, "rho_budget": cal.budgets.tolist(),
          "rho_budget_total": cal.budgets_total.tolist(),
          "switch": config.switch,
          "split": allocator.split, "error_scale": config.error_scale,
          "round_budget": allocator.budget, "ground_cost": config.ground_cost,
          "num_params": dim, "private": private, "num_classes": config.num_classes}
