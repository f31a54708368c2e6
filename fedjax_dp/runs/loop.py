"""The run: one configured training job, end to end, with outputs on disk.

`run` is a training session of one member (`fedjax_dp.runs.session`, the one driver of
runs and sweeps): it validates the `RunConfig`, sets the run up (`fedjax_dp.runs.setup`:
data, model, algorithm, its noise multiplier given, calibrated, or the resumed run's),
runs the rounds in compiled blocks that the algorithm's controller chooses, composes
each round's DpEvent in the privacy ledger, streams ``metrics.jsonl`` (one JSON object
per round, flushed as each compiled block finishes; its ``wall_time_s`` is the block's
end time, shared by the block's rounds: `block_rounds`), checkpoints, and writes
``summary.json``, ``curves.png`` and ``partition.png`` (`plots`); the trackers of
``--logger`` (`writers`: TensorBoard, W&B, MLflow) get the same records. It names no
algorithm: everything algorithm-specific comes through
`fedjax_dp.algorithms.interface.FederatedAlgorithm`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.interface import Setup
from fedjax_dp.federated import ServerState, make_block_fn
from fedjax_dp.interrupts import GracefulInterrupts
from fedjax_dp.runs import outputs, session
from fedjax_dp.runs import writers as writers_lib
from fedjax_dp.runs.config import RunConfig
# Set-up and summary pieces live in `fedjax_dp.runs.setup` and `fedjax_dp.runs.summary`
# (re-exported for callers).
from fedjax_dp.runs.session import METRICS_FORMAT  # noqa: F401
from fedjax_dp.runs.setup import (  # noqa: F401
    DEFAULT_MODELS, build, device_population, make_setup, rounds_dependent, run_mesh,
    with_default_noise_multiplier)
from fedjax_dp.runs.summary import (  # noqa: F401
    accounting_warnings, block_rounds, check_delta_bound, common_summary, delta_bound,
    delta_meaning, label_summary, published_summary, wall_time_note)
from fedjax_dp.privacy.ledger_protocol import Ledger
from fedjax_dp.runs.setup import NoiseMultiplier
from fedjax_dp.validation import FedJaxDpError

if TYPE_CHECKING:  # annotations only (no import at run time)
  import flax.linen as nn

  from fedjax_dp.data import FederatedData
  from fedjax_dp.models import Model

__all__ = [
    "RunResult", "run", "resume_point", "extended", "METRICS_FORMAT", "DEFAULT_MODELS",
    "build", "device_population", "make_setup", "rounds_dependent", "run_mesh",
    "with_default_noise_multiplier", "accounting_warnings", "block_rounds",
    "check_delta_bound", "common_summary", "delta_bound", "delta_meaning",
    "label_summary", "published_summary", "wall_time_note",
]


@dataclasses.dataclass
class RunResult:
  """What `run` returns: final server state, per-round records (1-based ``round``),
  the summary, the ledger."""
  state: ServerState
  records: List[Dict[str, Any]]
  summary: Dict[str, Any]
  ledger: Optional[Ledger]


def run(cfg: RunConfig, progress: bool = True, data: Optional[FederatedData] = None,
        model: Optional[Union[Model, nn.Module]] = None) -> RunResult:
  """Runs one training job and writes ``metrics.jsonl``, ``summary.json``, ``curves.png``,
  ``partition.png`` and ``checkpoints/`` into ``cfg.out`` (unless ``cfg.out`` is None),
  and sends the configuration, each round's record and the summary to the trackers of
  ``cfg.logger`` (default ``<out>/tensorboard``; closed however the run ends; one that
  fails is dropped with a warning). On resume they get the checkpoint's rounds again
  (TensorBoard hides its earlier session's events, so each round shows once; W&B and
  MLflow start a new run).

  Args:
    cfg: a `RunConfig` (validated here, before any loading or compilation).
    progress: show a tqdm progress bar with loss, accuracy and epsilon.
    data: an already loaded `FederatedData` (skips loading ``cfg.dataset``), e.g. your
      own arrays through `fedjax_dp.data.from_client_lists`.
    model: your own model instead of ``cfg.model``: a `fedjax_dp.models.Model` or any
      flax module mapping ``[B, *feature_shape]`` to logits ``[B, num_classes]``
      (`fedjax_dp.models.from_module`). A resumed run needs the same model again.

  Ctrl-C (SIGINT) and SIGTERM stop training at a safe point: the compiled block in
  progress finishes and its records and checkpoint are written (never half a
  checkpoint or a metrics line), then the run stops at that checkpoint and writes
  summary.json (``interrupted`` says so and how to resume) and curves.png for its
  rounds. A fresh run checkpoints its initial state, so a run stopped at any time after
  its output folder exists can be resumed.

  Returns:
    A `RunResult`.

  Raises:
    FedJaxDpError: invalid configuration; `DatasetNotAvailableError` when the data
      is missing (its message says how to get it).
  """
  members: List[session.Member] = []  # their trackers are closed however the run ends
  with GracefulInterrupts() as interrupts:
    try:
      return _run(cfg, progress, data, model, interrupts, members)
    finally:
      session.close(members)


def _run(cfg: RunConfig, progress: bool, data: Optional[FederatedData],
         model: Optional[Union[Model, nn.Module]], interrupts: GracefulInterrupts,
         members: List[session.Member]) -> RunResult:
  """`run` with its signal handlers installed (``interrupts``); the run's member goes
  into ``members`` as soon as it exists (the caller closes its files)."""
  cfg.validate()
  t_start = time.perf_counter()
  resumed, extend_to = None, None
  if cfg.resume:
    cfg, resumed, extend_to = resume_point(cfg)
  cfg = with_default_noise_multiplier(cfg)
  writers_lib.check_installed(cfg.logger)  # before loading data or compiling
  setup = make_setup(cfg, data, model)
  alg, z = build(setup, resumed.meta.get("noise_multiplier_hparam") if resumed else None)
  if extend_to is not None:
    cfg, setup, alg = extended(cfg, setup, alg, z, extend_to)
  member = session.start_member(0, "", {}, cfg, setup, alg, z, resumed)
  members.append(member)
  member.evaluator = session.evaluators([setup], [alg])[0]
  first = [member.controller.next_block(member.done_before, member.planned)]
  out = cfg.out
  if out and resumed is None:  # only now, after every check has passed
    out = outputs.fresh_out_dir(out, cfg.overwrite)  # chosen by process 0 for all
    member.cfg = dataclasses.replace(cfg, out=out)
  if out:
    session.open_outputs(member, out, run_name=os.path.basename(os.path.normpath(out)))
  session.execute(members, make_block_fn(alg.round_fn, member.evaluator), first,
                  population=device_population(setup.data, setup.mesh), mesh=setup.mesh,
                  interrupts=interrupts, t_start=t_start, progress=progress)
  return RunResult(member.state, member.records, member.summary, member.ledger)


def resume_point(cfg: RunConfig) -> Tuple[RunConfig, session.Resumed, Optional[int]]:
  """``(config, checkpoint, rounds to extend to)`` of ``cfg.resume``: the configuration
  comes from the newest checkpoint, so the run continues as it started.

  Raises:
    FedJaxDpError: no usable checkpoint (option ``resume``); ``resume_rounds`` not
      more than the rounds done, or a checkpoint without the noise multiplier (option
      ``resume_rounds``).
    ValueError: ``cfg.resume`` is not set (the caller's error).
  """
  if not cfg.resume:
    raise ValueError("resume_point needs cfg.resume (the folder of the run to continue).")
  resumed = session.read_checkpoint(cfg.resume)
  saved = resumed.meta
  extend_to = cfg.resume_rounds
  cfg = RunConfig.from_dict({**saved["config"], "out": cfg.resume, "resume": None,
                             "resume_rounds": None, "overwrite": False},
                            source=f"checkpoint in {cfg.resume}").validate()
  if extend_to is not None:
    if extend_to <= saved["rounds_done"]:
      raise FedJaxDpError(f"resume_rounds (--rounds with --resume) must be more than the "
                          f"{saved['rounds_done']} rounds the run in {cfg.out!r} has "
                          f"done, got {extend_to}.", option="resume_rounds")
    if "noise_multiplier_hparam" not in saved:
      raise FedJaxDpError(f"resume_rounds: the checkpoint in {cfg.out!r} does not record "
                          "the run's noise multiplier (an older fedjax_dp wrote it); "
                          "resume it without --rounds, or start a new run.",
                          option="resume_rounds")
  return cfg, resumed, extend_to


def extended(cfg: RunConfig, setup: Setup, alg: Algorithm, z: Optional[NoiseMultiplier],
             extend_to: int) -> Tuple[RunConfig, Setup, Algorithm]:
  """``(config, setup, algorithm)`` of a resumed run extended to ``extend_to`` rounds
  with its noise multiplier ``z``.

  Raises:
    FedJaxDpError (option ``resume_rounds``): the algorithm's hyper-parameters depend
      on the number of rounds (a noise schedule calibrated for them, say), so extending
      would change the rounds already run.
  """
  rounds_before = cfg.rounds
  cfg = dataclasses.replace(cfg, rounds=extend_to)
  setup = dataclasses.replace(setup, run=cfg)
  longer, _ = build(setup, z)
  changed = rounds_dependent(alg.config, longer.config)
  if changed:
    raise FedJaxDpError(
        f"resume_rounds: {alg.name}'s configuration depends on the number of rounds "
        f"({', '.join(changed)} change from {rounds_before} to {extend_to} rounds), so "
        "the rounds already run could not be continued as they were; start a new run "
        "with the rounds you want.", option="resume_rounds")
  return cfg, setup, longer
