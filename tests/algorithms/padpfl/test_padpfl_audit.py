"""Paper 000's canary-audit targets (`fedjax_dp.algorithms.padpfl.audit`). Every
target's full audit (each break) runs in tests/auditing/test_targets.py."""

from fedjax_dp.algorithms import audit_targets


def test_model_uploads_are_audited_through_the_canarys_upload():
  """Issue 30: each model upload is seen with its sender (attributable)."""
  assert [t.name for t in audit_targets.targets_for("padpfl")] == [
      "padpfl/paper", "padpfl/clipped_gradients"]
  setup = audit_targets.target("padpfl/paper").build()
  assert setup.observation == "attributable" and setup.observe is not None
