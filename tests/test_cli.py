"""The command line and the run loop (fedjax_dp.runs): outputs on disk, privacy
bookkeeping, bad input."""

import json
import math
import os
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.data.sources import fashion_mnist, har
from fedjax_dp.runs import RunConfig, run

SYNTH = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
         "--batch-size", "8", "--eval-every", "3", "--no-progress"]


def _read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def _epsilon_from_metrics(records, delta):
  """Recomputes epsilon from metrics.jsonl alone with a fresh dp_accounting RDP accountant."""
  acc = dp_accounting.rdp.RdpAccountant()
  for r in records:
    assert r["sampler"] == "poisson"
    event = dp_accounting.PoissonSampledDpEvent(
        r["sampling_rate"], dp_accounting.GaussianDpEvent(r["noise_multiplier"]))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, r["dp_steps"]))
  return acc.get_epsilon(delta)


def test_cli_run_writes_metrics_summary_and_curves(tmp_path, capsys):
  out = tmp_path / "run"
  rc = cli.main(["run", *SYNTH, "--rounds", "7", "--sampling-rate", "0.3",
                 "--noise-multiplier", "1.1", "--clip-norm", "0.7", "--delta", "1e-4",
                 "--out", str(out)])
  assert rc == 0
  printed = capsys.readouterr().out
  assert "final test accuracy" in printed and "user-level" in printed

  records = _read_jsonl(out / "metrics.jsonl")
  assert [r["round"] for r in records] == list(range(1, 8))
  for r in records:
    for key in ("train_loss", "noise_multiplier", "sampling_rate", "dp_steps", "epsilon",
                "clip_fraction", "wall_time_s", "delta", "sampler"):
      assert key in r, key
    assert r["noise_multiplier"] == pytest.approx(1.1)
    assert r["sampling_rate"] == pytest.approx(0.3)
    assert r["dp_steps"] == 1 and 0.0 <= r["clip_fraction"] <= 1.0
  # Evaluated every 3 rounds and after the last one.
  assert [r["round"] for r in records if "test_accuracy" in r] == [3, 6, 7]
  eps = [r["epsilon"] for r in records]
  assert all(b > a for a, b in zip(eps, eps[1:]))

  summary = json.loads((out / "summary.json").read_text())
  for key in ("algorithm", "dataset", "rounds", "final_test_accuracy", "final_test_loss",
              "epsilon", "delta", "accountant", "noise_multiplier", "clip_norm",
              "wall_time_s", "config"):
    assert key in summary, key
  assert summary["rounds"] == 7 and summary["delta"] == 1e-4
  assert summary["privacy_unit"] == "user-level"
  assert summary["epsilon"] == pytest.approx(eps[-1])
  # Anyone can recompute epsilon from metrics.jsonl alone.
  assert _epsilon_from_metrics(records, 1e-4) == pytest.approx(summary["epsilon_rdp"],
                                                                rel=1e-9)
  assert summary["epsilon_pld"] <= summary["epsilon_rdp"] * 1.001
  with open(out / "curves.png", "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_target_epsilon_is_met_and_nearly_spent(tmp_path):
  res = run(RunConfig.from_dict(dict(
      dataset="synthetic", num_clients=20, model="linear", rounds=6, sampling_rate=0.25,
      noise_multiplier=None, target_epsilon=3.0, delta=1e-5, eval_every=6, out=None)),
      progress=False)
  eps = res.summary["epsilon_rdp"]
  assert eps <= 3.0 and eps > 2.9
  assert res.summary["noise_multiplier"] > 0


def test_fedavg_cli_says_non_private(tmp_path, capsys):
  assert cli.main(["run", *SYNTH, "--algorithm", "fedavg", "--rounds", "2",
                   "--logger", "none", "--out", str(tmp_path / "fa")]) == 0
  printed = capsys.readouterr().out
  assert ("privacy: no guarantee is claimed (non-private baseline, no noise; epsilon = "
          "inf)") in printed
  # Only what was written: no tensorboard/ with --logger none.
  outputs = next(line for line in printed.splitlines() if "outputs:" in line)
  assert "tensorboard" not in outputs and "metrics.jsonl" in outputs
  assert "checkpoints/" in outputs


def test_fedavg_baseline_reports_no_privacy(tmp_path):
  res = run(RunConfig.from_dict(dict(
      algorithm="fedavg", dataset="synthetic", num_clients=12, model="linear", rounds=3,
      clients_per_round=4, sampling_rate=None, eval_every=3, out=str(tmp_path / "fa"))),
      progress=False)
  assert math.isinf(res.summary["epsilon"]) and res.ledger is None
  summary = json.loads((tmp_path / "fa" / "summary.json").read_text())
  # JSON has no inf: epsilon = inf is written as null, with "private": false.
  assert summary["epsilon"] is None and summary["private"] is False
  assert summary["sampler"] is None and res.summary["private"] is False
  assert summary["privacy_unit"].startswith("none")


def test_record_level_run_composes_local_steps(tmp_path):
  res = run(RunConfig.from_dict(dict(
      algorithm="dp_fedavg_record_level", dataset="synthetic", num_clients=10,
      model="linear", rounds=2, sampling_rate=0.5, record_noise_multiplier=1.0,
      record_sampling_rate=0.25, batch_size=4, eval_every=2, out=None)), progress=False)
  steps = res.summary["algorithm_config"]["local_dp_steps"]
  assert steps == 4  # one expected epoch at q_r = 1/4
  assert all(r["dp_steps"] == steps and r["sampling_rate"] == pytest.approx(0.25)
             for r in res.records)
  assert res.summary["privacy_unit"] == "record-level"
  assert res.ledger.summary().num_releases == 2 * steps


@pytest.mark.parametrize("args,needle", [
    (["--target-epsilon", "-1"], "target_epsilon"),
    (["--target-epsilon", "nan"], "target_epsilon"),
    (["--delta", "1.0"], "delta"),
    (["--delta", "0"], "delta"),
    (["--clip-norm", "0"], "clip_norm"),
    (["--clip-norm", "-2"], "clip_norm"),
    (["--noise-multiplier", "-0.5"], "noise_multiplier"),
    (["--noise-multiplier", "inf"], "noise_multiplier"),
    (["--sampling-rate", "0"], "sampling_rate"),
    (["--sampling-rate", "1.5"], "sampling_rate"),
    (["--rounds", "0"], "rounds"),
    (["--client-lr", "nan"], "client_learning_rate"),
    (["--dataset", "no_such_data"], "unknown dataset"),
    (["--clients-per-round", "50", "--num-clients", "20"], "clients_per_round"),
    (["--devices", "0"], "devices"),
    (["--devices", "4096"], "devices must be at most"),
    (["--chunk-size", "0"], "chunk_size"),
])
def test_cli_bad_input_is_one_clear_line(tmp_path, capsys, args, needle):
  out = tmp_path / "bad"
  base = ["run", "--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
          "--rounds", "2", "--no-progress", "--out", str(out)]
  rc = cli.main(base + args)
  err = capsys.readouterr().err
  assert rc == 2
  assert err.startswith("fedjax-dp: error:") and needle in err
  assert "Traceback" not in err
  assert not (out / "metrics.jsonl").exists()  # refused before anything ran


def test_datasets_command_lists_har(capsys):
  assert cli.main(["datasets", "--json"]) == 0
  infos = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
  assert set(infos) >= {"har", "fashion_mnist", "mnist", "emnist", "cifar10", "synthetic"}
  assert infos["har"]["available"] == har.is_available()
  assert infos["har"]["natural_clients"] is True


def test_console_script_help_explains_options():
  exe = os.path.join(os.path.dirname(sys.executable), "fedjax-dp")
  cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "fedjax_dp.cli"]
  out = subprocess.run(cmd + ["run", "--help"], capture_output=True, text=True, check=True)
  for opt in ("--algorithm", "--dataset", "--partition", "--rounds", "--clients-per-round",
              "--sampling-rate", "--local-epochs", "--batch-size", "--noise-multiplier",
              "--target-epsilon", "--delta", "--clip-norm", "--seed", "--out"):
    assert opt in out.stdout, opt


