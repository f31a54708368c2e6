"""The federated engine: client update, sampling, aggregation, server update, round, driver."""

from fedjax_dp.federated.client import (ClientHParams, ClientMetrics, DpSgdConfig,
                                        make_client_update)
from fedjax_dp.federated.driver import (DeviceEvaluator, constant_schedule, make_block_fn,
                                        make_device_evaluator, make_evaluator, run_rounds)
from fedjax_dp.federated.chunking import auto_chunk_size, chunk_layout
from fedjax_dp.federated.population import (PooledPopulation, PopulationData,
                                            gather_clients, make_pooled_population)
from fedjax_dp.federated.round import RoundConfig, RoundHParams, RoundMetrics, make_round
from fedjax_dp.federated.sharding import client_mesh
from fedjax_dp.federated.sampling import (Cohort, FixedSizeSampler, PoissonSampler,
                                          poisson_k_max)
from fedjax_dp.federated.server import (ServerState, init_server_state, server_optimizer,
                                        server_update)
