"""DP-FedAvg's canary-audit targets (`fedjax_dp.algorithms.dp_fedavg.audit`): the claims
are the ledger's, adaptive clipping claims the combined release, local noise is audited
through the canary's own upload. Every target's full audit (each break) runs in
tests/auditing/test_targets.py; the reports are shared through the ``audit_report``
fixture (tests/conftest.py)."""

import logging

import jax
import numpy as np
import pytest

from fedjax_dp import auditing
from fedjax_dp.algorithms import audit_targets, registry
from fedjax_dp.algorithms.dp_fedavg import audit


@pytest.fixture(autouse=True)
def quiet():
  logging.disable(logging.WARNING)
  yield
  logging.disable(logging.NOTSET)


def test_dp_fedsgd_is_audited_through_dp_fedavgs_round():
  assert audit_targets.targets_for("dp_fedsgd") == audit_targets.targets_for("dp_fedavg")
  assert registry.get("dp_fedsgd").audit_targets() == audit.targets()
  assert [t.name for t in audit_targets.targets_for("dp_fedavg_record_level")] == [
      "dp_fedavg_record_level"]


def test_claim_only_breaks_share_the_simulation_and_the_claim_is_the_ledgers(audit_report):
  """The shipped claim is what the algorithm's own ledger says for the rounds' reported
  noise multipliers; a claim-only break (fixed-size-z) changes only that number."""
  shipped = audit_report("dp_fedavg/fixed_size_everyone", "none")
  broken = audit_report("dp_fedavg/fixed_size_everyone", "fixed-size-z")
  assert shipped.lower_bound == broken.lower_bound  # one simulation
  setup = audit_targets.target("dp_fedavg/fixed_size_everyone").build()
  # Two rounds of a plain Gaussian with z = 3 / 2 (replace-one: std / 2C), PLD:
  from fedjax_dp.privacy import accountants
  expected = accountants.compute_epsilon(1.5, 1.0, 2, audit_targets.DELTA, accountant="pld")
  assert shipped.claimed_epsilon == pytest.approx(expected, rel=1e-9)
  assert broken.claimed_epsilon == pytest.approx(
      accountants.compute_epsilon(3.0, 1.0, 2, audit_targets.DELTA, accountant="pld"),
      rel=1e-9)
  assert setup.rounds == 2 and setup.simulation_key == "dp_fedavg/fixed_size_everyone/shipped"


def test_adaptive_clipping_claims_the_combined_release(audit_report):
  """Adaptive clipping's rounds report the combined z of the sum and the count (Andrew
  et al. 2021, Sec. 3.1), so its claim is fixed-clip DP-FedAvg's at the same z, q and
  rounds; the audit, which sees the sums (noise z_Delta > z), stays below it and proves
  a good part of it."""
  p_a = audit.PARAMS["dp_fedavg/adaptive_clipping"]
  p_f = audit.PARAMS["dp_fedavg/poisson"]
  assert all(p_a[k] == p_f[k] for k in ("rounds", "q", "z", "others"))
  adaptive = audit_report("dp_fedavg/adaptive_clipping", "none")
  fixed = audit_report("dp_fedavg/poisson", "none")
  assert adaptive.claimed_epsilon == pytest.approx(fixed.claimed_epsilon, rel=1e-5)
  setup = audit_targets.target("dp_fedavg/adaptive_clipping").build()
  assert float(setup.init.mechanism["clip"].clip_norm) == 1.0  # C_0 rides in the state


def test_targets_observe_what_their_release_declares():
  """Issue 30: local noise makes each upload attributable (audited through the canary's
  upload); central noise releases the aggregate."""
  for name in ("dp_fedavg/local_per_client", "dp_fedavg/local_fixed_size"):
    assert audit_targets.target(name).build().observation == "attributable", name
  for name in ("dp_fedavg/poisson", "dp_fedavg/fixed_size", "dp_fedavg_record_level"):
    setup = audit_targets.target(name).build()
    assert setup.observation == "aggregate" and setup.observe is None, name


def test_attributable_observation_is_the_canarys_upload():
  """The observed vector is the canary client's clipped, noised upload in the rounds it
  took part in and exactly zero in the others, not the aggregate of the cohort."""
  setup = audit_targets.target("dp_fedavg/local_fixed_size").build()
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
