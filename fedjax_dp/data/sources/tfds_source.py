"""Image datasets from a locally *prepared* TensorFlow Datasets (TFDS) directory.

Nothing is downloaded unless the caller passes ``download=True`` explicitly.

What works without TensorFlow (checked with tensorflow-datasets 4.9.10, no TF):

* Reading a dataset prepared in the ``array_record`` file format through the
  random-access ``builder.as_data_source`` / ``tfds.data_source`` path: records are
  parsed with the protobuf-only ``tf.Example`` parser and images decoded with PIL
  (or OpenCV). This is the path used here.
* ``tfds.testing.mock_data`` (``MockPolicy.USE_CODE`` or ``AUTO``) mocks that path
  with random examples of the right shapes and dtypes (its batched
  ``__getitems__`` is broken in 4.9.10, so records are read one at a time here);
  ``USE_FILES`` needs the dataset's metadata files, which the wheel does not ship.
* ``tfds.builder(name).is_prepared()`` and the builder metadata. On a directory
  where the dataset is *not* prepared, ``as_data_source`` fails with a misleading
  ``NotImplementedError`` about the TFRECORD format; it is turned into a
  `DatasetNotAvailableError` here.

What needs TensorFlow:

* ``tfds.load`` / ``builder.as_dataset`` (they build a ``tf.data`` pipeline), so a
  dataset prepared in the default ``tfrecord`` format can only be read with TF
  installed (this module then falls back to ``tfds.as_numpy(builder.as_dataset(...))``).
* Preparing an image dataset at all (``download_and_prepare``), because the Image
  feature encodes PNGs with ``tf.image``. To prepare on a machine with TF, use
  ``tfds.builder(name).download_and_prepare(file_format="array_record")``, then copy
  the data directory.

Federated EMNIST (split by writer, as in LEAF / TFF) is **not** in TFDS: ``emnist``
here is the centralised EMNIST (``byclass``, ``bymerge``, ``balanced``, ``letters``,
``digits`` or ``mnist`` config) and must be partitioned synthetically. TFDS stores
EMNIST images transposed; they are transposed back here.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import logging
import os
from typing import Any, Optional, Sequence

import numpy as np

from fedjax_dp.data.sources.central import CentralData, scale_images
from fedjax_dp.data.sources.errors import DatasetNotAvailableError
from fedjax_dp.validation import FedJaxDpError, check_choice

__all__ = [
    "TFDS_NAMES", "EMNIST_CONFIGS", "INSTALL", "tfds_name_for", "tfds_installed", "how_to_get",
    "default_data_dirs", "is_prepared", "load_tfds",
]

# Our dataset name -> default TFDS name.
TFDS_NAMES = {
    "mnist": "mnist",
    "fashion_mnist": "fashion_mnist",
    "emnist": "emnist/balanced",
    "cifar10": "cifar10",
}
EMNIST_CONFIGS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")
_RANDOM_ACCESS_FORMATS = ("array_record", "parquet")


def tfds_name_for(name: str, config: Optional[str] = None) -> str:
  """The TFDS name for one of our names, e.g. ``("emnist", "byclass")`` -> ``emnist/byclass``.

  Raises:
    FedJaxDpError: for an unknown name or EMNIST config, or a config on a dataset
      that has none.
  """
  check_choice("name", name, TFDS_NAMES)
  if config is None:
    return TFDS_NAMES[name]
  if name != "emnist":
    raise FedJaxDpError(f"config={config!r} is only valid for emnist, not {name!r}.")
  check_choice("config", config, EMNIST_CONFIGS)
  return f"emnist/{config}"


def tfds_installed() -> bool:
  """True if the ``tensorflow_datasets`` package is importable (not imported here)."""
  return importlib.util.find_spec("tensorflow_datasets") is not None


def _tf_installed() -> bool:
  return importlib.util.find_spec("tensorflow") is not None


#: How to add TFDS to an install (it is an optional extra).
INSTALL = 'pip install "fedjax_dp[tfds]"'


def _import_tfds():
  """``tensorflow_datasets``, imported on first use (an optional extra)."""
  if not tfds_installed():
    raise DatasetNotAvailableError(
        f"reading a prepared TFDS dataset needs tensorflow_datasets, which is not "
        f"installed: {INSTALL}.")
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds


def how_to_get(tfds_name: str) -> str:
  """Instructions for preparing ``tfds_name`` where downloads are possible."""
  return (f"install TFDS ({INSTALL}); on a machine with internet and TensorFlow, run "
          f"`tfds.builder({tfds_name!r}).download_and_prepare(file_format='array_record')` "
          "and copy the resulting directory into ~/tensorflow_datasets (or $TFDS_DATA_DIR, "
          "or pass data_dir)")


def default_data_dirs() -> list:
  """TFDS's default data directories: ``$TFDS_DATA_DIR`` and ``~/tensorflow_datasets``."""
  dirs = [os.environ.get("TFDS_DATA_DIR"), os.path.join("~", "tensorflow_datasets")]
  return [os.path.expanduser(d) for d in dirs if d]


