"""Tests for DP-MOCHA's local solver (`fedjax_dp.algorithms.dp_mocha.sdca`, Hu et al.
2020, Algorithm 1 line 4, eq. 7) and its server side (`...dp_mocha.server`, eq. 3,
line 10, and the resync we add): the closed-form SDCA coordinate step against a fine 1-D grid
search, feasibility, padding, step masks, v = X dalpha, long SDCA runs against a
float64 box-constrained QP solution, the duality gap of non-private rounds at fixed
Omega, and the Omega closed form against random feasible Omega and its KKT condition."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from fedjax_dp.algorithms.dp_mocha import algorithm as alg
from fedjax_dp.algorithms.dp_mocha import objective as obj
from fedjax_dp.algorithms.dp_mocha import sdca, server
from fedjax_dp.validation import FedJaxDpError


def make_device_batch(seed, m=4, n_max=12, d=6, garbage_padding=True):
  """m devices: rows with ||x|| <= 1 (junk on padding rows when ``garbage_padding``),
  labels in {-1, +1}, random feasible alpha (y alpha in [0, 1], 0 on padding), random
  w_t and c_t = beta Omega_tt / (2 lam) spread over [0.05, 20]. float64 numpy."""
  rng = np.random.default_rng(seed)
  counts = rng.integers(3, n_max + 1, size=m)
  counts[0] = n_max
  mask = (np.arange(n_max)[None, :] < counts[:, None]).astype(np.float64)
  x = rng.normal(size=(m, n_max, d))
  x /= np.linalg.norm(x, axis=-1, keepdims=True)
  x *= rng.uniform(0.2, 1.0, size=(m, n_max, 1)) * mask[..., None]
  y = rng.choice([-1.0, 1.0], size=(m, n_max)) * mask
  if garbage_padding:
    x += (1.0 - mask)[..., None] * 5.0 * rng.normal(size=x.shape)
    y += (1.0 - mask) * rng.choice([-1.0, 1.0], size=y.shape)
  a = rng.uniform(size=(m, n_max))
  a = np.where(rng.uniform(size=a.shape) < 0.25, 0.0, a)
  a = np.where(rng.uniform(size=a.shape) < 0.25, 1.0, a)
  alpha = y * a * mask
  w = rng.normal(size=(m, d)) * rng.uniform(0.0, 1.5, size=(m, 1))
  c = 10 ** rng.uniform(np.log10(0.05), np.log10(20.0), size=m)
  return dict(x=x, y=y, mask=mask, counts=counts, alpha=alpha, w=w, c=c)


@functools.partial(jax.jit, static_argnums=(8,))
def run_sdca(keys, w, alpha, x, y, counts, c, steps, max_steps):
  return sdca.local_sdca(keys, w, alpha, x, y, counts, c, steps, max_steps)


sdca_one = jax.jit(sdca.local_sdca_one, static_argnums=(8,))


def sdca_of(b, keys, steps, max_steps):
  f = lambda k: jnp.asarray(b[k], jnp.float32)
  return run_sdca(keys, f("w"), f("alpha"), f("x"), f("y"),
                  jnp.asarray(b["counts"], jnp.int32), f("c"),
                  jnp.asarray(steps, jnp.int32), max_steps)


def np_local_objective(dalpha, w, alpha, x, y, mask, c):
  """Eq. (7) for the hinge in float64: -sum y (alpha + dalpha) + w^T X dalpha +
  (c / 2) ||X dalpha||^2, c = beta Omega_tt / (2 lam) (real rows only)."""
  v = (dalpha * mask) @ x
  return -np.sum(y * (alpha + dalpha) * mask) + w @ v + 0.5 * c * v @ v


def qp_minimum(w, alpha, x, y, count, c):
  """The exact minimum of eq. (7) over the box y (alpha + dalpha) in [0, 1] (float64
  L-BFGS-B in b = y (alpha + dalpha)); returns (dalpha over the real rows, value)."""
  xt, yt, at = x[:count], y[:count], alpha[:count]

  def fun(b):
    da = yt * b - at
    v = da @ xt
    return -np.sum(b) + w @ v + 0.5 * c * v @ v, yt * (xt @ (w + c * v)) - 1.0

  res = minimize(fun, np.clip(yt * at, 0, 1), jac=True, method="L-BFGS-B",
                 bounds=[(0.0, 1.0)] * count,
                 options=dict(ftol=1e-15, gtol=1e-12, maxiter=20000))
  return yt * res.x - at, float(res.fun)


# ---------------------------------------------------------------------------
# SDCA (line 4, eq. 7).
# ---------------------------------------------------------------------------

def test_local_objective_matches_numpy():
  b = make_device_batch(0)
  rng = np.random.default_rng(1)
  for t in range(4):
    da = (b["y"][t] * rng.uniform(size=12) - b["alpha"][t]) * b["mask"][t]
    args = [b[k][t] for k in ("w", "alpha", "x", "y", "mask")]
    got = float(sdca.local_objective(*(jnp.asarray(a, jnp.float32)
                                       for a in [da] + args), b["c"][t]))
    assert got == pytest.approx(np_local_objective(da, *args, b["c"][t]), rel=1e-5,
                                abs=1e-5)


def test_each_coordinate_step_is_the_exact_one_dimensional_minimiser():
  """Runs with steps = 0, 1, ..., S of the same coordinate draws (same key) give the
  SDCA trajectory; each step changes at most one coordinate i, and its new value is the
  minimiser of eq. (7) restricted to that coordinate over the box (fine grid of 20001
  values of y_i (alpha_i + dalpha_i) in [0, 1], float64)."""
  steps_max = 40
  base = make_device_batch(3, m=3, n_max=10, d=5)
  grid = np.linspace(0.0, 1.0, 20001)
  changed = 0
  for t in range(3):
    reps = steps_max + 1
    b = {k: np.repeat(base[k][t:t + 1], reps, axis=0) for k in base}
    keys = jnp.stack([jax.random.key(17 + t)] * reps)
    da, _ = sdca_of(b, keys, np.arange(reps), steps_max)
    da = np.asarray(da, np.float64)
    w, alpha, x, y, mask, c = (base[k][t] for k in ("w", "alpha", "x", "y", "mask", "c"))
    for s in range(steps_max):
      diff = da[s + 1] - da[s]
      moved = np.flatnonzero(np.abs(diff) > 0)
      assert len(moved) <= 1
      if not len(moved):
        continue
      changed += 1
      i = int(moved[0])
      # G restricted to coordinate i, as a function of a = y_i (alpha_i + dalpha_i).
      cand = np.repeat(da[s][None], len(grid), axis=0)
      cand[:, i] = y[i] * grid - alpha[i]
      v = (cand * mask) @ x
      vals = (-np.sum(y * (alpha + cand) * mask, axis=1) + v @ w
              + 0.5 * c * np.sum(v * v, axis=1))
      new_val = np_local_objective(da[s + 1], w, alpha, x, y, mask, c)
      assert new_val <= vals.min() + 1e-4 * (1 + abs(vals.min()))
      a_new = y[i] * (alpha[i] + da[s + 1][i])
      curvature = c * float(x[i] @ x[i])
      tol = 2e-4 + 2e-3 / max(curvature, 1e-3)
      assert abs(a_new - grid[np.argmin(vals)]) <= tol
  assert changed >= 25  # many of the 120 steps moved a coordinate (others sat at a bound)


def test_alpha_stays_feasible_padding_untouched_and_v_is_x_dalpha():
  b = make_device_batch(4, m=5, n_max=15, d=7)
  keys = jax.random.split(jax.random.key(0), 5)
  da, v = sdca_of(b, keys, np.full(5, 200), 200)
  da, v = np.asarray(da, np.float64), np.asarray(v, np.float64)
  a_new = b["y"] * (b["alpha"] + da)
  real = b["mask"] > 0
  assert a_new[real].min() >= -1e-6 and a_new[real].max() <= 1 + 1e-6
  assert np.all(da[~real] == 0.0)  # padding rows (with junk x, y) never touched
  assert np.abs(da).max() > 0.1
  want_v = np.einsum("tn,tnd->td", da * b["mask"], b["x"])
  np.testing.assert_allclose(v, want_v, atol=1e-4)


def test_zero_steps_and_per_device_step_masks():
  b = make_device_batch(5, m=4, n_max=12, d=5)
  keys = jax.random.split(jax.random.key(3), 4)
  max_steps = 30
  steps = np.array([0, 1, 7, 30])
  da, v = (np.asarray(a) for a in sdca_of(b, keys, steps, max_steps))
  assert np.all(da[0] == 0) and np.all(v[0] == 0)
  for t in range(4):
    assert np.count_nonzero(da[t]) <= steps[t]
    # Each device's result is its own run: the same as local_sdca_one alone.
    one = sdca_one(keys[t], *(jnp.asarray(b[k][t], jnp.float32)
                                         for k in ("w", "alpha", "x", "y")),
                              jnp.int32(b["counts"][t]), jnp.float32(b["c"][t]),
                              jnp.int32(steps[t]), max_steps)
    np.testing.assert_allclose(np.asarray(one[0]), da[t], atol=1e-6)
  # Changing one device's step count changes nothing elsewhere.
  da2, _ = sdca_of(b, keys, np.array([30, 1, 7, 30]), max_steps)
  np.testing.assert_array_equal(np.asarray(da2)[1:], da[1:])
  assert np.abs(np.asarray(da2)[0]).max() > 0


def test_long_sdca_reaches_the_subproblem_minimum():
  """20000 coordinate steps reach the minimum of eq. (7) computed by a float64 box QP
  solver, for n_t > d (degenerate) and n_t < d."""
  b = make_device_batch(6, m=4, n_max=30, d=8)
  b["counts"] = np.array([30, 21, 6, 12])
  b["mask"] = (np.arange(30)[None, :] < b["counts"][:, None]).astype(np.float64)
  b["alpha"] *= b["mask"]
  b["y"] = np.where(b["mask"] > 0, b["y"], 0.0)
  b["c"] = np.array([0.05, 1.0, 4.0, 20.0])
  keys = jax.random.split(jax.random.key(1), 4)
  da, _ = sdca_of(b, keys, np.full(4, 20000), 20000)
  da = np.asarray(da, np.float64)
  for t in range(4):
    args = [b[k][t] for k in ("w", "alpha", "x", "y", "mask")]
    got = np_local_objective(da[t], *args, b["c"][t])
    start = np_local_objective(np.zeros(30), *args, b["c"][t])
    _, best = qp_minimum(b["w"][t], b["alpha"][t], b["x"][t], b["y"][t],
                         int(b["counts"][t]), b["c"][t])
    assert best < start - 1e-2  # the subproblem is not trivial
    assert got == pytest.approx(best, abs=2e-5 * (1 + abs(best)))


def test_non_private_rounds_at_fixed_omega_close_the_duality_gap():
  """With Omega = I / m fixed, sigma = 0, no dropping and tau = 0, Algorithm 1's rounds
  drive the duality gap P(W(alpha)) + D(alpha) from n to ~0, and the final primal
  equals the float64 optimum (devices decouple at diagonal Omega: each device's dual is
  min -y^T a + (1 / (4 lam m)) ||X_t a||^2 over the box; P* = -D*)."""
  rng = np.random.default_rng(2)
  m, n_max, d = 4, 16, 6
  counts = np.array([16, 12, 10, 14])
  mask = np.arange(n_max)[None, :] < counts[:, None]
  x = rng.normal(size=(m, n_max, d))
  x /= np.linalg.norm(x, axis=-1, keepdims=True)
  x *= rng.uniform(0.2, 1.0, size=(m, n_max, 1)) * mask[..., None]
  labels = np.where(mask, rng.choice([-1, 1], size=(m, n_max)), 1)
  problem = alg.make_problem(x, labels, counts)
  lam = 0.1
  config = alg.DpMochaConfig(lam=lam, xi=0.5, inner_rounds=400, update_omega=False)
  hp = alg.DpMochaHParams(0.0, 0.0, np.zeros(m), np.zeros(m))
  out = alg.simulate(problem, config, hp, outer_rounds=1, seed=0, record_every=40)
  gap = out["duality_gap"]
  n = counts.sum()
  assert gap[0] < n and gap[-1] <= 2e-5 * n and gap[-1] < gap[0] / 100
  np.testing.assert_allclose(out["omega"], np.eye(m) / m, atol=1e-7)
  y = np.asarray(problem.y, np.float64)
  d_star = 0.0
  for t in range(m):
    _, val = qp_minimum(np.zeros(d), np.zeros(n_max), x[t], y[t], int(counts[t]),
                        1.0 / (2 * lam * m))
    d_star += val
  assert out["primal"][-1] == pytest.approx(-d_star, rel=1e-4)
  assert out["dual"][-1] == pytest.approx(d_star, rel=1e-4)


# ---------------------------------------------------------------------------
# Server (eq. 3, line 10, resync).
# ---------------------------------------------------------------------------

def _sqrtm_psd(a):
  ev, vec = np.linalg.eigh(a)
  return (vec * np.sqrt(np.maximum(ev, 0))) @ vec.T


@pytest.mark.parametrize("m,d,seed", [(3, 6, 0), (5, 8, 1), (6, 10, 2)])
def test_omega_closed_form_minimises_the_regulariser(m, d, seed):
  """Eq. (3) minimises lam tr(W Omega^{-1} W^T) over {Omega PSD, tr Omega = 1} (eq. 2):
  it attains lam (tr (W^T W)^{1/2})^2, beats 100 random feasible Omega and small
  feasible perturbations of itself, and satisfies the KKT condition Omega^{-1} (W^T W)
  Omega^{-1} = (tr (W^T W)^{1/2})^2 I."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(m, d))
  lam = 0.7
  gram = w @ w.T  # the paper's m x m W^T W
  omega = np.asarray(server.omega_update(jnp.asarray(w, jnp.float32)), np.float64)
  assert np.trace(omega) == pytest.approx(1.0, abs=1e-6)
  np.testing.assert_allclose(omega, omega.T, atol=1e-7)
  assert np.linalg.eigvalsh(omega).min() > 0
  reg = lambda om: lam * np.trace(np.linalg.solve(om, gram))
  opt = lam * np.trace(_sqrtm_psd(gram)) ** 2
  assert reg(omega) == pytest.approx(opt, rel=1e-4)
  np.testing.assert_allclose(omega, _sqrtm_psd(gram) / np.trace(_sqrtm_psd(gram)),
                             atol=1e-5)
  for _ in range(100):
    a = rng.normal(size=(m, int(rng.integers(m, m + 4))))
    rand = a @ a.T
    assert reg(rand / np.trace(rand)) >= opt * (1 - 1e-6)
    e = rng.normal(size=(m, m)) * 1e-2 * np.linalg.eigvalsh(omega).min()
    e = e + e.T
    e -= np.trace(e) / m * np.eye(m)  # keeps the trace at 1
    assert reg(omega + e) >= reg(omega) * (1 - 1e-6)
  inv = np.linalg.inv(omega)
  np.testing.assert_allclose(inv @ gram @ inv, np.trace(_sqrtm_psd(gram)) ** 2 * np.eye(m),
                             rtol=2e-3, atol=2e-3 * np.trace(_sqrtm_psd(gram)) ** 2)
  # The package's regulariser agrees with the optimum.
  assert float(obj.regulariser(jnp.asarray(w, jnp.float32), jnp.asarray(omega, jnp.float32),
                               lam)) == pytest.approx(opt, rel=1e-3)


