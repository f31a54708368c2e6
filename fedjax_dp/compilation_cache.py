"""JAX's persistent compilation cache, on by default for the CLI, experiments and tests.

What is cached: the compiled XLA executables of the programs a run jit-compiles (the
round, the block of rounds, the evaluator, ...), written by JAX itself to one file per
program (``<key>-cache``, zlib-compressed). A second process that compiles the same
program loads the executable from disk instead of running XLA's compiler again. Tracing
and lowering to StableHLO still happen in every process (they are what computes the
key); only XLA's compilation, the expensive part on CPU, is skipped.

The key: JAX hashes the lowered program, the devices it runs on, the compile options,
the XLA flags (``XLA_FLAGS``, e.g. the number of host CPU devices), the JAX/jaxlib
version and the backend (``jax/_src/cache_key.py``). Any change gives a new key, never a
stale executable, so one folder can be shared by many runs.

Several processes may use one folder at once (pytest-xdist workers, parallel runs).
JAX 0.10 (``jax/_src/lru_cache.py``) writes an entry straight to its final name without
a lock (it locks only when a size limit is set, which needs the ``filelock`` package),
so a reader may meet a half-written file. Entries are zlib streams, whose end and
checksum are verified: such a read fails, and JAX warns (``Error reading persistent
compilation cache entry``) and compiles the program instead, never runs a broken one.
Two writers of one key write the same program, and a complete stream followed by stray
bytes still reads back. A file left truncated by a process killed in mid-write, or by a
full disk, is not rewritten: JAX warns and compiles that program each time until the
folder is cleared.

Where: `default_dir`, in order of precedence: ``$FEDJAX_DP_CACHE_DIR``;
``$JAX_COMPILATION_CACHE_DIR`` (JAX's own variable); ``$XDG_CACHE_HOME/fedjax_dp/jax-<jax
version>``; ``~/.cache/fedjax_dp/jax-<jax version>``. One folder per JAX version keeps
old entries out of the way when JAX is upgraded.

Turn it off: ``FEDJAX_DP_COMPILATION_CACHE=0`` (or ``off``, ``false``, ``no``) in the
environment, ``fedjax-dp --no-compilation-cache run ...``, ``enable(False)`` or
`disable`. Clear it: delete the folder (``rm -rf ~/.cache/fedjax_dp/jax-*``, which
leaves the data sets cached beside it); nothing else refers to it. Sharing: the entries
are executables that the process runs, so the folder must be writable only by people
you trust (it is created with mode 0700).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Optional, Union

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "ENV_DIR", "ENV_SWITCH", "MIN_COMPILE_TIME_SECS", "MIN_ENTRY_SIZE_BYTES",
    "disabled_by_environment", "default_dir", "enable", "disable", "active_dir",
]

ENV_DIR = "FEDJAX_DP_CACHE_DIR"
"""Environment variable: the cache folder (used as given)."""

ENV_SWITCH = "FEDJAX_DP_COMPILATION_CACHE"
"""Environment variable: ``0``, ``off``, ``false`` or ``no`` turns the default cache off."""

MIN_COMPILE_TIME_SECS = 0.0
"""Programs whose XLA compilation took less than this are not written to the cache. JAX's
default, 1 s, would leave out nearly everything we compile: measured on the 2-core CPU
machine, the default run (`fedjax-dp run`, HAR) compiles 66 programs, of which 1 or 2
take over 1 s (6-11 s), 8-11 take 0.1-1 s (3-4 s in all) and the rest under 0.1 s (2-3 s
in all). Its second run spent 73% of the first's XLA time with the 1 s threshold, 17%
with 0.1 s and 4% with 0 (every program; 66 entries, 0.7 MB). A slice of the test suite
(tests/algorithms) writes 246 entries (6 MB) with 0 and, warm, used 29 s of CPU against
34 s with 0.1 s and 108 s cold. Loading a small entry costs a few milliseconds, less
than compiling it, and a threshold on a measured time makes the set of cached programs
depend on the machine's load."""

MIN_ENTRY_SIZE_BYTES = 0
"""Entries of any size are written (the compile-time threshold does the selecting)."""

_OFF = ("0", "off", "false", "no")
_active: Optional[str] = None  # the folder this module last handed to JAX


