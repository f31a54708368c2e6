"""Tests of DP-FTRL / banded MF accounting (fedjax_dp.algorithms.dp_ftrl.accounting)."""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest
from jax_privacy.experimental import accounting as jp_accounting
from jax_privacy.matrix_factorization import sensitivity as jp_sensitivity

from fedjax_dp.algorithms.dp_ftrl import accounting as acc
from fedjax_dp.algorithms.dp_ftrl.noise import BandedNoise
from fedjax_dp.algorithms.dp_ftrl.participation import CyclicSampler
from fedjax_dp.privacy import calibration
from fedjax_dp.privacy.correlated_ledger import CorrelatedNoiseLedger
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5
ORDERS = list(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
Rel = dp_accounting.NeighboringRelation


def _rdp_eps(event, relation=Rel.ADD_OR_REMOVE_ONE):
  """Epsilon from a fresh dp_accounting RdpAccountant (independent of the module)."""
  return dp_accounting.rdp.RdpAccountant(ORDERS, relation).compose(event).get_epsilon(DELTA)


@pytest.mark.parametrize("z,trees,length", [(1.0, 4, 16), (2.5, 1, 7), (0.8, 10, 1)])
def test_tree_event_is_a_gaussian_of_levels_times_trees(z, trees, length):
  levels = int(math.floor(math.log2(length))) + 1
  event = acc.tree_run_event(z, trees * length, length)
  want = _rdp_eps(dp_accounting.GaussianDpEvent(z / math.sqrt(levels * trees)))
  assert acc.event_epsilon(event, DELTA) == pytest.approx(want, rel=1e-9)
  # dp_accounting's own tree event, one per tree (each client once per tree), composed
  # by its RdpAccountant under REPLACE_SPECIAL: the same epsilon.
  native = dp_accounting.SelfComposedDpEvent(
      dp_accounting.SingleEpochTreeAggregationDpEvent(z, length), trees)
  assert _rdp_eps(native, Rel.REPLACE_SPECIAL) == pytest.approx(want, rel=1e-9)
  assert acc.event_epsilon(acc.tree_aggregation_event(z, trees * length, length),
                           DELTA) == pytest.approx(want, rel=1e-9)


def test_dp_accounting_step_count_list_is_one_participation_overall():
  """The relation found in dp_accounting: SingleEpochTreeAggregationDpEvent(z, [T] * k)
  charges ONE tree's depth (a record in at most one round across all k trees), so for a
  client in every tree it would under-count the RDP k times; hence the composition."""
  z, t_len, k = 1.0, 8, 5
  listed = dp_accounting.SingleEpochTreeAggregationDpEvent(z, [t_len] * k)
  one = dp_accounting.GaussianDpEvent(z / math.sqrt(4))
  assert _rdp_eps(listed, Rel.REPLACE_SPECIAL) == pytest.approx(_rdp_eps(one), rel=1e-9)
  assert acc.event_epsilon(acc.tree_run_event(z, k * t_len, t_len), DELTA) > \
      2 * _rdp_eps(listed, Rel.REPLACE_SPECIAL)


def test_partial_last_tree_and_checks():
  assert acc.tree_sensitivity_squared(2 * 8 + 5, 8) == 2 * 4 + 3
  assert acc.tree_sensitivity_squared(0, 8) == 0
  e = acc.tree_run_event(1.0, 21, 8)
  assert e.noise_multiplier == pytest.approx(1.0 / math.sqrt(11))
  assert isinstance(acc.tree_run_event(1.0, 0, 8), dp_accounting.NoOpDpEvent)
  with pytest.raises(FedJaxDpError) as err:
    acc.tree_run_event(1.0, 10, 8, cycle_length=4)
  assert err.value.option == "restart_every"
  with pytest.raises(FedJaxDpError):
    acc.tree_run_event(-1.0, 10, 8)


def _dense_sens2(noise, sampler, rounds):
  """max_g sum_{t, t' in P_g} |C^T C| over C[:rounds, :rounds], densely."""
  c = noise.matrix()[:rounds, :rounds]
  x = c.T @ c
  r = sampler.cycle_length
  return max(np.abs(x[np.ix_(p, p)]).sum()
             for p in (np.arange(g, rounds, r) for g in range(min(r, rounds))))


def test_banded_one_band_every_round_is_plain_composition():
  noise, sampler = BandedNoise.create(30, 1, "sqrt"), CyclicSampler.create(10, 1)
  assert acc.banded_sensitivity_squared(noise, sampler, 30) == pytest.approx(30)
  event = acc.banded_run_event(1.3, 30, noise, sampler)
  want = _rdp_eps(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.3), 30))
  assert acc.event_epsilon(event, DELTA) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("rounds,cycle", [(40, 4), (40, 5), (37, 6), (25, 4)])
