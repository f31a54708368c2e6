"""The algorithms `fedjax-dp run` knows: one line per algorithm.

Adding an algorithm: write its package (a `fedjax_dp.algorithms.interface
.FederatedAlgorithm` subclass with its ``Options``), its tests, and one line here.
"""

from __future__ import annotations

import importlib
from typing import Dict

from fedjax_dp.algorithms.interface import FederatedAlgorithm
from fedjax_dp.validation import FedJaxDpError, check_choice

#: The built-in plug-ins, ``"module:Class"``, one line each, in registration order.
BUILT_IN = (
    "fedjax_dp.algorithms.dp_fedavg.plugin:DpFedAvg",
    "fedjax_dp.algorithms.dp_fedavg.plugin:DpFedSgd",
    "fedjax_dp.algorithms.dp_fedavg.plugin:DpFedAvgRecordLevel",
    "fedjax_dp.algorithms.dp_fedavg.fedavg:FedAvg",
    "fedjax_dp.algorithms.amplitude_varying.plugin:AmplitudeVarying",
    "fedjax_dp.algorithms.padpfl.plugin:Padpfl",
    "fedjax_dp.algorithms.rdp_pfl.plugin:RdpPfl",
    "fedjax_dp.algorithms.dp_mocha.plugin:DpMocha",
    "fedjax_dp.algorithms.lapa.plugin:Lapa",
    "fedjax_dp.algorithms.dp_ftrl.plugin:DpFtrl",
    "fedjax_dp.algorithms.dp_fedprox.plugin:DpFedProx",
    "fedjax_dp.algorithms.dp_scaffold.plugin:DpScaffold",
)


def _load(entry: str) -> FederatedAlgorithm:
  module, cls = entry.split(":")
  return getattr(importlib.import_module(module), cls)()


REGISTRY: Dict[str, FederatedAlgorithm] = {a.name: a for a in map(_load, BUILT_IN)}
#: The algorithm of ``fedjax-dp run`` without ``--algorithm`` (the README's main job).
DEFAULT = "dp_fedavg"


def names() -> tuple:
  """The registered names, in registration order."""
  return tuple(REGISTRY)


def get(name: str) -> FederatedAlgorithm:
  """The registered algorithm ``name``.

  Raises:
    FedJaxDpError: an unknown name (listing the known ones).
  """
  check_choice("algorithm", name, names())
  return REGISTRY[name]


def register(algorithm: FederatedAlgorithm) -> FederatedAlgorithm:
  """Adds ``algorithm`` (an instance) under its ``name``, e.g. a researcher's own
  algorithm outside this package; ``fedjax-dp run --algorithm NAME`` and
  `fedjax_dp.runs.run` then run it like the built-in ones.

  Raises:
    FedJaxDpError: not a `FederatedAlgorithm`, or a name already taken.
  """
  if not isinstance(algorithm, FederatedAlgorithm):
    raise FedJaxDpError(f"algorithm must be a FederatedAlgorithm instance, got "
                        f"{type(algorithm).__name__}.", option="algorithm")
  if algorithm.name in REGISTRY:
    raise FedJaxDpError(f"algorithm {algorithm.name!r} is already registered.",
                        option="algorithm")
  REGISTRY[algorithm.name] = algorithm
  return algorithm
