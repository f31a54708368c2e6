"""RDP-PFL's canary-audit targets (`fedjax_dp.algorithms.rdp_pfl.audit`): each record is
in one stage, so the claim is the larger stage's (issue 30, F8), and the data-size
weights are caught (F5). Every target's full audit (each break) runs in
tests/auditing/test_targets.py; the reports are shared through the ``audit_report``
fixture (tests/conftest.py)."""

import logging

import jax
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import audit_targets
from fedjax_dp.algorithms.rdp_pfl import audit as rdp_pfl_audit


@pytest.fixture(autouse=True)
def quiet():
  logging.disable(logging.WARNING)
  yield
  logging.disable(logging.NOTSET)


def _rdp_pfl_stage_pld(z, q, steps=1):
  """dp_accounting's PLD epsilon of ``steps`` Poisson-subsampled Gaussians (alone)."""
  import dp_accounting
  from dp_accounting import pld as dp_pld
  g = dp_accounting.GaussianDpEvent(z)
  ev = g if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, g)
  return dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                              1e-4).compose(dp_accounting.SelfComposedDpEvent(ev, steps)
                                            ).get_epsilon(audit_targets.DELTA)


@pytest.mark.parametrize("stage,other", [("support", "q_query"), ("query", "q_support")])
def test_rdp_pfl_stage_audits_are_consistent_with_the_larger_stage_claim(stage, other):
  """Issue 30, F8: each record is in one stage, so the claim is the larger stage's, not
  both composed. With the other stage sampled at rate 1 too (its step still tiny), the
  claim is one Gaussian of z (PLD, recomputed with dp_accounting alone), well below the
  old claim of two, and the audit of each stage through the upload stays below it."""
  params = dict(rdp_pfl_audit.PARAMS[f"rdp_pfl/{stage}"], **{other: 1.0})
  rep = auditing.run(rdp_pfl_audit._rdp_pfl_setup("none", **params), repetitions=20000,
                     calibration=10000, key=jax.random.key(0))
  one = _rdp_pfl_stage_pld(params["z"], 1.0)
  assert rep.claimed_epsilon == pytest.approx(one, rel=1e-3)
  assert rep.claimed_epsilon < 0.8 * _rdp_pfl_stage_pld(params["z"], 1.0, steps=2)
  lb = rep.lower_bound.epsilon_lower_bound
  assert 0.3 * rep.claimed_epsilon < lb <= rep.claimed_epsilon, auditing.describe(rep)


@pytest.mark.slow
def test_rdp_pfl_data_size_weights_target(audit_report):
  """Issue 30, F5: two source clients, the canary a support record of one of them. The
  shipped code (uniform weights) claims the support stage's Gaussian of z (the query
  stage, at q^Q = 0.01, is smaller) and stays below it; the old data-size weights, with
  the same claim, are caught (tests/auditing/test_targets.py runs every break)."""
  z = rdp_pfl_audit.RDP_PFL_WEIGHTS["z"]
  shipped = audit_report("rdp_pfl/data_size_weights", "none")
  old = audit_report("rdp_pfl/data_size_weights", "data-size-weights")
  assert shipped.claimed_epsilon == pytest.approx(_rdp_pfl_stage_pld(z, 1.0), rel=1e-3)
  assert old.claimed_epsilon == pytest.approx(shipped.claimed_epsilon, rel=1e-3)
  assert (shipped.lower_bound.epsilon_lower_bound < shipped.claimed_epsilon
          < old.lower_bound.epsilon_lower_bound)
