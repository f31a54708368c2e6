"""One protocol for every privacy ledger, and the report of rounds it composes.

A *ledger* composes what a run's rounds reported and says what epsilon that spends. The
package has one ledger per kind of mechanism:

* `fedjax_dp.privacy.ledger.PrivacyLedger`: one release per round (each round one
  Poisson-subsampled, fixed-size or unamplified Gaussian event, possibly repeated);
* `fedjax_dp.privacy.multi_release.MultiReleaseLedger`: several named releases per round
  (`PrivacyReport.releases`), composed (per group of releases a record can influence);
* `fedjax_dp.privacy.per_client.PerClientLedger`: a noise multiplier per client
  (`PrivacyReport.client_noise_multipliers`), every client accounted in every round;
* `fedjax_dp.privacy.device_ledger.DeviceLedger`: per-device unamplified Gaussian
  releases (+inf: no release), optionally a privacy filter;
* `fedjax_dp.privacy.correlated_ledger.CorrelatedNoiseLedger`: rounds whose noise is
  correlated across rounds (DP-FTRL's tree, banded matrix factorisation), one event for
  the whole run.

Each implements `Ledger`, the only interface the engine uses (the driver, the run loop,
the resumption of a run, the canary audit): ``record(report)`` composes a
`PrivacyReport` of consecutive rounds and returns the epsilon after each; ``epsilon``
is the run's guarantee (for per-unit ledgers the worst unit's); ``unit_epsilons`` every
unit's where units exist; ``supports``, ``to_dict`` / ``from_dict``. A ledger refuses a
report it cannot compose (several releases into a single-release ledger, per-client
noise multipliers into a `PrivacyLedger`, ...) with a `FedJaxDpError` naming the ledger
that can, so the caller never inspects a ledger's type to feed it.

The design follows dp_accounting's ``PrivacyAccountant`` (one hook, ``compose(event)``,
then ``get_epsilon(delta)``), with one difference: what is composed is what the rounds
*reported* (noise multipliers, sampling rates, steps), not a ``DpEvent``; each ledger
builds the events itself under the sampler, relation and observation it was made with
(`fedjax_dp.privacy.events`), so a caller cannot compose an event under a relation the
noise multipliers are not relative to.
"""

from __future__ import annotations

import dataclasses
from typing import (Any, Dict, Iterable, Mapping, Optional, Protocol, Sequence,
                    runtime_checkable)

import numpy as np

from fedjax_dp.validation import FedJaxDpError

__all__ = ["RELEASE_REPORT_FIELDS", "PrivacyReport", "Ledger", "check_report",
           "release_field"]

#: What a report holds for each release (``PrivacyReport.releases[name]``'s keys).
RELEASE_REPORT_FIELDS = ("noise_multiplier", "sampling_rate", "dp_steps")
_MISSING = object()


def release_field(name: str, metric: str) -> str:
  """The record field of release ``name``'s ``metric`` (one of
  `fedjax_dp.privacy.multi_release.RELEASE_METRICS`, or ``"truncation_" + f`` for ``f``
  in `fedjax_dp.privacy.multi_release.RELEASE_TRUNCATION_FIELDS`): ``f"{name}_{metric}"``."""
  return f"{name}_{metric}"


def _numeric(field: str, values: Any) -> np.ndarray:
  try:
    arr = np.array(values)  # a copy: the report's arrays are read-only
  except Exception as err:  # ragged lists and the like
    raise FedJaxDpError(f"PrivacyReport.{field} must be a numeric array, got "
                        f"{type(values).__name__} ({err}).", option=field) from err
  if arr.dtype.kind not in "biuf":
    raise FedJaxDpError(f"PrivacyReport.{field} must be numeric, got dtype {arr.dtype}.",
                        option=field)
  return arr


