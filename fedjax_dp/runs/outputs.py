"""A run's files: its output folder (never an earlier run's), atomic writes, strict
JSON and timing summaries (its plots: `fedjax_dp.runs.plots`; its trackers:
`fedjax_dp.runs.writers`)."""

from __future__ import annotations

import logging
import math
import os
import shutil
from typing import Any, Dict, List, Optional, Tuple, TypeVar, overload

import numpy as np

__all__ = [
    "RUN_FILES", "holds_run", "fresh_out_dir", "broadcast_text", "write_atomic",
    "json_safe", "steady_time_per_round",
]

_log = logging.getLogger(__name__)

#: What marks a folder as holding a run (never overwritten without ``overwrite``).
RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoints", "curves.png", "partition.png",
             "tensorboard")


def holds_run(folder: str) -> bool:
  """Whether ``folder`` holds any of an earlier run's files."""
  return any(os.path.exists(os.path.join(folder, f)) for f in RUN_FILES)


def fresh_out_dir(out: str, overwrite: bool) -> str:
  """The folder a fresh run writes to: ``out`` if it holds no earlier run; with
  ``overwrite`` the earlier run's files are removed first; otherwise the first of
  ``<out>-2``, ``<out>-3``, ... that holds none (logged as a warning).

  In a multi-process run process 0 decides (and removes) and every process gets its
  answer (`broadcast_text`), so that all of them write into one folder; call it in
  every process at the same point.
  """
  import jax
  if jax.process_count() == 1:
    return _fresh_out_dir(out, overwrite)
  return broadcast_text(_fresh_out_dir(out, overwrite) if jax.process_index() == 0
                        else "")


def broadcast_text(text: str, max_bytes: int = 4096) -> str:
  """Process 0's ``text`` in every process of a multi-process run (a collective: every
  process calls it; the others' ``text`` is ignored).

  Raises:
    FedJaxDpError: process 0's text is longer than ``max_bytes`` in UTF-8.
  """
  from jax.experimental import multihost_utils

  from fedjax_dp.validation import FedJaxDpError
  raw = text.encode("utf-8")
  buf = np.zeros(max_bytes + 1, np.uint8)  # the extra byte: too long (agreed by all)
  if len(raw) > max_bytes:
    buf[max_bytes] = 1
  else:
    buf[:len(raw)] = np.frombuffer(raw, np.uint8)
  got = np.asarray(multihost_utils.broadcast_one_to_all(buf))
  if got[max_bytes]:
    raise FedJaxDpError(f"out must be at most {max_bytes} bytes long in a multi-process "
                        "run.", option="out")
  return bytes(got[:max_bytes]).rstrip(b"\0").decode("utf-8")


def _fresh_out_dir(out: str, overwrite: bool) -> str:
  """`fresh_out_dir` in one process."""
  if not holds_run(out):
    return out
  if overwrite:
    for f in RUN_FILES:
      path = os.path.join(out, f)
      if os.path.isdir(path):
        shutil.rmtree(path)
      elif os.path.exists(path):
        os.remove(path)
    return out
  base = out.rstrip(os.sep) or out
  k = 2
  while holds_run(f"{base}-{k}"):
    k += 1
  new = f"{base}-{k}"
  _log.warning("%s holds an earlier run; this run writes to %s (overwrite / --overwrite "
               "replaces the earlier run instead, --resume continues it).", out, new)
  return new


def write_atomic(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` through a temporary file and a rename."""
  with open(path + ".tmp", "w") as f:
    f.write(text)
  os.replace(path + ".tmp", path)


_K = TypeVar("_K")


@overload
def json_safe(v: Dict[_K, Any]) -> Dict[_K, Any]: ...
@overload
def json_safe(v: List[Any] | Tuple[Any, ...]) -> List[Any]: ...
@overload
def json_safe(v: Any) -> Any: ...


def json_safe(v: Any) -> Any:
  """``v`` with non-finite floats as None and numpy scalars as Python numbers (strict
  JSON has no inf/NaN); a dict stays a dict (same keys), a list or tuple becomes a
  list."""
  if isinstance(v, float) and not math.isfinite(v):
    return None
  if isinstance(v, dict):
    return {k: json_safe(x) for k, x in v.items()}
  if isinstance(v, (list, tuple)):
    return [json_safe(x) for x in v]
  if isinstance(v, (np.floating, np.integer)):
    return json_safe(v.item())
  return v


def steady_time_per_round(records: List[Dict[str, Any]]) -> Optional[float]:
  """Seconds per round after the first compiled block (which includes compilation),
  or None when the run had a single block."""
  walls = [r["wall_time_s"] for r in records]
  first_block = walls.count(walls[0]) if walls else 0
  if first_block == 0 or first_block == len(walls):
    return None
  return (walls[-1] - walls[0]) / (len(walls) - first_block)
