"""Tests of `fedjax_dp.algorithms.participation_spec.ParticipationSpec`: the planned run's
events, calibration and the fields metrics.jsonl carries."""

import math

import dp_accounting
import pytest

from fedjax_dp.algorithms.participation_spec import ParticipationSpec
from fedjax_dp.privacy import accountants
from fedjax_dp.runs.privacy import calibrate_noise_multiplier
from fedjax_dp.validation import FedJaxDpError


def test_cyclic_run_events_and_calibration():
  """The planned run is ceil(T / b) Poisson(q b) Gaussians; calibration through the
  run's path (`calibrate_noise_multiplier`) meets the target by dp_accounting's RDP."""
  spec = ParticipationSpec("user-level", "add_remove", "cyclic_poisson", min_separation=3,
                           sampling_rate=0.1)
  rounds, delta = 10, 1e-3
  got = accountants.event_epsilon(spec.events_of_run(1.3, rounds), delta)
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.PoissonSampledDpEvent(0.1 * 3, dp_accounting.GaussianDpEvent(1.3)),
              math.ceil(rounds / 3))
  assert got == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
  assert spec.calibrate_noise_multiplier(rounds, 3.0, delta, "rdp") is None
  z = calibrate_noise_multiplier(spec, rounds, 3.0, delta, "rdp")
  assert accountants.event_epsilon(spec.events_of_run(z, rounds), delta) == pytest.approx(
      3.0, rel=1e-3)
  fields = spec.accounting_fields(delta)
  assert fields["min_separation"] == 3 and fields["accounting_method"] == "dp_accounting"


def test_monte_carlo_spec():
  spec = ParticipationSpec("user-level", "add_remove", "balls_in_bins", epoch_length=4,
                           sampling_rate=0.25, mc_samples=20_000)
  assert spec.monte_carlo
  with pytest.raises(FedJaxDpError, match="Monte Carlo"):
    spec.round_event(1.0)
  z = calibrate_noise_multiplier(spec, 6, 3.0, 1e-2, "rdp")
  # calibrated on a draw of its own (seed + 1), 2% below the target; the reporting draw
  # (seed 0) is independent of z and lands near it
  from fedjax_dp.algorithms import participation_spec as ps
  from fedjax_dp.privacy import allocation
  assert z == allocation.calibrate_allocation(
      3.0 * (1 - ps.CALIBRATION_MARGIN), 1e-2, 4, 1, 2, 20_000, spec.mc_beta,
      spec.mc_seed + ps.CALIBRATION_SEED_OFFSET)
  eps = spec.make_ledger(1e-2).record(spec.planned_report(z, 6))
  assert 2.85 < eps[-1] <= 3.0
  fields = spec.accounting_fields(1e-2)
  assert (fields["epoch_length"], fields["mc_samples"], fields["accounting_method"]) == (
      4, 20_000, "monte_carlo")
  with pytest.raises(FedJaxDpError) as e:
    ParticipationSpec("user-level", "add_remove", "poisson", sampling_rate=0.1)
  assert e.value.option == "sampler"
