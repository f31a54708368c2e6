"""Checkpoints of a run: the server state (orbax) and the run's metadata (JSON).

A checkpoint at ``rounds_done`` holds the `ServerState` (parameters, optimiser state,
round counter) and a JSON document with the run's configuration and every round's
record so far (including the noise multiplier, sampling rate and DP steps that the
privacy ledger composes, so epsilon is recomputed exactly on resume). The PRNG needs
no saving: every round's keys are ``fold_in(root(seed), round)``.

Writes go through `orbax.checkpoint.CheckpointManager`, which writes into a temporary
directory and renames it when complete, so a process killed mid-write leaves the
previous checkpoint intact and readable; the newest complete step is the one restored.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import orbax.checkpoint as ocp

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "RunCheckpointer",
]


class RunCheckpointer:
  """Saves and restores (state, metadata) pairs under ``directory``, keeping the newest
  ``max_to_keep`` complete checkpoints."""

  def __init__(self, directory: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, enable_async_checkpointing=False, create=True))

  def save(self, rounds_done: int, state: Any, meta: Dict[str, Any]) -> None:
    """Writes the checkpoint of ``rounds_done`` (blocks until it is complete)."""
    self._manager.save(int(rounds_done), args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))
    self._manager.wait_until_finished()

  def latest(self) -> Optional[int]:
    """The newest complete checkpoint's ``rounds_done``, or None."""
    self._manager.reload()
    return self._manager.latest_step()

  def steps(self) -> List[int]:
    """Every complete checkpoint's ``rounds_done``, oldest first."""
    self._manager.reload()
    return sorted(int(s) for s in self._manager.all_steps())

  def drop_after(self, step: int) -> None:
    """Deletes the complete checkpoints after ``step`` (a sweep resumed from an
    earlier round that all its members reached writes them again; a manager skips
    saving a step at or below its newest)."""
    for s in self.steps():
      if s > step:
        self._manager.delete(s)

  def restore_meta(self, step: Optional[int] = None) -> Dict[str, Any]:
    """The metadata of checkpoint ``step`` (default: the newest).

    Raises:
      FedJaxDpError: no complete checkpoint in the directory.
    """
    step = self._step(step)
    return self._manager.restore(step, args=ocp.args.Composite(
        meta=ocp.args.JsonRestore()))["meta"]

  def restore(self, target_state: Any, step: Optional[int] = None) -> Tuple[Any, Dict]:
    """``(state, meta)`` of checkpoint ``step``; ``target_state`` gives the structure,
    shapes, dtypes and placement (e.g. a freshly initialised state)."""
    step = self._step(step)
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target_state), meta=ocp.args.JsonRestore()))
    return out["state"], out["meta"]

  def _step(self, step: Optional[int]) -> int:
    step = self.latest() if step is None else step
    if step is None:
      raise FedJaxDpError(f"no complete checkpoint in {self.directory} to resume from.")
    return int(step)
