"""RDP-PFL's privacy statement: a `MultiReleaseSpec` whose releases a record
influences only in part.

RDP-PFL (Wei et al., IEEE TIFS 2023) makes two releases per local epoch: the inner step
on the query set and the outer step on the support set (eqs. 6-11). Each source
client's records are split once into a query set and a support set, and every record
keeps its role (`fedjax_dp.algorithms.rdp_pfl.algorithm.rdp_pfl`'s ``query_rows``), so
a record can influence only the releases of its role (`meta.release_groups`): its
guarantee is the composition of those releases alone, and the run's epsilon is the
largest over the roles a record can hold. `GroupedPrivacySpec` carries these groups:

* `GroupedPrivacySpec.make_ledger` (`MultiReleaseSpec`'s, with `groups`) builds a
  `fedjax_dp.privacy.multi_release.MultiReleaseLedger` with ``groups`` (the run's
  ledger, its budget guard and a resumed run's ledger all come from here);
* `GroupedPrivacySpec.calibration_events` (`group_events_of_run`): each group's event;
  calibration to a target epsilon takes the largest z over them
  (`PrivacyStatement.calibration_events`), exact whatever the groups;
* `GroupedPrivacySpec.round_event` (the planned event of one round) is the event of the
  group that dominates every other one (`dominating_group`), whose epsilon is the
  largest for every accountant and delta; without one, the composition of every
  release (an upper bound on every group's).

Only RDP-PFL has such groups, so the subclass lives here rather than in
`fedjax_dp.algorithms.privacy_spec`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import dp_accounting

from fedjax_dp.algorithms.base import MultiReleaseSpec
from fedjax_dp.privacy.multi_release import check_groups


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupedPrivacySpec(MultiReleaseSpec):
  """A `MultiReleaseSpec` whose records each influence only some of the releases.

  Attributes (besides `MultiReleaseSpec`'s):
    release_groups: None (every record may influence every release:
      `MultiReleaseSpec`'s composition of everything) or a tuple of tuples of release
      names, each the releases one record can influence in one of the positions it can
      hold (`fedjax_dp.privacy.multi_release.check_groups`: they must cover every
      release).

  Raises:
    FedJaxDpError: on construction, as `MultiReleaseSpec`, or invalid groups.
  """
  release_groups: Optional[Tuple[Tuple[str, ...], ...]] = None

  def __post_init__(self):
    super().__post_init__()
    if self.release_groups is not None:
      object.__setattr__(self, "release_groups",
                         check_groups(self.release_groups, self.release_names))

  @property
  def groups(self) -> Tuple[Tuple[str, ...], ...]:
    """The groups (``(release_names,)`` when ``release_groups`` is None); the ledger
    (`MultiReleaseSpec.make_ledger`) composes per group, its epsilon the largest
    group's."""
    return check_groups(self.release_groups, self.release_names)

  def group_round_events(self, noise_multiplier: float) -> Tuple[dp_accounting.DpEvent, ...]:
    """Each group's event of one round at noise-multiplier hyper-parameter
    ``noise_multiplier`` (its releases' `Release.dp_event`, composed)."""
    return tuple(dp_accounting.ComposedDpEvent(self.release_events(noise_multiplier, g))
                 for g in self.groups)

  def group_events_of_run(self, noise_multiplier: float, rounds: int
                          ) -> Tuple[dp_accounting.DpEvent, ...]:
    """Each group's event of ``rounds`` rounds. The run's epsilon is the largest of
    theirs, so the smallest z meeting a target is the largest over the groups of the z
    that calibrates each group's event alone."""
    return tuple(dp_accounting.SelfComposedDpEvent(e, rounds)
                 for e in self.group_round_events(noise_multiplier))

  def calibration_events(self, noise_multiplier: float, rounds: int
                         ) -> Tuple[dp_accounting.DpEvent, ...]:
    """One event per group (`group_events_of_run`): calibration takes the largest z
    over them, exact whatever the groups."""
    return self.group_events_of_run(noise_multiplier, rounds)

  def dominating_group(self) -> Optional[Tuple[str, ...]]:
    """The group whose privacy loss is at least every other group's for every
    accountant and delta, or None when there is none here.

    A group of one release dominates a group of one release with a noise multiplier
    scale at least as large, a sampling rate at most as large and no more steps (a
    Poisson-subsampled Gaussian's privacy profile decreases in the noise and increases
    in the rate: the hockey-stick divergence of the mixture is convex in the rate and 0
    at rate 0). A group holding every release dominates every group. Anything else is
    not decided (None)."""
    groups = self.groups
    everything = set(self.release_names)
    for g in groups:
      if set(g) == everything:
        return g
    if self.sampler != "poisson" or any(len(g) != 1 for g in groups):
      return None
    by_name = {r.name: r for r in self.releases}

    def dominates(a, b):
      return (a.event_scale <= b.event_scale and a.sampling_rate >= b.sampling_rate
              and a.steps >= b.steps)

    for g in groups:
      if all(dominates(by_name[g[0]], by_name[h[0]]) for h in groups):
        return g
    return None

  def round_event(self, noise_multiplier: float):
    """The planned `DpEvent` of one round for calibration and the budget guard: the
    `dominating_group`'s releases composed (the run's epsilon exactly), or, without
    one, every release composed (an upper bound on every group's)."""
    group = self.dominating_group() or self.release_names
    return dp_accounting.ComposedDpEvent(self.release_events(noise_multiplier, group))
