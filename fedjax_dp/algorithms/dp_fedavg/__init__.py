"""DP-FedAvg and its variants (McMahan et al. 2018; Andrew et al. 2021 for adaptive
clipping), and non-private FedAvg, the baseline: user-level DP-FedAvg and DP-FedSGD,
record-level DP-FedAvg (local DP-SGD), FedAvg.

* `algorithm`: the functional builders (``fn(model, data, **kwargs) -> Algorithm``);
* `fedavg`: non-private FedAvg and its plug-in;
* `plugin`: the ``fedjax-dp run`` plug-ins (typed options, summary fields);
* `audit`: the canary-audit targets and their deliberate breaks;
* `noise_cohort`: simulating a larger cohort's noise (``--noise-cohort-size``);
* `record_level`: record-level DP-FedAvg (local DP-SGD in every client);
* `distributed`, `audit_distributed`: distributed DP with secure aggregation
  (``--aggregation distributed_dgauss|distributed_skellam``) and its audit targets.
"""

from fedjax_dp.algorithms.dp_fedavg.algorithm import (
    ADAPTIVE_NOTE, COUNT_NOISE_FLOOR, adaptive_clipping_for, adaptive_config,
    check_adaptive_split, default_count_stddev, dp_fedavg, dp_fedavg_record_level,
    dp_fedsgd)
from fedjax_dp.algorithms.dp_fedavg.fedavg import fedavg

__all__ = ["dp_fedavg", "dp_fedsgd", "dp_fedavg_record_level", "fedavg",
           "adaptive_clipping_for", "adaptive_config", "check_adaptive_split",
           "default_count_stddev", "COUNT_NOISE_FLOOR", "ADAPTIVE_NOTE"]
