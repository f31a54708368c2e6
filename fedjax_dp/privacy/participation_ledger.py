"""The ledger of structured participation: cyclic Poisson, balls-in-bins, random allocation.

`ParticipationLedger` implements `fedjax_dp.privacy.ledger_protocol.Ledger` for the
samplers of `fedjax_dp.privacy.events.SCHEDULED_SAMPLERS`, whose privacy loss depends on
where a round lies in the cycle or epoch:

* ``cyclic_poisson`` (b groups): every round's event comes from
  `fedjax_dp.privacy.events.make_dp_event` with the round's `Schedule`, for each group
  g in [0, b) (the unit of group g is only eligible in rounds ``r = g mod b``); RDP
  vectors add per group and the run's epsilon is the largest over the groups (with
  constant noise: group 0's, ``ceil(T / b)`` Poisson-sampled Gaussians at the group
  rate ``q b``). PLD composes the worst group's events (every group's when the noise
  varies).
* ``balls_in_bins`` / ``random_allocation`` (k of t), attributable: ``k`` Gaussian
  releases per epoch touched, from `make_dp_event` (RDP / PLD as above, one group).
* ``balls_in_bins`` / ``random_allocation``, aggregate: the Monte Carlo accountant
  (`fedjax_dp.privacy.allocation`), charged ``ceil(R / t)`` epochs after R rounds (a
  partial epoch is bounded by a full one). The epsilon is an upper confidence bound:
  it holds with probability >= 1 - beta over the Monte Carlo draw. Both accountant names
  give this same estimate (neither RDP nor PLD is used).

Noise that varies within an epoch: the epoch is charged at the smallest noise
multiplier of its recorded rounds (more noise is a post-processing of less: adding
independent Gaussian noise to a release). With the Monte Carlo accountant every epoch
is charged at the smallest noise multiplier of the whole run (conservative).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from fedjax_dp.privacy import allocation
from fedjax_dp.privacy.accountants import (ACCOUNTANTS, _check_orders, _rdp_of,
                                           event_epsilon)
from fedjax_dp.privacy.events import (SCHEDULED_SAMPLERS, Schedule, Truncation,
                                      check_observation, dp_accounting_relation,
                                      make_dp_event, neighboring_relation,
                                      truncation_delta)
from fedjax_dp.privacy.ledger_protocol import PrivacyReport, check_report
from fedjax_dp.validation import FedJaxDpError, check_choice, check_delta, check_int

__all__ = ["ParticipationLedger"]

_FORMAT = "fedjax_dp.ParticipationLedger"
_RATE_RTOL = 1e-6


class ParticipationLedger:
  """Composition of a structured-participation run's rounds (module docstring).

  Args:
    delta: the ledger's delta in (0, 1).
    sampler: one of `SCHEDULED_SAMPLERS`.
    min_separation: b (``cyclic_poisson``).
    epoch_length: t (``balls_in_bins`` / ``random_allocation``).
    participations: k in [1, t] (1 for balls-in-bins).
    relation: ``"add_remove"`` (default) or ``"zero_out"``.
    observation: ``"aggregate"``, ``"attributable"`` (needs zero-out at user level) or
      ``"public"``.
    privacy_unit: ``"user"`` or ``"record"``.
    truncation: a `Truncation` of the padded cohort (allocation samplers), or None.
    num_samples, beta, seed: the Monte Carlo accountant's draws per direction,
      failure probability and seed (aggregate allocation only).

  Raises:
    FedJaxDpError: an argument out of range or a missing b / t.
  """

  def __init__(self, delta: float, sampler: str, *, min_separation: Optional[int] = None,
               epoch_length: Optional[int] = None, participations: int = 1,
               relation: Optional[str] = None, observation: str = "aggregate",
               privacy_unit: str = "user", truncation: Optional[Truncation] = None,
               num_samples: int = allocation.DEFAULT_NUM_SAMPLES,
               beta: float = allocation.DEFAULT_BETA, seed: int = 0):
    self._delta = check_delta(delta)
    self._sampler = check_choice("sampler", sampler, SCHEDULED_SAMPLERS)
    self._relation, self._relation_text = neighboring_relation(sampler, privacy_unit,
                                                               relation)
    self._observation = check_observation(observation, sampler, self._relation,
                                          privacy_unit)
    self._unit = privacy_unit
    if sampler == "cyclic_poisson":
      self._b, self._t, self._k = check_int("min_separation", min_separation, minimum=1), 0, 1
    else:
      self._b = 1
      self._t = check_int("epoch_length", epoch_length, minimum=1)
      self._k = check_int("participations", participations, minimum=1, maximum=self._t)
    self._truncation = truncation
    self._mc: Dict[str, Any] = dict(
        num_samples=check_int("num_samples", num_samples, minimum=1), beta=float(beta),
        seed=check_int("seed", seed, minimum=0))
    self._orders = _check_orders(None)
    self._z: List[float] = []
    self._q: List[float] = []
    self._steps: List[int] = []
    self._mc_cache: Dict[Tuple[float, float], np.ndarray] = {}

  # -- properties -------------------------------------------------------------

  @property
  def delta(self) -> float:
    """The ledger's delta."""
    return self._delta

  @property
  def sampler(self) -> str:
    """The sampler (one of `SCHEDULED_SAMPLERS`)."""
    return self._sampler

  @property
  def orders(self):
    """The RDP orders of `rdp`."""
    return self._orders

  @property
  def num_rounds(self) -> int:
    """Rounds recorded."""
    return len(self._z)

  @property
  def monte_carlo(self) -> bool:
    """Whether epsilon comes from the Monte Carlo accountant (aggregate allocation)."""
    return self._sampler != "cyclic_poisson" and self._observation == "aggregate"

  @property
  def accounting_method(self) -> str:
    """How epsilon is computed, in words (for summary.json)."""
    if self._observation == "public":
      return "none (public values only)"
    if self.monte_carlo:
      return (f"monte_carlo: random allocation of k={self._k} of t={self._t} rounds per "
              f"epoch, {self._mc['num_samples']} draws per direction, seed "
              f"{self._mc['seed']}; holds with probability >= {1 - self._mc['beta']:g} "
              "over the Monte Carlo draw")
    if self._sampler == "cyclic_poisson":
      return (f"worst group of b={self._b}: Poisson-sampled Gaussian at the group rate in "
              "the group's rounds (dp_accounting)")
    return (f"k={self._k} visible Gaussian releases per epoch of t={self._t} rounds "
            "(dp_accounting)")

  def supports(self, accountant: str) -> bool:
    """True for both accountants (under the Monte Carlo accountant both names give its
    estimate).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    check_choice("accountant", accountant, ACCOUNTANTS)
    return True

  def unit_epsilons(self, accountant: str = "rdp") -> None:
    """None: one protected unit's composition (the worst case)."""
    del accountant
    return None

  # -- recording --------------------------------------------------------------

  def _check_rate(self, q: float, index: int) -> None:
    if self._sampler == "cyclic_poisson":
      if q * self._b > 1.0 + _RATE_RTOL:
        raise FedJaxDpError(f"round {index}: sampling_rate={q!r} times min_separation="
                            f"{self._b} exceeds 1.", option="sampling_rate")
    elif abs(q - self._k / self._t) > _RATE_RTOL * self._k / self._t + 1e-7:
      raise FedJaxDpError(f"round {index}: sampling_rate={q!r} differs from k/t = "
                          f"{self._k}/{self._t} of the {self._sampler} sampler.",
                          option="sampling_rate")

  def record(self, report: PrivacyReport, /) -> np.ndarray:
    """Composes the report's rounds; returns the epsilon after each (RDP, or the Monte
    Carlo estimate).

    Raises:
      FedJaxDpError: a report with releases or per-client noise, z < 0, a rate that
        does not fit the sampler, or several DP steps under the Monte Carlo
        accountant. Nothing is recorded on error.
    """
    check_report(report, "ParticipationLedger")
    z, q, s = report.noise_multiplier, report.sampling_rate, report.dp_steps
    start = self.num_rounds
    for i in range(report.num_rounds):
      if not (z[i] >= 0 and math.isfinite(z[i])):
        raise FedJaxDpError(f"round {start + i}: noise_multiplier must be finite and "
                            f">= 0, got {z[i]!r}.", option="noise_multiplier")
      self._check_rate(float(q[i]), start + i)
      if self.monte_carlo and int(s[i]) != 1:
        raise FedJaxDpError("the Monte Carlo accountant of random allocation covers one "
                            f"Gaussian release per round, got dp_steps={int(s[i])}.",
                            option="dp_steps")
    self._z += [float(v) for v in z]
    self._q += [float(v) for v in q]
    self._steps += [int(v) for v in s]
    return self.epsilon_history(start=start)

  # -- events -----------------------------------------------------------------

  def _epoch_z(self, epoch: int, upto: int) -> float:
    lo = epoch * self._t
    return min(self._z[lo:min(upto, lo + self._t)])

  def _group_events(self, upto: int) -> List[List[dp_accounting.DpEvent]]:
    """Per group, the events of rounds ``0..upto-1`` (epochs: one per epoch touched)."""
    if self._sampler == "cyclic_poisson":
      out: List[List[dp_accounting.DpEvent]] = [[] for _ in range(self._b)]
      for r in range(upto):
        g = r % self._b
        out[g].append(make_dp_event(
            self._z[r], self._q[r], self._steps[r], self._sampler,
            observation=self._observation, schedule=Schedule(r, self._b, group=g)))
      return out
    events = []
    for e in range(allocation.epochs_touched(upto, self._t)):
      lo = e * self._t
      steps = max(self._steps[lo:min(upto, lo + self._t)])
      events.append(make_dp_event(
          self._epoch_z(e, upto), self._k / self._t, steps, self._sampler,
          observation=self._observation,
          schedule=Schedule(lo, epoch_length=self._t, participations=self._k)))
    return [events]

  def _rdp(self, event) -> np.ndarray:
    return _rdp_of(event, self._orders, dp_accounting_relation(event))[0]

  def _rdp_eps(self, vec: np.ndarray, delta: float) -> float:
    if not np.any(vec):
      return 0.0
    return float(rdp_privacy_accountant.compute_epsilon(list(self._orders), list(vec),
                                                        delta)[0])

  def rdp(self) -> Optional[np.ndarray]:
    """float64 ``[len(orders)]``: the worst group's RDP vector (the one whose epsilon at
    the ledger's delta is largest); None under the Monte Carlo accountant (no RDP)."""
    if self.monte_carlo:
      return None
    vecs = [sum((self._rdp(e) for e in g), np.zeros(len(self._orders)))
            for g in self._group_events(self.num_rounds)]
    return max(vecs, key=lambda v: self._rdp_eps(v, self._delta))

  def _mc_epsilons(self, z: float, epochs: int, delta: float) -> np.ndarray:
    """Monte Carlo epsilons of 1..epochs epochs at noise z (cached; grown by doubling)."""
    key = (z, delta)
    have = self._mc_cache.get(key)
    if have is None or have.shape[0] < epochs:
      size = max(epochs, 2 * (0 if have is None else have.shape[0]))
      have = allocation.allocation_epsilons(z, self._t, self._k, size, delta,
                                            **self._mc).epsilons
      self._mc_cache[key] = have
    return have[:epochs]

  def epsilon_history(self, delta: Optional[float] = None, start: int = 0,
                      accountant: str = "rdp") -> np.ndarray:
    """float64 ``[num_rounds - start]``: the epsilon after each round from ``start``."""
    delta = self._delta if delta is None else check_delta(delta)
    n = self.num_rounds
    if self._observation == "public" or n == 0:
      return np.zeros(n - start)
    if accountant == "pld":
      return np.array([self.epsilon(delta, "pld", upto=r + 1) for r in range(start, n)])
    if self.monte_carlo:
      z = min(self._z)
      if z == 0.0:
        return np.full(n - start, math.inf)
      eps = self._mc_epsilons(z, allocation.epochs_touched(n, self._t), delta)
      return np.array([eps[allocation.epochs_touched(r + 1, self._t) - 1]
                       for r in range(start, n)])
    return self._rdp_history(delta, start)

  def _rdp_history(self, delta: float, start: int) -> np.ndarray:
    """RDP epsilons after rounds ``start..n-1``, one pass over the rounds: per-group RDP
    sums (cyclic) or the completed epochs' sum plus the current epoch's event."""
    n, zero = self.num_rounds, np.zeros(len(self._orders))
    out = np.empty(n - start)
    if self._sampler == "cyclic_poisson":
      sums, eps = [zero] * self._b, [0.0] * self._b
      for r in range(n):
        g = r % self._b
        sums[g] = sums[g] + self._rdp(make_dp_event(
            self._z[r], self._q[r], self._steps[r], self._sampler,
            observation=self._observation, schedule=Schedule(r, self._b, group=g)))
        if r == start:
          eps = [self._rdp_eps(v, delta) for v in sums]
        elif r > start:
          eps[g] = self._rdp_eps(sums[g], delta)
        if r >= start:
          out[r - start] = max(eps)
      return out
    done = zero
    for r in range(n):
      e, lo = divmod(r, self._t)
      event = make_dp_event(
          self._epoch_z(e, r + 1), self._k / self._t, max(self._steps[r - lo:r + 1]),
          self._sampler, observation=self._observation,
          schedule=Schedule(r - lo, epoch_length=self._t, participations=self._k))
      current = self._rdp(event)
      if r >= start:
        out[r - start] = self._rdp_eps(done + current, delta)
      if lo == self._t - 1:
        done = done + current
    return out

  def epsilon(self, delta: Optional[float] = None, accountant: str = "rdp", *,
              upto: Optional[int] = None) -> float:
    """The run's epsilon (the worst group's; Monte Carlo for aggregate allocation)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    delta = self._delta if delta is None else check_delta(delta)
    upto = self.num_rounds if upto is None else upto
    if upto == 0 or self._observation == "public":
      return 0.0
    if self.monte_carlo or accountant == "rdp":
      saved, self._z = self._z, self._z[:upto]
      try:
        return float(self.epsilon_history(delta, start=upto - 1)[-1])
      finally:
        self._z = saved
    worst, seen = 0.0, {}
    for g in self._group_events(upto):
      counts: Dict[Any, int] = {}  # identical events composed once, self-composed
      for e in g:
        if not isinstance(e, dp_accounting.NoOpDpEvent):
          counts[e] = counts.get(e, 0) + 1
      key = tuple(counts.items())
      if counts and key not in seen:  # groups with the same events: computed once
        runs: List[dp_accounting.DpEvent] = [
            dp_accounting.SelfComposedDpEvent(e, c) for e, c in counts.items()]
        seen[key] = event_epsilon(dp_accounting.ComposedDpEvent(runs), delta, "pld")
        worst = max(worst, seen[key])
    return worst

  def truncation_probability(self) -> float:
    """Union bound over the rounds of a padded cohort's overflow
    (`Truncation.probability` at each round's rate; 0 without a truncation model)."""
    if self._truncation is None:
      return 0.0
    return min(1.0, sum(self._truncation.probability(q, s)
                        for q, s in zip(self._q, self._steps)))

  def delta_total(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """``delta + (1 + e^eps) p`` (`truncation_delta`)."""
    d = self._delta if delta is None else check_delta(delta)
    return d + truncation_delta(self.epsilon(d, accountant),
                                self.truncation_probability())

  # -- persistence --------------------------------------------------------------

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state (the recorded rounds and every setting)."""
    t = self._truncation
    return {"format": _FORMAT, "delta": self._delta, "sampler": self._sampler,
            "min_separation": self._b if self._sampler == "cyclic_poisson" else None,
            "epoch_length": self._t or None, "participations": self._k,
            "relation": self._relation, "observation": self._observation,
            "privacy_unit": self._unit, "truncation": None if t is None else list(t),
            **self._mc, "noise_multipliers": list(self._z),
            "sampling_rates": list(self._q), "dp_steps": list(self._steps)}

  @classmethod
  def from_dict(cls, state: Dict[str, Any], /) -> "ParticipationLedger":
    """Inverse of `to_dict` (the rounds are recorded again).

    Raises:
      FedJaxDpError: not a ParticipationLedger state.
    """
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
      raise FedJaxDpError("not a ParticipationLedger state (format "
                          f"{state.get('format') if isinstance(state, dict) else None!r}).",
                          option="state")
    t = state["truncation"]
    ledger = cls(state["delta"], state["sampler"], min_separation=state["min_separation"],
                 epoch_length=state["epoch_length"],
                 participations=state["participations"], relation=state["relation"],
                 observation=state["observation"], privacy_unit=state["privacy_unit"],
                 truncation=None if t is None else Truncation(*t),
                 num_samples=state["num_samples"], beta=state["beta"], seed=state["seed"])
    if state["noise_multipliers"]:
      ledger.record(PrivacyReport(state["noise_multipliers"], state["sampling_rates"],
                                  state["dp_steps"]))
    return ledger

  def __repr__(self) -> str:
    return (f"ParticipationLedger(sampler={self._sampler!r}, b={self._b}, t={self._t}, "
            f"k={self._k}, observation={self._observation!r}, rounds={self.num_rounds})")