def test_banded_min_separation_is_participations_times_column_norm(rounds, cycle):
  noise = BandedNoise.create(40, 4, "sqrt")
  sampler = CyclicSampler.create(60, cycle, seed=1)
  sens2 = acc.banded_sensitivity_squared(noise, sampler, rounds)
  assert sens2 == pytest.approx(_dense_sens2(noise, sampler, rounds), rel=1e-12)
  if rounds == noise.rounds:  # every column has norm 1
    assert sens2 == pytest.approx(sampler.participations(rounds), rel=1e-12)
  else:  # truncated: the last columns lose rows; group 0 has ceil(rounds / R) rounds
    assert sens2 <= sampler.participations(rounds) + 1e-12


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype int64")
@pytest.mark.parametrize("cycle", [1, 2, 3, 5])
def test_banded_overlapping_columns_match_jax_privacy(cycle):
  """R < bands: columns of one client overlap; our band-form bound equals the dense
  abs-Gram sum and jax-privacy's fixed-epoch sensitivity (R | n)."""
  noise = BandedNoise.create(30, 6, "sqrt")
  sampler = CyclicSampler.create(50, cycle, seed=2)
  sens2 = acc.banded_sensitivity_squared(noise, sampler, 30)
  assert sens2 == pytest.approx(_dense_sens2(noise, sampler, 30), rel=1e-12)
  if 30 % cycle == 0:
    jp = jp_sensitivity.fixed_epoch_sensitivity(noise.matrix(), epochs=30 // cycle)
    assert math.sqrt(sens2) == pytest.approx(float(jp), rel=1e-5)
  if cycle < 6:
    assert sens2 > sampler.participations(30)  # overlap costs privacy


def test_amplified_event_is_jax_privacys():
  noise = BandedNoise.create(50, 4, "sqrt")
  sampler = CyclicSampler.create(80, 4, group_rate=0.25)
  event = acc.banded_run_event(0.9, 50, noise, sampler)
  theirs = jp_accounting.amplified_bandmf_event(0.9, 50, num_bands=4, sampling_prob=0.25)
  assert event == theirs
  dpsgd = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(0.25, dp_accounting.GaussianDpEvent(0.9)), 13)
  assert acc.event_epsilon(event, DELTA) == pytest.approx(_rdp_eps(dpsgd), rel=1e-9)
  unamplified = acc.event_epsilon(
      acc.banded_run_event(0.9, 50, noise, CyclicSampler.create(80, 4)), DELTA)
  assert acc.event_epsilon(event, DELTA) < unamplified
  # No amplification theorem with R < bands: the bound of every realisation.
  few = CyclicSampler.create(80, 2, group_rate=0.25)
  e2 = acc.banded_run_event(0.9, 50, noise, few)
  assert isinstance(e2, dp_accounting.GaussianDpEvent)
  assert e2.noise_multiplier == pytest.approx(
      0.9 / math.sqrt(acc.banded_sensitivity_squared(noise, few, 50)))


def test_banded_refuses_more_rounds_than_c():
  noise, sampler = BandedNoise.create(10, 2, "sqrt"), CyclicSampler.create(10, 2)
  with pytest.raises(FedJaxDpError) as err:
    acc.banded_run_event(1.0, 11, noise, sampler)
  assert err.value.option == "rounds"
  assert isinstance(acc.banded_run_event(1.0, 0, noise, sampler), dp_accounting.NoOpDpEvent)


def _tree_ledger():
  return CorrelatedNoiseLedger(DELTA, lambda z, r: acc.tree_run_event(z, r, 8), "tree")


