"""DP-FedAvg with distributed DP: noise added on the devices, a secure sum at the server.

``dp_fedavg(..., noise_placement="distributed", distributed=DistributedDp(...))``
(``fedjax-dp run --aggregation distributed_dgauss|distributed_skellam --bits B``): each
surviving client clips its update to C, encodes it to ``Z_{2^b}^d`` with its own integer
noise (distributed discrete Gaussian, Kairouz, Liu, Steinke, ICML 2021; distributed
Skellam, Agarwal, Kairouz, Liu, NeurIPS 2021) and the server sees only the modular sum
of the cohort and who took part (`fedjax_dp.federated.secure_aggregation`).

The plan (`plan_for`): the granularity gamma is the finest for which the secure sum stays
inside ``[-2^(b-1), 2^(b-1))`` with probability ``1 - overflow_probability`` per round
(`fedjax_dp.privacy.distributed_dp.plan`); each client's noise std is ``z C / (gamma
sqrt(n))`` with n the expected survivors ``E[cohort] (1 - dropout_rate)``, so that their
summed noise has std ``z C`` in model units, as central DP-FedAvg's with the same z.

Privacy (`fedjax_dp.algorithms.secure_sum_spec.SecureSumSpec`): zero-out (Poisson) or
replace-one (fixed size) of one user; visible participation (the secure-aggregation
server knows its participants: no amplification by sampling, unlike the papers'
experiments, which assume the cohort hidden); each round's zCDP from the noise actually
in the sum (its survivors), RDP accounting.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, Optional, Tuple

import jax
import numpy as np

from fedjax_dp.federated import secure_sum
from fedjax_dp.federated.secure_aggregation import MECHANISMS, SecureAggregation
from fedjax_dp.privacy import discrete_noise, disclosure, distributed_dp
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

__all__ = ["DistributedDp", "AGGREGATIONS", "DEFAULT_BETA", "upload_dim", "plan_for",
           "secure_aggregation", "check_distributed", "accounting_facts",
           "plan_secure_aggregation", "planned_count", "calibrate_with_plan",
           "equivalent_noise_multiplier", "config_fields", "mechanism_text",
           "METRIC_LABELS", "SUMMARY_LABELS", "OPTIONS", "check_options", "options_to_spec",
           "summary_fields", "describe"]

#: ``--aggregation`` values and the mechanism each selects (``central``: no secure sum).
AGGREGATIONS = {"central": None, "distributed_dgauss": "ddgauss",
                "distributed_skellam": "skellam"}

#: Conditional rounding's default beta (Kairouz et al. 2021 use exp(-0.5)).
DEFAULT_BETA = distributed_dp.DEFAULT_BETA


@dataclasses.dataclass(frozen=True)
class DistributedDp:
  """The options of a distributed-DP round.

  Attributes:
    mechanism: ``"ddgauss"`` or ``"skellam"``.
    bits: b in [2, 32], bits per coordinate of the secure sum.
    dropout_rate: p in [0, 1), the probability that a sampled client drops out.
    beta: conditional rounding's beta in [0, 1) (Kairouz et al. 2021, Thm. 1).
    overflow_probability: the per-round probability, in (0, 1), that any coordinate of
      the secure sum wraps, that the granularity is chosen for.

  Raises:
    FedJaxDpError: a value out of range (naming it).
  """
  mechanism: str = "ddgauss"
  bits: int = 16
  dropout_rate: float = 0.0
  beta: float = DEFAULT_BETA
  overflow_probability: float = 1e-3

  def __post_init__(self):
    check_choice("mechanism", self.mechanism, MECHANISMS)
    check_int("bits", self.bits, minimum=2, maximum=32)
    if not 0.0 <= float(self.dropout_rate) < 1.0:
      raise FedJaxDpError(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}.",
                          option="dropout_rate")
    if not 0.0 <= float(self.beta) < 1.0:
      raise FedJaxDpError(f"rounding beta must be in [0, 1), got {self.beta!r}.",
                          option="rounding_beta")
    if not 0.0 < float(self.overflow_probability) < 1.0:
      raise FedJaxDpError(f"overflow_probability must be in (0, 1), got "
                          f"{self.overflow_probability!r}.", option="overflow_probability")


def upload_dim(model) -> Tuple[int, int]:
  """``(P, d)``: the model's parameter count (the upload's size) and the padded
  dimension ``2^ceil(log2 P)`` of the rotation."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  p = int(sum(math.prod(l.shape) for l in jax.tree_util.tree_leaves(shapes)))
  return p, secure_sum.padded_dim(p)


