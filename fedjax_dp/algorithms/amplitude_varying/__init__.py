"""Amplitude-varying perturbation: Yuan, Ni, Ding, Wei, Li, Poor,
"Amplitude-Varying Perturbation for Balancing Privacy and Utility in Federated
Learning", with the primitives only this paper uses.

Modules:

* `algorithm`: Algorithm 1 (`amplitude_varying`, `train_algorithm1`, `OnlineRefinement`,
  `NoiseController`, the per-round hyperparameters).
* `schedules`: per-round noise schedules and the paper's calibration and epsilon.
* `plugin`: how it runs in ``fedjax-dp run`` (`AmplitudeVaryingOptions`, the noise
  controller with online refinement, the paper's epsilon in summary.json).
"""

from fedjax_dp.algorithms.amplitude_varying import schedules
from fedjax_dp.algorithms.amplitude_varying.algorithm import (MECHANISMS, NoiseController,
                                                              OnlineRefinement,
                                                              amplitude_varying, hparams_for,
                                                              schedule_hparams, train_algorithm1)

__all__ = ["amplitude_varying", "train_algorithm1", "OnlineRefinement", "NoiseController",
           "schedule_hparams", "hparams_for", "MECHANISMS", "schedules"]
