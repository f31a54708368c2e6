"""DP-MOCHA (Hu, Guo, Li, Pei, Gong, "Personalized Federated Learning With Differential
Privacy", IEEE Internet of Things Journal 2020): personalised federated multi-task SVMs
with differentially private uploads under stragglers and dropped devices.

Modules: `objective` (P, D, gap, eq. 6), `sdca` (eq. 7's local solver), `server`
(eq. 3, line 10), `heterogeneity` (tau, drops), `mechanism` (lines 6-7 and what they
provably bound), `paper_calibration` (Lemma 4, Corollary 4, Theorem 5),
`algorithm` (Algorithm 1; per-device ledgers: `fedjax_dp.privacy.device_ledger`),
`plugin` (``fedjax-dp run --algorithm dp_mocha``).
"""

from fedjax_dp.algorithms.dp_mocha.algorithm import (DpMochaConfig, DpMochaHParams,
                                                     MochaState, Problem, as_problem,
                                                     dp_mocha, make_problem, simulate)

__all__ = ["dp_mocha", "DpMochaConfig", "DpMochaHParams", "MochaState", "Problem",
           "make_problem", "as_problem", "simulate"]
