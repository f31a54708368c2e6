"""DP-FedProx's epsilon recomputed from metrics.jsonl alone: it releases the noisy aggregate
only (observation ``aggregate``), so dp_accounting composes Poisson-subsampled
Gaussians read from the file (`epsilon_from_metrics.check_aggregate_poisson_gaussian`)."""

import pytest

from epsilon_from_metrics import check_aggregate_poisson_gaussian


@pytest.mark.parametrize("name", ["dp_fedprox"])
def test_epsilon_from_metrics_alone(tmp_path, name):
  check_aggregate_poisson_gaussian(tmp_path, name)
