"""Tests of several DP releases per round: `fedjax_dp.privacy.multi_release`,
`MultiReleaseSpec.releases`, `PrivacyLedger.rdp_history` and the run helpers
(`fedjax_dp.runs.privacy`) and disclosure labels for releases.

Reference values come from dp_accounting's own accountants composing events built here
by hand (no fedjax_dp event or accounting code)."""

import json
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.algorithms.base import MultiReleaseSpec, PrivacySpec, Release
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.events import Truncation
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.multi_release import MultiReleaseLedger
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5
ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
Z, ROUNDS = 1.3, 50
RATES = {"inner": 0.1, "outer": 0.05}
STEPS = {"inner": 2, "outer": 2}
# Coarse PLD grid (the ledger and the reference use the same): keeps the module fast.
COARSE = 1e-3


def by_hand(z, q, steps, rounds):
  """``rounds`` rounds of ``steps`` Poisson-sampled Gaussians, built directly."""
  g = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
  return dp_accounting.SelfComposedDpEvent(g, steps * rounds)


def reference_event(z=Z, rounds=ROUNDS):
  return dp_accounting.ComposedDpEvent(
      [by_hand(z, RATES[n], STEPS[n], rounds) for n in ("inner", "outer")])


def make_ledger(rounds=ROUNDS, z=Z, **kw):
  ledger = MultiReleaseLedger(["inner", "outer"], DELTA, **kw)
  ledger.record_many({n: np.full(rounds, z) for n in RATES}, dict(RATES), dict(STEPS))
  return ledger


@pytest.fixture(scope="module")
def ledger():
  return make_ledger(pld_value_discretization_interval=COARSE)


# --------------------------------------------------------------------------
# Epsilon == dp_accounting composing the same events
# --------------------------------------------------------------------------


def test_epsilon_matches_dp_accounting_rdp_and_pld(ledger):
  ref_rdp = dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
      reference_event()).get_epsilon(DELTA)
  assert ledger.epsilon() == pytest.approx(ref_rdp, rel=1e-9)
  assert ledger.num_rounds == ROUNDS
  ref_pld = dp_pld.PLDAccountant(ADD_REMOVE, COARSE).compose(
      reference_event()).get_epsilon(DELTA)
  eps_pld = ledger.epsilon(accountant="pld")
  # Same grid; only the grouping of the self-compositions differs (2 x 50 vs 100).
  assert eps_pld == pytest.approx(ref_pld, rel=2e-3)
  assert eps_pld < ledger.epsilon()
  # Both releases count: either alone spends clearly less.
  assert max(ledger.release_epsilons().values()) < 0.95 * ledger.epsilon()


def test_equal_releases_equal_one_ledger_with_steps_doubled():
  multi = MultiReleaseLedger(["a", "b"], DELTA)
  multi.record_many({"a": np.full(30, Z), "b": np.full(30, Z)}, {"a": 0.1, "b": 0.1},
                    {"a": 2, "b": 2})
  single = PrivacyLedger(DELTA)
  single.record_many(np.full(30, Z), 0.1, 4)
  # Exact: doubling is exact in floating point, so 60 v + 60 v == 120 v bit for bit.
  np.testing.assert_array_equal(multi.rdp(), single.rdp())
  assert multi.epsilon() == single.epsilon()
  np.testing.assert_array_equal(multi.epsilon_history(), single.epsilon_history())
  assert multi.summary().num_releases == single.summary().num_releases == 120


