"""Tests for `fedjax_dp.privacy.calibration`: it inverts `compute_epsilon`."""

import pytest

from fedjax_dp.privacy import accountants, calibration
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5
# Coarse PLD grid where exact agreement with an equally configured PLDAccountant
# is checked; keeps the module fast.
COARSE = 1e-3


# --------------------------------------------------------------------------
# Calibration and compute_epsilon
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    dict(sampling_rate=0.05, rounds=50),
    dict(sampling_rate=0.02, rounds=20, steps_per_round=5),
    dict(sampling_rate=None, rounds=30, sampler="fixed_size", population_size=200,
         cohort_size=20),
    dict(sampling_rate=0.05, rounds=50, accountant="pld",
         pld_value_discretization_interval=COARSE),
])
def test_calibration_inverts_compute_epsilon(kwargs):
  target = 3.0
  z = calibration.calibrate_noise_multiplier(target, DELTA, **kwargs)
  kw = dict(kwargs)
  q, rounds = kw.pop("sampling_rate"), kw.pop("rounds")
  eps = accountants.compute_epsilon(z, q, rounds, DELTA, **kw)
  assert eps <= target
  assert eps == pytest.approx(target, rel=1e-3)
  assert accountants.compute_epsilon(0.95 * z, q, rounds, DELTA, **kw) > target


def test_calibration_larger_budget_needs_less_noise():
  z3 = calibration.calibrate_noise_multiplier(3.0, DELTA, 1.0, 10)
  z8 = calibration.calibrate_noise_multiplier(8.0, DELTA, 1.0, 10)
  assert z8 < z3
  # z = 1 is already enough for this target: the bracket search goes downwards.
  z_big = calibration.calibrate_noise_multiplier(50.0, DELTA, 1.0, 1)
  assert z_big < 1.0
  assert accountants.compute_epsilon(z_big, 1.0, 1, DELTA) <= 50.0


# --------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------


GOOD = dict(target_epsilon=2.0, delta=DELTA, sampling_rate=0.1, rounds=10)


@pytest.mark.parametrize("name,value", [
    ("target_epsilon", -1.0), ("target_epsilon", 0.0), ("target_epsilon", float("nan")),
    ("target_epsilon", float("inf")),
    ("delta", 0.0), ("delta", 1.0), ("delta", 1.5), ("delta", float("nan")),
    ("sampling_rate", 0.0), ("sampling_rate", 1.5), ("sampling_rate", -0.1),
    ("sampling_rate", float("nan")),
    ("rounds", 0), ("rounds", 2.5),
    ("steps_per_round", 0), ("sampler", "shuffle"), ("accountant", "moments"),
    ("tol", 0.0),
])
def test_calibration_rejects_bad_inputs(name, value):
  kwargs = dict(GOOD, **{name: value})
  with pytest.raises(FedJaxDpError, match=name):
    calibration.calibrate_noise_multiplier(**kwargs)


def test_calibration_composes_visible_participation_under_rdp():
  """Rounds whose participation the server sees (local noise, secure sums) are
  `VisibleParticipationDpEvent`s: the RDP calibration composes them (it used to raise
  dp_accounting's UnsupportedEventError), and the z it finds spends the target."""
  import dp_accounting
  from fedjax_dp.privacy import accountants, calibration, events

  def run_event(z):
    return dp_accounting.SelfComposedDpEvent(
        events.make_dp_event(z, 0.3, observation="attributable", sampler="poisson"), 20)

  z = calibration.calibrate(run_event, 4.0, 1e-5, "rdp")
  assert accountants.event_epsilon(run_event(z), 1e-5, "rdp") == pytest.approx(4.0, rel=1e-3)
  # Visible participation costs more than hidden (amplified) sampling at the same q.
  hidden = calibration.calibrate(lambda z_: dp_accounting.SelfComposedDpEvent(
      events.make_dp_event(z_, 0.3), 20), 4.0, 1e-5, "rdp")
  assert z > hidden
