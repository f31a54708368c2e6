"""Cyclic participation: the client schedule DP-FTRL and banded matrix factorisation need.

The schedule (`assign_groups`, `CyclicSampler`) lives in
`fedjax_dp.federated.participation`, shared with DP-FedAvg's ``cyclic_poisson`` sampler;
it is re-exported here under its old name. Each client ``i`` is assigned a group
``g_i`` in ``[0, R)`` once, from a public seed and its id only; round ``t`` (0-based)
serves group ``t mod R``; each member joins with probability ``group_rate``
(``group_rate == 1``: DP-FTRL's fixed epoch order, Kairouz et al., ICML 2021;
``group_rate < 1``: cyclic Poisson sampling, Choquette-Choo et al., NeurIPS 2023).

Which epsilon this schedule allows is `fedjax_dp.algorithms.dp_ftrl.accounting`'s business;
it needs the deployment to enforce the schedule (a client must not take part outside its
group's rounds), which a simulation can only assume.
"""

from __future__ import annotations

from fedjax_dp.federated.participation import CyclicSampler, assign_groups

__all__ = ["CyclicSampler", "assign_groups"]
