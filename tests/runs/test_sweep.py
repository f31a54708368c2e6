"""Sweeps (fedjax_dp.runs.sweep): configurations trained as one vmapped program give
each configuration what its own run gives, with its own ledger and files."""

import dataclasses
import json
import os
import shutil

import dp_accounting
import jax
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.runs import RunConfig, load_config_file, run
from fedjax_dp.runs import sweep
from fedjax_dp.validation import FedJaxDpError

#: 4 rounds of DP-FedAvg on 20 synthetic clients with a linear model, evaluated at
#: rounds 2 and 4.
BASE = dict(algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
            batch_size=8, rounds=4, eval_every=2, sampling_rate=0.5, clip_norm=1.0,
            logger="none")
AXES = {"noise_multiplier": [1.0, 2.0]}
SEEDS = [0, 1]
#: Largest difference allowed between a sweep member and its own run, relative to the
#: largest parameter (or metric) magnitude: the vmapped program sums in another order
#: (measured: at most 1.6e-7 for the parameters, 1.5e-7 for the per-round metrics).
RTOL = 1e-6


def _base(**kw):
  return RunConfig.from_dict({**BASE, **kw})


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("sweep") / "s")
  return sweep.run_sweep(_base(out=out), AXES, SEEDS, progress=False)


@pytest.fixture(scope="module")
def separate(swept):
  """Each member run alone from its own summary.json (what `fedjax-dp run --config`
  does), without output files."""
  runs = []
  for m in swept.members:
    table = load_config_file(os.path.join(swept.out, m.name, "summary.json"))
    runs.append(run(RunConfig.from_dict({**table, "out": None}), progress=False))
  return runs


def _flat(params):
  return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(params)])


def test_members_equal_their_own_runs(swept, separate):
  assert [m.name for m in swept.members] == [
      "noise_multiplier=1.0,seed=0", "noise_multiplier=1.0,seed=1",
      "noise_multiplier=2.0,seed=0", "noise_multiplier=2.0,seed=1"]
  for m, r in zip(swept.members, separate):
    assert m.config.seed == m.axes["seed"] and m.config.data_seed == SEEDS[0]
    a, b = _flat(r.state.params), _flat(m.state.params)
    rel = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
    assert rel <= RTOL, (m.name, rel)
    assert len(m.records) == len(r.records) == BASE["rounds"]
    for x, y in zip(r.records, m.records):
      assert set(x) == set(y)
      # Sampling and accounting exactly; the float metrics up to summation order.
      for k in ("round", "num_clients", "num_sampled", "num_truncated", "sampling_rate",
                "noise_multiplier", "dp_steps", "epsilon"):
        assert x[k] == y[k], (m.name, k)
      for k in ("train_loss", "mean_update_norm", "aggregate_norm", "test_accuracy",
                "test_loss"):
        if k in x:
          assert y[k] == pytest.approx(x[k], rel=RTOL, abs=1e-7), (m.name, k)
    assert set(m.summary) - set(r.summary) == {"sweep"}
    assert set(r.summary) - set(m.summary) == set()
    for k in ("epsilon", "epsilon_rdp", "epsilon_pld", "noise_multiplier", "rounds"):
      assert m.summary[k] == r.summary[k], k
    assert m.summary["final_test_accuracy"] == pytest.approx(
        r.summary["final_test_accuracy"], abs=1e-6)
  # The other seed is a different run, the other noise multiplier too.
  assert not np.allclose(_flat(swept.members[0].state.params),
                         _flat(swept.members[1].state.params))


def _epsilon_from_metrics(path, delta):
  """Recomputes epsilon from a member's metrics.jsonl alone (fresh RDP accountant)."""
  with open(path) as f:
    records = [json.loads(line) for line in f]
  acc = dp_accounting.rdp.RdpAccountant()
  for r in records:
    assert r["sampler"] == "poisson" and r["delta"] == delta
    event = dp_accounting.PoissonSampledDpEvent(
        r["sampling_rate"], dp_accounting.GaussianDpEvent(r["noise_multiplier"]))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, r["dp_steps"]))
  return acc.get_epsilon(delta), records


def test_each_configuration_has_its_own_ledger(swept):
  eps = {m.name: m.summary["epsilon_rdp"] for m in swept.members}
  # Equal over seeds, smaller with more noise.
  assert eps["noise_multiplier=1.0,seed=0"] == eps["noise_multiplier=1.0,seed=1"]
  assert eps["noise_multiplier=2.0,seed=0"] < eps["noise_multiplier=1.0,seed=0"] / 2
  for m in (swept.members[0], swept.members[3]):
    path = os.path.join(swept.out, m.name, "metrics.jsonl")
    recomputed, records = _epsilon_from_metrics(path, 1e-3)
    assert recomputed == pytest.approx(m.summary["epsilon_rdp"], rel=1e-9)
    assert [r["noise_multiplier"] for r in records] == [m.axes["noise_multiplier"]] * 4
    assert records[-1]["epsilon"] == pytest.approx(m.summary["epsilon_rdp"], rel=1e-12)