def _rounds_vector(field: str, values: Any, rounds: Optional[int]) -> np.ndarray:
  """``values`` as float64 ``[rounds]`` (a scalar is broadcast when ``rounds`` is known)."""
  arr = _numeric(field, values).astype(np.float64)
  if arr.ndim == 0 and rounds is not None:
    arr = np.full(rounds, arr)
  if arr.ndim != 1 or (rounds is not None and arr.shape[0] != rounds):
    want = "[rounds]" if rounds is None else f"[{rounds}] (one entry per round)"
    raise FedJaxDpError(f"PrivacyReport.{field} must have shape {want}, got shape "
                        f"{arr.shape}.", option=field)
  return arr


def _steps_vector(field: str, values: Any, rounds: int) -> np.ndarray:
  """``values`` as int64 ``[rounds]``; integer-valued floats are accepted (the ledgers
  check the range)."""
  arr = _rounds_vector(field, values, rounds)
  ok = np.isfinite(arr) & (arr == np.round(arr))
  if not ok.all():
    i = int(np.argmin(ok))
    raise FedJaxDpError(f"PrivacyReport.{field}[{i}] must be an integer, got {arr[i]!r}.",
                        option=field)
  return arr.astype(np.int64)


def _frozen(arr: np.ndarray) -> np.ndarray:
  arr.setflags(write=False)
  return arr


