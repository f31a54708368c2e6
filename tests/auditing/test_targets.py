"""Canary audits of every shipped mechanism through its real round (issue 13, part 3):
the shipped code passes, and every deliberately re-introduced bug is caught.

This is the reduced-but-real audit CI runs: the same 20,000 scored repetitions per world
as ``fedjax-dp audit`` (the size at which half the claimed noise is caught), the worlds
sized so that each audit takes a few seconds on 2 CPU cores. Setups that differ only in
their claim share one simulation (`Setup.simulation_key`).
"""

import logging

import jax
import numpy as np
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import ALGORITHMS, audit_targets
from fedjax_dp.algorithms.rdp_pfl import audit as rdp_pfl_audit

CACHE = {}
CASES = [(t.name, b) for t in audit_targets.TARGETS for b in t.breaks]


def _report(name, brk):
  target = next(t for t in audit_targets.TARGETS if t.name == name)
  return auditing.run(target.build(brk), repetitions=20000, calibration=10000,
                      key=jax.random.key(0), cache=CACHE)


@pytest.fixture(autouse=True)
def quiet():
  logging.disable(logging.WARNING)
  yield
  logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name,brk", CASES, ids=[f"{n}:{b}" for n, b in CASES])
def test_shipped_code_passes_and_every_break_is_caught(name, brk):
  rep = _report(name, brk)
  lb = rep.lower_bound.epsilon_lower_bound
  if brk == "none":
    assert not rep.violated, auditing.describe(rep)
    # The audit is not vacuous: it proves a good part of what is claimed.
    assert lb > 0.3 * rep.claimed_epsilon, auditing.describe(rep)
  else:
    assert rep.violated, auditing.describe(rep)


def test_every_private_algorithm_has_audit_targets_with_the_common_breaks():
  private = {n for n in ALGORITHMS if n != "fedavg"}
  audited = {t.algorithm for t in audit_targets.TARGETS} | {"dp_fedsgd"}
  assert private <= audited
  for t in audit_targets.TARGETS:
    assert {"none", "noise-half"} <= set(t.breaks)
  assert audit_targets.targets_for("dp_fedsgd") == audit_targets.targets_for("dp_fedavg")
  with pytest.raises(Exception, match="no audit targets"):
    audit_targets.targets_for("fedavg")
  # Section 1's bugs each have a break.
  breaks = {b for t in audit_targets.TARGETS for b in t.breaks}
  assert {"fixed-size-z", "min-over-sampled", "paper-sensitivity",
          "count-denominators"} <= breaks


def test_claim_only_breaks_share_the_simulation_and_the_claim_is_the_ledgers():
  """The shipped claim is what the algorithm's own ledger says for the rounds' reported
  noise multipliers; a claim-only break (fixed-size-z) changes only that number."""
  shipped = _report("dp_fedavg/fixed_size_everyone", "none")
  broken = _report("dp_fedavg/fixed_size_everyone", "fixed-size-z")
  assert shipped.lower_bound == broken.lower_bound  # one simulation
  setup = next(t for t in audit_targets.TARGETS
               if t.name == "dp_fedavg/fixed_size_everyone").build()
  # Two rounds of a plain Gaussian with z = 3 / 2 (replace-one: std / 2C), PLD:
  from fedjax_dp.privacy import accountants
  expected = accountants.compute_epsilon(1.5, 1.0, 2, audit_targets.DELTA, accountant="pld")
  assert shipped.claimed_epsilon == pytest.approx(expected, rel=1e-9)
  assert broken.claimed_epsilon == pytest.approx(
      accountants.compute_epsilon(3.0, 1.0, 2, audit_targets.DELTA, accountant="pld"),
      rel=1e-9)
  assert setup.rounds == 2 and setup.simulation_key == "dp_fedavg/fixed_size_everyone/shipped"


def test_ledger_claim_takes_the_median_over_repetitions():
  from fedjax_dp.privacy.ledger import PrivacyLedger
  claim = auditing.ledger_claim(lambda: PrivacyLedger(1e-3))
  z = np.array([[1.0, 1.0], [1.0, np.inf], [1.0, np.inf]])  # inf: composes nothing
  metrics = dict(noise_multiplier=z, sampling_rate=np.ones((3, 2)), dp_steps=np.ones((3, 2)))
  one = PrivacyLedger(1e-3)
  one.record(1.0, 1.0)
  assert claim(metrics) == pytest.approx(one.epsilon(accountant="pld"), rel=1e-12)


def test_bad_audit_sizes():
  setup = audit_targets.TARGETS[0].build()
  with pytest.raises(Exception, match="repetitions"):
    auditing.run(setup, repetitions=10)
  with pytest.raises(Exception, match="break"):
    audit_targets.TARGETS[0].build("bogus")


def test_adaptive_clipping_claims_the_combined_release():
  """Adaptive clipping's rounds report the combined z of the sum and the count (Andrew
  et al. 2021, Sec. 3.1), so its claim is fixed-clip DP-FedAvg's at the same z, q and
  rounds; the audit, which sees the sums (noise z_Delta > z), stays below it and proves
  a good part of it."""
  p_a = audit_targets.PARAMS["dp_fedavg/adaptive_clipping"]
  p_f = audit_targets.PARAMS["dp_fedavg/poisson"]
  assert all(p_a[k] == p_f[k] for k in ("rounds", "q", "z", "others"))
  adaptive = _report("dp_fedavg/adaptive_clipping", "none")
  fixed = _report("dp_fedavg/poisson", "none")
  assert adaptive.claimed_epsilon == pytest.approx(fixed.claimed_epsilon, rel=1e-5)
  setup = next(t for t in audit_targets.TARGETS
               if t.name == "dp_fedavg/adaptive_clipping").build()
  assert float(setup.init.mechanism["clip"].clip_norm) == 1.0  # C_0 rides in the state