def test_epsilon_history_is_exact_per_round():
  z_sched = np.where(np.arange(ROUNDS) < 25, 1.3, 1.1)  # two runs per release
  multi = MultiReleaseLedger(["inner", "outer"], DELTA)
  eps = multi.record_many({n: z_sched for n in RATES}, dict(RATES), dict(STEPS))
  hist = multi.epsilon_history()
  np.testing.assert_array_equal(eps, hist)
  assert hist.shape == (ROUNDS,)
  assert hist[-1] == multi.epsilon()
  assert np.all(np.diff(hist) >= 0) and hist[0] > 0
  # A round in the middle (after the change of z) equals a ledger stopped there.
  t = 30
  part = MultiReleaseLedger(["inner", "outer"], DELTA)
  part.record_many({n: z_sched[:t + 1] for n in RATES}, dict(RATES), dict(STEPS))
  assert hist[t] == pytest.approx(part.epsilon(), rel=1e-12)
  ref = dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
      dp_accounting.ComposedDpEvent([by_hand(1.3, RATES[n], STEPS[n], 25)
                                     for n in RATES] +
                                    [by_hand(1.1, RATES[n], STEPS[n], t + 1 - 25)
                                     for n in RATES])).get_epsilon(DELTA)
  assert hist[t] == pytest.approx(ref, rel=1e-9)
  np.testing.assert_array_equal(multi.epsilon_history(start=t), hist[t:])
  # Another delta: another (larger for smaller delta) history.
  assert np.all(multi.epsilon_history(delta=1e-7) > hist)


def test_rdp_history_rows_are_cumulative_rdp():
  ledger = PrivacyLedger(DELTA)
  ledger.record(1.3, 0.1, 2, count=3)
  ledger.record(0.9, 0.1, 1, count=2)
  rows = ledger.rdp_history()
  assert rows.shape == (5, len(ledger.orders)) and rows.dtype == np.float64
  np.testing.assert_array_equal(rows[-1], ledger.rdp())
  for t in range(5):
    prefix = PrivacyLedger(DELTA)
    prefix.record(1.3, 0.1, 2, count=min(t + 1, 3))
    if t >= 3:
      prefix.record(0.9, 0.1, 1, count=t - 2)
    np.testing.assert_allclose(rows[t], prefix.rdp(), rtol=1e-12)
  np.testing.assert_array_equal(ledger.rdp_history(start=3), rows[3:])
  assert ledger.rdp_history(start=5).shape == (0, len(ledger.orders))
  ledger.record(1.3, 0.2)  # the cache grows with the ledger
  assert ledger.rdp_history().shape[0] == 6
  np.testing.assert_array_equal(ledger.rdp_history()[:5], rows)
  with pytest.raises(FedJaxDpError, match="start"):
    ledger.rdp_history(start=7)


def test_release_epsilons_are_each_release_alone(ledger):
  eps = ledger.release_epsilons()
  assert list(eps) == ["inner", "outer"]
  for name in RATES:
    alone = PrivacyLedger(DELTA)
    alone.record(Z, RATES[name], STEPS[name], count=ROUNDS)
    assert eps[name] == alone.epsilon()
    ref = dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
        by_hand(Z, RATES[name], STEPS[name], ROUNDS)).get_epsilon(DELTA)
    assert eps[name] == pytest.approx(ref, rel=1e-9)
  assert ledger.release("outer").num_rounds == ROUNDS
  with pytest.raises(FedJaxDpError, match="name"):
    ledger.release("middle")


def test_to_dict_round_trip_is_exact():
  trunc = {"inner": Truncation(200, 40, 3)}
  ledger = MultiReleaseLedger(["inner", "outer"], DELTA, truncations=trunc)
  ledger.record_many({"inner": np.float32([1.3, 1.2, 1.2]), "outer": [1.0, 1.0, 1.0]},
                     {"inner": 0.1, "outer": [0.05, 0.05, 0.07]}, {"inner": 2, "outer": 1})
  state = json.loads(json.dumps(ledger.to_dict()))
  back = MultiReleaseLedger.from_dict(state)
  assert back.to_dict() == ledger.to_dict()
  assert back.release_names == ("inner", "outer")
  assert back.truncations == {"inner": Truncation(200, 40, 3), "outer": None}
  assert back.epsilon() == ledger.epsilon()
  np.testing.assert_array_equal(back.epsilon_history(), ledger.epsilon_history())
  assert back.truncation_probability() == ledger.truncation_probability() > 0
  bad = json.loads(json.dumps(state))
  bad["ledgers"]["outer"]["delta"] = 1e-6
  with pytest.raises(FedJaxDpError, match="state"):
    MultiReleaseLedger.from_dict(bad)
  with pytest.raises(FedJaxDpError, match="state"):
    MultiReleaseLedger.from_dict(ledger.release("inner").to_dict())


