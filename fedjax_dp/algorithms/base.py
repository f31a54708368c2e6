"""What every algorithm module returns: an `Algorithm` bundle ready for the driver."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax

# The privacy statements live in `privacy_spec` and `multi_release_spec` (one
# variant per kind of mechanism); re-exported here, where algorithms import them from.
from fedjax_dp.algorithms.multi_release_spec import MultiReleaseSpec, Release
from fedjax_dp.algorithms.privacy_spec import (CorrelatedNoiseSpec, PerClientPrivacySpec,
                                               PrivacySpec, PrivacyStatement)
from fedjax_dp.federated.server import ServerState
from fedjax_dp.validation import FedJaxDpError

__all__ = ["Algorithm", "HParams", "require_learning_rates", "Release",
           "PrivacyStatement", "PrivacySpec", "PerClientPrivacySpec", "CorrelatedNoiseSpec", "MultiReleaseSpec"]

#: An algorithm's per-round hyper-parameters: a NamedTuple pytree of float scalars (or
#: arrays) that the driver broadcasts to ``[rounds]`` schedules and hands to the round,
#: one entry per round. It is the engine's `RoundHParams` for the rounds built from the
#: engine's stages (the FedAvg family, DP-FTRL, the model-upload papers) and an
#: algorithm's own NamedTuple for a round of its own (e.g. LAPA's ``LapaHParams``,
#: RDP-PFL's ``RdpPflHParams``, DP-MOCHA's ``DpMochaHParams``). Typed `Any` because the
#: engine's schedule functions take either and this module may not name an algorithm's
#: types; code that reads an algorithm's own fields knows (or checks) which it has.
HParams = Any


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A federated algorithm instantiated for one dataset and model.

  Attributes:
    name: algorithm name.
    round_fn: ``round_fn(state, data, hp, root_key) -> (state, RoundMetrics)``.
    init: ``init(key) -> ServerState``.
    hparams: default per-round hyper-parameters (`HParams`: a `RoundHParams` or the
      algorithm's own NamedTuple; scalars, which the driver broadcasts).
    privacy: its privacy statement (a `PrivacyStatement` variant: `PrivacySpec`,
      `PerClientPrivacySpec`, `CorrelatedNoiseSpec`, `MultiReleaseSpec`, ...), or None
      for a non-private algorithm.
    k_max: static padded cohort size.
    config: the resolved configuration (for summaries).
    sampling_rate: the clients' sampling rate q (fixed-size cohorts: m / N).
    canaries: the run's canary clients (a `fedjax_dp.auditing.one_run.CanaryPlan`:
      ``report(theta0, theta_final, delta, accountant_epsilon)`` scores them after
      training), or None.
  """
  name: str
  round_fn: Callable
  init: Callable[[jax.Array], ServerState]
  hparams: HParams
  privacy: Optional[PrivacyStatement]
  k_max: int
  config: Dict[str, Any]
  sampling_rate: float
  canaries: Optional[Any] = None


def require_learning_rates(round_fn: Callable) -> Callable:
  """Wraps an algorithm's ``round_fn``: its optimisers were built with learning rate 1,
  so ``hp.client.learning_rate`` and ``hp.server_learning_rate`` must be given.

  Raises (at trace time):
    FedJaxDpError: a learning rate left as None (e.g. hyper-parameters built from
      scratch instead of from ``alg.hparams._replace(...)``).
  """

  def checked(state, data, hp, root_key):
    for name, value in (("hp.client.learning_rate", hp.client.learning_rate),
                        ("hp.server_learning_rate", hp.server_learning_rate)):
      if value is None:
        raise FedJaxDpError(
            f"{name} is None, but this algorithm reads its learning rates from the "
            "hyper-parameters (its optimisers have learning rate 1): start from "
            "alg.hparams and change fields with ._replace(...).")
    return round_fn(state, data, hp, root_key)

  checked.__wrapped__ = round_fn  # type: ignore[attr-defined]  # (its config, sampler)
  return checked