@pytest.mark.parametrize("name,sens2", [("dp_ftrl/tree", 3), ("dp_ftrl/banded", 2)])
def test_dp_ftrl_claim_is_one_gaussian_of_the_run_sensitivity(name, sens2):
  """DP-FTRL's targets (`_dp_ftrl_setup`): one tree of R = 4 rounds, the canary its first
  leaf, in floor(log2 4) + 1 = 3 tree nodes; banded with b = 2 and R = 2 over 4 rounds,
  the canary in two rounds whose unit columns of C do not overlap. Either claim is one
  Gaussian release of z / sqrt(sens2) (PLD, recomputed here with dp_accounting alone),
  and the audit, observing the prefix sums / C times the round updates, proves a good
  part of it (the half-noise break is caught in the parametrised test above)."""
  import dp_accounting
  from dp_accounting import pld as dp_pld
  z = audit_targets.PARAMS[name]["z"]
  rep = _report(name, "none")
  expected = dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                  1e-4).compose(dp_accounting.GaussianDpEvent(
                                      z / np.sqrt(sens2))).get_epsilon(audit_targets.DELTA)
  assert rep.claimed_epsilon == pytest.approx(expected, rel=1e-6)
  assert rep.rounds == 4
  assert 0.5 * rep.claimed_epsilon < rep.lower_bound.epsilon_lower_bound < rep.claimed_epsilon


def test_every_target_observes_what_its_release_declares():
  """Issue 30: the auditor observes the declared release. Attributable uploads are
  audited through one client's upload (the canary's, as the server receives it), never
  through the aggregate; the declared observation is the algorithm's PrivacySpec's."""
  from fedjax_dp.privacy.events import OBSERVATIONS
  for t in audit_targets.TARGETS:
    setup = t.build()
    assert setup.observation in OBSERVATIONS, t.name
    if setup.observation == "attributable":
      assert setup.observe is not None, t.name
  by_name = {t.name: t.build() for t in audit_targets.TARGETS}
  for name in ("dp_fedavg/local_per_client", "dp_fedavg/local_fixed_size",
               "amplitude_varying/paper", "amplitude_varying/sampled", "padpfl/paper",
               "dp_mocha", "lapa/per_example", "lapa/label_statistics"):
    assert by_name[name].observation == "attributable", name
  for name in ("dp_fedavg/poisson", "dp_fedavg/fixed_size", "dp_fedavg_record_level",
               "dp_ftrl/tree"):
    assert by_name[name].observation == "aggregate" and by_name[name].observe is None


def test_attributable_observation_is_the_canarys_upload():
  """The observed vector is the canary client's clipped, noised upload in the rounds it
  took part in and exactly zero in the others, not the aggregate of the cohort."""
  setup = next(t for t in audit_targets.TARGETS
               if t.name == "dp_fedavg/local_fixed_size").build()
  sim = auditing.canary._simulator(setup.round_in, setup.rounds, setup.observe)
  changes, _ = sim(setup.data_in, setup.init, setup.schedule(),
                   jax.random.split(jax.random.key(3), 400))
  changes = np.asarray(changes)
  seen = np.any(changes != 0, axis=2)
  # Fixed size 1 of 4: the canary uploads in about a quarter of the rounds.
  assert 0.15 < seen.mean() < 0.35
  # When seen, the upload is the clipped canary (norm C = 1 along its axis) plus noise
  # of std z C = 2 in every coordinate: its mean is the clipped canary.
  mean = changes[seen].mean(axis=0)
  assert mean[0] == pytest.approx(1.0, abs=0.35)
  assert np.std(changes[seen][:, 1:]) == pytest.approx(2.0, rel=0.1)


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
  params = dict(audit_targets.PARAMS[f"rdp_pfl/{stage}"], **{other: 1.0})
  rep = auditing.run(rdp_pfl_audit._rdp_pfl_setup("none", **params), repetitions=20000,
                     calibration=10000, key=jax.random.key(0))
  one = _rdp_pfl_stage_pld(params["z"], 1.0)
  assert rep.claimed_epsilon == pytest.approx(one, rel=1e-3)
  assert rep.claimed_epsilon < 0.8 * _rdp_pfl_stage_pld(params["z"], 1.0, steps=2)
  lb = rep.lower_bound.epsilon_lower_bound
  assert 0.3 * rep.claimed_epsilon < lb <= rep.claimed_epsilon, auditing.describe(rep)


def test_rdp_pfl_data_size_weights_target():
  """Issue 30, F5: two source clients, the canary a support record of one of them. The
  shipped code (uniform weights) claims the support stage's Gaussian of z (the query
  stage, at q^Q = 0.01, is smaller) and stays below it; the old data-size weights, with
  the same claim, are caught (the parametrised test above runs every break)."""
  z = rdp_pfl_audit.RDP_PFL_WEIGHTS["z"]
  shipped = _report("rdp_pfl/data_size_weights", "none")
  old = _report("rdp_pfl/data_size_weights", "data-size-weights")
  assert shipped.claimed_epsilon == pytest.approx(_rdp_pfl_stage_pld(z, 1.0), rel=1e-3)
  assert old.claimed_epsilon == pytest.approx(shipped.claimed_epsilon, rel=1e-3)
  assert (shipped.lower_bound.epsilon_lower_bound < shipped.claimed_epsilon
          < old.lower_bound.epsilon_lower_bound)