def test_ledger_history_non_decreasing_and_ends_at_the_run_event():
  ledger = _tree_ledger()
  first = ledger.record_many(np.full(10, 1.2, np.float32), 0.25, 1)
  second = ledger.record_many(np.full(14, 1.2, np.float32), [0.25] * 14, [1] * 14)
  eps = np.concatenate([first, second])
  assert eps.shape == (24,) and (np.diff(eps) >= -1e-12).all()
  z = float(np.float32(1.2))
  want = acc.event_epsilon(acc.tree_run_event(z, 24, 8), DELTA)
  assert eps[-1] == pytest.approx(want, rel=1e-12)
  assert ledger.epsilon() == pytest.approx(want, rel=1e-12)
  one_call = _tree_ledger().record_many(np.full(24, 1.2, np.float32), 0.25)
  np.testing.assert_allclose(one_call, eps, rtol=1e-12)
  assert ledger.num_rounds == 24 and ledger.dp_event() == acc.tree_run_event(z, 24, 8)
  assert ledger.truncation_probability() == 0.0 and ledger.delta_total() == DELTA
  assert ledger.accounting_warnings() == []


def test_ledger_refuses_changing_noise_and_multiple_steps():
  ledger = _tree_ledger()
  with pytest.raises(FedJaxDpError) as err:
    ledger.record_many([1.0, 1.0, 2.0], 0.1)
  assert err.value.option == "noise_multiplier" and "noise_multipliers[2]" in str(err.value)
  assert ledger.num_rounds == 0
  ledger.record_many([1.0, 1.0], 0.1)
  with pytest.raises(FedJaxDpError, match="differs from the run's noise multiplier"):
    ledger.record(1.5, 0.1)
  with pytest.raises(FedJaxDpError) as err:
    ledger.record_many([1.0], 0.2)
  assert err.value.option == "sampling_rate"
  with pytest.raises(FedJaxDpError) as err:
    ledger.record_many([1.0], 0.1, 2)
  assert err.value.option == "dp_steps"
  assert ledger.num_rounds == 2


def test_ledger_pld_and_rdp():
  tree = _tree_ledger()
  tree.record(1.0, 0.1, count=32)
  assert tree.supports("pld")
  pld, rdp = tree.epsilon(accountant="pld"), tree.epsilon()
  assert 0 < pld <= rdp + 1e-9
  noise = BandedNoise.create(24, 3, "sqrt")
  sampler = CyclicSampler.create(60, 3, group_rate=0.5)
  banded = CorrelatedNoiseLedger(
      DELTA, lambda z, r: acc.banded_run_event(z, r, noise, sampler), "banded",
      pld_value_discretization_interval=1e-3)
  banded.record(1.0, sampler.sampling_rate, count=24)
  pld, rdp = banded.epsilon(accountant="pld"), banded.epsilon()
  assert 0 < pld <= rdp + 1e-9
  assert banded.epsilon(delta=1e-3) < rdp


def test_ledger_round_trip_and_empty():
  ledger = _tree_ledger()
  assert ledger.epsilon() == 0.0 and ledger.epsilon(accountant="pld") == 0.0
  ledger.record(0.7, 0.2, count=9)
  back = CorrelatedNoiseLedger.from_dict(
      ledger.to_dict(), lambda z, r: acc.tree_run_event(z, r, 8))
  assert back.epsilon() == ledger.epsilon() and back.num_rounds == 9
  with pytest.raises(FedJaxDpError):
    CorrelatedNoiseLedger.from_dict({"format": "x"}, lambda z, r: None)
  zero = _tree_ledger()
  zero.record(0.0, 0.2)
  assert zero.epsilon() == math.inf


def test_run_event_is_calibratable():
  """runs/privacy.py calibrates by composing run_event in a fresh accountant under
  add/remove: the events must compose there (no REPLACE_SPECIAL-only tree event)."""
  noise = BandedNoise.create(20, 2, "sqrt")
  sampler = CyclicSampler.create(40, 2, group_rate=0.5)
  for make in (lambda z: acc.tree_run_event(z, 20, 4),
               lambda z: acc.banded_run_event(z, 20, noise, sampler)):
    z = calibration.calibrate(make, 3.0, DELTA, "rdp", orders=ORDERS[::8])
    assert acc.event_epsilon(make(z), DELTA, orders=ORDERS[::8]) == pytest.approx(
        3.0, rel=1e-3)
