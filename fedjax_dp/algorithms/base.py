"""What every algorithm module returns: an `Algorithm` bundle ready for the driver."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax

from fedjax_dp.federated.round import RoundHParams
from fedjax_dp.federated.server import ServerState


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
