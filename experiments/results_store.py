"""Results files and figures shared by the experiment scripts of every paper.

`Results` keeps one JSON file ``{"meta": ..., "runs": [...]}`` per figure or table and
rewrites it atomically after every run, so a killed sweep keeps what it finished and a
rerun with ``resume`` skips what is already there.

Importing it also turns on JAX's persistent compilation cache
(`fedjax_dp.compilation_cache`; off with ``FEDJAX_DP_COMPILATION_CACHE=0``): every
experiment script imports this module (through its paper's ``common`` module) before it
compiles anything, so a rerun or a sweep over the same programs skips XLA compilation.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any, Dict, List, Optional

import numpy as np

from fedjax_dp import compilation_cache

compilation_cache.enable()


class Results:
  """A JSON list of run dicts, rewritten atomically (write + rename) after every run.

  Several processes may add to one file at once (two scripts filling different
  configurations of one figure): with ``resume`` (or after this process's first
  `add`), `add` re-reads the file under an exclusive lock and appends to what is there,
  and `has` sees the runs the others finished. Without ``resume`` the first `add`
  starts the file afresh.
  """

  def __init__(self, path: str, meta: Dict[str, Any], resume: bool = False):
    self.path = path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    self.runs: List[Dict[str, Any]] = []
    self._fresh = not resume
    if resume:
      self._reload()
    self.meta = meta

  def _reload(self) -> None:
    if os.path.exists(self.path):
      with open(self.path) as f:
        self.runs = json.load(f)["runs"]

  def has(self, **key) -> bool:
    """Whether a saved run (of any process) matches every ``key=value``."""
    if not self._fresh:
      self._reload()
    return any(all(r.get(k) == v for k, v in key.items()) for r in self.runs)

  def add(self, run: Dict[str, Any]) -> None:
    """Appends ``run`` to the file's runs (or, the first time without ``resume``, to
    none) and saves at once, under an exclusive lock."""
    with open(self.path + ".lock", "w") as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      if self._fresh:
        self.runs, self._fresh = [], False
      else:
        self._reload()
      self.runs.append(run)
      self.save()

  def save(self) -> None:
    """Writes the file atomically (non-JSON values become null)."""
    tmp = f"{self.path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump({"meta": self.meta, "runs": self.runs}, f, indent=1,
                default=lambda o: None)
    os.replace(tmp, self.path)


def plot(path: str, panels, title: str, per_row: Optional[int] = None) -> None:
  """One PNG of curves with optional spread bands.

  Args:
    path: the PNG to write.
    panels: ``[(ylabel, xlabel, [(label, xs, mean, std or None), ...]), ...]``, one axes
      each; ``std`` draws a mean +- std band.
    title: the figure's title.
    per_row: axes per row (default: all in one row).
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  cols = max(1, min(per_row or len(panels), len(panels)))
  rows = -(-len(panels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 4.1 * rows), squeeze=False)
  for ax, (ylabel, xlabel, curves) in zip(axes.flat, panels):
    for label, xs, mean, std in curves:
      ax.plot(xs, mean, marker="o", ms=2.5, label=label)
      if std is not None:
        ax.fill_between(xs, np.asarray(mean) - std, np.asarray(mean) + std, alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
