"""The benchmark command's plumbing (tiny sizes; the real figures live in
benchmarks/RESULTS.md, never in timed tests)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import common, run as bench_run, workloads
from cache_env import with_compilation_cache

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


@pytest.mark.slow
def test_quick_benchmark_run_writes_results(tmp_path):
  md = tmp_path / "RESULTS.md"
  # Section rdp_pfl is run (and its markdown checked) by
  # test_rdp_pfl_quick_main_rows_checks_and_markdown.
  out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--only",
                        "peers,roofline,scale,dpsgd", "--results-md",
                        str(md), "--json-dir", str(tmp_path)], cwd=ROOT,
                       env=with_compilation_cache(), capture_output=True, text=True,
                       timeout=900)
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
  assert "rdp_pfl" not in res and "### RDP-PFL" not in text


# --- benchmarks.rdp_pfl: RDP-PFL's second-order DP outer step -------------------------


def test_rdp_pfl_flop_model_hand_counted():
  from benchmarks import rdp_pfl
  from fedjax_dp.validation import FedJaxDpError
  # MLP 3-4-5-2: f = (2*3*4, 2*4*5, 2*5*2) = (24, 40, 20), forward F = 84.
  # Gradient: forward 84 + weight gradients 84 + input gradients of layers 2, 3 (60).
  # HVP: forward 84 + tangents 24 + 2*60 = 228; input gradients: tangents 2*60 + the
  # primal of layer 3 only (20) = 140; weight gradients: tangents 24 + 2*60 = 144.
  fl = rdp_pfl.flop_model([3, 4, 5, 2])
  assert fl == {"forward": 84, "gradient": 228, "hvp": 228 + 140 + 144,
                "meta_gradient": 228 + 512, "nonprivate_meta_gradient": 2 * 228 + 512}
  # One layer 3-2: f_1 = 12; gradient 12 + 12; HVP: forward 12 + tangent 12, weight
  # gradient tangent 12 (no input gradients at all).
  assert rdp_pfl.flop_model([3, 2])["gradient"] == 24
  assert rdp_pfl.flop_model([3, 2])["hvp"] == 36
  # The paper's MLP: the per-example gradient is the workloads' figure.
  paper = rdp_pfl.flop_model(rdp_pfl.layer_widths(rdp_pfl.PAPER_HIDDEN))
  assert paper["gradient"] == workloads.FLOPS_PER_EXAMPLE_STEP["mlp"] == 879_200
  assert paper["hvp"] == 8 * 397_600 - 5 * 313_600 - 80_000 == 1_532_800
  assert paper["meta_gradient"] == 2_412_000
  # Local epochs: 30 expected query and support rows; paper mode adds 23 batch HVPs.
  assert rdp_pfl.epoch_flops(fl, "per_example_hessian", 30, 30) == 30 * 228 + 30 * 740
  assert rdp_pfl.epoch_flops(fl, "first_order", 30, 30) == 60 * 228
  assert rdp_pfl.epoch_flops(fl, "paper", 30, 20) == 50 * 228 + 23 * 30 * 512
  for bad in ([3], [3, 0, 2]):
    with pytest.raises(FedJaxDpError, match="widths"):
      rdp_pfl.flop_model(bad)
  with pytest.raises(FedJaxDpError, match="mode"):
    rdp_pfl.epoch_flops(fl, "dp_fedavg", 30, 30)


def test_rdp_pfl_flop_model_matches_xla_count():
  """XLA's own FLOP count of the batch-form gradient and forward-over-reverse HVP of a
  4-layer MLP: at least the model's matmuls, and at most 2.5% more (elementwise work);
  the '2 gradients + a forward' rule of thumb would be 44% off here, and counting the
  dead primal input gradient of layer 2 3.7%."""
  import jax
  import jax.numpy as jnp

  from benchmarks import rdp_pfl
  from fedjax_dp.models import create_model
  widths, b = [300, 100, 50, 20, 10], 32
  model = create_model("mlp", (300,), 10, hidden=(100, 50, 20))
  w = model.init(jax.random.key(0))
  x = jax.random.normal(jax.random.key(1), (b, 300))
  y = jnp.arange(b, dtype=jnp.int32) % 10
  loss = lambda p, x, y: jnp.sum(model.per_example_loss(model.apply(p, x), y))
  hvp = lambda w, v, x, y: jax.jvp(lambda p: jax.grad(loss)(p, x, y), (w,), (v,))[1]

  def xla_flops(fn, *args):
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"] / b

  fl = rdp_pfl.flop_model(widths)
  for got, want in ((xla_flops(jax.grad(loss), w, x, y), fl["gradient"]),
                    (xla_flops(hvp, w, w, x, y), fl["hvp"])):
    assert 1.0 <= got / want <= 1.025, (got, want)


@pytest.mark.slow
def test_rdp_pfl_quick_main_rows_checks_and_markdown(tmp_path):
  import jax
  import jax.numpy as jnp

  from benchmarks import rdp_pfl
  from fedjax_dp.algorithms.rdp_pfl import meta
  from fedjax_dp.models import create_model

  out = tmp_path / "rdp.json"
  rec = rdp_pfl.main(["--quick", "--out", str(out)])
  assert json.loads(out.read_text()) == json.loads(json.dumps(rec))
  assert rec["quick"]
  # benchmarks.run's section of RESULTS.md.
  from benchmarks import run as bench_run
  text = "\n".join(bench_run.rdp_pfl_markdown(rec))
  assert "### RDP-PFL" in text and "time second_order/first_order_vmap" in text
  assert rec["model"] == "mlp 784-32-10" and rec["matmul_gflops"] > 0
  names = [(r["name"], r["batch_size"]) for r in rec["rows"]]
  assert names == [("first_order_vmap", 8), ("first_order_auto", 8), ("second_order", 8),
                   ("nonprivate_second_order", 8), ("local_epoch_per_example_hessian", None),
                   ("local_epoch_first_order", None), ("local_epoch_paper", None)]
  fl = rec["flops_per_example"]
  for r in rec["rows"]:
    assert r["ok"], r
    assert len(r["seconds"]) == 3 and 0 < r["best_s"] <= r["median_s"]
    assert r["per_example_grads_per_s"] == pytest.approx(r["examples"] / r["best_s"])
    assert r["gflops"] == pytest.approx(r["flops"] / r["best_s"] / 1e9)
    assert r["fraction_of_matmul"] == pytest.approx(r["gflops"] / rec["matmul_gflops"])
    if r["batch_size"] is not None:
      assert r["rel_err_vs_reference"] < 1e-4
  rows = {r["name"]: r for r in rec["rows"]}
  assert rows["second_order"]["flops"] == 8 * fl["meta_gradient"]
  assert rows["first_order_auto"]["method"] == "auto (ghost)"
  ep = rows["local_epoch_per_example_hessian"]
  assert (ep["query_rows"], ep["support_rows"], ep["expected_support_draw"]) == (300, 300, 30)
  assert (ep["support_max_batch"], ep["support_micro_batch"]) == (73, 15)
  assert 15 <= ep["mean_support_draw"] <= 45 and ep["nonfinite_or_truncated"] == 0
  assert ep["per_example_meta_grads_per_s"] == pytest.approx(30 / ep["seconds_per_epoch"])
  assert set(rec["ratios"]) == {"B=8", "local_epoch"}
  assert rec["ratios"]["B=8"]["second_order/first_order_vmap"] == pytest.approx(
      rows["second_order"]["best_s"] / rows["first_order_vmap"]["best_s"])

  # The check catches wrong sums: a perturbed result, the Hessian term dropped
  # (first-order MAML's sum) or its sign flipped.
  model = create_model("mlp", (784,), 10, hidden=(8,))
  w = model.init(jax.random.key(0))
  x = jax.random.normal(jax.random.key(1), (6, 784))
  y = jnp.arange(6, dtype=jnp.int32)
  theta = jax.tree_util.tree_map(lambda a: a * 0.9, w)
  wt, c = jnp.ones((6,)), 2.4
  g, h = rdp_pfl.per_example_terms(model, w, theta, x, y)
  ref = rdp_pfl.clipped_sum_np(g - 0.01 * h, c)
  got = meta.meta_clipped_sum(model, theta, 0.01)(w, x, y, wt, c).total
  assert rdp_pfl.check_row(got, ref, 6, c)["ok"]
  bad = [jax.tree_util.tree_map(lambda a: a * (1 + 1e-3), got),
         meta.grad_clipped_sum(model, "vmap", at=theta)(w, x, y, wt, c).total,
         meta.meta_clipped_sum(model, theta, -0.01)(w, x, y, wt, c).total]
  for b in bad:
    assert not rdp_pfl.check_row(b, ref, 6, c)["ok"]

  # A failed row enters no ratio and is marked in RESULTS.md.
  failed = [dict(r, ok=False) if r["name"] in ("second_order", "local_epoch_paper") else r
            for r in rec["rows"]]
  assert rdp_pfl.time_ratios(failed) == {"local_epoch": {
      "local_epoch_per_example_hessian/local_epoch_first_order":
          rec["ratios"]["local_epoch"]["local_epoch_per_example_hessian/local_epoch_first_order"]}}
  md = bench_run.markdown({"timestamp": "t", "quick": True, "machine": rec["machine"],
                           "rdp_pfl": rec})
  assert "### RDP-PFL" in md and "| second_order | 8 | vmap (jvp of grad) |" in md
  assert f"- B=8: time second_order/first_order_vmap = " \
         f"{rec['ratios']['B=8']['second_order/first_order_vmap']:.2f}" in md
  bad_rec = dict(rec, rows=failed, ratios=rdp_pfl.time_ratios(failed))
  md = bench_run.markdown({"timestamp": "t", "quick": True, "machine": rec["machine"],
                           "rdp_pfl": bad_rec})
  assert md.count(" WRONG |") == 2 and "second_order/first_order_vmap" not in md


# --- benchmarks.mechanisms: the cost of issue 20's mechanisms -------------------------


def test_mechanism_noise_costs_and_markdown():
  from benchmarks import mechanisms
  noise = mechanisms.noise_section((1000,), warm=1, timed=2)
  (res,) = noise["results"]
  rows = {r["generator"]: r for r in res["rows"]}
  assert set(rows) == {"iid", "tree"} | {f"banded_b{b}" for b in mechanisms.BANDS}
  levels = 7  # floor(log2(64)) + 1
  assert rows["iid"]["state_floats"] == 0
  assert rows["tree"]["state_floats"] == levels * 1000
  for b in mechanisms.BANDS:  # jax-privacy's buffer: one P-vector per band
    assert rows[f"banded_b{b}"]["state_floats"] == b * 1000
  assert all(r["median_s"] > 0 and r["roofline_s"] > 0 for r in rows.values())
  rec = {"rounds": {"workload": "mlp", "num_params": 10, "cohort_size": 2,
                    "rows": [{"variant": "dp_fedavg", "median_round_s": 0.1,
                              "ratio_to_dp_fedavg": 1.0, "state_floats": 0}]},
         "noise": noise}
  text = "\n".join(mechanisms.markdown(rec))
  assert "| dp_fedavg | 0.1000 | 1.000 | 0 |" in text and "| 1,000 | tree |" in text


def test_interleaved_timing_alternates_the_variants():
  from benchmarks import mechanisms
  calls = []
  out = mechanisms.time_interleaved({"a": lambda: calls.append("a"),
                                     "b": lambda: calls.append("b")}, warm=1, timed=3)
  assert calls == ["a", "b"] + ["a", "b"] * 3
  assert [len(v) for v in out.values()] == [3, 3]
