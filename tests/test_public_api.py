"""The public packages' ``__all__``: every package declares one, every name in it
resolves, and ``from package import *`` brings in exactly those names, none of which
replaces a Python built-in (``round``, ``sum``, ``filter``, ...)."""

import builtins
import importlib
import pathlib

import pytest

import fedjax_dp

_ROOT = pathlib.Path(fedjax_dp.__file__).parent


def _public_packages():
  """Every package under fedjax_dp (a folder with an ``__init__.py``), none private."""
  names = []
  for init in sorted(_ROOT.rglob("__init__.py")):
    parts = init.parent.relative_to(_ROOT.parent).parts
    if not any(p.startswith("_") for p in parts):
      names.append(".".join(parts))
  return names


PACKAGES = _public_packages()

# Built-ins a star import must never replace (the ones a user is likely to call).
_BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_"))


def test_the_main_packages_are_found():
  for name in ("fedjax_dp", "fedjax_dp.privacy", "fedjax_dp.data", "fedjax_dp.data.sources",
               "fedjax_dp.models", "fedjax_dp.algorithms", "fedjax_dp.algorithms.dp_fedavg",
               "fedjax_dp.runs", "fedjax_dp.auditing", "fedjax_dp.federated"):
    assert name in PACKAGES


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_declared_and_every_name_resolves(name):
  module = importlib.import_module(name)
  assert hasattr(module, "__all__"), f"{name} has no __all__"
  names = list(module.__all__)
  assert all(isinstance(n, str) for n in names), name
  assert len(names) == len(set(names)), f"{name}.__all__ names something twice"
  missing = [n for n in names if not hasattr(module, n)]
  assert not missing, f"{name}.__all__ names what it does not define: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_star_import_brings_only_all_and_shadows_no_builtin(name):
  module = importlib.import_module(name)
  namespace: dict = {}
  exec(f"from {name} import *", namespace)  # pylint: disable=exec-used
  got = set(namespace) - {"__builtins__"}
  assert got == set(getattr(module, "__all__", got)), name
  shadowed = sorted(got & _BUILTINS)
  assert not shadowed, f"from {name} import * replaces the built-in(s) {shadowed}"

