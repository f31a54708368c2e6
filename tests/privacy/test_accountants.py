"""Tests for `fedjax_dp.privacy.accountants` against direct dp_accounting computations."""

import logging

import dp_accounting
from dp_accounting import rdp as dp_rdp
from absl import logging as absl_logging
import pytest

from fedjax_dp.privacy import accountants
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError

from direct_dp import DELTA, direct_rdp_epsilon, poisson

CONVERGENCE_MSG = "_compute_log_a_frac failed to converge"


# --------------------------------------------------------------------------
# compute_epsilon
# --------------------------------------------------------------------------


def test_compute_epsilon_matches_dp_accounting():
  eps = accountants.compute_epsilon(1.1, 0.01, 200, DELTA, steps_per_round=2)
  direct = direct_rdp_epsilon(
      [dp_accounting.SelfComposedDpEvent(poisson(1.1, 0.01), 400)])
  assert eps == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("z,q,rounds", [(1.0, 0.1, 100), (1.5, 0.01, 1000), (2.0, 1.0, 10)])
def test_pld_is_tighter_than_rdp(z, q, rounds):
  rdp = accountants.compute_epsilon(z, q, rounds, DELTA)
  pld = accountants.compute_epsilon(z, q, rounds, DELTA, accountant="pld")
  assert 0.5 * rdp < pld <= rdp


def test_pld_fixed_size_is_supported_and_below_rdp():
  """Issue 30 (F9): sampling without replacement has a PLD (Dong, Roth, Su 2022,
  Thm. 4.2), tighter than the RDP bound of Wang, Balle, Kasiviswanathan; it used to be
  refused. Its validity is tested in test_observation.py."""
  kw = dict(sampler="fixed_size", population_size=100)
  pld = accountants.compute_epsilon(1.0, 0.1, 10, DELTA, accountant="pld", **kw)
  rdp = accountants.compute_epsilon(1.0, 0.1, 10, DELTA, **kw)
  assert 0 < pld < rdp


@pytest.mark.parametrize("name,value", [
    ("noise_multiplier", -0.5), ("noise_multiplier", float("nan")),
    ("noise_multiplier", float("inf")), ("sampling_rate", 0.0),
    ("sampling_rate", 1.01), ("delta", 1.0), ("rounds", 0), ("steps_per_round", 0),
])
def test_compute_epsilon_rejects_bad_inputs(name, value):
  kwargs = dict(noise_multiplier=1.0, sampling_rate=0.1, rounds=10, delta=DELTA)
  kwargs[name] = value
  with pytest.raises(FedJaxDpError, match=name):
    accountants.compute_epsilon(**kwargs)


# --------------------------------------------------------------------------
# Log hygiene
# --------------------------------------------------------------------------


def _convergence_records(records):
  return [r for r in records if r.name == "absl" and CONVERGENCE_MSG in r.getMessage()]


def test_dp_accounting_itself_warns_on_every_compose(caplog):
  """The premise of the log-hygiene code: dp-accounting 0.6.0 warns per order and call."""
  caplog.set_level(logging.WARNING)
  caplog.set_level(logging.WARNING, logger="absl")  # whatever an earlier test left
  acc = dp_rdp.RdpAccountant()
  acc.compose(poisson(1.0, 0.1))
  acc.compose(poisson(1.0, 0.1))
  assert len(_convergence_records(caplog.records)) >= 2 * 5


def test_100_recorded_rounds_emit_at_most_one_warning(caplog, monkeypatch):
  caplog.set_level(logging.WARNING)
  caplog.set_level(logging.WARNING, logger="absl")  # whatever an earlier test left
  caplog.set_level(logging.DEBUG, logger=accountants.__name__)
  composes = []
  original_compose = dp_rdp.RdpAccountant.compose

  def counting_compose(self, event, count=1):
    composes.append(event)
    return original_compose(self, event, count)

  monkeypatch.setattr(dp_rdp.RdpAccountant, "compose", counting_compose)
  accountants._rdp_of.cache_clear()  # pylint: disable=protected-access
  ledger = PrivacyLedger(DELTA)
  eps = []
  for _ in range(100):
    ledger.record(1.0, 0.1)
    eps.append(ledger.epsilon())  # what a driver does after each round
  history = ledger.epsilon_history()
  eps_pld = ledger.epsilon(accountant="pld")
  assert ledger.events == [(poisson(1.0, 0.1), 100)]
  assert eps_pld < eps[-1] == history[-1]
  assert _convergence_records(caplog.records) == []
  ours = [r for r in caplog.records if r.name == accountants.__name__]
  # One summary, at DEBUG: the excluded orders do not change this epsilon (its order
  # is inside the evaluated range), so nothing is said at WARNING (issue 19).
  assert len(ours) == 1 and "1.1" in ours[0].getMessage()
  assert ours[0].levelno == logging.DEBUG and ledger.accounting_warnings() == []
  assert len(caplog.records) <= 6
  # The RDP of the unique event was computed once, not once per round.
  assert composes == [poisson(1.0, 0.1)]


def test_deduplication_silences_only_the_convergence_warning(caplog):
  caplog.set_level(logging.WARNING)
  caplog.set_level(logging.WARNING, logger="absl")  # whatever an earlier test left
  caplog.set_level(logging.DEBUG, logger=accountants.__name__)  # its summary: DEBUG
  with accountants.deduplicate_rdp_convergence_warnings():
    dp_rdp.RdpAccountant().compose(poisson(0.9, 0.1), 3)
    absl_logging.warning("an unrelated dp_accounting warning")
  messages = [r.getMessage() for r in caplog.records]
  assert "an unrelated dp_accounting warning" in messages
  assert _convergence_records(caplog.records) == []
  assert sum("did not converge" in m for m in messages) == 1
  # Outside the context manager, nothing is filtered any more.
  caplog.clear()
  dp_rdp.RdpAccountant().compose(poisson(0.9, 0.1))
  assert _convergence_records(caplog.records)
