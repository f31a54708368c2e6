"""Federated algorithms, one module or package each, registered once in `registry`.

`ALGORITHMS` maps each registered name to its plain functional builder
(``fn(model, data, **kwargs) -> Algorithm``); `registry.REGISTRY` maps it to its
`interface.FederatedAlgorithm` (options, build, controller, summary) for ``fedjax-dp run``.
"""

from fedjax_dp.algorithms import amplitude_varying  # the package (paper 004)
from fedjax_dp.algorithms import dp_mocha  # the package (paper 002)
from fedjax_dp.algorithms import padpfl  # the package (paper 000)
from fedjax_dp.algorithms import rdp_pfl  # the package (paper 003)
from fedjax_dp.algorithms.base import Algorithm, PrivacySpec
from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, dp_fedavg_record_level, dp_fedsgd
from fedjax_dp.algorithms.fedavg import fedavg
from fedjax_dp.algorithms.interface import FederatedAlgorithm
from fedjax_dp.algorithms.registry import REGISTRY

ALGORITHMS = {name: plugin.function for name, plugin in REGISTRY.items()}

__all__ = ["Algorithm", "PrivacySpec", "FederatedAlgorithm", "REGISTRY", "ALGORITHMS",
           "dp_fedavg", "dp_fedsgd", "dp_fedavg_record_level", "fedavg",
           "amplitude_varying", "dp_mocha", "padpfl", "rdp_pfl"]