def plan_for(dist: DistributedDp, clip_norm: float, noise_multiplier: float, dim: int,
             survivors: float) -> Any:
  """The `fedjax_dp.privacy.distributed_dp.plan` of these options (granularity, noise,
  bounds) for ``survivors`` planned clients at noise multiplier z.

  Raises:
    FedJaxDpError: ``bits`` too few for the rounding noise alone (naming the minimum).
  """
  return distributed_dp.plan(dist.mechanism, clip_norm, dim, dist.bits,
                             planned_count(survivors), noise_multiplier, beta=dist.beta,
                             overflow_prob=dist.overflow_probability)


def planned_count(survivors: float) -> int:
  """The planned survivors as a whole number of clients (at least 1)."""
  return max(1, int(round(float(survivors))))


def secure_aggregation(dist: DistributedDp, plan: Any, dim: int, survivors: float,
                       max_survivors: int, relation: str) -> SecureAggregation:
  """The engine's static `SecureAggregation` from a plan."""
  return SecureAggregation(
      mechanism=dist.mechanism, bits=dist.bits, dim=dim, granularity=float(plan.gamma),
      l2_bound=float(plan.l2_bound), l1_bound=float(plan.l1_bound),
      planned_survivors=float(survivors), max_survivors=int(max_survivors),
      dropout_rate=float(dist.dropout_rate),
      sensitivity_factor=2.0 if relation == "replace_one" else 1.0,
      noise_branch=_noise_branch(dist, float(plan.local_sigma)))


def _noise_branch(dist: DistributedDp, sigma: float) -> Optional[str]:
  """The sampler's static branch for the planned sigma, with a factor-2 margin each
  side of its switch (sigma 8; Skellam: variance 100); None near the switch.

  Raises:
    FedJaxDpError: naming ``bits``: the noise is beyond the exact samplers' range.
  """
  value = sigma if dist.mechanism == "ddgauss" else sigma * sigma
  limit = (discrete_noise.MAX_SIGMA if dist.mechanism == "ddgauss"
           else discrete_noise.MAX_VARIANCE)
  if value > limit / 2:
    raise FedJaxDpError(f"bits={dist.bits} makes each client's {dist.mechanism} noise "
                        f"{'std' if dist.mechanism == 'ddgauss' else 'variance'} "
                        f"{value:.4g} (integer units), beyond half the sampler's limit "
                        f"{limit:.4g}: use fewer bits.", option="bits")
  switch = 8.0 if dist.mechanism == "ddgauss" else 100.0
  if value >= 2 * switch:
    return "rejection"
  return "table" if value < switch / 2 else None


def plan_secure_aggregation(dist: DistributedDp, model, samp, clip_norm: float, z: float
                            ) -> Tuple[SecureAggregation, Dict[str, Any]]:
  """The distributed round's static plan for the expected survivors at z: ``(the
  engine's SecureAggregation, summary.json's config fields)``.

  Args:
    dist: the options.
    model: the `fedjax_dp.models.Model` whose parameter delta is uploaded.
    samp: the cohort sampler (Poisson: zero-out; fixed size: replace-one, sensitivity
      2 Delta2).
    clip_norm: C; z: the noise multiplier (summed noise std ``z C`` over the planned
      survivors ``E[cohort] (1 - dropout_rate)``).

  Raises:
    FedJaxDpError: as `plan_for`.
  """
  size, dim = upload_dim(model)
  n = planned_count(samp.expected_cohort_size * (1.0 - dist.dropout_rate))
  plan = plan_for(dist, clip_norm, z, dim, n)
  relation = "replace_one" if samp.kind == "fixed_size" else "zero_out"
  sa = secure_aggregation(dist, plan, dim, n, samp.k_max, relation)
  return sa, config_fields(dist, sa, plan, size)


