"""The benchmark command's plumbing (tiny sizes; the real figures live in
benchmarks/RESULTS.md, never in timed tests)."""

import json
import os
import subprocess
import sys

import numpy as np

from benchmarks import run as bench_run, workloads

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
  text = md.read_text()
  assert text.startswith("# fedjax_dp benchmark results")
  assert "### Throughput" in text and "### Roofline" in text and "### Scale" in text
