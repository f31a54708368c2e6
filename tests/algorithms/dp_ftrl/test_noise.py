"""Tests of the correlated noise generators (fedjax_dp.algorithms.dp_ftrl.noise)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_ftrl.noise import (BandedNoise, TreeNoise, standard_normal_like,
                                                tree_levels)
from fedjax_dp.validation import FedJaxDpError

LIKE = {"a": jnp.zeros((3,)), "b": jnp.zeros((2, 2))}
ROOT = jax.random.PRNGKey(7)


def _flat(tree):
  return np.concatenate([np.ravel(np.asarray(l)) for l in jax.tree_util.tree_leaves(tree)])


def _scan(gen, rounds, stddev, like=LIKE, root=ROOT):
  """Round noises [rounds, d] from a jitted lax.scan (keys fold_in(root, t))."""
  def body(state, t):
    noise, state = gen.sample(state, jax.random.fold_in(root, t), like, stddev)
    return state, noise
  _, noises = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(rounds)))(gen.init(like))
  leaves = jax.tree_util.tree_leaves(noises)
  return np.concatenate([np.asarray(l).reshape(rounds, -1) for l in leaves], axis=1)


def _draws(rounds, like=LIKE, root=ROOT):
  """The standard normal draws z_t [rounds, d] the generators use in round t."""
  return np.stack([_flat(standard_normal_like(jax.random.fold_in(root, t), like))
                   for t in range(rounds)])


def test_tree_levels():
  assert [tree_levels(t) for t in (1, 2, 3, 4, 7, 8, 9, 16)] == [1, 2, 2, 3, 3, 4, 4, 5]
  assert TreeNoise(8).levels == 4
  with pytest.raises(FedJaxDpError):
    TreeNoise(0)


def test_tree_prefix_noise_is_the_dyadic_decomposition_and_restarts():
  """Round t's noise sums, within one tree, to the node noises of the dyadic
  decomposition of s = t + 1 (the node of level j covering leaves ending at
  (s >> j) << j was drawn in the round that completed it); after a restart the sum
  starts again from the new tree's nodes."""
  t_len, std, rounds = 8, 1.5, 2 * 8 + 5
  noises = _scan(TreeNoise(t_len), rounds, std)
  v = std * _draws(rounds)  # v[t]: the node completed in round t
  for start in (0, t_len, 2 * t_len):
    stop = min(start + t_len, rounds)
    prefix = np.cumsum(noises[start:stop], axis=0)
    for s in range(1, stop - start + 1):
      nodes = [start + ((s >> j) << j) - 1 for j in range(4) if s >> j & 1]
      assert len(nodes) == bin(s).count("1")
      np.testing.assert_allclose(prefix[s - 1], v[nodes].sum(0), rtol=1e-5, atol=1e-5)
  # First round of each tree: a fresh node only (nothing of the previous tree).
  np.testing.assert_allclose(noises[t_len], v[t_len], rtol=1e-6)
  np.testing.assert_allclose(noises[2 * t_len], v[2 * t_len], rtol=1e-6)


def test_tree_prefix_variance_is_popcount():
  """Empirically: Var(prefix noise after s rounds) = popcount(s) stddev^2."""
  gen, like = TreeNoise(8), jnp.zeros((1,))

  def prefixes(key):
    def body(state, t):
      noise, state = gen.sample(state, jax.random.fold_in(key, t), like, 2.0)
      return state, noise[0]
    return jnp.cumsum(jax.lax.scan(body, gen.init(like), jnp.arange(8))[1])

  p = np.asarray(jax.jit(jax.vmap(prefixes))(jax.random.split(ROOT, 4000)))
  var = p.var(axis=0) / 4.0
  expected = np.array([bin(s).count("1") for s in range(1, 9)], np.float64)
  np.testing.assert_allclose(var, expected, rtol=0.1)


def test_tree_state_has_fixed_shapes():
  gen = TreeNoise(5)
  state = gen.init(LIKE)
  _, new = jax.eval_shape(lambda s: gen.sample(s, ROOT, LIKE, 1.0), state)
  assert jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), new) == \
      jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), state)
  assert state["nodes"]["b"].shape == (3, 2, 2)


@pytest.mark.parametrize("strategy", ["optimized", "sqrt"])
def test_banded_noise_is_stddev_c_inverse_z(strategy):
  n, bands, std = 12, 3, 0.7
  gen = BandedNoise.create(n, bands, strategy)
  noises = _scan(gen, n, std)
  c = gen.matrix()
  expected = std * np.linalg.solve(c, _draws(n))  # stddev C^-1 z, densely in float64
  np.testing.assert_allclose(noises, expected, rtol=1e-4, atol=1e-5)


def test_banded_matrix_structure():
  gen = BandedNoise.create(10, 3)
  c = gen.matrix()
  assert np.allclose(np.linalg.norm(c, axis=0), 1.0)
  assert np.allclose(c, np.tril(c)) and np.allclose(np.tril(c, -3), 0.0)
  coefs = gen.coefs / np.linalg.norm(gen.coefs)
  # Toeplitz before normalisation: every full column is the coefficient vector.
  for t in range(10 - 3):
    np.testing.assert_allclose(c[t:t + 3, t], coefs, rtol=1e-5)
  assert (gen.coefs > 0).all() and (np.diff(gen.coefs) <= 0).all()
  band = gen.bands_matrix(6)
  for d in range(3):
    np.testing.assert_allclose(band[:6 - d, d], c[np.arange(6 - d) + d, np.arange(6 - d)])


def test_one_band_is_independent_noise():
  gen = BandedNoise.create(6, 1)
  np.testing.assert_allclose(gen.matrix(), np.eye(6))
  np.testing.assert_allclose(_scan(gen, 6, 2.0), 2.0 * _draws(6), rtol=1e-6)


def test_banded_state_fixed_shapes_and_nan_past_its_rounds():
  gen = BandedNoise.create(4, 2)
  state = gen.init(LIKE)
  _, new = jax.eval_shape(lambda s: gen.sample(s, ROOT, LIKE, 1.0), state)
  assert jax.tree_util.tree_map(lambda a: (a.shape, a.dtype, a.weak_type), new) == \
      jax.tree_util.tree_map(lambda a: (a.shape, a.dtype, a.weak_type), state)
  noises = _scan(gen, 5, 1.0)
  assert np.isfinite(noises[:4]).all() and np.isnan(noises[4]).all()


@pytest.mark.parametrize("kwargs,option", [
    (dict(rounds=4, bands=5), "bands"),
    (dict(rounds=4, bands=0), "bands"),
    (dict(rounds=0, bands=1), "rounds"),
    (dict(rounds=4, bands=2, strategy="dense"), "strategy"),
])
def test_banded_bad_arguments(kwargs, option):
  with pytest.raises(FedJaxDpError) as err:
    BandedNoise.create(**kwargs)
  assert err.value.option == option
