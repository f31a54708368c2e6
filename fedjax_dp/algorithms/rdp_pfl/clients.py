"""RDP-PFL's clients: the 3-classes-per-client partition, source/target clients, the
query/support split of each source client, and the target clients' adaptation and test
sets (Wei et al., IEEE TIFS 2023, Sec. V-A; our choices where the paper leaves them open).

Partition (the paper's "as done in [29]", Zhuang et al., ICLR 2022, as we reconstruct
it): ``num_clients`` distinct class sets of ``classes_per_client`` classes each; every
client gets one set and ``samples_per_class`` training images of each of its classes,
no image used twice.
A class can only appear in ``floor(available / samples_per_class)`` sets (a capacity
check: MNIST's digit 5 has 5,421 images), so sets are drawn with that cap.
``target_fraction`` of the clients (the paper's 40%) are target clients that never
train: they adapt the global model with one gradient step (eq. 4) on their own training
images and are evaluated on ``test_per_class`` images of each of their classes from the
dataset's test split (our choice; the paper does not say) -- or on a held-out part of
their own images when the dataset has no test split.

Each source client's rows are shuffled and given their roles by position, once, when
the data is prepared: row i belongs to the query set D^Q (the inner step's data) iff
``floor((i + 1) f) > floor(i f)`` with f the query fraction (`is_query_row`; for f = 1/2
the odd rows), else to the support set D^S (the outer step's); a client with n rows has
``floor(n f)`` query rows (`split_counts`). The roles are then stored with the records
(`MetaSplit.query_rows`) and the algorithm reads each record's own role
(`fedjax_dp.algorithms.rdp_pfl.algorithm.rdp_pfl`'s ``query_rows``). A position rule
applied to the neighbouring dataset would not do: appending a record never moves
another, but removing any record but the last shifts every later row by one, and (for
f = 1/2) flips each later record between query and support, so the neighbouring
datasets would differ in many records of each stage. With the roles
stored, the neighbouring datasets differ in one record of one role.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.data.partition import gather_padded
from fedjax_dp.validation import FedJaxDpError, check_int, check_probability


def class_sets(num_classes: int, num_clients: int, classes_per_client: int,
               capacity: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """``num_clients`` distinct sets of ``classes_per_client`` classes, each class in at
  most ``capacity[c]`` sets.

  Sets are drawn one by one from the classes with the most remaining capacity first
  (ties broken at random), then shuffled: every draw respects the caps and is distinct.

  Returns:
    int32 ``[num_clients, classes_per_client]`` (each row sorted).

  Raises:
    FedJaxDpError: fewer distinct sets than clients, or not enough capacity.
  """
  k = check_int("classes_per_client", classes_per_client, minimum=1, maximum=num_classes)
  n = check_int("num_clients", num_clients, minimum=1)
  if math.comb(num_classes, k) < n:
    raise FedJaxDpError(
        f"num_clients={n} needs {n} distinct class sets, but there are only "
        f"C({num_classes}, {k}) = {math.comb(num_classes, k)}; lower num_clients or "
        "raise classes_per_client.", option="num_clients")
  cap = np.asarray(capacity, np.int64).copy()
  if cap.sum() < n * k:
    raise FedJaxDpError(
        f"{n} clients x {k} classes need {n * k} class slots, but the data holds only "
        f"{int(cap.sum())} at samples_per_class; lower samples_per_class or num_clients.",
        option="samples_per_class")
  for _ in range(200):
    left = cap.copy()
    seen, sets = set(), []
    for _ in range(n):
      order = np.lexsort((rng.random(num_classes), -left))  # most capacity first
      cands = [c for c in order if left[c] > 0]
      chosen = None
      for _ in range(50):  # a random distinct set among the classes with capacity
        weights = left[cands].astype(np.float64)
        pick = rng.choice(cands, size=k, replace=False, p=weights / weights.sum()) \
            if len(cands) >= k else None
        if pick is None:
          break
        s = tuple(sorted(int(c) for c in pick))
        if s not in seen:
          chosen = s
          break
      if chosen is None:
        break
      seen.add(chosen)
      sets.append(chosen)
      left[list(chosen)] -= 1
    if len(sets) == n:
      out = np.asarray(sets, np.int32)
      return out[rng.permutation(n)]
  raise FedJaxDpError(
      f"could not draw {n} distinct {k}-class sets within the per-class capacities "
      f"{cap.tolist()}; lower samples_per_class or num_clients.", option="samples_per_class")


@dataclasses.dataclass(frozen=True)
class MetaSplit:
  """The paper's clients as host arrays.

  Attributes:
    source: `FederatedData` of the U source clients (rows shuffled; query rows by
      `is_query_row`), with the target clients' pooled test images as its central test
      set (evaluation of the global model without adaptation).
    adapt_x, adapt_y, adapt_counts: the K target clients' adaptation data, padded
      ``[K, n_a, ...]``, ``[K, n_a]``, ``[K]``.
    test_x, test_y, test_counts: the target clients' test data, ``[K, n_t, ...]``.
    class_sets: int32 ``[num_clients, classes_per_client]``; rows of source clients
      first, then target clients.
    query_fraction: the share of each source client's rows in its query set.
    description: one line for outputs (data, sizes, where the test data comes from),
      from the configuration only (public).
    query_rows: bool ``[U, max_examples]``: each source row's role (True: query set),
      assigned at preparation and kept with the record (module docstring).
    nominal_sizes: ``(n^Q, n^S)``, a source client's query and support set sizes by
      the configuration (every source client holds ``classes_per_client x
      samples_per_class`` images): public, the DP-SGD divisors' n.
  """
  source: FederatedData
  adapt_x: np.ndarray
  adapt_y: np.ndarray
  adapt_counts: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  test_counts: np.ndarray
  class_sets: np.ndarray
  query_fraction: float
  description: str
  query_rows: Optional[np.ndarray] = None
  nominal_sizes: Optional[Tuple[int, int]] = None


def is_query_row(max_examples: int, query_fraction: float) -> np.ndarray:
  """bool ``[max_examples]``: row i is a query row iff ``floor((i+1) f) > floor(i f)``
  (module docstring); the first n rows hold ``floor(n f)`` query rows."""
  i = np.arange(max_examples, dtype=np.float64)
  return np.floor((i + 1) * query_fraction + 1e-9) > np.floor(i * query_fraction + 1e-9)


def split_counts(counts, query_fraction: float):
  """``(n_Q, n_S)`` per client: ``n_Q = floor(query_fraction * n)``, ``n_S = n - n_Q``
  (int32, same shape as ``counts``; works on NumPy and traced arrays)."""
  xp = jnp if isinstance(counts, jax.Array) else np
  n_q = xp.floor(query_fraction * counts.astype(xp.float32) + 1e-6).astype(xp.int32)
  return n_q, counts.astype(xp.int32) - n_q


def make_meta_split(x: np.ndarray, y: np.ndarray, test_x: Optional[np.ndarray],
                    test_y: Optional[np.ndarray], *, num_classes: int,
                    num_clients: int = 50, classes_per_client: int = 3,
                    samples_per_class: int = 200, target_fraction: float = 0.4,
                    query_fraction: float = 0.5, test_per_class: int = 100,
                    seed: int = 0, name: str = "data", source: str = "",
                    is_subset: bool = False) -> MetaSplit:
  """Builds the paper's clients from central arrays (module docstring).

  Args:
    x: float32 ``[n, *feature_shape]`` training images; y: int ``[n]`` labels.
    test_x, test_y: the dataset's test split (target clients' test images), or None:
      then each target client holds out ``test_per_class`` of its own images per class
      (taken from its ``samples_per_class``, which must be larger).
    num_classes: number of classes of the labels.
    num_clients: clients in total (source + target), the paper's 50.
    classes_per_client: classes per client, the paper's 3.
    samples_per_class: training images per class per client, the paper's 200.
    target_fraction: share of target clients in (0, 1), the paper's 0.4 (20 of 50).
    query_fraction: share of a source client's images in its query set, in (0, 1); the
      paper's 0.5 (300 / 300).
    test_per_class: test images per class per target client (not stated in the
      paper; our default 100).
    seed: seed of every random choice here.
    name, source, is_subset: provenance for the `FederatedData`.

  Returns:
    A `MetaSplit`.

  Raises:
    FedJaxDpError: invalid arguments, or not enough images (naming the argument).
  """
  rng = np.random.default_rng(check_int("seed", seed, minimum=0))
  spc = check_int("samples_per_class", samples_per_class, minimum=2)
  tpc = check_int("test_per_class", test_per_class, minimum=1)
  tf = check_probability("target_fraction", target_fraction)
  qf = check_probability("query_fraction", query_fraction)
  if tf >= 1.0 or qf >= 1.0:
    raise FedJaxDpError(f"target_fraction and query_fraction must be in (0, 1), got "
                        f"{tf} and {qf}.", option="target_fraction" if tf >= 1 else
                        "query_fraction")
  y = np.asarray(y).astype(np.int64)
  own_test = test_x is None
  per_class_train = spc + (tpc if own_test else 0)
  available = np.bincount(y, minlength=num_classes)
  sets = class_sets(num_classes, num_clients, classes_per_client,
                    available // per_class_train, rng)
  n_target = int(round(tf * num_clients))
  if not 1 <= n_target < num_clients:
    raise FedJaxDpError(f"target_fraction={tf} of num_clients={num_clients} leaves "
                        f"{n_target} target clients; need at least one source and one "
                        "target client.", option="target_fraction")
  pools = {c: list(rng.permutation(np.flatnonzero(y == c))) for c in range(num_classes)}
  parts, held = [], []
  for s in sets:
    idx, hold = [], []
    for c in s:
      take = [pools[c].pop() for _ in range(per_class_train)]
      idx += take[:spc]
      hold += take[spc:]
    parts.append(rng.permutation(np.asarray(idx, np.int64)))
    held.append(np.asarray(hold, np.int64))
  n_source = num_clients - n_target
  src_parts, tgt_parts = parts[:n_source], parts[n_source:]
  sx, sy, sc = gather_padded(x, y, src_parts)
  ax, ay, ac = gather_padded(x, y, tgt_parts)
  if own_test:
    tx, ty, tc = gather_padded(x, y, held[n_source:])
    where = f"{tpc} held-out training images per class"
  else:
    test_y = np.asarray(test_y).astype(np.int64)
    tparts = []
    for s in sets[n_source:]:
      idx = []
      for c in s:
        cls = np.flatnonzero(test_y == c)
        if len(cls) < tpc:
          raise FedJaxDpError(f"test_per_class={tpc} exceeds the {len(cls)} test images "
                              f"of class {c}.", option="test_per_class")
        idx += list(rng.choice(cls, size=tpc, replace=False))
      tparts.append(np.asarray(idx, np.int64))
    tx, ty, tc = gather_padded(test_x, test_y, tparts)
    where = f"{tpc} test-split images per class"
  pooled_x = np.concatenate([tx[k, :tc[k]] for k in range(len(tc))])
  pooled_y = np.concatenate([ty[k, :tc[k]] for k in range(len(tc))])
  fd = FederatedData(
      name=name, x=sx, y=sy, counts=sc, num_classes=num_classes,
      client_ids=tuple(f"source_{i:02d}" for i in range(n_source)),
      test_x=pooled_x, test_y=pooled_y, source=source, is_subset=is_subset,
      partition=f"{classes_per_client}-class sets")
  # Public by design: every source client holds classes_per_client x spc images.
  n_q, n_s = (int(v[0]) for v in split_counts(np.array([classes_per_client * spc]), qf))
  desc = (f"{name}{' (subset)' if is_subset else ''}: {num_clients} clients x "
          f"{classes_per_client} classes x {spc} images; {n_source} source clients "
          f"(query/support {n_q}/{n_s}), {n_target} target clients "
          f"(adapt on their {classes_per_client * spc} images, test on {where})")
  roles = np.broadcast_to(is_query_row(fd.max_examples, qf),
                          (n_source, fd.max_examples)).copy()
  return MetaSplit(fd, ax, ay.astype(np.int32), ac, tx, ty.astype(np.int32), tc, sets, qf,
                   desc, roles, (n_q, n_s))


def personalise(model, params, x, y, count, eta):
  """One plain gradient step on a target client's own data (eq. 4, no DP: the
  personalised model is never uploaded): ``theta_j = w - eta grad F_j(w, D_j)``, with
  ``F_j`` the mean loss over the client's ``count`` real rows of ``x [n, ...]``."""
  mask = (jnp.arange(x.shape[0]) < count).astype(jnp.float32)

  def loss(p):
    per = model.per_example_loss(model.apply(p, x), y)
    return jnp.sum(per * mask) / jnp.maximum(jnp.sum(mask), 1.0)

  g = jax.grad(loss)(params)
  return jax.tree_util.tree_map(lambda w, d: w - eta * d, params, g)


