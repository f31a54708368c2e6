"""Tests of `fedjax_dp.federated.aggregation`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_dp.federated import aggregation
from fedjax_dp.privacy import clipping, noise
from fedjax_dp.validation import FedJaxDpError


def _updates():
  return {"a": jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
          "b": jnp.array([10.0, 20.0, 30.0])}


def test_weighted_sum():
  out = aggregation.weighted_sum(_updates(), jnp.array([1.0, 0.5, 0.0]))
  np.testing.assert_allclose(np.asarray(out["a"]), [2.5, 4.0])
  np.testing.assert_allclose(float(out["b"]), 20.0)
  assert out["a"].shape == (2,) and out["b"].shape == ()


def test_weighted_mean_fixed_denominator():
  w = jnp.array([1.0, 1.0, 0.0])
  out = aggregation.weighted_mean(_updates(), w, denominator=8.0)
  np.testing.assert_allclose(np.asarray(out["a"]), [4.0 / 8, 6.0 / 8])
  np.testing.assert_allclose(float(out["b"]), 30.0 / 8)
  # The fixed denominator does not depend on the cohort (unlike the actual mean).
  actual = aggregation.weighted_mean(_updates(), w)
  np.testing.assert_allclose(np.asarray(actual["a"]), [2.0, 3.0])
  np.testing.assert_allclose(float(actual["b"]), 15.0)


def test_weighted_mean_zero_total_weight_is_zero_not_nan():
  out = aggregation.weighted_mean(_updates(), jnp.zeros(3))
  for leaf in (out["a"], out["b"]):
    assert np.all(np.isfinite(np.asarray(leaf)))
    np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_zero_weight_rows_contribute_exactly_zero():
  rng = np.random.default_rng(0)
  real = rng.normal(size=(3, 50)).astype(np.float32)
  pad = (rng.normal(size=(2, 50)) * 1e30).astype(np.float32)
  w_real = jnp.array([1.0, 0.3, 1.0])
  ref = aggregation.weighted_sum({"u": jnp.asarray(real)}, w_real)
  out = aggregation.weighted_sum({"u": jnp.asarray(np.concatenate([real, pad]))},
                                 jnp.concatenate([w_real, jnp.zeros(2)]))
  np.testing.assert_array_equal(np.asarray(out["u"]), np.asarray(ref["u"]))


def test_uniform_weights():
  np.testing.assert_array_equal(
      np.asarray(aggregation.uniform_weights(jnp.array([True, False, True]))), [1.0, 0.0, 1.0])


def test_data_size_weights():
  counts = jnp.array([5, 10, 40, 100, 7], jnp.int32)
  mask = jnp.array([True, True, True, True, False])
  w = np.asarray(aggregation.data_size_weights(counts, mask, cap=20.0))
  np.testing.assert_allclose(w, [0.25, 0.5, 1.0, 1.0, 0.0])
  assert np.all((w >= 0) & (w <= 1))
  raw = np.asarray(aggregation.data_size_weights(counts, mask))
  np.testing.assert_allclose(raw, [5, 10, 40, 100, 0])


def test_population_weight_total():
  counts = np.array([5, 10, 40, 100])
  assert aggregation.population_weight_total(counts, "uniform") == 4.0
  assert aggregation.population_weight_total(counts, "data_size") == 155.0
  assert aggregation.population_weight_total(counts, "data_size", cap=20) == pytest.approx(
      0.25 + 0.5 + 1 + 1)
  with pytest.raises(FedJaxDpError, match="weighting"):
    aggregation.population_weight_total(counts, "median")
  with pytest.raises(FedJaxDpError, match="data_size_cap"):
    aggregation.population_weight_total(counts, "data_size", cap=0.0)


def test_custom_weights():
  np.testing.assert_array_equal(aggregation.custom_weights([0.0, 0.5, 1.0], 3), [0, 0.5, 1])
  # Weights above 1 are accounted (the sensitivity scales with the largest), not refused.
  np.testing.assert_array_equal(aggregation.custom_weights([0.5, 1.5, 0.0], 3), [0.5, 1.5, 0])
  for bad in ([0.5, 0.5], [0.1, np.nan, 0.2], [-0.1, 0.2, 0.3]):
    with pytest.raises(FedJaxDpError, match="weights"):
      aggregation.custom_weights(bad, 3)


def _reference_clipped_sum(updates, weights, c):
  clipped, norms, finite = clipping.clip_per_client(updates, c)
  return aggregation.weighted_sum(clipped, weights), norms, finite


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 6), c=st.floats(0.0, 5.0), seed=st.integers(0, 10**6),
       poison=st.sampled_from(["none", "nan", "inf", "huge", "tiny"]))
def test_clipped_weighted_sum_equals_clip_then_sum(k, c, seed, poison):
  rng = np.random.default_rng(seed)
  u = {"a": rng.normal(size=(k, 3, 4)).astype(np.float32) * rng.uniform(0, 3, (k, 1, 1)),
       "b": rng.normal(size=(k, 5)).astype(np.float32)}
  if poison != "none":
    i = int(rng.integers(k))
    u["b"][i, 0] = {"nan": np.nan, "inf": np.inf, "huge": 3e30, "tiny": 1e-30}[poison]
    if poison == "tiny":
      u["a"][i] = 0.0
      u["b"][i] = 1e-30
  w = rng.uniform(0, 1, k).astype(np.float32)
  tot, norms, finite = jax.jit(aggregation.clipped_weighted_sum)(u, w, c)
  rt, rn, rf = _reference_clipped_sum(u, w, c)
  np.testing.assert_array_equal(np.asarray(finite), np.asarray(rf))
  for key in u:
    np.testing.assert_allclose(np.asarray(tot[key]), np.asarray(rt[key]), rtol=1e-5,
                               atol=1e-6)
  if poison != "tiny":  # tiny entries underflow to a reported norm of 0 (documented)
    np.testing.assert_allclose(np.asarray(norms), np.asarray(rn), rtol=1e-5)
  assert all(np.isfinite(np.asarray(t)).all() for t in tot.values())


def test_clipped_weighted_sum_clips_to_c():
  u = {"w": jnp.asarray([[3.0, 4.0], [0.3, 0.4]])}
  tot, norms, finite = aggregation.clipped_weighted_sum(u, jnp.ones(2), 1.0)
  np.testing.assert_allclose(np.asarray(norms), [5.0, 0.5], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(tot["w"]), [0.6 + 0.3, 0.8 + 0.4], rtol=1e-6)
  assert bool(finite.all())


def test_dp_aggregate_is_clipped_sum_plus_noise():
  rng = np.random.default_rng(0)
  u = {"a": rng.normal(size=(7, 30)).astype(np.float32),
       "b": rng.normal(size=(7, 2, 2)).astype(np.float32)}
  w = rng.uniform(0, 1, 7).astype(np.float32)
  key = jax.random.key(4)
  got = aggregation.dp_aggregate(u, w, 2.0, 0.0, key)
  ref, _, _ = _reference_clipped_sum(u, w, 2.0)
  for k in u:
    np.testing.assert_allclose(np.asarray(got[k]), np.asarray(ref[k]), rtol=1e-5, atol=1e-6)
  noisy = aggregation.dp_aggregate(u, w, 2.0, 3.0, key)
  expect = noise.add_gaussian_noise(key, ref, 3.0)
  for k in u:
    np.testing.assert_allclose(np.asarray(noisy[k]), np.asarray(expect[k]), rtol=1e-5,
                               atol=1e-5)
