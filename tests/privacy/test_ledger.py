"""Tests for `fedjax_dp.privacy.ledger` against direct dp_accounting computations."""

import json
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from fedjax_dp.privacy import accountants
from fedjax_dp.privacy.events import Truncation, make_dp_event
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError

from direct_dp import ADD_REMOVE, DELTA, direct_rdp_epsilon, poisson

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
# Coarse PLD grid where exact agreement with an equally configured PLDAccountant
# is checked; keeps the module fast.
COARSE = 1e-3


def direct_pld_epsilon(events, delta=DELTA, interval=COARSE):
  acc = dp_pld.PLDAccountant(ADD_REMOVE, value_discretization_interval=interval)
  for event in events:
    acc.compose(event)
  return acc.get_epsilon(delta)


# A heterogeneous schedule: geometric sigma_t, q = 0.05, a record-level block
# with 3 DP steps per round.
GEO_Z = [0.9 * 1.1 ** t for t in range(8)]
GEO_Q = 0.05


def geometric_ledger(interval=COARSE):
  ledger = PrivacyLedger(DELTA, pld_value_discretization_interval=interval)
  for z in GEO_Z:
    ledger.record(z, GEO_Q)
  ledger.record(1.2, 0.02, dp_steps=3, count=4)
  return ledger


def geometric_events():
  events = [poisson(z, GEO_Q) for z in GEO_Z]
  events += [dp_accounting.SelfComposedDpEvent(poisson(1.2, 0.02), 3)] * 4
  return events


# --------------------------------------------------------------------------
# Ledger epsilon == direct dp_accounting
# --------------------------------------------------------------------------


def test_homogeneous_ledger_matches_dp_accounting():
  ledger = PrivacyLedger(DELTA, pld_value_discretization_interval=COARSE)
  for _ in range(100):
    ledger.record(1.0, 0.1)
  # Composing 100 single events directly costs ~8 s (dp_accounting recomputes the
  # RDP per compose); the self-composed event is the same composition.
  direct = [dp_accounting.SelfComposedDpEvent(poisson(1.0, 0.1), 100)]
  assert ledger.epsilon() == pytest.approx(direct_rdp_epsilon(direct), rel=1e-12)
  # The ledger's own composed event gives the same number in a fresh accountant.
  acc = dp_rdp.RdpAccountant()
  assert ledger.epsilon() == acc.compose(ledger.dp_event()).get_epsilon(DELTA)
  assert ledger.epsilon(accountant="pld") == pytest.approx(
      direct_pld_epsilon(direct), rel=1e-9)
  # Another delta, passed explicitly.
  assert ledger.epsilon(1e-3) == pytest.approx(direct_rdp_epsilon(direct, 1e-3), rel=1e-12)
  assert ledger.epsilon(1e-3) < ledger.epsilon()


def test_heterogeneous_geometric_schedule_matches_dp_accounting():
  ledger = geometric_ledger()
  events = geometric_events()
  assert ledger.num_rounds == len(events) == 12
  assert len(ledger.events) == len(GEO_Z) + 1
  eps_rdp = ledger.epsilon()
  assert eps_rdp == pytest.approx(direct_rdp_epsilon(events), rel=1e-10)
  eps_pld = ledger.epsilon(accountant="pld")
  assert eps_pld == pytest.approx(direct_pld_epsilon(events), rel=1e-6)
  # Guards against accounting every round with the first round's event.
  homogeneous = direct_rdp_epsilon(
      [dp_accounting.SelfComposedDpEvent(poisson(GEO_Z[0], GEO_Q), 12)])
  assert abs(eps_rdp - homogeneous) > 0.05