def test_truncation_probability_is_the_sum_over_releases():
  trunc = {"inner": Truncation(100, 20, 3), "outer": Truncation(50, 8, 2)}
  ledger = MultiReleaseLedger(["inner", "outer"], DELTA, truncations=trunc)
  ledger.record({"inner": 1.0, "outer": 1.0}, {"inner": 0.1, "outer": 0.08},
                {"inner": 2, "outer": 3}, count=5)
  p = (5 * 3 * 2 * stats.binom.sf(20, 101, 0.1) + 5 * 2 * 3 * stats.binom.sf(8, 51, 0.08))
  assert p > 0
  assert ledger.truncation_probability() == pytest.approx(p, rel=1e-12)
  eps = ledger.epsilon()
  assert ledger.delta_total() == pytest.approx(DELTA + (1 + math.exp(eps)) * p, rel=1e-12)
  s = ledger.summary()
  assert s.delta_total == ledger.delta_total() and s.num_rounds == 5
  assert s.num_releases == 5 * 2 + 5 * 3
  assert "record" not in s.privacy_unit  # default unit: user
  # A huge p is capped at 1.
  big = MultiReleaseLedger(["a", "b"], DELTA, truncations={"a": Truncation(100, 1, 1),
                                                           "b": Truncation(100, 1, 1)})
  big.record({"a": 1.0, "b": 1.0}, {"a": 0.5, "b": 0.5}, {"a": 1, "b": 1})
  assert big.truncation_probability() == 1.0


def test_bad_keys_and_values_name_the_argument_and_record_nothing():
  ledger = MultiReleaseLedger(["inner", "outer"], DELTA)
  ledger.record_many({"inner": [1.0], "outer": [1.0]}, {"inner": 0.1, "outer": 0.1},
                     {"inner": 1, "outer": 1})
  before = ledger.to_dict()
  eps_before = ledger.epsilon_history()
  ok_z, ok_q, ok_s = ({"inner": [1.0, 1.0], "outer": [1.0, 1.0]},
                      {"inner": 0.1, "outer": 0.1}, {"inner": 1, "outer": 1})
  cases = [
      (({"inner": [1.0, 1.0]}, ok_q, ok_s), r"noise_multipliers.*missing \['outer'\]"),
      ((ok_z, {"inner": 0.1, "outer": 0.1, "extra": 0.1}, ok_s),
       r"sampling_rates.*unknown \['extra'\]"),
      ((ok_z, ok_q, [1, 1]), "dp_steps must be a dict"),
      (({"inner": [1.0, 1.0], "outer": [1.0]}, ok_q, ok_s), "same number of rounds"),
      (({"inner": 1.0, "outer": 1.0}, ok_q, ok_s), r"noise_multipliers\['inner'\]"),
      # The first release is valid (and would be recorded), the second is not.
      (({"inner": [1.0, 1.0], "outer": [1.0, -1.0]}, ok_q, ok_s),
       r"release 'outer'.*noise_multipliers\[1\]"),
      ((ok_z, {"inner": 0.1, "outer": [0.1, 1.5]}, ok_s),
       r"release 'outer'.*sampling_rates\[1\]"),
      ((ok_z, ok_q, {"inner": 1, "outer": 0}), r"release 'outer'.*dp_steps\[0\]"),
  ]
  for args, match in cases:
    with pytest.raises(FedJaxDpError, match=match):
      ledger.record_many(*args)
    assert ledger.to_dict() == before, match
  for args, match in [(({"inner": 1.0, "outer": np.nan}, ok_q, ok_s),
                       "release 'outer'.*noise_multiplier"),
                      (({"inner": 1.0}, ok_q, ok_s), "noise_multipliers")]:
    with pytest.raises(FedJaxDpError, match=match):
      ledger.record(*args)
    assert ledger.to_dict() == before
  with pytest.raises(FedJaxDpError, match="count"):
    ledger.record({"inner": 1.0, "outer": 1.0}, ok_q, ok_s, count=0)
  assert ledger.num_rounds == 1
  np.testing.assert_array_equal(ledger.epsilon_history(), eps_before)
  # A release recorded and then rolled back still accounts as before.
  assert ledger.release("inner").num_rounds == 1
  # Construction.
  for kwargs, match in [(dict(release_names=["inner", "inner"]), "distinct"),
                        (dict(release_names=["Inner"]), "release_names"),
                        (dict(release_names=[]), "release_names"),
                        (dict(release_names="inner"), "release_names"),
                        (dict(release_names=["a"], truncations={"b": Truncation(9, 3)}),
                         "truncations"),
                        (dict(release_names=["a"], truncation=Truncation(9, 3)),
                         "truncations="),
                        (dict(release_names=["a"], sampler="nope"), "sampler")]:
    with pytest.raises(FedJaxDpError, match=match):
      MultiReleaseLedger(delta=DELTA, **kwargs)
  with pytest.raises(FedJaxDpError, match="delta"):
    MultiReleaseLedger(["a"], 0.0)
  with pytest.raises(FedJaxDpError, match="accountant"):
    ledger.epsilon(accountant="moments")


