"""Paper 003 through the main job: `fedjax-dp run --algorithm rdp_pfl`."""

import json

import numpy as np
import pytest

from fedjax_dp.algorithms.rdp_pfl import paper_accounting
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError

SMALL = dict(algorithm="rdp_pfl", dataset="mnist", rounds=4, eval_every=2, clients=8,
             samples_per_class=10, test_per_class=5, hidden="16")


def _run(tmp_path, **kw):
  cfg = RunConfig.from_dict(dict(SMALL, out=str(tmp_path / "out"), **kw)).validate()
  res = run(cfg, progress=False)
  rows = [json.loads(l) for l in (tmp_path / "out" / "metrics.jsonl").read_text()
          .splitlines()]
  return res, rows, json.loads((tmp_path / "out" / "summary.json").read_text())


@pytest.mark.slow
def test_default_calibrates_to_epsilon_2_and_reports_both_epsilons(tmp_path):
  res, rows, s = _run(tmp_path)
  assert s["config"]["target_epsilon"] == 2.0
  assert s["epsilon_rdp"] == pytest.approx(2.0, abs=0.02) and s["epsilon_rdp"] <= 2.0
  # the paper's Theorem 1 for the same sigma, T and rates (same sum composition)
  eps_paper, _ = paper_accounting.paper_epsilon(s["noise_multiplier"], 0.1, 0.1, 4, 1, 1e-3)
  assert s["epsilon_paper"] == pytest.approx(eps_paper)
  assert s["budget_split_paper"]["inner_share"] == pytest.approx(0.5)
  assert s["epsilon_pld"] < s["epsilon_rdp"]
  # Issue 30: each record is in one stage (groups {query}, {support}), so the run's
  # epsilon is the larger stage's; the paper's Theorem 1 composes both: above it.
  assert s["release_groups"] == [["query"], ["support"]]
  assert s["epsilon_rdp"] == pytest.approx(max(s["group_epsilons_rdp"]), rel=1e-12)
  assert s["epsilon_paper"] > 1.2 * s["epsilon_rdp"]
  assert s["aggregation"] == "uniform" and s["observation"] == "aggregate"
  assert s["algorithm_config"]["nominal_query_size"] == 15  # 3 classes x 10 images / 2
  assert set(s["diagnostics"]) == {"class_sets", "final_meta_train_loss", "note"}
  assert "class_sets" not in s and "final_meta_train_loss" not in s
  for r in rows:  # both stages' (z, q, steps) every round
    for name in ("query", "support"):
      assert r[f"{name}_noise_multiplier"] == pytest.approx(s["noise_multiplier"], rel=1e-6)
      assert r[f"{name}_sampling_rate"] == pytest.approx(0.1)
      assert r[f"{name}_dp_steps"] == 1
    assert r["release_groups"] == [["query"], ["support"]]
  evals = [r for r in rows if "test_accuracy" in r]
  assert [r["round"] for r in evals] == [2, 4]
  assert all(0 <= r["test_accuracy_no_adapt"] <= 1 for r in evals)
  assert s["final_test_accuracy"] == pytest.approx(evals[-1]["test_accuracy"], abs=1e-6)
  assert "MNIST" in s["dataset_description"] or "mnist" in s["data_structure"]
  kinds = {k: v["kind"] for k, v in s["metrics_disclosure"].items()}
  assert kinds["test_accuracy"] == "dp" and kinds["meta_train_loss"] == "diagnostic"
  assert kinds["query_noise_multiplier"] == "public"
  assert kinds["release_groups"] == "public"


def test_data_size_weights_run_without_a_guarantee(tmp_path):
  """Issue 30, F5: the paper's eq. 3 weights depend on the clients' record counts, so a
  run with them adds the noise but claims no epsilon (inf); --dp-metrics-only leaves
  the summary's raw-data diagnostics out too."""
  out = tmp_path / "out"
  cfg = RunConfig.from_dict(dict(SMALL, out=str(out), aggregation="data_size",
                                 noise_multiplier=1.0, rounds=2,
                                 dp_metrics_only=True)).validate()
  res = run(cfg, progress=False)
  s = json.loads((out / "summary.json").read_text())
  assert s["epsilon"] is None and s["guarantee"].startswith("none")  # inf -> null
  assert "eq. 3" in s["guarantee_note"] and "epsilon_paper" not in s
  assert s["aggregation"] == "data_size" and "diagnostics" not in s
  assert all("query_noise_multiplier" not in r for r in res.records)
  assert res.records[0]["noise_stddev"] == pytest.approx(2.4)  # the noise is added


