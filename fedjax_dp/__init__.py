"""fedjax_dp: fast, functional simulation of differentially private federated learning.

Subpackages: `fedjax_dp.data` (federated datasets), `fedjax_dp.models` (flax models as
pure functions), `fedjax_dp.privacy` (clipping, noise, accounting),
`fedjax_dp.federated` (client update, sampling, aggregation, the round and the driver),
`fedjax_dp.algorithms` (DP-FedAvg and friends). `import fedjax_dp` itself stays light.

fedjax_dp is an independent project: it is not Google's FedJAX and does not use it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
