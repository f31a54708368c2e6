"""The algorithms `fedjax-dp run` knows: one line per algorithm.

Adding an algorithm: write its package (a `fedjax_dp.algorithms.interface
.FederatedAlgorithm` subclass with its ``Options``), its tests, and one line here.
"""

from __future__ import annotations

from typing import Dict

from fedjax_dp.algorithms.amplitude_varying.plugin import AmplitudeVarying
from fedjax_dp.algorithms.dp_fedavg import DpFedAvg, DpFedAvgRecordLevel, DpFedSgd
from fedjax_dp.algorithms.fedavg import FedAvg
from fedjax_dp.algorithms.interface import FederatedAlgorithm
from fedjax_dp.algorithms.padpfl.plugin import Padpfl
from fedjax_dp.validation import check_choice

REGISTRY: Dict[str, FederatedAlgorithm] = {a.name: a for a in (
    DpFedAvg(),
    DpFedSgd(),
    DpFedAvgRecordLevel(),
    FedAvg(),
    AmplitudeVarying(),
    Padpfl(),
)}
NAMES = tuple(REGISTRY)


def get(name: str) -> FederatedAlgorithm:
  """The registered algorithm ``name``.

  Raises:
    FedJaxDpError: an unknown name (listing the known ones).
  """
  check_choice("algorithm", name, NAMES)
  return REGISTRY[name]