def test_non_private_baseline_learns_and_reports_no_guarantee(tmp_path):
  res, rows, s = _run(tmp_path, mechanism="none", rounds=20, eval_every=20,
                      inner_learning_rate=0.01, outer_learning_rate=0.1,
                      query_sampling_rate=1.0, support_sampling_rate=1.0)
  assert s["epsilon"] is None and s["guarantee"].startswith("none")  # inf -> null
  # 3-class target clients (10-way softmax): training must beat chance clearly
  assert s["final_test_accuracy"] > 0.4
  assert rows[-1]["train_loss"] < 0.5 * rows[0]["train_loss"]
  assert "query_noise_multiplier" not in rows[0]


@pytest.mark.slow
def test_resume_continues_the_ledger(tmp_path):
  res, rows, s = _run(tmp_path, noise_multiplier=2.0)
  cfg = RunConfig.from_dict(dict(resume=str(tmp_path / "out"), resume_rounds=6)).validate()
  res2 = run(cfg, progress=False)
  full = run(RunConfig.from_dict(dict(SMALL, rounds=6, noise_multiplier=2.0,
                                      out=None)).validate(), progress=False)
  assert res2.summary["epsilon_rdp"] == pytest.approx(full.summary["epsilon_rdp"], rel=1e-9)
  np.testing.assert_allclose(res2.summary["final_test_accuracy"],
                             full.summary["final_test_accuracy"], atol=1e-6)


@pytest.mark.parametrize("kw,option", [
    (dict(clip_mode="second"), "clip_mode"),
    (dict(query_sampling_rate=0.0), "query_sampling_rate"),
    (dict(query_fraction=1.0), "query_fraction"),
    (dict(mechanism="none", noise_multiplier=1.0), "noise_multiplier"),
    (dict(mechanism="none", target_epsilon=2.0), "target_epsilon"),
    (dict(aggregation="data_size"), "noise_multiplier"),
    (dict(aggregation="data_size", noise_multiplier=1.0, target_epsilon=2.0),
     "target_epsilon"),
])
def test_bad_options_name_the_option(kw, option):
  with pytest.raises(FedJaxDpError, match=option):
    cfg = RunConfig.from_dict(dict(SMALL, out=None, **kw)).validate()
    run(cfg, progress=False)


def test_its_own_hyper_parameters_are_bounded_by_its_plugin(synthetic_fd):
  """RDP-PFL's per-round fields (`RdpPflHParams`) that the engine does not know are
  bounded by its plug-in's `schedule_bounds`, which the run passes to the driver."""
  from fedjax_dp.algorithms import registry
  from fedjax_dp.federated.driver import check_schedule, constant_schedule
  from fedjax_dp.models import create_model
  plugin = registry.get("rdp_pfl")
  bounds = plugin.schedule_bounds()
  assert set(bounds) == {"query_sampling_rate", "support_sampling_rate",
                         "inner_learning_rate", "outer_learning_rate"}
  model = create_model("linear", synthetic_fd.feature_shape, synthetic_fd.num_classes)
  alg = plugin.function(model, synthetic_fd,
                        **plugin.test_config(model, synthetic_fd).kwargs)
  sched = constant_schedule(alg.hparams, 3)
  check_schedule(sched, bounds)
  bad = sched._replace(query_sampling_rate=np.array([0.5, 1.5, 0.5], np.float32))
  check_schedule(bad)  # without the plug-in's bounds: only finite
  with pytest.raises(FedJaxDpError, match=r"query_sampling_rate must be in \(0, 1\] in "
                     r"every round; entry 1 is 1.5"):
    check_schedule(bad, bounds)
  with pytest.raises(FedJaxDpError, match="outer_learning_rate must be > 0"):
    check_schedule(sched._replace(outer_learning_rate=np.zeros(3, np.float32)), bounds)