@dataclasses.dataclass(frozen=True, eq=False)
class PrivacyReport:
  """What one or more consecutive rounds reported for accounting, as host numpy arrays
  with a leading ``[rounds]`` axis (R rounds); `Ledger.record` composes it.

  Every noise multiplier is ``noise_stddev / sensitivity`` under the relation of the
  ledger it is recorded in (`fedjax_dp.privacy.events`); the report never rescales.

  Attributes:
    noise_multiplier: float64 ``[R]``, each round's z (with ``releases``: the smallest
      of the releases', a summary; with ``client_noise_multipliers``: the smallest over
      the population).
    sampling_rate: float64 ``[R]``, each round's q (a scalar is broadcast).
    dp_steps: int64 ``[R]``, noisy releases composed in each round (a scalar is
      broadcast; integer-valued floats are accepted).
    client_noise_multipliers: float64 ``[R, N]``, client i's noise multiplier in each
      round (per-client noise, `fedjax_dp.privacy.per_client.PerClientLedger`; +inf: the
      client released nothing that round, `fedjax_dp.privacy.device_ledger.DeviceLedger`),
      or None.
    releases: ``{name: {"noise_multiplier", "sampling_rate", "dp_steps"}}``, each float64
      ``[R]`` (``dp_steps`` int64; scalars are broadcast) for rounds that make several
      named releases (`fedjax_dp.privacy.multi_release.MultiReleaseLedger`), or None.

  Value ranges (z >= 0, q in (0, 1], steps >= 1) are checked by the ledger that records
  the report, which names the offending index.

  Raises:
    FedJaxDpError: on construction, naming the field: a non-numeric array, a shape that
      is not ``[R]`` (``[R, N]``), non-integer ``dp_steps``, or releases that are not a
      non-empty dict of dicts holding exactly `RELEASE_REPORT_FIELDS`.
  """
  noise_multiplier: Any
  sampling_rate: Any
  dp_steps: Any
  client_noise_multipliers: Any = None
  releases: Any = None

  def __post_init__(self):
    z = _rounds_vector("noise_multiplier", self.noise_multiplier, None)
    rounds = z.shape[0]
    values: Dict[str, Any] = {
        "noise_multiplier": _frozen(z),
        "sampling_rate": _frozen(_rounds_vector("sampling_rate", self.sampling_rate,
                                                rounds)),
        "dp_steps": _frozen(_steps_vector("dp_steps", self.dp_steps, rounds))}
    if self.client_noise_multipliers is not None:
      c = _numeric("client_noise_multipliers", self.client_noise_multipliers)
      if c.ndim != 2 or c.shape[0] != rounds:
        raise FedJaxDpError(f"PrivacyReport.client_noise_multipliers must have shape "
                            f"[{rounds}, num_clients] (one row per round), got shape "
                            f"{c.shape}.", option="client_noise_multipliers")
      values["client_noise_multipliers"] = _frozen(c.astype(np.float64))
    if self.releases is not None:
      values["releases"] = _check_releases(self.releases, rounds)
    for k, v in values.items():
      object.__setattr__(self, k, v)

  @property
  def num_rounds(self) -> int:
    """R, the rounds the report holds."""
    return int(self.noise_multiplier.shape[0])

  @property
  def release_names(self) -> Optional[tuple]:
    """The releases' names (in the report's order), or None."""
    return None if self.releases is None else tuple(self.releases)

  @classmethod
  def from_releases(cls, releases: Mapping[str, Mapping[str, Any]], rounds: int
                    ) -> "PrivacyReport":
    """A report of ``rounds`` rounds of named releases, its top-level fields the summary
    a round reports (`fedjax_dp.federated.round.RoundMetrics`): the smallest noise
    multiplier, the largest sampling rate and the total steps over the releases.

    Args:
      releases: ``{name: {"noise_multiplier", "sampling_rate", "dp_steps"}}``, each
        ``[rounds]`` or a scalar.
      rounds: R >= 0.

    Raises:
      FedJaxDpError: as the constructor.
    """
    checked = _check_releases(releases, int(rounds))
    cols = {f: np.stack([checked[n][f] for n in checked]) for f in RELEASE_REPORT_FIELDS}
    return cls(cols["noise_multiplier"].min(axis=0), cols["sampling_rate"].max(axis=0),
               cols["dp_steps"].sum(axis=0), releases=checked)

  @classmethod
  def from_records(cls, records: Sequence[Mapping[str, Any]],
                   release_names: Optional[Iterable[str]] = None) -> "PrivacyReport":
    """A report of the rounds of ``records`` (metrics.jsonl-like dicts, one per round):
    their ``noise_multiplier``, ``sampling_rate`` and ``dp_steps``, and with
    ``release_names`` each release's fields ``{name}_{field}`` (`release_field`).
    Per-client noise multipliers are not in records (the run keeps its per-client
    ledger's `Ledger.to_dict` instead).

    Raises:
      FedJaxDpError: a record without one of those fields (naming the record and the
        field), or what the constructor raises.
    """
    records = list(records)

    def column(field: str, what: str) -> list:
      for i, r in enumerate(records):
        if field not in r:
          raise FedJaxDpError(f"records[{i}] has no field {field!r}: the records do not "
                              f"come from a run that reports {what}.", option="records")
      return [r[field] for r in records]

    top = [column(f, "one release per round") for f in RELEASE_REPORT_FIELDS]
    releases = None
    if release_names is not None:
      names = list(release_names)
      releases = {n: {f: column(release_field(n, f), f"the releases {names}")
                      for f in RELEASE_REPORT_FIELDS} for n in names}
    return cls(*top, releases=releases)

  @classmethod
  def from_metrics(cls, metrics: Any) -> "PrivacyReport":
    """A report of a block's rounds from the engine's stacked per-round metrics (an
    object with the attributes ``noise_multiplier``, ``sampling_rate``, ``dp_steps``
    (each ``[R]``), ``client_noise_multipliers`` (``[R, N]`` or None) and ``releases``
    (``{name: {field: [R]}}`` or None; fields other than `RELEASE_REPORT_FIELDS`, e.g.
    ``noise_stddev``, are left out), e.g. `fedjax_dp.federated.round.RoundMetrics`).
    Device arrays are copied to the host; float32 values convert exactly to float64.

    Raises:
      FedJaxDpError: a missing attribute or release field, or what the constructor
        raises.
    """
    got = {}
    for name in ("noise_multiplier", "sampling_rate", "dp_steps",
                 "client_noise_multipliers", "releases"):
      got[name] = getattr(metrics, name, _MISSING)
      if got[name] is _MISSING:
        raise FedJaxDpError(f"metrics must have the attribute {name!r} (the engine's "
                            f"RoundMetrics), got a {type(metrics).__name__}.",
                            option="metrics")
    releases = got.pop("releases")
    if releases is not None:
      if not isinstance(releases, Mapping):
        raise FedJaxDpError(f"metrics.releases must be a dict {{name: {{field: "
                            f"value}}}} or None, got {type(releases).__name__}.",
                            option="releases")
      for n, fields in releases.items():
        missing = [f for f in RELEASE_REPORT_FIELDS
                   if not isinstance(fields, Mapping) or f not in fields]
        if missing:
          raise FedJaxDpError(f"metrics.releases[{n!r}] must hold {missing}.",
                              option="releases")
      releases = {n: {f: np.asarray(fields[f]) for f in RELEASE_REPORT_FIELDS}
                  for n, fields in releases.items()}
    return cls(*(np.asarray(got[f]) for f in RELEASE_REPORT_FIELDS),
               client_noise_multipliers=(None if got["client_noise_multipliers"] is None
                                         else np.asarray(got["client_noise_multipliers"])),
               releases=releases)

  def rows(self, keep: Any) -> "PrivacyReport":
    """The report of the rounds ``keep`` selects (a boolean ``[R]`` mask, indices or a
    slice), in every field."""
    keep = keep if isinstance(keep, slice) else np.asarray(keep)
    releases = (None if self.releases is None else
                {n: {f: v[keep] for f, v in fields.items()}
                 for n, fields in self.releases.items()})
    client = (None if self.client_noise_multipliers is None
              else self.client_noise_multipliers[keep])
    return PrivacyReport(self.noise_multiplier[keep], self.sampling_rate[keep],
                         self.dp_steps[keep], client, releases)

  def __repr__(self) -> str:
    extra = ("" if self.client_noise_multipliers is None else
             f", clients={self.client_noise_multipliers.shape[1]}")
    if self.releases is not None:
      extra += f", releases={list(self.releases)}"
    return f"PrivacyReport(rounds={self.num_rounds}{extra})"