def _loss_acc(model, params, x, y, count):
  mask = (jnp.arange(x.shape[0]) < count).astype(jnp.float32)
  logits = model.apply(params, x)
  per = model.per_example_loss(logits, y)
  correct = (jnp.argmax(logits, -1) == y).astype(jnp.float32)
  n = jnp.maximum(jnp.sum(mask), 1.0)
  return jnp.sum(per * mask) / n, jnp.sum(correct * mask) / n


def personalised_metrics(model, params, adapt: Tuple, test: Tuple, eta
                         ) -> Tuple[jax.Array, ...]:
  """Target clients' mean (over clients, unweighted: our reading of the paper's "fast
  adaptation" accuracy) test loss and accuracy after one-step adaptation (eq. 4), and
  without adaptation, vmapped over clients.

  Args:
    model: a `fedjax_dp.models.Model`.
    params: the global model w.
    adapt: ``(x [K, n_a, ...], y [K, n_a], counts [K])``.
    test: ``(x [K, n_t, ...], y [K, n_t], counts [K])``.
    eta: float32 adaptation step (the inner learning rate, per eq. 4).

  Returns:
    float32 scalars ``(loss, accuracy, loss_no_adapt, accuracy_no_adapt)``.
  """
  def one(ax, ay, ac, tx, ty, tc):
    theta = personalise(model, params, ax, ay, ac, eta)
    return _loss_acc(model, theta, tx, ty, tc) + _loss_acc(model, params, tx, ty, tc)

  out = jax.vmap(one)(*adapt, *test)
  return tuple(jnp.mean(v) for v in out)
