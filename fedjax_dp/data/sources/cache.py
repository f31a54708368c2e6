"""On-disk cache for derived arrays (``$FEDJAX_DP_CACHE`` or ``~/.cache/fedjax_dp``)."""

from __future__ import annotations

import os
import tempfile
import zipfile
from typing import Dict, Optional

import numpy as np

__all__ = [
    "CACHE_ENV", "cache_dir", "save_npz_atomic", "load_npz",
]

CACHE_ENV = "FEDJAX_DP_CACHE"


def cache_dir(override: Optional[str] = None) -> str:
  """The cache directory: ``override``, else ``$FEDJAX_DP_CACHE``, else
  ``~/.cache/fedjax_dp``. It is not created here."""
  if override:
    return os.path.abspath(os.path.expanduser(override))
  env = os.environ.get(CACHE_ENV)
  if env:
    return os.path.abspath(os.path.expanduser(env))
  return os.path.join(os.path.expanduser("~"), ".cache", "fedjax_dp")


def save_npz_atomic(path: str, arrays: Dict[str, np.ndarray]) -> None:
  """Writes ``arrays`` as an uncompressed .npz at ``path`` atomically.

  The data goes to a temporary file in the same directory, is flushed to disk and
  then renamed over ``path`` with ``os.replace``, so a reader never sees a partial
  file and concurrent writers do not corrupt each other.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                             dir=directory)
  try:
    with os.fdopen(fd, "wb") as f:
      # No pickles (`load_npz` reads none); named, so that no array is taken for it.
      np.savez(f, allow_pickle=False, **arrays)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def load_npz(path: str) -> Optional[Dict[str, np.ndarray]]:
  """Loads every array of an .npz (no pickles), or None if it is missing or unreadable."""
  if not os.path.exists(path):
    return None
  try:
    with np.load(path, allow_pickle=False) as z:
      return {k: z[k] for k in z.files}
  except (OSError, ValueError, EOFError, zipfile.BadZipFile):
    return None
