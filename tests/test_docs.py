"""The documentation: the site builds with no warnings, and README.md and docs/ stay short,
readable and free of references a reader cannot follow."""

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# References to the project's internal tracker and notes ("issue 13", "note A3",
# "paper 002"): cite papers by title and venue, and say what changed instead.
INTERNAL_REF = re.compile(r"\b(issue|note) [A-Z]?\d+\b|\bpaper 00\d", re.IGNORECASE)


def _doc_files():
  files = [os.path.join(ROOT, "README.md")]
  files += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
  assert len(files) > 10, "docs/ is missing"
  return files


def test_readme_is_short():
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert len(lines) < 250, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("path", _doc_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_lines_are_short_and_references_are_public(path):
  with open(path, encoding="utf-8") as f:
    lines = f.read().splitlines()
  long = [i + 1 for i, line in enumerate(lines) if len(line) > 200]
  assert not long, f"lines over 200 characters: {long}"
  refs = [(i + 1, m.group(0)) for i, line in enumerate(lines)
          for m in INTERNAL_REF.finditer(line)]
  assert not refs, f"internal references (cite by title and venue instead): {refs}"


def _cli_reference():
  """docs/hooks/cli_reference.py, the hook that renders the command-line reference."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  path = os.path.join(ROOT, "docs", "hooks", "cli_reference.py")
  spec = importlib.util.spec_from_file_location("cli_reference", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_command_line_reference_lists_every_option():
  """The page --help points at holds the hook's markers, and what the hook renders names
  every option of `fedjax-dp run` and of every registered algorithm, with no internal
  reference (what the build would warn about)."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from fedjax_dp import cli_help  # pylint: disable=import-outside-toplevel
  from fedjax_dp.algorithms import registry  # pylint: disable=import-outside-toplevel
  from fedjax_dp.cli import (CommandLineOptions,  # pylint: disable=import-outside-toplevel
                             DistributedOptions)
  from fedjax_dp.runs.config import RunConfig  # pylint: disable=import-outside-toplevel
  hook = _cli_reference()
  with open(os.path.join(ROOT, "docs", hook.PAGE), encoding="utf-8") as f:
    page = f.read()
  for key in hook.MARKERS:
    assert hook._MARKER.format(key) in page  # pylint: disable=protected-access
  rendered = {key: "\n".join(render()) for key, render in
              hook._RENDER.items()}  # pylint: disable=protected-access
  flag = lambda name: "`--" + name.replace("_", "-")
  for cls in (RunConfig, CommandLineOptions, DistributedOptions):
    for f in dataclasses.fields(cls):
      if f.name not in cli_help.HIDDEN and f.name != "options":
        assert flag(f.name) in rendered["run-options"], f.name
  for name in registry.names():
    assert f"### {name}\n" in rendered["algorithm-options"], name
    for f in dataclasses.fields(registry.get(name).Options):
      assert "--" + f.name.replace("_", "-") in rendered["algorithm-options"], (name, f.name)
  assert "usage: fedjax-dp run" in rendered["run-help"]
  assert "docs/" + hook.PAGE in re.sub(r"\s", "", rendered["run-help"])  # --help points here
  for key, text in rendered.items():
    assert not INTERNAL_REF.search(text), (key, INTERNAL_REF.search(text).group(0))
    assert not re.search(r"[\x00-\x08\x0b-\x1f]", text), key


@pytest.mark.slow
def test_docs_build_strict(tmp_path):
  try:
    import mkdocs  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    import mkdocstrings  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    import material  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError as e:
    pytest.fail(f"the docs toolchain is not installed ({e}); run: pip install -e \".[dev]\"")
  env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
  proc = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
  warnings = [l for l in proc.stderr.splitlines() if "WARNING" in l or "ERROR" in l]
  assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
      warnings or proc.stderr.splitlines()[-30:])
  assert not warnings, "\n".join(warnings)
  assert (tmp_path / "site" / "index.html").exists()
  assert (tmp_path / "site" / "api" / "federated" / "index.html").exists()
  reference = (tmp_path / "site" / "how-to" / "configuration" / "index.html").read_text()
  assert "cli-reference:" not in reference and "--allow-divergence" in reference
