"""Tests of `fedjax_dp.compilation_cache` (JAX's persistent compilation cache) and of the
command line's ``--compilation-cache DIR`` / ``--no-compilation-cache``."""

import json
import os
import stat
import subprocess
import sys
import textwrap

import jax
import pytest

from fedjax_dp import cli
from fedjax_dp import compilation_cache as cc
from fedjax_dp.validation import FedJaxDpError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_VARS = (cc.ENV_DIR, cc.ENV_SWITCH, "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME")


@pytest.fixture
def restore_cache():
  """Puts the session's cache (tests/conftest.py) back after a test moves it."""
  before = cc.active_dir()
  yield
  if before is None:
    cc.disable()
  else:
    cc.enable(before)
  assert cc.active_dir() == before


@pytest.fixture
def clean_env(monkeypatch):
  for var in ENV_VARS:
    monkeypatch.delenv(var, raising=False)
  return monkeypatch


def _entries(path):
  return sorted(f for f in os.listdir(path) if f.endswith("-cache"))


# --- the default folder and the switches -------------------------------------------------


def test_default_dir_precedence(clean_env, tmp_path):
  version_dir = f"jax-{jax.__version__}"
  clean_env.setenv("HOME", str(tmp_path / "home"))
  assert cc.default_dir() == str(tmp_path / "home" / ".cache" / "fedjax_dp" / version_dir)
  clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert cc.default_dir() == str(tmp_path / "xdg" / "fedjax_dp" / version_dir)
  clean_env.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jaxs"))
  assert cc.default_dir() == str(tmp_path / "jaxs")
  clean_env.setenv(cc.ENV_DIR, "~/mine")  # used as given, ~ expanded
  assert cc.default_dir() == str(tmp_path / "home" / "mine")


@pytest.mark.parametrize("value,off", [("0", True), ("off", True), ("OFF", True),
                                       ("false", True), ("no", True), ("1", False),
                                       ("", False), ("on", False)])
def test_environment_switch(clean_env, value, off):
  clean_env.setenv(cc.ENV_SWITCH, value)
  assert cc.disabled_by_environment() is off


def test_enable_sets_jax_config_and_is_idempotent(restore_cache, tmp_path):
  path = str(tmp_path / "a" / "cache")
  assert cc.enable(path) == path
  assert jax.config.jax_compilation_cache_dir == path
  assert jax.config.jax_persistent_cache_min_compile_time_secs == cc.MIN_COMPILE_TIME_SECS
  assert jax.config.jax_persistent_cache_min_entry_size_bytes == cc.MIN_ENTRY_SIZE_BYTES
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o700  # others cannot plant executables
  assert cc.enable(path) == path and cc.active_dir() == path
  other = str(tmp_path / "b")
  assert cc.enable(other + "/") == other and cc.active_dir() == other  # it moves


def test_default_follows_the_environment(restore_cache, clean_env, tmp_path):
  clean_env.setenv(cc.ENV_DIR, str(tmp_path / "env"))
  cc.disable()
  assert cc.enable() == str(tmp_path / "env") == cc.active_dir()
  cc.disable()
  clean_env.setenv(cc.ENV_SWITCH, "off")
  assert cc.enable() is None and cc.active_dir() is None  # the default is off
  explicit = str(tmp_path / "explicit")
  assert cc.enable(explicit) == explicit  # an explicit folder wins over the switch
  assert cc.enable() == explicit  # and the default does not turn it off


def test_enable_false_and_disable(restore_cache, tmp_path):
  cc.enable(str(tmp_path))
  assert cc.enable(False) is None
  assert cc.active_dir() is None
  cc.enable(str(tmp_path))
  cc.disable()
  assert cc.active_dir() is None
  cc.disable()  # twice is fine
  assert cc.active_dir() is None


def test_unwritable_folder_warns_and_runs_without(restore_cache, tmp_path):
  cc.disable()
  blocker = tmp_path / "a_file"
  blocker.write_text("not a folder")
  with pytest.warns(RuntimeWarning, match="cannot be written.*without the compilation"):
    assert cc.enable(str(blocker / "cache")) is None
  assert cc.active_dir() is None
  assert int(jax.jit(lambda x: x * 3 + 1)(2)) == 7  # JAX still runs
  good = str(tmp_path / "good")
  cc.enable(good)
  with pytest.warns(RuntimeWarning, match="cannot be written.*keeping the compilation"):
    assert cc.enable(str(blocker / "cache")) == good  # the cache in use stays
  assert cc.active_dir() == good


@pytest.mark.parametrize("bad", [True, 3, "", 1.5])
def test_bad_cache_dir(bad):
  with pytest.raises(FedJaxDpError, match="cache_dir must be a folder path"):
    cc.enable(bad)