def test_fixed_size_ledger_uses_replace_one_with_both_accountants():
  ledger = PrivacyLedger(DELTA, sampler="fixed_size", population_size=100)
  ledger.record_many(np.full(5, 1.5, np.float32), np.full(5, 0.1, np.float32), 1)
  event = dp_accounting.SampledWithoutReplacementDpEvent(
      100, 10, dp_accounting.GaussianDpEvent(1.5))
  assert ledger.events == [(event, 5)]
  assert ledger.neighboring_relation == "replace_one"
  assert ledger.epsilon() == pytest.approx(
      direct_rdp_epsilon([event] * 5, relation=REPLACE_ONE), rel=1e-12)
  assert ledger.supports("pld") and ledger.supports("rdp")  # issue 30 (F9)
  assert ledger.epsilon(accountant="pld") == pytest.approx(accountants.event_epsilon(
      dp_accounting.SelfComposedDpEvent(event, 5), DELTA, "pld"), rel=1e-9)
  assert ledger.epsilon(accountant="pld") < ledger.epsilon()
  # A fixed cohort size given at construction must match the recorded rate.
  fixed = PrivacyLedger(DELTA, sampler="fixed_size", population_size=100, cohort_size=10)
  with pytest.raises(FedJaxDpError, match="sampling_rate"):
    fixed.record(1.5, 0.2)
  assert fixed.num_rounds == 0


# --------------------------------------------------------------------------
# epsilon_history
# --------------------------------------------------------------------------


def test_epsilon_history_monotone_and_consistent():
  ledger = geometric_ledger()
  hist = ledger.epsilon_history()
  assert hist.shape == (12,) and hist.dtype == np.float64
  assert np.all(np.diff(hist) >= 0) and hist[0] > 0
  assert hist[-1] == ledger.epsilon()
  # Entry t equals the epsilon of a ledger holding only rounds 0..t.
  events = geometric_events()
  for t in (0, 5, 9):
    assert hist[t] == pytest.approx(direct_rdp_epsilon(events[:t + 1]), rel=1e-10)
  assert np.array_equal(ledger.epsilon_history(start=10), hist[10:])
  # A different delta gives a different (larger for smaller delta) history.
  assert np.all(ledger.epsilon_history(delta=1e-7) > hist)
  with pytest.raises(FedJaxDpError, match="start"):
    ledger.epsilon_history(start=13)


def test_pld_epsilon_history_matches_composing_each_prefix_from_scratch():
  """The PLD history (same method as RDP's, ``accountant="pld"``) against an independent
  computation: dp_accounting's own PLDAccountant composing the first k rounds from
  scratch, for several k across three runs (z = 1, 2, then 1 again), where PLD and RDP
  give clearly different epsilons."""
  ledger = PrivacyLedger(DELTA, pld_value_discretization_interval=COARSE)
  ledger.record(1.0, 0.1, count=6)
  ledger.record(2.0, 0.1, count=3)
  ledger.record(1.0, 0.1, count=2)
  hist = ledger.epsilon_history(accountant="pld")
  rdp = ledger.epsilon_history()
  assert hist.shape == (11,) and hist.dtype == np.float64
  assert np.all(np.diff(hist) >= 0)
  assert np.all(hist < 0.9 * rdp)  # the case where the two accountants differ
  events = [poisson(1.0, 0.1)] * 6 + [poisson(2.0, 0.1)] * 3 + [poisson(1.0, 0.1)] * 2
  for k in (1, 2, 6, 7, 9, 11):
    scratch = direct_pld_epsilon([dp_accounting.SelfComposedDpEvent(e, 1)
                                  for e in events[:k]])
    assert hist[k - 1] == pytest.approx(scratch, rel=1e-6), k
  assert hist[-1] == pytest.approx(ledger.epsilon(accountant="pld"), rel=1e-6)
  assert np.array_equal(ledger.epsilon_history(start=7, accountant="pld"), hist[7:])
  # Rounds recorded later continue the cached history.
  ledger.record(1.0, 0.1, count=2)
  more = ledger.epsilon_history(accountant="pld")
  assert np.array_equal(more[:11], hist) and more.shape == (13,)
  assert more[-1] == pytest.approx(direct_pld_epsilon(events + [poisson(1.0, 0.1)] * 2),
                                   rel=1e-6)
  # z = 0: inf from that round on.
  ledger.record(0.0, 0.1)
  assert math.isinf(ledger.epsilon_history(accountant="pld")[-1])
  with pytest.raises(FedJaxDpError, match="accountant"):
    ledger.epsilon_history(accountant="moments")