def test_empty_ledger_and_pld_support():
  ledger = MultiReleaseLedger(["a", "b"], DELTA)
  assert ledger.epsilon() == 0.0 and ledger.epsilon(accountant="pld") == 0.0
  assert ledger.epsilon_history().shape == (0,)
  assert ledger.supports("pld") and ledger.supports("rdp")
  fixed = MultiReleaseLedger(["a", "b"], DELTA, sampler="fixed_size", population_size=100)
  fixed.record({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.2}, {"a": 1, "b": 1})
  assert fixed.supports("pld") and fixed.supports("rdp")  # issue 30 (F9)
  assert 0 < fixed.epsilon(accountant="pld") < fixed.epsilon()
  ref = dp_rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation
                             .REPLACE_ONE).compose(dp_accounting.ComposedDpEvent([
                                 dp_accounting.SampledWithoutReplacementDpEvent(
                                     100, 10, dp_accounting.GaussianDpEvent(1.0)),
                                 dp_accounting.SampledWithoutReplacementDpEvent(
                                     100, 20, dp_accounting.GaussianDpEvent(2.0))]))
  assert fixed.epsilon() == pytest.approx(ref.get_epsilon(DELTA), rel=1e-9)


# --------------------------------------------------------------------------
# MultiReleaseSpec (several releases per round)
# --------------------------------------------------------------------------


def maml_spec(**kw):
  return MultiReleaseSpec(unit="record-level", relation="add_remove", sampler="poisson",
                          releases=(Release("inner", RATES["inner"], STEPS["inner"],
                                            truncation=Truncation(200, 40, 3)),
                                    Release("outer", RATES["outer"], STEPS["outer"],
                                            event_scale=0.5)), **kw)


def test_spec_round_event_and_ledger():
  spec = maml_spec()
  assert spec.release_names == ("inner", "outer")
  g = dp_accounting.GaussianDpEvent
  assert spec.round_event(2.0) == dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, g(2.0)),
                                        2),
      dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, g(1.0)),
                                        2)])
  ledger = spec.make_ledger(DELTA)
  assert isinstance(ledger, MultiReleaseLedger)
  assert ledger.release_names == ("inner", "outer")
  assert ledger.truncations == {"inner": Truncation(200, 40, 3), "outer": None}
  assert ledger.neighboring_relation == "add_remove"
  assert spec.supports("pld") and spec.supports("rdp")
  # The ledger, fed what the rounds report, composes the planned event.
  ledger.record({"inner": 2.0, "outer": 1.0}, {"inner": 0.1, "outer": 0.05},
                {"inner": 2, "outer": 2}, count=10)
  ref = dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
      dp_accounting.SelfComposedDpEvent(spec.round_event(2.0), 10)).get_epsilon(DELTA)
  assert ledger.epsilon() == pytest.approx(ref, rel=1e-9)
  # A spec without releases is unchanged.
  plain = PrivacySpec("user-level", "add_remove", "poisson", sampling_rate=0.1)
  assert plain.releases is None and plain.release_names is None
  assert type(plain.make_ledger(DELTA)) is PrivacyLedger


