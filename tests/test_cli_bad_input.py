"""Property-based bad-input tests over the command line and config files (issue 4,
part 3): every invalid value gives exit status 2 and one line that names the option and
what is allowed, before anything is compiled or written; never a traceback."""

import json
import math

import jax
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fedjax_dp import cli
from fedjax_dp.algorithms.interface import choices as option_choices
from fedjax_dp.algorithms.options import FederatedOptions
from fedjax_dp.runs import RunConfig

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
BASE = ["run", "--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
        "--rounds", "2", "--no-progress"]

NON_FINITE = ["nan", "inf", "-inf"]
NOT_POSITIVE = st.sampled_from(["0", "-1", "-1e-9", "-1e30", "0.0"] + NON_FINITE)
NEGATIVE = st.sampled_from(["-1", "-1e-9", "-1e30"] + NON_FINITE)
NOT_PROBABILITY = st.sampled_from(["0", "-0.1", "1.000001", "2", "1e9"] + NON_FINITE)
NOT_DELTA = st.sampled_from(["0", "1", "-1e-5", "1.5"] + NON_FINITE)
NOT_COUNT = st.integers(-(10**12), 0).map(str)

_COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: _COMPILES.append(event)
    if "backend_compile" in event else None)


def _refused(capsys, tmp_path, args, needle, base=BASE):
  """``fedjax-dp run`` with ``args`` exits 2 with one line naming ``needle``; nothing is
  compiled and the output folder is never created."""
  out = tmp_path / "out"
  before = len(_COMPILES)
  rc = cli.main(base + ["--out", str(out)] + args)
  err = capsys.readouterr().err
  assert rc == 2, err
  assert err.startswith("fedjax-dp: error:") and err.count("\n") == 1, err
  assert needle in err, f"{needle!r} not in {err!r}"
  assert "Traceback" not in err
  assert len(_COMPILES) == before, f"compiled before refusing {args}: {_COMPILES[before:]}"
  assert not out.exists()
  return err


def _argparse_refuses(capsys, args, needle):
  """The command-line parser's own refusal (type or choice): exit status 2 (returned,
  or SystemExit(2)) and a message naming ``needle``."""
  try:
    rc = cli.main(BASE + args)
  except SystemExit as e:
    rc = e.code
  err = capsys.readouterr().err
  assert rc == 2, err
  assert needle in err and "Traceback" not in err, err


@SETTINGS
@given(flag=st.sampled_from(["--clip-norm", "--client-lr", "--server-lr",
                             "--target-epsilon"]), value=NOT_POSITIVE)
def test_not_positive(capsys, tmp_path, flag, value):
  err = _refused(capsys, tmp_path, [f"{flag}={value}"], "must be")
  assert f"(option {flag})" in err


@SETTINGS
@given(value=NEGATIVE)
def test_noise_multiplier(capsys, tmp_path, value):
  _refused(capsys, tmp_path, [f"--noise-multiplier={value}"], "noise_multiplier")


@SETTINGS
@given(value=NOT_DELTA)
def test_delta(capsys, tmp_path, value):
  _refused(capsys, tmp_path, [f"--delta={value}"], "delta")


@SETTINGS
@given(flag=st.sampled_from(["--sampling-rate", "--record-sampling-rate"]),
       value=NOT_PROBABILITY)
def test_rates_outside_unit_interval(capsys, tmp_path, flag, value):
  # --record-sampling-rate is an option of record-level DP only.
  alg = (["--algorithm", "dp_fedavg_record_level"] if flag == "--record-sampling-rate"
         else [])
  err = _refused(capsys, tmp_path, alg + [f"{flag}={value}"], flag[2:].replace("-", "_"))
  assert "(0, 1]" in err


@SETTINGS
@given(flag=st.sampled_from(["--rounds", "--batch-size", "--local-steps", "--local-epochs",
                             "--eval-every", "--num-clients", "--clients-per-round",
                             "--chunk-size", "--devices"]), value=NOT_COUNT)
