"""Your own federated data from one ``.npz`` file (``--dataset npz:PATH``).

Layout: one example per row, its client named in ``client_id``::

  key          shape / dtype                          required
  -----------  -------------------------------------  --------
  x            [N, *feature_shape], any real dtype     yes   (stored as float32)
  y            [N], integer class labels               yes   (in [0, num_classes))
  client_id    [N], integers or strings                yes   (one client per distinct id)
  test_x       [M, *feature_shape]                     no    (central test set, with test_y)
  test_y       [M], integer labels                     no
  num_classes  scalar integer                          no    (default: max label + 1)
  name         scalar string                           no    (default: the file's stem)

Write one with NumPy alone (no pickled objects: strings as a NumPy string array)::

  np.savez("mine.npz", x=x, y=y, client_id=np.asarray(ids, dtype=str),
           test_x=tx, test_y=ty, num_classes=10)

or from a `FederatedData` with `save_npz`. `fedjax_dp.data.load_dataset("npz:mine.npz")`
(and ``fedjax-dp run --dataset npz:mine.npz``) gives one client per distinct
``client_id`` (the natural partition, clients in sorted id order); any other
``partition`` (``iid``, ``dirichlet:0.1``, ...) pools the examples and re-partitions
them, by default over as many clients as the file has. Without ``test_x`` the run
evaluates on the training data (a diagnostic, not a DP release).

Nothing is pickled or executed: the file is read with ``allow_pickle=False``.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from typing import Optional

import numpy as np

from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "PREFIX", "REQUIRED_KEYS", "OPTIONAL_KEYS", "LAYOUT", "NpzData", "path_of",
    "read_npz", "save_npz",
]

PREFIX = "npz:"
REQUIRED_KEYS = ("x", "y", "client_id")
OPTIONAL_KEYS = ("test_x", "test_y", "num_classes", "name")
LAYOUT = ("x [N, *feature_shape] float, y [N] int, client_id [N] int or str; optional "
          "test_x [M, *feature_shape], test_y [M], num_classes (int), name (str)")


@dataclasses.dataclass(frozen=True)
class NpzData:
  """The checked contents of a user's ``.npz`` file (see the module docstring).

  Attributes:
    x: float32 ``[N, *feature_shape]``.
    y: int32 ``[N]``, in ``[0, num_classes)``.
    client_id: ``[N]`` integer or string ids.
    test_x, test_y: float32 ``[M, *feature_shape]`` / int32 ``[M]``, or None.
    num_classes: number of classes.
    name: the dataset's name.
    source: ``npz file <absolute path>``.
  """
  x: np.ndarray
  y: np.ndarray
  client_id: np.ndarray
  test_x: Optional[np.ndarray]
  test_y: Optional[np.ndarray]
  num_classes: int
  name: str
  source: str


def path_of(name: str) -> str:
  """``"npz:PATH"`` -> ``PATH`` (``~`` expanded).

  Raises:
    FedJaxDpError (option ``dataset``): nothing after ``npz:``.
  """
  path = name[len(PREFIX):].strip() if name.startswith(PREFIX) else name
  if not path:
    raise FedJaxDpError(f"dataset {name!r}: give the file after 'npz:', e.g. "
                        "npz:data/mine.npz.", option="dataset")
  return os.path.expanduser(path)


def _bad(path: str, what: str) -> DataFileError:
  return DataFileError(f"npz file {path!r}: {what} (expected layout: {LAYOUT}).",
                       option="dataset")


def _labels(path: str, key: str, y: np.ndarray, n: int) -> np.ndarray:
  if y.shape != (n,):
    raise _bad(path, f"{key} must have shape ({n},) (one label per row of "
                     f"{'x' if key == 'y' else 'test_x'}), got {y.shape}")
  if y.dtype.kind not in "iu":
    raise _bad(path, f"{key} must hold integer class labels, got dtype {y.dtype} (cast "
                     f"with {key}.astype(int))")
  return y


def _features(path: str, key: str, x: np.ndarray) -> np.ndarray:
  if x.dtype.kind not in "biuf":
    raise _bad(path, f"{key} must be a real-valued array, got dtype {x.dtype}")
  if x.ndim < 2 or x.shape[0] < 1:
    raise _bad(path, f"{key} must be [num_examples >= 1, *feature_shape] (at least 2-D; "
                     f"reshape 1 feature per example to [N, 1]), got shape {x.shape}")
  x = x.astype(np.float32)
  finite = np.isfinite(x)
  if not finite.all():
    rows = np.flatnonzero(~finite.reshape(len(x), -1).all(axis=1))
    raise _bad(path, f"{key} has non-finite values (NaN or Inf) in {len(rows)} row(s), "
                     f"first row {int(rows[0])}; fix or drop them")
  return x


def read_npz(name_or_path: str) -> NpzData:
  """Reads and checks a user's ``.npz`` file (layout: the module docstring).

  Args:
    name_or_path: ``"npz:PATH"`` or ``PATH``.

  Returns:
    `NpzData`.

  Raises:
    DatasetNotAvailableError: no file at the path (named).
    DataFileError: not an ``.npz`` archive; missing required keys or unknown keys (the
      message lists the expected keys and those the file has); pickled objects; shape
      mismatches between x, y, client_id, test_x and test_y; non-integer labels or
      labels outside ``[0, num_classes)``; non-finite features; a bad ``num_classes``
      or ``name``. Every error's ``option`` is ``dataset``.
  """
  path = path_of(name_or_path)
  if not os.path.isfile(path):
    raise DatasetNotAvailableError(
        f"dataset npz:{path}: no such file (looked for {os.path.abspath(path)!r}); give "
        f"the path of an .npz with {LAYOUT}.", option="dataset")
  try:
    archive = np.load(path, allow_pickle=False)
  except (OSError, ValueError, zipfile.BadZipFile) as e:
    raise _bad(path, f"cannot be read as an .npz archive ({e})") from e
  if not isinstance(archive, np.lib.npyio.NpzFile):
    raise _bad(path, "is a single .npy array, not an .npz archive of named arrays "
                     "(save with np.savez(path, x=..., y=..., client_id=...))")
  with archive:
    keys = set(archive.files)
    missing = [k for k in REQUIRED_KEYS if k not in keys]
    unknown = sorted(keys - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if missing or unknown:
      what = []
      if missing:
        what.append(f"missing key(s) {', '.join(missing)}")
      if unknown:
        what.append(f"unknown key(s) {', '.join(unknown)}")
      raise _bad(path, f"{' and '.join(what)}; the file has {', '.join(sorted(keys))}; "
                       f"expected {', '.join(REQUIRED_KEYS)} and optionally "
                       f"{', '.join(OPTIONAL_KEYS)}")
    try:
      arrays = {k: archive[k] for k in sorted(keys)}
    except ValueError as e:  # object arrays need pickle, which is refused
      raise _bad(path, f"holds pickled Python objects ({e}); store strings as a NumPy "
                       "string array, e.g. np.asarray(ids, dtype=str)") from e
    except (OSError, zipfile.BadZipFile, EOFError) as e:
      raise _bad(path, f"is truncated or corrupted ({e})") from e
  x = _features(path, "x", arrays["x"])
  n = len(x)
  y = _labels(path, "y", arrays["y"], n)
  cid = arrays["client_id"]
  if cid.shape != (n,):
    raise _bad(path, f"client_id must have shape ({n},) (one id per row of x), got "
                     f"{cid.shape}")
  if cid.dtype.kind not in "iuUS":
    raise _bad(path, f"client_id must hold integers or strings, got dtype {cid.dtype}")
  test_x = test_y = None
  if ("test_x" in arrays) != ("test_y" in arrays):
    raise _bad(path, "test_x and test_y must be given together")
  if "test_x" in arrays:
    test_x = _features(path, "test_x", arrays["test_x"])
    if test_x.shape[1:] != x.shape[1:]:
      raise _bad(path, f"test_x must have x's feature shape {x.shape[1:]}, got "
                       f"{test_x.shape[1:]}")
    test_y = _labels(path, "test_y", arrays["test_y"], len(test_x))
  top = int(max(y.max(), -1 if test_y is None else test_y.max()))
  if "num_classes" in arrays:
    nc = arrays["num_classes"]
    if nc.shape != () or nc.dtype.kind not in "iu" or int(nc) < 2:
      raise _bad(path, f"num_classes must be a scalar integer >= 2, got {nc!r}")
    num_classes = int(nc)
  else:
    num_classes = max(top + 1, 2)
  low = int(min(y.min(), 0 if test_y is None else test_y.min()))
  if low < 0 or top >= num_classes:
    raise _bad(path, f"labels must be in [0, num_classes={num_classes}), got labels in "
                     f"[{low}, {top}]")
  name = os.path.splitext(os.path.basename(path))[0]
  if "name" in arrays:
    nm = arrays["name"]
    if nm.shape != () or nm.dtype.kind not in "US" or not str(nm):
      raise _bad(path, f"name must be a non-empty scalar string, got {nm!r}")
    name = str(nm)
  return NpzData(x=x, y=y.astype(np.int32), client_id=cid, test_x=test_x,
                 test_y=None if test_y is None else test_y.astype(np.int32),
                 num_classes=num_classes, name=name,
                 source=f"npz file {os.path.abspath(path)}")


def save_npz(path: str, data: FederatedData) -> str:
  """Writes ``data`` in the layout `read_npz` reads (one row per real example, its
  client's id in ``client_id``; the central test set, ``num_classes`` and ``name``).

  Args:
    path: the file to write (``.npz`` is appended by NumPy when missing).
    data: a `FederatedData` without a per-client test split.

  Returns:
    the path written.

  Raises:
    FedJaxDpError: ``data`` has a per-client test split (the layout has no place for
      it; split after loading with ``client_test_fraction``).
  """
  if data.client_test_counts is not None:
    raise FedJaxDpError("save_npz: the .npz layout has no per-client test split; save the "
                        "data before splitting (load_dataset(..., client_test_fraction=F) "
                        "splits after loading).", option="data")
  mask = data.example_mask
  ids = np.repeat(np.asarray(data.client_ids, dtype=str), data.counts)
  arrays = dict(x=data.x[mask], y=data.y[mask], client_id=ids,
                num_classes=np.int64(data.num_classes), name=np.str_(data.name))
  if data.test_x is not None:
    arrays.update(test_x=np.asarray(data.test_x), test_y=np.asarray(data.test_y))
  # No pickles (`read_npz` reads none); named, so that no array is taken for it.
  np.savez(path, allow_pickle=False, **arrays)
  return path if path.endswith(".npz") else path + ".npz"
