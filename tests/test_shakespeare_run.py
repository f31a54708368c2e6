"""`fedjax-dp run --dataset shakespeare`: the dataset's defaults, the model checks and a
short run end to end with its epsilon recomputed from metrics.jsonl."""

import json
import math
import os

import pytest

from fedjax_dp import cli
from fedjax_dp.data.sources import shakespeare
from fedjax_dp.runs.dataset_defaults import DATASET_RUN_DEFAULTS, dataset_defaults
from fedjax_dp.validation import FedJaxDpError

needs_data = pytest.mark.skipif(not shakespeare.is_prepared(),
                                reason="run `fedjax-dp datasets prepare shakespeare` first")
PAIRS = (("clients_per_round", "sampling_rate"), ("local_epochs", "local_steps"))
NAMES = ("clients_per_round", "sampling_rate", "local_steps", "local_epochs", "hidden",
         "batch_size", "rounds")


def test_dataset_defaults_fill_only_what_is_not_given():
  got = dataset_defaults("shakespeare", {}, [], NAMES, PAIRS)
  assert got["clients_per_round"] == 100 and got["local_steps"] == 2
  assert "server_optimizer" not in got  # not an option of this (made-up) algorithm
  got = dataset_defaults("shakespeare", {"sampling-rate": 0.2}, ["local_epochs"], NAMES,
                         PAIRS)
  assert "clients_per_round" not in got and "local_steps" not in got
  assert got["hidden"] == "64"
  assert dataset_defaults("har", {}, [], NAMES, PAIRS) == {}
  assert dataset_defaults(None, {}, [], NAMES, PAIRS) == {}


def test_command_line_gets_the_dataset_defaults_and_says_where_they_came_from():
  base, _, where, _ = cli.parse_run_args(["--dataset", "shakespeare"])
  want = DATASET_RUN_DEFAULTS["shakespeare"]
  assert base.options.clients_per_round == want["clients_per_round"]
  assert base.options.server_optimizer == "fedavgm"
  assert (base.rounds, base.hidden) == (want["rounds"], want["hidden"])
  assert where["clients_per_round"] == "the shakespeare dataset's default"
  typed, _, where, _ = cli.parse_run_args(
      ["--dataset", "shakespeare", "--sampling-rate", "0.05", "--rounds", "7"])
  assert typed.options.clients_per_round is None and typed.options.sampling_rate == 0.05
  assert typed.rounds == 7 and where["rounds"] == "option --rounds"
  har, _, _, _ = cli.parse_run_args(["--dataset", "har"])
  assert har.options.clients_per_round is None and har.hidden is None


def test_dataset_defaults_apply_to_a_config_file_without_breaking_its_pairs(tmp_path):
  path = tmp_path / "c.json"
  path.write_text(json.dumps({"dataset": "shakespeare", "sampling_rate": 0.3}))
  base, _, _, _ = cli.parse_run_args(["--config", str(path)])
  assert base.options.sampling_rate == 0.3 and base.options.clients_per_round is None
  assert base.options.local_steps == 2


@needs_data
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_real_valued_model_on_token_windows_is_refused(model, capsys):
  code = cli.main(["run", "--dataset", "shakespeare", "--model", model, "--rounds", "1",
                   "--out", "none"])
  assert code == 2
  assert "token windows" in capsys.readouterr().err


def test_a_character_model_on_real_valued_features_is_refused():
  from fedjax_dp.runs.setup import _check_model_fits_tokens
  with pytest.raises(FedJaxDpError, match="real-valued features"):
    _check_model_fits_tokens("char_lstm", "har")
  _check_model_fits_tokens("char_transformer", "shakespeare")


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("model", ["char_lstm", "char_transformer"])
def test_short_dp_run_on_shakespeare_and_its_epsilon_from_metrics(model, tmp_path):
  """A 2-round user-level DP-FedAvg run of each character model; its epsilon recomputed
  from metrics.jsonl alone (noise multiplier and sampling rate of each round) with
  dp_accounting's RDP accountant."""
  import dp_accounting
  out = tmp_path / model
  code = cli.main(["run", "--dataset", "shakespeare", "--model", model, "--hidden", "8",
                   "--rounds", "2", "--clients-per-round", "3", "--local-steps", "1",
                   "--eval-every", "2", "--out", str(out), "--no-progress"])
  assert code == 0
  summary = json.loads((out / "summary.json").read_text())
  assert summary["dataset"] == "shakespeare" and summary["model"] == model
  assert summary["num_clients"] == 987
  assert 0.0 <= summary["final_test_accuracy"] <= 1.0
  rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
  acc = dp_accounting.rdp.RdpAccountant()
  for r in rows:
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        r["sampling_rate"], dp_accounting.GaussianDpEvent(r["noise_multiplier"])))
  eps = acc.get_epsilon(summary["delta"])
  assert math.isclose(eps, rows[-1]["epsilon"], rel_tol=1e-6)
  assert os.path.exists(out / "curves.png")