@pytest.mark.parametrize("kwargs, match", [
    (dict(sampling_rate=0.1), "sampling_rate=0.1"),
    (dict(steps=2), "steps=2"),
    (dict(event_scale=0.5), "event_scale=0.5"),
    (dict(truncation=Truncation(9, 3)), "truncation="),
    (dict(per_client=True, num_clients=3), "per_client"),
])
def test_spec_with_releases_refuses_single_release_fields(kwargs, match):
  with pytest.raises(FedJaxDpError, match=match):
    maml_spec(**kwargs)


def test_spec_and_release_validation():
  base = dict(unit="record-level", relation="add_remove", sampler="poisson")
  with pytest.raises(FedJaxDpError, match="distinct"):
    MultiReleaseSpec(**base, releases=(Release("a", 0.1, 1), Release("a", 0.2, 1)))
  with pytest.raises(FedJaxDpError, match="at least one"):
    MultiReleaseSpec(**base, releases=())
  with pytest.raises(FedJaxDpError, match="Release"):
    MultiReleaseSpec(**base, releases=(("a", 0.1, 1),))
  assert MultiReleaseSpec(**base, releases=[Release("a", 0.1, 1)]).releases == (
      Release("a", 0.1, 1),)
  for args, match in [(("Inner", 0.1, 1), "Release.name"), (("1a", 0.1, 1), "Release.name"),
                      (("a", 0.0, 1), "Release.sampling_rate"),
                      (("a", 0.1, 0), "Release.steps"),
                      (("a", 0.1, 1, 0.0), "Release.event_scale"),
                      (("a", 0.1, 1, 1.0, Truncation(0, 1)), "truncation.population_size"),
                      (("server", 0.1, 1), "server_noise_stddev")]:
    with pytest.raises(FedJaxDpError, match=match):
      Release(*args)


def test_calibration_through_the_composed_event():
  spec = maml_spec()
  target, rounds = 3.0, 40
  z = run_privacy.calibrate_noise_multiplier(spec, rounds, target, DELTA, "rdp")
  g = dp_accounting.GaussianDpEvent

  def eps(z):
    events = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, g(z)),
                                          2 * rounds),
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.05, g(0.5 * z)), 2 * rounds)])
    return dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
        events).get_epsilon(DELTA)

  assert eps(z) <= target
  assert eps(z) == pytest.approx(target, rel=1e-3)
  assert eps(0.99 * z) > target  # not needlessly noisy
  # The budget guard, with the calibrated z, allows exactly the planned rounds.
  assert run_privacy.budget_rounds(spec, z, rounds, target, DELTA) == rounds
  assert run_privacy.budget_rounds(spec, z, rounds + 20, target, DELTA) == rounds
  with pytest.raises(FedJaxDpError, match="target_epsilon"):
    run_privacy.budget_rounds(spec, z, rounds, 1e-3, DELTA)


# --------------------------------------------------------------------------
# Run helpers and disclosure
# --------------------------------------------------------------------------


def _records(spec, z_sched):
  """Records as a run with ``spec``'s releases writes them (the flattened fields)."""
  recs = []
  for t, z in enumerate(z_sched):
    r = {"round": t, "noise_multiplier": z * 0.5, "sampling_rate": 0.1, "dp_steps": 4,
         "epsilon": 0.0}
    for rel in spec.releases:
      r.update({f"{rel.name}_noise_multiplier": z * rel.event_scale,
                f"{rel.name}_sampling_rate": rel.sampling_rate,
                f"{rel.name}_dp_steps": rel.steps,
                f"{rel.name}_noise_stddev": z * rel.event_scale * 2.0,
                f"{rel.name}_sensitivity": 2.0})
    recs.append(r)
  return recs