def calibrate_with_plan(spec_at: Callable[[float], Any], z0: float, rounds: int,
                        target_epsilon: float, delta: float, accountant: str, bits: int,
                        rtol: float = 1e-3, max_iterations: int = 12) -> float:
  """The noise multiplier z whose own plan's rounds spend ``target_epsilon``: the fixed
  point of ``z -> calibrate(spec_at(z))``, where ``spec_at(z)`` is the privacy statement
  of the round planned at z (its granularity depends on z, and the rounding's
  inflation of the sensitivity on the granularity).

  Raises:
    FedJaxDpError: naming ``bits``: no fixed point within ``max_iterations`` (the
      noise needed grows faster than the grid can carry it: the target is out of reach
      at these bits), or what the plan raises.
  """
  from fedjax_dp.privacy import calibration
  z, path = float(z0), [float(z0)]
  for _ in range(max_iterations):
    spec = spec_at(z)
    z_new = calibration.calibrate(lambda z_: spec.events_of_run(z_, rounds),
                                  target_epsilon, delta, accountant)
    path.append(z_new)
    if abs(z_new - z) <= rtol * z:
      return z_new
    z = z_new
  raise FedJaxDpError(
      f"target_epsilon={target_epsilon:g} is out of reach with bits={bits}: each "
      f"noise multiplier needs a coarser grid whose rounding inflates the sensitivity "
      f"(z: {' -> '.join(f'{v:.3g}' for v in path)}); use more bits.", option="bits")


def equivalent_noise_multiplier(sa: SecureAggregation, clip_norm: float,
                                noise_multiplier: float,
                                survivors: Optional[float] = None) -> float:
  """The event's Gaussian-equivalent noise multiplier ``1 / sqrt(2 rho)`` of a round of
  ``sa`` at the algorithm's z with ``survivors`` clients in the sum (default: the
  planned ones), from the host implementation of the bounds
  (`fedjax_dp.privacy.distributed_dp`); 0 without noise."""
  n = int(math.floor(sa.planned_survivors if survivors is None else survivors))
  sigma = noise_multiplier * clip_norm / (sa.granularity * math.sqrt(sa.planned_survivors))
  if n < 1 or sigma <= 0.0 or (sa.mechanism == "ddgauss" and sigma < 0.5):
    return 0.0  # no noise in the sum, or below the discrete Gaussian bound's hypothesis
  f = sa.sensitivity_factor
  l2, l1 = f * sa.l2_bound, f * sa.l1_bound
  rho = (distributed_dp.ddgauss_rho(l2, l1, sigma, n, sa.dim) if sa.mechanism == "ddgauss"
         else distributed_dp.skellam_rho(l2, l1, n * sigma * sigma))
  return distributed_dp.gaussian_equivalent_noise_multiplier(rho)


def mechanism_text(sa: SecureAggregation) -> str:
  """The secure sum's noise in words (summary.json's ``secure_sum_mechanism``)."""
  name = ("distributed discrete Gaussian (Kairouz, Liu, Steinke 2021)"
          if sa.mechanism == "ddgauss" else
          "distributed Skellam (Agarwal, Kairouz, Liu 2021)")
  return (f"{name}: each surviving client's clipped update rotated (randomized Hadamard, "
          f"d = {sa.dim}), scaled by 1/gamma (gamma = {sa.granularity:.4g}), "
          f"conditionally rounded (L2 <= {sa.l2_bound:.6g} integer units) and noised on "
          f"the device, summed mod 2^{sa.bits} by secure aggregation; each round's zCDP "
          f"from the noise of the clients that survived (dropout rate "
          f"{sa.dropout_rate:g})")