def test_record_many_returns_per_round_epsilon_of_the_block():
  ledger = PrivacyLedger(DELTA)
  first = ledger.record_many([2.0, 2.0, 1.5], [0.01, 0.01, 0.01], [1, 1, 1])
  second = ledger.record_many(np.array([1.5, 1.5], np.float32), 0.01, 1)
  assert len(first) == 3 and len(second) == 2
  assert np.array_equal(np.concatenate([first, second]), ledger.epsilon_history())
  assert second[-1] == ledger.epsilon()


def test_long_history_is_fast_and_matches_final_epsilon():
  ledger = PrivacyLedger(DELTA)
  z = np.full(1000, 1.1, np.float32)
  z[500:] = 1.3
  hist = ledger.record_many(z, np.full(1000, 0.01, np.float32), np.ones(1000, np.int32))
  assert len(ledger.events) == 2
  assert hist.shape == (1000,) and np.all(np.diff(hist) >= 0)
  assert hist[-1] == ledger.epsilon()
  assert hist[-1] == pytest.approx(direct_rdp_epsilon(
      [dp_accounting.SelfComposedDpEvent(poisson(float(np.float32(1.1)),
                                                 float(np.float32(0.01))), 500),
       dp_accounting.SelfComposedDpEvent(poisson(float(np.float32(1.3)),
                                                 float(np.float32(0.01))), 500)]),
      rel=1e-12)


# --------------------------------------------------------------------------
# Grouping
# --------------------------------------------------------------------------


def test_identical_rounds_group_into_one_run():
  ledger = PrivacyLedger(DELTA)
  for _ in range(100):
    ledger.record(1.0, 0.1)
  assert ledger.events == [(poisson(1.0, 0.1), 100)]
  assert ledger.num_rounds == 100
  assert ledger.dp_event() == dp_accounting.ComposedDpEvent(
      [dp_accounting.SelfComposedDpEvent(poisson(1.0, 0.1), 100)])


def test_alternating_rounds_do_not_group():
  ledger = PrivacyLedger(DELTA)
  for t in range(20):
    ledger.record(1.0 if t % 2 == 0 else 1.2, 0.01)
  assert len(ledger.events) == 20
  assert [c for _, c in ledger.events] == [1] * 20
  assert ledger.events[1][0] == poisson(1.2, 0.01)


def test_record_many_float32_groups_exactly_equal_values():
  ledger = PrivacyLedger(DELTA)
  z = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 1.0], np.float32)
  q = np.array([0.1] * 5 + [0.2], np.float32)
  steps = np.array([1, 1, 1, 1, 1, 1], np.int32)
  ledger.record_many(z, q, steps)
  q32 = float(np.float32(0.1))
  assert q32 != 0.1  # float32 -> float64 is exact, not rounded to the decimal.
  assert ledger.events == [(poisson(1.0, q32), 3), (poisson(2.0, q32), 2),
                           (poisson(1.0, float(np.float32(0.2))), 1)]
  # A following block continuing the last round's parameters extends its run.
  ledger.record_many(np.array([1.0], np.float32), np.array([0.2], np.float32), [1])
  assert ledger.events[-1][1] == 2 and len(ledger.events) == 3
  # dp_steps differences split runs, and steps are composed inside the round.
  ledger.record_many([1.0, 1.0], [0.2, 0.2], [1, 4])
  assert ledger.events[-1] == (
      dp_accounting.SelfComposedDpEvent(poisson(1.0, 0.2), 4), 1)
  assert ledger.num_rounds == 9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.8, 1.0, 1.5]), st.sampled_from([0.01, 0.1]),
                          st.sampled_from([1, 2])), min_size=1, max_size=40))
