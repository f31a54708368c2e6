"""DP-FTRL (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, ICML 2021, arXiv 2103.00039)
and banded matrix factorisation (Choquette-Choo, Ganesh, McKenna, McMahan, Rush,
Thakurta, Xu, NeurIPS 2023, arXiv 2306.08153): correlated noise across rounds.

Modules: `participation` (`CyclicSampler`: each client in the rounds of its group, drawn
from a public seed; Poisson within the group), `noise` (`TreeNoise`, `BandedNoise`:
generators for `fedjax_dp.federated.round.RoundConfig.central_noise`, state in the
server state), `accounting` (`tree_run_event`, `banded_run_event`; the run's ledger is
`fedjax_dp.privacy.correlated_ledger.CorrelatedNoiseLedger`), `blt` (`BltNoise`:
buffered-linear-Toeplitz noise, Dvijotham et al., FOCS 2024, arXiv 2404.16706, with its
min-separation sensitivity and `blt_run_event`), `algorithm` (the federated
algorithm), `plugin` (``fedjax-dp run --algorithm dp_ftrl``).
"""

from fedjax_dp.algorithms.dp_ftrl.accounting import (banded_run_event,
                                                     banded_sensitivity_squared,
                                                     tree_aggregation_event,
                                                     tree_run_event,
                                                     tree_sensitivity_squared)
from fedjax_dp.algorithms.dp_ftrl.blt import (BltNoise, blt_run_event,
                                              blt_sensitivity_squared)
from fedjax_dp.algorithms.dp_ftrl.noise import BandedNoise, TreeNoise
from fedjax_dp.algorithms.dp_ftrl.participation import CyclicSampler
from fedjax_dp.privacy.correlated_ledger import CorrelatedNoiseLedger

__all__ = ["CyclicSampler", "TreeNoise", "BandedNoise", "BltNoise", "tree_run_event",
           "tree_aggregation_event", "tree_sensitivity_squared", "banded_run_event",
           "banded_sensitivity_squared", "blt_run_event", "blt_sensitivity_squared",
           "CorrelatedNoiseLedger"]
