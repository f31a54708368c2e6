"""The one driver of runs and sweeps: a session trains its members in lockstep.

A *member* is one configured training run (`Member`: its algorithm, ledger,
controller, records, files). `fedjax_dp.runs.run` is a session of one member and
`fedjax_dp.runs.sweep.run_sweep` a session of many; every step is implemented once,
here:

* blocks: each member's controller chooses the next rounds (members must agree,
  `fedjax_dp.runs.program.check_blocks`); each schedule is checked
  (`fedjax_dp.federated.driver.check_schedule` with the algorithm's
  ``schedule_bounds``) and run in compiled blocks of ``block_size`` rounds with
  evaluation inside (`fedjax_dp.runs.program.Lockstep`: one member runs the block
  function itself, several run it vmapped);
* records (`write_records`): the block's metrics and evaluation fields, the rounds
  composed in the member's ledger (`fedjax_dp.federated.driver.account_block`, the one
  ledger feed), ``wall_time_s``, the accounting and controller fields; streamed to
  ``metrics.jsonl`` (one JSON object per round, flushed after every compiled block) and
  the trackers (``--logger``);
* checkpoints (`checkpoint`): after every compiled block (and before the first) each
  member's server state, records and per-client ledger (`fedjax_dp.checkpoint`);
* SIGTERM / Ctrl-C (`fedjax_dp.interrupts`): a compiled block, its records and its
  checkpoints are one critical section, so a signal lets the block in progress finish
  and be written, then stops the session; its members are summarised at their newest
  checkpoint and can be resumed;
* resume (`read_checkpoint`, `start_member`): members restored from their checkpoints,
  metrics.jsonl rewritten from them (`open_outputs`), ledgers and controllers replayed;
* divergence (`fedjax_dp.runs.divergence`): after every compiled block each member's
  new records are checked; a member that diverged stops there (its records,
  checkpoint and summary kept, ``summary["diverged"]``) unless ``allow_divergence``,
  while the others continue; the session ends when every member has stopped;
* the end (`finish`): each member's final evaluation, ``summary.json`` and
  ``curves.png``.

``wall_time_s`` in a record is the time (seconds since training started in this
session) at which the compiled block that ran the round had its records, shared by the
block's rounds (`fedjax_dp.runs.summary.block_rounds`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from fedjax_dp.algorithms.interface import Block
from fedjax_dp.federated import PopulationData, driver, sharding
from fedjax_dp.federated.population import check_population
from fedjax_dp.interrupts import GracefulInterrupts, RunInterrupted
from fedjax_dp.runs import canary_report, divergence, outputs, plots
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.runs.member import (METRICS_FORMAT, Member, Resumed, close, evaluators,
                                   open_outputs, read_checkpoint, start_member)
from fedjax_dp.runs import progress as _progress
from fedjax_dp.runs.program import Lockstep, check_blocks, check_same_structure, full_schedule
from fedjax_dp.runs.summary import common_summary, label_summary, published_summary
from fedjax_dp.validation import check_int

__all__ = [
    "METRICS_FORMAT", "Resumed", "read_checkpoint", "Member", "evaluators",
    "start_member", "open_outputs", "close", "Progress", "Session", "execute", "train",
    "run_blocks", "write_records", "checkpoint", "roll_back", "finish",
    "check_divergence",
]

logger = logging.getLogger("fedjax_dp")

# The progress display (a tqdm bar on a terminal, plain lines elsewhere) lives in
# `fedjax_dp.runs.progress`; `Progress` stays importable from here.
Progress = _progress.Progress


@dataclasses.dataclass
class Session:
  """What the members of one training session share while they train.

  Attributes:
    members: the members, in order.
    lockstep: their compiled block and device states.
    population: the device population (a block may bring its own).
    eval_data: the evaluation data on the devices (shared by the members).
    interrupts: the signal handlers (`GracefulInterrupts`).
    progress: the progress bar, or None.
    t_train: ``time.perf_counter()`` when training started in this session.
    kept, kept_rounds: the programs' states and the rounds of the newest checkpoint
      (what an interrupted session keeps).
    interrupted: the signal that stopped the session, or None.
    diverged: ``{member index: summary.json's "diverged"}`` of the members that
      diverged (`check_divergence`).
    frozen: ``{member index: server state}`` of the members stopped by divergence:
      their state at the end of that block (a sweep computes their later rounds with
      the others' but records and checkpoints none of them).
  """
  members: List[Member]
  lockstep: Lockstep
  population: PopulationData
  eval_data: Any
  interrupts: GracefulInterrupts
  progress: Optional[Progress] = None
  t_train: float = 0.0
  kept: List[Any] = dataclasses.field(default_factory=list)
  kept_rounds: int = 0
  interrupted: Optional[RunInterrupted] = None
  diverged: Dict[int, Dict[str, Any]] = dataclasses.field(default_factory=dict)
  frozen: Dict[int, Any] = dataclasses.field(default_factory=dict)


def execute(members: List[Member], block_fn: Callable, first: Sequence[Optional[Block]], *,
            population: PopulationData, mesh: Optional[jax.sharding.Mesh],
            interrupts: GracefulInterrupts, t_start: float, progress: bool = False,
            group: Optional[int] = None) -> Session:
  """Trains ``members`` in lockstep from their controllers' ``first`` blocks to the
  end (or a signal), then finishes each (`finish`).

  Args:
    members: from `start_member` (files opened with `open_outputs`, or none).
    block_fn: the compiled block (`fedjax_dp.federated.make_block_fn` with member 0's
      round function and evaluator); vmapped for several members.
    first: each member's first `Block` (``controller.next_block``), or Nones.
    population: the device population.
    mesh: the client mesh (None: one device).
    interrupts: the installed signal handlers.
    t_start: ``time.perf_counter()`` when the run or sweep was called (its summaries'
      ``wall_time_s``).
    progress: show a progress bar (primary process only).
    group: at most this many members per vmapped program (default: all).

  Returns:
    The `Session` (``interrupted``: the signal that stopped it, or None); each member's
    ``state``, ``records``, ``summary`` and ``ledger`` are final.

  Raises:
    FedJaxDpError: members out of lockstep, a bad schedule, or rounds reporting what
      the ledger cannot compose.
  """
  lockstep = Lockstep(block_fn, [m.state for m in members], [m.root for m in members],
                      mesh, group)
  s = Session(members, lockstep, population, members[0].device_evaluator.data, interrupts)
  s.kept, s.kept_rounds = lockstep.snapshot(), members[0].done_before
  if progress and sharding.is_primary():
    s.progress = Progress(members)
  s.interrupted = train(s, first)
  finish(s, t_start)
  return s


def train(s: Session, first: Sequence[Optional[Block]]) -> Optional[RunInterrupted]:
  """Runs the session's blocks from ``first`` until every controller is done; returns
  the interrupt that stopped it, or None.

  Multi-process: a signal (SLURM's SIGTERM reaches the processes at slightly different
  times) is only noted during training, and all processes agree after each block
  whether one of them received it (`checkpoint`); a process stopping alone would leave
  the others waiting in the next block's collectives.
  """
  members = s.members
  multi_process = jax.process_count() > 1
  try:
    with s.interrupts.critical() if multi_process else contextlib.nullcontext():
      if not members[0].resumed and any(m.checkpointer for m in members):
        checkpoint(s, 0)  # round 0: a session stopped before its first block can resume
      s.t_train = time.perf_counter()
      done = members[0].done_before
      blocks = check_blocks(members, first, done)  # [] when every member is done
      while blocks:
        done += run_blocks(s, blocks, done)
        if len(s.frozen) == len(members):  # every member diverged and stopped
          break
        blocks = check_blocks(members, _next_blocks(s, done), done)
  except RunInterrupted as e:
    return e
  finally:
    if s.progress is not None:
      s.progress.close()
    for m in members:
      if m.metrics_file is not None:
        m.metrics_file.close()
  return None


def _next_blocks(s: Session, done: int) -> List[Optional[Block]]:
  """Each member's next block after ``done`` rounds; a member stopped by divergence
  runs along with a live member's block (its rounds are not recorded)."""
  live = [i for i in range(len(s.members)) if i not in s.frozen]
  blocks = {i: s.members[i].controller.next_block(done, s.members[i].planned)
            for i in live}
  return [blocks[i] if i in blocks else blocks[live[0]] for i in range(len(s.members))]


def run_blocks(s: Session, blocks: Sequence[Block], done: int) -> int:
  """The members' controller blocks after ``done`` rounds (in lockstep): checked as
  `fedjax_dp.federated.driver.run_rounds` checks its arguments (before anything is
  compiled), then run in compiled blocks of ``block_size`` rounds, each with its
  records and checkpoints as one critical section, then checked for divergence
  (`check_divergence`). Returns the rounds run: fewer than the block's when every
  member has stopped by divergence.

  Raises:
    FedJaxDpError: bad rounds, block size or evaluation interval, a schedule shorter
      than the rounds or out of bounds, schedules that do not stack, or an inconsistent
      population.
  """
  members, blk = s.members, blocks[0]
  rounds = check_int("rounds", blk.rounds, minimum=1)
  block_size = check_int("block_size", blk.block_size, minimum=1)
  eval_every = check_int("eval_every", blk.eval_every, minimum=1)
  population = s.population if blk.population is None else blk.population
  schedules = [full_schedule(b.hparams, rounds) for b in blocks]
  for m, sch in zip(members, schedules):
    driver.check_schedule(sch, m.cfg.plugin.schedule_bounds())
  check_same_structure(members, schedules)
  check_population(population)
  pos = 0
  while pos < rounds:
    length = min(block_size, rounds - pos)
    t = np.arange(pos + 1, pos + length + 1)  # rounds completed after each step
    eval_mask = (t % eval_every == 0) | (t == rounds)
    hps = [jax.tree_util.tree_map(lambda a: a[pos:pos + length], sch) for sch in schedules]
    # A signal waits for the block, its records and its checkpoints (never half of
    # them): what was computed is kept.
    starts = [len(m.written) for m in members]
    with s.interrupts.critical():
      outs = s.lockstep.run(population, hps, eval_mask, s.eval_data)
      for i, (m, (metrics, evals)) in enumerate(zip(members, outs)):
        if i not in s.frozen:  # a stopped member's rounds are not recorded
          write_records(s, m, metrics, evals, eval_mask)
      pos += length
      if s.progress is not None:
        s.progress.update(members, length)
      checkpoint(s, done + pos)
    check_divergence(s, starts, done + pos)
    if len(s.frozen) == len(members):
      break
  return pos


def check_divergence(s: Session, starts: Sequence[int], rounds_done: int) -> None:
  """Checks each live member's records written since ``starts[i]`` (`fedjax_dp.runs.
  divergence.detect`); a member that diverged gets ``s.diverged[i]`` (summary.json's
  ``diverged``: ``round``, ``reason``, ``detail``, ``stopped``, ``rule``,
  ``message``), once, and stops after this block (``s.frozen``) unless its
  ``allow_divergence``. While training goes on (``allow_divergence``, or the other
  members of a sweep) the message is logged as a warning (logger ``fedjax_dp``);
  summary.json and the command's report say it at the end."""
  for i, m in enumerate(s.members):
    if i in s.diverged:
      continue
    found = divergence.detect(m.written, starts[i])
    if found is None:
      continue
    stop = not m.cfg.allow_divergence
    z = None if m.z is None else float(np.min(m.z))
    spec = m.alg.privacy
    text = divergence.message(found, rounds_done, z, spec.clip_norm if spec else None,
                              m.cfg.target_epsilon, stop)
    s.diverged[i] = dict(found, stopped=stop, rounds_done=rounds_done,
                         rule=divergence.RULE, message=text)
    if stop:
      s.frozen[i] = s.lockstep.member_state(i)
    if sharding.is_primary() and len(s.frozen) < len(s.members):  # training goes on
      logger.warning("%s%s", f"{m.name}: " if m.name else "", text)


def write_records(s: Session, m: Member, metrics: Any, evals: Sequence[np.ndarray],
                  eval_mask: np.ndarray) -> None:
  """Member ``m``'s records of one compiled block (``metrics``: its `RoundMetrics`,
  leaves ``[L]``; ``evals``: its evaluation values ``[L]``): what
  `fedjax_dp.federated.driver.block_records` makes of the block (the `RoundMetrics`
  fields, ``test_<name>`` on the evaluated rounds, the rounds composed in its ledger by
  `driver.account_block` with ``epsilon`` after each), ``wall_time_s``, then its
  accounting and controller fields; appended to its records and written to its
  metrics.jsonl (flushed) and trackers.

  Raises:
    FedJaxDpError: the rounds report what its ledger cannot compose.
  """
  block = driver.block_records(metrics, m.ledger, evals, eval_mask,
                               m.device_evaluator.names, label=m.name)
  # Per block, not per round: the rounds of a compiled block finish together.
  wall = time.perf_counter() - s.t_train
  for rec in block:
    rec["wall_time_s"] = wall
    m.fresh.append(rec)
    out = dict(rec)
    out.update(m.accounting)
    out.update(m.controller.round_fields(rec))
    out = outputs.json_safe(out)
    m.written.append(out)  # the checkpoint keeps every field (resuming needs them)
    if m.metrics_file is not None:
      m.metrics_file.write(json.dumps(m.published(out)) + "\n")
    m.trackers.write_scalars(out["round"], m.published(out))  # primary only (else none)
  if m.metrics_file is not None:
    m.metrics_file.flush()


def checkpoint(s: Session, rounds_done: int) -> None:
  """Every member's checkpoint after ``rounds_done`` rounds (state, records, per-client
  ledger; for those with files), and what an interrupted session keeps moves to it in
  the same critical section. Multi-process: then every process learns whether any of
  them received a signal, and all stop together.

  Raises:
    RunInterrupted: multi-process, a process received a signal.
  """
  snapshot = s.lockstep.snapshot()
  ledgers = [m.ledger.to_dict() if m.ledger is not None and m.per_client else None
             for m in s.members]
  # A checkpoint is written whole (orbax renames it when complete).
  with s.interrupts.critical():
    for i, (m, per_client) in enumerate(zip(s.members, ledgers)):
      if i in s.frozen:  # stopped by divergence: its newest checkpoint stays
        continue
      if m.checkpointer is not None:
        m.checkpointer.save(rounds_done, s.lockstep.member_state(i, snapshot),
                            m.checkpoint_meta(rounds_done, per_client))
      m.kept_per_client = per_client
    s.kept, s.kept_rounds = snapshot, rounds_done
  if jax.process_count() > 1:  # every process stops after the same block
    signum = _signal_of_any_process(s.interrupts.received)
    if signum:
      raise RunInterrupted(signum)


def roll_back(s: Session) -> None:
  """After a signal: every member back to the newest checkpoint (its state, its
  rounds' records, metrics.jsonl rewritten to match, its ledger and controller)."""
  primary = sharding.is_primary()
  for i, m in enumerate(s.members):
    m.state = s.frozen[i] if i in s.frozen else s.lockstep.member_state(i, s.kept)
    del m.written[s.kept_rounds:]
    m.records = [dict(r) for r in m.written]
    if m.folder and primary:
      outputs.write_atomic(os.path.join(m.folder, "metrics.jsonl"),
                           "".join(json.dumps(m.published(r)) + "\n" for r in m.written))
    spec = m.alg.privacy
    if spec is not None and m.ledger is not None:
      m.ledger = run_privacy.restored_ledger(spec, m.cfg.delta, m.written,
                                             m.kept_per_client)
    m.controller = m.new_controller(m.written)


def finish(s: Session, t_start: float) -> None:
  """Each member's final state, evaluation and summary (with ``summary_extra``; an
  interrupted session's at its newest checkpoint, `roll_back`), written to its
  summary.json, curves.png and trackers (primary process, members with files)."""
  members = s.members
  if s.interrupted is not None:
    roll_back(s)
  else:
    for i, m in enumerate(members):
      m.state = s.frozen[i] if i in s.frozen else s.lockstep.member_state(i)
      m.records = [dict(r) for r in m.saved_records] + m.fresh
  # One program: the same function for all.
  eval_jit = jax.jit(members[0].device_evaluator.fn)
  finals = []
  for m in members:
    values = eval_jit(m.state.params, s.eval_data)
    finals.append({k: float(v) for k, v in zip(m.device_evaluator.names, values)})
  wall = time.perf_counter() - t_start
  for i, (m, final) in enumerate(zip(members, finals)):
    plugin = m.cfg.plugin
    summary = common_summary(m.cfg, m.setup, m.alg, m.z, m.ledger, m.records, m.written,
                             final, m.labels, m.planned, m.guarded, s.interrupted, wall)
    if s.interrupted is not None and m.resume_command and summary["interrupted"]["resume"]:
      summary["interrupted"]["resume"] = m.resume_command
    summary["diverged"] = s.diverged.get(i)
    summary.update(plugin.summary_fields(m.alg, m.setup, m.controller, m.written))
    summary.update(m.summary_extra)
    summary.update(canary_report.fields(m.alg, m.root, m.state, m.cfg.delta,
                                        summary["epsilon"]))
    m.summary = label_summary(summary, plugin, m.setup.data, final)
    released = published_summary(m.summary, m.cfg)
    if m.folder and sharding.is_primary():
      outputs.write_atomic(os.path.join(m.folder, "summary.json"),
                           json.dumps(outputs.json_safe(released), indent=2))
      plots.plot_run([m.published(r) for r in m.written], outputs.json_safe(released),
                     os.path.join(m.folder, "curves.png"))
      canary_report.plot_canaries(released, os.path.join(m.folder, "canaries.png"))
      m.trackers.write_summary(released)


def _signal_of_any_process(received: Optional[int]) -> int:
  """The signal number received by the lowest-indexed process that received one (0:
  none), the same in every process of a multi-process run (a collective: all processes
  call it, after every block)."""
  from jax.experimental import multihost_utils
  got = np.asarray(multihost_utils.process_allgather(np.int32(received or 0)))
  hits = got[got != 0]
  return int(hits[0]) if hits.size else 0
