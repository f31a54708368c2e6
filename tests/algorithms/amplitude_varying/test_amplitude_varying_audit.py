"""Paper 004's canary-audit targets (`fedjax_dp.algorithms.amplitude_varying.audit`).
Every target's full audit (each break) runs in tests/auditing/test_targets.py."""

from fedjax_dp.algorithms import audit_targets


def test_model_uploads_are_audited_through_the_canarys_upload():
  """Issue 30: each model upload is seen with its sender (attributable)."""
  names = [t.name for t in audit_targets.targets_for("amplitude_varying")]
  assert names == ["amplitude_varying/paper", "amplitude_varying/clipped_gradients",
                   "amplitude_varying/sampled"]
  for name in ("amplitude_varying/paper", "amplitude_varying/sampled"):
    setup = audit_targets.target(name).build()
    assert setup.observation == "attributable" and setup.observe is not None, name