def test_runs_are_a_run_length_encoding(rounds):
  ledger = PrivacyLedger(DELTA)
  half = len(rounds) // 2
  z, q, s = (np.array(x) for x in zip(*rounds))
  ledger.record_many(z[:half], q[:half], s[:half])  # one block, then single rounds
  for zi, qi, si in rounds[half:]:
    ledger.record(zi, qi, si)
  runs = ledger.events
  expanded = [e for e, c in runs for _ in range(c)]
  assert expanded == [make_dp_event(zi, qi, si) for zi, qi, si in rounds]
  assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))
  assert ledger.num_rounds == len(rounds)


# --------------------------------------------------------------------------
# Whole-population cohorts and truncation
# --------------------------------------------------------------------------


def test_a_cohort_of_the_whole_population_is_a_plain_gaussian():
  """Issue 13, 1f: m = N is no sampling: GaussianDpEvent (PLD allowed, and tighter than
  SampledWithoutReplacementDpEvent(N, N)). PADPFL's setting: T = 30, delta = 0.01,
  z = c / epsilon at epsilon = 5: the old event gave 63.49, the exact (PLD) value is
  58.45 (numbers of the issue)."""
  z = math.sqrt(2 * math.log(1.25 / 0.01)) / 5
  event = make_dp_event(z, sampler="fixed_size", population_size=60,
                        cohort_size=60)
  assert event == dp_accounting.GaussianDpEvent(z)
  ledger = PrivacyLedger(0.01, sampler="fixed_size", population_size=60, cohort_size=60)
  assert ledger.supports("pld")
  ledger.record(z, 1.0, count=30)
  old = direct_rdp_epsilon([dp_accounting.SelfComposedDpEvent(
      dp_accounting.SampledWithoutReplacementDpEvent(60, 60, dp_accounting.GaussianDpEvent(z)),
      30)], 0.01, REPLACE_ONE)
  assert old == pytest.approx(63.49, abs=0.01)
  assert ledger.epsilon(accountant="pld") == pytest.approx(58.45, abs=0.01)
  assert ledger.epsilon() <= old + 1e-9


def test_truncation_is_added_to_delta():
  """Issue 13, 1f: a padded Poisson draw that overflows its cap changes the mechanism on
  that event; the union bound over the rounds' draws enters delta as (1 + e^eps) p."""
  from scipy import stats
  trunc = Truncation(population_size=100, cap=20, draws_per_step=3)
  ledger = PrivacyLedger(DELTA, truncation=trunc)
  ledger.record(1.0, 0.1, dp_steps=2, count=5)
  p = 5 * 3 * 2 * stats.binom.sf(20, 101, 0.1)
  assert ledger.truncation_probability() == pytest.approx(p, rel=1e-12)
  eps = ledger.epsilon()
  assert ledger.delta_total() == pytest.approx(DELTA + (1 + math.exp(eps)) * p, rel=1e-12)
  assert ledger.summary().delta_total == ledger.delta_total()
  # A cap above the largest possible draw never truncates.
  none = PrivacyLedger(DELTA, truncation=Truncation(100, 101, 1))
  none.record(1.0, 0.5, count=10)
  assert none.truncation_probability() == 0.0 and none.delta_total() == DELTA
  restored = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
  assert restored.truncation_probability() == ledger.truncation_probability()


# --------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------