def _has_metadata(tfds_name: str, data_dir: Optional[str]) -> bool:
  """Fast file check: some ``<dir>/<name>[/<config>]/<version>/dataset_info.json``."""
  dirs = [data_dir] if data_dir else default_data_dirs()
  for d in dirs:
    pattern = os.path.join(os.path.expanduser(d), *tfds_name.split("/"), "*",
                           "dataset_info.json")
    if glob.glob(pattern):
      return True
  return False


@contextlib.contextmanager
def _quiet_absl():
  """Silences TFDS's absl warnings (e.g. "Variant folder ... has no dataset_info.json")."""
  logger = logging.getLogger("absl")
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def is_prepared(tfds_name: str, data_dir: Optional[str] = None) -> bool:
  """True if ``tfds_name`` is prepared in ``data_dir`` (or the default TFDS dirs).

  Cheap: looks for the dataset's ``dataset_info.json`` first and only then asks
  TFDS (reads no records). Never raises.
  """
  if not tfds_installed() or not _has_metadata(tfds_name, data_dir):
    return False
  try:
    tfds = _import_tfds()
    with _quiet_absl():
      return bool(tfds.builder(tfds_name, data_dir=data_dir).is_prepared())
  except Exception:  # pylint: disable=broad-except
    return False


def _to_numpy_split(src: Any, image_key: str, label_key: str) -> tuple:
  """Decodes every record of a random-access source into (uint8 images, labels).

  Records are read one by one: decoding dominates (batched ``__getitems__`` was
  no faster here, about 7k images/s), and TFDS 4.9.10's ``mock_data`` breaks
  ``__getitems__``.
  """
  n = len(src)
  if n == 0:
    raise FedJaxDpError("the TFDS split has no examples.")
  images, labels = [], []
  for i in range(n):
    record = src[i]
    images.append(np.asarray(record[image_key]))
    labels.append(int(np.asarray(record[label_key])))
  return np.stack(images), np.asarray(labels, np.int32)


