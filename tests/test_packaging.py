"""Packaging metadata (pyproject.toml) against the files and messages it must agree with:
the license, the PEP 561 marker, the extras that error messages name, the ``dev`` extra
that CI installs, and the version written in several places."""

import pathlib
import re

import pytest

import fedjax_dp

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "fedjax_dp"


@pytest.fixture(scope="module")
def project():
  with open(REPO / "pyproject.toml", "rb") as f:
    return tomllib.load(f)


def _name(requirement: str) -> str:
  """The normalised distribution name of a requirement (``Foo_bar[x]>=1`` -> ``foo-bar``)."""
  match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
  assert match, requirement
  return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def test_license_file_is_the_apache_license(project):
  text = (REPO / "LICENSE").read_text(encoding="utf-8")
  head = text.lstrip().splitlines()
  assert head[0].strip() == "Apache License"
  assert head[1].strip() == "Version 2.0, January 2004"
  assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
  assert "END OF TERMS AND CONDITIONS" in text
  assert project["project"]["license"] == "Apache-2.0"
  assert "LICENSE" in project["project"]["license-files"]


def test_py_typed_ships_as_package_data(project):
  assert (PACKAGE / "py.typed").is_file()
  package_data = project["tool"]["setuptools"]["package-data"]
  assert "py.typed" in package_data["fedjax_dp"]


def test_every_extra_named_in_a_message_exists(project):
  extras = project["project"]["optional-dependencies"]
  named = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    for group in re.findall(r"fedjax_dp\[([A-Za-z0-9_,\- ]+)\]", path.read_text("utf-8")):
      for extra in group.split(","):
        named.setdefault(extra.strip(), path.relative_to(REPO).as_posix())
  assert {"tfds", "mnist", "trackers"} <= set(named)  # the messages of the lazy imports
  unknown = {e: p for e, p in named.items() if e not in extras}
  assert not unknown, f"extras named in messages but not in pyproject.toml: {unknown}"


def test_dev_installs_every_other_extra(project):
  extras = project["project"]["optional-dependencies"]
  assert {"tfds", "mnist", "trackers", "notebooks", "docs", "dev"} <= set(extras)
  dev = {_name(r): r.replace(" ", "") for r in extras["dev"]}
  for extra, requirements in extras.items():
    if extra == "dev":
      continue
    for r in requirements:
      assert _name(r) in dev, f"dev lacks {r!r} of the {extra!r} extra"
      assert dev[_name(r)] == r.replace(" ", ""), (
          f"dev has {dev[_name(r)]!r}, the {extra!r} extra {r!r}: keep them the same")


def test_the_default_install_leaves_the_extras_out(project):
  default = {_name(r) for r in project["project"]["dependencies"]}
  for extra, requirements in project["project"]["optional-dependencies"].items():
    for r in requirements:
      assert _name(r) not in default, f"{r!r} ({extra}) is also a default dependency"


def test_one_version_everywhere(project):
  version = project["project"]["version"]
  assert fedjax_dp.__version__ == version
  changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
  assert re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog,
                   re.MULTILINE), f"CHANGELOG.md has no section for {version}"
  assert "## [Unreleased]" in changelog
  citation = (REPO / "CITATION.cff").read_text(encoding="utf-8")
  assert re.search(rf'^version: "?{re.escape(version)}"?$', citation, re.MULTILINE)
  assert re.search(r'^cff-version: "?1\.2\.0"?$', citation, re.MULTILINE)
  assert re.search(r'^license: "?Apache-2\.0"?$', citation, re.MULTILINE)
