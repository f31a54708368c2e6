"""Federated algorithms, one module or package each; `ALGORITHMS` maps CLI names to builders."""

from fedjax_dp.algorithms import amplitude_varying  # the package (paper 004)
from fedjax_dp.algorithms import padpfl  # the package (paper 000)
from fedjax_dp.algorithms.base import Algorithm, PrivacySpec
from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, dp_fedavg_record_level, dp_fedsgd
from fedjax_dp.algorithms.fedavg import fedavg

ALGORITHMS = {
    "dp_fedavg": dp_fedavg,
    "dp_fedsgd": dp_fedsgd,
    "dp_fedavg_record_level": dp_fedavg_record_level,
    "fedavg": fedavg,
    "amplitude_varying": amplitude_varying.amplitude_varying,
    "padpfl": padpfl.padpfl,
}

__all__ = ["Algorithm", "PrivacySpec", "ALGORITHMS", "dp_fedavg", "dp_fedsgd",
           "dp_fedavg_record_level", "fedavg", "amplitude_varying", "padpfl"]
