"""The IID / non-IID device mixture of LAPA (Sun et al., arXiv 2505.19823).

The paper says only that sample counts are "clearly imbalanced across devices", that
non-IID devices have "lower label diversity", and gives mixtures such as 5 IID + 10
non-IID devices (Fig. 6 [T]). Following FedAdp's set-up, our decision ([D]):

* quantity skew: device sizes drawn from a log-normal and clipped to
  [min_size, max_size] (default [300, 6000]), then scaled down if needed;
* IID device: a uniform random sample of every class (stratified: class proportions
  as in the whole dataset);
* non-IID device: a sample of ``classes_per_device`` classes (default 2), the classes
  dealt out to balance demand, so that every class is used when there are enough
  non-IID devices.

`mixture_partition` returns index arrays; `mixture_federated_data` builds a
`fedjax_dp.data.FederatedData`. Host-side numpy, run once per experiment.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Union

import numpy as np

from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.data.partition import gather_padded
from fedjax_dp.validation import FedJaxDpError, check_int, check_non_negative

RngLike = Union[np.random.Generator, int, np.integer]

PARTITION_KWARGS = ("classes_per_device", "size_sigma", "min_size", "max_size", "total")


def _as_rng(rng: Any, name: str = "rng") -> np.random.Generator:
  if isinstance(rng, np.random.Generator):
    return rng
  if isinstance(rng, (numbers.Integral, np.integer)) and not isinstance(rng, bool):
    if rng < 0:
      raise FedJaxDpError(f"{name} must be >= 0, got {rng}.", option=name)
    return np.random.default_rng(int(rng))
  raise FedJaxDpError(
      f"{name} must be a non-negative int seed or a numpy.random.Generator, got {rng!r}.",
      option=name)


def _check_labels(labels: Any) -> np.ndarray:
  y = np.asarray(labels)
  if y.ndim != 1 or y.size == 0:
    raise FedJaxDpError(f"labels must be a non-empty 1-D array, got shape {y.shape}.",
                        option="labels")
  if not np.issubdtype(y.dtype, np.integer):
    raise FedJaxDpError(f"labels must be integers, got dtype {y.dtype}.", option="labels")
  if y.min() < 0:
    raise FedJaxDpError(f"labels must be >= 0, got min {y.min()}.", option="labels")
  return y


def _largest_remainder(amount: int, weights: np.ndarray) -> np.ndarray:
  """Integers >= 0 summing to ``amount`` proportional to ``weights`` (Hamilton's method;
  ties go to the lower index)."""
  share = amount * weights / weights.sum()
  base = np.floor(share).astype(np.int64)
  rest = int(amount - base.sum())
  if rest > 0:
    order = np.argsort(-(share - base), kind="stable")
    base[order[:rest]] += 1
  return base


def mixture_partition(labels: Any, num_iid: int, num_non_iid: int, rng: RngLike,
                      classes_per_device: int = 2, size_sigma: float = 1.0,
                      min_size: int = 300, max_size: int = 6000,
                      total: Optional[int] = None) -> List[np.ndarray]:
  """Splits examples into ``num_iid`` IID then ``num_non_iid`` non-IID devices
  ([D]).

  Sizes: s_i = clip(m exp(size_sigma z_i), min_size, max_size), z_i ~ N(0, 1), with the
  median m = sqrt(min_size max_size) (the geometric middle of the bounds). All sizes are
  then multiplied by one factor f = min(1, total / sum_i s_i, min_k n_k / demand_k)
  (n_k: examples of class k, demand_k: what the devices would take of class k) and
  floored (at least 1). So the devices use at most ``total`` examples and no class runs
  short, and when the dataset is small (e.g. the 5,000-image MNIST subset) the bounds
  shrink proportionally to [f min_size, f max_size] while the skew keeps its shape. With
  the defaults, 5 + 10 devices and 60,000 balanced labels (MNIST-sized) about 29,000
  examples are handed out on average (17k-42k over 50 seeds), mostly with f = 1. A class
  that limits f limits every device, so fewer than ``total`` examples may be handed out
  (about 2,000 of 3,000 balanced labels with the defaults).

  Labels: an IID device takes, from every class, its share of the class proportions of
  the whole dataset (largest-remainder rounding), sampled uniformly at random; a
  non-IID device takes an equal share of each of its ``classes_per_device`` classes.
  Classes are dealt to the non-IID devices largest first, each taking the classes with
  the least demand so far relative to their size (ties in a random order): this balances
  the classes, and covers all of them when ``num_non_iid * classes_per_device >= K``
  (K: classes present in ``labels``). Rounding may shave a few examples off the largest
  quotas of a class to keep the split disjoint.

  Args:
    labels: int ``[n]`` labels (>= 0).
    num_iid, num_non_iid: device counts (>= 0 each, >= 1 in total).
    rng: a non-negative int seed or a ``np.random.Generator``; the result is a
      deterministic function of it.
    classes_per_device: labels per non-IID device, in [1, K].
    size_sigma: the log-normal shape (>= 0; 0 gives equal sizes before scaling).
    min_size, max_size: size bounds before scaling, 1 <= min_size <= max_size.
    total: the most examples handed out, in [num_devices, n] (default n).

  Returns:
    ``num_iid + num_non_iid`` int64 index arrays into ``labels`` (IID devices first),
    sorted, disjoint and non-empty.

  Raises:
    FedJaxDpError: naming the argument, for any invalid value.
  """
  y = _check_labels(labels)
  n = int(y.size)
  n_iid = check_int("num_iid", num_iid, minimum=0)
  n_non = check_int("num_non_iid", num_non_iid, minimum=0)
  num = n_iid + n_non
  if num < 1:
    raise FedJaxDpError(f"num_iid + num_non_iid must be >= 1, got {num_iid} + "
                        f"{num_non_iid}.", option="num_non_iid")
  classes, class_counts = np.unique(y, return_counts=True)
  k = int(classes.size)
  cpd = check_int("classes_per_device", classes_per_device, minimum=1, maximum=k)
  sigma = check_non_negative("size_sigma", size_sigma)
  lo = check_int("min_size", min_size, minimum=1)
  hi = check_int("max_size", max_size, minimum=lo)
  if num > n:
    raise FedJaxDpError(f"num_iid + num_non_iid = {num} exceeds the {n} examples.",
                        option="num_non_iid")
  cap = n if total is None else check_int("total", total, minimum=num, maximum=n)
  gen = _as_rng(rng)

  raw = np.clip(math.sqrt(lo * hi) * np.exp(sigma * gen.standard_normal(num)), lo, hi)
  weights = np.zeros((num, k))
  weights[:n_iid] = class_counts / n
  # Deal classes to non-IID devices, largest first, each taking the cpd classes with the
  # least demand relative to their size (ties in a random class order): balances the
  # classes (so f stays large) and covers every class once enough devices are dealt.
  perm = gen.permutation(k)
  load = raw[:n_iid] @ weights[:n_iid]
  for i in n_iid + np.argsort(-raw[n_iid:], kind="stable"):
    rel = np.round((load / class_counts)[perm], 9)  # IID loads tie up to float noise
    chosen = perm[np.argsort(rel, kind="stable")[:cpd]]
    weights[i, chosen] = 1.0 / cpd
    load[chosen] += raw[i] / cpd
  demand = raw @ weights
  factor = min(1.0, cap / raw.sum(),
               float(np.min(class_counts[demand > 0] / demand[demand > 0])))
  target = np.maximum(1, np.floor(factor * raw)).astype(np.int64)
  quota = np.stack([_largest_remainder(int(t), w) for t, w in zip(target, weights)])
  _repair(quota, class_counts, weights, cap)

  pools = [gen.permutation(np.flatnonzero(y == c)) for c in classes]
  used = np.zeros(k, dtype=np.int64)
  parts = [[] for _ in range(num)]
  for c in range(k):
    for i in range(num):
      q = int(quota[i, c])
      if q:
        parts[i].append(pools[c][used[c]:used[c] + q])
        used[c] += q
  return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def _repair(quota: np.ndarray, class_counts: np.ndarray, weights: np.ndarray,
            cap: int) -> None:
  """Trims ``quota`` [N, K] in place so that no class is over-used and the total is
  <= ``cap``, keeping every device non-empty (a device down to one example moves it to
  the class with the most room, preferring its own classes)."""
  def take_one(c: int) -> None:
    i = int(np.argmax(quota[:, c]))
    quota[i, c] -= 1
    if quota[i].sum() == 0:
      room = class_counts - quota.sum(axis=0)
      room = np.where(np.arange(room.size) == c, -1, room)
      own = np.where(weights[i] > 0, room, -1)
      quota[i, int(np.argmax(own if own.max() > 0 else room))] += 1

  for c in range(quota.shape[1]):
    while quota[:, c].sum() > class_counts[c]:
      take_one(c)
  while quota.sum() > cap:
    take_one(int(np.argmax(quota.max(axis=0))))
  if np.any(quota.sum(axis=0) > class_counts):  # only with (nearly) one example per device
    raise FedJaxDpError(
        f"cannot give {quota.shape[0]} devices disjoint non-empty samples with these "
        f"class counts {class_counts.tolist()}; use fewer devices or more data.",
        option="labels")


def mixture_federated_data(x: Any, y: Any, num_iid: int, num_non_iid: int, seed: RngLike = 0,
                           num_classes: Optional[int] = None, test_x: Any = None,
                           test_y: Any = None, name: str = "data", source: str = "",
                           is_subset: bool = False, **kw) -> FederatedData:
  """A `FederatedData` with the paper-001 device mixture (`mixture_partition`).

  Clients are named ``iid_<i>`` then ``non_iid_<j>``; ``partition`` reads e.g.
  ``"lapa_mixture(5 iid + 10 non-iid, 2 classes, lognormal sizes)"``.

  Args:
    x: ``[n, *feature_shape]`` features (stored float32).
    y: int ``[n]`` labels in [0, num_classes).
    num_iid, num_non_iid: device counts (see `mixture_partition`).
    seed: int seed or ``np.random.Generator``.
    num_classes: K (default: 1 + the largest label of ``y`` / ``test_y``).
    test_x, test_y: optional central test set, kept as is.
    name, source, is_subset: as in `FederatedData`.
    **kw: `mixture_partition` options: classes_per_device, size_sigma, min_size,
      max_size, total.

  Returns:
    A `FederatedData` (x float32 ``[N, n_max, ...]``, y int32 ``[N, n_max]``, counts).

  Raises:
    FedJaxDpError: on an unknown option, mismatched shapes or invalid values.
  """
  unknown = sorted(set(kw) - set(PARTITION_KWARGS))
  if unknown:
    raise FedJaxDpError(
        f"mixture_federated_data does not take {', '.join(unknown)}; options: "
        f"{', '.join(PARTITION_KWARGS)}.", option=unknown[0])
  xa = np.asarray(x)
  ya = _check_labels(y)
  if xa.ndim < 1 or xa.shape[0] != ya.shape[0]:
    raise FedJaxDpError(
        f"x must be [n, ...] with n = len(y) = {ya.shape[0]}, got shape {xa.shape}.",
        option="x")
  if (test_x is None) != (test_y is None):
    raise FedJaxDpError("test_x and test_y must be given together.", option="test_x")
  top = int(ya.max()) if test_y is None else max(int(ya.max()), int(np.max(test_y)))
  k = top + 1 if num_classes is None else check_int("num_classes", num_classes, minimum=1)
  if top >= k:
    raise FedJaxDpError(f"labels must be < num_classes={k}, got max {top}.",
                        option="num_classes")
  parts = mixture_partition(ya, num_iid, num_non_iid, seed, **kw)
  xp, yp, counts = gather_padded(xa, ya, parts)
  if test_x is not None:
    test_x = np.asarray(test_x, dtype=np.float32)
    test_y = np.asarray(test_y, dtype=np.int32)
    if test_x.shape[1:] != xa.shape[1:] or test_y.shape != test_x.shape[:1]:
      raise FedJaxDpError(
          f"test_x must be [n_test, {', '.join(map(str, xa.shape[1:]))}] with matching "
          f"test_y, got {test_x.shape} and {test_y.shape}.", option="test_x")
  cpd = kw.get("classes_per_device", 2)
  ids = tuple([f"iid_{i}" for i in range(int(num_iid))]
              + [f"non_iid_{j}" for j in range(int(num_non_iid))])
  return FederatedData(
      name=name, x=xp, y=yp, counts=counts, num_classes=k, client_ids=ids,
      test_x=test_x, test_y=test_y, source=source, is_subset=is_subset,
      partition=(f"lapa_mixture({num_iid} iid + {num_non_iid} non-iid, {cpd} classes, "
                 "lognormal sizes)"))
