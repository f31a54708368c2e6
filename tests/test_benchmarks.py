"""The benchmark command's plumbing (tiny sizes; the real figures live in
benchmarks/RESULTS.md, never in timed tests)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import common, run as bench_run, workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _record(framework, wname, cups, versions=None):
  return {"framework": framework, "workload": wname, "client_updates_per_s": cups,
          "versions": versions or {"x": "1"}, "cohort_size": 100, "median_round_s": 0.1}


def test_ratios_and_target_lines():
  recs = [_record("fedjax_dp", "mlp", 1000.0), _record("fedjax", "mlp", 250.0),
          _record("pfl-research", "mlp", 50.0), _record("fedjax_dp", "cnn", 30.0),
          _record("fedjax", "cnn", 10.0)]
  r = bench_run.ratios(recs)
  assert r == {"mlp": {"fedjax": 4.0, "pfl-research": 20.0}, "cnn": {"fedjax": 3.0}}
  md = bench_run.markdown({"timestamp": "t", "quick": False, "throughput": recs, "ratios": r,
                           "machine": {"cpu": "c", "cores": 2, "memory_gib": 1}})
  assert "Target (mlp): >= 5x fedjax: MISSED (4.0x)." in md
  assert "Target (mlp): >= 10x pfl-research: met (20.0x)." in md
  # cnn round: 71.6 GFLOP of local training in 0.1 s = 716 GFLOP/s.
  assert "| cnn | fedjax | x 1 | 100 | 0.100 | 10.0 | 716.1 | 3.0x |  |" in md
  # With a same-run matmul rate, a peer's row gets the speed-up ceiling: a round at
  # 100 GFLOP/s would take 0.716 s for the cnn workload, 0.1 s / 0.716 s = 0.1x.
  md = bench_run.markdown({"timestamp": "t", "quick": False, "throughput": recs, "ratios": r,
                           "roofline": {"matmul_gflops": 100.0, "local_training": {
                               "clients": 1, "steps_per_client": 1, "devices": 1,
                               "chunk_size": 1, "gflops": 50.0},
                                        "local_training_fraction_of_matmul": 0.5,
                                        "hot_path": []},
                           "machine": {"cpu": "c", "cores": 2, "memory_gib": 1}})
  assert "| 3.0x | 0.1x |" in md
  assert "= 50% of the matmul" in md


def test_poisson_max_batch_matches_the_engine():
  from fedjax_dp.federated.client import DpSgdConfig
  for n, q in [(100, 0.2), (100, 0.5), (10, 0.2), (1000, 0.02), (100, 1.0), (7, 0.9),
               (256, 0.05)]:
    assert workloads.poisson_max_batch(n, q) == DpSgdConfig.create(
        n, q, local_steps=1).max_batch_size, (n, q)
  assert workloads.poisson_max_batch(100, 0.2) == 53


def test_dpsgd_workload_counts():
  mlp, cnn = workloads.DPSGD_MLP, workloads.DPSGD_CNN
  assert workloads.dpsgd_examples_per_round(mlp) == 100 * 5 * 20
  assert mlp["expected_batch_size"] == mlp["record_sampling_rate"] * mlp[
      "examples_per_client"]
  assert workloads.dpsgd_flops_per_round(mlp) == 3 * 2 * 198_800 * 10_000
  assert workloads.dpsgd_examples_per_round(cnn) == 10 * 5 * 20
  assert workloads.dpsgd_flops_per_round(cnn) == 3 * 23_998_208 * 1_000
  x, y = workloads.synthetic_client_data(cnn, 0)
  assert x.shape == (100, 28, 28, 1) and y.max() < 62


def test_check_sum_and_loss_check():
  ref = np.array([0.6, 0.8, 0.0])
  ok = common.check_sum(ref * (1 + 1e-6), ref, batch_size=1, clip_norm=1.0)
  assert ok["correct"] and ok["rel_err_vs_reference"] < 1e-5
  assert not common.check_sum(ref * 1.01, ref, 1, 1.0)["correct"]  # 1% off
  assert not common.check_sum(ref * 2, ref * 2, 1, 1.0)["correct"]  # norm 2 > B C = 1
  assert not common.check_sum(np.array([np.nan, 0, 0]), ref, 1, 1.0)["correct"]
  assert common.losses_ok([2.3, 2.0, 1.5])
  assert not common.losses_ok([2.3, 2.4])
  assert not common.losses_ok([2.3, float("nan"), 1.0])
  assert not common.losses_ok([2.3])


def _fed(framework, wname, rate, method, loss_ok=True, **kw):
  return dict({"framework": framework, "workload": wname, "method": method,
               "per_example_grads_per_s": rate, "versions": {"x": "1"},
               "cohort_size": 100, "median_round_s": 10_000 / rate, "gflops": 1.0,
               "first_round_loss": 2.3, "last_round_loss": 1.0 if loss_ok else 2.5,
               "loss_ok": loss_ok, "padded_batch": "53"}, **kw)


def _micro(framework, rows):
  return {"framework": framework, "results": [
      {"model": "mlp", "batch_size": 20, "method": m, "per_example_grads_per_s": r,
       "best_s": 20 / r, "median_s": 20 / r, "gflops": 1.0, "correct": ok,
       "rel_err_vs_reference": 1e-7 if ok else 0.2} for m, r, ok in rows]}


def test_dpsgd_ratios_skip_invalid_runs_and_target_lines():
  section = {
      "federated": [
          _fed("fedjax_dp", "dpsgd_mlp", 10_000.0, "dp_fedavg_record_level",
               matmul_gflops=100.0, gflops=41.0),
          _fed("opacus", "dpsgd_mlp", 1_000.0, "hooks"),
          _fed("opacus", "dpsgd_mlp", 5_000.0, "ghost", loss_ok=False),  # never counts
          _fed("jax-privacy", "dpsgd_mlp", 12_500.0, "vmap"),
          _fed("jax-privacy", "dpsgd_mlp", 2_000.0, "loop")],
      "micro": [_micro("fedjax_dp", [("auto (ghost)", 90_000.0, True),
                                     ("vmap", 2_000.0, True)]),
                _micro("opacus", [("hooks", 30_000.0, True), ("ghost", 95_000.0, False)]),
                _micro("jax-privacy", [("clipped_grad", 45_000.0, True)])]}
  r = bench_run.dpsgd_ratios(section)
  assert r["federated"] == {"dpsgd_mlp": {"opacus": 10.0, "jax-privacy": 0.8}}
  assert r["micro"] == {"mlp B=20": {"opacus": 3.0, "jax-privacy": 2.0}}
  md = bench_run.markdown({"timestamp": "t", "quick": False, "dpsgd": section,
                           "dpsgd_ratios": r,
                           "machine": {"cpu": "c", "cores": 2, "memory_gib": 1}})
  assert ("- federated dpsgd_mlp: fedjax_dp vs opacus (per-example grads/s): >= 5x: MET "
          "(10.00x, ratio 2.00 of the target).") in md
  assert ("- federated dpsgd_mlp: fedjax_dp vs jax-privacy (per-example grads/s): >= 1x: "
          "MISSED (0.80x, ratio 0.80 of the target).") in md
  assert "- micro mlp B=20: fedjax_dp vs opacus (per-example grads/s): >= 5x: MISSED " \
         "(3.00x" in md
  assert "- micro mlp B=20: fedjax_dp vs jax-privacy (per-example grads/s): >= 1x: MET" in md
  assert ("(fedjax_dp round, 41.0 GFLOP/s): >= 40% of the dense matmul: MET (41%, ratio "
          "1.02 of the target).") in md
  assert "2.300 -> 2.500 (FAILED: not counted)" in md
  assert "| 0.2 WRONG |" not in md and "2.0e-01 WRONG" in md
  # The speed-up is written on the peer row it was computed against, and only there.
  assert "| 2.300 -> 1.000 | 10.0x |" in md
  assert md.count("10.0x") == 1


def test_synthetic_client_data_is_deterministic_and_learnable():
  w = workloads.MLP
  x1, y1 = workloads.synthetic_client_data(w, 3)
  x2, y2 = workloads.synthetic_client_data(w, 3)
  x3, _ = workloads.synthetic_client_data(w, 4)
  np.testing.assert_array_equal(x1, x2)
  np.testing.assert_array_equal(y1, y2)
  assert not np.array_equal(x1, x3)
  assert x1.shape == (100, 28, 28) and x1.dtype == np.float32 and y1.max() < 10
  assert workloads.local_steps(w) == 5
  # Labels are recoverable from the class means (nearest mean wins): the task learns.
  xs, ys = zip(*(workloads.synthetic_client_data(w, c) for c in range(5)))
  x, y = np.concatenate(xs).reshape(500, -1), np.concatenate(ys)
  means = np.stack([x[y == c].mean(0) for c in range(10)])
  pred = np.argmin(((x[:, None] - means[None]) ** 2).sum(-1), 1)
  assert (pred == y).mean() > 0.9


def test_quick_benchmark_run_writes_results(tmp_path):
  md = tmp_path / "RESULTS.md"
  out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--results-md",
                        str(md), "--json-dir", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  (path,) = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
  res = json.loads(path.read_text())
  (ours,) = res["throughput"]
  assert ours["framework"] == "fedjax_dp" and ours["client_updates_per_s"] > 0
  assert len(ours["round_seconds"]) == 2
  assert ours["last_round_loss"] < ours["first_round_loss"]  # it trains
  rf = res["roofline"]
  assert rf["matmul_gflops"] > 0 and rf["local_training"]["gflops"] > 0
  assert {(h["K"], h["P"]) for h in rf["hot_path"]} == {(10, 10**4), (10, 10**5),
                                                        (100, 10**4), (100, 10**5)}
  sc = res["scale"]
  assert [r["cohort_size"] for r in sc["results"]] == [50, 100]
  assert all(r["peak_rss_mib"] > 0 and r["seconds_per_round"] > 0 for r in sc["results"])
  dp = res["dpsgd"]
  (fed,) = dp["federated"]
  assert fed["framework"] == "fedjax_dp" and fed["workload"] == "dpsgd_mlp"
  assert fed["cohort_size"] == 10 and len(fed["round_seconds"]) == 2
  assert fed["loss_ok"] and fed["last_round_loss"] < fed["first_round_loss"]  # it trains
  assert fed["per_example_grads_per_s"] == pytest.approx(1_000 / fed["median_round_s"])
  assert fed["matmul_gflops"] > 0 and fed["padded_batch"] == "53"
  (mic,) = dp["micro"]
  assert {r["method"].split()[0] for r in mic["results"]} == {"auto", "ghost", "vmap"}
  assert all(r["correct"] and r["batch_size"] == 20 for r in mic["results"])
  assert mic["matmul_gflops"] > 0
  text = md.read_text()
  assert text.startswith("# fedjax_dp benchmark results")
  assert "### Throughput" in text and "### Roofline" in text and "### Scale" in text
  assert "### Record-level DP-SGD" in text and "per-example local training dpsgd_mlp" in text
