"""Synthetic federated data: shapes, determinism, size options, learnability."""

import numpy as np
import pytest

from fedjax_dp.data.sources.synthetic import make_synthetic
from fedjax_dp.validation import FedJaxDpError


def _linear_fit_accuracy(fd):
  """Ridge regression on one-hot labels (a linear classifier); test accuracy."""
  mask = fd.example_mask
  x = fd.x[mask].reshape(mask.sum(), -1)
  y = fd.y[mask]
  xb = np.hstack([x, np.ones((len(x), 1))])
  w = np.linalg.solve(xb.T @ xb + 1e-2 * np.eye(xb.shape[1]), xb.T @ np.eye(fd.num_classes)[y])
  tx = fd.test_x.reshape(len(fd.test_x), -1)
  pred = (np.hstack([tx, np.ones((len(tx), 1))]) @ w).argmax(1)
  return float(np.mean(pred == fd.test_y))


def test_shapes_and_dtypes():
  fd = make_synthetic(num_clients=7, examples_per_client=13, feature_shape=(4, 4, 1),
                      num_classes=5, seed=1, num_test=50)
  assert fd.x.shape == (7, 13, 4, 4, 1) and fd.x.dtype == np.float32
  assert fd.y.dtype == np.int32 and fd.y.max() < 5 and fd.y.min() >= 0
  assert fd.test_x.shape == (50, 4, 4, 1) and fd.test_y.shape == (50,)
  np.testing.assert_array_equal(fd.counts, [13] * 7)
  assert fd.name == "synthetic" and fd.partition == "natural"


def test_linear_model_beats_chance_by_far():
  fd = make_synthetic(num_clients=10, examples_per_client=100, num_classes=4, seed=0)
  acc = _linear_fit_accuracy(fd)
  assert acc > 0.8, acc  # chance is 0.25


def test_harder_with_less_separation():
  easy = _linear_fit_accuracy(make_synthetic(num_classes=10, seed=3, class_sep=6.0))
  hard = _linear_fit_accuracy(make_synthetic(num_classes=10, seed=3, class_sep=0.5))
  assert easy > hard + 0.2


def test_deterministic_in_seed():
  a, b, c = make_synthetic(seed=5), make_synthetic(seed=5), make_synthetic(seed=6)
  np.testing.assert_array_equal(a.x, b.x)
  np.testing.assert_array_equal(a.test_y, b.test_y)
  assert not np.array_equal(a.x, c.x)


def test_varied_client_sizes():
  fd = make_synthetic(num_clients=40, examples_per_client=(5, 60), seed=2)
  assert fd.counts.min() >= 5 and fd.counts.max() <= 60
  assert len(np.unique(fd.counts)) > 10
  assert fd.x.shape[1] == fd.counts.max()
  assert np.all(fd.x[~fd.example_mask] == 0)  # padding rows are zero


def test_label_skew():
  skewed = make_synthetic(num_clients=20, label_alpha=0.05, num_classes=10, seed=0)
  uniform = make_synthetic(num_clients=20, num_classes=10, seed=0)
  share = lambda fd: np.mean([np.bincount(fd.client_data(i)[1]).max() / fd.counts[i]
                              for i in range(fd.num_clients)])
  assert share(skewed) > 0.6 and share(uniform) < 0.3


@pytest.mark.parametrize("kw,match", [
    ({"num_clients": 0}, "num_clients must be >= 1"),
    ({"num_classes": 1}, "num_classes must be >= 2"),
    ({"examples_per_client": 0}, "examples_per_client must be >= 1"),
    ({"examples_per_client": (5, 2)}, r"examples_per_client\[1\] must be >= 5"),
    ({"examples_per_client": (1, 2, 3)}, "an int or a"),
    ({"feature_shape": ()}, "feature_shape must be non-empty"),
    ({"class_sep": 0.0}, "class_sep must be > 0"),
    ({"label_alpha": -1.0}, "label_alpha must be > 0"),
])
def test_validation(kw, match):
  with pytest.raises(FedJaxDpError, match=match):
    make_synthetic(**kw)
