"""`pad_client_arrays` and `from_client_lists` (the padded layout)."""

import numpy as np
import pytest

from fedjax_dp.data.federated_data import from_client_lists, pad_client_arrays
from fedjax_dp.validation import FedJaxDpError


def test_pad_client_arrays_allows_empty_clients():
  xs = [np.ones((2, 3)), np.zeros((0, 3)), 2 * np.ones((1, 3))]
  ys = [np.array([1, 2]), np.zeros(0, int), np.array([3])]
  x, y, counts = pad_client_arrays(xs, ys)
  assert x.shape == (3, 2, 3) and x.dtype == np.float32 and y.dtype == np.int32
  np.testing.assert_array_equal(counts, [2, 0, 1])
  np.testing.assert_array_equal(y, [[1, 2], [0, 0], [3, 0]])
  assert np.all(x[1] == 0) and np.all(x[2, 1] == 0) and np.all(x[2, 0] == 2)


def test_pad_client_arrays_min_width():
  x, y, counts = pad_client_arrays([np.zeros((0, 4))], [np.zeros(0, int)], (4,))
  assert x.shape == (1, 1, 4) and counts.tolist() == [0]


def test_pad_client_arrays_errors():
  with pytest.raises(FedJaxDpError, match="client 1 has feature shape"):
    pad_client_arrays([np.ones((1, 2)), np.ones((1, 3))], [[0], [0]])
  with pytest.raises(FedJaxDpError, match="client 0 has 2 features but 1 labels"):
    pad_client_arrays([np.ones((2, 2))], [[0]])


def test_from_client_lists_still_refuses_empty_clients():
  with pytest.raises(FedJaxDpError, match=r"clients \[1\] have no examples"):
    from_client_lists("t", [np.ones((1, 2)), np.ones((0, 2))], [[0], []], num_classes=2)
  fd = from_client_lists("t", [np.ones((1, 2)), np.ones((3, 2))], [[0], [1, 1, 0]], 2)
  np.testing.assert_array_equal(fd.counts, [1, 3])
  assert fd.x.shape == (2, 3, 2)
