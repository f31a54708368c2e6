"""Canary-audit targets of every registered algorithm, collected from the registry
(``fedjax-dp audit --algorithm NAME [--break B]``): each algorithm's plug-in returns its
own (`fedjax_dp.algorithms.interface.FederatedAlgorithm.audit_targets`, written in its
package's ``audit.py``); this module names no algorithm.

Each `Target` builds a `fedjax_dp.auditing.Setup` from the algorithm's own builder
(its sampler, clipping, local training, noise, server step, reported noise multiplier
and `PrivacySpec`) on a tiny population with a canary, at a size where a 20,000-
repetition audit can prove an epsilon above the claim when the noise is half what is
claimed. Every target offers the common breaks (`COMMON_BREAKS`: ``none``, the shipped
code; ``noise-half``, the round adds half the noise the run claims) and its own, each
re-introducing a bug the audit must catch (listed by ``fedjax-dp audit --list``), e.g.
fixed-size cohorts accounted with ``std / C`` instead of ``std / 2C``,
per-client noise reported as the smallest over the sampled clients, a paper's
assumed sensitivity that its local training does not enforce, local DP-SGD divided
by the client's own ``q n_k``, attributable uploads accounted with amplification by
sampling, exact label statistics claimed as covered.

Every target observes what its release declares the server observes
(`fedjax_dp.auditing.Setup.observation`, the algorithm's `PrivacySpec.observation`): the
model change for an aggregate, the canary client's own upload for attributable uploads
(`fedjax_dp.auditing.upload_observer`). A broken target's claim is what the broken code
would report; the fixed target's claim is its ledger's epsilon from the metrics its
rounds report.

``TARGETS`` (a module attribute computed on access) is `all_targets()`.
"""

from __future__ import annotations

from typing import Dict, List

from fedjax_dp.algorithms import registry
# The shared pieces, re-exported: `Target`, `DELTA`, the common breaks (`fedjax-dp audit`,
# the notebooks and the tests read them from here).
from fedjax_dp.algorithms.audit_common import (  # noqa: F401
    AMPLIFIED_CLAIM, CLAIM_ONLY_BREAKS, CLASSES, COMMON_BREAKS, DELTA, FEATURES, Target,
    amplified_claim, audit_model, canary_vector, declared_observation, paper_worlds,
    planned_claim, rescale, schedule, spec_of, zero_params)
from fedjax_dp.validation import FedJaxDpError


def _targets_of(name: str) -> List[Target]:
  """``name``'s targets from its plug-in's hook, checked.

  Raises:
    FedJaxDpError: the hook returned something that is not a sequence of `Target`.
  """
  found = list(registry.get(name).audit_targets() or ())
  bad = [t for t in found if not isinstance(t, Target)]
  if bad:
    raise FedJaxDpError(f"{name}'s audit_targets() must return audit_common.Target "
                        f"records, got {type(bad[0]).__name__}.")
  return found


def all_targets() -> List[Target]:
  """Every registered algorithm's audit targets, in registration order, each once (an
  algorithm running another's round, e.g. DP-FedSGD, returns the same targets)."""
  out: Dict[str, Target] = {}
  for name in registry.names():
    for t in _targets_of(name):
      out.setdefault(t.name, t)
  return list(out.values())


def audited() -> List[str]:
  """The registered algorithms that have audit targets (the private ones)."""
  return [n for n in registry.names() if _targets_of(n)]


def targets_for(algorithm: str) -> List[Target]:
  """The audit targets of the registered algorithm ``algorithm``.

  Raises:
    FedJaxDpError: an algorithm without targets (non-private, e.g. fedavg, or unknown).
  """
  found = _targets_of(algorithm) if algorithm in registry.names() else []
  if not found:
    raise FedJaxDpError(f"algorithm {algorithm!r} has no audit targets (it is "
                        f"non-private or unknown); audited: {sorted(audited())}.")
  return found


def target(name: str) -> Target:
  """The audit target called ``name`` (``algorithm/variant``).

  Raises:
    FedJaxDpError: no registered algorithm has such a target (listing them).
  """
  targets = all_targets()
  for t in targets:
    if t.name == name:
      return t
  raise FedJaxDpError(f"target must be one of {[t.name for t in targets]}, got {name!r}.")


def __getattr__(name: str):
  """``TARGETS``: `all_targets()`, read from the registry on every access."""
  if name == "TARGETS":
    return all_targets()
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
