"""Several named DP releases per round, composed in one ledger.

Some algorithms release more than one noisy quantity per round, each with its own
sampling: federated MAML with record-level DP (RDP-PFL, IEEE TIFS 2023, Sec. III-A,
Eqs. 6-11) runs, in each of the tau0 local epochs of a round, an inner DP-SGD step on
the query set (Poisson rate q^Q) and an outer DP-SGD step on the support set (Poisson
rate q^S), both with the same noise multiplier z. Each kind is a *release* with a name
(``"inner"``, ``"outer"``); a round reports, per release, its noise multiplier,
sampling rate and number of noisy steps (`fedjax_dp.federated.round.RoundMetrics`
``releases``), and `MultiReleaseLedger` keeps one `PrivacyLedger` per release (each
with its own truncation model, since each stage pads its own Poisson draws) and
composes them all.

Every release of one ledger shares the sampler, the neighbouring relation and the
privacy unit (the same protected unit must be the one whose presence each release's
sensitivity bounds); only the rates, steps, noise multipliers and truncation differ.

Composition is never re-implemented: the RDP of the releases adds (RDP composes
additively over adaptively chosen mechanisms, Mironov 2017, arXiv:1702.07476,
Prop. 1) and is converted by dp_accounting's
`rdp_privacy_accountant.compute_epsilon`; PLD composes every release's events in one
`dp_accounting.pld.PLDAccountant`.

Groups. Not every record can influence every release: in RDP-PFL's
per-example modes a record is either in its client's query set (it enters the inner
release; the outer one sees it only through the already released noisy inner step,
post-processing) or in its support set (outer release only). ``groups`` lists, for each
position a record can hold, the releases it can influence; one record's guarantee is
the composition of its group's releases, and the ledger's epsilon is the largest over
the groups (RDP: each group's summed RDP vector converted on its own; PLD: each group's
events composed in their own accountant). A record in one group is absent from every
release outside it, whose output distribution is therefore the same in both neighbouring
datasets: the composition theorem applied to the releases of its group alone is the
record's guarantee. The default, one group of every release, is the plain composition of
everything (each record may influence every release). The truncation probability stays
the union bound over every release (conservative: only a record's own group's draws
matter to it).

The record layout: a release ``name`` appears in ``metrics.jsonl`` as the fields
``{name}_{metric}`` for each metric of `RELEASE_METRICS`, and its truncation model as
``{name}_truncation_{field}`` for each field of `RELEASE_TRUNCATION_FIELDS`
(`release_field`); names, fields and groups are checked by
`fedjax_dp.privacy.release_names` (re-exported here).
"""

from __future__ import annotations

import math
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, cast,
                    overload)

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from fedjax_dp.privacy.accountants import (ACCOUNTANTS, _check_pld_interval,
                                           _make_accountant, _raise_unsupported)
from fedjax_dp.privacy.events import (Truncation, dp_accounting_relation,
                                      neighboring_relation, truncation_delta)
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import (RELEASE_REPORT_FIELDS, PrivacyReport,
                                             check_report, release_field)
# Release names, record fields and groups live in `release_names` (re-exported here).
from fedjax_dp.privacy.release_names import (RELEASE_METRICS, RELEASE_TRUNCATION_FIELDS,
                                             check_groups, check_names, check_release_name,
                                             group_names)
from fedjax_dp.privacy.summary import PrivacySummary
from fedjax_dp.validation import FedJaxDpError, check_choice, check_delta, check_int

__all__ = ["RELEASE_METRICS", "RELEASE_TRUNCATION_FIELDS", "MultiReleaseLedger",
           "check_groups", "check_release_name", "release_field"]

_FORMAT = "fedjax_dp.MultiReleaseLedger"
_VERSION = 1


def _num_releases(ledger: PrivacyLedger) -> int:
  """Noisy releases composed by ``ledger`` (sum over rounds of ``dp_steps``)."""
  return sum(r["count"] * r["dp_steps"] for r in ledger.to_dict()["runs"])