def accounting_facts(sa: SecureAggregation) -> Dict[str, Any]:
  """The public constants of each round's zCDP besides its survivors and noise std
  (every record of metrics.jsonl carries them: `SecureSumSpec.facts`)."""
  return dict(secagg_mechanism=sa.mechanism, secagg_bits=sa.bits, secagg_dim=sa.dim,
              secagg_l2_bound=sa.l2_bound, secagg_l1_bound=sa.l1_bound,
              secagg_sensitivity_factor=sa.sensitivity_factor,
              secagg_granularity=sa.granularity)


def config_fields(dist: DistributedDp, sa: SecureAggregation, plan: Any,
                  upload_size: int) -> Dict[str, Any]:
  """summary.json's ``algorithm_config`` fields of a distributed run (public plan)."""
  return dict(aggregation={"ddgauss": "distributed_dgauss",
                           "skellam": "distributed_skellam"}[dist.mechanism],
              bits=dist.bits, dropout_rate=dist.dropout_rate, rounding_beta=dist.beta,
              overflow_probability=dist.overflow_probability, secagg_dim=sa.dim,
              upload_size=upload_size, secagg_granularity=sa.granularity,
              secagg_l2_bound=sa.l2_bound, secagg_l1_bound=sa.l1_bound,
              secagg_planned_survivors=sa.planned_survivors,
              secagg_local_stddev=float(plan.local_sigma),
              secagg_sensitivity_factor=sa.sensitivity_factor,
              secagg_predicted_overflow=float(plan.round_overflow_prob))


def check_distributed(samp: Any, noise_multiplier: Any, client_stage: Any) -> None:
  """What distributed DP refuses before anything is built.

  Raises:
    FedJaxDpError: a structured sampler, per-client noise multipliers, or an
      algorithm's own client stage (its upload would need its own encoding).
  """
  if samp.kind not in ("poisson", "fixed_size"):
    raise FedJaxDpError(f"noise_placement='distributed' takes Poisson or fixed-size "
                        f"cohorts, got sampler={samp.kind!r}.", option="sampler")
  if np.ndim(noise_multiplier) != 0:
    raise FedJaxDpError("noise_placement='distributed' takes one noise multiplier (the "
                        "planned survivors' summed noise), not one per client.",
                        option="noise_multiplier")
  if client_stage is not None:
    raise FedJaxDpError("noise_placement='distributed' encodes DP-FedAvg's model-delta "
                        "upload; an algorithm's own client stage is not supported.",
                        option="noise_placement")


_ACCT = "accounting of the noise in the secure sum: no client data"
_DIAG = ("computed from the unwrapped integer sum, which the server never sees; a "
         "simulation diagnostic, not covered by epsilon")

#: Disclosure labels of the rounds' distributed-DP metrics
#: (`fedjax_dp.federated.secure_aggregation.diagnostics`).
METRIC_LABELS: Dict[str, Any] = {
    "secagg_survivors": (disclosure.PUBLIC, "who took part in the secure aggregation "
                         "(observed by the server; dropouts are independent of the data)"),
    "secagg_local_stddev": (disclosure.PUBLIC, _ACCT),
    "secagg_noise_variance": (disclosure.PUBLIC, _ACCT),
    "secagg_rho": (disclosure.PUBLIC, _ACCT),
    "secagg_overflow_rate": (disclosure.DIAGNOSTIC, _DIAG),
    "secagg_rounding_error": (disclosure.DIAGNOSTIC, _DIAG),
    "secagg_rounding_bias": (disclosure.DIAGNOSTIC, _DIAG),
    "secagg_rounding_retries": (disclosure.DIAGNOSTIC, _DIAG),
    **{f"secagg_{k}": (disclosure.PUBLIC, "the secure sum's public plan (configuration): "
                       "no client data")
       for k in ("mechanism", "bits", "dim", "l2_bound", "l1_bound", "sensitivity_factor",
                 "granularity")},
}
#: summary.json's block of a distributed run (`summary_fields`).
SUMMARY_LABELS: Dict[str, Any] = {
    "secure_aggregation": (disclosure.DIAGNOSTIC, "the rounds' overflow and rounding "
                           "diagnostics (" + _DIAG + ") and their survivors"),
    "secure_sum_mechanism": (disclosure.PUBLIC, "the secure sum's mechanism and public "
                             "plan, in words: no client data"),
}

