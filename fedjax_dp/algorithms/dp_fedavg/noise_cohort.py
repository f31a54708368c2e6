"""Simulating a larger noise cohort: train K clients a round with the noise of K'.

A DP-FL deployment samples K' clients a round from a population of millions; a
simulation can afford K << K'. With central noise of std ``z C`` on the sum and the
fixed denominator ``q N = K``, the model's update carries noise of std ``z C / K``; the
deployment's carries ``z C / K'``, far less. pfl-research's ``noise_cohort_size``
(Apple, 2024) closes that gap: the simulation adds ``(K / K') z C`` to its K-client sum,
so that the noise on the *average* is the deployment's ``z C / K'``. The utility then
approximates the deployment's; the privacy does not.

What is reported (`deployment_fields`):

* the run's own guarantee (summary.json ``epsilon``): the ledger composes what the
  rounds added, noise multiplier ``s z`` with ``s = K / K'`` at the run's rate q. It is
  weak (``s z`` is small), and it is the only guarantee this run's clients have;
* the simulated deployment's (``noise_cohort_simulation``): a population ``N' = K' / q``
  sampled at the same rate q (expected cohort K'), noise multiplier z, the same rounds:
  ``make_dp_event(z, q)`` composed over the rounds run. It is what a deployment of that
  size *would* have; no client of this run has it.

``--target-epsilon`` with ``--noise-cohort-size`` calibrates the deployment's z (at the
same q its events are this run's planned events, `fedjax_dp.algorithms.privacy_spec`);
the rounds then add ``s z C``.

Limits: Poisson cohorts (the deployment keeps the rate q), central noise, a fixed clip
norm (adaptive clipping's count release would need its own scaling).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from fedjax_dp.privacy import accountants, events
from fedjax_dp.validation import FedJaxDpError, check_int

__all__ = ["noise_scale", "deployment_fields", "describe"]


def noise_scale(noise_cohort_size: Optional[int], sampler: str, expected_cohort_size: float,
                noise_placement: str, adaptive: bool) -> float:
  """``s = K / K'``, the factor on the central noise std (1.0 without a noise cohort).

  Args:
    noise_cohort_size: K' (int >= the expected cohort K), or None.
    sampler: the run's cohort sampler kind; must be ``"poisson"``.
    expected_cohort_size: K = q N (clients, float).
    noise_placement: must be ``"central"``.
    adaptive: adaptive clipping is on (refused).

  Raises:
    FedJaxDpError: naming ``noise_cohort_size``: K' < K, a sampler other than Poisson,
      local noise or adaptive clipping.
  """
  if noise_cohort_size is None:
    return 1.0
  k_noise = check_int("noise_cohort_size", noise_cohort_size, minimum=1)
  if sampler != "poisson":
    raise FedJaxDpError(f"noise_cohort_size simulates a deployment that samples at the "
                        f"same rate q with Poisson sampling; got sampler={sampler!r}.",
                        option="noise_cohort_size")
  if noise_placement != "central" or adaptive:
    raise FedJaxDpError("noise_cohort_size scales the central noise of a fixed clip norm: "
                        "it needs noise_placement='central' and a numeric clip_norm, got "
                        f"noise_placement={noise_placement!r}"
                        + (" with clip_norm='adaptive'" if adaptive else "") + ".",
                        option="noise_cohort_size")
  if k_noise < expected_cohort_size:
    raise FedJaxDpError(f"noise_cohort_size must be >= the expected cohort size "
                        f"{expected_cohort_size:g} (a larger cohort's noise), got "
                        f"{k_noise}.", option="noise_cohort_size")
  return float(expected_cohort_size) / k_noise


def _deployment_epsilon(z: float, q: float, rounds: int, delta: float,
                        accountant: str) -> float:
  """The epsilon of ``rounds`` rounds of ``make_dp_event(z, q)`` (Poisson, aggregate
  observation: the deployment's release) at ``delta``."""
  if rounds == 0:
    return 0.0
  one = events.make_dp_event(z, q)
  import dp_accounting
  return accountants.event_epsilon(dp_accounting.SelfComposedDpEvent(one, rounds), delta,
                                   accountant)


def deployment_fields(config: Dict[str, Any], records: Sequence[Dict[str, Any]],
                      delta: float, accountant: str) -> Dict[str, Any]:
  """summary.json's ``noise_cohort_simulation`` block for a run with a noise cohort
  (``config``: the algorithm's config with ``noise_cohort_size``, ``noise_scale``,
  ``noise_multiplier`` (the deployment's z), ``sampling_rate``, ``expected_cohort_size``);
  ``{}`` without one.

  The deployment's epsilon is recomputed from the records: each round's reported
  ``noise_multiplier`` (the added noise, ``s z``) divided by ``s`` is the deployment's z.

  Returns:
    ``{"noise_cohort_simulation": {...}}`` with ``noise_cohort_size`` K',
    ``expected_cohort_size`` K, ``noise_scale`` s, ``deployment_population_size`` K'/q,
    ``deployment_noise_multiplier`` z, ``sampling_rate`` q, ``rounds``,
    ``deployment_epsilon`` (at ``delta``, with ``accountant``), ``meaning``.
  """
  k_noise = config.get("noise_cohort_size")
  if k_noise is None:
    return {}
  s, q = float(config["noise_scale"]), float(config["sampling_rate"])
  zs = [float(r["noise_multiplier"]) / s for r in records if "noise_multiplier" in r]
  z = zs[-1] if zs else float(config["noise_multiplier"])
  if zs and max(zs) - min(zs) > 1e-6 * max(zs):
    raise FedJaxDpError("noise_cohort_size: the rounds' noise multipliers differ; the "
                        "deployment's epsilon assumes one z.", option="noise_cohort_size")
  eps = _deployment_epsilon(z, q, len(zs), delta, accountant)
  return {"noise_cohort_simulation": dict(
      noise_cohort_size=int(k_noise), expected_cohort_size=config["expected_cohort_size"],
      noise_scale=s, deployment_population_size=k_noise / q,
      deployment_noise_multiplier=z, sampling_rate=q, rounds=len(zs),
      deployment_epsilon=eps, delta=delta, accountant=accountant,
      meaning=(f"SIMULATION: these rounds trained about {config['expected_cohort_size']:g}"
               f" clients with the noise a {k_noise}-client cohort would add to its "
               f"average (noise multiplier {z:g}, std x {s:.4g} on this cohort's sum). "
               f"deployment_epsilon = {eps:.4g} is what a deployment of {k_noise / q:.6g} "
               f"clients sampled at the same rate q = {q:.4g} would have after "
               f"{len(zs)} rounds; this run's own clients have only the summary's "
               f"epsilon (noise multiplier {z * s:.4g})."))}


def describe(summary: Dict[str, Any]) -> List[str]:
  """The end-of-run line of the simulation (empty without one)."""
  sim = summary.get("noise_cohort_simulation")
  if not sim:
    return []
  return [sim["meaning"]]
