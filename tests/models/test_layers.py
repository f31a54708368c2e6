"""`fedjax_dp.models.layers` computes exactly what flax's Conv / max_pool compute."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models.layers import Conv, extract_patches, max_pool


@pytest.mark.parametrize("shape,kernel,padding", [
    ((2, 16, 3), (5,), "SAME"), ((2, 16, 3), (4,), "SAME"), ((2, 9, 2), (3,), "VALID"),
    ((2, 8, 7, 3), (3, 3), "VALID"), ((2, 6, 6, 1), (3, 3), "SAME"),
    ((1, 7, 5, 2), (2, 3), "SAME"),
])
def test_conv_equals_flax_conv(shape, kernel, padding):
  x = jax.random.normal(jax.random.key(0), shape)
  ours = Conv(4, kernel, padding=padding)
  ref = nn.Conv(4, kernel, padding=padding)
  params = ours.init(jax.random.key(1), x)
  ref_params = ref.init(jax.random.key(1), x)
  # Same parameter names, shapes and initialiser (same key -> same values).
  assert jax.tree_util.tree_map(jnp.shape, params) == jax.tree_util.tree_map(
      jnp.shape, ref_params)
  np.testing.assert_allclose(params["params"]["kernel"], ref_params["params"]["kernel"])
  params = jax.tree_util.tree_map(
      lambda p: p + 0.1 * jax.random.normal(jax.random.key(2), p.shape), params)
  np.testing.assert_allclose(ours.apply(params, x), ref.apply(params, x),
                             rtol=1e-5, atol=1e-5)


def test_conv_vmapped_over_clients_matches_per_client():
  conv = Conv(3, (3,))
  xs = jax.random.normal(jax.random.key(0), (4, 2, 10, 2))
  ps = jax.vmap(lambda k: conv.init(k, xs[0]))(jax.random.split(jax.random.key(1), 4))
  batched = jax.vmap(conv.apply)(ps, xs)
  for i in range(4):
    p = jax.tree_util.tree_map(lambda a: a[i], ps)
    np.testing.assert_allclose(batched[i], nn.Conv(3, (3,)).apply(p, xs[i]),
                               rtol=1e-5, atol=1e-5)


def test_extract_patches_layout():
  x = jnp.arange(5.0).reshape(1, 5, 1)
  p = extract_patches(x, (3,), "VALID")
  np.testing.assert_array_equal(p[0, :, :, 0], [[0, 1, 2], [1, 2, 3], [2, 3, 4]])
  p = extract_patches(x, (3,), "SAME")
  np.testing.assert_array_equal(p[0, 0, :, 0], [0, 0, 1])
  np.testing.assert_array_equal(p[0, -1, :, 0], [3, 4, 0])
  with pytest.raises(ValueError, match="padding"):
    extract_patches(x, (3,), "FULL")
  with pytest.raises(ValueError, match="larger"):
    extract_patches(x, (7,), "VALID")


@pytest.mark.parametrize("shape,window", [((2, 9, 3), (2,)), ((2, 8, 8, 2), (2, 2)),
                                          ((1, 7, 5, 1), (2, 3))])
def test_max_pool_equals_flax(shape, window):
  x = jax.random.normal(jax.random.key(0), shape)
  np.testing.assert_array_equal(
      max_pool(x, window), nn.max_pool(x, window, strides=window, padding="VALID"))