def test_files_and_comparison(swept):
  for m in swept.members:
    folder = os.path.join(swept.out, m.name)
    with open(os.path.join(folder, "curves.png"), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(folder, "summary.json")) as f:
      s = json.load(f)
    assert s["sweep"]["index"] == m.index and s["sweep"]["axes"] == m.axes
    assert s["config"]["data_seed"] == 0 and s["config"]["seed"] == m.axes["seed"]
  doc = json.load(open(os.path.join(swept.out, "sweep.json")))
  assert doc["configurations"] == 4 and doc["seeds"] == SEEDS
  rows = {r["noise_multiplier"]: r for r in doc["rows"]}
  accs = [m.summary["final_test_accuracy"] for m in swept.members[:2]]
  assert rows[1.0]["accuracy_mean"] == pytest.approx(np.mean(accs))
  assert rows[1.0]["accuracy_std"] == pytest.approx(np.std(accs, ddof=1))  # sample std
  assert rows[1.0]["epsilon"] == swept.members[0].summary["epsilon"]
  assert rows[2.0]["epsilon"] < rows[1.0]["epsilon"]
  assert rows[1.0]["curve"]["round"] == [2, 4]
  md = open(os.path.join(swept.out, "sweep.md")).read()
  assert "| 1.0 | 2 |" in md and "ddof" in md
  with open(os.path.join(swept.out, "sweep.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("axis,values", [("local_steps", [1, 2]),
                                         ("batch_size", [4, 8])])
def test_an_option_that_changes_the_program_is_refused(axis, values):
  with pytest.raises(FedJaxDpError, match="changes the compiled program of dp_fedavg") as e:
    sweep.run_sweep(_base(out=None), {axis: values}, [0], progress=False)
  assert e.value.option == axis and f"--{axis.replace('_', '-')}" in str(e.value)


def test_configurations_out_of_lockstep_are_refused():
  with pytest.raises(FedJaxDpError, match="lockstep") as e:
    sweep.run_sweep(_base(out=None), {"rounds": [2, 4]}, [0], progress=False)
  assert e.value.option == "rounds"


@pytest.mark.parametrize("text,needle", [
    ("3-1", "ends below its start"), ("a", "non-negative integers"), ("", "item ''"),
    ("0,0", "distinct"), ("0-2,2", "distinct"), ("-1", "non-negative integers"),
    ("1.5", "non-negative integers"), ("4294967296", "<= 4294967295")])
def test_bad_seeds_are_refused(text, needle):
  with pytest.raises(FedJaxDpError, match=needle) as e:
    sweep.parse_seeds(text)
  assert e.value.option == "seeds"


def test_seed_syntax():
  assert sweep.parse_seeds("0-3") == [0, 1, 2, 3]
  assert sweep.parse_seeds("0,3,5") == [0, 3, 5]
  assert sweep.parse_seeds("7, 0-1") == [7, 0, 1]


@pytest.mark.parametrize("axes,option,needle", [
    ({"sampler": ["poisson", "fixed_size"]}, "sampler", "not a numeric option"),
    ({"hidden": ["32", "64"]}, "hidden", "not a numeric option"),
    ({"num_clients": [10, 20]}, "num_clients", "cannot be a sweep axis"),
    ({"seed": [1, 2]}, "seed", "--seeds"),
    ({"noise_multiplier": []}, "noise_multiplier", "non-empty list"),
    ({"noise_multiplier": [1.0, 1]}, "noise_multiplier", "distinct"),
    ({"local_steps": [1, 1.5]}, "local_steps", "an integer"),
    ({"clip_norm": ["1"]}, "clip_norm", "a number"),
    ({"no_such_option": [1]}, "no_such_option", "unknown option"),
])
def test_bad_axes_are_refused(axes, option, needle):
  with pytest.raises(FedJaxDpError, match=needle) as e:
    sweep.check_axes("dp_fedavg", axes)
  assert e.value.option == option


def test_axis_names_are_normalised():
  assert sweep.check_axes("dp_fedavg", {"client-lr": [0.1, 1], "clip_norm": [1]}) == {
      "client_learning_rate": [0.1, 1.0], "clip_norm": [1.0]}


def test_a_configuration_that_does_not_validate_names_its_option():
  with pytest.raises(FedJaxDpError, match="clip_norm") as e:
    sweep.run_sweep(_base(out=None), {"clip_norm": [1.0, -1.0]}, [0], progress=False)
  assert e.value.option == "clip_norm"


