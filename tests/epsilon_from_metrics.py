"""Shared check: an algorithm's epsilon recomputed from its metrics.jsonl alone.

For a release that shows the server the noisy aggregate only (observation
``aggregate``: who was sampled stays hidden), each round is a Poisson-subsampled
Gaussian with z = noise_stddev / sensitivity at rate q, add/remove of one user; the
recomputation reads only the file's fields and uses dp_accounting directly (no fedjax_dp
accounting code)."""

import json

import dp_accounting
from dp_accounting import rdp as dp_rdp
import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run


def check_aggregate_poisson_gaussian(tmp_path, name: str, rounds: int = 4,
                                     noise_multiplier: float = 1.3) -> None:
  """Runs ``name``'s tiny configuration and asserts that dp_accounting, fed only with
  metrics.jsonl, gives the epsilon of the file's last row and of summary.json."""
  opts = dict(registry.get(name).tiny_run_options(), algorithm=name, rounds=rounds,
              noise_multiplier=noise_multiplier, out=str(tmp_path / name))
  result = run(RunConfig.from_dict(opts).validate(), progress=False)
  rows = [json.loads(l) for l in open(tmp_path / name / "metrics.jsonl")]
  assert len(rows) == rounds and {r["observation"] for r in rows} == {"aggregate"}
  acc = dp_rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  for r in rows:
    z = r["noise_stddev"] / r["sensitivity"]
    assert z == pytest.approx(noise_multiplier, rel=1e-6) and r["dp_steps"] == 1
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        r["sampling_rate"], dp_accounting.GaussianDpEvent(z)))
  eps = acc.get_epsilon(result.summary["delta"])
  assert eps == pytest.approx(rows[-1]["epsilon"], rel=1e-6)
  assert eps == pytest.approx(result.summary["epsilon_rdp"], rel=1e-6)
