"""Results files shared by the experiment scripts of every paper.

`Results` keeps one JSON file ``{"meta": ..., "runs": [...]}`` per figure or table and
rewrites it atomically after every run, so a killed sweep keeps what it finished and a
rerun with ``resume`` skips what is already there.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List


class Results:
  """A JSON list of run dicts, rewritten atomically (write + rename) after every run."""

  def __init__(self, path: str, meta: Dict[str, Any], resume: bool = False):
    self.path = path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    self.runs: List[Dict[str, Any]] = []
    if resume and os.path.exists(path):
      with open(path) as f:
        self.runs = json.load(f)["runs"]
    self.meta = meta

  def has(self, **key) -> bool:
    """Whether a saved run matches every ``key=value``."""
    return any(all(r.get(k) == v for k, v in key.items()) for r in self.runs)

  def add(self, run: Dict[str, Any]) -> None:
    """Appends ``run`` and saves at once."""
    self.runs.append(run)
    self.save()

  def save(self) -> None:
    """Writes the file atomically (non-JSON values become null)."""
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      json.dump({"meta": self.meta, "runs": self.runs}, f, indent=1,
                default=lambda o: None)
    os.replace(tmp, self.path)
