"""Partitioners: exact cover, no empty clients, skew behaviour, validation."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedjax_dp.data import partition as P
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.validation import FedJaxDpError

FAST = settings(max_examples=60, deadline=None)


def assert_exact_cover(parts, n, num_clients):
  assert len(parts) == num_clients
  assert all(len(p) >= 1 for p in parts), [len(p) for p in parts]
  assert all(p.dtype == np.int64 for p in parts)
  assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no duplicates
  allidx = np.concatenate(parts)
  assert len(allidx) == n
  np.testing.assert_array_equal(np.sort(allidx), np.arange(n))


@st.composite
def labels_and_clients(draw, max_n=200, max_classes=12):
  n = draw(st.integers(1, max_n))
  k = draw(st.integers(1, max_classes))
  labels = np.array(draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
  c = draw(st.integers(1, n))
  return labels, c


@FAST
@given(st.integers(1, 500), st.data(), st.integers(0, 2**31))
def test_iid_exact_cover_and_balanced(n, data, seed):
  c = data.draw(st.integers(1, n))
  parts = P.iid(n, c, np.random.default_rng(seed))
  assert_exact_cover(parts, n, c)
  sizes = [len(p) for p in parts]
  assert max(sizes) - min(sizes) <= 1


@FAST
@given(labels_and_clients(), st.floats(0.01, 100.0), st.integers(0, 2**31))
def test_dirichlet_exact_cover(lc, alpha, seed):
  labels, c = lc
  parts = P.dirichlet(labels, c, alpha, np.random.default_rng(seed))
  assert_exact_cover(parts, len(labels), c)


@FAST
@given(labels_and_clients(), st.integers(1, 4), st.integers(0, 2**31))
def test_dirichlet_min_size_respected(lc, min_size, seed):
  labels, _ = lc
  assume(len(labels) >= min_size)
  c = max(1, len(labels) // (min_size * 2))
  parts = P.dirichlet(labels, c, 0.05, seed, min_size=min_size)
  assert_exact_cover(parts, len(labels), c)
  assert min(len(p) for p in parts) >= min_size


@FAST
@given(labels_and_clients(), st.integers(1, 3), st.integers(0, 2**31))
def test_shards_exact_cover(lc, spc, seed):
  labels, c = lc
  assume(len(labels) >= spc)
  c = max(1, min(c, len(labels) // spc))
  parts = P.shards(labels, c, spc, np.random.default_rng(seed))
  assert_exact_cover(parts, len(labels), c)


@FAST
@given(st.integers(1, 400), st.data(), st.integers(0, 2**31), st.booleans())
def test_quantity_skew_exact_cover(n, data, seed, use_alpha):
  c = data.draw(st.integers(1, n))
  kw = {"alpha": data.draw(st.floats(0.05, 10.0))} if use_alpha else {
      "sigma": data.draw(st.floats(0.0, 3.0))}
  parts = P.quantity_skew(n, c, rng=np.random.default_rng(seed), **kw)
  assert_exact_cover(parts, n, c)


@FAST
@given(st.lists(st.sampled_from(["a", "b", "c", "zz", "q"]), min_size=1, max_size=80))
def test_natural_one_client_per_group(groups):
  g = np.array(groups)
  parts = P.natural(g)
  uniq = np.unique(g)
  assert_exact_cover(parts, len(g), len(uniq))
  for gid, p in zip(uniq, parts):
    assert np.all(g[p] == gid)


def test_partitioners_are_deterministic_given_seed():
  labels = np.arange(300) % 7
  for fn in (lambda r: P.iid(300, 9, r), lambda r: P.dirichlet(labels, 9, 0.3, r),
             lambda r: P.shards(labels, 9, 2, r),
             lambda r: P.quantity_skew(300, 9, 0.5, r)):
    a, b, c = fn(np.random.default_rng(3)), fn(3), fn(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def _mean_max_class_share(labels, parts):
  return np.mean([np.bincount(labels[p]).max() / len(p) for p in parts])


def test_dirichlet_small_alpha_is_more_skewed():
  labels = np.repeat(np.arange(10), 500)
  skewed = _mean_max_class_share(labels, P.dirichlet(labels, 20, 0.05, 0))
  mild = _mean_max_class_share(labels, P.dirichlet(labels, 20, 100.0, 0))
  assert skewed > 0.7
  assert mild < 0.25


def test_shards_two_per_client_gives_at_most_two_classes():
  labels = np.repeat(np.arange(10), 100)  # 1000 examples, shards of 10 never straddle
  parts = P.shards(labels, 50, 2, 0)
  assert max(len(np.unique(labels[p])) for p in parts) <= 2
  assert {len(p) for p in parts} == {20}


def test_quantity_skew_sizes_vary_more_with_small_alpha():
  cv = lambda parts: np.std([len(p) for p in parts]) / np.mean([len(p) for p in parts])
  assert cv(P.quantity_skew(5000, 50, 0.2, 0)) > 3 * cv(P.quantity_skew(5000, 50, 1000.0, 0))
  assert cv(P.quantity_skew(5000, 50, rng=0, sigma=2.0)) > 0.5


def test_quantity_skew_labels_iid():
  labels = np.repeat(np.arange(2), 2000)
  parts = P.quantity_skew(4000, 10, 0.5, 1)
  shares = [labels[p].mean() for p in parts if len(p) > 200]
  assert shares and all(abs(s - 0.5) < 0.12 for s in shares)


@pytest.mark.parametrize("call,match", [
    (lambda: P.iid(10, 0, 0), "num_clients must be >= 1"),
    (lambda: P.iid(10, 11, 0), r"num_clients must be in \[1, num_examples\] = \[1, 10\].*"
     r"got num_clients=11"),
    (lambda: P.dirichlet(np.zeros(10, int), 3, 0.0, 0), "alpha must be > 0"),
    (lambda: P.dirichlet(np.zeros(10, int), 3, -1.0, 0), "alpha must be > 0"),
    (lambda: P.dirichlet(np.zeros(10, int), 6, 1.0, 0, min_size=2),
     r"num_examples // min_size\] = \[1, 5\].*min_size=2"),
    (lambda: P.dirichlet(np.zeros((2, 5), int), 2, 1.0, 0), "labels must be a 1-D"),
    (lambda: P.shards(np.zeros(10, int), 6, 2, 0), "num_clients must be in"),
    (lambda: P.quantity_skew(10, 2, rng=0), "exactly one of alpha"),
    (lambda: P.quantity_skew(10, 2, 1.0, 0, sigma=1.0), "exactly one of alpha"),
    (lambda: P.quantity_skew(10, 2, 1.0), "needs rng"),
    (lambda: P.iid(10, 2, "seed"), "rng must be a numpy.random.Generator"),
    (lambda: P.natural(np.array([])), "group_ids must be a non-empty"),
])
def test_partitioner_validation(call, match):
  with pytest.raises(FedJaxDpError, match=match):
    call()


def _identity_data(n, num_classes=5):
  """x[i] = [i, i] (so examples can be traced), y[i] = i % num_classes."""
  x = np.stack([np.arange(n), np.arange(n)], axis=1).astype(np.float32)
  return x, (np.arange(n) % num_classes).astype(np.int32)


@pytest.mark.parametrize("method,kw", [
    ("iid", {}), ("dirichlet", {"alpha": 0.3}), ("shards", {"shards_per_client": 2}),
    ("quantity_skew", {"sigma": 1.0}), ("quantity_skew", {"alpha": 0.5}),
])
def test_partition_builds_federated_data_with_every_example_once(method, kw):
  x, y = _identity_data(403)
  tx, ty = x[:7], y[:7]
  fd = P.partition(x, y, method, 13, seed=2, name="toy", test_x=tx, test_y=ty, **kw)
  assert isinstance(fd, FederatedData)
  assert fd.partition == method and fd.num_clients == 13 and fd.num_classes == 5
  ids = fd.x[fd.example_mask][:, 0].astype(int)
  np.testing.assert_array_equal(np.sort(ids), np.arange(403))
  np.testing.assert_array_equal(fd.y[fd.example_mask], ids % 5)  # labels follow features
  assert fd.counts.sum() == 403 and fd.counts.min() >= 1
  np.testing.assert_array_equal(fd.test_y, ty)
  assert fd.x.dtype == np.float32 and fd.y.dtype == np.int32


def test_partition_natural_uses_group_ids_as_client_ids():
  x, y = _identity_data(12)
  groups = np.array(["u2", "u1"] * 6)
  fd = P.partition(x, y, "natural", group_ids=groups)
  assert fd.client_ids == ("u1", "u2")
  np.testing.assert_array_equal(fd.x[0, :6, 0], np.arange(1, 12, 2))
  with pytest.raises(FedJaxDpError, match="2 natural groups"):
    P.partition(x, y, "natural", 3, group_ids=groups)
  with pytest.raises(FedJaxDpError, match="needs group_ids"):
    P.partition(x, y, "natural")


def test_partition_errors_name_the_problem():
  x, y = _identity_data(20)
  with pytest.raises(FedJaxDpError, match="method must be one of 'natural', 'iid', "
                     "'dirichlet', 'shards', 'quantity_skew'; got 'random'"):
    P.partition(x, y, "random", 4)
  with pytest.raises(FedJaxDpError, match="does not take alpha; it accepts: none"):
    P.partition(x, y, "iid", 4, alpha=0.5)
  with pytest.raises(FedJaxDpError, match="needs alpha"):
    P.partition(x, y, "dirichlet", 4)
  with pytest.raises(FedJaxDpError, match="needs num_clients"):
    P.partition(x, y, "iid")
  with pytest.raises(FedJaxDpError, match=r"num_clients must be in \[1, num_examples\]"):
    P.partition(x, y, "iid", 21)
  with pytest.raises(FedJaxDpError, match="num_examples == len"):
    P.partition(x[:5], y, "iid", 2)
  with pytest.raises(FedJaxDpError, match="labels must be < num_classes=3"):
    P.partition(x, y, "iid", 2, num_classes=3)


@FAST
@given(st.lists(st.integers(1, 30), min_size=1, max_size=12), st.floats(0.05, 0.95),
       st.booleans(), st.integers(0, 1000))
def test_split_clients_properties(sizes, frac, temporal, seed):
  n = sum(sizes)
  x, y = _identity_data(n)
  parts = np.split(np.arange(n), np.cumsum(sizes)[:-1])
  fd = P.partition(x, y, "natural", group_ids=np.repeat(np.arange(len(sizes)), sizes))
  out = P.split_clients(fd, frac, seed, temporal=temporal)
  assert out.counts.min() >= 1
  np.testing.assert_array_equal(out.counts + out.client_test_counts, sizes)
  for i, p in enumerate(parts):
    train = out.x[i, :out.counts[i], 0].astype(int)
    test = out.client_test_x[i, :out.client_test_counts[i], 0].astype(int)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), p)
    expected_test = min(int(round(frac * len(p))), len(p) - 1)
    assert len(test) == expected_test
    if temporal and len(test):
      assert train.max() < test.min()  # the held-out examples are the last ones


def test_split_clients_validation():
  x, y = _identity_data(20)
  fd = P.partition(x, y, "iid", 2)
  for bad in (0.0, 1.0, 1.5, -0.1):
    with pytest.raises(FedJaxDpError, match="test_fraction"):
      P.split_clients(fd, bad)
  with pytest.raises(FedJaxDpError, match="already has a per-client test split"):
    P.split_clients(P.split_clients(fd, 0.2), 0.2)


def test_pooled_returns_all_real_examples():
  x, y = _identity_data(50)
  fd = P.partition(x, y, "dirichlet", 6, alpha=0.2)
  px, py = P.pooled(fd)
  np.testing.assert_array_equal(np.sort(px[:, 0]), np.arange(50))
  np.testing.assert_array_equal(py, px[:, 0].astype(int) % 5)
