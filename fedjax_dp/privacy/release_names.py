"""Release names, their record fields and groups: what names a release of several per
round (`fedjax_dp.privacy.multi_release.MultiReleaseLedger`,
`fedjax_dp.algorithms.privacy_spec.Release`) may have, and which releases one record can
influence.

The record layout: a release ``name`` appears in ``metrics.jsonl`` as the fields
``{name}_{metric}`` for each metric of `RELEASE_METRICS`, and its truncation model as
``{name}_truncation_{field}`` for each field of `RELEASE_TRUNCATION_FIELDS`
(`fedjax_dp.privacy.ledger_protocol.release_field`).

Groups: each group lists the releases one record can influence in one of
the positions it can hold; together they must cover every release (a release no record
can influence would not be accounted). See `fedjax_dp.privacy.multi_release` for how a
ledger composes them.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, List, Sequence, Tuple

from fedjax_dp.validation import FedJaxDpError

__all__ = ["RELEASE_METRICS", "RELEASE_TRUNCATION_FIELDS", "check_release_name",
           "check_names", "group_names", "check_groups"]

#: What a round reports for each release (`RoundMetrics.releases[name]`'s keys).
RELEASE_METRICS = ("noise_multiplier", "sampling_rate", "dp_steps", "noise_stddev",
                   "sensitivity")
#: A release's `fedjax_dp.privacy.events.Truncation` fields, written as
#: ``{name}_truncation_{field}``.
RELEASE_TRUNCATION_FIELDS = ("population_size", "cap", "draws_per_step")

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def check_release_name(name: Any, arg: str = "name") -> str:
  """A release name: a lowercase identifier (``[a-z][a-z0-9_]*``), used as a prefix of
  record fields.

  Raises:
    FedJaxDpError: naming ``arg``, for anything else.
  """
  if not isinstance(name, str) or not _NAME.match(name):
    raise FedJaxDpError(f"{arg} must be a lowercase identifier ([a-z][a-z0-9_]*, e.g. "
                        f"'inner'), got {name!r}.", option=arg)
  return name


def check_names(release_names: Any) -> Tuple[str, ...]:
  """``release_names`` as a tuple of distinct release names (`check_release_name`), in
  order.

  Raises:
    FedJaxDpError: not a sequence of names, a bad name, no name, or a name given twice
      (option ``release_names``).
  """
  if isinstance(release_names, str) or not isinstance(release_names, Iterable):
    raise FedJaxDpError(f"release_names must be a sequence of names, got "
                        f"{release_names!r}.", option="release_names")
  names = tuple(check_release_name(n, "release_names") for n in release_names)
  if not names:
    raise FedJaxDpError("release_names must name at least one release, got none.",
                        option="release_names")
  if len(set(names)) != len(names):
    dup = sorted({n for n in names if names.count(n) > 1})
    raise FedJaxDpError(f"release_names must be distinct, got {dup!r} more than once.",
                        option="release_names")
  return names


def group_names(group: Any, names: Tuple[str, ...]) -> Tuple[str, ...]:
  """``group`` (release names) as a tuple in release order.

  Raises:
    FedJaxDpError: not a collection of names, an unknown name, or no name.
  """
  if isinstance(group, str) or not isinstance(group, Iterable):
    raise FedJaxDpError(f"a group must be a collection of release names (of "
                        f"{list(names)}), got {group!r}.", option="groups")
  members = set()
  for n in group:
    if n not in names:
      raise FedJaxDpError(f"a group names {n!r}, which is not one of the releases "
                          f"{list(names)}.", option="groups")
    members.add(n)
  if not members:
    raise FedJaxDpError("a group must name at least one release, got an empty one.",
                        option="groups")
  return tuple(n for n in names if n in members)


def check_groups(groups: Any, release_names: Sequence[str]
                 ) -> Tuple[Tuple[str, ...], ...]:
  """Release groups (`MultiReleaseLedger`'s ``groups``) as a tuple of tuples of names,
  each in release order, duplicates dropped; None gives the single group of every
  release.

  Raises:
    FedJaxDpError: not a sequence of collections of names, an unknown name, an empty
      group, or a release in no group (option ``groups``).
  """
  names = tuple(release_names)
  if groups is None:
    return (names,)
  if isinstance(groups, str) or not isinstance(groups, Iterable):
    raise FedJaxDpError(f"groups must be a sequence of collections of release names "
                        f"(each the releases one record can influence), got {groups!r}.",
                        option="groups")
  out: List[Tuple[str, ...]] = []
  for g in groups:
    g = group_names(g, names)
    if g not in out:
      out.append(g)
  if not out:
    raise FedJaxDpError("groups must hold at least one group (or be None), got none.",
                        option="groups")
  missing = [n for n in names if not any(n in g for g in out)]
  if missing:
    raise FedJaxDpError(f"groups must cover every release; {missing!r} is in no group "
                        "(a release that no record can influence is not accounted).",
                        option="groups")
  return tuple(out)
