"""The package layout of README's "Layout" section holds: each package imports only what
it may, and nothing outside `fedjax_dp/algorithms/` names an algorithm (issue 14: adding
an algorithm touches only its own package, its tests and one registry line)."""

import ast
import os
import re

import pytest

from fedjax_dp.algorithms import registry

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "fedjax_dp")

# package (or top-level module) -> the packages of ours it may import (README "Layout").
ALLOWED = {
    "validation": set(),
    "interrupts": set(),
    "compilation_cache": {"validation"},
    "checkpoint": {"validation"},
    "data": {"validation"},
    "models": {"validation"},
    "privacy": {"validation"},
    "federated": {"privacy", "validation"},
    "auditing": {"federated", "privacy", "validation"},
    "algorithms": {"federated", "privacy", "models", "data", "auditing", "validation"},
    "runs": {"algorithms", "federated", "privacy", "data", "models", "checkpoint",
             "interrupts", "validation"},
    "cli": {"runs", "algorithms", "auditing", "data", "federated", "compilation_cache",
            "validation"},
}


def _sources(part):
  path = os.path.join(ROOT, part)
  if os.path.isfile(path + ".py"):
    yield path + ".py"
    return
  for d, _, files in os.walk(path):
    for f in files:
      if f.endswith(".py"):
        yield os.path.join(d, f)


def _imports(path):
  """The top-level packages of ours that ``path`` imports (also inside functions)."""
  out = set()
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.ImportFrom) and node.module and \
        node.module.startswith("fedjax_dp"):
      parts = node.module.split(".")
      if len(parts) > 1:
        out.add(parts[1])
      else:  # from fedjax_dp import x
        out.update(a.name for a in node.names)
    elif isinstance(node, ast.Import):
      out.update(a.name.split(".")[1] for a in node.names
                 if a.name.startswith("fedjax_dp."))
  return out


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_imports_follow_the_layout(part):
  bad = {}
  for path in _sources(part):
    extra = _imports(path) - ALLOWED[part] - {part}
    if extra:
      bad[os.path.relpath(path, ROOT)] = sorted(extra)
  assert not bad, f"imports outside README's layout: {bad}"


def test_no_algorithm_is_named_outside_its_package():
  """The run loop, the CLI, the engine and privacy never special-case an algorithm by
  name (code, not comments: docstrings may cite a paper as a feature's source)."""
  from fedjax_dp.federated.server import SERVER_OPTIMIZERS
  names = [n for n in registry.names()]
  pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
  hits = []
  for part in ALLOWED:
    if part == "algorithms":
      continue
    for path in _sources(part):
      tree = ast.parse(open(path).read())
      for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
          if node.col_offset == 0 or _is_docstring(tree, node) or \
              node.value in SERVER_OPTIMIZERS:  # "fedavg" the server step, sgd(1.0)
            continue
          if pattern.search(node.value):
            hits.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {node.value!r}")
        elif isinstance(node, (ast.Name, ast.Attribute)):
          ident = node.id if isinstance(node, ast.Name) else node.attr
          if ident in names:
            hits.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {ident}")
  assert not hits, "algorithm names outside fedjax_dp/algorithms/:\n" + "\n".join(hits)


def _is_docstring(tree, node):
  for parent in ast.walk(tree):
    body = getattr(parent, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
        body[0].value is node:
      return True
  return False


def test_the_name_check_would_catch_a_special_case():
  code = "if cfg.algorithm == 'padpfl':\n  pass\n"
  tree = ast.parse(code)
  consts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
  assert "padpfl" in consts and "padpfl" in registry.names()
