"""DP-SCAFFOLD's epsilon recomputed from metrics.jsonl alone.

It releases the noisy aggregate only (observation ``aggregate``: who was sampled stays
hidden), so each round is a Poisson-subsampled Gaussian with z = noise_stddev /
sensitivity at rate q, add/remove of one user; the recomputation reads only the file's
fields and uses dp_accounting directly (no fedjax_dp accounting code)."""

import json

import dp_accounting
from dp_accounting import rdp as dp_rdp
import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run


@pytest.mark.parametrize("name", ["dp_scaffold"])
def test_epsilon_from_metrics_alone(tmp_path, name):
  opts = dict(registry.get(name).tiny_run_options(), algorithm=name, rounds=4,
              noise_multiplier=1.3, out=str(tmp_path / name))
  result = run(RunConfig.from_dict(opts).validate(), progress=False)
  rows = [json.loads(l) for l in open(tmp_path / name / "metrics.jsonl")]
  assert len(rows) == 4 and {r["observation"] for r in rows} == {"aggregate"}
  acc = dp_rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  for r in rows:
    z = r["noise_stddev"] / r["sensitivity"]
    assert z == pytest.approx(1.3, rel=1e-6) and r["dp_steps"] == 1
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        r["sampling_rate"], dp_accounting.GaussianDpEvent(z)))
  eps = acc.get_epsilon(result.summary["delta"])
  assert eps == pytest.approx(rows[-1]["epsilon"], rel=1e-6)
  assert eps == pytest.approx(result.summary["epsilon_rdp"], rel=1e-6)
