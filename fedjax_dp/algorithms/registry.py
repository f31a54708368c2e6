"""The algorithms `fedjax-dp run` knows: one line per algorithm.

Adding an algorithm: write its package (a `fedjax_dp.algorithms.interface
.FederatedAlgorithm` subclass with its ``Options``), its tests, and one line here.

The built-in algorithms are imported when first looked up (`REGISTRY[name]`, `get`), not
when this module is: a command line that names one imports that one only, and a
misspelt name is refused (with the closest names) before JAX is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Dict, Iterator, MutableMapping, Union

from fedjax_dp.validation import FedJaxDpError, check_choice

if TYPE_CHECKING:  # importing it imports JAX: annotations only
  from fedjax_dp.algorithms.interface import FederatedAlgorithm

__all__ = ["BUILT_IN", "REGISTRY", "DEFAULT", "names", "get", "register"]

#: The built-in plug-ins, ``name: "module:Class"``, one line each, in registration order
#: (the class's ``name`` must be the key; checked when it is loaded).
BUILT_IN: Dict[str, str] = {
    "dp_fedavg": "fedjax_dp.algorithms.dp_fedavg.plugin:DpFedAvg",
    "dp_fedsgd": "fedjax_dp.algorithms.dp_fedavg.plugin:DpFedSgd",
    "dp_fedavg_record_level": "fedjax_dp.algorithms.dp_fedavg.plugin:DpFedAvgRecordLevel",
    "fedavg": "fedjax_dp.algorithms.dp_fedavg.fedavg:FedAvg",
    "amplitude_varying": "fedjax_dp.algorithms.amplitude_varying.plugin:AmplitudeVarying",
    "padpfl": "fedjax_dp.algorithms.padpfl.plugin:Padpfl",
    "rdp_pfl": "fedjax_dp.algorithms.rdp_pfl.plugin:RdpPfl",
    "dp_mocha": "fedjax_dp.algorithms.dp_mocha.plugin:DpMocha",
    "lapa": "fedjax_dp.algorithms.lapa.plugin:Lapa",
    "dp_ftrl": "fedjax_dp.algorithms.dp_ftrl.plugin:DpFtrl",
    "dp_fedprox": "fedjax_dp.algorithms.dp_fedprox.plugin:DpFedProx",
    "dp_scaffold": "fedjax_dp.algorithms.dp_scaffold.plugin:DpScaffold",
}


class _Registry(MutableMapping[str, "FederatedAlgorithm"]):
  """``{name: FederatedAlgorithm}`` whose built-in entries are imported on first
  lookup. Iterating gives the names without importing anything; ``values()`` and
  ``items()`` import every algorithm."""

  def __init__(self, entries: Dict[str, str]):
    self._entries: Dict[str, Union[str, "FederatedAlgorithm"]] = dict(entries)

  def __getitem__(self, name: str) -> "FederatedAlgorithm":
    entry = self._entries[name]
    if isinstance(entry, str):
      module, cls = entry.split(":")
      entry = getattr(importlib.import_module(module), cls)()
      if entry.name != name:
        raise ImportError(f"registry entry {name!r} ({module}:{cls}) is named "
                          f"{entry.name!r}.")
      self._entries[name] = entry
    return entry

  def __setitem__(self, name: str, algorithm: "FederatedAlgorithm") -> None:
    self._entries[name] = algorithm

  def __delitem__(self, name: str) -> None:
    del self._entries[name]

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(tuple(self._entries))

  def __len__(self) -> int:
    return len(self._entries)

  def __repr__(self) -> str:
    return f"REGISTRY({', '.join(self._entries)})"


REGISTRY: MutableMapping[str, "FederatedAlgorithm"] = _Registry(BUILT_IN)
#: The algorithm of ``fedjax-dp run`` without ``--algorithm`` (the README's main job).
DEFAULT = "dp_fedavg"


def names() -> tuple:
  """The registered names, in registration order (nothing is imported)."""
  return tuple(REGISTRY)


def get(name: str) -> "FederatedAlgorithm":
  """The registered algorithm ``name`` (imported on first use).

  Raises:
    FedJaxDpError: an unknown name (listing the known ones).
  """
  check_choice("algorithm", name, names())
  return REGISTRY[name]


def register(algorithm: "FederatedAlgorithm") -> "FederatedAlgorithm":
  """Adds ``algorithm`` (an instance) under its ``name``, e.g. a researcher's own
  algorithm outside this package; ``fedjax-dp run --algorithm NAME`` and
  `fedjax_dp.runs.run` then run it like the built-in ones.

  Raises:
    FedJaxDpError: not a `FederatedAlgorithm`, or a name already taken.
  """
  from fedjax_dp.algorithms.interface import FederatedAlgorithm
  if not isinstance(algorithm, FederatedAlgorithm):
    raise FedJaxDpError(f"algorithm must be a FederatedAlgorithm instance, got "
                        f"{type(algorithm).__name__}.", option="algorithm")
  if algorithm.name in REGISTRY:
    raise FedJaxDpError(f"algorithm {algorithm.name!r} is already registered.",
                        option="algorithm")
  REGISTRY[algorithm.name] = algorithm
  return algorithm
