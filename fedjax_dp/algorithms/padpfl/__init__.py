"""PADPFL: Talaei and Izadi, "Enhancing Federated Learning with Adaptive
Differential Privacy and Priority-Based Aggregation" (arXiv:2406.18491), with the
primitives only this paper uses.

Modules:

* `algorithm`: the algorithm (`padpfl`, `train_phases`, its per-round hyperparameters and the
  paper's epsilons), re-exported here.
* `nbafl`: NbAFL-style classical-Gaussian noise calibration (client and server noise).
* `impact_factors`: the aggregation weights p (ratios such as ``0-1-2``, schedules).
* `scenarios`: the engineered client heterogeneity of the paper's Table I (not imported
  here, so that importing the algorithm does not load `fedjax_dp.data`:
  ``from fedjax_dp.algorithms.padpfl import scenarios``).
* `plugin`: how it runs in ``fedjax-dp run`` (`PadpflOptions`, the scenario's data
  phases, the paper's epsilons in summary.json).
"""

from fedjax_dp.algorithms.padpfl import impact_factors, nbafl
from fedjax_dp.algorithms.padpfl.algorithm import (downlink_noise_multiplier,
                                                   nominal_and_accountant_epsilons, padpfl,
                                                   schedule_hparams, train_phases)

__all__ = ["padpfl", "schedule_hparams", "train_phases", "downlink_noise_multiplier",
           "nominal_and_accountant_epsilons", "impact_factors", "nbafl"]
