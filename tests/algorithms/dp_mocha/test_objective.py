"""Tests for `fedjax_dp.algorithms.dp_mocha.objective` (Hu et al. 2020, eqs. 1, 4, 5, 6):
hinge loss, primal, dual and the primal-dual map against float64 numpy references
written the way the paper writes them (block-diagonal X in R^{md x n}, Omega~ = Omega
(x) I_d as an explicit Kronecker product, Omega^{-1} by np.linalg.inv), weak duality on
random feasible duals and random PSD Omega of trace 1, prediction and device errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_mocha import objective as obj


# ---------------------------------------------------------------------------
# Small synthetic problems (float64 numpy; the JAX side gets float32 copies).
# ---------------------------------------------------------------------------

def make_data(seed, m=4, n_max=9, d=5, garbage_padding=True):
  """Padded rows with ||x|| <= 1 and labels in {-1, +1} (0 on padding). With
  ``garbage_padding`` the padding rows of x hold large junk, which every masked
  function must ignore."""
  rng = np.random.default_rng(seed)
  counts = rng.integers(2, n_max + 1, size=m)
  counts[0] = n_max
  mask = (np.arange(n_max)[None, :] < counts[:, None]).astype(np.float64)
  x = rng.normal(size=(m, n_max, d))
  x /= np.linalg.norm(x, axis=-1, keepdims=True)
  x *= rng.uniform(0.2, 1.0, size=(m, n_max, 1))
  x *= mask[..., None]
  if garbage_padding:
    x += (1.0 - mask)[..., None] * 7.0 * rng.normal(size=x.shape)
  y = rng.choice([-1.0, 1.0], size=(m, n_max)) * mask
  return x, y, mask, counts


def random_omega(rng, m, rank=None):
  """A random PSD m x m matrix of trace 1 (positive definite when rank >= m)."""
  a = rng.normal(size=(m, rank or m + 2))
  om = a @ a.T
  return om / np.trace(om)


def feasible_alpha(rng, y, mask, garbage_padding=True):
  """Random dual variables with y * alpha in [0, 1], some exactly at 0 or 1 (the box's
  corners); padding entries are junk if ``garbage_padding``."""
  a = rng.uniform(0.0, 1.0, size=y.shape)
  a = np.where(rng.uniform(size=y.shape) < 0.2, 0.0, a)
  a = np.where(rng.uniform(size=y.shape) < 0.2, 1.0, a)
  alpha = y * a * mask
  if garbage_padding:
    alpha = alpha + (1.0 - mask) * rng.normal(size=y.shape)
  return alpha


def f32(*arrays):
  return tuple(jnp.asarray(a, jnp.float32) for a in arrays)


# ---------------------------------------------------------------------------
# float64 references, written as the paper writes them.
# ---------------------------------------------------------------------------

def paper_blocks(x, mask, counts):
  """The paper's X = diag(X_1, ..., X_m) in R^{md x n} (column (t, i) is x_t^i in block
  row t), n = sum_t n_t real samples only."""
  m, _, d = x.shape
  n = int(np.sum(counts))
  big = np.zeros((m * d, n))
  col = 0
  for t in range(m):
    for i in range(int(counts[t])):
      big[t * d:(t + 1) * d, col] = x[t, i]
      col += 1
  return big


def paper_vector(a, counts):
  """alpha in R^n: the real entries of every device, device after device."""
  return np.concatenate([a[t, :int(counts[t])] for t in range(len(counts))])


def np_primal(w, omega, x, y, counts, lam):
  """Eq. (1): sum_t sum_i max(0, 1 - y w_t^T x) + lam tr(W Omega^{-1} W^T), W = [w_1..w_m]
  in R^{d x m}."""
  loss = 0.0
  for t in range(len(counts)):
    for i in range(int(counts[t])):
      loss += max(0.0, 1.0 - y[t, i] * float(w[t] @ x[t, i]))
  big_w = w.T
  return loss + lam * np.trace(big_w @ np.linalg.inv(omega) @ big_w.T)


def np_kron_map(alpha, omega, x, mask, counts, lam):
  """Eq. (6): w(alpha) = (1 / (2 lam)) (Omega (x) I_d) X alpha, reshaped to [m, d]."""
  m, _, d = x.shape
  w = np.kron(omega, np.eye(d)) @ paper_blocks(x, mask, counts) @ paper_vector(alpha,
                                                                                counts)
  return w.reshape(m, d) / (2.0 * lam)


def np_dual(alpha, omega, x, y, mask, counts, lam):
  """Eq. (5) for the hinge (l*(-a) = -a y on the box): -y^T alpha +
  (1 / (4 lam)) ||X alpha||^2_{Omega (x) I_d}."""
  d = x.shape[-1]
  xa = paper_blocks(x, mask, counts) @ paper_vector(alpha, counts)
  return (-paper_vector(y, counts) @ paper_vector(alpha, counts)
          + xa @ np.kron(omega, np.eye(d)) @ xa / (4.0 * lam))


# ---------------------------------------------------------------------------
# Tests.
# ---------------------------------------------------------------------------

def test_hinge_loss_values():
  u = jnp.asarray([-2.0, 0.0, 0.5, 1.0, 3.0])
  np.testing.assert_allclose(obj.hinge_loss(u, jnp.ones(5)), [3.0, 1.0, 0.5, 0.0, 0.0])
  np.testing.assert_allclose(obj.hinge_loss(u, -jnp.ones(5)), [0.0, 1.0, 1.5, 2.0, 4.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_primal_matches_a_direct_numpy_sum(seed):
  rng = np.random.default_rng(100 + seed)
  x, y, mask, counts = make_data(seed)
  m, _, d = x.shape
  w = rng.normal(size=(m, d))
  omega = random_omega(rng, m)
  lam = 0.37
  got = float(obj.primal(*f32(w, omega, x, y, mask), lam))
  assert got == pytest.approx(np_primal(w, omega, x, y, counts, lam), rel=2e-5)
  # The regulariser alone (eq. 1's lam tr(W Omega^-1 W^T)).
  reg = lam * np.trace(w.T @ np.linalg.inv(omega) @ w)
  assert float(obj.regulariser(*f32(w, omega), lam)) == pytest.approx(reg, rel=2e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_primal_dual_map_is_the_kronecker_formula(seed):
  rng = np.random.default_rng(200 + seed)
  x, y, mask, counts = make_data(seed, m=5, n_max=7, d=4)
  alpha = feasible_alpha(rng, y, mask)
  omega = random_omega(rng, 5)
  lam = 0.2
  got = np.asarray(obj.primal_dual_map(*f32(alpha, omega, x, mask), lam))
  want = np_kron_map(alpha, omega, x, mask, counts, lam)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
  # device_sums is X_t alpha_t (real rows only).
  sums = np.asarray(obj.device_sums(*f32(alpha, x, mask)))
  for t in range(5):
    c = int(counts[t])
    np.testing.assert_allclose(sums[t], alpha[t, :c] @ x[t, :c], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dual_matches_numpy_with_the_explicit_kronecker_matrix(seed):
  rng = np.random.default_rng(300 + seed)
  x, y, mask, counts = make_data(seed, m=3, n_max=11, d=6)
  alpha = feasible_alpha(rng, y, mask)
  omega = random_omega(rng, 3)
  lam = 0.05
  got = float(obj.dual(*f32(alpha, omega, x, y, mask), lam))
  want = np_dual(alpha, omega, x, y, mask, counts, lam)
  assert got == pytest.approx(want, rel=1e-5, abs=1e-4)


def test_duality_gap_is_primal_of_the_map_plus_dual():
  rng = np.random.default_rng(7)
  x, y, mask, counts = make_data(7)
  alpha = feasible_alpha(rng, y, mask)
  omega = random_omega(rng, 4)
  lam = 0.3
  w = np_kron_map(alpha, omega, x, mask, counts, lam)
  want = np_primal(w, omega, x, y, counts, lam) + np_dual(alpha, omega, x, y, mask,
                                                          counts, lam)
  got = float(obj.duality_gap(*f32(alpha, omega, x, y, mask), lam))
  assert got == pytest.approx(want, rel=1e-4, abs=1e-3)
  # At alpha = 0: w = 0, every hinge is 1, D = 0, so the gap is n.
  zero = float(obj.duality_gap(*f32(np.zeros_like(alpha), omega, x, y, mask), lam))
  assert zero == pytest.approx(float(np.sum(counts)), rel=1e-6)


@pytest.mark.parametrize("m,n_max,d", [(3, 14, 4), (6, 8, 10)])
def test_weak_duality_on_random_feasible_alpha_and_omega(m, n_max, d):
  """P(W, Omega) + D(alpha) >= 0 for every W and every feasible alpha (weak duality),
  in particular at W = w(alpha) (the duality gap, Lemma 3's G >= 0). 40 random draws
  per shape of data, alpha (box corners included), lam and PSD Omega of trace 1 (low
  rank included), evaluated in one vmapped call."""
  rng = np.random.default_rng(11 + m)
  trials = 40
  batch = {k: [] for k in ("alpha", "omega", "x", "y", "mask", "lam", "w")}
  ref_gap = []
  for trial in range(trials):
    x, y, mask, counts = make_data(1000 * m + trial, m=m, n_max=n_max, d=d)
    alpha = feasible_alpha(rng, y, mask)
    omega = random_omega(rng, m, rank=int(rng.integers(1, m + 3))) + 1e-3 * np.eye(m)
    omega /= np.trace(omega)
    lam = float(10 ** rng.uniform(-2, 1))
    w = rng.normal(size=(m, d)) * rng.uniform(0.0, 3.0)
    for k, v in zip(batch, (alpha, omega, x, y, mask, lam, w)):
      batch[k].append(v)
    wa = np_kron_map(alpha, omega, x, mask, counts, lam)
    ref_gap.append((np_primal(wa, omega, x, y, counts, lam)
                    + np_dual(alpha, omega, x, y, mask, counts, lam)) / counts.sum())
  b = {k: jnp.asarray(np.stack(v), jnp.float32) for k, v in batch.items()}
  scale = np.sum(np.stack(batch["mask"]), axis=(1, 2))
  gap = np.asarray(jax.vmap(obj.duality_gap)(b["alpha"], b["omega"], b["x"], b["y"],
                                            b["mask"], b["lam"])) / scale
  pair = np.asarray(
      jax.vmap(obj.primal)(b["w"], b["omega"], b["x"], b["y"], b["mask"], b["lam"])
      + jax.vmap(obj.dual)(b["alpha"], b["omega"], b["x"], b["y"], b["mask"],
                           b["lam"])) / scale
  # The float64 reference agrees with the float32 gap, and both are >= 0.
  np.testing.assert_allclose(gap, ref_gap, rtol=1e-3, atol=1e-4)
  assert np.min(ref_gap) >= -1e-12
  assert np.min(gap) >= -1e-5
  assert np.min(pair) >= -1e-5
  # Not vacuous: the gaps are of order 1 per sample, not all zero.
  assert np.median(gap) > 1e-2


def test_predict_maps_zero_margin_to_minus_one():
  x = jnp.asarray([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, 0.0]]])
  w = jnp.asarray([[2.0, 0.0]])
  np.testing.assert_array_equal(obj.predict(w, x), [[1.0, -1.0, -1.0, -1.0]])
  # w = 0 predicts the majority class -1 everywhere.
  np.testing.assert_array_equal(obj.predict(jnp.zeros((1, 2)), x), -np.ones((1, 4)))


def test_device_errors_and_means_against_numpy():
  rng = np.random.default_rng(5)
  x, y, mask, counts = make_data(5, m=5, n_max=10, d=4, garbage_padding=False)
  mask[4] = 0.0  # a device without rows: error 0, hinge 0
  y[4] = 0.0
  x[4] = 0.0
  w = rng.normal(size=(5, 4))
  margins = np.einsum("tnd,td->tn", x, w)
  pred = np.where(margins > 0, 1.0, -1.0)
  err = np.array([np.sum((pred[t] != y[t]) * mask[t]) / max(mask[t].sum(), 1.0)
                  for t in range(5)])
  hinge = np.array([np.sum(np.maximum(0, 1 - y[t] * margins[t]) * mask[t])
                    / max(mask[t].sum(), 1.0) for t in range(5)])
  args = f32(w, x, y, mask)
  np.testing.assert_allclose(obj.device_errors(*args), err, rtol=1e-6)
  assert err[4] == 0.0 and 0.0 < err[:4].max()
  assert float(obj.mean_device_error(*args)) == pytest.approx(err.mean(), rel=1e-6)
  assert float(obj.mean_device_hinge(*args)) == pytest.approx(hinge.mean(), rel=1e-5)
  # A perfect model: y = sign(w^T x) on every real row -> error 0.
  y_true = np.where(margins > 0, 1.0, -1.0) * mask
  assert float(obj.mean_device_error(*f32(w, x, y_true, mask))) == 0.0