#: The options that only distributed aggregation takes (`check_options`).
OPTIONS = ("bits", "dropout_rate", "rounding_beta", "overflow_probability")


def check_options(options: Any) -> None:
  """``--aggregation`` and its options against the rest of a `DpFedAvgOptions`.

  Raises:
    FedJaxDpError: distributed options without distributed aggregation, or distributed
      aggregation with local noise, adaptive clipping, per-client noise multipliers, a
      noise cohort or a structured sampler.
  """
  if options.aggregation == "central":
    given = [k for k in OPTIONS if getattr(options, k) is not None]
    if given:
      raise FedJaxDpError(f"{given[0]} is an option of distributed aggregation; give it "
                          "with --aggregation distributed_dgauss or distributed_skellam.",
                          option=given[0])
    return
  check_choice("aggregation", options.aggregation, tuple(AGGREGATIONS))
  clash = [name for name, bad in (
      ("--noise-placement local", options.noise_placement != "central"),
      ("--clip-norm adaptive", isinstance(options.clip_norm, str)),
      ("--client-noise-multipliers", options.client_noise_multipliers is not None),
      ("--noise-cohort-size", options.noise_cohort_size is not None),
      (f"--sampler {options.sampler}", options.sampler not in ("poisson", "fixed_size")))
      if bad]
  if clash:
    raise FedJaxDpError(f"--aggregation {options.aggregation} (every client noises its "
                        f"own integer upload, the server sees a secure sum) cannot be "
                        f"combined with {', '.join(clash)}.", option="aggregation")
  options_to_spec(options)  # checks the values, naming the option


def options_to_spec(options: Any) -> DistributedDp:
  """The `DistributedDp` of a run's options (defaults where not given)."""
  o = options
  return DistributedDp(
      mechanism=AGGREGATIONS[o.aggregation] or "ddgauss",
      bits=16 if o.bits is None else o.bits,
      dropout_rate=0.0 if o.dropout_rate is None else o.dropout_rate,
      beta=DEFAULT_BETA if o.rounding_beta is None else o.rounding_beta,
      overflow_probability=1e-3 if o.overflow_probability is None
      else o.overflow_probability)


def summary_fields(records: Any) -> Dict[str, Any]:
  """summary.json's ``secure_aggregation`` block from the rounds' records: survivors
  (mean, min), the modular overflow (mean rate over rounds, largest rate, rounds with
  any overflow), the rounding error and bias (means) and the rounds' zCDP rho
  (largest)."""
  rows = [r for r in records if "secagg_survivors" in r]
  if not rows:
    return {}
  col = lambda k: np.asarray([float(r[k]) for r in rows], np.float64)
  over = col("secagg_overflow_rate")
  return {"secure_aggregation": dict(
      rounds=len(rows), mean_survivors=float(col("secagg_survivors").mean()),
      min_survivors=float(col("secagg_survivors").min()),
      mean_overflow_rate=float(over.mean()), max_overflow_rate=float(over.max()),
      rounds_with_overflow=int((over > 0).sum()),
      mean_rounding_error=float(col("secagg_rounding_error").mean()),
      mean_rounding_bias=float(col("secagg_rounding_bias").mean()),
      max_rho=float(col("secagg_rho").max()))}


def describe(summary: Dict[str, Any]) -> list:
  """The end-of-run line of a distributed run."""
  sa = summary.get("secure_aggregation") or {}
  if not sa:
    return []
  cfg = summary.get("algorithm_config") or {}
  return [f"secure aggregation ({cfg.get('aggregation')}, {cfg.get('bits')} bits): "
          f"{sa['mean_survivors']:.1f} survivors a round (min {sa['min_survivors']:.0f}); "
          f"overflow in {sa['rounds_with_overflow']} of {sa['rounds']} rounds (mean rate "
          f"{sa['mean_overflow_rate']:.2e}); rounding bias {sa['mean_rounding_bias']:+.2e} "
          "(simulation diagnostics)"]
