"""Tests of `fedjax_dp.privacy.clipping` (global-L2 clipping of pytrees)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedjax_dp.privacy import clipping

# A few fixed pytree layouts: values vary freely, shapes do not (so jit compiles once each).
STRUCTURES = [
    {"a": (3,), "b": (2, 4)},
    [(17,)],
    {"w": (5, 5), "b": (5,), "nested": {"d": (1,), "e": (2, 1, 3)}},
]

_clip = jax.jit(clipping.clip_by_global_norm)


def _leaves64(tree):
  return [np.asarray(l, np.float64) for l in jax.tree_util.tree_leaves(tree)]


def _norm64(tree):
  return float(np.sqrt(sum(np.sum(l * l) for l in _leaves64(tree))))


def _make_tree(structure, seed, scale, spread):
  rng = np.random.default_rng(seed)

  def leaf(shape):
    mags = 10.0 ** rng.uniform(-spread, spread, size=shape)
    return jnp.asarray(rng.normal(size=shape) * mags * scale, jnp.float32)

  return jax.tree_util.tree_map(leaf, structure, is_leaf=lambda s: isinstance(s, tuple))


def _assert_trees_identical(a, b):
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


SCALES = [10.0 ** k for k in range(-30, 31, 5)]
CLIPS = [0.0, 1e-30, 1e-12, 1e-3, 0.5, 1.0, 3.7, 1e3, 1e12, 1e30]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(structure=st.integers(0, len(STRUCTURES) - 1),
       seed=st.integers(0, 2**31 - 1),
       scale=st.sampled_from(SCALES),
       spread=st.floats(0.0, 3.0),
       clip=st.one_of(st.sampled_from(CLIPS), st.floats(1e-3, 1e3)))
def test_clip_property(structure, seed, scale, spread, clip):
  tree = _make_tree(STRUCTURES[structure], seed, scale, spread)
  clipped, norm, finite = _clip(tree, clip)
  c32 = float(np.float32(clip))
  ref = _norm64(tree)
  out = _norm64(clipped)

  assert bool(finite)
  assert jax.tree_util.tree_structure(clipped) == jax.tree_util.tree_structure(tree)
  # Pre-clip norm is the true global norm, even when squares would over/underflow.
  np.testing.assert_allclose(float(norm), ref, rtol=1e-5)
  # Never above C.
  assert out <= c32 * (1 + 1e-5), (out, c32)
  if c32 == 0.0:
    assert out == 0.0
  if ref < c32 * (1 - 1e-5):
    _assert_trees_identical(clipped, tree)  # below the bound: untouched, bit for bit
  elif ref > c32 * (1 + 1e-5) and c32 / ref > 1e-30:
    # Above the bound: rescaled onto the sphere of radius C, direction kept.
    np.testing.assert_allclose(out, c32, rtol=1e-4)
    for x, y in zip(_leaves64(tree), _leaves64(clipped)):
      np.testing.assert_allclose(y, x * (c32 / ref), rtol=1e-4, atol=c32 * 1e-6)


def test_global_norm_matches_numpy():
  tree = {"a": jnp.arange(6.0).reshape(2, 3), "b": [jnp.array([-2.0]), jnp.ones((2, 2))]}
  expected = np.sqrt(np.sum(np.arange(6.0) ** 2) + 4 + 4)
  np.testing.assert_allclose(float(clipping.global_norm(tree)), expected, rtol=1e-6)
  assert float(clipping.global_norm({})) == 0.0


def test_global_norm_extreme_magnitudes():
  huge = {"a": jnp.full((3,), 1e20, jnp.float32)}
  tiny = {"a": jnp.full((3,), 1e-25, jnp.float32)}
  np.testing.assert_allclose(float(clipping.global_norm(huge)), np.sqrt(3) * 1e20, rtol=1e-6)
  np.testing.assert_allclose(float(clipping.global_norm(tiny)), np.sqrt(3) * 1e-25, rtol=1e-6)
  # A huge but finite update is rescaled to norm C, not zeroed.
  clipped, _, finite = clipping.clip_by_global_norm(huge, 2.0)
  assert bool(finite)
  np.testing.assert_allclose(np.asarray(clipped["a"]), np.full(3, 2.0 / np.sqrt(3)), rtol=1e-5)
  # A tiny update above a tinier C is still clipped.
  clipped, _, _ = clipping.clip_by_global_norm(tiny, 1e-30)
  assert _norm64(clipped) <= 1e-30 * (1 + 1e-5)


def test_norm_at_or_below_clip_unchanged_exactly():
  tree = {"w": jnp.array([[0.3, -0.4], [0.1, 0.2]], jnp.float32), "b": jnp.array([0.05])}
  _, norm, _ = clipping.clip_by_global_norm(tree, 100.0)
  for c in (float(norm), float(norm) * 1.5, 1e9):
    clipped, norm_c, finite = clipping.clip_by_global_norm(tree, c)
    _assert_trees_identical(clipped, tree)
    assert float(norm_c) == float(norm) and bool(finite)


def test_clip_above_norm_scales_to_c():
  tree = {"a": jnp.array([3.0, 4.0])}
  clipped, norm, _ = clipping.clip_by_global_norm(tree, 1.0)
  assert float(norm) == pytest.approx(5.0, rel=1e-6)
  np.testing.assert_allclose(np.asarray(clipped["a"]), [0.6, 0.8], rtol=1e-6)


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_zero_tree_stays_zero(clip):
  tree = {"a": jnp.zeros((4,)), "b": jnp.zeros((2, 2))}
  clipped, norm, finite = clipping.clip_by_global_norm(tree, clip)
  for leaf in jax.tree_util.tree_leaves(clipped):
    assert np.all(np.asarray(leaf) == 0.0) and np.all(np.isfinite(np.asarray(leaf)))
  assert float(norm) == 0.0 and bool(finite)


def test_clip_zero_gives_zeros():
  tree = {"a": jnp.array([1.0, -2.0]), "b": jnp.array([[1e-3]])}
  clipped, norm, finite = clipping.clip_by_global_norm(tree, 0.0)
  for leaf in jax.tree_util.tree_leaves(clipped):
    np.testing.assert_array_equal(np.asarray(leaf), 0.0)
  assert float(norm) > 0 and bool(finite)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_tree_zeroed_and_flagged(bad):
  tree = {"a": jnp.array([1.0, bad, 2.0]), "b": jnp.array([5.0, 6.0])}
  clipped, norm, finite = clipping.clip_by_global_norm(tree, 1.0)
  assert not bool(finite)
  assert float(norm) == 0.0
  for leaf in jax.tree_util.tree_leaves(clipped):
    np.testing.assert_array_equal(np.asarray(leaf), 0.0)
  assert not bool(clipping.is_finite(tree))
  assert bool(clipping.is_finite({"a": jnp.ones(2)}))


def test_dtype_preserved():
  tree = {"h": jnp.array([30.0, 40.0], jnp.float16), "f": jnp.array([0.0], jnp.float32)}
  clipped, _, _ = clipping.clip_by_global_norm(tree, 5.0)
  assert clipped["h"].dtype == jnp.float16 and clipped["f"].dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(clipped["h"], np.float32), [3.0, 4.0], rtol=1e-3)


def _stacked_tree():
  # Rows: small (norm 0.5), big (norm 10), zero, NaN, Inf.
  a = np.array([[0.3, 0.4], [6.0, 8.0], [0.0, 0.0], [np.nan, 1.0], [1.0, 1.0]], np.float32)
  b = np.array([[0.0], [0.0], [0.0], [2.0], [np.inf]], np.float32)
  return {"a": jnp.asarray(a), "b": jnp.asarray(b)}


@pytest.mark.parametrize("fn", [clipping.clip_per_example, clipping.clip_per_client])
def test_vmapped_clipping(fn):
  tree = _stacked_tree()
  clip = 1.0
  clipped, norms, finite = jax.jit(fn)(tree, clip)
  np.testing.assert_array_equal(np.asarray(finite), [True, True, True, False, False])
  assert int(jnp.sum(~finite)) == 2
  np.testing.assert_allclose(np.asarray(norms), [0.5, 10.0, 0.0, 0.0, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(clipped["a"][0]), np.asarray(tree["a"][0]))
  np.testing.assert_allclose(np.asarray(clipped["a"][1]), [0.6, 0.8], rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(clipped["a"][2:]), 0.0)
  np.testing.assert_array_equal(np.asarray(clipped["b"][3:]), 0.0)
  # Row by row it agrees with the unbatched function.
  for i in range(5):
    row = jax.tree_util.tree_map(lambda l: l[i], tree)
    c_i, n_i, f_i = clipping.clip_by_global_norm(row, clip)
    np.testing.assert_allclose(float(norms[i]), float(n_i), rtol=1e-6)
    assert bool(finite[i]) == bool(f_i)
    for x, y in zip(jax.tree_util.tree_leaves(c_i),
                    jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda l: l[i], clipped))):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)
  out_norms = np.sqrt(np.sum(np.asarray(clipped["a"], np.float64) ** 2, 1)
                      + np.sum(np.asarray(clipped["b"], np.float64) ** 2, 1))
  assert np.all(out_norms <= clip * (1 + 1e-6))


def test_traced_clip_norm_matches_python_float():
  tree = {"a": jnp.array([3.0, 4.0])}
  eager, _, _ = clipping.clip_by_global_norm(tree, 2.0)
  traced, _, _ = _clip(tree, jnp.float32(2.0))
  np.testing.assert_array_equal(np.asarray(eager["a"]), np.asarray(traced["a"]))
