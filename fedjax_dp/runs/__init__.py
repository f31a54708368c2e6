"""Runs of ``fedjax-dp run`` and sweeps of ``fedjax-dp sweep``: the configuration
(`config`), the set-up (`setup`), the one driver of runs and sweeps (`session`, with the
lockstep program of `program`), the run (`loop`: a session of one member), the sweep
(`sweep`), the run's privacy bookkeeping around the algorithm's `PrivacySpec`
(`privacy`) and its files (`outputs`). Nothing here names an algorithm."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  from fedjax_dp.runs.config import RunConfig, load_config_file
  from fedjax_dp.runs.loop import METRICS_FORMAT, RunResult, build, make_setup, run
  from fedjax_dp.runs.outputs import json_safe

# Imported on first use (PEP 562): the command line reads `config` to refuse a bad
# option before JAX is imported.
_LAZY = {"RunConfig": "config", "load_config_file": "config", "RunResult": "loop",
         "run": "loop", "build": "loop", "make_setup": "loop", "METRICS_FORMAT": "loop",
         "json_safe": "outputs"}


def __getattr__(name: str) -> Any:
  if name not in _LAZY:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  value = getattr(importlib.import_module(f"fedjax_dp.runs.{_LAZY[name]}"), name)
  globals()[name] = value
  return value

__all__ = ["RunConfig", "load_config_file", "RunResult", "run", "build", "make_setup",
           "METRICS_FORMAT", "json_safe"]
