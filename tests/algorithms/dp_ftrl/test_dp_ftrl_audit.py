"""DP-FTRL's canary-audit targets (`fedjax_dp.algorithms.dp_ftrl.audit`): each claim is
one Gaussian of the run's sensitivity. Every target's full audit (each break) runs in
tests/auditing/test_targets.py; the reports are shared through the ``audit_report``
fixture (tests/conftest.py)."""

import logging

import numpy as np
import pytest

from fedjax_dp.algorithms import audit_targets
from fedjax_dp.algorithms.dp_ftrl import audit


@pytest.fixture(autouse=True)
def quiet():
  logging.disable(logging.WARNING)
  yield
  logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name,sens2", [("dp_ftrl/tree", 3), ("dp_ftrl/banded", 2)])
def test_dp_ftrl_claim_is_one_gaussian_of_the_run_sensitivity(name, sens2, audit_report):
  """DP-FTRL's targets (`_dp_ftrl_setup`): one tree of R = 4 rounds, the canary its first
  leaf, in floor(log2 4) + 1 = 3 tree nodes; banded with b = 2 and R = 2 over 4 rounds,
  the canary in two rounds whose unit columns of C do not overlap. Either claim is one
  Gaussian release of z / sqrt(sens2) (PLD, recomputed here with dp_accounting alone),
  and the audit, observing the prefix sums / C times the round updates, proves a good
  part of it (the half-noise break is caught in tests/auditing/test_targets.py)."""
  import dp_accounting
  from dp_accounting import pld as dp_pld
  z = audit.PARAMS[name]["z"]
  rep = audit_report(name, "none")
  expected = dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                  1e-4).compose(dp_accounting.GaussianDpEvent(
                                      z / np.sqrt(sens2))).get_epsilon(audit_targets.DELTA)
  assert rep.claimed_epsilon == pytest.approx(expected, rel=1e-6)
  assert rep.rounds == 4
  assert 0.5 * rep.claimed_epsilon < rep.lower_bound.epsilon_lower_bound < rep.claimed_epsilon


def test_the_tree_releases_the_aggregate():
  setup = audit_targets.target("dp_ftrl/tree").build()
  assert setup.observation == "aggregate" and setup.observe is None
