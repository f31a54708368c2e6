"""LAPA's privacy pieces: the sensitivity the round's clipping
enforces (`provable_sensitivity`), the devices' noisy label histograms and the
Wasserstein statistics computed from them (`label_histograms`, `project_histograms`,
`label_statistics`: the aggregator's weights from a release the guarantee covers),
and the privacy filter's per-device budgets fixed before training (`upload_budgets`:
F4, fully adaptive composition of the adaptively chosen Gaussian uploads). The round
that uses them is `fedjax_dp.algorithms.lapa.algorithm`."""

from __future__ import annotations

from typing import Literal, Tuple, get_args

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.lapa import aggregation
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

__all__ = ["Clipping", "LabelStatistics", "FilterBudget", "CLIPPINGS",
           "LABEL_STATISTICS", "FILTER_BUDGETS", "DEFAULT_LABEL_NOISE_MULTIPLIER",
           "UNIFORM_BUDGET_SLACK", "provable_sensitivity", "label_histograms",
           "project_histograms", "label_statistics", "upload_budgets"]

#: The choices of the round's clipping, label statistics and filter budget (the
#: tuples: their values).
Clipping = Literal["per_example", "aggregate"]
LabelStatistics = Literal["dp", "exact"]
FilterBudget = Literal["uniform", "cap"]
CLIPPINGS: Tuple[str, ...] = get_args(Clipping)
LABEL_STATISTICS: Tuple[str, ...] = get_args(LabelStatistics)
FILTER_BUDGETS: Tuple[str, ...] = get_args(FilterBudget)
#: z_h of the label-histogram release: SD sqrt(2) z_h = 2.8 counts per class; its
#: mu = 1 / z_h = 0.5 adds rho = 0.25 to a device's budget (alone: epsilon 2.2 at delta
#: 1e-5, 1.5 at 1e-3, RDP), 5% of the uniform budget of eps_T = 60 over 50 rounds at
#: the provable calibration (rho 5.0 at delta 1e-3) and nothing visible beside the
#: paper's calibration (rho ~1e5). On the default Fashion-MNIST devices (300-4,942
#: records) the largest W1 error over the 15 devices is 0.08 label units on average
#: (W1 runs from 0.16 for IID to 1.5-4.1 for two-class devices) and the largest
#: relative weight error 8% (z_h = 5: 0.19 and 22%; z_h = 1: 0.04 and 4%; 200 draws);
#: the MNIST subset's devices (37-611 records) are too small for any cheap histogram
#: (0.62 label units at z_h = 2).
DEFAULT_LABEL_NOISE_MULTIPLIER = 2.0
#: The filter's "uniform" budget is the uniform schedule's spend times (1 + this), so
#: that a uniform allocation fits despite float32 rounding.
UNIFORM_BUDGET_SLACK = 1e-3


def provable_sensitivity(clip_norm: float, batch_size: int, clipping: str) -> float:
  """The L2 sensitivity of one device's clipped gradient that the round enforces, under
  replace-one of a record of that device: 2C/B with per-example clipping (a fixed
  denominator B; the record is drawn at most once), 2C with eq. 17's clipping of the
  minibatch mean (any change of the mean stays in the ball of radius C).

  Raises:
    FedJaxDpError: unknown clipping, C <= 0 or B < 1.
  """
  check_choice("clipping", clipping, CLIPPINGS)
  check_int("batch_size", batch_size, minimum=1)
  if not clip_norm > 0:
    raise FedJaxDpError(f"clip_norm must be > 0, got {clip_norm}.", option="clip_norm")
  return 2.0 * clip_norm / (batch_size if clipping == "per_example" else 1.0)


def label_histograms(labels, counts, num_classes: int):
  """Each device's label counts, float32 ``[N, K]`` (jnp): ``labels`` int ``[N, n_max]``
  padded past ``counts[i]`` (those rows are not counted)."""
  y = jnp.asarray(labels)
  mask = jnp.arange(y.shape[1])[None, :] < jnp.asarray(counts)[:, None]
  onehot = jax.nn.one_hot(y, int(num_classes), dtype=jnp.float32)
  return jnp.sum(onehot * mask[..., None].astype(jnp.float32), axis=1)


def project_histograms(histograms, counts):
  """Each row of ``histograms`` ``[N, K]`` projected (Euclidean) onto {h >= 0, sum h =
  counts[i]}: the least-squares histogram with the device's record count, which is
  public under replace-one; i.e. h - tau clipped at 0 with the shift tau that makes the
  row sum to the count (jnp; sort-based, exact)."""
  v = jnp.asarray(histograms, jnp.float32)
  n = jnp.asarray(counts, jnp.float32)[:, None]
  k = v.shape[1]
  u = -jnp.sort(-v, axis=1)                                   # descending
  css = jnp.cumsum(u, axis=1) - n
  idx = jnp.arange(1, k + 1, dtype=jnp.float32)[None, :]
  active = (u - css / idx) > 0                                # True, then False
  r = jnp.maximum(jnp.sum(active, axis=1, keepdims=True), 1)
  tau = jnp.take_along_axis(css, r - 1, axis=1) / r.astype(jnp.float32)
  return jnp.maximum(v - tau, 0.0)


