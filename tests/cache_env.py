"""The suite's compilation cache for a child process that never calls
`fedjax_dp.compilation_cache.enable` (a test file run as a script, the benchmark
commands): JAX reads these variables when the child imports it. The cache skips only
XLA's compilation of a program whose key (program, devices, compile options, XLA flags,
versions) is in the folder, so the child computes what it would without it.

Not for multi-process runs (tests/test_multiprocess.py keeps those out of the shared
folder, openxla/xla#18286)."""

from typing import Dict, Optional

from fedjax_dp import compilation_cache as cc


def with_compilation_cache(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
  """``env`` (default: this process's environment) plus JAX's cache variables for the
  folder this process caches in (tests/conftest.py's), with
  `fedjax_dp.compilation_cache`'s thresholds; unchanged when this process has no cache
  (``FEDJAX_DP_COMPILATION_CACHE=0``)."""
  import os
  env = dict(os.environ if env is None else env)
  folder = cc.active_dir()
  if folder is None:
    return env
  env.update(JAX_COMPILATION_CACHE_DIR=folder,
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=str(cc.MIN_COMPILE_TIME_SECS),
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=str(cc.MIN_ENTRY_SIZE_BYTES))
  return env
