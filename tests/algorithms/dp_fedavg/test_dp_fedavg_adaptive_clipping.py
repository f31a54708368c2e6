"""DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021,
arXiv:1905.03871) end to end: epsilon recomputed from metrics.jsonl alone, the clip norm
tracking its quantile, ``--clip-norm adaptive`` on the command line, calibration to a
target epsilon, and the combinations that are refused."""

import dataclasses
import json

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.algorithms.dp_fedavg import adaptive_clipping_for, dp_fedavg
from fedjax_dp.algorithms.dp_fedavg.plugin import DpFedAvg, DpFedAvgOptions
from fedjax_dp.data import load_dataset
from fedjax_dp.models import create_model
from fedjax_dp.privacy.adaptive_clipping import AdaptiveClipping
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError

SYNTH = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
         "--batch-size", "8", "--eval-every", "3", "--no-progress", "--logger", "none"]
EXTRAS = ("adaptive_clip_norm", "unclipped_fraction_dp", "update_noise_multiplier",
          "count_noise_multiplier")


def _rows(path):
  with open(path / "metrics.jsonl") as f:
    return [json.loads(line) for line in f]


def _epsilons_from_metrics(rows):
  """(RDP, PLD or None) from the records alone: each round's update-sum z_Delta =
  noise_stddev / sensitivity and the count's z_b combine into one Gaussian z =
  (z_Delta^-2 + z_b^-2)^-1/2 (Sec. 3.1), sampled as the record's sampler says."""
  events = []
  for r in rows:
    z_delta = r["noise_stddev"] / r["sensitivity"]
    assert z_delta == pytest.approx(r["update_noise_multiplier"], rel=1e-5)
    z = (z_delta ** -2 + r["count_noise_multiplier"] ** -2) ** -0.5
    assert z == pytest.approx(r["noise_multiplier"], rel=1e-5)  # what the round reports
    g = dp_accounting.GaussianDpEvent(z)
    if r["sampler"] == "fixed_size":
      assert r["neighboring_relation"] == "replace_one"
      events.append(dp_accounting.SampledWithoutReplacementDpEvent(
          r["population_size"], r["cohort_size"], g))
    else:
      assert r["neighboring_relation"] == "add_remove"
      events.append(dp_accounting.PoissonSampledDpEvent(r["sampling_rate"], g))
  delta = rows[0]["delta"]
  swor = rows[0]["sampler"] == "fixed_size"
  rel = (dp_accounting.NeighboringRelation.REPLACE_ONE if swor
         else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  composed = dp_accounting.ComposedDpEvent(events)
  eps_rdp = dp_rdp.RdpAccountant(neighboring_relation=rel).compose(composed).get_epsilon(delta)
  eps_pld = None
  if not swor:
    eps_pld = dp_pld.PLDAccountant(value_discretization_interval=1e-4).compose(
        composed).get_epsilon(delta)
  return eps_rdp, eps_pld


@pytest.mark.slow
def test_cli_adaptive_run_epsilon_from_metrics_and_calibration(tmp_path, capsys):
  """``--clip-norm adaptive --target-epsilon 3``: the run spends exactly 3 (RDP), the
  epsilon recomputed from metrics.jsonl alone equals summary.json's (RDP and PLD), and
  the summary and the printout report the clip norm."""
  out = tmp_path / "run"
  rc = cli.main(["run", *SYNTH, "--rounds", "6", "--sampling-rate", "0.5",
                 "--clip-norm", "adaptive", "--target-quantile", "0.7",
                 "--clip-learning-rate", "0.2", "--target-epsilon", "3", "--delta", "1e-4", "--out", str(out)])
  assert rc == 0
  printed = capsys.readouterr().out
  assert "adaptive clipping: clip norm 0.1 ->" in printed
  s = json.loads((out / "summary.json").read_text())
  rows = _rows(out)
  assert len(rows) == 6 and all(k in r for r in rows for k in EXTRAS)
  eps_rdp, eps_pld = _epsilons_from_metrics(rows)
  assert s["epsilon_rdp"] == pytest.approx(3.0, rel=1e-3)  # calibrated to the target
  # (z recombined from float32 metrics: agreement to float32 rounding)
  assert eps_rdp == pytest.approx(s["epsilon_rdp"], rel=1e-6)
  assert eps_pld == pytest.approx(s["epsilon_pld"], rel=1e-6)
  # The update sum's z_Delta lies above the combined z; the count's z_b (the default
  # sigma_b: m = 10, so m / 20 = 0.5 is raised to 3 z Delta_b) at least three times it.
  z = s["noise_multiplier"]
  assert rows[0]["noise_multiplier"] == pytest.approx(z, rel=1e-6)
  assert s["count_noise_multiplier"] == pytest.approx(3 * z, rel=1e-5)
  assert s["update_noise_multiplier"] == pytest.approx(z / np.sqrt(1 - 1 / 9), rel=1e-5)
  # C_1 = 0.1, each next one the geometric update of the released fraction.
  c = [r["adaptive_clip_norm"] for r in rows]
  assert c[0] == pytest.approx(0.1)
  for a, b, r in zip(c, c[1:], rows):
    assert b == pytest.approx(a * np.exp(-0.2 * (r["unclipped_fraction_dp"] - 0.7)), rel=1e-5)
  assert s["final_clip_norm"] == pytest.approx(c[-1])
  assert s["clip_norm"] is None and "adaptive (initial C0 = 0.1, quantile gamma = 0.7)" in \
      s["clipped"]
  assert "Sec. 3.1" in s["privacy_note"]
  assert s["config"]["clip_norm"] == "adaptive"
  assert s["algorithm_config"]["target_quantile"] == 0.7
  kinds = {k: v["kind"] for k, v in s["metrics_disclosure"].items()}
  assert kinds["adaptive_clip_norm"] == kinds["unclipped_fraction_dp"] == "dp"
  assert kinds["update_noise_multiplier"] == kinds["count_noise_multiplier"] == "public"


def test_fixed_size_cohorts_epsilon_from_metrics(tmp_path):
  """Fixed-size cohorts: replace-one, the sum's sensitivity 2 C_t and the count's 1."""
  cfg = RunConfig(dataset="synthetic", num_clients=20, model="linear", rounds=4,
                  eval_every=4, delta=1e-4, out=str(tmp_path / "fs"), logger="none",
                  options=DpFedAvgOptions(clip_norm="adaptive", sampler="fixed_size",
                                          clients_per_round=8, noise_multiplier=3.0,
                                          clipped_count_stddev=2.0))
  result = run(cfg, progress=False)
  rows = _rows(tmp_path / "fs")
  for r in rows:
    assert r["sensitivity"] == pytest.approx(2 * r["adaptive_clip_norm"], rel=1e-6)
    assert r["count_noise_multiplier"] == pytest.approx(2.0)
    assert r["noise_multiplier"] == pytest.approx(1.5)  # the event's z: z / 2
  eps_rdp, _ = _epsilons_from_metrics(rows)
  assert eps_rdp == pytest.approx(result.summary["epsilon_rdp"], rel=1e-6)


def test_clip_norm_moves_toward_the_target_quantile(tmp_path):
  """Without noise, a high target quantile ends with a larger clip norm (and fewer
  updates clipped) than a low one, from the same start."""
  ends = {}
  for gamma in (0.1, 0.9):
    cfg = RunConfig(dataset="synthetic", num_clients=10, model="linear", rounds=10,
                    eval_every=10, out=None, logger="none",
                    options=DpFedAvgOptions(clip_norm="adaptive", noise_multiplier=0.0,
                                            clipped_count_stddev=0.0, target_quantile=gamma,
                                            initial_clip_norm=0.5, clip_learning_rate=0.5,
                                            sampling_rate=1.0))
    rows = run(cfg, progress=False).records
    ends[gamma] = (rows[-1]["adaptive_clip_norm"],
                   np.mean([r["clip_fraction"] for r in rows[-4:]]))
    # Without noise the released fraction is the true unclipped fraction.
    for r in rows:
      assert r["unclipped_fraction_dp"] == pytest.approx(1 - r["clip_fraction"], abs=1e-5)
  (c_lo, clipped_lo), (c_hi, clipped_hi) = ends[0.1], ends[0.9]
  assert c_hi > 1.5 * c_lo
  assert clipped_hi <= 0.3 and clipped_lo >= 0.6  # targets: 0.1 and 0.9 clipped


# --- what is refused ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
  data = load_dataset("synthetic", num_clients=10, seed=0)
  return create_model("linear", data.x.shape[2:], data.num_classes), data


def _adaptive(**kw):
  return AdaptiveClipping(**{"count_stddev": 5.0, "expected_cohort_size": 5.0, **kw})


@pytest.mark.parametrize("kw,option", [
    (dict(clip_norm=1.0), "clip_norm"),
    (dict(noise_placement="local"), "noise_placement"),
    (dict(noise_multiplier=np.ones(10, np.float32)), "noise_multiplier"),
    (dict(noise_multiplier=20.0), "noise_multiplier"),  # z >= z_b = 5 / 0.5 = 10
])
def test_builder_refuses(tiny, kw, option):
  model, data = tiny
  with pytest.raises(FedJaxDpError) as e:
    dp_fedavg(model, data, sampling_rate=0.5, adaptive_clipping=_adaptive(),
              **{"noise_multiplier": 1.0, **kw})
  assert e.value.option == option


def test_builder_state_and_calibrated_z_check(tiny):
  model, data = tiny
  adaptive = adaptive_clipping_for(data, 2.0, sampling_rate=0.5, initial_clip_norm=0.3)
  assert adaptive.expected_cohort_size == 5.0
  assert adaptive.count_stddev == pytest.approx(3.0)  # max(5 / 20, 3 * 2 * 0.5)
  alg = dp_fedavg(model, data, sampling_rate=0.5, noise_multiplier=2.0,
                  adaptive_clipping=adaptive)
  state = alg.init(__import__("jax").random.key(0))
  assert float(state.mechanism["clip"].clip_norm) == pytest.approx(0.3)
  assert alg.privacy.clip_norm is None and alg.config["count_noise_multiplier"] == 6.0
  # Same events as fixed-clip DP-FedAvg.
  fixed = dp_fedavg(model, data, sampling_rate=0.5, noise_multiplier=2.0, clip_norm=0.3)
  assert alg.privacy.round_event(2.0) == fixed.privacy.round_event(2.0)
  plugin = DpFedAvg()
  assert plugin.with_noise_multiplier(alg, 5.9).hparams.noise_multiplier == 5.9
  with pytest.raises(FedJaxDpError, match="clipped_count_stddev") as e:
    plugin.with_noise_multiplier(alg, 6.0)  # a calibrated z that cannot be split
  assert e.value.option == "noise_multiplier"


@pytest.mark.parametrize("options,option", [
    (dict(target_quantile=0.3), "target_quantile"),          # without --clip-norm adaptive
    (dict(clipped_count_stddev=1.0), "clipped_count_stddev"),
    (dict(clip_norm="adaptive", target_quantile=1.2), "target_quantile"),
    (dict(clip_norm="adaptive", clip_learning_rate=0.0), "clip_learning_rate"),
    (dict(clip_norm="adaptive", noise_placement="local"), "noise_placement"),
    (dict(clip_norm="adaptive", clip_update_rule="cubic"), "clip_update_rule"),
    (dict(clip_norm="fixed"), "clip_norm"),
    (dict(clip_norm=-1.0), "clip_norm"),
])
def test_options_refused_with_the_option_named(options, option):
  cfg = RunConfig(dataset="synthetic", options=DpFedAvgOptions(**options))
  with pytest.raises(FedJaxDpError) as e:
    cfg.validate()
  assert e.value.option == option


def test_config_files_and_sweep_axes_take_the_number_or_the_word():
  from fedjax_dp.runs import sweep
  cfg = RunConfig.from_dict({"clip_norm": "adaptive", "target_quantile": 0.7})
  assert cfg.options.clip_norm == "adaptive" and cfg.validate()
  assert RunConfig.from_dict({"clip_norm": 1}).options.clip_norm == 1.0
  with pytest.raises(FedJaxDpError, match="must be float or 'adaptive'"):
    RunConfig.from_dict({"clip_norm": "0.5"})
  # A fixed clip norm stays a sweep axis; the word is not a number.
  assert sweep.check_axes("dp_fedavg", {"clip_norm": [0.1, 1]}) == {"clip_norm": [0.1, 1.0]}
  base, axes, *_ = sweep.parse_sweep_args(["--clip-norm", "0.1,0.5", "--rounds", "2"],
                                          cli.parse_run_args)
  assert axes == {"clip_norm": [0.1, 0.5]} and base.options.clip_norm == 0.1
  with pytest.raises(FedJaxDpError, match="not a number"):
    sweep.parse_sweep_args(["--clip-norm", "adaptive,0.5"], cli.parse_run_args)
  base, axes, *_ = sweep.parse_sweep_args(["--clip-norm", "adaptive"], cli.parse_run_args)
  assert axes == {} and base.options.clip_norm == "adaptive"
  assert dataclasses.replace(base.options).clip_norm == "adaptive"


@pytest.mark.slow
def test_a_resumed_run_continues_the_clip_norm(tmp_path):
  """The clip norm lives in the checkpointed server state: 4 rounds then --resume to 6
  give exactly the straight 6-round run's clip norms, noisy fractions and models."""
  args = [*SYNTH, "--sampling-rate", "0.5", "--clip-norm", "adaptive",
          "--noise-multiplier", "1.0", "--no-progress"]
  short, straight = tmp_path / "short", tmp_path / "straight"
  assert cli.main(["run", *args, "--rounds", "4", "--out", str(short)]) == 0
  assert cli.main(["run", "--resume", str(short), "--rounds", "6", "--no-progress"]) == 0
  assert cli.main(["run", *args, "--rounds", "6", "--out", str(straight)]) == 0
  a, b = _rows(short), _rows(straight)
  assert len(a) == len(b) == 6
  for field in ("adaptive_clip_norm", "unclipped_fraction_dp", "train_loss", "epsilon"):
    assert [r[field] for r in a] == [r[field] for r in b], field
  assert len({r["adaptive_clip_norm"] for r in a}) == 6  # the clip norm moved every round