def test_run_helpers_handle_releases():
  spec = maml_spec()
  z_sched = [1.5, 1.5, 1.4, 1.3]
  records = _records(spec, z_sched)
  ledger = run_privacy.restored_ledger(spec, DELTA, records, None)
  expected = spec.make_ledger(DELTA)
  expected.record_many({"inner": z_sched, "outer": [0.5 * z for z in z_sched]},
                       {"inner": 0.1, "outer": 0.05}, {"inner": 2, "outer": 2})
  assert ledger.to_dict() == expected.to_dict()
  with pytest.raises(FedJaxDpError, match="outer_dp_steps"):
    run_privacy.restored_ledger(
        spec, DELTA, [{k: v for k, v in records[0].items() if k != "outer_dp_steps"}], None)

  fields = run_privacy.accounting_fields(spec, DELTA)
  assert fields["releases"] == ["inner", "outer"]
  assert (fields["inner_truncation_population_size"], fields["inner_truncation_cap"],
          fields["inner_truncation_draws_per_step"]) == (200, 40, 3)
  assert not any(k.startswith("outer_truncation") for k in fields)
  assert "truncation_cap" not in fields

  summary = run_privacy.privacy_summary(ledger, spec, "pld", DELTA)
  assert summary["release_epsilons_rdp"] == ledger.release_epsilons()
  assert summary["truncation_probability"] == ledger.truncation_probability() > 0
  assert summary["delta_total"] == ledger.delta_total(accountant="pld")
  assert "inner, outer" in summary["guarantee"]
  assert run_privacy.ledger_epsilon(ledger, "rdp") == ledger.epsilon()

  # Every field such a run writes is labelled once the releases' labels are added.
  labels = disclosure.labels_for_run(False, disclosure.release_labels(spec.release_names))
  row = dict(records[0], **fields)
  table = disclosure.table(row, labels)
  assert table["outer_sensitivity"]["kind"] == disclosure.PUBLIC
  assert table["inner_truncation_cap"]["kind"] == disclosure.PUBLIC
  assert table["releases"]["kind"] == disclosure.PUBLIC
  assert disclosure.released(row, labels) == row
  # Without them, the release fields are refused.
  with pytest.raises(FedJaxDpError, match="no disclosure label"):
    disclosure.table(row, disclosure.labels_for_run(False))
  with pytest.raises(FedJaxDpError, match="names"):
    disclosure.release_labels(["Bad"])
  assert len(disclosure.release_labels(["a", "b"])) == 16


# --------------------------------------------------------------------------
# Release groups (issue 30, F8): a record influences only its group's releases
# --------------------------------------------------------------------------

THREE = {"a": 0.2, "b": 0.05, "c": 0.1}


def _by_hand_groups(groups, rounds=ROUNDS, z=Z):
  """Each group's event, composed from ``by_hand`` here (no fedjax_dp accounting)."""
  return [dp_accounting.ComposedDpEvent([by_hand(z, THREE[n], 2, rounds) for n in g])
          for g in groups]


def _three(groups, rounds=ROUNDS, **kw):
  ledger = MultiReleaseLedger(list(THREE), DELTA, groups=groups, **kw)
  ledger.record_many({n: np.full(rounds, Z) for n in THREE}, dict(THREE),
                     {n: 2 for n in THREE})
  return ledger


