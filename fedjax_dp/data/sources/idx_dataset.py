"""Locating and reading MNIST-format datasets (four IDX files) in a directory."""

from __future__ import annotations

import os
from typing import Optional, Sequence

from fedjax_dp.data.sources import idx, integrity
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.data.sources.central import CentralData, scale_images

__all__ = [
    "DATA_DIR_ENV", "find_idx_files", "candidate_dirs", "tfds_dirs",
    "expected_idx_files", "not_in_data_dir", "load_idx_dir",
]

DATA_DIR_ENV = "FEDJAX_DP_DATA_DIR"

_STEMS = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def find_idx_files(directory: str) -> Optional[dict]:
  """Paths of the four MNIST-format IDX files in ``directory``, or None if any is missing.

  Accepts ``<stem>.gz``, ``<stem>`` and ``<stem with '.' before idx>`` (e.g.
  ``train-images.idx3-ubyte``).
  """
  found = {}
  for key, stem in _STEMS.items():
    dotted = stem.replace("-idx", ".idx")
    for cand in (stem + ".gz", stem, dotted + ".gz", dotted):
      path = os.path.join(directory, cand)
      if os.path.isfile(path):
        found[key] = path
        break
    else:
      return None
  return found


def candidate_dirs(data_dir: Optional[str], subdirs: Sequence[str],
                   system_dirs: Sequence[str]) -> list:
  """Directories to search, in priority order.

  An explicit ``data_dir`` is the only place searched: its ``subdirs`` first, then the
  directory itself (a dataset missing there is an error, `not_in_data_dir`, never a
  silent fall-back to another copy). Without it: the same under
  ``$FEDJAX_DP_DATA_DIR`` (when set), then the ``system_dirs``. The environment
  variable stays one search location among others: it is set once for every dataset,
  most of which are not in it, and the copy used is named in the data's ``source``.
  """
  if data_dir:
    base = os.path.expanduser(data_dir)
    return [os.path.join(base, s) for s in subdirs] + [base]
  dirs = []
  env = os.environ.get(DATA_DIR_ENV)
  if env:
    base = os.path.expanduser(env)
    dirs += [os.path.join(base, s) for s in subdirs] + [base]
  return dirs + list(system_dirs)


def tfds_dirs(data_dir: Optional[str]) -> list:
  """TFDS data directories to search: only ``data_dir`` when given, else TFDS's own
  defaults (None)."""
  return [os.path.expanduser(data_dir)] if data_dir else [None]


def expected_idx_files() -> str:
  """The four IDX file names, as an error message lists them."""
  return ", ".join(f"{stem}[.gz]" for stem in _STEMS.values())


def not_in_data_dir(name: str, data_dir: str, subdirs: Sequence[str],
                    tfds_name: Optional[str], how_to_get: str) -> DatasetNotAvailableError:
  """The error for dataset ``name`` missing from an explicitly given ``data_dir``: it
  names the folder, the folders and files looked for, and why no other copy was used.
  """
  base = os.path.expanduser(data_dir)
  where = ", ".join([os.path.join(base, s) for s in subdirs] + [base])
  tfds = (f", or a TFDS {tfds_name!r} prepared in {base} "
          f"({os.path.join(base, *tfds_name.split('/'), '<version>', 'dataset_info.json')})"
          if tfds_name else "")
  return DatasetNotAvailableError(
      f"dataset {name!r} is not in data_dir {data_dir!r}: expected the IDX files "
      f"{expected_idx_files()} in one of {where}{tfds}. With data_dir (--data-dir) given, "
      f"only that folder is searched (not ${DATA_DIR_ENV}, system packages or TFDS's "
      "default folders); fedjax_dp never downloads. To get it: " + how_to_get + ".",
      option="data_dir")


def load_idx_dir(files: dict, name: str, num_classes: int, source: str,
                 verify: bool = True, dpkg_package: Optional[str] = None) -> CentralData:
  """Reads the four IDX files into a `CentralData` (images scaled to [0, 1]).

  Args:
    files: ``{"train_x", "train_y", "test_x", "test_y"}`` -> path (`find_idx_files`).
    name: dataset name; selects the published checksums (`integrity`).
    num_classes: labels must lie in ``[0, num_classes)``.
    source: description of where the files are (the checks passed are appended).
    verify: check every published checksum that applies (`integrity.verify_idx_file`,
      and dpkg's md5sums of ``dpkg_package`` for files that package installed).
    dpkg_package: the Debian package that may have installed the files.

  Raises:
    DataFileError: if a file is truncated, corrupted, fails a checksum, or image and
      label counts disagree.
  """
  arrays, checks = {}, set()
  for k, p in files.items():
    content = idx.read_idx_bytes(p)
    if verify:
      if dpkg_package:
        checks.add(integrity.verify_dpkg_file(p, dpkg_package))
      checks.add(integrity.verify_idx_file(p, name, content))
    arrays[k] = idx.parse_idx(content, p)
  checks.discard(None)
  if verify:
    source += (f" (checksums verified: {'; '.join(sorted(checks))})" if checks
               else " (no published checksum applies; not verified)")
  for split in ("train", "test"):
    xs, ys = arrays[f"{split}_x"], arrays[f"{split}_y"]
    if xs.ndim != 3 or ys.ndim != 1 or len(xs) != len(ys):
      raise DataFileError(
          f"{name} {split} IDX files disagree: images {xs.shape} ({files[split + '_x']}), "
          f"labels {ys.shape} ({files[split + '_y']}); expected [n, H, W] and [n].")
    if ys.max() >= num_classes:
      raise DataFileError(f"{name} {split} labels go up to {ys.max()}; expected < "
                          f"{num_classes} ({files[split + '_y']}).")
  return CentralData(
      name=name, train_x=scale_images(arrays["train_x"]),
      train_y=arrays["train_y"].astype("int32"), test_x=scale_images(arrays["test_x"]),
      test_y=arrays["test_y"].astype("int32"), num_classes=num_classes, source=source)
