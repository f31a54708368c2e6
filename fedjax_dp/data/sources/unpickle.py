"""A restricted unpickler for the data files shipped inside registry packages.

Unpickling runs code named by the file, so a pickle from a package is read with
`RestrictedUnpickler`, which resolves only an allow-list of harmless globals:

* NumPy array / dtype / scalar reconstruction (``numpy.ndarray``, ``numpy.dtype``,
  ``numpy[._]core.multiarray._reconstruct`` and ``.scalar``);
* ``copyreg._reconstructor``, ``builtins.object``, ``builtins.slice`` and
  ``_codecs.encode`` (how protocol-2 pickles spell objects, slices and bytes).

Any ``pandas.*`` global becomes an inert stub class (`PandasStub`) that just records
its constructor arguments and ``__setstate__`` state, so pandas-1.x DataFrames can
be read without pandas (and without pandas' own version-fragile unpickling);
``pandas...._new_Index`` becomes ``dict``. Every other global (``os.system``,
``builtins.eval``, ``subprocess.Popen``, ...) raises ``pickle.UnpicklingError``.

This module is the only place that unpickles; nothing in fedjax_dp calls
``pickle.load`` / ``pickle.loads``.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Dict, Protocol, Tuple

import numpy as np

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "PandasStub", "RestrictedUnpickler", "PickleSource", "restricted_load",
    "restricted_loads", "frame_columns",
]

_NP_CORE = "numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray"

# (module, name) as written in the pickle -> (module, name) actually resolved.
_ALLOWED: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("copy_reg", "_reconstructor"): ("copyreg", "_reconstructor"),
    ("copyreg", "_reconstructor"): ("copyreg", "_reconstructor"),
    ("__builtin__", "object"): ("builtins", "object"),
    ("builtins", "object"): ("builtins", "object"),
    ("__builtin__", "slice"): ("builtins", "slice"),
    ("builtins", "slice"): ("builtins", "slice"),
    ("_codecs", "encode"): ("_codecs", "encode"),
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"): (_NP_CORE, "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): (_NP_CORE, "_reconstruct"),
    ("numpy.core.multiarray", "scalar"): (_NP_CORE, "scalar"),
    ("numpy._core.multiarray", "scalar"): (_NP_CORE, "scalar"),
}


class PandasStub:
  """Inert stand-in for a pickled pandas object.

  Attributes:
    args: positional arguments the pickle passed to the constructor, if any.
    state: the object state set by the pickle (``__setstate__``), or None.
  """

  pandas_name = ""

  def __init__(self, *args, **kwargs):
    self.args = args
    self.kwargs = kwargs
    self.state = None

  def __setstate__(self, state):
    self.state = state

  def __repr__(self):
    return f"<PandasStub {self.pandas_name}>"


_STUBS: Dict[Tuple[str, str], type] = {}


def _stub_class(module: str, name: str) -> type:
  key = (module, name)
  if key not in _STUBS:
    _STUBS[key] = type(name, (PandasStub,), {"pandas_name": f"{module}.{name}"})
  return _STUBS[key]


def _new_index(cls, d):  # pandas.core.indexes.base._new_Index(cls, d)
  del cls
  return dict(d)


class RestrictedUnpickler(pickle.Unpickler):
  """`pickle.Unpickler` that resolves only the allow-listed globals (module docstring)."""

  def find_class(self, module: str, name: str) -> Any:
    if module == "pandas" or module.startswith("pandas."):
      return _new_index if name == "_new_Index" else _stub_class(module, name)
    target = _ALLOWED.get((module, name))
    if target is None:
      raise pickle.UnpicklingError(
          f"refusing to unpickle global {module}.{name}: only numpy arrays/dtypes, "
          "builtin containers and (stubbed) pandas objects are allowed.")
    return super().find_class(*target)


class PickleSource(Protocol):
  """What `pickle.Unpickler` reads from: a binary file (an open file, `gzip.GzipFile`,
  `io.BytesIO`, ...) with ``read(n)`` and ``readline()`` returning bytes."""

  def read(self, n: int, /) -> bytes: ...

  def readline(self) -> bytes: ...


def restricted_load(file: PickleSource, encoding: str = "latin1") -> Any:
  """Reads one pickle from ``file`` with `RestrictedUnpickler`.

  Args:
    file: a binary file object positioned at the pickle.
    encoding: how Python-2 ``str`` objects are decoded (``"latin1"`` keeps NumPy
      buffers intact).

  Raises:
    pickle.UnpicklingError: if the pickle names a global outside the allow-list.
  """
  return RestrictedUnpickler(file, encoding=encoding).load()


def restricted_loads(data: bytes, encoding: str = "latin1") -> Any:
  """`restricted_load` from bytes."""
  return restricted_load(io.BytesIO(data), encoding=encoding)


def frame_columns(frame: Any) -> Dict[str, np.ndarray]:
  """Extracts the columns of a stubbed pandas-1.x ``DataFrame``.

  A pickled DataFrame's state holds its ``BlockManager`` (under ``_data`` or
  ``_mgr``) whose state is ``(axes, block_values, block_items, ...)``; each block
  is a 2-D array with one row per column named in the matching items.

  Args:
    frame: a `PandasStub` produced for ``pandas.core.frame.DataFrame``.

  Returns:
    ``{column_name: contiguous 1-D array}`` (dtype as stored).

  Raises:
    FedJaxDpError: if the state does not have that layout.
  """
  try:
    st = frame.state
    mgr = st["_data"] if "_data" in st else st["_mgr"]
    _axes, values, items, *_ = mgr.state
    out = {}
    for vals, its in zip(values, items):
      names = its["data"] if isinstance(its, dict) else its
      for col, row in zip(names, np.asarray(vals)):
        out[str(col)] = np.ascontiguousarray(row)
    return out
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    raise FedJaxDpError(
        f"unexpected pickled DataFrame layout ({type(e).__name__}: {e}); expected a "
        "pandas-1.x BlockManager state.") from e