def test_omega_of_zero_and_rank_deficient_w():
  np.testing.assert_allclose(server.omega_update(jnp.zeros((5, 3))), np.eye(5) / 5,
                             atol=1e-7)
  w = np.random.default_rng(0).normal(size=(6, 2))  # rank 2 < m = 6: the floor acts
  om = np.asarray(server.omega_update(jnp.asarray(w, jnp.float32)), np.float64)
  assert np.trace(om) == pytest.approx(1.0, abs=1e-6)
  assert np.linalg.eigvalsh(om).min() > 0
  np.testing.assert_allclose(om, om.T, atol=1e-7)


def test_w_update_and_resync_against_numpy():
  rng = np.random.default_rng(9)
  m, n_max, d, lam = 4, 9, 5, 0.25
  b = make_device_batch(9, m=m, n_max=n_max, d=d)
  a = rng.normal(size=(m, m + 1))
  omega = a @ a.T / np.trace(a @ a.T)
  w, du = rng.normal(size=(m, d)), rng.normal(size=(m, d))
  got = np.asarray(server.w_update(*(jnp.asarray(v, jnp.float32) for v in (w, omega, du)),
                                   lam))
  want = w + np.array([sum(omega[t, s] * du[s] for s in range(m)) for t in range(m)]) / (
      2 * lam)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # u = X alpha (no noise): resync gives the primal-dual map w(alpha) (eq. 6).
  f = lambda k: jnp.asarray(b[k], jnp.float32)
  u = obj.device_sums(f("alpha"), f("x"), f("mask"))
  om = jnp.asarray(omega, jnp.float32)
  np.testing.assert_allclose(server.resync(u, om, lam),
                             obj.primal_dual_map(f("alpha"), om, f("x"), f("mask"), lam),
                             rtol=1e-6, atol=1e-6)
  # Summing uploads xi X dalpha into u over rounds and resyncing equals w(alpha) too.
  u_sum = jnp.zeros((m, d))
  alpha = jnp.zeros((m, n_max))
  for r in range(3):
    da = jnp.asarray(b["y"] * rng.uniform(size=(m, n_max)) * b["mask"] / 3, jnp.float32)
    alpha = alpha + 0.5 * da
    u_sum = u_sum + 0.5 * obj.device_sums(da, f("x"), f("mask"))
  np.testing.assert_allclose(server.resync(u_sum, om, lam),
                             obj.primal_dual_map(alpha, om, f("x"), f("mask"), lam),
                             rtol=1e-5, atol=1e-5)


def test_correction_parameter():
  assert server.correction_parameter(0.5, 6) == 3.0
  assert server.correction_parameter(1.0, 30) == 30.0
  for xi, m, opt in [(0.0, 3, "xi"), (1.5, 3, "xi"), (0.5, 0, "num_devices")]:
    with pytest.raises(FedJaxDpError) as e:
      server.correction_parameter(xi, m)
    assert e.value.option == opt