@pytest.mark.slow
@pytest.mark.skipif(not har.is_available(), reason="HAR package not installed")
def test_main_job_on_real_har_beats_majority_class(tmp_path):
  """The default main job (DP-FedAvg on HAR, 30 natural clients), with fewer rounds."""
  res = run(RunConfig(rounds=20, eval_every=10, out=str(tmp_path / "har")),
            progress=False)
  s = res.summary
  assert s["dataset"] == "har" and s["num_clients"] == 30
  assert s["majority_class_accuracy"] < 0.25
  assert s["final_test_accuracy"] > 0.5  # 6 classes, majority class 19%
  assert 0 < s["epsilon"] < math.inf
  assert np.isfinite(s["final_test_loss"])


@pytest.mark.parametrize("brk,word", [("none", "consistent"), ("noise-off", "VIOLATION")])
def test_cli_audit(capsys, brk, word):
  """`fedjax-dp audit` runs the real DP-FedAvg round: the shipped code is consistent and
  a deliberately broken round is caught; both as expected, exit status 0."""
  assert cli.main(["audit", "--target", "dp_fedavg/poisson", "--repetitions", "2000",
                   "--calibration", "1000", "--break", brk]) == 0
  out = capsys.readouterr().out
  assert word in out and "dp_fedavg/poisson" in out and f"break={brk}" in out
  assert "claimed epsilon 1.5" in out  # the code's PLD epsilon of the audited run
  assert "as expected" in out and "UNEXPECTED" not in out