def label_statistics(histograms, counts, selected, ground_cost: str = "index"):
  """The Wasserstein aggregator's statistics from (noisy) label histograms, pure
  post-processing (jnp): each row projected onto {h >= 0, sum h = |D_i|}
  (`project_histograms`; |D_i| is public under replace-one) and divided by |D_i| into a
  label PMF (uniform for an empty device), the global PMF the mean of the PMFs weighted
  by |D_i| (the global histogram over the total count), W1 of each PMF to it (eq. 20,
  `aggregation.wasserstein_1d`) and the softmax weights over the scheduled devices
  (eqs. 21-22). (Clipping at 0 alone biases the empty classes of a non-IID device
  upwards: with z_h = 5 on the default Fashion-MNIST devices it doubled the largest W1
  error, 0.38 against 0.19 label units.)

  Args:
    histograms: float ``[N, K]``.
    counts: ``[N]`` |D_i| (public under replace-one).
    selected: bool ``[N]``.
    ground_cost: eq. 20's ground cost between labels (`aggregation.label_distance`):
      ``"index"`` (|a - b|, default) or ``"discrete"`` (1{a != b}: W1 is the total
      variation, independent of the label numbering).

  Returns:
    ``(pmfs [N, K], distances [N], weights [N])``, float32 jax arrays.
  """
  n = jnp.asarray(counts, jnp.float32)
  h = project_histograms(histograms, n)
  k = h.shape[1]
  pmf = jnp.where(n[:, None] > 0, h / jnp.maximum(n, 1e-30)[:, None], 1.0 / k)
  glob = jnp.sum(n[:, None] * pmf, axis=0) / jnp.maximum(jnp.sum(n), 1e-30)
  dist = aggregation.label_distance(pmf, glob, ground_cost)
  w = aggregation.wasserstein_weights(dist, jnp.asarray(selected, bool))
  return pmf, dist.astype(jnp.float32), w.astype(jnp.float32)


def upload_budgets(filter_budget, allocator, gaussian_constant: float, paper_sens,
                   sensitivity: float, selected, label_rho: float,
                   delta: float) -> np.ndarray:
  """The privacy filter's budget B_i on each device's sum over its uploads of
  (sensitivity / sigma_i[t])^2, fixed from the configuration before training (float64
  ``[N]``, 0 for devices that are not scheduled).

  A budget eps_i[t] gives sigma = c Delta_s,i / eps (eqs. 18-19), i.e. a noise multiplier
  whose z^-2 is eps^2 r_i with r_i = (sensitivity / (c Delta_s,i))^2:

  * ``"uniform"``: the spend of the paper's uniform allocation, T (eps_T / T)^2 r_i, times
    (1 + `UNIFORM_BUDGET_SLACK`) (float32 rounding); an adaptive allocator that puts more
    than that on a device is cut off by the filter;
  * ``"cap"``: eps_T^2 r_i, the most any allocation that keeps the paper's basic-
    composition cap sum_t eps_i[t] <= eps_T can spend (sum eps^2 <= (sum eps)^2), times
    the same slack: the filter never binds, the bound is T times the uniform one in rho;
  * a number E: every device's guarantee is epsilon E at ``delta`` (RDP): B_i is the rho
    of the Gaussian mechanism with that epsilon (`device_ledger.rho_for_epsilon`) minus
    the label release's ``label_rho``.

  Raises:
    FedJaxDpError: an unknown budget, or a number E whose rho does not exceed
      ``label_rho``.
  """
  from fedjax_dp.privacy import device_ledger
  sel = np.asarray(selected, bool)
  ps = np.asarray(paper_sens, np.float64)
  if allocator.kind == "none":
    return np.zeros(sel.shape, np.float64)
  r = (float(sensitivity) / (float(gaussian_constant) * ps)) ** 2
  eps_t, t = float(allocator.epsilon_total), int(allocator.rounds)
  if isinstance(filter_budget, str):
    check_choice("filter_budget", filter_budget, FILTER_BUDGETS)
    spend = t * (eps_t / t) ** 2 if filter_budget == "uniform" else eps_t ** 2
    budget = spend * r * (1.0 + UNIFORM_BUDGET_SLACK)
  else:
    try:
      target = float(filter_budget)
    except (TypeError, ValueError):
      raise FedJaxDpError(f"filter_budget must be one of {FILTER_BUDGETS} or an epsilon "
                          f"> 0, got {filter_budget!r}.", option="filter_budget") from None
    if not (target > 0 and np.isfinite(target)):
      raise FedJaxDpError(f"filter_budget must be an epsilon > 0, got {filter_budget!r}.",
                          option="filter_budget")
    rho = device_ledger.rho_for_epsilon(target, delta)
    if not rho > label_rho * (1.0 + 1e-9):
      raise FedJaxDpError(
          f"filter_budget: epsilon {target:g} at delta {delta:g} is a Gaussian mechanism "
          f"with rho {rho:.4g}, no more than the label release's {label_rho:.4g}: raise "
          "it or the label noise multiplier.", option="filter_budget")
    budget = np.full(sel.shape, rho - label_rho)
  return np.where(sel, budget, 0.0)
