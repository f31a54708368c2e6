"""What every canary-audit target shares: the `Target` record, the delta of every claim,
the common deliberate breaks, and the helpers that build claims, schedules, worlds and
the declared observation (`declared_observation`). The targets themselves live with
their algorithms (``fedjax_dp/algorithms/<name>/audit.py``), are returned by each
plug-in's `fedjax_dp.algorithms.interface.FederatedAlgorithm.audit_targets` and are
collected from the registry by `fedjax_dp.algorithms.audit_targets`."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.auditing import Setup, ledger_claim, population, upload_observer
from fedjax_dp.models import create_model
from fedjax_dp.privacy import accountants
from fedjax_dp.validation import FedJaxDpError

__all__ = ["DELTA", "COMMON_BREAKS", "CLAIM_ONLY_BREAKS", "AMPLIFIED_CLAIM", "Target",
           "spec_of", "audit_model", "planned_claim", "declared_observation",
           "amplified_claim", "canary_vector", "schedule", "zero_params", "rescale",
           "paper_worlds", "poisson_canary_setup"]

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


def paper_worlds(n_per_client: int, clients: int):
  """Replace-one worlds of the model-upload papers (000, 004): the canary client's first
  example (huge features) has label 0 ("in") or 1 ("out"): unclipped gradients push its
  model to opposite ends of the parameter ball; the other examples are zero.

  Returns:
    ``(data_out, data_in)``: host `PopulationData` of ``clients`` clients, ``[clients,
    n_per_client, FEATURES]`` features each.
  """
  x = np.zeros((clients, n_per_client, FEATURES), np.float32)
  x[-1, 0, 0] = 1000.0
  y_in = np.zeros((clients, n_per_client), np.int32)
  y_out = y_in.copy()
  y_out[-1, 0] = 1
  return population(x, labels=y_out), population(x, labels=y_in)


def poisson_canary_setup(build: Callable, brk: str, rounds: int, z: float, q: float,
                         others: int, description: str,
                         observe: Optional[Callable] = None) -> Setup:
  """The two worlds of a user-level algorithm with central noise and Poisson cohorts
  under add/remove of a canary user whose upload is 10x the clip norm C = 1 in one
  coordinate (stored in its data row, `fedjax_dp.auditing.stored_update_client`), the
  other ``others`` users uploading zeros. ``build(data, client_update, **extra) ->
  Algorithm`` builds the audited algorithm with the crafted client; the "out" world
  keeps the "in" world's public denominator. Breaks: the common ones (``noise-half``
  runs half the configured z and claims the configured z).

  Args:
    observe: what the server observes of a round (`fedjax_dp.auditing.Setup.observe`),
      None for the model change.
  """
  from fedjax_dp.auditing import stored_update_client
  params = audit_model().init(jax.random.key(0))
  client = stored_update_client(params)
  u = canary_vector(1.0)
  data_out = population(np.zeros((others, FEATURES * 3), np.float32))
  rows_in = np.zeros((others + 1, FEATURES * 3), np.float32)
  rows_in[-1, :u.size] = u
  data_in = population(rows_in)
  alg_in = build(data_in, client)
  alg_out = build(data_out, client, population_weight=float(data_in.num_clients))
  hp, claim = alg_in.hparams, ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA))
  if brk == "noise-half":
    hp = hp._replace(noise_multiplier=np.float32(0.5 * z))
    claim = planned_claim(spec_of(alg_in), z, rounds)
  elif brk != "none":
    raise FedJaxDpError(f"break must be one of {sorted(COMMON_BREAKS)}, got {brk!r}.")
  state = alg_in.init(jax.random.key(1))
  return Setup(alg_out.round_fn, alg_in.round_fn, data_out, data_in, state,
               schedule(hp, rounds), q, claim, DELTA, description=description,
               observe=observe, **declared_observation(spec_of(alg_in)))
