"""Federated algorithms, one package each, registered once in `registry`.

`ALGORITHMS` maps each registered name to its plain functional builder
(``fn(model, data, **kwargs) -> Algorithm``); `registry.REGISTRY` maps it to its
`interface.FederatedAlgorithm` (options, build, controller, summary, audit targets, test
configuration) for ``fedjax-dp run``, ``fedjax-dp audit`` and the shared tests. Every
algorithm is a package, ``fedjax_dp.algorithms.<package>``, whose ``__init__`` exports
its builders (e.g. ``from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, fedavg``).
"""

from fedjax_dp.algorithms.base import (Algorithm, CorrelatedNoiseSpec, MultiReleaseSpec,
                                      PerClientPrivacySpec, PrivacySpec, PrivacyStatement,
                                      Release)
from fedjax_dp.algorithms.interface import FederatedAlgorithm
from fedjax_dp.algorithms.registry import REGISTRY

ALGORITHMS = {name: plugin.function for name, plugin in REGISTRY.items()}

__all__ = ["Algorithm", "PrivacyStatement", "PrivacySpec", "PerClientPrivacySpec",
           "CorrelatedNoiseSpec", "MultiReleaseSpec", "Release", "FederatedAlgorithm",
           "REGISTRY", "ALGORITHMS"]
