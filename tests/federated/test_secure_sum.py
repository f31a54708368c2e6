"""Tests of `fedjax_dp.federated.secure_sum`: the randomized Hadamard rotation,
conditional randomized rounding and the modular arithmetic of secure aggregation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.federated import secure_sum as ss
from fedjax_dp.validation import FedJaxDpError

NUM_SE = 6.0
BITS = [2, 12, 16, 31, 32]


def test_padded_dim():
  assert [ss.padded_dim(p) for p in (1, 2, 3, 4, 5, 1000, 1024, 1025)] == \
      [1, 2, 4, 4, 8, 1024, 1024, 2048]
  for bad in (0, -3, 2.5, "8"):
    with pytest.raises(FedJaxDpError) as e:
      ss.padded_dim(bad)
    assert e.value.option == "dim"


def test_rotation_signs_are_rademacher():
  s = np.asarray(ss.rotation_signs(jax.random.key(0), 4096))
  assert s.dtype == np.float32 and s.shape == (4096,)
  assert set(np.unique(s)) == {-1.0, 1.0}
  assert abs(s.mean()) < NUM_SE / math.sqrt(s.size)
  assert not np.array_equal(s, np.asarray(ss.rotation_signs(jax.random.key(1), 4096)))


@pytest.mark.parametrize("d", [1, 2, 8, 1024])
def test_hadamard_is_orthonormal_and_inverted(d):
  signs = ss.rotation_signs(jax.random.key(d), d)
  # The matrix of the rotation, row by row (its rows are the images of e_i).
  m = np.asarray(jax.vmap(lambda e: ss.randomized_hadamard(e, signs))(jnp.eye(d)),
                 np.float64)
  assert np.abs(m @ m.T - np.eye(d)).max() < 1e-5
  x = jax.random.normal(jax.random.key(1), (5, d), jnp.float32)
  y = ss.randomized_hadamard(x, signs)   # leading axes are batch axes
  assert y.dtype == jnp.float32 and y.shape == (5, d)
  np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1),
                             rtol=1e-5)
  np.testing.assert_allclose(ss.inverse_randomized_hadamard(y, signs), x, atol=1e-5)
  np.testing.assert_allclose(y, np.asarray(x, np.float64) @ m, atol=1e-5)


def test_hadamard_flattens_a_one_hot_vector():
  d = 1024
  signs = ss.rotation_signs(jax.random.key(2), d)
  for j in (0, 17, d - 1):
    y = np.asarray(ss.randomized_hadamard(jnp.zeros(d).at[j].set(1.0), signs))
    np.testing.assert_allclose(np.abs(y), 1 / math.sqrt(d), rtol=1e-6)


def test_hadamard_refuses_bad_shapes():
  with pytest.raises(FedJaxDpError) as e:
    ss.randomized_hadamard(jnp.zeros(6), jnp.ones(6))
  assert e.value.option == "x"
  with pytest.raises(FedJaxDpError) as e:
    ss.inverse_randomized_hadamard(jnp.zeros(8), jnp.ones(4))
  assert e.value.option == "signs"


def test_rounded_l2_bound():
  c, d = 30.0, 1024
  assert ss.rounded_l2_bound(c, d, 0.0) == c + 32.0
  beta = math.exp(-0.5)
  assert ss.rounded_l2_bound(c, d, beta) == pytest.approx(
      math.sqrt(c * c + d / 4 + 1.0 * (c + 16.0)))
  # A tiny beta makes the first term larger than the worst case c + sqrt(d): the min.
  assert ss.rounded_l2_bound(0.0, 4, 1e-6) == 2.0
  assert ss.rounded_l2_bound(c, d, 0.1) < ss.rounded_l2_bound(c, d, 1e-6) <= c + 32
  for bad in (1.0, -0.1, float("nan")):
    with pytest.raises(FedJaxDpError) as e:
      ss.rounded_l2_bound(c, d, bad)
    assert e.value.option == "beta"
  with pytest.raises(FedJaxDpError) as e:
    ss.rounded_l2_bound(-1.0, d, 0.1)
  assert e.value.option == "scaled_clip"


def _norms_sq(r):
  r = np.asarray(r, np.int64)
  return np.sum(r * r, axis=-1)


def test_conditional_rounding_is_unbiased_when_the_bound_is_loose():
  d, n = 16, 4000
  x = jax.random.uniform(jax.random.key(0), (d,), jnp.float32, -3.0, 3.0)
  keys = jax.random.split(jax.random.key(1), n)
  r, tries = jax.jit(jax.vmap(lambda k: ss.conditional_rounding(k, x, 1e6)))(keys)
  assert r.dtype == jnp.int32 and tries.dtype == jnp.int32
  assert np.all(np.asarray(tries) == 1)
  r = np.asarray(r, np.float64)
  xs = np.asarray(x, np.float64)
  assert np.all((r == np.floor(xs)) | (r == np.floor(xs) + 1))
  frac = xs - np.floor(xs)
  se = np.sqrt(frac * (1 - frac) / n) + 1e-9
  assert np.all(np.abs(r.mean(0) - xs) <= NUM_SE * se)


def test_conditional_rounding_respects_the_bound_under_vmap_and_jit():
  d, k, c = 256, 64, 40.0
  bound = ss.rounded_l2_bound(c, d, 0.01)
  x = jax.random.normal(jax.random.key(3), (k, d))
  x = x / jnp.linalg.norm(x, axis=1, keepdims=True) * c
  keys = jax.random.split(jax.random.key(4), k)
  f = jax.jit(jax.vmap(ss.conditional_rounding, in_axes=(0, 0, None)))
  for b in (bound, math.sqrt(c * c + d / 4)):   # loose, then tight: many retries
    r, tries = f(keys, x, jnp.float32(b))
    assert r.shape == (k, d) and r.dtype == jnp.int32
    assert np.all(_norms_sq(r) <= b * b)
    assert np.all((np.asarray(tries) >= 1) & (np.asarray(tries) <= 65))
  assert np.asarray(tries).max() > 1      # the tight bound made some clients retry


def test_conditional_rounding_falls_back_within_the_bound():
  # 0.5 everywhere: a randomized rounding has ~d/2 ones; the bound allows one.
  x = jnp.full((64,), 0.5)
  r, tries = ss.conditional_rounding(jax.random.key(0), x, 1.0, max_tries=8)
  assert int(tries) == 9 and not np.any(np.asarray(r))     # trunc(x) = 0
  # 1.5 everywhere: randomized roundings have norm^2 16 + 3 (#ups) > 16.1; trunc(x)
  # (all ones, norm 4) is within the bound.
  x = jnp.full((16,), 1.5)
  r, tries = ss.conditional_rounding(jax.random.key(1), x, 4.01, max_tries=8)
  assert int(tries) == 9 and np.all(np.asarray(r) == 1)
  # -1.5: truncation is toward zero.
  r, _ = ss.conditional_rounding(jax.random.key(1), -x, 4.01, max_tries=8)
  assert np.all(np.asarray(r) == -1)
  # An input that was not clipped (trunc(x) over the bound too): the zero vector.
  r, tries = ss.conditional_rounding(jax.random.key(2), jnp.full((16,), 3.0), 4.0)
  assert int(tries) == 65 and not np.any(np.asarray(r))


def test_conditional_rounding_bound_check_is_conservative_at_the_edge():
  # Integer input: every rounding is x itself, of norm^2 exactly 4 * 64 = 256.
  x = jnp.full((64,), 2.0)
  r, tries = ss.conditional_rounding(jax.random.key(0), x, 16.0 * (1 + 2e-6))
  assert int(tries) == 1 and np.all(np.asarray(r) == 2)
  _, tries = ss.conditional_rounding(jax.random.key(0), x, 16.0, max_tries=2)
  assert int(tries) == 3   # exactly at the bound: refused by the float32 margin
  with pytest.raises(FedJaxDpError) as e:
    ss.conditional_rounding(jax.random.key(0), x, 0.0)
  assert e.value.option == "l2_bound"
  with pytest.raises(FedJaxDpError) as e:
    ss.conditional_rounding(jax.random.key(0), jnp.zeros((2, 2)), 1.0)
  assert e.value.option == "x"


def _secure_sum(v, mask, bits):
  return ss.centre(ss.modular_sum(ss.wrap(v, bits), mask, bits), bits)


@pytest.mark.parametrize("bits", BITS)
def test_modular_sum_is_exact_within_range(bits):
  """Large individual values (up to ~2^30) whose true sum is within range: the
  modular sum, centred, is that sum exactly. Masked-out rows are ignored."""
  k, d = 7, 500
  rng = np.random.default_rng(bits)
  mask = np.array([True, True, False, True, True, True, False])
  half = 2 ** (bits - 1)
  lim = min(half, 2**30)
  target = rng.integers(-lim, lim, size=d)
  v = rng.integers(-2**27, 2**27, size=(k, d), dtype=np.int64)
  v[~mask] = rng.integers(-2**31, 2**31, size=(int((~mask).sum()), d))   # ignored
  last = np.flatnonzero(mask)[-1]
  v[last] = target - (v[mask].sum(0) - v[last])
  v32 = jnp.asarray(v, jnp.int32)
  w = ss.wrap(v32, bits)
  assert w.dtype == jnp.uint32 and int(jnp.max(w)) < 2 ** bits
  got = _secure_sum(v32, jnp.asarray(mask), bits)
  assert got.dtype == jnp.int32 and got.shape == (d,)
  np.testing.assert_array_equal(np.asarray(got, np.int64), target)
  # float32 rounds values within 2^(bits-24) of the edge onto it: checked away from it.
  margin = 2.0 ** (bits - 23) if bits > 24 else 0.0
  safe = (target >= -half + margin) & (target < half - margin)
  flagged = np.asarray(ss.overflowed(jnp.asarray(target, jnp.float32), bits))
  assert safe.mean() > 0.99 and not np.any(flagged[safe])
  f = jax.jit(_secure_sum, static_argnums=2)
  np.testing.assert_array_equal(f(v32, jnp.asarray(mask), bits), got)


@pytest.mark.parametrize("bits", BITS)
def test_modular_sum_wraps_around_out_of_range(bits):
  k, d = 4, 2000
  rng = np.random.default_rng(100 + bits)
  half = 2 ** (bits - 1)
  v = rng.integers(-2**31, 2**31, size=(k, d), dtype=np.int64)
  mask = np.ones(k, bool)
  got = np.asarray(_secure_sum(jnp.asarray(v, jnp.int32), jnp.asarray(mask), bits),
                   np.int64)
  true = v.sum(0)
  assert np.all((got >= -half) & (got < half))
  assert np.all((got - true) % 2 ** bits == 0)           # equal modulo 2^bits
  out = (true < -half) | (true >= half)
  assert out.any()
  assert np.all(got[~out] == true[~out]) and np.all(got[out] != true[out])
  # overflowed() flags exactly those (float32 sums away from the edges).
  t32 = true.astype(np.float32)
  clear = np.abs(np.abs(true) - half) > 2 ** 10 + np.abs(true) * 2.0 ** -23
  flagged = np.asarray(ss.overflowed(jnp.asarray(t32), bits))
  np.testing.assert_array_equal(flagged[clear], out[clear])


@pytest.mark.parametrize("bits", BITS)
def test_centre_edges_and_overflowed_edges(bits):
  half = 2 ** (bits - 1)
  vals = np.array([-half, -half + 1, -1, 0, 1, half - 1], np.int64)
  u = jnp.asarray(vals % 2 ** bits, jnp.uint32)
  np.testing.assert_array_equal(np.asarray(ss.centre(u, bits), np.int64), vals)
  edges = jnp.asarray([-half - 2.0 ** max(bits - 24, 0), -half, half - 1,
                       half, float("nan")], jnp.float32)
  if bits > 24:   # half - 1 is not a float32 there: it rounds to half
    edges = edges.at[2].set(-half + 2.0 ** (bits - 24))
  np.testing.assert_array_equal(ss.overflowed(edges, bits),
                                [True, False, False, True, True])


def test_modular_arithmetic_refuses_bad_arguments():
  v = jnp.zeros((3,), jnp.int32)
  for bad in (1, 33, 8.5):
    with pytest.raises(FedJaxDpError) as e:
      ss.wrap(v, bad)
    assert e.value.option == "bits"
  with pytest.raises(FedJaxDpError) as e:
    ss.wrap(jnp.zeros(3), 8)
  assert e.value.option == "v"
  with pytest.raises(FedJaxDpError) as e:
    ss.modular_sum(jnp.zeros((2, 3), jnp.uint32), jnp.ones(3, bool), 8)
  assert e.value.option == "mask"
  with pytest.raises(FedJaxDpError) as e:
    ss.centre(jnp.zeros(3, jnp.int32), 8)
  assert e.value.option == "u"


def test_pipeline_recovers_the_sum_without_noise():
  """Clients: pad, scale by 1 / gamma, rotate, round conditionally, wrap; server: the
  modular sum, centred, rotated back and rescaled, is the sum of the clipped vectors
  up to the rounding (each coordinate moves by < 1: error norm < sqrt(K d) gamma)."""
  k, p, gamma, bits, c = 8, 300, 1e-3, 20, 1.0
  d = ss.padded_dim(p)
  x = jax.random.normal(jax.random.key(0), (k, p))
  x = x / jnp.linalg.norm(x, axis=1, keepdims=True) * c
  signs = ss.rotation_signs(jax.random.key(1), d)
  bound = ss.rounded_l2_bound(c / gamma, d, 1e-3)

  def client(key, xi):
    z = ss.randomized_hadamard(jnp.pad(xi, (0, d - p)) / gamma, signs)
    r, _ = ss.conditional_rounding(key, z, bound)
    return ss.wrap(r, bits)

  uploads = jax.jit(jax.vmap(client))(jax.random.split(jax.random.key(2), k), x)
  total = ss.centre(ss.modular_sum(uploads, jnp.ones(k, bool), bits), bits)
  est = ss.inverse_randomized_hadamard(total.astype(jnp.float32), signs)[:p] * gamma
  err = np.linalg.norm(np.asarray(est, np.float64) - np.asarray(x.sum(0), np.float64))
  assert err < math.sqrt(k * d) * gamma
