"""DP-FedProx: user-level DP-FedAvg whose clients minimise FedProx's proximal local
objective (Li et al., MLSys 2020), composed from engine stages.

* `algorithm`: the functional builder `dp_fedprox` and its client stage;
* `plugin`: the ``fedjax-dp run`` plug-in (`DpFedProx`);
* `audit`: its canary-audit targets.
"""

from fedjax_dp.algorithms.dp_fedprox.algorithm import dp_fedprox, prox_client, prox_correction

__all__ = ["dp_fedprox", "prox_client", "prox_correction"]
