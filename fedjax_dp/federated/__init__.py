"""The federated engine: client update, sampling, aggregation, server update, round, driver.

``from fedjax_dp.federated import *`` imports exactly ``__all__``: the public functions
and classes below, never the submodules (one of them is named ``round``, which would
shadow Python's built-in ``round``). The submodules stay reachable as attributes
(``fedjax_dp.federated.round``) and by ``import fedjax_dp.federated.round``.
"""

from fedjax_dp.federated.client import (ClientHParams, ClientMetrics, DpSgdConfig,
                                        make_client_update)
from fedjax_dp.federated.driver import (DeviceEvaluator, constant_schedule, make_block_fn,
                                        make_device_evaluator, make_evaluator, run_rounds)
from fedjax_dp.federated.chunking import auto_chunk_size, chunk_layout
from fedjax_dp.federated.population import (PooledPopulation, PopulationData,
                                            gather_clients, make_pooled_population)
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, RoundMetrics,
                                       check_sampling_rate, make_ledger, make_round,
                                       round_observation, round_relation)
from fedjax_dp.federated.sharding import client_mesh
from fedjax_dp.federated.sampling import (Cohort, FixedSizeSampler, PoissonSampler,
                                          poisson_k_max)
from fedjax_dp.federated.participation import AllocationSampler, CyclicSampler
from fedjax_dp.federated.server import (ServerState, init_server_state, server_optimizer,
                                        server_update)

__all__ = [
    # local training
    "ClientHParams", "ClientMetrics", "DpSgdConfig", "make_client_update",
    # cohorts
    "Cohort", "PoissonSampler", "FixedSizeSampler", "poisson_k_max", "AllocationSampler",
    "CyclicSampler",
    # populations
    "PopulationData", "PooledPopulation", "make_pooled_population", "gather_clients",
    # the round and its privacy statement
    "RoundConfig", "RoundHParams", "RoundMetrics", "make_round", "round_relation",
    "round_observation", "check_sampling_rate", "make_ledger",
    # the server
    "ServerState", "init_server_state", "server_optimizer", "server_update",
    # many rounds
    "run_rounds", "constant_schedule", "make_block_fn", "DeviceEvaluator",
    "make_device_evaluator", "make_evaluator",
    # devices and memory
    "client_mesh", "auto_chunk_size", "chunk_layout",
]