def test_groups_epsilon_is_the_max_over_groups_of_each_groups_composition():
  """The epsilon is, from the definition, the largest over the groups of dp_accounting's
  epsilon of the group's releases composed (RDP, and PLD on the same grid); it lies
  strictly below the composition of every release (the default single group)."""
  groups = (("a",), ("b", "c"))
  ledger = _three(groups, pld_value_discretization_interval=COARSE)
  assert ledger.groups == groups
  rdp_each = [dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(e)
              .get_epsilon(DELTA) for e in _by_hand_groups(groups)]
  pld_each = [dp_pld.PLDAccountant(ADD_REMOVE, COARSE).compose(e).get_epsilon(DELTA)
              for e in _by_hand_groups(groups)]
  np.testing.assert_allclose(ledger.group_epsilons(), rdp_each, rtol=1e-9)
  np.testing.assert_allclose(ledger.group_epsilons(accountant="pld"), pld_each, rtol=2e-3)
  assert ledger.epsilon() == pytest.approx(max(rdp_each), rel=1e-9)
  assert ledger.epsilon(accountant="pld") == pytest.approx(max(pld_each), rel=2e-3)
  everything = dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
      dp_accounting.ComposedDpEvent(_by_hand_groups([tuple(THREE)]))).get_epsilon(DELTA)
  assert ledger.epsilon() < 0.95 * everything
  assert _three(None).epsilon() == pytest.approx(everything, rel=1e-9)
  # ("a",) is the worst group (RDP ~ q^2: 0.2^2 against 0.05^2 + 0.1^2).
  worst = ("a",)
  assert rdp_each[0] > rdp_each[1] and ledger.worst_group() == worst
  np.testing.assert_array_equal(ledger.rdp(), ledger.rdp(worst))
  np.testing.assert_array_equal(ledger.rdp(("b", "c")),
                                ledger.release("b").rdp() + ledger.release("c").rdp())
  assert ledger.summary().epsilon == ledger.epsilon()
  assert ledger.summary().num_releases == 3 * 2 * ROUNDS  # every release still counted
  assert ledger.delta_total() == DELTA  # no truncation
  # Each release alone is unchanged by the grouping.
  assert ledger.release_epsilons() == _three(None).release_epsilons()


def test_groups_history_round_trip_and_default():
  groups = [["c", "a"], ["b"], ["a", "c"]]           # order and duplicates normalised
  z_sched = np.where(np.arange(20) < 10, 1.3, 0.9)
  ledger = MultiReleaseLedger(list(THREE), DELTA, groups=groups,
                              truncations={"b": Truncation(100, 20, 3)})
  eps = ledger.record_many({n: z_sched for n in THREE}, dict(THREE), {n: 2 for n in THREE})
  assert ledger.groups == (("a", "c"), ("b",))
  np.testing.assert_array_equal(eps, ledger.epsilon_history())
  assert eps[-1] == ledger.epsilon()
  for t in (0, 9, 14):  # a ledger stopped after round t, by hand
    ref = max(dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(
        dp_accounting.ComposedDpEvent(
            [by_hand(1.3, THREE[n], 2, min(t + 1, 10)) for n in g] +
            [by_hand(0.9, THREE[n], 2, t + 1 - 10) for n in g if t >= 10])
    ).get_epsilon(DELTA) for g in ledger.groups)
    assert eps[t] == pytest.approx(ref, rel=1e-9)
  state = json.loads(json.dumps(ledger.to_dict()))
  assert state["groups"] == [["a", "c"], ["b"]]
  back = MultiReleaseLedger.from_dict(state)
  assert back.groups == ledger.groups and back.to_dict() == ledger.to_dict()
  assert back.epsilon() == ledger.epsilon()
  np.testing.assert_array_equal(back.epsilon_history(), ledger.epsilon_history())
  # A state written before groups existed restores the single group it was written with.
  old = dict(state)
  del old["groups"]
  assert MultiReleaseLedger.from_dict(old).groups == (("a", "b", "c"),)
  assert "groups=[['a', 'c'], ['b']]" in repr(ledger)
  # The truncation probability is the union bound over every release (conservative).
  assert ledger.truncation_probability() == ledger.release("b").truncation_probability()
  assert ledger.delta_total() == pytest.approx(
      DELTA + (1 + math.exp(ledger.epsilon())) * ledger.truncation_probability(), rel=1e-12)


@pytest.mark.parametrize("groups,match", [
    ("ab", "collection"), ([["a"], ["b"]], "cover"), ([["a", "x"], ["b", "c"]], "'x'"),
    ([[], ["a", "b", "c"]], "empty"), ([], "at least one"), (3, "sequence")])
def test_bad_groups_name_the_argument(groups, match):
  with pytest.raises(FedJaxDpError, match=match) as err:
    MultiReleaseLedger(list(THREE), DELTA, groups=groups)
  assert err.value.option == "groups"
