"""Partitioners: from central arrays to per-client example indices.

Each partitioner returns a list of ``num_clients`` int64 index arrays (sorted
ascending, so a client's examples keep their original, e.g. time, order). The
index arrays are disjoint, cover ``range(num_examples)`` exactly once, and none is
empty. Randomness comes only from the ``rng`` argument (a ``np.random.Generator``
or an int seed), so a partition is reproducible.

Methods:

* `iid`: a uniformly random split into near-equal sizes.
* `dirichlet`: label skew (Hsu et al. 2019, "Measuring the effects of non-identical
  data distribution"), in the widely used per-class form (Yurochkin et al. 2019;
  Li et al. 2022, NIID-Bench): for each class ``k`` draw ``p_k ~ Dir(alpha * 1)``
  over clients and split that class's examples in proportions ``p_k``. Small
  ``alpha`` (e.g. 0.1) gives clients dominated by one or two classes; large
  ``alpha`` (e.g. 100) approaches IID.
* `shards`: McMahan et al. 2017 ("pathological non-IID"): sort by label, cut into
  ``num_clients * shards_per_client`` shards, give each client
  ``shards_per_client`` random shards.
* `quantity_skew`: client sizes from a Dirichlet (``alpha``) or lognormal
  (``sigma``) distribution, labels IID.
* `natural`: one client per distinct group id (subject, writer, user).

`partition` applies a method to ``(x, y)`` and returns a `FederatedData`;
`split_clients` carves a per-client held-out split out of a `FederatedData`.

On the command line and in config files a partition is one string,
``method[:value]`` or ``method[:key=value,...]`` (`parse_partition_spec`:
``dirichlet:0.1``, ``shards:2``, ``quantity_skew:sigma=1.5``,
``dirichlet:alpha=0.1,min_size=5``), and/or the run's partition fields
(``dirichlet_alpha``, ``shards_per_client``, ``quantity_skew_alpha``,
``quantity_skew_sigma``, ``min_client_size``), combined by `resolve_partition`.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from fedjax_dp.data.federated_data import FederatedData, pad_client_arrays
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int, check_positive,
                                  check_probability)

__all__ = [
    "RngLike", "METHODS", "METHOD_KWARGS", "SHORTHAND_PARAM", "SPEC_PARAMS",
    "FIELD_PARAMS", "parse_partition_spec", "resolve_partition", "describe_partition",
    "iid", "dirichlet", "shards", "quantity_skew", "natural", "gather_padded",
    "partition", "pooled", "split_clients",
]

RngLike = Union[np.random.Generator, int, np.integer]

from fedjax_dp.data.partition_spec import (  # noqa: F401  (re-exported)
    METHODS, METHOD_KWARGS, SHORTHAND_PARAM, SPEC_PARAMS, FIELD_PARAMS, describe_partition,
    parse_partition_spec, resolve_partition)

# Redraws of the Dirichlet proportions before falling back to a repair step.
_DIRICHLET_MAX_REDRAWS = 100


def _as_rng(rng: Any) -> np.random.Generator:
  """Returns a Generator from a Generator or an integer seed."""
  if isinstance(rng, np.random.Generator):
    return rng
  if isinstance(rng, (numbers.Integral, np.integer)) and not isinstance(rng, bool):
    if rng < 0:
      raise FedJaxDpError(f"rng seed must be >= 0, got {rng}.")
    return np.random.default_rng(int(rng))
  raise FedJaxDpError(
      f"rng must be a numpy.random.Generator or a non-negative int seed, got {rng!r}.")


def _check_num_clients(num_clients: Any, num_examples: int, min_size: int = 1) -> int:
  """num_clients in [1, num_examples // min_size]."""
  if num_examples < 1:
    raise FedJaxDpError(f"need at least one example to partition, got {num_examples}.")
  upper = num_examples // min_size
  n = check_int("num_clients", num_clients, minimum=1)
  if n > upper:
    bound = "num_examples // min_size" if min_size > 1 else "num_examples"
    extra = f", min_size={min_size}" if min_size > 1 else ""
    raise FedJaxDpError(
        f"num_clients must be in [1, {bound}] = [1, {upper}] so that no client is too "
        f"small; got num_clients={n} (num_examples={num_examples}{extra}).")
  return n


def _check_labels(labels: Any) -> np.ndarray:
  y = np.asarray(labels)
  if y.ndim != 1:
    raise FedJaxDpError(f"labels must be a 1-D array [num_examples], got shape {y.shape}.")
  if y.size and not np.issubdtype(y.dtype, np.integer):
    raise FedJaxDpError(f"labels must be integers, got dtype {y.dtype}.")
  return y


def _split_by_sizes(perm: np.ndarray, sizes: np.ndarray) -> List[np.ndarray]:
  """Cuts ``perm`` into consecutive pieces of ``sizes``; each piece sorted."""
  bounds = np.cumsum(sizes)[:-1]
  return [np.sort(p).astype(np.int64) for p in np.split(perm, bounds)]


def iid(num_examples: int, num_clients: int, rng: RngLike) -> List[np.ndarray]:
  """Uniformly random split into near-equal client sizes.

  Args:
    num_examples: number of examples ``n`` (>= 1).
    num_clients: number of clients, in ``[1, n]``.
    rng: a ``np.random.Generator`` or an int seed.

  Returns:
    ``num_clients`` sorted int64 index arrays; sizes are ``n // num_clients`` or one
    more.

  Raises:
    FedJaxDpError: if ``num_clients`` is out of range.
  """
  n = check_int("num_examples", num_examples, minimum=1)
  c = _check_num_clients(num_clients, n)
  perm = _as_rng(rng).permutation(n)
  return [np.sort(p).astype(np.int64) for p in np.array_split(perm, c)]


def dirichlet(labels: Any, num_clients: int, alpha: float, rng: RngLike,
              min_size: int = 1) -> List[np.ndarray]:
  """Label-skewed split: per-class Dirichlet(alpha) proportions over clients.

  For each class the proportions are drawn from ``Dir(alpha * 1_num_clients)``. The
  draw is repeated (up to 100 times) until every client has at least ``min_size``
  examples; if that still fails (tiny ``alpha`` with many clients) the deficient
  clients are topped up with random examples taken from the largest clients, which
  keeps every example assigned exactly once.

  Args:
    labels: int ``[num_examples]`` class labels.
    num_clients: number of clients, in ``[1, num_examples // min_size]``.
    alpha: Dirichlet concentration, > 0. Smaller is more skewed.
    rng: a ``np.random.Generator`` or an int seed.
    min_size: minimum number of examples per client (>= 1).

  Returns:
    ``num_clients`` sorted int64 index arrays.

  Raises:
    FedJaxDpError: on bad labels, ``alpha <= 0``, ``min_size < 1`` or an
      out-of-range ``num_clients``.
  """
  y = _check_labels(labels)
  alpha = check_positive("alpha", alpha)
  min_size = check_int("min_size", min_size, minimum=1)
  c = _check_num_clients(num_clients, len(y), min_size)
  rng = _as_rng(rng)
  classes = np.unique(y)
  by_class = [np.flatnonzero(y == k) for k in classes]
  assign = np.empty(len(y), dtype=np.int64)
  for _ in range(_DIRICHLET_MAX_REDRAWS):
    for idx in by_class:
      idx = rng.permutation(idx)
      p = rng.dirichlet(np.full(c, alpha))
      cuts = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
      sizes = np.diff(np.concatenate([[0], cuts, [len(idx)]]))
      assign[idx] = np.repeat(np.arange(c), sizes)
    sizes = np.bincount(assign, minlength=c)
    if sizes.min() >= min_size:
      break
  else:
    _repair_min_size(assign, c, min_size, rng)
  return [np.flatnonzero(assign == i).astype(np.int64) for i in range(c)]


def _repair_min_size(assign: np.ndarray, num_clients: int, min_size: int,
                     rng: np.random.Generator) -> None:
  """Moves random examples from the largest clients to those below ``min_size``."""
  sizes = np.bincount(assign, minlength=num_clients)
  for client in np.flatnonzero(sizes < min_size):
    while sizes[client] < min_size:
      donor = int(np.argmax(sizes))
      moved = rng.choice(np.flatnonzero(assign == donor))
      assign[moved] = client
      sizes[donor] -= 1
      sizes[client] += 1


def shards(labels: Any, num_clients: int, shards_per_client: int,
           rng: RngLike) -> List[np.ndarray]:
  """McMahan et al. (2017) shards: sort by label, deal out contiguous shards.

  The examples are shuffled, stably sorted by label (so ties are in random order),
  cut into ``num_clients * shards_per_client`` contiguous shards of near-equal size,
  and each client receives ``shards_per_client`` shards chosen at random. With 2
  shards per client most clients see at most 2 classes.

  Args:
    labels: int ``[num_examples]`` class labels.
    num_clients: number of clients, >= 1, with
      ``num_clients * shards_per_client <= num_examples``.
    shards_per_client: shards per client (>= 1).
    rng: a ``np.random.Generator`` or an int seed.

  Returns:
    ``num_clients`` sorted int64 index arrays.

  Raises:
    FedJaxDpError: on bad labels or out-of-range counts.
  """
  y = _check_labels(labels)
  spc = check_int("shards_per_client", shards_per_client, minimum=1)
  c = _check_num_clients(num_clients, len(y), spc)
  rng = _as_rng(rng)
  perm = rng.permutation(len(y))
  order = perm[np.argsort(y[perm], kind="stable")]
  pieces = np.array_split(order, c * spc)
  deal = rng.permutation(c * spc).reshape(c, spc)
  return [np.sort(np.concatenate([pieces[s] for s in row])).astype(np.int64)
          for row in deal]


def quantity_skew(num_examples: int, num_clients: int, alpha: Optional[float] = None,
                  rng: Optional[RngLike] = None, *, sigma: Optional[float] = None,
                  min_size: int = 1) -> List[np.ndarray]:
  """Skewed client sizes, labels IID.

  Exactly one of ``alpha`` / ``sigma`` selects the size distribution:

  * ``alpha``: proportions ``q ~ Dir(alpha * 1)`` (small alpha: very unequal sizes);
  * ``sigma``: proportions ``q ∝ LogNormal(0, sigma)`` per client (heavy-tailed
    sizes; ``sigma = 0`` gives near-equal sizes).

  Each client gets ``min_size`` examples plus a ``Multinomial(n - num_clients *
  min_size, q)`` share; examples are assigned by a uniform random permutation.

  Args:
    num_examples: number of examples ``n`` (>= 1).
    num_clients: number of clients, in ``[1, n // min_size]``.
    alpha: Dirichlet concentration (> 0), or None to use ``sigma``.
    rng: a ``np.random.Generator`` or an int seed (required).
    sigma: lognormal shape (>= 0), or None to use ``alpha``.
    min_size: minimum client size (>= 1).

  Returns:
    ``num_clients`` sorted int64 index arrays.

  Raises:
    FedJaxDpError: unless exactly one of alpha/sigma is given and valid, or on an
      out-of-range ``num_clients`` or a missing ``rng``.
  """
  n = check_int("num_examples", num_examples, minimum=1)
  min_size = check_int("min_size", min_size, minimum=1)
  c = _check_num_clients(num_clients, n, min_size)
  if (alpha is None) == (sigma is None):
    raise FedJaxDpError(
        f"quantity_skew needs exactly one of alpha (Dirichlet) or sigma (lognormal); got "
        f"alpha={alpha!r}, sigma={sigma!r}.")
  if rng is None:
    raise FedJaxDpError("quantity_skew needs rng (a numpy.random.Generator or int seed).")
  rng = _as_rng(rng)
  if sigma is None:  # alpha is given (exactly one of the two, checked above)
    q = rng.dirichlet(np.full(c, check_positive("alpha", alpha)))
  else:
    s = float(sigma)
    if not np.isfinite(s) or s < 0:
      raise FedJaxDpError(f"sigma must be finite and >= 0, got {sigma!r}.")
    w = rng.lognormal(0.0, s, size=c)
    q = w / w.sum()
  sizes = min_size + rng.multinomial(n - c * min_size, q)
  return _split_by_sizes(rng.permutation(n), sizes)


def natural(group_ids: Any) -> List[np.ndarray]:
  """One client per distinct group id.

  Args:
    group_ids: ``[num_examples]`` ids (ints or strings) of the example's owner.

  Returns:
    One sorted int64 index array per distinct id, in the order of
    ``np.unique(group_ids)`` (use that to name the clients).

  Raises:
    FedJaxDpError: if ``group_ids`` is not 1-D or is empty.
  """
  g = np.asarray(group_ids)
  if g.ndim != 1 or g.size == 0:
    raise FedJaxDpError(
        f"group_ids must be a non-empty 1-D array [num_examples], got shape {g.shape}.")
  _, inverse = np.unique(g, return_inverse=True)
  order = np.argsort(inverse, kind="stable")
  counts = np.bincount(inverse)
  return [p.astype(np.int64) for p in np.split(order, np.cumsum(counts)[:-1])]


def gather_padded(x: np.ndarray, y: np.ndarray,
                  parts: Sequence[np.ndarray]) -> tuple:
  """Gathers ``x[idx]``/``y[idx]`` for each client straight into padded arrays.

  Args:
    x: ``[num_examples, *feature_shape]`` features.
    y: int ``[num_examples]`` labels.
    parts: per-client index arrays.

  Returns:
    ``(x_pad float32 [C, max_n, *feature_shape], y_pad int32 [C, max_n],
    counts int32 [C])``.
  """
  counts = np.array([len(p) for p in parts], dtype=np.int32)
  width = max(int(counts.max()), 1)
  xp = np.zeros((len(parts), width) + x.shape[1:], dtype=np.float32)
  yp = np.zeros((len(parts), width), dtype=np.int32)
  for i, p in enumerate(parts):
    xp[i, :len(p)] = x[p]
    yp[i, :len(p)] = y[p]
  return xp, yp, counts


def partition(x: Any, y: Any, method: str, num_clients: Optional[int] = None,
              seed: RngLike = 0, *, name: str = "data", num_classes: Optional[int] = None,
              client_ids: Optional[Sequence[str]] = None, test_x: Any = None,
              test_y: Any = None, source: str = "", is_subset: bool = False,
              **method_kwargs) -> FederatedData:
  """Partitions central arrays into a `FederatedData`.

  Args:
    x: ``[num_examples, *feature_shape]`` features (stored as float32).
    y: int ``[num_examples]`` labels in ``[0, num_classes)``.
    method: one of ``natural, iid, dirichlet, shards, quantity_skew``.
    num_clients: number of clients; for ``natural`` it must be None or equal to the
      number of distinct ``group_ids``.
    seed: int seed or ``np.random.Generator``.
    name: dataset name.
    num_classes: number of classes (default ``max(y) + 1``, or of ``test_y``).
    client_ids: client ids (default: ``client_<i>``, or the group ids for ``natural``).
    test_x, test_y: optional central test set, kept as is.
    source: provenance string.
    is_subset: True when the data is a subset of the named dataset.
    **method_kwargs: the method's parameters: ``natural``: ``group_ids``;
      ``dirichlet``: ``alpha`` (required), ``min_size``; ``shards``:
      ``shards_per_client`` (default 2); ``quantity_skew``: ``alpha`` or ``sigma``,
      ``min_size``.

  Returns:
    A `FederatedData` with ``partition=method``; its ``source`` ends with the
    partition's parameters (`describe_partition`), e.g. ``partition dirichlet(alpha=0.1,
    min_size=1) over 100 clients, seed 0``, so that its description says which alpha
    a run used.

  Raises:
    FedJaxDpError: on an unknown method, parameters that the method does not take,
      mismatched shapes or invalid values.
  """
  check_choice("method", method, METHODS)
  unknown = sorted(set(method_kwargs) - set(METHOD_KWARGS[method]))
  if unknown:
    allowed = ", ".join(METHOD_KWARGS[method]) or "none"
    raise FedJaxDpError(
        f"partition method {method!r} does not take {', '.join(unknown)}; it accepts: "
        f"{allowed}.")
  x = np.asarray(x)
  y = _check_labels(y)
  if x.ndim < 1 or x.shape[0] != y.shape[0]:
    raise FedJaxDpError(
        f"x must be [num_examples, ...] with num_examples == len(y) = {len(y)}; got x "
        f"shape {x.shape}.")
  if len(y) == 0:
    raise FedJaxDpError("cannot partition an empty dataset (len(y) == 0).")
  if np.any(y < 0):
    raise FedJaxDpError(f"labels must be >= 0, got min {y.min()}.")
  if num_classes is None:
    num_classes = int(max(y.max(), -1 if test_y is None else np.max(test_y))) + 1
  num_classes = check_int("num_classes", num_classes, minimum=1)
  if y.max() >= num_classes:
    raise FedJaxDpError(f"labels must be < num_classes={num_classes}, got max {y.max()}.")
  rng = _as_rng(seed)

  if method == "natural":
    groups = method_kwargs.get("group_ids")
    if groups is None:
      raise FedJaxDpError("partition method 'natural' needs group_ids=[num_examples].")
    groups = np.asarray(groups)
    if groups.shape != y.shape:
      raise FedJaxDpError(f"group_ids must have shape {y.shape}, got {groups.shape}.")
    parts = natural(groups)
    if num_clients is not None and num_clients != len(parts):
      raise FedJaxDpError(
          f"num_clients={num_clients} but the data has {len(parts)} natural groups; pass "
          "num_clients=None for the natural partition (or choose another partition to "
          "re-split the examples).", option="num_clients")
    if client_ids is None:
      client_ids = [str(g) for g in np.unique(groups)]
  else:
    if num_clients is None:
      raise FedJaxDpError(f"partition method {method!r} needs num_clients.")
    if method == "iid":
      parts = iid(len(y), num_clients, rng)
    elif method == "dirichlet":
      if "alpha" not in method_kwargs:
        raise FedJaxDpError("partition method 'dirichlet' needs alpha > 0 (e.g. 0.5).")
      parts = dirichlet(y, num_clients, method_kwargs["alpha"], rng,
                        min_size=method_kwargs.get("min_size", 1))
    elif method == "shards":
      parts = shards(y, num_clients, method_kwargs.get("shards_per_client", 2), rng)
    else:
      parts = quantity_skew(len(y), num_clients, method_kwargs.get("alpha"), rng,
                            sigma=method_kwargs.get("sigma"),
                            min_size=method_kwargs.get("min_size", 1))

  xp, yp, counts = gather_padded(x, y, parts)
  if method != "natural":  # the partition's parameters, defaults included, in words
    seed_txt = f", seed {int(seed)}" if isinstance(seed, (numbers.Integral, np.integer)) else ""
    note = (f"partition {describe_partition(method, **method_kwargs)} over {len(parts)} "
            f"clients{seed_txt}")
    source = f"{source}; {note}" if source else note
  if test_x is not None:
    test_x = np.asarray(test_x, dtype=np.float32)
    if test_x.shape[1:] != x.shape[1:]:
      raise FedJaxDpError(
          f"test_x must have feature shape {x.shape[1:]}, got {test_x.shape[1:]}.")
  if test_y is not None:
    test_y = np.asarray(test_y, dtype=np.int32)
  return FederatedData(
      name=name, x=xp, y=yp, counts=counts, num_classes=num_classes,
      client_ids=tuple(client_ids) if client_ids is not None else (),
      test_x=test_x, test_y=test_y, source=source, is_subset=is_subset,
      partition=method)


def pooled(fd: FederatedData) -> tuple:
  """All real training examples of ``fd``, concatenated in client order.

  Returns:
    ``(x float32 [num_examples, *feature_shape], y int32 [num_examples])``.
  """
  mask = fd.example_mask
  return fd.x[mask], fd.y[mask]


def split_clients(fd: FederatedData, test_fraction: float, seed: RngLike = 0,
                  temporal: bool = False) -> FederatedData:
  """Holds out a fraction of each client's examples as its personal test split.

  Client ``i`` with ``n_i`` examples holds out ``min(round(test_fraction * n_i),
  n_i - 1)`` of them, so it keeps at least one training example (a client with a
  single example holds out nothing; its ``client_test_counts`` entry is 0).

  Args:
    fd: a `FederatedData` without a per-client test split.
    test_fraction: fraction in ``(0, 1)`` to hold out.
    seed: int seed or Generator for the random choice (ignored when ``temporal``).
    temporal: if True, hold out each client's *last* examples in stored order (for
      time-ordered data) instead of a random subset.

  Returns:
    A copy of ``fd`` with reduced ``x/y/counts`` and ``client_test_x`` float32
    ``[C, max_test, *feature_shape]``, ``client_test_y`` int32 ``[C, max_test]``,
    ``client_test_counts`` int32 ``[C]`` (``max_test >= 1``). The central test set
    is unchanged.

  Raises:
    FedJaxDpError: if ``test_fraction`` is not in (0, 1) or ``fd`` already has a
      per-client split.
  """
  frac = check_probability("test_fraction", test_fraction)
  if frac >= 1.0:
    raise FedJaxDpError(f"test_fraction must be in the open interval (0, 1), got "
                        f"{test_fraction!r}.")
  if fd.client_test_counts is not None:
    raise FedJaxDpError(f"{fd.name} already has a per-client test split.")
  rng = _as_rng(seed)
  tr_x, tr_y, te_x, te_y = [], [], [], []
  for i in range(fd.num_clients):
    xi, yi = fd.client_data(i)
    n = len(yi)
    n_test = min(int(round(frac * n)), n - 1)
    order = np.arange(n) if temporal else rng.permutation(n)
    train_idx, test_idx = np.sort(order[:n - n_test]), np.sort(order[n - n_test:])
    tr_x.append(xi[train_idx])
    tr_y.append(yi[train_idx])
    te_x.append(xi[test_idx])
    te_y.append(yi[test_idx])
  x, y, counts = pad_client_arrays(tr_x, tr_y, fd.feature_shape)
  cx, cy, ccounts = pad_client_arrays(te_x, te_y, fd.feature_shape, min_width=1)
  return dataclasses.replace(fd, x=x, y=y, counts=counts, client_test_x=cx,
                             client_test_y=cy, client_test_counts=ccounts)

