"""What every canary-audit target shares: the `Target` record, the delta of every claim,
the common deliberate breaks, and the helpers that build claims, schedules and the
declared observation (`observed`). The targets themselves live with their algorithms
(`fedjax_dp.algorithms.audit_targets` for DP-FedAvg and papers 000 and 004,
``fedjax_dp/algorithms/<name>/audit.py`` for the others) and are collected by
`fedjax_dp.algorithms.audit_targets`."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.auditing import Setup, ledger_claim, upload_observer
from fedjax_dp.models import create_model
from fedjax_dp.privacy import accountants
from fedjax_dp.validation import FedJaxDpError

#: The delta of every audit claim (a larger delta lowers the claim, not the bound, so
#: audits of this size can catch smaller violations).
DELTA = 1e-3
FEATURES, CLASSES = 4, 2          # linear model: 4 features, 2 classes, P = 10 parameters
COMMON_BREAKS = {"none": "the shipped code",
                 "noise-half": "the round adds half the noise the run claims"}
#: Breaks that change only what the code claims, not what the round does: they share
#: the shipped code's simulation (`fedjax_dp.auditing.Setup.simulation_key`).
CLAIM_ONLY_BREAKS = ("none", "fixed-size-z", "min-over-sampled", "paper-sensitivity",
                     "amplified-claim")
AMPLIFIED_CLAIM = ("uploads seen with their senders accounted with amplification by "
                   "sampling without replacement (F1)")


@dataclasses.dataclass(frozen=True)
class Target:
  """One audited mechanism (a row of the README's mechanism table).

  Attributes:
    name: ``algorithm/variant``.
    algorithm: the registry name.
    mechanism: unit, relation, sampler and sensitivity, in words.
    breaks: break name -> what it re-introduces (always ``"none"`` and ``"noise-half"``).
    build_setup: ``build_setup(break_name) -> Setup`` (use `build`).
  """
  name: str
  algorithm: str
  mechanism: str
  breaks: Dict[str, str]
  build_setup: Callable[[str], Setup]

  def build(self, brk: str = "none") -> Setup:
    """The `Setup` of the shipped code (``"none"``) or of one deliberate break.

    Raises:
      FedJaxDpError: a break this target does not offer.
    """
    if brk not in self.breaks:
      raise FedJaxDpError(f"break must be one of {sorted(self.breaks)} for {self.name}, "
                          f"got {brk!r}.")
    sim = "shipped" if brk in CLAIM_ONLY_BREAKS else brk
    return dataclasses.replace(self.build_setup(brk), simulation_key=f"{self.name}/{sim}")


def spec_of(alg):
  """The `PrivacySpec` of a private algorithm (every audited one has one).

  Raises:
    FedJaxDpError: a non-private algorithm (nothing to audit).
  """
  if alg.privacy is None:
    raise FedJaxDpError(f"{alg.name} has no PrivacySpec: a non-private run has nothing "
                        "to audit.")
  return alg.privacy


def audit_model():
  """The audits' linear model: 4 features, 2 classes, P = 10 parameters."""
  return create_model("linear", (FEATURES,), CLASSES)


def planned_claim(spec, noise_multiplier: float, rounds: int) -> Callable:
  """The claim the code makes for the configured noise (its `PrivacySpec`), for breaks
  that change the noise actually added."""
  event = dp_accounting.SelfComposedDpEvent(spec.round_event(noise_multiplier), rounds)
  eps = accountants.event_epsilon(event, DELTA, "pld" if spec.supports("pld") else "rdp")
  return lambda metrics: eps


def declared_observation(spec) -> Dict:
  """The `Setup` fields that make the audit observe what ``spec`` declares the server
  observes: the canary's own upload for attributable releases (the round must be built
  with ``observed_client=canary``), the model change otherwise."""
  if spec.observation == "attributable":
    return dict(observation="attributable", observe=upload_observer)
  return dict(observation=spec.observation)


def amplified_claim(spec) -> Callable:
  """The old claim for attributable uploads: the same reports accounted as an aggregate
  (sampling amplifies), which the visible sender rules out."""
  aggregate = dataclasses.replace(spec, observation="aggregate")
  return ledger_claim(lambda: aggregate.make_ledger(DELTA))


def canary_vector(clip: float) -> np.ndarray:
  u = np.zeros(FEATURES * CLASSES + CLASSES, np.float32)
  u[0] = 10.0 * clip                       # 10x the clip norm: clipping must cut it
  return u


def schedule(hp, rounds: int):
  return jax.tree_util.tree_map(
      lambda v: np.broadcast_to(np.asarray(v, np.float32),
                                (rounds,) + np.shape(v)).copy(), hp)


def zero_params(state):
  """The audits start from a zero model: softmax outputs are uniform, so a canary
  example's gradient is large (clipped) and points the same way in every repetition."""
  return state._replace(params=jax.tree_util.tree_map(jnp.zeros_like, state.params))


def rescale(metrics, factor: float):
  """The reported noise multipliers times ``factor`` (the paper's sensitivity instead of
  the enforced one; or the configured noise when the round added half of it)."""
  z = np.asarray(metrics["noise_multiplier"], np.float64)
  return dict(metrics, noise_multiplier=z * factor)
