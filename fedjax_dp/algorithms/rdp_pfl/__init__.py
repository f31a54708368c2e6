"""RDP-PFL (Wei et al., IEEE TIFS 2023): federated MAML whose inner and outer
steps are both DP-SGD steps, with personalisation of unseen target clients.

Modules: `meta` (one local epoch: the inner DP-SGD step on the query set, the outer
DP-SGD meta-step on the support set, the clip modes), `clients` (each record's role and
the source/target split), `privacy` (`GroupedPrivacySpec`: the two stages' releases and
the groups of releases one record can move), `algorithm` (the builder `rdp_pfl`),
`paper_accounting` (the paper's Theorem 1, labelled as such), `theory` (the paper's
convergence calculators), `audit` (canary-audit targets), `plugin`
(``fedjax-dp run --algorithm rdp_pfl``).
"""

from fedjax_dp.algorithms.rdp_pfl.algorithm import (AGGREGATIONS, RdpPflHParams, rdp_pfl,
                                                    stage_config)
from fedjax_dp.algorithms.rdp_pfl.privacy import GroupedPrivacySpec

__all__ = ["rdp_pfl", "RdpPflHParams", "stage_config", "AGGREGATIONS",
           "GroupedPrivacySpec"]
