"""Tests of `fedjax_dp.privacy.ledger_protocol`: every ledger is a `Ledger`, composes a
`PrivacyReport` exactly as its ``record_many`` composes the same arrays, round-trips
through ``to_dict`` / ``from_dict``, and refuses a report it cannot compose with an
error naming the ledger that can."""

import math
import types

import dp_accounting
import numpy as np
import pytest

from fedjax_dp.privacy.correlated_ledger import CorrelatedNoiseLedger
from fedjax_dp.privacy.device_ledger import DeviceLedger
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import Ledger, PrivacyReport, release_field
from fedjax_dp.privacy.multi_release import MultiReleaseLedger
from fedjax_dp.privacy.per_client import PerClientLedger
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5
COARSE = 1e-3  # PLD grid: keeps the module fast

# Six rounds in which z, q and steps all change (no two formulas can coincide).
Z = np.array([0.8, 1.0, 1.0, 1.3, 0.9, 1.6])
Q = np.array([0.05, 0.1, 0.1, 0.02, 0.2, 0.05])
STEPS = np.array([1, 2, 2, 3, 1, 1])
R = len(Z)
# Per-client noise multipliers [R, 4]: clients 1 and 2 equal, the others not.
CLIENT_Z = np.stack([Z, 1.2 * Z, 1.2 * Z, Z[::-1]], axis=1)
# Per-device [R, 3] (inf: no release that round).
DEVICE_Z = np.array([[2.0, np.inf, 3.0], [1.5, 2.5, np.inf], [np.inf, 2.0, 2.0],
                     [3.0, 3.0, 1.2], [2.2, np.inf, 4.0], [1.8, 1.9, 2.1]])
RELEASES = {"inner": {"noise_multiplier": Z, "sampling_rate": Q, "dp_steps": STEPS},
            "outer": {"noise_multiplier": 0.7 * Z[::-1], "sampling_rate": Q[::-1] / 2,
                      "dp_steps": STEPS[::-1] + 1}}


def _run_event(z, rounds):
  """A run event whose epsilon grows with every round (rounds correlated)."""
  return dp_accounting.GaussianDpEvent(z / math.sqrt(rounds * (rounds + 1) / 2))


# name -> (make an empty ledger, its matching report, record_many's arguments)
CASES = {
    "PrivacyLedger": (
        lambda: PrivacyLedger(DELTA, pld_value_discretization_interval=COARSE),
        lambda: PrivacyReport(Z, Q, STEPS), lambda: (Z, Q, STEPS)),
    "MultiReleaseLedger": (
        lambda: MultiReleaseLedger(["inner", "outer"], DELTA,
                                   pld_value_discretization_interval=COARSE),
        lambda: PrivacyReport.from_releases(RELEASES, R),
        lambda: tuple({n: RELEASES[n][f] for n in RELEASES}
                      for f in ("noise_multiplier", "sampling_rate", "dp_steps"))),
    "PerClientLedger": (
        lambda: PerClientLedger(4, DELTA, pld_value_discretization_interval=COARSE),
        lambda: PrivacyReport(CLIENT_Z.min(axis=1), Q, STEPS,
                              client_noise_multipliers=CLIENT_Z),
        lambda: (CLIENT_Z, Q, STEPS)),
    "DeviceLedger": (
        lambda: DeviceLedger(3, DELTA, 5),
        lambda: PrivacyReport(DEVICE_Z.min(axis=1), 1.0, 1,
                              client_noise_multipliers=DEVICE_Z),
        lambda: (DEVICE_Z, np.ones(R), np.ones(R))),
    "DeviceLedger(budgets)": (
        lambda: DeviceLedger(3, DELTA, 5, budgets=[2.0, 1.5, 2.5]),
        lambda: PrivacyReport(DEVICE_Z.min(axis=1), 1.0, 1,
                              client_noise_multipliers=DEVICE_Z),
        lambda: (DEVICE_Z, np.ones(R), np.ones(R))),
    # The correlated analysis is for one z and rate for the whole run.
    "CorrelatedNoiseLedger": (
        lambda: CorrelatedNoiseLedger(DELTA, _run_event, "test",
                                      pld_value_discretization_interval=COARSE),
        lambda: PrivacyReport(np.full(R, 1.1), 0.1, 1),
        lambda: (np.full(R, 1.1), 0.1, 1)),
}


