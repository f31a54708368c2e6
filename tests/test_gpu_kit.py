"""The GPU kit (benchmarks/gpu/) on the CPU: its budget, its reports, and one tiny
section end to end on JAX's CPU backend (torch peers skipped cleanly without torch)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.gpu import cifar10, run_kit, wheels  # noqa: E402


def test_wheel_lists_and_gitignore():
  main = [wheels.name_of(r) for r in wheels.MAIN]
  pfl = [wheels.name_of(r) for r in wheels.PFL]
  assert len(set(main)) == len(main) and len(set(pfl)) == len(pfl)
  assert "dp-accounting==0.6.0" in wheels.MAIN  # fedjax_dp's, never pfl's
  assert any(r.startswith("dp-accounting==0.5") for r in wheels.PFL)
  assert all("==" in r for r in wheels.MAIN + wheels.PFL + wheels.BUILD)
  assert not {"jax", "jaxlib", "flax", "optax", "torch", "numpy"} & set(main + pfl)
  with open(os.path.join(ROOT, ".gitignore")) as f:
    assert "benchmarks/gpu/wheels/" in f.read().split()
  man = os.path.join(ROOT, "benchmarks", "gpu", "wheels", "manifest.json")
  if os.path.exists(man):  # prepared on this machine
    with open(man) as f:
      assert json.load(f)["total_mib"] < wheels.MAX_MIB


def test_cifar10_shape_is_pfls_benchmark():
  w = cifar10.CIFAR10_PFL
  assert (w["cohort_size"], w["examples_per_client"], w["batch_size"],
          w["local_epochs"], w["feature_shape"]) == (50, 50, 10, 1, (32, 32, 3))
  assert cifar10.FLOPS_PER_EXAMPLE_STEP == 2 * 33_670_400 + (33_670_400 - 1_555_200)


def test_no_budget_skips_everything_and_still_reports(tmp_path):
  res = run_kit.main(["--out", str(tmp_path), "--tiny", "--no-install", "--budget-s", "0",
                      "--work", str(tmp_path / "work"),
                      "--sections", "info,scale,dpsgd,cifar10,sweep,micro"])
  skipped = " ".join(s["what"] for s in res["skipped"])
  for what in ("torch probe", "scale K=10", "dpsgd dpsgd_mlp fedjax_dp",
               "cifar10 fedjax_dp", "sweep", "micro fedjax_dp"):
    assert what in skipped
  assert not res["errors"]
  assert json.loads((tmp_path / "kit.json").read_text())["skipped"] == res["skipped"]
  md = (tmp_path / "kit.md").read_text()
  assert md.startswith("## GPU kit") and "Skipped:" in md and "needs about" in md


@pytest.mark.slow  # a subprocess run (about 15 s of CPU)
def test_tiny_cifar10_section_runs_on_the_cpu_backend(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out = subprocess.run(
      [sys.executable, os.path.join(ROOT, "benchmarks", "gpu", "run_kit.py"), "--out",
       str(tmp_path), "--tiny", "--no-install", "--sections", "cifar10",
       "--work", str(tmp_path / "work"), "--budget-s", "300"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  res = json.loads((tmp_path / "kit.json").read_text())
  assert not res["errors"], res["errors"]
  recs = res["sections"]["cifar10"]["records"]
  ours = [r for r in recs if r["framework"] == "fedjax_dp"]
  assert len(ours) == 1 and ours[0]["backend"] == "cpu"
  assert ours[0]["cohort_size"] == cifar10.tiny()["cohort_size"]
  assert all(r["median_round_s"] > 0 for r in recs)
  try:
    import torch  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    assert any(s["what"].startswith("torch peers") for s in res["skipped"])
  md = (tmp_path / "kit.md").read_text()
  assert "pfl-research's CIFAR-10 benchmark shape" in md


@pytest.mark.parametrize("flag", ["--sections", "--budget-s"])
def test_bad_flags_are_refused(flag, tmp_path):
  with pytest.raises(SystemExit):
    run_kit.main(["--out", str(tmp_path), flag, "nonsense"])