def test_cli_audit_exits_1_when_a_break_is_not_caught(capsys, monkeypatch):
  """A 'break' that changes nothing (the shipped setup under a break's name) is not
  caught: that is unexpected, exit status 1."""
  import dataclasses
  from fedjax_dp.algorithms import audit_targets, registry
  t = audit_targets.target("dp_fedavg/poisson")
  fake = dataclasses.replace(t, build_setup=lambda b: t.build_setup("none"))
  # The CLI reads every algorithm's targets from its plug-in's hook.
  monkeypatch.setattr(type(registry.get(t.algorithm)), "audit_targets", lambda self: [fake])
  assert cli.main(["audit", "--target", "dp_fedavg/poisson", "--repetitions", "2000",
                   "--calibration", "1000", "--break", "noise-off"]) == 1
  assert "UNEXPECTED" in capsys.readouterr().out


def test_cli_audit_lists_every_target_and_break(capsys):
  from fedjax_dp.algorithms import audit_targets
  assert cli.main(["audit", "--list"]) == 0
  out = capsys.readouterr().out
  for t in audit_targets.all_targets():
    assert t.name in out
    for b in t.breaks:
      assert f"--break {b}:" in out


@pytest.mark.parametrize("args,needle", [(["--repetitions", "3"], "repetitions"),
                                         (["--calibration", "5"], "calibration"),
                                         (["--target", "nope"], "target"),
                                         (["--algorithm", "fedavg"], "no audit targets"),
                                         (["--target", "dp_fedavg/poisson", "--break",
                                           "bogus"], "break")])
def test_cli_audit_bad_input(capsys, args, needle):
  assert cli.main(["audit"] + args) == 2
  err = capsys.readouterr().err
  assert err.startswith("fedjax-dp: error:") and needle in err


