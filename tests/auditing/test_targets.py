"""Canary audits of every shipped mechanism through its real round (issue 13, part 3):
the shipped code passes, and every deliberately re-introduced bug is caught.

This is the reduced-but-real audit CI runs: the same 20,000 scored repetitions per world
as ``fedjax-dp audit`` (the size at which half the claimed noise is caught), the worlds
sized so that each audit takes a few seconds on 2 CPU cores. Setups that differ only in
their claim share one simulation (`Setup.simulation_key`).

The targets are every registered algorithm's own (its plug-in's ``audit_targets`` hook,
collected by `fedjax_dp.algorithms.audit_targets`); this file names no algorithm. The
checks of one algorithm's targets live in its tests (tests/algorithms/<name>/).
"""

import logging

import numpy as np
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import audit_targets, registry
from fedjax_dp.algorithms.audit_common import Target
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

CASES = [(t.name, b) for t in audit_targets.all_targets() for b in t.breaks]


@pytest.fixture(autouse=True)
def quiet():
  logging.disable(logging.WARNING)
  yield
  logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name,brk", CASES, ids=[f"{n}:{b}" for n, b in CASES])
def test_shipped_code_passes_and_every_break_is_caught(name, brk, audit_report):
  rep = audit_report(name, brk)
  lb = rep.lower_bound.epsilon_lower_bound
  if brk == "none":
    assert not rep.violated, auditing.describe(rep)
    # The audit is not vacuous: it proves a good part of what is claimed.
    assert lb > 0.3 * rep.claimed_epsilon, auditing.describe(rep)
  else:
    assert rep.violated, auditing.describe(rep)


@pytest.mark.parametrize("name", registry.names())
def test_every_private_algorithm_has_audit_targets_with_the_common_breaks(name,
                                                                          synthetic_fd):
  plugin = registry.get(name)
  targets = plugin.audit_targets()
  if not targets:  # only a non-private algorithm (no PrivacySpec) may have none
    model = create_model("linear", synthetic_fd.feature_shape, synthetic_fd.num_classes)
    cfg = plugin.test_config(model, synthetic_fd)
    assert cfg is not None and cfg.learns, (
        f"{name} has no audit targets and no test_config showing it is non-private")
    alg = plugin.function(model, synthetic_fd, **cfg.kwargs)
    assert alg.privacy is None, f"{name} is private but has no audit targets"
    with pytest.raises(FedJaxDpError, match="no audit targets"):
      audit_targets.targets_for(name)
    return
  # (Targets hold their builders: compared by name, a hook may build them afresh.)
  assert [t.name for t in audit_targets.targets_for(name)] == [t.name for t in targets]
  assert name in audit_targets.audited()
  collected = {t.name for t in audit_targets.all_targets()}
  for t in targets:
    assert isinstance(t, Target), t
    assert {"none", "noise-half"} <= set(t.breaks), t.name
    assert t.name in collected


def test_section_1_bugs_each_have_a_break():
  breaks = {b for t in audit_targets.all_targets() for b in t.breaks}
  assert {"fixed-size-z", "min-over-sampled", "paper-sensitivity",
          "count-denominators"} <= breaks


def test_target_names_are_unique_and_unknown_ones_are_refused():
  names = [t.name for t in audit_targets.all_targets()]
  assert len(names) == len(set(names))
  assert [t.name for t in audit_targets.TARGETS] == names  # the module attribute
  with pytest.raises(FedJaxDpError, match="target must be one of"):
    audit_targets.target("nope/nothing")
  with pytest.raises(FedJaxDpError, match="no audit targets"):
    audit_targets.targets_for("nope")


def test_ledger_claim_takes_the_median_over_repetitions():
  from fedjax_dp.privacy.ledger import PrivacyLedger
  claim = auditing.ledger_claim(lambda: PrivacyLedger(1e-3))
  z = np.array([[1.0, 1.0], [1.0, np.inf], [1.0, np.inf]])  # inf: composes nothing
  metrics = dict(noise_multiplier=z, sampling_rate=np.ones((3, 2)), dp_steps=np.ones((3, 2)))
  one = PrivacyLedger(1e-3)
  one.record(1.0, 1.0)
  assert claim(metrics) == pytest.approx(one.epsilon(accountant="pld"), rel=1e-12)


def test_bad_audit_sizes():
  first = audit_targets.all_targets()[0]
  setup = first.build()
  with pytest.raises(Exception, match="repetitions"):
    auditing.run(setup, repetitions=10)
  with pytest.raises(Exception, match="break"):
    first.build("bogus")


def test_every_target_observes_what_its_release_declares():
  """Issue 30: the auditor observes the declared release. Attributable uploads are
  audited through one client's upload (the canary's, as the server receives it), never
  through the aggregate; the declared observation is the algorithm's PrivacySpec's
  (which targets are which: each algorithm's audit tests)."""
  from fedjax_dp.privacy.events import OBSERVATIONS
  for t in audit_targets.all_targets():
    setup = t.build()
    assert setup.observation in OBSERVATIONS, t.name
    if setup.observation == "attributable":
      assert setup.observe is not None, t.name


def test_a_registered_algorithms_targets_are_collected(monkeypatch):
  """A researcher's algorithm (`registry.register`) is audited like the shipped ones:
  its hook's targets join `all_targets`; a hook returning something else is refused."""
  base = audit_targets.all_targets()[0]
  mine = Target("mine/poisson", "mine", "as " + base.name, dict(base.breaks),
                base.build_setup)

  class Mine(type(registry.get(base.algorithm))):
    name = "mine"

    def audit_targets(self):
      return [mine]

  monkeypatch.setitem(registry.REGISTRY, "mine", Mine())
  assert audit_targets.targets_for("mine") == [mine]
  assert audit_targets.all_targets()[-1] is mine
  assert audit_targets.target("mine/poisson").build().simulation_key == \
      "mine/poisson/shipped"
  monkeypatch.setattr(Mine, "audit_targets", lambda self: ["not a target"])
  with pytest.raises(FedJaxDpError, match="must return audit_common.Target"):
    audit_targets.all_targets()
