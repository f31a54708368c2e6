"""Synthetic federated classification data (Gaussian class-conditional features).

Class ``k`` has a mean ``mu_k ~ N(0, class_sep^2 / d * I)`` in the flattened feature
space of dimension ``d`` (so ``||mu_k|| ~ class_sep``); an example of class ``k`` is
``mu_k + noise * N(0, I)``, reshaped to ``feature_shape``. Labels are uniform per
client, or drawn from a per-client ``Dir(label_alpha)`` distribution for label skew.
A linear classifier separates the classes well for ``class_sep`` a few times
``noise`` (the default 4 vs 1 gives well above chance accuracy), which makes the data
suitable for tests and benchmarks that must learn something.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from fedjax_dp.data.federated_data import FederatedData, pad_client_arrays
from fedjax_dp.validation import FedJaxDpError, check_int, check_non_negative, check_positive

__all__ = [
    "make_synthetic",
]


def _client_sizes(examples_per_client, num_clients: int,
                  rng: np.random.Generator) -> np.ndarray:
  if isinstance(examples_per_client, (tuple, list)):
    if len(examples_per_client) != 2:
      raise FedJaxDpError(
          f"examples_per_client must be an int or a (min, max) pair, got "
          f"{examples_per_client!r}.")
    lo = check_int("examples_per_client[0]", examples_per_client[0], minimum=1)
    hi = check_int("examples_per_client[1]", examples_per_client[1], minimum=lo)
    return rng.integers(lo, hi + 1, size=num_clients)
  n = check_int("examples_per_client", examples_per_client, minimum=1)
  return np.full(num_clients, n)


def make_synthetic(num_clients: int = 10,
                   examples_per_client: Union[int, Tuple[int, int]] = 100,
                   feature_shape: Sequence[int] = (16,), num_classes: int = 4,
                   seed: int = 0, class_sep: float = 4.0, noise: float = 1.0,
                   label_alpha: Optional[float] = None,
                   num_test: int = 1000) -> FederatedData:
  """Generates a synthetic `FederatedData`.

  Args:
    num_clients: number of clients (>= 1).
    examples_per_client: examples per client, an int (all equal) or an inclusive
      ``(min, max)`` range drawn uniformly per client.
    feature_shape: per-example feature shape, e.g. ``(16,)`` or ``(8, 8, 1)``.
    num_classes: number of classes (>= 2).
    seed: random seed (>= 0); equal seeds give identical data.
    class_sep: expected norm of the class means (> 0); larger is easier.
    noise: per-coordinate noise standard deviation (>= 0).
    label_alpha: if given (> 0), each client's label distribution is drawn from
      ``Dir(label_alpha)``; otherwise labels are uniform.
    num_test: size of the central test set (>= 0; 0 means none), uniform labels.

  Returns:
    `FederatedData` named ``"synthetic"`` with float32 ``x`` ``[num_clients,
    max_n, *feature_shape]``, int32 ``y`` in ``[0, num_classes)`` and
    ``partition="natural"``.

  Raises:
    FedJaxDpError: on any out-of-range argument.
  """
  num_clients = check_int("num_clients", num_clients, minimum=1)
  num_classes = check_int("num_classes", num_classes, minimum=2)
  seed = check_int("seed", seed, minimum=0)
  class_sep = check_positive("class_sep", class_sep)
  noise = check_non_negative("noise", noise)
  num_test = check_int("num_test", num_test, minimum=0)
  feature_shape = tuple(int(s) for s in feature_shape)
  if not feature_shape or min(feature_shape) < 1:
    raise FedJaxDpError(f"feature_shape must be non-empty with sizes >= 1, got "
                        f"{feature_shape}.")
  if label_alpha is not None:
    label_alpha = check_positive("label_alpha", label_alpha)
  rng = np.random.default_rng(seed)
  sizes = _client_sizes(examples_per_client, num_clients, rng)
  dim = int(np.prod(feature_shape))
  means = rng.normal(0.0, class_sep / np.sqrt(dim), size=(num_classes, dim))

  def sample(labels):
    x = means[labels] + noise * rng.normal(size=(len(labels), dim))
    return x.astype(np.float32).reshape((len(labels),) + feature_shape)

  xs, ys = [], []
  for n in sizes:
    if label_alpha is None:
      labels = rng.integers(0, num_classes, size=n)
    else:
      labels = rng.choice(num_classes, size=n, p=rng.dirichlet(np.full(num_classes,
                                                                       label_alpha)))
    xs.append(sample(labels))
    ys.append(labels.astype(np.int32))
  x, y, counts = pad_client_arrays(xs, ys, feature_shape)
  test_x = test_y = None
  if num_test:
    test_y = rng.integers(0, num_classes, size=num_test).astype(np.int32)
    test_x = sample(test_y)
  skew = "uniform labels" if label_alpha is None else f"label Dir({label_alpha})"
  return FederatedData(
      name="synthetic", x=x, y=y, counts=counts, num_classes=num_classes,
      client_ids=tuple(f"client_{i:04d}" for i in range(num_clients)),
      test_x=test_x, test_y=test_y,
      source=(f"synthetic Gaussian classes (seed={seed}, class_sep={class_sep}, "
              f"noise={noise}, {skew})"),
      partition="natural")
