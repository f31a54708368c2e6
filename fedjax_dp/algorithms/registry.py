"""The algorithms `fedjax-dp run` knows: one line per algorithm.

Adding an algorithm: write its package (a `fedjax_dp.algorithms.interface
.FederatedAlgorithm` subclass with its ``Options``), its tests, and one line here.
"""

from __future__ import annotations

from typing import Dict

from fedjax_dp.algorithms.amplitude_varying.plugin import AmplitudeVarying
from fedjax_dp.algorithms.dp_fedavg_plugin import DpFedAvg, DpFedAvgRecordLevel, DpFedSgd
from fedjax_dp.algorithms.dp_ftrl.plugin import DpFtrl
from fedjax_dp.algorithms.dp_mocha.plugin import DpMocha
from fedjax_dp.algorithms.fedavg import FedAvg
from fedjax_dp.algorithms.interface import FederatedAlgorithm
from fedjax_dp.algorithms.lapa.plugin import Lapa
from fedjax_dp.algorithms.padpfl.plugin import Padpfl
from fedjax_dp.algorithms.rdp_pfl.plugin import RdpPfl
from fedjax_dp.validation import FedJaxDpError, check_choice

REGISTRY: Dict[str, FederatedAlgorithm] = {a.name: a for a in (
    DpFedAvg(),
    DpFedSgd(),
    DpFedAvgRecordLevel(),
    FedAvg(),
    AmplitudeVarying(),
    Padpfl(),
    RdpPfl(),
    DpMocha(),
    Lapa(),
    DpFtrl(),
)}
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
