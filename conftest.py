"""Suite-wide test setup (tests/conftest.py holds the fixtures of the tests).

The executed notebooks (``--nbmake notebooks``) run in Jupyter kernels, child processes
that do not import tests/conftest.py and (all but one) never call
`fedjax_dp.compilation_cache.enable`: each kernel would compile every program afresh in
every run of the suite. While a notebook runs, its kernel is handed the suite's
compilation cache through JAX's own environment variables (read when the kernel imports
JAX), with the thresholds `fedjax_dp.compilation_cache` uses; the variables are restored
when the notebook is done, so no other test sees them. The cache only skips XLA's
compilation of a program whose key (program, devices, options, XLA flags, versions) is
already in the folder; what a notebook computes and prints is unchanged.
``FEDJAX_DP_COMPILATION_CACHE=0`` turns this off too.
"""

import os

import pytest


def _notebook_cache_env():
  """JAX's cache variables for a notebook kernel, or {} when the cache is off."""
  from fedjax_dp import compilation_cache as cc
  if cc.disabled_by_environment():
    return {}
  return {"JAX_COMPILATION_CACHE_DIR": cc.default_dir(),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(cc.MIN_COMPILE_TIME_SECS),
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": str(cc.MIN_ENTRY_SIZE_BYTES)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
  if not str(item.path).endswith(".ipynb"):
    return (yield)
  new = _notebook_cache_env()
  saved = {k: os.environ.get(k) for k in new}
  if new:
    os.makedirs(new["JAX_COMPILATION_CACHE_DIR"], mode=0o700, exist_ok=True)
  os.environ.update(new)
  try:
    return (yield)
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
