"""Tests of `fedjax_dp.federated.aggregation`."""

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.federated import aggregation
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
  for bad in ([0.5, 0.5], [0.5, 1.5, 0.0], [0.1, np.nan, 0.2], [-0.1, 0.2, 0.3]):
    with pytest.raises(FedJaxDpError, match="weights"):
      aggregation.custom_weights(bad, 3)