def test_a_program_is_written_then_read_back(restore_cache, tmp_path):
  """In one process: a program compiled with the cache on is written; once JAX forgets
  its in-memory executables, compiling it again is a persistent-cache hit."""
  path = cc.enable(str(tmp_path))
  events = []
  listener = lambda name, **kw: events.append(name)
  jax.monitoring.register_event_listener(listener)
  try:
    f = lambda x: jax.numpy.tanh(x) * 17.0 - x ** 3  # a program no other test compiles
    assert float(jax.jit(f)(0.5)) == pytest.approx(f(0.5))
    written = _entries(path)
    assert written and "/jax/compilation_cache/cache_misses" in events
    assert "/jax/compilation_cache/cache_hits" not in events
    jax.clear_caches()
    events.clear()
    assert float(jax.jit(f)(0.5)) == pytest.approx(f(0.5))
    assert "/jax/compilation_cache/cache_hits" in events
    assert "/jax/compilation_cache/cache_misses" not in events
    assert _entries(path) == written
  finally:
    jax.monitoring.unregister_event_listener(listener)


# --- fresh processes ------------------------------------------------------------------

PROGRAM = textwrap.dedent("""
    import json, os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, jax.numpy as jnp
    from fedjax_dp import compilation_cache
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    path = compilation_cache.enable()  # the default: FEDJAX_DP_CACHE_DIR
    outs = []
    for i in range(int(sys.argv[1])):  # several distinct programs
      f = jax.jit(lambda x, i=i: jnp.sum(jnp.sin(x) * (i + 1.5)) + jnp.max(x) * i)
      outs.append(float(f(jnp.arange(40.0))))
    print(json.dumps(dict(
        path=path, outs=outs,
        hits=events.count("/jax/compilation_cache/cache_hits"),
        writes=events.count("/jax/compilation_cache/cache_misses"))))
""")


def _run(env, programs=1):
  out = subprocess.run([sys.executable, "-c", PROGRAM, str(programs)], env=env,
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _env(tmp_path, **extra):
  env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
  env.update(extra)
  return env


def test_second_process_hits_the_cache(tmp_path):
  folder = tmp_path / "shared"
  env = _env(tmp_path, **{cc.ENV_DIR: str(folder)})
  first, _ = _run(env)
  assert first["path"] == str(folder)
  assert first["hits"] == 0 and first["writes"] >= 1
  entries = _entries(folder)
  assert len(entries) == first["writes"]
  second, _ = _run(env)
  assert second["hits"] >= 1 and second["writes"] == 0  # loaded, not compiled
  assert second["outs"] == first["outs"]
  assert _entries(folder) == entries
  # Turned off by the environment: nothing is read or written.
  off, _ = _run(dict(env, **{cc.ENV_SWITCH: "0"}))
  assert off["path"] is None and off["hits"] == 0 and off["writes"] == 0
  assert off["outs"] == first["outs"]


def test_concurrent_processes_share_one_folder(tmp_path):
  """Two processes that compile the same programs into one empty folder at once (as two
  pytest-xdist workers do) both finish with the right results, and the folder they
  leave serves a third process from the cache alone: no entry is left corrupt."""
  folder = tmp_path / "shared"
  env = _env(tmp_path, **{cc.ENV_DIR: str(folder)})
  n = 12
  procs = [subprocess.Popen([sys.executable, "-c", PROGRAM, str(n)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(2)]
  results = []
  for p in procs:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    results.append(json.loads(out.strip().splitlines()[-1]))
  assert results[0]["outs"] == results[1]["outs"]
  assert len(_entries(folder)) >= n
  third, stderr = _run(env, n)
  assert third["writes"] == 0 and third["hits"] >= n
  assert third["outs"] == results[0]["outs"]
  assert "Error reading persistent compilation cache" not in stderr


# --- the command line -----------------------------------------------------------------


def test_cli_flags_reach_the_config(restore_cache, clean_env, tmp_path, capsys):
  folder = str(tmp_path / "cli")
  assert cli.main(["--compilation-cache", folder, "datasets", "--json"]) == 0
  assert cc.active_dir() == folder == jax.config.jax_compilation_cache_dir
  assert cli.main(["--no-compilation-cache", "datasets", "--json"]) == 0
  assert cc.active_dir() is None
  other = str(tmp_path / "cli2")
  # Before `run`: parsed here, the rest goes to tyro (a refused option exits 2 after).
  assert cli.main([f"--compilation-cache={other}", "run", "--rounds", "0"]) == 2
  assert cc.active_dir() == other
  assert cli.main(["--no-compilation-cache", "run", "--rounds", "0"]) == 2
  assert cc.active_dir() is None
  # No flag: the default folder, from the environment.
  clean_env.setenv(cc.ENV_DIR, str(tmp_path / "env"))
  assert cli.main(["datasets", "--json"]) == 0
  assert cc.active_dir() == str(tmp_path / "env")
  cc.disable()
  clean_env.setenv(cc.ENV_SWITCH, "0")
  assert cli.main(["datasets", "--json"]) == 0
  assert cc.active_dir() is None
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.main(["--no-compilation-cache", "--compilation-cache", folder, "datasets"])
  assert e.value.code == 2
  assert "not allowed with" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["--help"])
  assert "--no-compilation-cache" in capsys.readouterr().out
