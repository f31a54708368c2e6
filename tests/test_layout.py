"""The package layout of docs/architecture.md holds: each package imports only what
it may; nothing outside an algorithm's package (``fedjax_dp/algorithms/<name>/``) and
tests (``tests/algorithms/<name>/``) names it, and the engine names no algorithm's own
hyper-parameter field (adding an algorithm touches only its own package, its tests and
one registry line)."""

import ast
import os
import re

import pytest

from fedjax_dp.algorithms import registry

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "fedjax_dp")

# package (or top-level module) -> the packages of ours it may import (docs/architecture.md).
ALLOWED = {
    "validation": set(),
    "interrupts": set(),
    "compilation_cache": {"validation"},
    "checkpoint": {"validation"},
    "data": {"validation"},
    "models": {"validation"},
    # privacy/per_example computes convolutions as patches (models/conv_lowering).
    "privacy": {"models", "validation"},
    "federated": {"privacy", "validation"},
    "auditing": {"federated", "privacy", "validation"},
    "algorithms": {"federated", "privacy", "models", "data", "auditing", "validation"},
    # runs/progress names the compilation cache's folder in its "compiling" line;
    # runs/sweep_cli prints the run options of `fedjax-dp sweep --help` with cli_help.
    "runs": {"algorithms", "federated", "privacy", "data", "models", "checkpoint",
             "interrupts", "compilation_cache", "cli_help", "validation"},
    # The concise --help, rendered from the option dataclasses of runs.config and cli
    # (imported inside run_help, never at module load).
    "cli_help": {"cli", "runs"},
    "cli": {"runs", "algorithms", "auditing", "data", "federated", "compilation_cache",
            "cli_help", "cli_datasets", "validation"},
    # `fedjax-dp datasets`: the listing and `prepare NAME`.
    "cli_datasets": {"data", "validation"},
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
  assert not bad, f"imports outside the documented layout (docs/architecture.md): {bad}"


# Test files outside tests/algorithms/<name>/ that may name any registered algorithm (and
# why); adding an algorithm touches none of them. In fedjax_dp/ only the registry does.
ALLOWED_NAMING = {
    # End-to-end tests that run named jobs through the command line or the run loop:
    "tests/test_cli.py",                    # `fedjax-dp run --algorithm NAME` jobs
    "tests/test_cli_bad_input.py",          # the refusals of named algorithms' options
    "tests/test_cli_help.py",               # named algorithms' --help and exclusive options
    "tests/test_interrupts.py",             # a named job killed and resumed
    "tests/test_privacy_from_metrics.py",   # epsilon recomputed from named jobs' metrics
    "tests/behaviour/record.py",            # the behaviour baselines: named jobs
    # Per-algorithm benchmarks (benchmarks/NAME.py) and the regression tests of each
    # algorithm's formerly under-reported epsilon:
    "tests/test_benchmarks.py",
    "tests/privacy/test_guarantees.py",
}


def _algorithm_packages():
  """``{package: registered names}`` of the algorithms whose plug-ins live in
  ``fedjax_dp/algorithms/<package>/``."""
  out = {}
  for name in registry.names():
    mod = type(registry.get(name)).__module__.split(".")
    if mod[:2] == ["fedjax_dp", "algorithms"] and len(mod) > 3:
      out.setdefault(mod[2], set()).add(name)
  return out


def _reference_names():
  """The algorithms of the reference package, `registry.DEFAULT`'s (DP-FedAvg, its
  variants and FedAvg): the engine's and the run loop's tests build their rounds with
  them, as any test may; adding another algorithm does not touch those tests."""
  return next(names for names in _algorithm_packages().values()
              if registry.DEFAULT in names)


def _named(tree, names):
  """``[(line, what)]``: where the parsed module ``tree`` names one of ``names`` in code
  (identifiers, imports and string constants, not docstrings, which may cite a paper as
  a feature's source)."""
  from fedjax_dp.federated.server import SERVER_OPTIMIZERS
  pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\b")
  hits = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      if node.col_offset == 0 or _is_docstring(tree, node) or \
          node.value in SERVER_OPTIMIZERS:  # "fedavg" the server step, sgd(1.0)
        continue
      hits += [(node.lineno, repr(node.value))] if pattern.search(node.value) else []
    elif isinstance(node, (ast.Name, ast.Attribute)):
      ident = node.id if isinstance(node, ast.Name) else node.attr
      hits += [(node.lineno, ident)] if ident in names else []
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
      hits += [(node.lineno, f"import {m}") for m in modules
               if set(m.split(".")) & set(names)]
  return hits


def _outside_packages(top):
  """The .py files under ``top`` (``fedjax_dp`` or ``tests``) outside the algorithms'
  own folders (``<top>/algorithms/<package>/``), relative to the repository."""
  repo = os.path.dirname(ROOT)
  for d, _, files in os.walk(os.path.join(repo, top)):
    rel = os.path.relpath(d, repo).split(os.sep)
    if len(rel) >= 3 and rel[1] == "algorithms":
      continue
    for f in files:
      if f.endswith(".py"):
        yield os.path.relpath(os.path.join(d, f), repo).replace(os.sep, "/")


def _naming_hits(top, exempt=frozenset()):
  names = set(registry.names())
  hits = []
  for rel in _outside_packages(top):
    if rel in ALLOWED_NAMING or rel == "fedjax_dp/algorithms/registry.py":  # one line each
      continue
    stem = "_" + os.path.basename(rel)[:-3] + "_"
    # A test file named for an algorithm (tests/experiments/test_NAME_experiments.py)
    # is that algorithm's: it may name it.
    own = {n for n in names if f"_{n}_" in stem}
    tree = ast.parse(open(os.path.join(os.path.dirname(ROOT), rel)).read())
    hits += [f"{rel}:{line}: {what}"
             for line, what in _named(tree, names - set(exempt) - own)]
  return hits


def test_no_algorithm_is_named_outside_its_package():
  """The run loop, the CLI, the engine, privacy and the algorithms' shared modules
  (interface, audit_targets, ...) never special-case an algorithm by name: only its
  package (``fedjax_dp/algorithms/<name>/``) and the registry's one line do."""
  hits = _naming_hits("fedjax_dp")
  assert not hits, "algorithm names outside fedjax_dp/algorithms/<name>/:\n" + \
      "\n".join(hits)


def test_no_test_names_an_algorithm_outside_its_tests():
  """Adding an algorithm touches only its package, its tests and one registry line: the
  shared tests (test_algorithms.py, the audits, the engine's tests) get everything from
  the registry's hooks. Outside ``tests/algorithms/<name>/`` only the reference
  algorithms (`_reference_names`), a test file named for an algorithm, and the files of
  `ALLOWED_NAMING` (end-to-end jobs) name one."""
  hits = _naming_hits("tests", exempt=_reference_names())
  assert not hits, "algorithm names outside tests/algorithms/<name>/:\n" + \
      "\n".join(hits)


def _is_docstring(tree, node):
  for parent in ast.walk(tree):
    body = getattr(parent, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
        body[0].value is node:
      return True
  return False


def test_the_name_check_would_catch_a_special_case():
  name = registry.names()[-1]
  for code in (f"if cfg.algorithm == {name!r}:\n  pass\n",
               f"from fedjax_dp.algorithms.{name} import plugin\n",
               f"x = registry.{name}\n"):
    assert _named(ast.parse(code), {name}), code
  assert not _named(ast.parse(f"def f():\n  \"\"\"As {name} (paper).\"\"\"\n"), {name})


def _engine_fields():
  from fedjax_dp.federated.client import ClientHParams
  from fedjax_dp.federated.round import RoundHParams
  return set(RoundHParams._fields) | set(ClientHParams._fields)


def _algorithm_fields():
  """``{field: algorithm}``: every registered algorithm's own per-round hyper-parameter
  fields (its plug-in's `schedule_bounds` keys that are not engine fields)."""
  engine = _engine_fields()
  return {f: n for n in registry.names() for f in registry.get(n).schedule_bounds()
          if f not in engine}


def _field_hits(fields):
  pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(fields))) + r")\b")
  hits = []
  for part in ("federated", "privacy", "runs"):
    for path in _sources(part):
      for i, line in enumerate(open(path), 1):
        for m in pattern.findall(line):
          hits.append(f"{os.path.relpath(path, ROOT)}:{i}: {m} ({fields[m]}'s)")
  return hits


