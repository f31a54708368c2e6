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