def test_amplitude_varying_from_the_main_job(tmp_path):
  """Paper 004 through `fedjax-dp run`: per-round sigma_m and z_m in metrics.jsonl, the
  paper's epsilon and the accountant's in summary.json."""
  out = tmp_path / "av"
  rc = cli.main(["run", "--algorithm", "amplitude_varying", "--dataset", "synthetic",
                 "--num-clients", "20", "--model", "mlp", "--hidden", "8", "--activation",
                 "linear", "--epsilon", "10", "--vartheta", "1.05", "--rounds", "6",
                 "--clients-per-round", "5", "--param-clip-norm", "2", "--eval-every",
                 "2", "--no-progress", "--out", str(out)])
  assert rc == 0
  s = json.loads((out / "summary.json").read_text())
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  from fedjax_dp.algorithms.amplitude_varying import schedules
  d_s = s["sensitivity_paper"]
  assert d_s == pytest.approx(2 * 2.0 / s["algorithm_config"]["min_local_dataset_size"])
  expected = schedules.geometric_schedule(10.0, 1e-3, 0.25, d_s, 1.05, 6)
  np.testing.assert_allclose([r["noise_stddev"] for r in rows], expected, rtol=1e-5)
  # The guarantee uses the sensitivity the code enforces (2C, the parameter ball); the
  # paper's Delta_s only gives a conditional epsilon.
  assert s["sensitivity"] == 4.0 and all(r["sensitivity"] == 4.0 for r in rows)
  np.testing.assert_allclose([r["noise_multiplier"] for r in rows], expected / 4.0, rtol=1e-5)
  np.testing.assert_allclose([r["noise_multiplier_conditional"] for r in rows],
                             expected / d_s, rtol=1e-5)
  assert s["epsilon_conditional_rdp"] < s["epsilon_rdp"]
  assert "not a guarantee" in s["epsilon_guarantee_note"]
  assert s["epsilon_paper"] == pytest.approx(10.0, rel=1e-6)
  assert rows[-1]["epsilon_paper"] == pytest.approx(10.0, rel=1e-6)
  # The server sees each model upload with its sender (issue 30): visible participation,
  # which PLD accounts exactly.
  assert s["epsilon_pld"] <= s["epsilon_rdp"] and s["observation"] == "attributable"
  assert s["privacy_unit"] == "record-level" and s["accountant"] == "rdp"
  # The accountant's epsilon from metrics.jsonl alone (fixed-size, replace-one):
  from fedjax_dp.privacy.ledger import PrivacyLedger
  led = PrivacyLedger(delta=rows[0]["delta"], sampler="fixed_size",
                      population_size=rows[0]["population_size"],
                      cohort_size=rows[0]["cohort_size"], privacy_unit="record",
                      relation=rows[0]["neighboring_relation"],
                      observation=rows[0]["observation"])
  led.record_many([r["noise_multiplier"] for r in rows], [r["sampling_rate"] for r in rows],
                  [r["dp_steps"] for r in rows])
  assert led.epsilon() == pytest.approx(s["epsilon_rdp"], rel=1e-6)


def test_amplitude_varying_online_refinement_from_the_cli(tmp_path):
  out = tmp_path / "ref"
  rc = cli.main(["run", "--algorithm", "amplitude_varying", "--dataset", "synthetic",
                 "--num-clients", "20", "--model", "linear", "--epsilon", "5",
                 "--vartheta", "1.1", "--rounds", "10", "--clients-per-round", "5",
                 "--alpha-d", "0.8", "--refinement-mode", "exact_budget",
                 "--client-lr", "2.0", "--no-progress", "--out", str(out)])
  assert rc == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  planned = [r["planned_rounds"] for r in rows]
  assert planned == sorted(planned, reverse=True) and len(rows) <= 10
  assert all("test_loss" in r for r in rows)  # evaluated every round (the trigger)
  s = json.loads((out / "summary.json").read_text())
  assert s["epsilon_paper"] <= 5.0 * (1 + 1e-6)
  assert len(s["noise_stddevs"]) == len(rows)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_fixed_size_cohorts_report_pld_too(tmp_path, capsys, accountant):
  """Fixed-size cohorts (sampling without replacement) have a PLD since issue 30 (F9;
  `fedjax_dp.privacy.accountants.sampled_without_replacement_gaussian_pld`): both
  epsilons are reported, and --accountant pld is no longer refused."""
  out = tmp_path / "fs"
  rc = cli.main(["run", "--dataset", "synthetic", "--num-clients", "20", "--model",
                 "linear", "--rounds", "2", "--sampler", "fixed_size",
                 "--clients-per-round", "5", "--no-progress", "--accountant", accountant,
                 "--out", str(out)])
  assert rc == 0
  s = json.loads((out / "summary.json").read_text())
  assert 0 < s["epsilon_pld"] < s["epsilon_rdp"]
  assert s["epsilon"] == s[f"epsilon_{accountant}"]
  assert "PLD n/a" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(fashion_mnist.locate() is None, reason="Fashion-MNIST not installed")
