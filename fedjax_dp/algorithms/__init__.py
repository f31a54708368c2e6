"""Federated algorithms, one package each, registered once in `registry`.

`ALGORITHMS` maps each registered name to its plain functional builder
(``fn(model, data, **kwargs) -> Algorithm``); `registry.REGISTRY` maps it to its
`interface.FederatedAlgorithm` (options, build, controller, summary, audit targets, test
configuration) for ``fedjax-dp run``, ``fedjax-dp audit`` and the shared tests. Every
algorithm is a package, ``fedjax_dp.algorithms.<package>``, whose ``__init__`` exports
its builders (e.g. ``from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, fedavg``).
"""

import importlib
from typing import TYPE_CHECKING, Any, Callable, Dict

from fedjax_dp.algorithms.registry import REGISTRY

if TYPE_CHECKING:
  from fedjax_dp.algorithms.base import (Algorithm, CorrelatedNoiseSpec, MultiReleaseSpec,
                                        PerClientPrivacySpec, PrivacySpec,
                                        PrivacyStatement, Release)
  from fedjax_dp.algorithms.interface import FederatedAlgorithm
  ALGORITHMS: Dict[str, Callable[..., Algorithm]]

# The names below are imported on first use (PEP 562): `registry` (the names of the
# algorithms) must stay importable without JAX, so that the command line refuses a
# misspelt algorithm at once.
_LAZY = {"Algorithm": "base", "CorrelatedNoiseSpec": "base", "MultiReleaseSpec": "base",
         "PerClientPrivacySpec": "base", "PrivacySpec": "base", "PrivacyStatement": "base",
         "Release": "base", "FederatedAlgorithm": "interface"}


def __getattr__(name: str) -> Any:
  if name in _LAZY:
    value = getattr(importlib.import_module(f"fedjax_dp.algorithms.{_LAZY[name]}"), name)
  elif name == "ALGORITHMS":  # every algorithm's functional builder: imports them all
    value = {n: plugin.function for n, plugin in REGISTRY.items()}
  else:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  globals()[name] = value
  return value

__all__ = ["Algorithm", "PrivacyStatement", "PrivacySpec", "PerClientPrivacySpec",
           "CorrelatedNoiseSpec", "MultiReleaseSpec", "Release", "FederatedAlgorithm",
           "REGISTRY", "ALGORITHMS"]
