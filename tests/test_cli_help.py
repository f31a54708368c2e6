"""The command line's help, refusals and progress (issue 34, item 5): a concise
``--help``; a misspelt algorithm refused before JAX is imported; a bad value or a
contradictory pair of options refused in one line naming the flags; a compiling line;
plain progress lines without a terminal."""

import dataclasses
import io
import os
import re
import subprocess
import sys
import types

import pytest

from fedjax_dp import cli, cli_help
from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig
from fedjax_dp.runs.progress import Progress

BASE = ["run", "--dataset", "synthetic", "--num-clients", "12", "--model", "linear",
        "--rounds", "2", "--no-progress"]


def _help(argv, capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(argv)
  assert e.value.code == 0
  return capsys.readouterr().out


@pytest.mark.parametrize("name", registry.names())
def test_help_is_concise_and_lists_every_option(name, capsys, monkeypatch):
  monkeypatch.setenv("COLUMNS", "100")
  out = _help(["run", "--algorithm", name, "--help"], capsys)
  lines = out.splitlines()
  assert len(lines) < 120, len(lines)
  assert max(map(len, lines)) <= 100
  assert len(lines[2]) < 120  # a short description, not a 1,300-character paragraph
  for noise in ("{None}", "``", "algorithm-options", "|STR", "(default: None)"):
    assert noise not in out, noise
  assert not re.search(r"[\x00-\x09\x0b-\x1f]", out), "control characters in the help"
  plugin = registry.get(name)
  for cls in (RunConfig, plugin.Options, cli.CommandLineOptions, cli.DistributedOptions):
    for f in dataclasses.fields(cls):
      if f.name in cli_help.HIDDEN:
        continue
      flag = f.name.replace("_", "-")
      assert f"--{flag}" in out or f"--no-{flag}" in out, (name, flag)
  assert f"{name} options:" in out


def test_sweep_help_is_concise(capsys, monkeypatch):
  monkeypatch.setenv("COLUMNS", "100")
  assert cli.main(["sweep", "--help"]) == 0
  out = capsys.readouterr().out
  # (120 lines until distributed DP's five options: one line each, plus two wraps.)
  assert len(out.splitlines()) < 130 and "--seeds" in out and "--noise-multiplier" in out
  assert "usage: fedjax-dp run" not in out


def test_clip_norm_is_c_in_the_help(capsys, monkeypatch):
  monkeypatch.setenv("COLUMNS", "100")  # narrower terminals cut the texts
  out = _help(["run", "--help"], capsys)
  assert "clip norm C" in out and "z * C" in out and " S:" not in out


def test_help_shows_a_config_files_values_as_defaults(capsys, tmp_path):
  path = tmp_path / "c.toml"
  path.write_text("rounds = 7\nclip_norm = 0.25\n")
  out = _help(["run", "--config", str(path), "--help"], capsys)
  assert "communication rounds [default: 7]" in out and "[default: 0.25]" in out


def test_summary_keeps_intervals_and_drops_remarks():
  text, default = cli_help.summary(
      "client sampling rate q in (0, 1] (default: 0.5 when neither this nor "
      "--clients-per-round is given)")
  assert text == "client sampling rate q in (0, 1]"
  assert default == "0.5 when neither this nor --clients-per-round is given"
  assert cli_help.summary("delta of (epsilon, delta)-DP: the bound; more")[0] == \
      "delta of (epsilon, delta)-DP: the bound"
  assert cli_help.summary("see ``x`` (a remark), then y")[0] == "see x, then y"
  assert cli_help.summary("bands b (default: min(R, --rounds)); more") == (
      "bands b", "min(R, --rounds)")


def test_registry_names_and_a_misspelt_algorithm_do_not_import_jax():
  """`registry.names()` and the refusal of an unknown algorithm import no algorithm
  (the refusal takes a fraction of a second, not the 3-5 s of importing JAX and every
  algorithm)."""
  code = ("import sys; from fedjax_dp import cli; "
          "rc = cli.main(['run', '--algorithm', 'dp_fedavgg']); "
          "from fedjax_dp.algorithms import registry; assert len(registry.names()) >= 12; "
          "assert 'jax' not in sys.modules, 'jax imported'; sys.exit(rc)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
  assert out.returncode == 2, out.stderr
  assert out.stderr.strip() == (
      "fedjax-dp: error: argument --algorithm: invalid choice 'dp_fedavgg'; expected one "
      f"of {', '.join(registry.names())} (did you mean dp_fedavg?)")


def test_every_built_in_entry_is_named_as_its_key():
  for name in registry.BUILT_IN:
    assert registry.get(name).name == name


@pytest.mark.parametrize("args,line", [
    (["--noise-multiplier", "abc"],
     "argument --noise-multiplier: expected a number or 'none', got 'abc'"),
    (["--rounds=1.5"], "argument --rounds: expected an integer, got '1.5'"),
    (["--clip-norm", "adaptve"],
     "argument --clip-norm: expected a number or 'adaptive', got 'adaptve'"),
    (["--sampler", "poison"], "argument --sampler: invalid choice 'poison'; expected one "
                              "of poisson, fixed_size, balls_in_bins, random_allocation, "
                              "cyclic_poisson (did you mean poisson?)"),
    (["--activation", "tanh"],
     "argument --activation: invalid choice 'tanh'; expected one of relu, linear or none"),
    (["--seed"], "argument --seed: expected an integer, got nothing"),
])
def test_a_bad_value_is_one_line_naming_the_flag(args, line, capsys):
  assert cli.main(BASE + args) == 2
  err = capsys.readouterr().err
  assert err == f"fedjax-dp: error: {line}\n"


def test_none_is_accepted_for_an_optional_option():
  cfg, *_ = cli.parse_run_args(["--noise-multiplier", "none", "--target-epsilon", "2"])
  assert cfg.options.noise_multiplier is None and cfg.target_epsilon == 2


@pytest.mark.parametrize("args,needle", [
    (["--local-epochs", "2", "--local-steps", "5"],
     "give only one of --local-epochs (2) and --local-steps (5)"),
    (["--local-epochs", "1", "--local-steps", "5"],
     "give only one of --local-epochs (1) and --local-steps (5)"),
    (["--clients-per-round", "3", "--sampling-rate", "0.1"],
     "give only one of --clients-per-round (3) and --sampling-rate (0.1)"),
    (["--algorithm", "dp_fedprox", "--local-steps=5", "--local-epochs=2"],
     "give only one of --local-epochs (2) and --local-steps (5)"),
    (["--algorithm", "dp_ftrl", "--local-epochs", "3", "--local-steps", "2"],
     "give only one of --local-epochs (3) and --local-steps (2)"),
    (["--algorithm", "dp_ftrl", "--clients-per-round", "3", "--cycle-length", "2"],
     "give only one of --clients-per-round (3) and --cycle-length (2)"),
    (["--quantity-skew-alpha", "1", "--quantity-skew-sigma", "1"],
     "quantity_skew takes exactly one of alpha"),
])
def test_contradictory_options_are_refused_by_name(args, needle, capsys, tmp_path):
  assert cli.main(BASE + ["--out", str(tmp_path / "o")] + args) == 2
  err = capsys.readouterr().err
  assert err.startswith("fedjax-dp: error:") and err.count("\n") == 1 and needle in err
  assert not (tmp_path / "o").exists()


def test_local_epochs_with_local_steps_from_a_config_file(capsys, tmp_path):
  """The pair in a config file is refused with the Python API's message; a flag of the
  pair replaces the file's other one."""
  path = tmp_path / "c.json"
  path.write_text('{"local_epochs": 2, "local_steps": 5}')
  assert cli.main(BASE + ["--config", str(path), "--out", str(tmp_path / "o")]) == 2
  err = capsys.readouterr().err
  assert "give only one of local_epochs (2) and local_steps (5)" in err
  path.write_text('{"local_epochs": 2}')
  cfg, *_ = cli.parse_run_args(["--config", str(path), "--local-steps", "5"])
  assert cfg.options.local_steps == 5 and cfg.options.local_epochs == 1


def _members(planned=50, done=0):
  m = types.SimpleNamespace(setup=types.SimpleNamespace(data=types.SimpleNamespace(
      name="har")), alg=types.SimpleNamespace(name="dp_fedavg"), planned=planned,
      done_before=done, fresh=[])
  return [m]


def test_progress_without_a_terminal_prints_plain_lines():
  stream = io.StringIO()
  members = _members()
  p = Progress(members, stream=stream)
  assert not p.tty and p.bar is None
  for r in range(1, 51):
    members[0].fresh = [{"train_loss": 0.5, "epsilon": 0.1 * r}
                        | ({"test_accuracy": 0.8} if r % 5 == 0 else {})]
    p.update(members, 1)
  p.close()
  lines = stream.getvalue().splitlines()
  assert "\r" not in stream.getvalue()
  assert "compiling the round program" in lines[0]
  assert lines[1].startswith("dp_fedavg on har: compiled in ")
  rounds = [ln for ln in lines if ln.startswith("round ")]
  assert [ln.split(":")[0] for ln in rounds] == [f"round {r}/50" for r in range(5, 51, 5)]
  assert rounds[-1].endswith("loss 0.500, acc 0.800, eps 5.00") and "s/round" in rounds[-1]


def test_progress_on_a_terminal_is_a_bar():
  stream = io.StringIO()
  members = _members(planned=4)
  p = Progress(members, stream=stream, tty=True)
  assert p.bar is not None
  members[0].fresh = [{"train_loss": 0.5, "epsilon": 1.0, "test_accuracy": 0.5}]
  p.update(members, 4)
  p.close()
  text = stream.getvalue()
  assert "compiling the round program" in text and "4/4" in text and "compiled in" in text


def test_help_piped_into_head_ends_without_a_traceback():
  """``fedjax-dp run --help | head -3``: the reader closes the pipe early."""
  code = ("import sys; from fedjax_dp.cli import main; sys.exit(main(sys.argv[1:]))")
  proc = subprocess.run(
      f"{sys.executable} -c '{code}' sweep --help | head -3", shell=True,
      capture_output=True, text=True, timeout=120)
  assert proc.stdout.startswith("usage: fedjax-dp sweep"), proc.stdout
  assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
