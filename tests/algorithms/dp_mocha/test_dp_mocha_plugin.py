"""`fedjax-dp run --algorithm dp_mocha`: outputs, the per-device epsilon recomputed from
metrics.jsonl alone (dp_accounting, no fedjax_dp accounting code), the provable noise
multipliers recomputed from first principles, resume, the non-private baseline and bad
options."""

import json
import math

import dp_accounting
import numpy as np
import pytest

from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError

BASE = dict(algorithm="dp_mocha", dataset="har", rounds=6, eval_every=3, delta=1e-3)
OPTS = dict(outer_rounds=2, tau=0.5, drop_probability=0.3, epsilon=0.001, lam=0.1)


def _run(tmp_path, name="run", **kw):
  cfg = RunConfig.from_dict({**BASE, "out": str(tmp_path / name), **OPTS, **kw}).validate()
  res = run(cfg, progress=False)
  rows = [json.loads(line) for line in open(tmp_path / name / "metrics.jsonl")]
  summary = json.load(open(tmp_path / name / "summary.json"))
  return res, rows, summary


@pytest.fixture(scope="module")
def private_run(tmp_path_factory):
  return _run(tmp_path_factory.mktemp("dp_mocha"))


def _device_events(rows, t):
  """Device t's releases, from the rows alone: two Gaussians per round it took part in."""
  events = []
  for r in rows:
    if r["device_active"][t]:
      events += [dp_accounting.GaussianDpEvent(r["device_dual_noise_multiplier"][t]),
                 dp_accounting.GaussianDpEvent(r["device_primal_noise_multiplier"][t])]
  return events


def test_epsilon_recomputed_from_metrics_alone(private_run):
  _, rows, s = private_run
  assert len(rows) == 6
  assert {r["neighboring_relation"] for r in rows} == {"replace_one"}
  m = len(rows[0]["device_active"])
  eps_rdp = []
  for t in range(m):
    events = _device_events(rows, t)
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.ComposedDpEvent(events))
    eps_rdp.append(acc.get_epsilon(1e-3))
  worst = int(np.argmax(eps_rdp))
  pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  pld.compose(dp_accounting.ComposedDpEvent(_device_events(rows, worst)))
  eps_pld = pld.get_epsilon(1e-3)
  # Devices drop at random, so their histories (and epsilons) differ.
  assert len(set(np.round(eps_rdp, 9))) > 1
  assert s["per_client_epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["epsilon_rdp"] == pytest.approx(max(eps_rdp), rel=1e-6)
  assert s["epsilon_pld"] == pytest.approx(eps_pld, rel=2e-3)
  assert s["worst_client"] == int(np.argmax(eps_rdp))
  # The per-round epsilon is the worst device's so far.
  assert rows[-1]["epsilon"] == pytest.approx(max(eps_rdp), rel=1e-6)
  assert all(a["epsilon"] <= b["epsilon"] for a, b in zip(rows, rows[1:]))
  # Releases counted per device = the rounds it was active in.
  assert s["device_releases"] == np.sum([r["device_active"] for r in rows], 0).tolist()


def test_provable_multipliers_from_first_principles(private_run):
  """z1 = s1 sigma1 / (2 sqrt(min(steps, n_t))), s1 = (8 lam + beta)/(beta n_t) (Cor. 2);
  z2 = sigma2 (noisy_l2). Halving the sensitivity bound would double z1: caught."""
  _, rows, s = private_run
  cfg = s["algorithm_config"]
  lam, beta = cfg["lam"], cfg["beta"]
  counts = np.asarray(s["device_counts"], np.float64)
  s1 = (8 * lam + beta) / (beta * counts)
  sigma1, sigma2 = np.asarray(s["sigma1"]), np.asarray(s["sigma2"])
  for r in rows:
    steps = np.asarray(r["device_local_steps"], np.float64)
    z1 = s1 * sigma1 / (2 * np.sqrt(np.minimum(steps, counts)))
    np.testing.assert_allclose(r["device_dual_noise_multiplier"], z1, rtol=1e-5)
    np.testing.assert_allclose(r["device_primal_noise_multiplier"], sigma2, rtol=1e-5)
    n_min = cfg["n_min"]
    assert min(steps) >= math.floor(0.5 * n_min) and max(steps) <= n_min


def test_paper_epsilon_and_calibration(private_run):
  _, rows, s = private_run
  cfg = s["algorithm_config"]
  # Theorem 5 inverted at the calibrated sigmas gives the target back (Sec. 6.1).
  assert s["epsilon_paper"] == pytest.approx(0.001, rel=1e-6)
  q = np.asarray(cfg["sampling_rate_paper"])
  assert q == pytest.approx(0.75 * cfg["n_min"] / np.asarray(s["device_counts"]))
  c = math.sqrt(2 * math.log(1.25 / 1e-3))
  sigma1 = c * 0.7 * np.sqrt(6 * (q ** 2 + 1)) / 0.001
  np.testing.assert_allclose(s["sigma1"], sigma1, rtol=1e-6)
  # The paper's sensitivities, no amplification: each device's releases composed.
  eps = []
  for t, k in enumerate(s["device_releases"]):
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(s["sigma1"][t]), k)
    acc.compose(dp_accounting.GaussianDpEvent(s["sigma2"][t]), k)
    eps.append(acc.get_epsilon(1e-3))
  assert s["epsilon_accountant_paper_sensitivity"] == pytest.approx(max(eps), abs=1e-9)
  # The provable sensitivities give far more: the run reports those.
  assert s["epsilon"] > 100 * max(s["epsilon_accountant_paper_sensitivity"],
                                  s["epsilon_paper"])
  assert "rebuilt" not in s["features_note"]  # dataset har: raw windows


