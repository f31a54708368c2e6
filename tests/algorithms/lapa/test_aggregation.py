"""Tests of the paper-001 aggregation weights (fedjax_dp.algorithms.lapa.aggregation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from fedjax_dp.algorithms.lapa import aggregation as agg
from fedjax_dp.validation import FedJaxDpError


def test_fedavg_weights():
  counts = np.array([100, 300, 600, 1000])
  np.testing.assert_allclose(agg.fedavg_weights(counts), counts / 2000)
  sel = np.array([True, False, True, False])
  w = agg.fedavg_weights(counts, sel)
  np.testing.assert_allclose(w, [100 / 700, 0.0, 600 / 700, 0.0])
  assert w[1] == 0.0 and w[3] == 0.0
  jw = jax.jit(agg.fedavg_weights)(jnp.asarray(counts), jnp.asarray(sel))
  np.testing.assert_allclose(np.asarray(jw), w, rtol=1e-6)
  assert np.all(np.asarray(agg.fedavg_weights(jnp.asarray(counts), jnp.zeros(4, bool))) == 0)
  with pytest.raises(FedJaxDpError, match="selected"):
    agg.fedavg_weights(counts, np.zeros(4, bool))
  with pytest.raises(FedJaxDpError, match="counts"):
    agg.fedavg_weights(np.array([1, -1]))
  with pytest.raises(FedJaxDpError, match="selected"):
    agg.fedavg_weights(counts, np.ones(3, bool))


def test_label_pmfs_and_global_pmf_ignore_padding():
  labels = np.array([[0, 0, 1, 7], [2, 2, 2, 2], [1, 2, 9, 9]])  # 9s are padding
  counts = np.array([3, 4, 2])
  pmf = agg.label_pmfs(labels, counts, 3)
  np.testing.assert_allclose(pmf, [[2 / 3, 1 / 3, 0], [0, 0, 1], [0, 0.5, 0.5]])
  assert pmf.dtype == np.float64
  np.testing.assert_allclose(agg.global_pmf(labels, counts, 3), [2 / 9, 2 / 9, 5 / 9])
  with pytest.raises(FedJaxDpError, match="labels"):
    agg.label_pmfs(labels, np.array([4, 4, 2]), 3)  # label 7 becomes real
  with pytest.raises(FedJaxDpError, match="counts"):
    agg.label_pmfs(labels, np.array([0, 4, 2]), 3)
  with pytest.raises(FedJaxDpError, match="num_classes"):
    agg.global_pmf(labels, counts, 0)


def test_wasserstein_point_masses_and_identity():
  p0, p9 = np.eye(10)[0], np.eye(10)[9]
  assert agg.wasserstein_1d(p0, p9) == pytest.approx(9.0)
  u = np.full(10, 0.1)
  assert agg.wasserstein_1d(u, u) == 0.0
  assert agg.wasserstein_1d(p0, u) == pytest.approx(4.5)


def test_wasserstein_matches_scipy():
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.full(10, 0.3), size=6)
  q = rng.dirichlet(np.ones(10))
  got = agg.wasserstein_1d(p, q)
  assert got.shape == (6,)
  k = np.arange(10)
  want = [wasserstein_distance(k, k, pi, q) for pi in p]
  np.testing.assert_allclose(got, want, rtol=1e-10)
  jgot = jax.jit(agg.wasserstein_1d)(jnp.asarray(p), jnp.asarray(q))
  np.testing.assert_allclose(np.asarray(jgot), want, rtol=1e-5, atol=1e-6)
  with pytest.raises(FedJaxDpError, match="p"):
    agg.wasserstein_1d(p * 2, q)
  with pytest.raises(FedJaxDpError, match="p"):
    agg.wasserstein_1d(p[:, :5], q)


def test_wasserstein_weights():
  dist = np.array([0.0, 1.0, 2.0, 0.5])
  w = agg.wasserstein_weights(dist)
  e = np.exp(-dist)
  np.testing.assert_allclose(w, e / e.sum())
  assert np.argmax(w) == 0  # W = 0 (same PMF as the global one) gets the largest weight
  sel = np.array([False, True, True, True])
  ws = agg.wasserstein_weights(dist, sel)
  assert ws[0] == 0.0
  np.testing.assert_allclose(ws.sum(), 1.0)
  np.testing.assert_allclose(ws[1:], e[1:] / e[1:].sum())
  # Stable for large distances (no underflow to 0 / 0).
  big = agg.wasserstein_weights(np.array([1000.0, 1001.0]))
  np.testing.assert_allclose(big, [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1))])
  jw = jax.jit(agg.wasserstein_weights)(jnp.asarray(dist), jnp.asarray(sel))
  np.testing.assert_allclose(np.asarray(jw), ws, rtol=1e-6)
  none = jax.jit(agg.wasserstein_weights)(jnp.asarray(dist), jnp.zeros(4, bool))
  np.testing.assert_array_equal(np.asarray(none), np.zeros(4))
  with pytest.raises(FedJaxDpError, match="selected"):
    agg.wasserstein_weights(dist, np.zeros(4, bool))


def test_fedadp_angle_weights_formula():
  theta = np.array([0.2, 0.8, 1.2, 1.5, 0.3])
  counts = np.array([100, 200, 300, 50, 400])
  f = 5.0 * (1 - np.exp(-np.exp(-5.0 * (theta - 1))))
  want = counts * np.exp(f) / np.sum(counts * np.exp(f))
  got = jax.jit(agg.fedadp_angle_weights)(jnp.asarray(theta), jnp.asarray(counts))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
  sel = np.array([True, True, False, True, False])
  ws = np.asarray(agg.fedadp_angle_weights(theta, counts, sel))
  assert ws[2] == 0.0 and ws[4] == 0.0
  m = sel
  np.testing.assert_allclose(ws[m], want[m] / want[m].sum(), rtol=1e-5)
  # Decreasing in the angle at equal data sizes.
  eq = np.asarray(agg.fedadp_angle_weights(jnp.linspace(0, np.pi, 7), jnp.ones(7)))
  assert np.all(np.diff(eq) < 0)


def test_fedadp_angle_weights_edge_cases():
  # Huge alpha: exp(f) overflows float32 without the max subtraction.
  w = np.asarray(agg.fedadp_angle_weights(jnp.array([0.0, 0.1]), jnp.array([1.0, 1.0]),
                                          alpha=100.0))
  assert np.all(np.isfinite(w)) and w.sum() == pytest.approx(1.0)
  zero = np.asarray(agg.fedadp_angle_weights(jnp.array([0.1, 0.2]), jnp.array([0.0, 5.0])))
  np.testing.assert_allclose(zero, [0.0, 1.0])
  none = agg.fedadp_angle_weights(jnp.array([0.1, 0.2]), jnp.array([1, 1]),
                                  jnp.zeros(2, bool))
  np.testing.assert_array_equal(np.asarray(none), [0.0, 0.0])
  with pytest.raises(FedJaxDpError, match="alpha"):
    agg.fedadp_angle_weights(jnp.zeros(2), jnp.ones(2), alpha=0.0)
  with pytest.raises(FedJaxDpError, match="counts"):
    agg.fedadp_angle_weights(jnp.zeros(2), jnp.ones(3))


def test_deviation_angles():
  g = jnp.array([1.0, 0.0, 0.0])
  local = jnp.array([[2.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0],
                     [1.0, 1.0, 0.0]])
  th = np.asarray(jax.jit(agg.deviation_angles)(local, g))
  np.testing.assert_allclose(th, [0.0, np.pi, np.pi / 2, np.pi / 2, np.pi / 4], atol=1e-3)
  np.testing.assert_allclose(np.asarray(agg.deviation_angles(local, jnp.zeros(3))),
                             np.full(5, np.pi / 2))
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(6, 50)), rng.normal(size=50)
  cos = a @ b / (np.linalg.norm(a, axis=1) * np.linalg.norm(b))
  np.testing.assert_allclose(np.asarray(agg.deviation_angles(a, b)), np.arccos(cos),
                             rtol=1e-5)
  # Large magnitudes do not overflow float32.
  assert np.allclose(np.asarray(agg.deviation_angles(local * 1e30, g * 1e30))[:3],
                     [0.0, np.pi, np.pi / 2], atol=1e-3)
  with pytest.raises(FedJaxDpError, match="local"):
    agg.deviation_angles(local, jnp.ones(4))


def test_smoothed_angles_is_running_mean():
  rng = np.random.default_rng(1)
  thetas = rng.uniform(0, np.pi, size=(6, 4)).astype(np.float32)
  first = agg.smoothed_angles(jnp.full(4, jnp.nan), thetas[0], 1)
  np.testing.assert_allclose(np.asarray(first), thetas[0])

  def step(prev, xs):
    t, th = xs
    new = agg.smoothed_angles(prev, th, t)
    return new, new

  _, path = jax.lax.scan(step, jnp.zeros(4), (jnp.arange(1, 7), jnp.asarray(thetas)))
  want = np.cumsum(thetas, axis=0) / np.arange(1, 7)[:, None]
  np.testing.assert_allclose(np.asarray(path), want, rtol=1e-5)
  with pytest.raises(FedJaxDpError, match="t"):
    agg.smoothed_angles(jnp.zeros(4), thetas[0], 0)