def test_the_engine_names_no_algorithms_hyper_parameter_field():
  """federated/, privacy/ and runs/ (code, comments and docstrings) never name an
  algorithm's own hyper-parameter field: the algorithm bounds them itself
  (`FederatedAlgorithm.schedule_bounds`, passed to `driver.check_schedule`)."""
  fields = _algorithm_fields()
  assert fields, "no algorithm declares fields of its own: the check would be vacuous"
  hits = _field_hits(fields)
  assert not hits, "an algorithm's hyper-parameter fields in the engine:\n" + \
      "\n".join(hits)


def test_pyright_baseline_holds_no_error_in_the_engine_and_only_shrinks():
  """CI's type check (.ci/pyright_check.py) fails on any file with more pyright errors
  than .ci/pyright_baseline.json allows; the engine, the privacy code and the run loop
  are held at zero there."""
  import json
  path = os.path.join(os.path.dirname(ROOT), ".ci", "pyright_baseline.json")
  with open(path) as f:
    baseline = json.load(f)
  assert all(isinstance(n, int) and n > 0 for n in baseline.values()), baseline
  engine = [f for f in baseline
            if f.startswith(("fedjax_dp/federated/", "fedjax_dp/privacy/", "fedjax_dp/runs/"))]
  assert not engine, f"pyright errors allowed in the engine: {engine}"