def load_tfds(tfds_name: str, *, data_dir: Optional[str] = None,
              splits: Sequence[str] = ("train", "test"), download: bool = False,
              name: Optional[str] = None) -> CentralData:
  """Loads an image classification dataset from TFDS as float32 arrays.

  Args:
    tfds_name: TFDS name, e.g. ``"mnist"``, ``"emnist/balanced"``, ``"cifar10"``.
    data_dir: TFDS data directory (default: TFDS's, ``$TFDS_DATA_DIR`` or
      ``~/tensorflow_datasets``).
    splits: ``(train_split, test_split)``; the test split may be None.
    download: allow TFDS to download and prepare (needs network and TensorFlow).
      Off by default; nothing in fedjax_dp turns it on.
    name: our dataset name for the result (default: ``tfds_name`` up to the '/').

  Returns:
    `CentralData` with images float32 ``[n, H, W, C]`` in ``[0, 1]`` and int32
    labels.

  Raises:
    DatasetNotAvailableError: if the dataset is not prepared locally (or TFDS is
      not installed).
    FedJaxDpError: if it is prepared in a format that needs TensorFlow to read and
      TensorFlow is not installed, or the records are not (image, label) pairs.
  """
  tfds = _import_tfds()
  train_split, test_split = splits
  with _quiet_absl():
    builder = tfds.builder(tfds_name, data_dir=data_dir)
  where = data_dir or "the default TFDS data dirs (~/tensorflow_datasets, $TFDS_DATA_DIR)"
  if download:
    builder.download_and_prepare(file_format="array_record")
  keys = builder.info.supervised_keys or ("image", "label")
  features = builder.info.features
  if (len(keys) != 2 or not isinstance(keys[0], str) or not isinstance(keys[1], str)
      or not isinstance(features, tfds.features.FeaturesDict)):
    raise FedJaxDpError(f"TFDS dataset {tfds_name!r}: its records are not (image, label) "
                        f"pairs (supervised keys {keys!r}).")
  image_key, label_key = keys[0], keys[1]

  def read(split):
    try:
      # tfds 4.9's logging decorator (wrapt) hides the method's parameters from pyright.
      src = builder.as_data_source(split=split)  # pyright: ignore[reportCallIssue]
      return _to_numpy_split(src, image_key, label_key)
    except (NotImplementedError, ValueError, AssertionError, FileNotFoundError) as e:
      if not builder.is_prepared():
        expected = ("" if not data_dir else " (expected " + os.path.join(
            data_dir, *tfds_name.split("/"), "<version>", "dataset_info.json")
                    + " and its array_record files; only that folder is searched)")
        raise DatasetNotAvailableError(
            f"TFDS dataset {tfds_name!r} is not prepared in {where}{expected}, and "
            f"fedjax_dp never downloads. To use it: {how_to_get(tfds_name)}.",
            option="data_dir" if data_dir else None) from e
      fmt = str(getattr(builder.info.file_format, "value", builder.info.file_format))
      if fmt in _RANDOM_ACCESS_FORMATS:
        raise
      if not _tf_installed():
        raise FedJaxDpError(
            f"TFDS dataset {tfds_name!r} in {builder.data_dir} is prepared in the {fmt!r} "
            "format, which only TensorFlow can read, and TensorFlow is not installed. "
            "Install tensorflow, or re-prepare it with "
            "download_and_prepare(file_format='array_record').") from e
      arrays = tfds.as_numpy(builder.as_dataset(
          split=split, batch_size=-1))  # pyright: ignore[reportCallIssue] (as above)
      return np.asarray(arrays[image_key]), np.asarray(arrays[label_key], np.int32)

  with _quiet_absl():
    train_x, train_y = read(train_split)
    test_x, test_y = read(test_split) if test_split is not None else (None, None)
  base = tfds_name.split("/")[0]
  if base == "emnist":  # TFDS keeps EMNIST's transposed storage order.
    train_x = np.swapaxes(train_x, 1, 2)
    test_x = None if test_x is None else np.swapaxes(test_x, 1, 2)
  label = features[label_key]
  num_classes = label.num_classes if isinstance(label, tfds.features.ClassLabel) else None
  if num_classes is None:
    raise FedJaxDpError(f"TFDS dataset {tfds_name!r}: its label {label_key!r} is not a "
                        f"ClassLabel with a number of classes ({label!r}).")
  return CentralData(
      name=name or base, train_x=scale_images(train_x), train_y=train_y,
      test_x=None if test_x is None else scale_images(test_x), test_y=test_y,
      num_classes=int(num_classes),
      source=f"TFDS {tfds_name} (version {builder.version}) from {builder.data_dir}")