def test_counts(capsys, tmp_path, flag, value):
  field = flag[2:].replace("-", "_")
  args = [f"{flag}={value}"]
  if flag == "--num-clients":  # the base sets it; give the bad value last
    args = ["--num-clients", value]
  _refused(capsys, tmp_path, args, field)


@SETTINGS
@given(seed=st.one_of(st.integers(-(10**9), -1), st.integers(2**32, 10**30)))
def test_seed_outside_uint32(capsys, tmp_path, seed):
  _refused(capsys, tmp_path, [f"--seed={seed}"], "seed")


@pytest.mark.parametrize("args,needle", [
    (["--data-dir", "/no/such/dir"], "data_dir must be an existing directory"),
    (["--resume", "/no/such/run"], "resume must be the output folder"),
    (["--sampling-rate", "1e-300"], "smallest normal float32"),
    (["--partition", "natural", "--dataset", "fashion_mnist"], "no natural clients"),
    (["--partition", "dirichlet", "--num-clients", "100000"], "num_clients must be in"),
    (["--dataset", "mnist", "--model", "har_cnn"], "needs [time, channels] features"),
    (["--target-epsilon", "1e-9", "--noise-multiplier", "0.5"],
     "below the epsilon of a single round"),
    # padpfl (paper 000): impact factors, R, mu, mechanism, data
    (["--algorithm", "padpfl", "--epsilon", "5", "--impact-factors", "0-x-2"],
     "(option --impact-factors)"),
    (["--algorithm", "padpfl", "--epsilon", "5", "--impact-factors", "0-1-2>2-1-0>1-1-1"],
     "one switch"),
    (["--algorithm", "padpfl", "--epsilon", "5", "--impact-factors", "0-0-0"],
     "impact_factors"),
    (["--algorithm", "padpfl", "--epsilon", "5", "--exposures", "3"],
     "exposures (R) must be <= rounds"),
    (["--algorithm", "padpfl", "--epsilon", "5", "--prox-mu", "-0.1"], "prox_mu"),
    (["--algorithm", "padpfl", "--epsilon", "5", "--mechanism", "laplace"],
     "argument --mechanism: invalid choice 'laplace'; expected one of gaussian, none"),
    (["--algorithm", "padpfl", "--target-epsilon", "5"], "does not take"),
    (["--algorithm", "padpfl", "--epsilon", "5"], "padpfl scenarios need an image dataset"),
    # issue 13: sensitivity modes and per-client noise
    (["--algorithm", "amplitude_varying", "--sensitivity-mode", "clipped_gradients"],
     "go together"),
    (["--algorithm", "amplitude_varying", "--grad-clip-norm", "1.0"], "go together"),
    (["--algorithm", "amplitude_varying", "--grad-clip-norm", "-1", "--sensitivity-mode",
      "clipped_gradients"], "grad_clip_norm must be > 0"),
    (["--client-noise-multipliers", "/no/such/z.txt"], "needs noise_placement='local'"),
    (["--noise-placement", "local", "--client-noise-multipliers", "/no/such/z.txt"],
     "not found"),
    (["--noise-placement", "local", "--client-noise-multipliers", "Z_FILE"],
     "must hold 20 finite values"),
])
def test_other_refusals(capsys, tmp_path, args, needle):
  z_file = tmp_path / "z.txt"
  z_file.write_text("1.0 2.0 3.0")  # 3 values for 20 clients
  args = [str(z_file) if a == "Z_FILE" else a for a in args]
  _refused(capsys, tmp_path, args, needle)
  assert not __import__("os").path.exists("/no/such/run")


@SETTINGS
@given(extra=st.integers(1, 10**6))
def test_cohort_larger_than_population(capsys, tmp_path, extra):
  _refused(capsys, tmp_path, ["--clients-per-round", str(20 + extra)], "clients_per_round")


NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=12)