def _check_releases(releases: Any, rounds: int) -> Dict[str, Dict[str, np.ndarray]]:
  """``releases`` as ``{name: {field: read-only [rounds] array}}``."""
  if not isinstance(releases, Mapping) or not releases:
    raise FedJaxDpError(f"PrivacyReport.releases must be a non-empty dict {{name: "
                        f"{{field: [rounds]}}}} or None, got {releases!r}.",
                        option="releases")
  out: Dict[str, Dict[str, np.ndarray]] = {}
  for name, fields in releases.items():
    if not isinstance(name, str) or not isinstance(fields, Mapping) or \
        set(fields) != set(RELEASE_REPORT_FIELDS):
      got = sorted(fields) if isinstance(fields, Mapping) else type(fields).__name__
      raise FedJaxDpError(f"PrivacyReport.releases[{name!r}] must be a dict with exactly "
                          f"the keys {list(RELEASE_REPORT_FIELDS)}, got {got}.",
                          option="releases")
    where = f"releases[{name!r}]"
    out[name] = {
        "noise_multiplier": _frozen(_rounds_vector(f"{where}['noise_multiplier']",
                                                   fields["noise_multiplier"], rounds)),
        "sampling_rate": _frozen(_rounds_vector(f"{where}['sampling_rate']",
                                                fields["sampling_rate"], rounds)),
        "dp_steps": _frozen(_steps_vector(f"{where}['dp_steps']", fields["dp_steps"],
                                          rounds))}
  return out