class MultiReleaseLedger:
  """One `PrivacyLedger` per named release, all composed: the ledger of an algorithm
  whose rounds release several Poisson-subsampled Gaussian mechanisms (module
  docstring).

  Every round is recorded for every release (a round that does not run a release is
  not representable: report it with its own steps). Implements
  `fedjax_dp.privacy.ledger_protocol.Ledger` (reports with ``releases``). Epsilon is
  the largest over the ``groups`` (module docstring) of the composition of the group's
  releases over all recorded rounds; with the default single group, that of *all*
  releases composed.
  `group_epsilons` gives each group's, `release_epsilons` each release's own, for
  reporting how the budget is split.

  Costs are those of the release ledgers (`PrivacyLedger`): RDP per distinct event,
  cached; the per-round history adds the releases' cumulative RDP rows
  (`PrivacyLedger.rdp_history`, one row of ``len(orders)`` floats per round and release
  kept in memory) and converts each sum once (~0.2 ms per round). PLD composes every
  release's `dp_event()` in a fresh `PLDAccountant` per (delta, recorded state): seconds
  per distinct event at the default grid.

  Example::

    ledger = MultiReleaseLedger(["inner", "outer"], delta=1e-5, sampler="poisson")
    eps = ledger.record(PrivacyReport.from_releases(      # eps: float64 [L]
        {"inner": {"noise_multiplier": z, "sampling_rate": 0.1, "dp_steps": 2},
         "outer": {"noise_multiplier": z, "sampling_rate": 0.05, "dp_steps": 2}},
        len(z)))                                           # z: float [L]
    ledger.release_epsilons()                              # {"inner": ..., "outer": ...}
  """

  def __init__(self, release_names: Sequence[str], delta: float, *,
               truncations: Optional[Mapping[str, Optional[Truncation]]] = None,
               groups: Optional[Iterable[Iterable[str]]] = None,
               **ledger_kwargs: Any):
    """Creates an empty ledger.

    Args:
      release_names: distinct lowercase identifiers, one per release (order kept).
      delta: default target delta in (0, 1).
      truncations: ``{name: Truncation}`` for the releases whose Poisson draws are
        padded to a static cap (each release's own; absent or None: no truncation).
      groups: None (one group of every release: each record may influence every
        release, today's composition of everything), or a sequence of non-empty
        collections of release names, each the releases one record can influence in
        one of the positions it can hold (module docstring); together they must cover
        every release. Kept in release order, duplicates dropped.
      **ledger_kwargs: passed to every release's `PrivacyLedger`: ``orders``,
        ``sampler``, ``population_size``, ``cohort_size``, ``privacy_unit``,
        ``relation``, ``pld_value_discretization_interval`` (not ``truncation``).

    Raises:
      FedJaxDpError: invalid names, ``truncations`` keyed by an unknown release, a
        ``truncation`` argument, invalid ``groups`` (an unknown name, an empty group, a
        release in no group), or invalid ledger arguments.
    """
    names = check_names(release_names)
    groups_ = check_groups(groups, names)
    if "truncation" in ledger_kwargs:
      raise FedJaxDpError("MultiReleaseLedger takes truncations={release name: "
                          "Truncation}, not truncation= (each release pads its own "
                          "draws).", option="truncation")
    truncations = dict(truncations or {})
    unknown = sorted(set(truncations) - set(names), key=str)
    if unknown:
      raise FedJaxDpError(f"truncations must be keyed by release names {list(names)}, "
                          f"got unknown key(s) {unknown!r}.", option="truncations")
    ledgers = {n: PrivacyLedger(delta, truncation=truncations.get(n), **ledger_kwargs)
               for n in names}
    self._setup(names, ledgers, groups_)

  def _setup(self, names: Tuple[str, ...], ledgers: Dict[str, PrivacyLedger],
             groups: Tuple[Tuple[str, ...], ...]) -> None:
    self._names = names
    self._ledgers = ledgers
    self._groups = groups
    first = ledgers[names[0]].to_dict()
    self._delta: float = first["delta"]
    self._pld_interval = _check_pld_interval(first["pld_value_discretization_interval"])
    self._privacy_unit = first["privacy_unit"]
    self._relation_text = neighboring_relation(first["sampler"], first["privacy_unit"],
                                               first["relation"])[1]
    self._version = 0
    self._history: Dict[float, List[float]] = {}
    self._pld_results: Dict[Tuple[Tuple[str, ...], float, int], float] = {}

  # -- properties ------------------------------------------------------------

  @property
  def release_names(self) -> Tuple[str, ...]:
    """The releases' names, in order."""
    return self._names

  @property
  def groups(self) -> Tuple[Tuple[str, ...], ...]:
    """The release groups (module docstring): each the releases one record can
    influence; ``(release_names,)`` by default."""
    return self._groups

  @property
  def delta(self) -> float:
    """The default target delta."""
    return self._delta

  @property
  def orders(self) -> Tuple[float, ...]:
    """The RDP orders (shared by every release)."""
    return self._ledgers[self._names[0]].orders

  @property
  def sampler(self) -> str:
    """The sampler (shared by every release)."""
    return self._ledgers[self._names[0]].sampler

  @property
  def neighboring_relation(self) -> str:
    """The relation (one of `RELATIONS`) every release's noise multiplier is relative
    to."""
    return self._ledgers[self._names[0]].neighboring_relation

  @property
  def truncations(self) -> Dict[str, Optional[Truncation]]:
    """``{name: Truncation or None}``."""
    return {n: l.truncation for n, l in self._ledgers.items()}

  @property
  def num_rounds(self) -> int:
    """Rounds recorded so far (every release holds every round)."""
    return self._ledgers[self._names[0]].num_rounds

  def release(self, name: str) -> PrivacyLedger:
    """The `PrivacyLedger` of release ``name`` alone (do not record into it: record
    through this ledger so that every release holds every round).

    Raises:
      FedJaxDpError: an unknown name.
    """
    if name not in self._ledgers:
      raise FedJaxDpError(f"name must be one of the releases {list(self._names)}, got "
                          f"{name!r}.", option="name")
    return self._ledgers[name]

  def dp_event(self) -> dp_accounting.ComposedDpEvent:
    """All rounds of all releases: ``ComposedDpEvent([release.dp_event(), ...])``
    (composition is commutative, so grouping by release gives the same guarantee). With
    several `groups` this is an upper bound on every group's event (the guarantee is the
    worst group's, `group_event`); with the default single group it is the guarantee's."""
    return self.group_event(self._names)

  def group_event(self, group: Iterable[str]) -> dp_accounting.ComposedDpEvent:
    """All rounds of the releases ``group`` (names, e.g. one of `groups`):
    ``ComposedDpEvent([release.dp_event(), ...])`` in release order.

    Raises:
      FedJaxDpError: an unknown or empty group.
    """
    names = group_names(group, self._names)
    return dp_accounting.ComposedDpEvent([self._ledgers[n].dp_event() for n in names])

  def supports(self, accountant: str) -> bool:
    """Whether ``epsilon(accountant=...)`` is available (every release must support
    it; PLD has no sampling without replacement)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    return all(l.supports(accountant) for l in self._ledgers.values())

  def unit_epsilons(self, accountant: str = "rdp") -> None:
    """None: one protected unit's composition (`Ledger`; `group_epsilons` and
    `release_epsilons` split it)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    return None

  # -- recording -------------------------------------------------------------

  def _by_release(self, arg: str, values: Any) -> Dict[str, Any]:
    """``values`` checked to be a mapping keyed by exactly the release names."""
    if not isinstance(values, Mapping):
      raise FedJaxDpError(f"{arg} must be a dict keyed by the release names "
                          f"{list(self._names)}, got a {type(values).__name__}.",
                          option=arg)
    keys = set(values)
    if keys != set(self._names):
      missing = [n for n in self._names if n not in keys]
      unknown = sorted((k for k in keys if k not in self._names), key=str)
      raise FedJaxDpError(f"{arg} must be keyed by exactly the release names "
                          f"{list(self._names)}; missing {missing!r}, unknown "
                          f"{unknown!r}.", option=arg)
    return dict(values)

  def _transaction(self, record_one) -> None:
    """Runs ``record_one(ledger, name)`` for every release; if one raises, the releases
    already recorded are restored (`PrivacyLedger.to_dict` round-trips exactly), so
    nothing is recorded on error."""
    saved = {n: self._ledgers[n].to_dict() for n in self._names}
    rounds = self.num_rounds
    try:
      for n in self._names:
        try:
          record_one(self._ledgers[n], n)
        except FedJaxDpError as err:
          raise FedJaxDpError(f"release {n!r}: {err}", option=err.option) from err
    except BaseException:
      for n in self._names:
        if self._ledgers[n].num_rounds != rounds:  # recorded before the failure
          self._ledgers[n] = PrivacyLedger.from_dict(saved[n])
      raise
    self._version += 1

  @overload
  def record(self, report: PrivacyReport, /) -> np.ndarray: ...

  @overload
  def record(self, noise_multipliers: Mapping[str, Any], sampling_rates: Mapping[str, Any],
             dp_steps: Mapping[str, Any], count: int = 1) -> None: ...

  def record(self, noise_multipliers: Any, sampling_rates: Any = None,
             dp_steps: Any = None, count: int = 1) -> Optional[np.ndarray]:
    """``record(report)``, the `Ledger` hook: composes a `PrivacyReport` with
    ``releases`` (`record_many` of their fields; no per-client noise multipliers) and
    returns float64 ``[R]``, the epsilon after each round (`epsilon_history`).
    ``record(zs, qs, steps, count=1)``: records ``count`` identical rounds of every
    release, returns None.

    Args:
      noise_multipliers: a `PrivacyReport`, or ``{name: z >= 0}`` (noise std / L2
        sensitivity under the ledger's relation), one entry per release.
      sampling_rates: ``{name: q in (0, 1]}`` (not with a report).
      dp_steps: ``{name: int >= 1}`` noisy releases of that kind in the round.
      count: number of identical rounds (int >= 1).

    Raises:
      FedJaxDpError: a report without releases (naming the ledger to use,
        `check_report`), a dict not keyed by exactly the release names (naming the
        argument), or any value out of range (naming the release and the argument).
        Nothing is recorded on error.
    """
    if sampling_rates is None:
      report = check_report(noise_multipliers, "MultiReleaseLedger",
                            release_names=self._names)
      return self.record_many(*({n: v[f] for n, v in report.releases.items()}
                                for f in RELEASE_REPORT_FIELDS))
    zs = self._by_release("noise_multipliers", noise_multipliers)
    qs = self._by_release("sampling_rates", sampling_rates)
    ss = self._by_release("dp_steps", dp_steps)
    count = check_int("count", count, minimum=1)
    self._transaction(lambda l, n: l.record(zs[n], qs[n], ss[n], count))
    return None

  def record_many(self, noise_multipliers: Mapping[str, Any],
                  sampling_rates: Mapping[str, Any],
                  dp_steps: Mapping[str, Any]) -> np.ndarray:
    """Records L rounds of every release (e.g. a block of jitted rounds) and returns
    the epsilon after each.

    Args:
      noise_multipliers: ``{name: 1-D [L] z >= 0}`` (float32 from the device is
        converted exactly to float64), the same L for every release.
      sampling_rates: ``{name: [L] or scalar q in (0, 1]}``.
      dp_steps: ``{name: [L] or scalar int >= 1}``.

    Returns:
      float64 ``[L]``: the RDP epsilon, at the ledger's delta, of all releases of all
      rounds composed, after each recorded round (``epsilon_history()[-L:]``).

    Raises:
      FedJaxDpError: a dict not keyed by exactly the release names, releases of
        different lengths, or entries out of range (the message names the argument,
        the release and the index). Nothing is recorded on error.
    """
    zs = self._by_release("noise_multipliers", noise_multipliers)
    qs = self._by_release("sampling_rates", sampling_rates)
    ss = self._by_release("dp_steps", dp_steps)
    shapes = {n: np.shape(zs[n]) for n in self._names}
    for n, shape in shapes.items():
      if len(shape) != 1:
        raise FedJaxDpError(f"noise_multipliers[{n!r}] must be a 1-D array (one entry "
                            f"per round), got shape {shape}.", option="noise_multipliers")
    if len({s[0] for s in shapes.values()}) > 1:
      raise FedJaxDpError(f"noise_multipliers must hold the same number of rounds for "
                          f"every release, got lengths "
                          f"{ {n: s[0] for n, s in shapes.items()} }.",
                          option="noise_multipliers")
    start = self.num_rounds
    self._transaction(lambda l, n: l.record(PrivacyReport(zs[n], qs[n], ss[n])))
    return self.epsilon_history(start=start)

  # -- truncation ------------------------------------------------------------

  def truncation_probability(self) -> float:
    """Union bound on the probability that any padded Poisson draw of any release was
    truncated: the sum of the releases' (each a union bound over its rounds), capped
    at 1."""
    return min(1.0, sum(l.truncation_probability() for l in self._ledgers.values()))

  def delta_total(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The delta of the guarantee: ``delta + (1 + e^epsilon) p`` with p the
    `truncation_probability` (`fedjax_dp.privacy.events.truncation_delta`)."""
    delta = self._delta if delta is None else check_delta(delta)
    p = self.truncation_probability()
    if p == 0.0:
      return delta
    return delta + truncation_delta(self.epsilon(delta, accountant), p)

  # -- RDP -------------------------------------------------------------------

  def rdp(self, group: Optional[Iterable[str]] = None) -> np.ndarray:
    """RDP at `orders` of every round of the releases of ``group`` (release names): the
    sum of their RDP vectors (float64 ``[len(orders)]``). None: the group whose epsilon
    at the ledger's delta is the ledger's (`worst_group`); with the default single
    group, the sum over every release.

    Raises:
      FedJaxDpError: an unknown or empty group.
    """
    if group is None:
      group = self.worst_group()
    total = np.zeros(len(self.orders), dtype=np.float64)
    for n in group_names(group, self._names):
      total += self._ledgers[n].rdp()
    return total

  def _rdp_epsilon_of(self, group: Tuple[str, ...], delta: float) -> float:
    eps, _ = rdp_privacy_accountant.compute_epsilon(self.orders, cast(Any, self.rdp(group)),
                                                    delta)
    return float(eps)

  def epsilon_history(self, delta: Optional[float] = None, start: int = 0) -> np.ndarray:
    """RDP epsilon after each recorded round ``start, ..., num_rounds - 1``: round t's
    is the largest over the `groups` of the epsilon of the sum of the group's releases'
    cumulative RDP after round t (`PrivacyLedger.rdp_history`), exactly as `epsilon`
    would give had the ledger stopped there; the last entry equals ``epsilon(delta)``.
    Cached per delta.

    Args:
      delta: target delta in (0, 1); default the ledger's.
      start: first round to return (0 <= start <= num_rounds).

    Returns:
      float64 ``[num_rounds - start]``, non-decreasing.

    Raises:
      FedJaxDpError: invalid ``delta`` or ``start``.
    """
    delta = self._delta if delta is None else check_delta(delta)
    start = check_int("start", start, minimum=0, maximum=self.num_rounds)
    hist = self._history.setdefault(delta, [])
    done = len(hist)
    if done < self.num_rounds:
      per_release = {n: self._ledgers[n].rdp_history(start=done) for n in self._names}
      worst = np.full(self.num_rounds - done, -np.inf)
      for group in self._groups:
        rows = np.zeros((self.num_rounds - done, len(self.orders)), dtype=np.float64)
        for n in group:
          rows += per_release[n]
        for i, row in enumerate(rows):
          eps, _ = rdp_privacy_accountant.compute_epsilon(self.orders, cast(Any, row), delta)
          worst[i] = max(worst[i], float(eps))
      hist.extend(float(e) for e in worst)
    return np.asarray(hist[start:self.num_rounds], dtype=np.float64)

  # -- queries ---------------------------------------------------------------

  def _pld_epsilon(self, group: Tuple[str, ...], delta: float) -> float:
    key = (group, delta, self._version)
    if key not in self._pld_results:
      eps_rdp = self._rdp_epsilon_of(group, delta)
      # As `PrivacyLedger`: a coarser (still pessimistic) grid for huge epsilons.
      interval = (max(self._pld_interval, eps_rdp * 1e-6) if math.isfinite(eps_rdp)
                  else self._pld_interval)
      event = self.group_event(group)
      acc = _make_accountant("pld", dp_accounting_relation(event), None, interval)
      self._pld_results[key] = float(acc.compose(event).get_epsilon(delta))
    return self._pld_results[key]

  def group_epsilons(self, delta: Optional[float] = None, accountant: str = "rdp"
                     ) -> Tuple[float, ...]:
    """The epsilon of each of `groups` (in order): the composition of the group's
    releases over every recorded round (see `epsilon` for the arguments and errors)."""
    delta = self._delta if delta is None else check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    if not self.supports(accountant):
      _raise_unsupported()
    if self.num_rounds == 0:
      return tuple(0.0 for _ in self._groups)
    if accountant == "pld":
      return tuple(self._pld_epsilon(g, delta) for g in self._groups)
    return tuple(self._rdp_epsilon_of(g, delta) for g in self._groups)

  def worst_group(self, delta: Optional[float] = None, accountant: str = "rdp"
                  ) -> Tuple[str, ...]:
    """The group whose epsilon is the ledger's (the first of equal ones)."""
    eps = self.group_epsilons(delta, accountant)
    return self._groups[int(np.argmax(eps))]

  def epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """Epsilon of the recorded rounds: the largest over the `groups` of the epsilon of
    the group's releases composed (with the default single group: every release of
    every recorded round).

    RDP: dp_accounting's ``compute_epsilon(orders, rdp(group), delta)`` on each group's
    summed RDP. PLD: one `dp_accounting.pld.PLDAccountant` per group composing
    `group_event(group)`.

    Args:
      delta: target delta in (0, 1); default the ledger's.
      accountant: ``"rdp"`` or ``"pld"``.

    Returns:
      epsilon (float): 0.0 for an empty ledger, ``inf`` if a release had z == 0.

    Raises:
      FedJaxDpError: invalid ``delta`` / ``accountant``.
    """
    delta = self._delta if delta is None else check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    if not self.supports(accountant):
      _raise_unsupported()
    if self.num_rounds == 0:
      return 0.0
    return float(max(self.group_epsilons(delta, accountant)))

  def release_epsilons(self, accountant: str = "rdp", delta: Optional[float] = None
                       ) -> Dict[str, float]:
    """``{name: epsilon of that release alone}`` (for reporting how the budget is
    split; the guarantee is `epsilon`, at least their largest and never more than their
    sum).

    Raises:
      FedJaxDpError / UnsupportedAccountingError: as `epsilon`.
    """
    return {n: self._ledgers[n].epsilon(delta, accountant) for n in self._names}

  def summary(self, accountant: str = "rdp", delta: Optional[float] = None
              ) -> PrivacySummary:
    """A `PrivacySummary` of every release of every recorded round (its epsilon is
    `epsilon`'s, the worst group's; ``num_releases``: the noisy releases of all kinds;
    see `epsilon` for the arguments)."""
    eps = self.epsilon(delta, accountant)
    delta = self._delta if delta is None else float(delta)
    return PrivacySummary(
        privacy_unit=f"{self._privacy_unit}-level",
        neighboring_relation=self._relation_text, sampler=self.sampler,
        accountant=accountant, epsilon=eps, delta=delta, num_rounds=self.num_rounds,
        num_releases=sum(_num_releases(l) for l in self._ledgers.values()),
        truncation_probability=self.truncation_probability(),
        delta_total=self.delta_total(delta, accountant))

  # -- serialisation ---------------------------------------------------------

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state; `from_dict` restores an identical ledger (each
    release's `PrivacyLedger.to_dict`, exact, and the `groups`)."""
    return {"format": _FORMAT, "version": _VERSION, "release_names": list(self._names),
            "groups": [list(g) for g in self._groups],
            "ledgers": {n: self._ledgers[n].to_dict() for n in self._names}}

  @classmethod
  def from_dict(cls, state: Dict[str, Any]) -> "MultiReleaseLedger":
    """Inverse of `to_dict` (a state without ``groups``, written by an older version,
    restores the default single group: the composition it was written with).

    Raises:
      FedJaxDpError: not a multi-release ledger dict, invalid groups, or release ledgers
        that differ in anything but their truncation and runs, or in their number of
        rounds.
    """
    if not isinstance(state, dict) or state.get("format") != _FORMAT or \
        state.get("version") != _VERSION:
      raise FedJaxDpError(f"state must come from MultiReleaseLedger.to_dict() (format "
                          f"{_FORMAT!r}, version {_VERSION}).", option="state")
    names = check_names(state.get("release_names"))
    groups = check_groups(state.get("groups"), names)
    dicts = state.get("ledgers")
    if not isinstance(dicts, dict) or set(dicts) != set(names):
      raise FedJaxDpError(f"state['ledgers'] must hold one ledger per release "
                          f"{list(names)}.", option="state")
    shared = lambda d: {k: v for k, v in d.items() if k not in ("truncation", "runs")}
    if any(shared(dicts[n]) != shared(dicts[names[0]]) for n in names):
      raise FedJaxDpError("state['ledgers'] differ in their shared settings (delta, "
                          "orders, sampler, relation, sizes, unit, PLD grid).",
                          option="state")
    ledgers = {n: PrivacyLedger.from_dict(dicts[n]) for n in names}
    if len({l.num_rounds for l in ledgers.values()}) > 1:
      raise FedJaxDpError("state['ledgers'] hold different numbers of rounds.",
                          option="state")
    out = cls.__new__(cls)
    out._setup(names, ledgers, groups)
    return out

  def __repr__(self) -> str:
    groups = ("" if self._groups == (self._names,) else
              f", groups={[list(g) for g in self._groups]}")
    return (f"MultiReleaseLedger(releases={list(self._names)}{groups}, "
            f"sampler={self.sampler!r}, delta={self._delta!r}, rounds={self.num_rounds})")