@SETTINGS
@given(flag=st.sampled_from(["--dataset", "--model", "--partition"]), name=NAME)
def test_unknown_names(capsys, tmp_path, flag, name):
  known = {"--dataset": ("har", "fashion_mnist", "mnist", "emnist", "cifar10", "adult",
                         "synthetic"),
           "--model": ("mlp", "cnn", "lenet5", "cnn_fc50", "har_cnn", "linear"),
           "--partition": ("natural", "iid", "dirichlet", "shards", "quantity_skew")}[flag]
  if name in known:
    return
  err = _refused(capsys, tmp_path, [flag, name], repr(name))
  assert all(k in err for k in known)  # the message lists what is allowed


@SETTINGS
@given(flag=st.sampled_from(["--algorithm", "--sampler", "--client-optimizer",
                             "--server-optimizer", "--accountant"]), name=NAME)
def test_unknown_choices(capsys, flag, name):
  field = flag[2:].replace("-", "_")
  owner = RunConfig if field in ("algorithm", "accountant") else FederatedOptions
  if name in option_choices(owner, field):
    return
  _argparse_refuses(capsys, [flag, name], "invalid choice")


@SETTINGS
@given(flag=st.sampled_from(["--rounds", "--clip-norm", "--delta", "--seed"]),
       text=st.sampled_from(["abc", "1,5", "", "0x", "1e", "--"]))
def test_values_of_the_wrong_type(capsys, flag, text):
  """The command-line parser refuses them (``argument --flag``); any that reached
  RunConfig.validate would be refused there with the option named."""
  try:
    rc = cli.main(BASE + [f"{flag}={text}"])
  except SystemExit as e:
    rc = e.code
  err = capsys.readouterr().err
  assert rc == 2 and "Traceback" not in err
  assert f"argument {flag}" in err or f"(option {flag})" in err, err


# --- config files -----------------------------------------------------------------

FIELDS = RunConfig.option_names("dp_fedavg")


@SETTINGS
@given(key=NAME.filter(lambda k: k not in FIELDS and k not in ("client_lr", "server_lr")),
       ext=st.sampled_from([".json", ".toml"]))
def test_config_file_unknown_key(capsys, tmp_path, key, ext):
  path = tmp_path / f"c{ext}"
  path.write_text(json.dumps({key: 1}) if ext == ".json" else f"{key} = 1\n")
  err = _refused(capsys, tmp_path, ["--config", str(path)], f"unknown key {key!r}")
  assert "Allowed keys:" in err and "clip_norm" in err


WRONG_TYPES = [("rounds", "10"), ("rounds", [1]), ("rounds", 2.5), ("rounds", True),
               ("rounds", None), ("clip_norm", "0.5"), ("clip_norm", True),
               ("clip_norm", None), ("delta", {"a": 1}), ("dataset", 10),
               ("sampler", None), ("verify_checksums", "no"), ("verify_checksums", 0),
               ("seed", 1.5), ("seed", "1"), ("noise_multiplier", "2"), ("partition", 3)]


@SETTINGS
@given(pair=st.sampled_from(WRONG_TYPES))
def test_config_file_wrong_type(capsys, tmp_path, pair):
  key, value = pair
  path = tmp_path / "c.json"
  path.write_text(json.dumps({key: value}))
  _refused(capsys, tmp_path, ["--config", str(path)], f"option {key!r} must be")


INVALID_VALUES = [("clip_norm", -1.0), ("clip_norm", 0.0), ("noise_multiplier", -1e-9),
                  ("delta", 0.0), ("delta", 1e9), ("sampling_rate", 0.0),
                  ("sampling_rate", 1.5), ("client_learning_rate", -1.0),
                  ("server_learning_rate", 0.0), ("target_epsilon", -3.0),
                  ("rounds", 0), ("seed", -1), ("model", "resnet"), ("sampler", "uniform"),
                  ("client_optimizer", "lbfgs"), ("server_optimizer", "sgd")]


@SETTINGS
@given(pair=st.sampled_from(INVALID_VALUES))
def test_config_file_values_are_checked_like_flags(capsys, tmp_path, pair):
  key, value = pair
  path = tmp_path / "c.toml"
  table = {"dataset": "synthetic", "num_clients": 20, "model": "linear", key: value}
  path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()))
  _refused(capsys, tmp_path, ["--config", str(path)], key, base=["run", "--no-progress"])


