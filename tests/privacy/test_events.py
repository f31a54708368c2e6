"""Tests for `fedjax_dp.privacy.events` against direct dp_accounting computations."""

import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from fedjax_dp.privacy import accountants, events
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5
ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


def poisson(z, q):
  return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))


# --------------------------------------------------------------------------
# make_dp_event / neighboring_relation
# --------------------------------------------------------------------------


def test_make_dp_event_poisson_gaussian_and_steps():
  assert events.make_dp_event(1.3, 0.1) == poisson(1.3, 0.1)
  assert events.make_dp_event(1.3, 1.0) == dp_accounting.GaussianDpEvent(1.3)
  assert events.make_dp_event(1.3) == dp_accounting.GaussianDpEvent(1.3)
  assert events.make_dp_event(1.3, 0.1, steps=5) == (
      dp_accounting.SelfComposedDpEvent(poisson(1.3, 0.1), 5))


def test_make_dp_event_fixed_size():
  event = events.make_dp_event(1.0, sampler="fixed_size", population_size=200,
                               cohort_size=20)
  assert event == dp_accounting.SampledWithoutReplacementDpEvent(
      200, 20, dp_accounting.GaussianDpEvent(1.0))
  # The cohort is derived from a (float32) sampling rate.
  derived = events.make_dp_event(1.0, float(np.float32(20 / 200)), sampler="fixed_size",
                                 population_size=200)
  assert derived == event
  with pytest.raises(FedJaxDpError, match="population_size"):
    events.make_dp_event(1.0, 0.1, sampler="fixed_size")
  with pytest.raises(FedJaxDpError, match="sampling_rate"):
    events.make_dp_event(1.0, 0.3, sampler="fixed_size", population_size=200,
                         cohort_size=20)
  with pytest.raises(FedJaxDpError, match="integer cohort"):
    events.make_dp_event(1.0, 0.1234, sampler="fixed_size", population_size=200)


def test_zero_noise_is_non_private():
  assert events.make_dp_event(0.0, 0.1, steps=3) == dp_accounting.NonPrivateDpEvent()
  assert accountants.compute_epsilon(0.0, 0.1, 10, DELTA) == math.inf
  ledger = PrivacyLedger(DELTA)
  ledger.record(1.0, 0.01)
  assert math.isfinite(ledger.epsilon())
  ledger.record(0.0, 0.01)
  ledger.record(1.0, 0.01)
  assert ledger.epsilon() == math.inf
  assert ledger.epsilon(accountant="pld") == math.inf
  hist = ledger.epsilon_history()
  assert math.isfinite(hist[0]) and np.all(np.isinf(hist[1:]))


def test_neighboring_relation():
  rel, text = events.neighboring_relation("poisson", "user")
  assert rel == "add_remove" and "add/remove" in text and "user" in text
  rel, text = events.neighboring_relation("fixed_size", "record")
  assert rel == "replace_one" and "replace-one" in text and "record" in text
  rel, text = events.neighboring_relation("poisson", "user", "zero_out")
  assert rel == "zero_out" and "null dataset" in text
  assert set(events.SAMPLERS) == {"poisson", "fixed_size", "cyclic_poisson",
                                  "balls_in_bins", "random_allocation"}
  with pytest.raises(FedJaxDpError, match="sampler"):
    events.neighboring_relation("shuffle")
  # Each sampler's DpEvent is valid under its own relations only.
  with pytest.raises(FedJaxDpError, match="does not fit"):
    events.neighboring_relation("fixed_size", relation="add_remove")
  with pytest.raises(FedJaxDpError, match="does not fit"):
    events.neighboring_relation("poisson", relation="replace_one")
  with pytest.raises(FedJaxDpError, match="neighboring_relation"):
    events.neighboring_relation("poisson", relation="swap")


def test_dp_accounting_relation_gives_every_gaussian_shift_semantics():
  """dp_accounting's PLD reads GaussianDpEvent(z) under REPLACE_ONE as a shift of 2/z (its
  RDP as 1/z): events without sampling without replacement are composed under
  ADD_OR_REMOVE_ONE, so z = std / sensitivity means the same in both accountants."""
  g = dp_accounting.GaussianDpEvent(1.0)
  assert events.dp_accounting_relation(g) is ADD_REMOVE
  assert events.dp_accounting_relation(poisson(1.0, 0.1)) is ADD_REMOVE
  swor = dp_accounting.SampledWithoutReplacementDpEvent(10, 5, g)
  assert events.dp_accounting_relation(
      dp_accounting.SelfComposedDpEvent(swor, 3)) is REPLACE_ONE
  # The premise: dp_accounting's own PLD under REPLACE_ONE doubles the shift.
  pld_replace = dp_pld.PLDAccountant(REPLACE_ONE).compose(g).get_epsilon(DELTA)
  pld_shift = dp_pld.PLDAccountant(ADD_REMOVE).compose(g).get_epsilon(DELTA)
  rdp = dp_rdp.RdpAccountant(neighboring_relation=REPLACE_ONE).compose(g).get_epsilon(DELTA)
  assert pld_replace > 1.5 * pld_shift and rdp < 1.5 * pld_shift
  assert accountants.event_epsilon(g, DELTA, "pld") == pytest.approx(pld_shift, rel=1e-9)