def _from_dict(ledger, state):
  if isinstance(ledger, CorrelatedNoiseLedger):
    return CorrelatedNoiseLedger.from_dict(state, _run_event)
  return type(ledger).from_dict(state)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_ledger_is_a_ledger(name):
  make, _, _ = CASES[name]
  assert isinstance(make(), Ledger)
  assert not isinstance(object(), Ledger)


@pytest.mark.parametrize("name", sorted(CASES))
def test_record_is_record_many_exactly(name):
  make, report, old_args = CASES[name]
  new, old = make(), make()
  eps = new.record(report())
  want = old.record_many(*old_args())
  assert eps.dtype == np.float64 and eps.shape == (R,)
  np.testing.assert_array_equal(eps, want)
  assert np.all(np.isfinite(eps)) and np.all(eps > 0)
  if "budgets" not in name and "Correlated" not in name:
    assert len(np.unique(eps)) > 2  # the rounds differ: so do their epsilons
  assert new.epsilon(accountant="rdp") == old.epsilon(accountant="rdp")
  assert new.epsilon() == pytest.approx(eps[-1], rel=1e-6)
  units, old_units = new.unit_epsilons(), (
      old.epsilons() if hasattr(old, "epsilons") else None)
  if old_units is None:
    assert units is None
  else:
    np.testing.assert_array_equal(units, old_units)
    assert new.epsilon() == pytest.approx(float(np.max(units)), rel=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_two_blocks_are_one(name):
  make, report, _ = CASES[name]
  one, two = make(), make()
  whole = report()
  eps = np.concatenate([two.record(whole.rows(slice(0, 2))),
                        two.record(whole.rows(slice(2, R)))])
  np.testing.assert_array_equal(eps, one.record(whole))
  assert one.epsilon() == two.epsilon()


@pytest.mark.parametrize("name", sorted(CASES))
def test_to_dict_from_dict_round_trips(name):
  make, report, _ = CASES[name]
  ledger = make()
  ledger.record(report())
  back = _from_dict(ledger, ledger.to_dict())
  assert isinstance(back, Ledger)
  for acc in ("rdp", "pld"):
    assert ledger.supports(acc)
    assert back.epsilon(accountant=acc) == ledger.epsilon(accountant=acc)
  if ledger.unit_epsilons() is not None:
    np.testing.assert_array_equal(back.unit_epsilons(), ledger.unit_epsilons())
  assert back.to_dict() == ledger.to_dict()


def test_correlated_ledger_from_dict_needs_its_run_event():
  ledger = CASES["CorrelatedNoiseLedger"][0]()
  ledger.record(CASES["CorrelatedNoiseLedger"][1]())
  with pytest.raises(FedJaxDpError, match="run_event") as err:
    CorrelatedNoiseLedger.from_dict(ledger.to_dict())
  assert err.value.option == "run_event"


def test_old_record_forms_still_work():
  ledger = PrivacyLedger(DELTA)
  assert ledger.record(1.0, 0.1, 2, count=3) is None
  ref = PrivacyLedger(DELTA)
  ref.record_many(np.ones(3), 0.1, 2)
  assert ledger.epsilon() == ref.epsilon()
  multi = MultiReleaseLedger(["a", "b"], DELTA)
  assert multi.record({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.2}, {"a": 1, "b": 1}) is None
  assert multi.num_rounds == 1


def test_per_client_ledger_without_client_noise_gives_every_client_the_rounds_z():
  new, old = PerClientLedger(3, DELTA), PerClientLedger(3, DELTA)
  np.testing.assert_array_equal(new.record(PrivacyReport(Z, Q, STEPS)),
                                old.record_many(Z, Q, STEPS))
  assert np.unique(new.unit_epsilons()).size == 1


_PLAIN = PrivacyReport(Z, Q, STEPS)
_CLIENTS = PrivacyReport(Z, Q, STEPS, client_noise_multipliers=CLIENT_Z)
_RELEASES = PrivacyReport.from_releases(RELEASES, R)


@pytest.mark.parametrize("name,report,match", [
    ("PrivacyLedger", _RELEASES, "MultiReleaseLedger"),
    ("PrivacyLedger", _CLIENTS, "PerClientLedger"),
    ("CorrelatedNoiseLedger", _RELEASES, "MultiReleaseLedger"),
    ("CorrelatedNoiseLedger", _CLIENTS, "PerClientLedger"),
    ("MultiReleaseLedger", _PLAIN, r"no RoundMetrics.releases.*PrivacyLedger"),
    ("MultiReleaseLedger", PrivacyReport(Z, Q, STEPS, client_noise_multipliers=CLIENT_Z,
                                         releases=RELEASES), "PerClientLedger"),
    ("PerClientLedger", _RELEASES, "MultiReleaseLedger"),
    ("DeviceLedger", _PLAIN, "PrivacyLedger"),
    ("DeviceLedger", _RELEASES, "MultiReleaseLedger"),
])
def test_a_report_for_another_ledger_is_refused_naming_it(name, report, match):
  ledger = CASES[name][0]()
  with pytest.raises(FedJaxDpError, match=match) as err:
    ledger.record(report)
  assert err.value.option == "ledger"
  assert name in str(err.value)
  assert ledger.to_dict() == CASES[name][0]().to_dict()  # nothing recorded


@pytest.mark.parametrize("name", sorted(CASES))
def test_record_takes_only_a_report(name):
  with pytest.raises(FedJaxDpError, match="PrivacyReport") as err:
    CASES[name][0]().record({"noise_multiplier": Z})
  assert err.value.option == "report"


def test_values_are_checked_by_the_ledger_and_nothing_is_recorded():
  ledger = PrivacyLedger(DELTA)
  with pytest.raises(FedJaxDpError, match=r"sampling_rates\[1\]"):
    ledger.record(PrivacyReport([1.0, 1.0], [0.1, 1.5], 1))
  assert ledger.num_rounds == 0
  multi = MultiReleaseLedger(["inner", "query"], DELTA)
  with pytest.raises(FedJaxDpError, match=r"missing \['query'\]"):
    multi.record(_RELEASES)
  assert multi.num_rounds == 0
  with pytest.raises(FedJaxDpError, match="num_clients=4"):
    PerClientLedger(4, DELTA).record(PrivacyReport(Z, Q, STEPS,
                                                   client_noise_multipliers=DEVICE_Z))
  correlated = CASES["CorrelatedNoiseLedger"][0]()
  with pytest.raises(FedJaxDpError, match="differs from the run's noise multiplier"):
    correlated.record(PrivacyReport(Z, 0.1, 1))
  assert correlated.num_rounds == 0


# --------------------------------------------------------------------------
# PrivacyReport
# --------------------------------------------------------------------------

def test_report_fields_are_read_only_float64_and_int64():
  z32 = np.asarray(Z, np.float32)
  rep = PrivacyReport(z32, 0.1, 2.0)
  assert rep.noise_multiplier.dtype == np.float64 and rep.dp_steps.dtype == np.int64
  np.testing.assert_array_equal(rep.noise_multiplier, z32.astype(np.float64))
  np.testing.assert_array_equal(rep.sampling_rate, np.full(R, 0.1))
  np.testing.assert_array_equal(rep.dp_steps, np.full(R, 2))
  assert rep.num_rounds == R and rep.release_names is None
  with pytest.raises(ValueError):
    rep.noise_multiplier[0] = 5.0
  z32[0] = 9.0  # the report holds a copy
  assert rep.noise_multiplier[0] == np.float32(Z[0])


@pytest.mark.parametrize("kwargs,field", [
    (dict(noise_multiplier=[[1.0]], sampling_rate=0.1, dp_steps=1), "noise_multiplier"),
    (dict(noise_multiplier=[1.0, 1.0], sampling_rate=[0.1], dp_steps=1), "sampling_rate"),
    (dict(noise_multiplier=[1.0], sampling_rate=0.1, dp_steps=1.5), "dp_steps"),
    (dict(noise_multiplier=["a"], sampling_rate=0.1, dp_steps=1), "noise_multiplier"),
    (dict(noise_multiplier=[1.0], sampling_rate=0.1, dp_steps=1,
          client_noise_multipliers=[1.0, 2.0]), "client_noise_multipliers"),
    (dict(noise_multiplier=[1.0], sampling_rate=0.1, dp_steps=1, releases={}), "releases"),
    (dict(noise_multiplier=[1.0], sampling_rate=0.1, dp_steps=1,
          releases={"a": {"noise_multiplier": 1.0}}), "releases"),
    (dict(noise_multiplier=[1.0], sampling_rate=0.1, dp_steps=1,
          releases={"a": {"noise_multiplier": [1.0, 2.0], "sampling_rate": 0.1,
                          "dp_steps": 1}}), "releases['a']['noise_multiplier']"),
])
def test_report_shapes_are_checked_naming_the_field(kwargs, field):
  with pytest.raises(FedJaxDpError) as err:
    PrivacyReport(**kwargs)
  assert err.value.option == field and field in str(err.value)


def _records(with_releases=True):
  out = []
  for t in range(R):
    r = {"round": t, "noise_multiplier": float(Z[t]), "sampling_rate": float(Q[t]),
         "dp_steps": int(STEPS[t]), "epsilon": 0.0}
    if with_releases:
      for n, fields in RELEASES.items():
        r.update({release_field(n, f): v[t].item() for f, v in fields.items()})
        r[release_field(n, "noise_stddev")] = 2.0
    out.append(r)
  return out


def test_from_records():
  plain = PrivacyReport.from_records(_records(False))
  for f, want in (("noise_multiplier", Z), ("sampling_rate", Q), ("dp_steps", STEPS)):
    np.testing.assert_array_equal(getattr(plain, f), want)
  assert plain.releases is None and plain.client_noise_multipliers is None
  multi = PrivacyReport.from_records(_records(), ["inner", "outer"])
  assert multi.release_names == ("inner", "outer")
  for n, fields in RELEASES.items():
    for f, want in fields.items():
      np.testing.assert_array_equal(multi.releases[n][f], want)
  assert PrivacyReport.from_records([]).num_rounds == 0
  with pytest.raises(FedJaxDpError, match=r"records\[0\] has no field 'outer_dp_steps'"):
    PrivacyReport.from_records([{k: v for k, v in _records()[0].items()
                                 if k != "outer_dp_steps"}], ["inner", "outer"])
  with pytest.raises(FedJaxDpError, match="'sampling_rate'"):
    PrivacyReport.from_records([{"noise_multiplier": 1.0, "dp_steps": 1}])


def test_from_metrics_takes_the_engines_metrics():
  releases = {n: dict({f: np.asarray(v, np.float32 if f != "dp_steps" else np.int32)
                       for f, v in fields.items()}, noise_stddev=np.ones(R, np.float32))
              for n, fields in RELEASES.items()}
  metrics = types.SimpleNamespace(
      noise_multiplier=np.asarray(Z, np.float32), sampling_rate=np.asarray(Q, np.float32),
      dp_steps=np.asarray(STEPS, np.int32), client_noise_multipliers=None,
      releases=releases)
  rep = PrivacyReport.from_metrics(metrics)
  np.testing.assert_array_equal(rep.noise_multiplier, np.float32(Z).astype(np.float64))
  assert set(rep.releases["inner"]) == {"noise_multiplier", "sampling_rate", "dp_steps"}
  np.testing.assert_array_equal(rep.releases["outer"]["dp_steps"], STEPS[::-1] + 1)
  per_client = types.SimpleNamespace(**dict(vars(metrics), releases=None,
                                            client_noise_multipliers=CLIENT_Z))
  np.testing.assert_array_equal(
      PrivacyReport.from_metrics(per_client).client_noise_multipliers, CLIENT_Z)
  with pytest.raises(FedJaxDpError, match="'releases'"):
    PrivacyReport.from_metrics(types.SimpleNamespace(noise_multiplier=Z, sampling_rate=Q,
                                                     dp_steps=STEPS,
                                                     client_noise_multipliers=None))
  bad = types.SimpleNamespace(**dict(vars(metrics), releases={"a": {"noise_multiplier": Z}}))
  with pytest.raises(FedJaxDpError, match=r"releases\['a'\]"):
    PrivacyReport.from_metrics(bad)


def test_from_releases_summarises_the_round_as_round_metrics_does():
  rep = PrivacyReport.from_releases(RELEASES, R)
  zs = np.stack([RELEASES[n]["noise_multiplier"] for n in RELEASES])
  np.testing.assert_array_equal(rep.noise_multiplier, zs.min(axis=0))
  np.testing.assert_array_equal(rep.sampling_rate, np.maximum(Q, Q[::-1] / 2))
  np.testing.assert_array_equal(rep.dp_steps, STEPS + STEPS[::-1] + 1)
  const = PrivacyReport.from_releases(
      {"a": {"noise_multiplier": 1.0, "sampling_rate": 0.1, "dp_steps": 2}}, 3)
  np.testing.assert_array_equal(const.releases["a"]["dp_steps"], [2, 2, 2])


def test_rows_selects_rounds_of_every_field():
  rep = PrivacyReport(Z, Q, STEPS, client_noise_multipliers=CLIENT_Z, releases=RELEASES)
  keep = np.array([True, False, True, False, False, True])
  sub = rep.rows(keep)
  assert sub.num_rounds == 3
  np.testing.assert_array_equal(sub.client_noise_multipliers, CLIENT_Z[keep])
  np.testing.assert_array_equal(sub.releases["outer"]["sampling_rate"], Q[::-1][keep] / 2)