def test_data_seed_is_validated():
  with pytest.raises(FedJaxDpError, match="data_seed") as e:
    _base(data_seed=-1).validate()
  assert e.value.option == "data_seed"


def test_command_line_axes():
  base, axes, seeds, chunk, _, where = sweep.parse_sweep_args(
      ["--dataset", "synthetic", "--model", "mlp", "--hidden", "16,16", "--seeds", "0-2",
       "--dp-metrics-only", "--noise-multiplier=1,2.5", "--client-lr", "0.1,0.2",
       "--sweep-chunk", "2"], cli.parse_run_args)
  assert axes == {"noise_multiplier": [1.0, 2.5], "client_learning_rate": [0.1, 0.2]}
  assert seeds == [0, 1, 2] and chunk == 2 and base.hidden == "16,16"  # not an axis
  assert base.options.noise_multiplier == 1.0 and base.out == "runs/sweep"
  assert base.dp_metrics_only
  assert where["noise_multiplier"] == "option --noise-multiplier"
  for argv, needle in ([["--sampler", "poisson,fixed_size"], "not a numeric option"],
                       [["--seed", "1,2"], "--seeds 1,2"],
                       [["--clip-norm", "1,x"], "'x' is not a number"],
                       [["--sweep-chunk", "0"], ">= 1"]):
    with pytest.raises(FedJaxDpError, match=needle):
      sweep.parse_sweep_args(argv, cli.parse_run_args)


def _read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_command_line_end_to_end_in_chunks(swept, tmp_path, capsys):
  """The fixture's sweep again through the command line, two configurations per
  program: the same files and, up to rounding, the same results."""
  out = tmp_path / "sw"
  rc = cli.main(["sweep", "--dataset", "synthetic", "--num-clients", "20", "--model",
                 "linear", "--batch-size", "8", "--rounds", "4", "--eval-every", "2",
                 "--sampling-rate", "0.5", "--clip-norm", "1", "--logger", "none",
                 "--no-progress", "--seeds", "0-1", "--noise-multiplier", "1,2",
                 "--sweep-chunk", "2", "--out", str(out)])
  assert rc == 0
  printed = capsys.readouterr().out
  assert "| noise_multiplier | seeds |" in printed and "| 2.0 | 2 |" in printed
  assert "2 vmapped program(s)" in printed
  for f in ("sweep.json", "sweep.md", "sweep.png"):
    assert (out / f).is_file()
  for m in swept.members:
    for f in ("metrics.jsonl", "summary.json", "curves.png"):
      assert (out / m.name / f).is_file(), (m.name, f)
    mine = _read_jsonl(out / m.name / "metrics.jsonl")
    theirs = _read_jsonl(os.path.join(swept.out, m.name, "metrics.jsonl"))
    assert [set(r) for r in mine] == [set(r) for r in theirs]
    for x, y in zip(theirs, mine):
      for k in ("epsilon", "num_sampled", "noise_multiplier"):
        assert x[k] == y[k], k
      assert y["train_loss"] == pytest.approx(x["train_loss"], rel=RTOL)
    s = json.loads((out / m.name / "summary.json").read_text())
    assert s["config"]["seed"] == m.axes["seed"]
    assert s["final_test_accuracy"] == pytest.approx(m.summary["final_test_accuracy"],
                                                     abs=1e-6)


def test_a_folder_holding_a_sweep_is_not_overwritten(swept, tmp_path):
  assert sweep.fresh_sweep_dir(swept.out, overwrite=False) == swept.out + "-2"
  assert sweep.fresh_sweep_dir(str(tmp_path / "new"), overwrite=False) == str(
      tmp_path / "new")
  copy = tmp_path / "copy"
  shutil.copytree(swept.out, copy)
  assert sweep.fresh_sweep_dir(str(copy), overwrite=True) == str(copy)
  assert not (copy / "sweep.json").exists()
  assert not (copy / swept.members[0].name / "metrics.jsonl").exists()


def test_command_line_refusal_is_one_line(tmp_path, capsys):
  rc = cli.main(["sweep", "--dataset", "synthetic", "--num-clients", "20", "--model",
                 "linear", "--local-steps", "1,2", "--no-progress", "--out",
                 str(tmp_path / "unused")])
  err = capsys.readouterr().err
  assert rc == 2 and "Traceback" not in err
  assert "--local-steps changes the compiled program" in err and "(option --local-steps)" in err
  assert not (tmp_path / "unused").exists()


def test_resume_is_refused(tmp_path):
  done = run(_base(out=str(tmp_path / "r"), rounds=1), progress=False)
  cfg = dataclasses.replace(_base(out=None), resume=done.summary["config"]["out"])
  with pytest.raises(FedJaxDpError, match="cannot be resumed"):
    sweep.run_sweep(cfg, None, [0], progress=False)
