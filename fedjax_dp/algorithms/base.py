"""What every algorithm module returns: an `Algorithm` bundle ready for the driver."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax

from fedjax_dp.federated.round import RoundHParams
from fedjax_dp.federated.server import ServerState
from fedjax_dp.validation import FedJaxDpError


@dataclasses.dataclass(frozen=True)
class PrivacySpec:
  """How a mechanism's privacy is stated and accounted.

  Attributes:
    unit: ``"user-level"`` (a client's whole data) or ``"record-level"`` (one example).
    neighboring: the neighbouring relation, e.g. ``"add/remove one client"``.
    sampler: ``"poisson"`` or ``"fixed_size"`` (selects the DpEvent).
    event_kwargs: extra `make_dp_event` arguments (population/cohort size).
    note: caveats stated in summaries (e.g. what amplification is not claimed).
  """
  unit: str
  neighboring: str
  sampler: str
  event_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
  note: str = ""


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A federated algorithm instantiated for one dataset and model.

  Attributes:
    name: algorithm name.
    round_fn: ``round_fn(state, data, hp, root_key) -> (state, RoundMetrics)``.
    init: ``init(key) -> ServerState``.
    hparams: default per-round `RoundHParams` (scalars; the driver broadcasts them).
    privacy: a `PrivacySpec`, or None for a non-private algorithm.
    k_max: static padded cohort size.
    config: the resolved configuration (for summaries).
  """
  name: str
  round_fn: Callable
  init: Callable[[jax.Array], ServerState]
  hparams: RoundHParams
  privacy: Optional[PrivacySpec]
  k_max: int
  config: Dict[str, Any]


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

  return checked
