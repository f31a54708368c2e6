"""Tests of structured participation's accounting: `make_dp_event` with a `Schedule`
and `fedjax_dp.privacy.participation_ledger.ParticipationLedger`, against dp_accounting
composed independently here."""

import math

import dp_accounting
import numpy as np
import pytest

from fedjax_dp.privacy import events
from fedjax_dp.privacy.events import Schedule, Truncation, make_dp_event
from fedjax_dp.privacy.ledger_protocol import PrivacyReport
from fedjax_dp.privacy.participation_ledger import ParticipationLedger
from fedjax_dp.validation import FedJaxDpError


def _rdp_eps(events_counts, delta):
  acc = dp_accounting.rdp.RdpAccountant()
  for e, c in events_counts:
    acc.compose(e, c)
  return acc.get_epsilon(delta)


def _poisson(q, z):
  return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))


def test_cyclic_event_schedule():
  kw = dict(sampler="cyclic_poisson")
  e0 = make_dp_event(1.0, 0.1, 1, schedule=Schedule(6, 3), **kw)
  assert e0 == _poisson(0.1 * 3, 1.0)
  assert isinstance(make_dp_event(1.0, 0.1, 1, schedule=Schedule(7, 3), **kw),
                    dp_accounting.NoOpDpEvent)
  assert make_dp_event(1.0, 0.1, 1, schedule=Schedule(7, 3, group=1), **kw) == e0
  vis = make_dp_event(1.0, 0.1, 1, schedule=Schedule(0, 3), observation="attributable",
                      **kw)
  assert vis == events.VisibleParticipationDpEvent(0.1 * 3, dp_accounting.GaussianDpEvent(1.0))
  with pytest.raises(FedJaxDpError) as e:
    make_dp_event(1.0, 0.1, 1, **kw)
  assert e.value.option == "schedule"


def test_allocation_events():
  with pytest.raises(FedJaxDpError, match="Monte Carlo") as e:
    make_dp_event(1.0, 0.2, 1, "balls_in_bins", schedule=Schedule(0, epoch_length=5))
  assert e.value.option == "sampler"
  ev = make_dp_event(1.5, 0.4, 1, "random_allocation", observation="attributable",
                     schedule=Schedule(10, epoch_length=5, participations=2))
  assert ev == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.5), 2)
  assert isinstance(make_dp_event(1.5, 0.4, 1, "random_allocation",
                                  observation="attributable",
                                  schedule=Schedule(11, epoch_length=5, participations=2)),
                    dp_accounting.NoOpDpEvent)
  # attributable needs zero-out at user level; the relations are add/remove or zero-out
  with pytest.raises(FedJaxDpError):
    events.check_observation("attributable", "balls_in_bins", "add_remove", "user")
  with pytest.raises(FedJaxDpError):
    events.neighboring_relation("cyclic_poisson", relation="replace_one")


@pytest.mark.parametrize("rounds,b", [(10, 4), (9, 3), (7, 7)])
def test_cyclic_ledger_is_ceil_t_over_b_poisson(rounds, b):
  """Constant noise: the worst group (0) has ceil(T / b) eligible rounds; its
  composition of Poisson(q b) Gaussians is the run's epsilon (RDP and PLD)."""
  q, z, delta = 0.1, 1.1, 1e-5
  led = ParticipationLedger(delta, "cyclic_poisson", min_separation=b)
  hist = led.record(PrivacyReport(np.full(rounds, z), q, 1))
  want = {c: _rdp_eps([(_poisson(q * b, z), c)], delta)
          for c in range(1, math.ceil(rounds / b) + 1)}
  for r in range(rounds):
    assert hist[r] == pytest.approx(want[math.ceil((r + 1) / b)], rel=1e-9)
  if b == 4:  # PLD once (slow)
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(_poisson(q * b, z), math.ceil(rounds / b))
    assert led.epsilon(accountant="pld") == pytest.approx(pld.get_epsilon(delta), rel=1e-3)
  # group 0 really is the worst: every other group has floor or ceil as many rounds
  counts = [sum(1 for r in range(rounds) if r % b == g) for g in range(b)]
  assert max(counts) == counts[0] == math.ceil(rounds / b)


def test_cyclic_ledger_takes_the_worst_group_with_varying_noise():
  """Noise that varies: group 1 (rounds 1, 3) sees z = 0.7, group 0 z = 5: the ledger's
  epsilon is group 1's, not group 0's."""
  q, delta = 0.2, 1e-5
  led = ParticipationLedger(delta, "cyclic_poisson", min_separation=2)
  led.record(PrivacyReport([5.0, 0.7, 5.0, 0.7, 5.0], q, 1))
  g0 = _rdp_eps([(_poisson(0.4, 5.0), 3)], delta)
  g1 = _rdp_eps([(_poisson(0.4, 0.7), 2)], delta)
  assert g1 > g0 and led.epsilon() == pytest.approx(g1, rel=1e-9)


def test_attributable_allocation_ledger():
  """k Gaussian releases per epoch touched (zero-out)."""
  t, k, z, delta = 4, 2, 2.0, 1e-5
  led = ParticipationLedger(delta, "random_allocation", epoch_length=t, participations=k,
                            relation="zero_out", observation="attributable")
  hist = led.record(PrivacyReport(np.full(9, z), k / t, 1))
  for r in range(9):
    want = _rdp_eps([(dp_accounting.GaussianDpEvent(z), k * math.ceil((r + 1) / t))], delta)
    assert hist[r] == pytest.approx(want, rel=1e-9)


def test_epoch_charged_at_its_smallest_noise():
  led = ParticipationLedger(1e-5, "balls_in_bins", epoch_length=3, relation="zero_out",
                            observation="attributable")
  hist = led.record(PrivacyReport([3.0, 3.0, 1.0], 1 / 3, 1))
  assert hist[0] == pytest.approx(_rdp_eps([(dp_accounting.GaussianDpEvent(3.0), 1)], 1e-5))
  assert hist[2] == pytest.approx(_rdp_eps([(dp_accounting.GaussianDpEvent(1.0), 1)], 1e-5))


def test_monte_carlo_ledger_history_truncation_and_round_trip():
  t, k = 5, 2
  trunc = Truncation(50, 30, 1)
  led = ParticipationLedger(1e-2, "random_allocation", epoch_length=t, participations=k,
                            truncation=trunc, num_samples=20_000, seed=3)
  hist = led.record(PrivacyReport(np.full(12, 1.5), k / t, 1))
  # ceil(r / t) epochs: constant within an epoch, increasing across
  assert hist[0] == hist[4] < hist[5] == hist[9] < hist[10] == hist[11]
  assert led.truncation_probability() == pytest.approx(12 * trunc.probability(k / t))
  again = ParticipationLedger.from_dict(led.to_dict())
  assert again.epsilon() == led.epsilon() and again.num_rounds == 12
  assert "probability >= 0.999" in led.accounting_method
  with pytest.raises(FedJaxDpError) as e:
    led.record(PrivacyReport([1.5], 0.5, 1))  # not k / t
  assert e.value.option == "sampling_rate" and led.num_rounds == 12
  with pytest.raises(FedJaxDpError) as e:
    led.record(PrivacyReport([1.5], k / t, 2))
  assert e.value.option == "dp_steps"
