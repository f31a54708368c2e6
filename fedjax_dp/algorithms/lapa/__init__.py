"""Paper 001 (Sun, Liu, Ni, Wang, Geng, Lai, Jamalipour, arXiv 2505.19823): LAPA,
per-device adaptive privacy budgets for wireless federated learning, with Wasserstein
aggregation weights, SER-threshold device selection, channel noise and the dynamic
noise switch-off, and DDPG transmit-power optimisation. The guarantee (`algorithm`)
counts the artificial noise and the noisy label histograms only, as a privacy filter's
bound; the paper's channel-noise accounting is reported beside it as an assumption.

Modules: `channel` (uplink: geometry, path loss eq. 39, Rayleigh channels, SNR eq. 6,
SER, decoded channel noise, selection eq. 22), `aggregation` (FedAvg, BEDA/FedAdp,
Wasserstein softmax eqs. 20-21), `devices` (the IID/non-IID device mixture),
`calibration` (the paper's classical Gaussian calibration eqs. 18-19 and the switch rule
eq. 23), `allocators` (LAPA eqs. 10-16, uniform DP, ARB, no DP), `bound` (Theorem 1,
eq. 24), `ddpg` (Sec. IV-C, eqs. 29-36; its replay buffer is `replay`), `privacy` (the
enforced sensitivity, the noisy label statistics, the privacy filter's budgets),
`round` (the note's Algorithm 1 as a compiled round, stage by stage), `algorithm` (the
builder `lapa` and its privacy statement), `summary` (what a run reports beside its
guarantee), `plugin` (``fedjax-dp run --algorithm lapa``).
"""

from fedjax_dp.algorithms.lapa.algorithm import lapa, static_weights
from fedjax_dp.algorithms.lapa.round import (LapaConfig, LapaHParams, LapaState,
                                             initial_state, make_round)

__all__ = ["lapa", "static_weights", "LapaConfig", "LapaHParams", "LapaState",
           "make_round", "initial_state"]