def disabled_by_environment() -> bool:
  """Whether ``$FEDJAX_DP_COMPILATION_CACHE`` turns the default cache off."""
  return os.environ.get(ENV_SWITCH, "").strip().lower() in _OFF


def default_dir() -> str:
  """The default cache folder (see the module docstring for the order of precedence).

  Returns:
    An absolute path (``~`` expanded); the folder need not exist yet.
  """
  import jax
  for var in (ENV_DIR, "JAX_COMPILATION_CACHE_DIR"):
    if os.environ.get(var):
      return os.path.abspath(os.path.expanduser(os.environ[var]))
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
  return os.path.abspath(os.path.expanduser(
      os.path.join(base, "fedjax_dp", f"jax-{jax.__version__}")))


def _writable(path: str) -> Optional[str]:
  """None if ``path`` can be created and written, else why not."""
  try:
    os.makedirs(path, mode=0o700, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
      pass
  except OSError as e:
    return f"{type(e).__name__}: {e}"
  return None


def enable(cache_dir: Union[str, os.PathLike, None, bool] = None) -> Optional[str]:
  """Turns on JAX's persistent compilation cache in ``cache_dir``.

  Call it before the first compilation that should be cached (programs compiled before
  are neither looked up nor written). Calling it again with the same folder does
  nothing; with another folder, the cache moves there.

  Args:
    cache_dir: the folder; None for `default_dir` unless ``$FEDJAX_DP_COMPILATION_CACHE``
      turns the default off; False to turn the cache off (`disable`). An explicit folder
      is used whatever the environment says.

  Returns:
    The absolute path of the folder in use, or None when the cache is off. A folder
    that cannot be created or written is not used: a `RuntimeWarning` says why, and the
    run goes on with the cache it had (none, unless an earlier call turned one on).

  Raises:
    FedJaxDpError: ``cache_dir`` is not a path, None or False.
  """
  global _active
  if cache_dir is False:
    disable()
    return None
  if cache_dir is None:
    if disabled_by_environment():
      return _active  # an explicit folder enabled earlier stays on
    cache_dir = default_dir()
  elif cache_dir is True or not isinstance(cache_dir, (str, os.PathLike)) or \
      not os.fspath(cache_dir):
    raise FedJaxDpError(f"cache_dir must be a folder path, None (the default folder) or "
                        f"False (no cache), got {cache_dir!r}.", option="cache_dir")
  path = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
  import jax
  if path == _active == _jax_cache_dir():
    return path
  why = _writable(path)
  if why is not None:
    now = (f"keeping the compilation cache in {_active!r}" if _active else
           "running without the compilation cache")
    warnings.warn(f"the JAX compilation cache folder {path!r} cannot be written ({why}); "
                  f"{now} (choose another folder with ${ENV_DIR} or --compilation-cache "
                  f"DIR, or turn the cache off with {ENV_SWITCH}=0).", RuntimeWarning,
                  stacklevel=2)
    return _active
  from jax.experimental.compilation_cache import compilation_cache as jax_cc
  moved = _jax_cache_dir() not in (None, path)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_SECS)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", MIN_ENTRY_SIZE_BYTES)
  if moved:  # JAX opens its cache once per process: reopen it in the new folder
    jax_cc.reset_cache()
  _active = path
  return path


def disable() -> None:
  """Turns the persistent compilation cache off for the programs compiled from now on."""
  global _active
  import jax
  from jax.experimental.compilation_cache import compilation_cache as jax_cc
  if _jax_cache_dir() is not None:
    jax.config.update("jax_compilation_cache_dir", None)
    jax_cc.reset_cache()  # drops the cache JAX opened; with no folder it opens none
  _active = None


def active_dir() -> Optional[str]:
  """The folder JAX's persistent cache uses now (whoever set it), or None."""
  return _jax_cache_dir()


def _jax_cache_dir() -> Optional[str]:
  """JAX's ``jax_compilation_cache_dir`` option now (None: no cache folder)."""
  import jax
  # jax.config's options are attributes it adds at run time (jax 0.10's `Config` declares
  # none), unseen by type checkers: read by name.
  return getattr(jax.config, "jax_compilation_cache_dir")
