"""Runs of ``fedjax-dp run`` and sweeps of ``fedjax-dp sweep``: the configuration
(`config`), the set-up (`setup`), the one driver of runs and sweeps (`session`, with the
lockstep program of `program`), the run (`loop`: a session of one member), the sweep
(`sweep`), the run's privacy bookkeeping around the algorithm's `PrivacySpec`
(`privacy`) and its files (`outputs`). Nothing here names an algorithm."""

from fedjax_dp.runs.config import RunConfig, load_config_file
from fedjax_dp.runs.loop import METRICS_FORMAT, RunResult, build, make_setup, run
from fedjax_dp.runs.outputs import json_safe

__all__ = ["RunConfig", "load_config_file", "RunResult", "run", "build", "make_setup",
           "METRICS_FORMAT", "json_safe"]