@pytest.mark.parametrize("name,text,needle", [
    ("c.yaml", "rounds: 3", "must end in .json or .toml"),
    ("c.json", "{\"rounds\": 3,", "not valid JSON"),
    ("c.json", "[1, 2]", "must hold a table of options, got list"),
    ("c.toml", "rounds = = 3", "not valid TOML"),
    ("c.json", "{\"rounds\": 3, \"rounds\": 4}", "'rounds' is given twice"),
    ("c.json", "{\"clients_per_round\": 3, \"clients-per-round\": 4}", "given twice"),
    ("c.toml", "rounds = 3\nrounds = 4", "not valid TOML"),
    ("c.toml", "rounds = 3\nRounds = 4", "unknown key 'Rounds'"),
    ("c.json", "{\"rounds\": 3}".encode("utf-16").decode("latin1"), "not UTF-8"),
    ("missing.json", None, "cannot be read"),
])
def test_config_file_format_errors(capsys, tmp_path, name, text, needle):
  path = tmp_path / name
  if text is not None:
    path.write_bytes(text.encode("latin1"))
  _refused(capsys, tmp_path, ["--config", str(path)], needle)


def test_config_file_precedence_and_exclusive_pairs(tmp_path):
  path = tmp_path / "c.toml"
  path.write_text("rounds = 7\nclients-per-round = 5\nclient_lr = 0.3\n"
                  "target_epsilon = 3.0\n")

  def cfg(*extra):
    return cli.parse_run_args(["--config", str(path), *extra])[0]

  c = cfg()
  assert (c.rounds, c.options.clients_per_round, c.options.sampling_rate) == (7, 5, None)
  assert c.options.client_learning_rate == 0.3
  assert c.target_epsilon == 3.0 and c.options.noise_multiplier is None  # calibrate z
  c = cfg("--rounds", "9", "--sampling-rate", "0.25", "--noise-multiplier", "1.5")
  assert ((c.rounds, c.options.clients_per_round, c.options.sampling_rate)
          == (9, None, 0.25))
  assert (c.options.noise_multiplier, c.target_epsilon) == (1.5, 3.0)  # the budget guard
  # A flag typed with its default value still overrides the file:
  assert cfg("--rounds", str(RunConfig().rounds)).rounds == RunConfig().rounds
  # Without a config file the defaults are the README's main job:
  c = cli.parse_run_args([])[0]
  assert c == RunConfig()


def test_summary_json_repeats_a_run_without_overwriting_it(tmp_path, capsys):
  first = tmp_path / "first"
  assert cli.main(BASE + ["--out", str(first), "--seed", "4", "--clip-norm", "0.7"]) == 0
  summary = json.loads((first / "summary.json").read_text())
  before = (first / "metrics.jsonl").read_bytes()
  again = tmp_path / "again"
  assert cli.main(["run", "--config", str(first / "summary.json"), "--no-progress",
                   "--out", str(again)]) == 0
  assert (first / "metrics.jsonl").read_bytes() == before
  repeat = json.loads((again / "summary.json").read_text())
  assert repeat["config"] == {**summary["config"], "out": str(again)}
  assert repeat["final_test_accuracy"] == summary["final_test_accuracy"]
  assert math.isclose(repeat["epsilon"], summary["epsilon"])
  capsys.readouterr()


def test_error_says_whether_the_value_was_typed_or_read_from_the_file(capsys, tmp_path):
  path = tmp_path / "c.toml"
  path.write_text("clip_norm = -1.0\n")
  err = _refused(capsys, tmp_path, ["--config", str(path)], "clip_norm must be > 0")
  assert f"(key 'clip_norm' of config file '{path}')" in err
  err = _refused(capsys, tmp_path, ["--config", str(path), "--clip-norm", "-2"],
                 "clip_norm must be > 0, got -2.0")
  assert "(option --clip-norm)" in err