def test_metrics_fields_and_objective(private_run):
  res, rows, s = private_run
  for f in ("primal", "dual", "duality_gap", "devices_active", "mean_local_steps",
            "dual_noise_std", "primal_noise_std", "device_local_steps", "device_active"):
    assert f in rows[0], f
  assert all(r["devices_active"] == sum(r["device_active"]) for r in rows)
  assert 0 < np.mean([r["devices_active"] for r in rows]) < 30
  assert {"test_error", "test_accuracy"} <= set(rows[2])
  assert rows[2]["test_error"] == pytest.approx(1 - rows[2]["test_accuracy"], abs=1e-6)
  assert s["metrics_disclosure"]["test_error"]["kind"] == "diagnostic"
  w = np.asarray(res.state.params["w"])
  assert w.shape[0] == 30 and np.all(np.isfinite(w))


def test_non_private_baseline_learns(tmp_path):
  """On the rebuilt HAR features (the default dataset) the non-private per-device SVMs
  beat the majority class by far within a few rounds."""
  _, rows, s = _run(tmp_path, mechanism="none", tau=0.0, drop_probability=0.0,
                    outer_rounds=3, dataset="har_features", lam=0.001, rounds=12)
  assert s["dataset"].startswith("har_features")
  assert "rebuilt" in s["features_note"]
  assert s["final_test_error"] < 0.5 * (1 - s["majority_class_accuracy"])
  assert s["epsilon"] is None and s["guarantee"] == "none (non-private)"
  assert all(r["dual_noise_std"] == 0 and r["primal_noise_std"] == 0 for r in rows)
  assert all(r["devices_active"] == 30 for r in rows)
  # Noise-free block coordinate ascent: within an outer iteration (fixed Omega) the dual
  # objective never increases (Omega changes before rounds 5 and 9, K = 4).
  pairs = [(a["dual"], b["dual"]) for a, b in zip(rows, rows[1:]) if b["round"] % 4 != 1]
  assert len(pairs) == 9
  assert all(db <= da + 1e-3 * abs(da) for da, db in pairs)
  # Extending the run would change K = rounds / H: refused, naming the option.
  with pytest.raises(FedJaxDpError, match="inner_rounds"):
    run(RunConfig.from_dict({"resume": str(tmp_path / "run"), "resume_rounds": 15}),
        progress=False)


def test_any_rounds_runs_with_a_shorter_last_outer_iteration(tmp_path):
  """--rounds 3 with H = 2 (H does not divide it): K = ceil(3 / 2) = 2, Omega updated
  before round 3 only (outer iterations of 2 and 1 rounds), and the per-device epsilon
  recomputed from metrics.jsonl alone counts exactly the 3 rounds' releases."""
  _, rows, s = _run(tmp_path, rounds=3, eval_every=3, mechanism="none", tau=0.0,
                    drop_probability=0.0, dataset="har_features", lam=0.001)
  assert [r["round"] for r in rows] == [1, 2, 3]
  assert s["inner_rounds"] == 2 and s["outer_iterations"] == 2
  # Noise-free: within the first outer iteration (rounds 1, 2; Omega changes before
  # round 3) the dual objective does not increase.
  assert rows[1]["dual"] <= rows[0]["dual"] + 1e-3 * abs(rows[0]["dual"])
  _, rows, s = _run(tmp_path, name="private", rounds=3, eval_every=3)
  assert len(rows) == 3 and s["outer_iterations"] == 2
  m = len(rows[0]["device_active"])
  eps = []
  for t in range(m):
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.ComposedDpEvent(_device_events(rows, t)))
    eps.append(acc.get_epsilon(1e-3))
  assert s["per_client_epsilon_rdp"] == pytest.approx(eps, rel=1e-6)
  assert sum(s["device_releases"]) == sum(sum(r["device_active"]) for r in rows)


def test_checkpoint_keeps_the_device_ledgers(private_run, tmp_path):
  """A resumed run continues from the checkpoint's per-device ledgers exactly."""
  from fedjax_dp.privacy.device_ledger import DeviceLedger
  from fedjax_dp.checkpoint import RunCheckpointer
  res, rows, s = private_run
  out = s["config"]["out"]
  meta = RunCheckpointer(out + "/checkpoints").restore_meta()
  ledger = DeviceLedger.from_dict(meta["per_client_ledger"])
  assert ledger.num_rounds == 6
  assert ledger.epsilons() == pytest.approx(s["per_client_epsilon_rdp"], rel=1e-12)
  assert ledger.releases.tolist() == s["device_releases"]


@pytest.mark.parametrize("opts,option", [
    ({"outer_rounds": 0}, "outer_rounds"),
    ({"xi": 1.5}, "xi"),
    ({"drop_probability": 1.0}, "drop_probability"),
    ({"s2_mode": "exact"}, "s2_mode"),
    ({"lam": 0.0}, "lam"),
    ({"epsilon": -1.0}, "epsilon"),
])
def test_bad_options_name_the_option(tmp_path, opts, option):
  with pytest.raises(FedJaxDpError) as e:
    cfg = RunConfig.from_dict({**BASE, "out": str(tmp_path / "x"), **OPTS, **opts}).validate()
    run(cfg, progress=False)
  assert option in str(e.value)


def test_target_epsilon_is_refused(tmp_path):
  with pytest.raises(FedJaxDpError, match="target-epsilon"):
    cfg = RunConfig.from_dict({**BASE, "out": str(tmp_path / "x"), "target_epsilon": 4.0,
                               **OPTS}).validate()
    run(cfg, progress=False)
