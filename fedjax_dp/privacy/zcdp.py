"""Zero-concentrated DP (zCDP): the rho of a run's DpEvent, reported beside (epsilon,
delta) as production deployments report it (e.g. Gboard's language models state
rho-zCDP, rho in about [0.2, 2]).

Definitions (Bun and Steinke, "Concentrated Differential Privacy: Simplifications,
Extensions, and Lower Bounds", TCC 2016, arXiv 1605.02065):

* A mechanism is rho-zCDP if its Renyi divergence of every order alpha in (1, inf) is
  at most ``rho * alpha`` (Def. 1.1), i.e. its RDP curve ``R(alpha)`` (Mironov 2017)
  satisfies ``R(alpha) <= rho * alpha`` for all alpha. The smallest such rho is
  ``sup_alpha R(alpha) / alpha``.
* The Gaussian mechanism with noise multiplier z (noise standard deviation z times the
  L2 sensitivity) is exactly ``1 / (2 z^2)``-zCDP (Prop. 1.6: sensitivity Delta, noise
  sigma gives ``Delta^2 / (2 sigma^2)``; its RDP is ``alpha / (2 z^2)``, equality at
  every order).
* Adaptive composition adds rho (Lemma 2.3 / Lemma 1.7 in the journal numbering).
* rho-zCDP implies ``(rho + 2 sqrt(rho log(1/delta)), delta)``-DP for every delta > 0
  (Prop. 1.3); `epsilon_from_rho`. The run's RDP or PLD epsilon is never worse than
  this (it uses the whole RDP curve or the privacy loss distribution), so the two
  numbers are for comparison, not interchangeable.

Sampling. zCDP does not capture amplification by subsampling: the RDP of a Poisson-
subsampled Gaussian at rate q < 1 is below ``alpha / (2 z^2)`` at every order, but its
ratio ``R(alpha) / alpha`` tends to ``1 / (2 z^2)`` as alpha -> inf (the event "the
record is sampled", probability q, dominates at large orders: ``R(alpha) ~ alpha /
(2 z^2) + log(q) alpha / (alpha - 1)``), so no smaller rho holds for every alpha
(checked numerically with dp_accounting's RDP up to order 10^4 in
``tests/privacy/test_zcdp.py``). Every sampled event (Poisson, without replacement,
truncated Poisson, `fedjax_dp.privacy.events.VisibleParticipationDpEvent`) is a mixture,
over the data-independent draws, of the unsampled mechanism applied to subsets that
hold the protected unit at most once; the Renyi divergence of such a mixture is at most
the largest of its components' (joint quasi-convexity of exp((alpha - 1) D_alpha),
van Erven and Harremoes 2014, Thm. 13), so ``rho(inner)`` is an upper bound for it:
reported with ``exact`` False and a note. Sampling *with* replacement can put a unit in
a batch several times, so ``rho(inner)`` is not a bound there: None.

Events without Gaussian structure (Laplace, randomized response, mixtures of Gaussians,
events this module does not know) give None with a note: a pure-DP or other mechanism
has a zCDP bound (epsilon-DP implies ``epsilon^2 / 2``-zCDP, Prop. 1.4) but reporting it
would mix a loose conversion into a figure that is otherwise exact, so none is given.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

import dp_accounting

from fedjax_dp.privacy.events import VisibleParticipationDpEvent
from fedjax_dp.validation import FedJaxDpError, check_delta, check_non_negative

__all__ = ["ZcdpBound", "zcdp_bound", "zcdp_rho", "epsilon_from_rho",
           "ledger_zcdp", "zcdp_summary_fields", "SAMPLING_NOTE"]

#: The note of a run whose event holds sampling (rho ignores the amplification).
SAMPLING_NOTE = ("upper bound: zCDP does not capture amplification by sampling (the "
                 "sampled mechanism's RDP(alpha)/alpha tends to the unsampled 1/(2 z^2) "
                 "as alpha -> inf, so no smaller rho holds for all alpha); the RDP/PLD "
                 "epsilon uses the amplification, rho does not")


@dataclasses.dataclass(frozen=True)
class ZcdpBound:
  """The zCDP of an event.

  Attributes:
    rho: rho >= 0 (float, nats; ``inf`` for a non-private event), or None when the
      event has no Gaussian structure this module can state rho for.
    exact: True when rho is the smallest rho-zCDP of the event (Gaussian mechanisms
      and their compositions: RDP equals ``rho * alpha`` at every order); False when
      it is an upper bound (sampling; see the module docstring) or rho is None.
    notes: plain sentences on what the figure ignores (sorted, de-duplicated).
  """
  rho: Optional[float]
  exact: bool
  notes: Tuple[str, ...] = ()

  @property
  def note(self) -> str:
    """The notes joined into one sentence (``""`` when exact and nothing to say)."""
    return "; ".join(self.notes)


def _none(note: str) -> ZcdpBound:
  return ZcdpBound(None, False, (note,))


def _add(parts: List[ZcdpBound], weights: List[int]) -> ZcdpBound:
  """Composition: rho adds (Bun and Steinke 2016, Lemma 2.3); None if any part is."""
  notes = tuple(sorted({n for p in parts for n in p.notes}))
  rhos = [p.rho for p in parts]
  if any(r is None for r in rhos):
    return ZcdpBound(None, False, notes)
  total = sum(w * float(r or 0.0) for r, w in zip(rhos, weights))  # inf stays inf
  return ZcdpBound(total, all(p.exact for p in parts), notes)


def _gaussian(z: float) -> ZcdpBound:
  """``1 / (2 z^2)`` (Bun and Steinke 2016, Prop. 1.6); inf for z = 0."""
  z = check_non_negative("noise_multiplier", z)
  return ZcdpBound(math.inf if z == 0 else 1.0 / (2.0 * z * z), True)


def _sampled(inner: ZcdpBound) -> ZcdpBound:
  """A sampled event: ``rho(inner)`` as an upper bound (module docstring)."""
  notes = tuple(sorted(set(inner.notes) | ({SAMPLING_NOTE} if inner.rho is not None
                                             else set())))
  return ZcdpBound(inner.rho, False, notes)


def _tree(event: dp_accounting.SingleEpochTreeAggregationDpEvent) -> ZcdpBound:
  """Tree aggregation with node noise z, one record in at most one step of its trees
  (dp_accounting's ``step_counts`` semantics): the record's leaf-to-root path of
  ``L = ceil(log2(T + 1))`` nodes (T: the largest tree's steps) is a Gaussian of
  sensitivity sqrt(L) (Kairouz et al., ICML 2021, arXiv 2103.00039, Sec. 4 and App. D),
  so ``rho = L / (2 z^2)``, exact (the RDP is ``alpha L / (2 z^2)``)."""
  steps = event.step_counts
  t = max(steps) if isinstance(steps, (list, tuple)) else steps
  if int(t) < 1:
    return ZcdpBound(0.0, True)
  depth = int(t).bit_length()  # ceil(log2(t + 1))
  z = check_non_negative("noise_multiplier", event.noise_multiplier)
  return ZcdpBound(math.inf if z == 0 else depth / (2.0 * z * z), True)


def zcdp_bound(event: Any) -> ZcdpBound:
  """The zCDP of a `dp_accounting.DpEvent`, walked structurally.

  * ``GaussianDpEvent(z)``: ``1 / (2 z^2)``, exact (inf for z = 0);
  * ``SelfComposedDpEvent(e, n)``: ``n rho(e)``; ``ComposedDpEvent``: the sum;
  * ``ZCDpEvent(rho, xi=0)``: rho, exact; with xi > 0 (approximate zCDP): None;
  * ``NoOpDpEvent``: 0; ``NonPrivateDpEvent``: inf;
  * ``SingleEpochTreeAggregationDpEvent(z, T)``: ``ceil(log2(T + 1)) / (2 z^2)``, exact;
  * ``PoissonSampledDpEvent``, ``SampledWithoutReplacementDpEvent``,
    ``VisibleParticipationDpEvent`` (any q), ``TruncatedSubsampledGaussianDpEvent``:
    rho of the unsampled mechanism, an upper bound (``exact`` False, `SAMPLING_NOTE`);
  * anything else (Laplace, randomized response, sampling with replacement,
    repeat-and-select, mixtures of Gaussians, unknown events): None with a note.

  Args:
    event: a `dp_accounting.DpEvent`.

  Returns:
    A `ZcdpBound`.

  Raises:
    FedJaxDpError: a negative noise multiplier or rho, or ``event`` not a DpEvent.
  """
  if not isinstance(event, dp_accounting.DpEvent):
    raise FedJaxDpError(f"event must be a dp_accounting.DpEvent, got "
                        f"{type(event).__name__}.", option="event")
  if isinstance(event, dp_accounting.NoOpDpEvent):
    return ZcdpBound(0.0, True)
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    return ZcdpBound(math.inf, True, ("non-private: no zCDP guarantee",))
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return _gaussian(event.noise_multiplier)
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return _add([zcdp_bound(event.event)], [int(event.count)])
  if isinstance(event, dp_accounting.ComposedDpEvent):
    parts = [zcdp_bound(e) for e in event.events]
    return _add(parts, [1] * len(parts)) if parts else ZcdpBound(0.0, True)
  if isinstance(event, dp_accounting.ZCDpEvent):
    if float(event.xi) != 0.0:
      return _none(f"(xi, rho)-zCDP with xi = {event.xi:g} > 0 is not rho-zCDP")
    return ZcdpBound(check_non_negative("rho", event.rho), True)
  if isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
    return _tree(event)
  if isinstance(event, (dp_accounting.PoissonSampledDpEvent,
                        dp_accounting.SampledWithoutReplacementDpEvent,
                        VisibleParticipationDpEvent)):
    return _sampled(zcdp_bound(event.event))
  if isinstance(event, dp_accounting.TruncatedSubsampledGaussianDpEvent):
    return _sampled(_gaussian(event.noise_multiplier))
  if isinstance(event, dp_accounting.SampledWithReplacementDpEvent):
    return _none("sampling with replacement can put a unit in a batch several times: "
                 "no rho is stated")
  return _none(f"{type(event).__name__} has no Gaussian structure this library states "
               "a zCDP rho for (e.g. Laplace, randomized response, Monte Carlo "
               "accounting): see epsilon instead")


def zcdp_rho(event: Any) -> Tuple[Optional[float], str]:
  """``(rho, note)`` of ``event`` (`zcdp_bound`): rho (float, inf, or None) and a note
  that says whether it is exact or an upper bound and why.

  Raises:
    FedJaxDpError: as `zcdp_bound`.
  """
  return _with_note(zcdp_bound(event))


def epsilon_from_rho(rho: float, delta: float) -> float:
  """``rho + 2 sqrt(rho log(1/delta))``: the epsilon at ``delta`` implied by rho-zCDP
  alone (Bun and Steinke 2016, Prop. 1.3); inf for rho = inf.

  Args:
    rho: rho >= 0 (nats).
    delta: in (0, 1).

  Raises:
    FedJaxDpError: rho negative or NaN, delta outside (0, 1).
  """
  if rho is None or (isinstance(rho, float) and math.isnan(rho)):
    raise FedJaxDpError(f"rho must be a number >= 0, got {rho!r}.", option="rho")
  if rho == math.inf:
    return math.inf
  rho = check_non_negative("rho", rho)
  delta = check_delta(delta)
  return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def ledger_zcdp(ledger: Any) -> ZcdpBound:
  """The zCDP of a run's guarantee ledger: ``zcdp_bound(ledger.dp_event())``; with
  groups of releases (`fedjax_dp.privacy.multi_release.MultiReleaseLedger`, a record
  in one group only), the largest group's; None (with a note) for a ledger that holds
  no DpEvent or accounts by Monte Carlo (``monte_carlo`` True). The truncation of padded Poisson draws is not in rho: a note says so
  when its probability is positive (the guarantee is then rho-zCDP except with that
  probability)."""
  if ledger is None:
    return ZcdpBound(math.inf, True, ("non-private: no zCDP guarantee",))
  if getattr(ledger, "monte_carlo", False) is True:
    return _none("Monte Carlo accounting (an estimated upper confidence bound on "
                 "epsilon, no composed Gaussian events): no rho is stated")
  groups = getattr(ledger, "groups", None)
  if callable(getattr(ledger, "group_event", None)) and groups and not callable(groups):
    bounds = [zcdp_bound(ledger.group_event(g)) for g in groups]
    if any(b.rho is None for b in bounds):
      b = ZcdpBound(None, False, tuple(sorted({n for x in bounds for n in x.notes})))
    else:
      b = max(bounds, key=lambda x: float(x.rho or 0.0))
  elif callable(getattr(ledger, "dp_event", None)):
    b = zcdp_bound(ledger.dp_event())
  else:
    return _none(f"{type(ledger).__name__} holds no DpEvent to state rho from")
  p = float(getattr(ledger, "truncation_probability", lambda: 0.0)() or 0.0)
  if p > 0 and b.rho is not None:
    b = dataclasses.replace(b, notes=b.notes + (
        f"rho ignores the probability {p:.3g} that a padded Poisson draw was truncated "
        "(it holds except with that probability, which delta_total adds)",))
  return b


def zcdp_summary_fields(ledger: Any, delta: float) -> Dict[str, Any]:
  """summary.json's zCDP fields of a run's guarantee ledger (`ledger_zcdp`):

  * ``rho_zcdp``: rho (float, nats), None where no rho is stated or non-private (JSON
    has no inf: a non-private run's is None with ``rho_zcdp_note`` saying so);
  * ``rho_zcdp_exact``: bool (see `ZcdpBound.exact`);
  * ``rho_zcdp_note``: what rho ignores, in words;
  * ``epsilon_from_rho``: `epsilon_from_rho` at ``delta`` (None with rho).
  """
  b = ledger_zcdp(ledger)
  rho = None if b.rho is None or not math.isfinite(b.rho) else float(b.rho)
  _, note = _with_note(b)
  return {"rho_zcdp": rho,
          "rho_zcdp_exact": bool(b.exact and rho is not None),
          "rho_zcdp_note": note,
          "epsilon_from_rho": None if rho is None else epsilon_from_rho(rho, delta)}


def _with_note(b: ZcdpBound) -> Tuple[Optional[float], str]:
  """``(rho, note)`` of a `ZcdpBound`: the note says "exact" when it is."""
  head = ("exact: Gaussian mechanism(s), RDP = rho * alpha at every order"
          if b.exact and b.rho is not None and math.isfinite(b.rho) else "")
  return b.rho, "; ".join(x for x in (head, b.note) if x)
