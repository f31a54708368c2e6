"""Simulating a larger noise cohort (``--noise-cohort-size``): the rounds add the
scaled noise, the ledger accounts it (this run's own epsilon), and the K' deployment's
epsilon is reported apart; both recomputed from metrics.jsonl alone with dp_accounting."""

import json

import dp_accounting
from dp_accounting import rdp as dp_rdp
import pytest

from fedjax_dp.algorithms.dp_fedavg import noise_cohort
from fedjax_dp.algorithms.interface import TINY_SYNTHETIC_RUN
from fedjax_dp.federated.round import RoundConfig
from fedjax_dp.privacy.adaptive_clipping import AdaptiveClipping
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError


def _run(tmp_path, name, **kw):
  opts = dict(TINY_SYNTHETIC_RUN, algorithm="dp_fedavg", sampling_rate=0.25, rounds=3,
              out=str(tmp_path / name), **kw)
  res = run(RunConfig.from_dict(opts).validate(), progress=False)
  rows = [json.loads(l) for l in open(tmp_path / name / "metrics.jsonl")]
  return res.summary, rows


def _rdp_epsilon(zs, q, delta):
  acc = dp_rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  for z in zs:
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)))
  return acc.get_epsilon(delta)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
  return _run(tmp_path_factory.mktemp("nc"), "sim", noise_multiplier=1.0,
              noise_cohort_size=30)


def test_rounds_add_the_scaled_noise_and_the_ledger_accounts_it(simulated):
  summary, rows = simulated
  sim = summary["noise_cohort_simulation"]
  # 12 clients at q = 0.25: K = 3, K' = 30, s = 0.1; clip norm 0.5 (the default).
  assert sim["noise_scale"] == pytest.approx(0.1)
  for r in rows:
    assert r["noise_stddev"] == pytest.approx(0.1 * 1.0 * 0.5, rel=1e-6)
    assert r["noise_multiplier"] == pytest.approx(0.1, rel=1e-6)
  # this run's own guarantee, from metrics.jsonl alone: z = noise_stddev / sensitivity
  own = _rdp_epsilon([r["noise_stddev"] / r["sensitivity"] for r in rows],
                     rows[0]["sampling_rate"], summary["delta"])
  assert own == pytest.approx(summary["epsilon_rdp"], rel=1e-6)
  assert own > 50  # z = 0.1: weak, and reported as the run's epsilon


def test_deployment_epsilon_recomputed_from_metrics_and_equals_a_plain_run(simulated,
                                                                            tmp_path):
  summary, rows = simulated
  sim = summary["noise_cohort_simulation"]
  s = sim["noise_scale"]
  deployed = _rdp_epsilon([r["noise_stddev"] / r["sensitivity"] / s for r in rows],
                          rows[0]["sampling_rate"], summary["delta"])
  assert deployed == pytest.approx(sim["deployment_epsilon"], rel=1e-5)
  assert sim["deployment_population_size"] == pytest.approx(120.0)
  plain, _ = _run(tmp_path, "plain", noise_multiplier=1.0)
  assert "noise_cohort_simulation" not in plain
  assert sim["deployment_epsilon"] == pytest.approx(plain["epsilon_rdp"], rel=1e-5)
  assert deployed < summary["epsilon_rdp"] / 10
  assert "SIMULATION" in sim["meaning"]


def test_target_epsilon_calibrates_the_deployment(tmp_path):
  summary, _ = _run(tmp_path, "target", target_epsilon=4.0, noise_cohort_size=60)
  sim = summary["noise_cohort_simulation"]
  assert sim["deployment_epsilon"] == pytest.approx(4.0, rel=1e-2)
  assert summary["epsilon"] > 4.0  # this run's own clients have much less


@pytest.mark.parametrize("kw, needle", [
    (dict(sampler="fixed_size", clients_per_round=3), "Poisson"),
    (dict(noise_placement="local"), "central"),
    (dict(clip_norm="adaptive"), "numeric"),
])
def test_refusals_name_the_option(tmp_path, kw, needle):
  opts = dict(TINY_SYNTHETIC_RUN, algorithm="dp_fedavg", noise_cohort_size=30,
              out=str(tmp_path / "x"), **kw)
  if "clients_per_round" not in kw:
    opts["sampling_rate"] = 0.25
  with pytest.raises(FedJaxDpError, match=needle) as e:
    RunConfig.from_dict(opts).validate()
  assert "noise_cohort_size" in str(e.value)


def test_noise_scale_checks():
  assert noise_cohort.noise_scale(None, "poisson", 3.0, "central", False) == 1.0
  assert noise_cohort.noise_scale(12, "poisson", 3.0, "central", False) == 0.25
  with pytest.raises(FedJaxDpError, match=">= the expected cohort size"):
    noise_cohort.noise_scale(2, "poisson", 3.0, "central", False)
  with pytest.raises(FedJaxDpError, match=r"\(0, 1\]"):
    RoundConfig(population_weight=1.0, noise_scale=1.5)
  with pytest.raises(FedJaxDpError, match="central"):
    RoundConfig(population_weight=1.0, noise="local", noise_scale=0.5)
  with pytest.raises(FedJaxDpError, match="adaptive"):
    RoundConfig(population_weight=1.0, noise_scale=0.5,
                adaptive_clip=AdaptiveClipping())
