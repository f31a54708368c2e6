"""Shared helpers of the experiment-script tests."""

import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_script(folder: str, name: str):
  """``experiments/<folder>/<name>.py`` as a module (its ``main(argv)`` is the CLI)."""
  path = os.path.join(ROOT, "experiments", folder, f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def load_json(path):
  with open(path) as f:
    return json.load(f)


#: The first line of every scorecard table (experiments/scorecard.py's `render`).
SCORECARD_HEADER = "| # | claim | paper | ours: mean [95% CI] (n seeds) | verdict | cause |"


def scorecard_table(lines):
  """The rows of the first scorecard table (``| # | ...`` and the ``|`` lines after it)
  in ``lines``."""
  start = next(i for i, l in enumerate(lines) if l.startswith("| # |"))
  end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")),
             len(lines))
  return lines[start:end]