def test_ledger_rejects_bad_inputs_and_records_nothing():
  with pytest.raises(FedJaxDpError, match="delta"):
    PrivacyLedger(0.0)
  with pytest.raises(FedJaxDpError, match="orders"):
    PrivacyLedger(DELTA, orders=[0.5, 2.0])
  with pytest.raises(FedJaxDpError, match="population_size"):
    PrivacyLedger(DELTA, sampler="fixed_size")
  ledger = PrivacyLedger(DELTA)
  for args, name in [((float("nan"), 0.1), "noise_multiplier"),
                     ((-1.0, 0.1), "noise_multiplier"),
                     ((1.0, 0.0), "sampling_rate"), ((1.0, float("inf")), "sampling_rate"),
                     ((1.0, 0.1, 0), "dp_steps"), ((1.0, 0.1, 1.5), "dp_steps"),
                     ((1.0, 0.1, 1, 0), "count")]:
    with pytest.raises(FedJaxDpError, match=name):
      ledger.record(*args)
  with pytest.raises(FedJaxDpError, match=r"noise_multipliers\[2\]"):
    ledger.record_many(np.array([1.0, 1.0, np.nan], np.float32), 0.1)
  with pytest.raises(FedJaxDpError, match=r"sampling_rates\[1\]"):
    ledger.record_many([1.0, 1.0], [0.1, 1.5])
  with pytest.raises(FedJaxDpError, match=r"dp_steps\[0\]"):
    ledger.record_many([1.0], [0.1], [0])
  with pytest.raises(FedJaxDpError, match="sampling_rates must have 2 entries"):
    ledger.record_many([1.0, 1.0], [0.1, 0.1, 0.1])
  with pytest.raises(FedJaxDpError, match="delta"):
    ledger.epsilon(delta=2.0)
  with pytest.raises(FedJaxDpError, match="accountant"):
    ledger.epsilon(accountant="moments")
  assert ledger.num_rounds == 0 and ledger.events == []
  assert ledger.epsilon() == 0.0


def test_record_accepts_numpy_scalars_exactly():
  ledger = PrivacyLedger(DELTA)
  ledger.record(np.float32(1.1), np.array(0.1, np.float32), np.int32(2))
  ledger.record(np.float64(1.1), 0.1, np.float32(3.0))
  assert ledger.events == [
      (dp_accounting.SelfComposedDpEvent(
          poisson(float(np.float32(1.1)), float(np.float32(0.1))), 2), 1),
      (dp_accounting.SelfComposedDpEvent(poisson(1.1, 0.1), 3), 1)]


# --------------------------------------------------------------------------
# Serialisation and summary
# --------------------------------------------------------------------------


def test_to_dict_from_dict_roundtrip_is_exact():
  ledger = geometric_ledger()
  # Query PLD before recording more: the ledger then composes incrementally,
  # which must agree bit for bit with the restored ledger composing at once.
  eps_pld_before = ledger.epsilon(accountant="pld")
  ledger.record_many(np.full(3, 0.7, np.float32), np.full(3, 0.03, np.float32), 2)
  assert ledger.epsilon(accountant="pld") > eps_pld_before
  state = json.loads(json.dumps(ledger.to_dict()))
  restored = PrivacyLedger.from_dict(state)
  assert restored.events == ledger.events
  assert restored.num_rounds == ledger.num_rounds == 15
  assert restored.epsilon() == ledger.epsilon()
  assert np.array_equal(restored.epsilon_history(), ledger.epsilon_history())
  assert restored.epsilon(accountant="pld") == ledger.epsilon(accountant="pld")
  with pytest.raises(FedJaxDpError, match="format"):
    PrivacyLedger.from_dict({"runs": []})


def test_summary_describes_the_guarantee():
  ledger = PrivacyLedger(DELTA, privacy_unit="record")
  ledger.record(1.2, 0.01, dp_steps=5, count=10)
  summary = ledger.summary()
  assert summary.privacy_unit == "record-level"
  assert "add/remove" in summary.neighboring_relation
  assert summary.epsilon == ledger.epsilon()
  assert (summary.num_rounds, summary.num_releases, summary.delta) == (10, 50, DELTA)
  assert summary.to_dict()["accountant"] == "rdp"
  assert f"{summary.epsilon:.4g}" in str(summary) and "10 rounds" in str(summary)
  assert PrivacyLedger(DELTA, privacy_unit="user-level").summary().privacy_unit == (
      "user-level")
  with pytest.raises(FedJaxDpError, match="privacy_unit"):
    PrivacyLedger(DELTA, privacy_unit="client")