@runtime_checkable
class Ledger(Protocol):
  """What every ledger of the package is (module docstring); the engine uses nothing
  else of a ledger.

  ``isinstance(x, Ledger)`` checks that the methods exist (`typing.runtime_checkable`),
  not their signatures; pyright checks those.
  """

  def record(self, report: PrivacyReport, /) -> np.ndarray:
    """Composes the report's rounds after those already recorded.

    Returns:
      float64 ``[report.num_rounds]``: the epsilon after each round, at the ledger's
      delta with its default accountant (RDP), as `epsilon` would give had the ledger
      stopped there (for per-unit ledgers: the worst unit's).

    Raises:
      FedJaxDpError: a report this ledger cannot compose (naming the ledger that can),
        wrong shapes or values out of range. Nothing is recorded on error.
    """
    ...

  def epsilon(self, *, accountant: str = "rdp") -> float:
    """The run's epsilon at the ledger's delta under ``accountant`` (``"rdp"`` or
    ``"pld"``): 0 before the first round, inf if a round had no noise; for per-unit
    ledgers the worst unit's.

    Raises:
      FedJaxDpError: an unknown accountant; `UnsupportedAccountingError` where it
        cannot account for the events (`supports`).
    """
    ...

  def unit_epsilons(self, accountant: str = "rdp") -> Optional[np.ndarray]:
    """float64 ``[N]``: every unit's epsilon (per-client or per-device ledgers), or None
    for ledgers of one protected unit's composition."""
    ...

  def supports(self, accountant: str) -> bool:
    """Whether ``epsilon(accountant=accountant)`` is available.

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    ...

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state; ``type(ledger).from_dict`` restores an identical
    ledger."""
    ...

  @classmethod
  def from_dict(cls, state: Dict[str, Any], /) -> "Ledger":
    """Inverse of `to_dict`.

    Raises:
      FedJaxDpError: not this ledger's dict.
    """
    ...


def check_report(report: Any, ledger: str, *, release_names: Optional[Sequence[str]] = None,
                 per_client: str = "refused") -> PrivacyReport:
  """``report`` checked to be a `PrivacyReport` that a ``ledger`` (its class name) can
  compose; every `Ledger.record` starts with it.

  Args:
    report: what was given to ``record``.
    ledger: the recording ledger's class name (for the messages).
    release_names: the ledger's releases (a `MultiReleaseLedger`: the report must hold
      releases), or None (the report must not).
    per_client: ``"refused"`` (no ``client_noise_multipliers``), ``"optional"`` or
      ``"required"``.

  Raises:
    FedJaxDpError: not a `PrivacyReport`, or one that needs another ledger (the message
      names it), option ``ledger``.
  """
  if not isinstance(report, PrivacyReport):
    raise FedJaxDpError(f"{ledger}.record takes a PrivacyReport (PrivacyReport(z, q, "
                        f"steps), PrivacyReport.from_metrics or .from_records), got a "
                        f"{type(report).__name__}.", option="report")
  if report.releases is not None and release_names is None:
    raise FedJaxDpError(
        f"the rounds report several releases (RoundMetrics.releases: "
        f"{sorted(report.releases)}): account with a "
        "fedjax_dp.privacy.multi_release.MultiReleaseLedger (MultiReleaseSpec(releases=...)"
        f".make_ledger); a {ledger} would only see the round's summary numbers.",
        option="ledger")
  if report.releases is None and release_names is not None:
    raise FedJaxDpError(
        f"ledger is a {ledger} of the releases {list(release_names)}, but the rounds "
        "report no RoundMetrics.releases: account a round with one release with a "
        "fedjax_dp.privacy.ledger.PrivacyLedger, or make the round report its releases.",
        option="ledger")
  client = report.client_noise_multipliers
  if client is not None and per_client == "refused":
    raise FedJaxDpError(
        f"the rounds report per-client noise multipliers (client_noise_multipliers "
        f"{client.shape}): account with a fedjax_dp.privacy.per_client.PerClientLedger "
        "(or the mechanism's per-device ledger, fedjax_dp.privacy.device_ledger."
        f"DeviceLedger); a {ledger} would only see one number per round.",
        option="ledger")
  if client is None and per_client == "required":
    raise FedJaxDpError(
        f"a {ledger} composes per-device noise multipliers, but the rounds report none "
        "(client_noise_multipliers is None): account one noise multiplier per round "
        "with a fedjax_dp.privacy.ledger.PrivacyLedger.", option="ledger")
  return report