def test_padpfl_from_the_main_job(tmp_path):
  """Paper 000 through `fedjax-dp run`: scenario data, the impact-factor switch, sigma_C,
  sigma_S and sigma_A per round, the paper's epsilon beside the accountant's. (delta
  0.005, not the paper's 0.01: with 150 records a client, delta must be below 1/150.)"""
  from fedjax_dp.algorithms.padpfl import nbafl
  out = tmp_path / "pad"
  rc = cli.main(["run", "--algorithm", "padpfl", "--dataset", "fashion_mnist",
                 "--scenario", "4", "--impact-factors", "0-1-2>2-1-0", "--epsilon", "20",
                 "--delta", "0.005", "--rounds", "3", "--clip-bound", "5", "--hidden", "8",
                 "--local-steps", "1", "--client-lr", "0.02", "--eval-every", "3",
                 "--no-progress", "--out", str(out)])
  assert rc == 0
  s = json.loads((out / "summary.json").read_text())
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  assert s["num_clients"] == 60 and s["rounds"] == 3
  # 0-1-2 for rounds 1-2, then 2-1-0 (switch after min(10, T - 1) rounds)
  np.testing.assert_allclose(s["impact_factors_per_part"],
                             [[0, 1 / 60, 1 / 30]] * 2 + [[1 / 30, 1 / 60, 0]], atol=1e-12)
  lv = nbafl.noise_levels(np.array(s["algorithm_config"]["impact_factors"][0]), 5.0, 3, 1,
                          150, 20.0, 0.005)
  for r in rows:
    assert r["sigma_c"] == pytest.approx(lv.sigma_c, rel=1e-5)
    assert r["sigma_s"] == pytest.approx(lv.sigma_s, rel=1e-5)
    assert r["sigma_a"] == pytest.approx(lv.sigma_a, rel=1e-9)
    assert r["epsilon_paper"] == 20.0
  assert s["epsilon_paper"] == 20.0
  # The conditional ledger (the paper's 2B / m_min) composes every upload: nbafl's "all
  # uploads" epsilon; the guarantee uses 2B and is larger.
  assert s["epsilon_conditional_rdp"] == pytest.approx(
      s["epsilon_rdp_uplink_all_uploads_conditional"], rel=1e-6)
  assert s["epsilon_rdp_uplink_conditional"] < s["epsilon_rdp_uplink_all_uploads_conditional"]
  assert s["epsilon_rdp"] > s["epsilon_conditional_rdp"]
  assert s["sensitivity"] == 10.0 and s["sensitivity_paper"] == pytest.approx(10.0 / 150)
  assert 0 < s["epsilon_rdp_downlink_conditional"] < 20.0
  # Every client takes part: plain Gaussian events, so PLD is available (issue 13, 1f).
  assert s["epsilon_pld"] is not None and s["epsilon_pld"] <= s["epsilon_rdp"]
  # The downlink reads z from metrics.jsonl: z = max(T, R sqrt(sum p^2) / max p) c /
  # epsilon over the paper's sensitivity (= 5 c / epsilon here: T = 3 is below the eq. 13
  # threshold 5R, sigma_S = 0, and the client noise alone is left), and its epsilon
  # agrees with nbafl's direct dp_accounting composition.
  for r in rows:
    assert r["sigma_s"] == 0.0
    assert r["noise_multiplier_downlink_conditional"] == pytest.approx(
        5 * nbafl.gaussian_constant(0.005) / 20.0, rel=1e-5)
    assert r["noise_multiplier_downlink"] == pytest.approx(
        r["noise_multiplier_downlink_conditional"] / 150, rel=1e-5)
  acc = nbafl.accountant_epsilon(np.array(s["algorithm_config"]["impact_factors"]), 5.0, 3,
                                 1, 150, 20.0, 0.005)
  assert s["epsilon_rdp_downlink_conditional"] == pytest.approx(acc["downlink_epsilon"],
                                                                rel=0.02)
  assert math.isfinite(s["final_test_loss"]) and "test_loss" in rows[-1]
