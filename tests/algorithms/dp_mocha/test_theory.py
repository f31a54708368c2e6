"""Numerical checks of DP-MOCHA's theory (Lemma 1, Corollaries 2-3) on small
synthetic problems:

* Lemma 1 / eq. (9): ||X alpha||^2_{Omega~} <= m sum_t Omega_tt ||X_t alpha_t||^2 for
  PSD Omega (tight), and D(alpha + xi dalpha) <= (1 - xi) D(alpha) + xi sum_t G_t(dalpha_t)
  with beta = xi m and MOCHA's constant c(alpha) in G_t;
* Corollary 2 (s1 = (8 lam + beta) / (beta n_t)) is FALSE: the exact minimiser of eq. (7)
  moves by many times s1 when one sample is replaced (a closed-form counterexample and a
  seeded random search); the provable bound ``dual_sensitivity_provable`` =
  2 sqrt(min(steps, n_t)) holds for SDCA runs from different hidden states;
* Corollary 3: given the noisy dalpha~, replacing one row moves xi X dalpha~ by at most
  2 xi ||dalpha~||_inf <= 2 xi ||dalpha~||_2 (the s2 the mechanism uses).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from fedjax_dp.algorithms.dp_mocha import mechanism, objective as obj, sdca, server


def unit_rows(rng, n, d, low=0.2):
  """n rows in R^d with norms uniform in [low, 1]."""
  x = rng.normal(size=(n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x * rng.uniform(low, 1.0, size=(n, 1))


def random_omega(rng, m, rank=None):
  a = rng.normal(size=(m, rank or m + 2))
  om = a @ a.T + 1e-6 * np.eye(m)
  return om / np.trace(om)


def f32(*arrays):
  return tuple(jnp.asarray(a, jnp.float32) for a in arrays)


@functools.partial(jax.jit, static_argnums=(8,))
def run_sdca(keys, w, alpha, x, y, counts, c, steps, max_steps):
  return sdca.local_sdca(keys, w, alpha, x, y, counts, c, steps, max_steps)


def exact_subproblem(w, alpha, x, y, c):
  """The minimiser of eq. (7) for one device (real rows only), float64 L-BFGS-B on
  b = y (alpha + dalpha) in [0, 1]^n; unique when X_t has full column rank (n_t <= d)."""

  def fun(b):
    da = y * b - alpha
    v = da @ x
    return -np.sum(b) + w @ v + 0.5 * c * v @ v, y * (x @ (w + c * v)) - 1.0

  res = minimize(fun, np.clip(y * alpha, 0, 1), jac=True, method="L-BFGS-B",
                 bounds=[(0.0, 1.0)] * len(y),
                 options=dict(ftol=1e-15, gtol=1e-12, maxiter=20000))
  return y * res.x - alpha


# ---------------------------------------------------------------------------
# Lemma 1 / eq. (9).
# ---------------------------------------------------------------------------

def omega_norms(alpha, omega, x, mask):
  """(||X alpha||^2_{Omega~}, sum_t Omega_tt ||X_t alpha_t||^2) via the package's
  device sums v_t = X_t alpha_t (float32 JAX arrays in, float32 scalars out)."""
  v = obj.device_sums(alpha, x, mask)
  return jnp.sum(omega * (v @ v.T)), jnp.sum(jnp.diagonal(omega) * jnp.sum(v * v, 1))


@pytest.mark.parametrize("m,n,d", [(3, 12, 4), (6, 8, 10)])
def test_eq9_ratio_is_at_most_m_and_tight(m, n, d):
  """||X alpha||^2_{Omega~} / sum_t Omega_tt ||X_t alpha_t||^2 <= m for 100 random PSD
  Omega of trace 1 (ranks 1..m+1) and arbitrary alpha (a third with aligned device sums,
  where the ratio is large), and = m for Omega = 1 1^T / m with equal device sums."""
  rng = np.random.default_rng(m)
  trials = 100
  x = np.stack([unit_rows(rng, m * n, d).reshape(m, n, d) for _ in range(trials)])
  alpha = rng.normal(size=(trials, m, n))
  aligned = np.arange(trials) % 3 == 0
  x[aligned], alpha[aligned] = np.abs(x[aligned]), np.abs(alpha[aligned])
  omega = np.stack([random_omega(rng, m, rank=int(rng.integers(1, m + 2)))
                    for _ in range(trials)])
  mask = np.ones((trials, m, n))
  num, den = jax.vmap(omega_norms)(*f32(alpha, omega, x, mask))
  ratio = np.asarray(num, np.float64) / np.asarray(den, np.float64)
  assert ratio.max() <= m * (1 + 1e-5)
  assert ratio.max() > 1.5  # beta = xi would not be enough: the factor m matters
  # Tight: Omega = 1 1^T / m and X_t alpha_t equal on every device give ratio m.
  xt = np.tile(unit_rows(rng, n, d)[None], (m, 1, 1))
  at = np.tile(rng.uniform(size=(1, n)), (m, 1))
  num, den = omega_norms(*f32(at, np.ones((m, m)) / m, xt, np.ones((m, n))))
  assert float(num) / float(den) == pytest.approx(m, rel=1e-5)


perturb = jax.jit(mechanism.perturb, static_argnames=("s2_mode",))


@jax.jit
def lemma1_sides(alpha, dalpha, omega, x, y, mask, lam, xi, beta):
  """Both sides of Lemma 1 for one problem: D(alpha + xi dalpha) and (1 - xi) D(alpha)
  + xi sum_t G_t^beta(dalpha_t; w_t(alpha), alpha_t), with G_t including MOCHA's
  constant c(alpha) = (1/m)(1/(4 lam)) ||X alpha||^2_{Omega~} (from MOCHA),
  built from the package's dual, primal-dual map and local_objective (float32)."""
  m = omega.shape[0]
  lhs = obj.dual(alpha + xi * dalpha, omega, x, y, mask, lam)
  w = obj.primal_dual_map(alpha, omega, x, mask, lam)
  c = beta * jnp.diagonal(omega) / (2.0 * lam)
  local = jax.vmap(sdca.local_objective)(dalpha, w, alpha, x, y, mask, c)
  quad, _ = omega_norms(alpha, omega, x, mask)
  g = local + quad / (4.0 * lam) / m  # G_t with c(alpha), per device
  rhs = (1 - xi) * obj.dual(alpha, omega, x, y, mask, lam) + xi * jnp.sum(g)
  return lhs, rhs


@pytest.mark.parametrize("xi", [0.25, 0.5, 1.0])
def test_lemma1_with_beta_xi_m(xi):
  """D(alpha + xi dalpha) <= (1 - xi) D(alpha) + xi sum_t G_t(dalpha_t) with beta = xi m
  for random feasible alpha and alpha + dalpha (random n_t by masking), for dalpha from
  SDCA at w = w(alpha), and for the worst case of eq. (9) (Omega = 1 1^T / m, aligned
  data); and the same inequality FAILS with beta = xi, so the check is not vacuous."""
  rng = np.random.default_rng(int(10 * xi))
  trials, m, n, d = 60, 5, 10, 6
  beta = xi * m
  counts = rng.integers(3, n + 1, size=(trials, m))
  mask = (np.arange(n)[None, None, :] < counts[..., None]).astype(np.float64)
  x = unit_rows(rng, trials * m * n, d).reshape(trials, m, n, d) * mask[..., None]
  y = rng.choice([-1.0, 1.0], size=(trials, m, n)) * mask
  alpha = y * rng.uniform(size=y.shape)
  dalpha = y * rng.uniform(size=y.shape) - alpha  # alpha + dalpha feasible
  omega = np.stack([random_omega(rng, m, rank=int(rng.integers(1, m + 2)))
                    for _ in range(trials)])
  lam = 10 ** rng.uniform(-2, 0.5, size=trials)
  worst = np.arange(trials) % 3 == 2  # aligned sums, Omega = 1 1^T / m
  x[worst] = np.abs(x[worst])
  y[worst] = mask[worst]
  alpha[worst] = rng.uniform(size=alpha[worst].shape) * mask[worst]
  dalpha[worst] = mask[worst] - alpha[worst]
  omega[worst] = 1.0 / m
  # A third of the draws: dalpha from the local solver (3 n_t steps) at w = w(alpha).
  sol = np.arange(trials) % 3 == 1
  ja = f32(alpha, omega, x, y, mask)
  w = jax.vmap(obj.primal_dual_map)(ja[0], ja[1], ja[2], ja[4], jnp.asarray(lam))
  c = beta * np.diagonal(omega, axis1=1, axis2=2) / (2 * lam[:, None])
  flat = lambda a: jnp.reshape(jnp.asarray(a, jnp.float32), (trials * m,) + a.shape[2:])
  da_sdca, _ = run_sdca(jax.random.split(jax.random.key(int(10 * xi)), trials * m),
                        flat(np.asarray(w)), flat(alpha), flat(x), flat(y),
                        jnp.asarray(counts.reshape(-1), jnp.int32), flat(c),
                        jnp.asarray(3 * counts.reshape(-1), jnp.int32), 3 * n)
  dalpha[sol] = np.asarray(da_sdca, np.float64).reshape(trials, m, n)[sol]
  args = f32(alpha, dalpha, omega, x, y, mask)
  sides = jax.vmap(lemma1_sides, in_axes=(0,) * 7 + (None, None))
  lhs, rhs = (np.asarray(v, np.float64) for v in sides(*args, jnp.asarray(lam), xi, beta))
  slack = (rhs - lhs) / (1.0 + np.abs(lhs) + np.abs(rhs))
  assert slack.min() >= -2e-5
  assert np.abs(dalpha[sol]).max() > 0.1  # the solver did move
  # beta = xi (too small for eq. 9): the worst cases violate the inequality.
  lhs, rhs = (np.asarray(v, np.float64) for v in sides(*args, jnp.asarray(lam), xi, xi))
  assert np.all(lhs[worst] > rhs[worst] + 1e-3 * (1 + np.abs(rhs[worst])))


# ---------------------------------------------------------------------------
# Corollary 2 (s1): violated; the provable bound holds.
# ---------------------------------------------------------------------------

def test_corollary2_closed_form_counterexample():
  """Device t with n = d = 8 orthonormal rows, alpha_t = 0, w_t = 0, Omega_tt = 1/m
  (Algorithm 1's initial state), m = 4, xi = 0.5 (beta = 2) and lam = beta Omega_tt / 2 =
  0.25, so c_t = 1 and eq. (7) decouples into min -b + b^2 / 2 on [0, 1]: b = 1,
  dalpha = y. Replacing sample j by the same x with the other label gives dalpha'_j =
  -y_j, so ||dalpha - dalpha'|| = 2 while s1 = (8 lam + beta) / (beta n) = 1/4: 8 s1.
  Checked with the package's SDCA run to convergence and with a float64 QP."""
  m, n, xi = 4, 8, 0.5
  beta = server.correction_parameter(xi, m)
  omega_tt = 1.0 / m
  lam = beta * omega_tt / 2.0
  x = np.eye(n)
  y = np.array([1.0, -1, 1, 1, -1, 1, -1, -1])
  y2 = y.copy()
  y2[3] = -y[3]
  c = beta * omega_tt / (2 * lam)
  assert c == 1.0
  keys = jnp.stack([jax.random.key(0)] * 2)
  da, _ = run_sdca(keys, jnp.zeros((2, n)), jnp.zeros((2, n)), *f32(np.stack([x, x]),
                                                                   np.stack([y, y2])),
                   jnp.full(2, n, jnp.int32), jnp.full(2, c, jnp.float32),
                   jnp.full(2, 400, jnp.int32), 400)
  da = np.asarray(da, np.float64)
  np.testing.assert_allclose(da[0], y, atol=1e-6)
  np.testing.assert_allclose(da[1], y2, atol=1e-6)
  np.testing.assert_allclose(exact_subproblem(np.zeros(n), np.zeros(n), x, y, c), y,
                             atol=1e-7)
  s1 = float(mechanism.dual_sensitivity_paper(lam, beta, n))
  assert s1 == pytest.approx(0.25)
  ratio = np.linalg.norm(da[0] - da[1]) / s1
  assert ratio == pytest.approx(8.0, rel=1e-5)
  # The provable bound covers it: 2 <= 2 sqrt(min(400, 8)).
  assert np.linalg.norm(da[0] - da[1]) <= float(
      mechanism.dual_sensitivity_provable(400, n))


def _corollary2_search(num_trials):
  """Random replace-one pairs (one row replaced by a random ||x|| <= 1, its label
  flipped half the time; hidden state (w_t, alpha_t) shared, as Corollary 2 assumes),
  n_t <= d so that eq. (7) has a unique minimiser. Returns the ratios
  ||dalpha* - dalpha*'|| / s1 and the arguments of the worst pair."""
  ratios, worst = [], None
  for seed in range(num_trials):
    rng = np.random.default_rng(seed)
    m, d = int(rng.integers(3, 7)), int(rng.integers(3, 11))
    n = int(rng.integers(3, d + 1))
    lam = float(10 ** rng.uniform(-2, 1))
    xi = float(rng.choice([0.5, 1.0]))
    beta = xi * m
    omega_tt = rng.uniform(0.02, 1.0)
    c = beta * omega_tt / (2 * lam)
    x = unit_rows(rng, n, d)
    y = rng.choice([-1.0, 1.0], size=n)
    w = rng.normal(size=d) * rng.uniform(0, 2) * (rng.uniform() < 0.7)
    alpha = y * rng.uniform(size=n) * (rng.uniform() < 0.5)
    j = int(rng.integers(n))
    x2, y2, alpha2 = x.copy(), y.copy(), alpha.copy()
    x2[j] = unit_rows(rng, 1, d)[0]
    if rng.uniform() < 0.5:
      y2[j] = -y[j]
    alpha2[j] = y2[j] * abs(alpha[j])
    da = exact_subproblem(w, alpha, x, y, c)
    da2 = exact_subproblem(w, alpha2, x2, y2, c)
    s1 = float(mechanism.dual_sensitivity_paper(lam, beta, n))
    ratios.append(np.linalg.norm(da - da2) / s1)
    if ratios[-1] == max(ratios):
      worst = dict(seed=seed, w=w, alpha=(alpha, alpha2), x=(x, x2), y=(y, y2), c=c,
                   n=n, ratio=ratios[-1])
  return np.asarray(ratios), worst


def test_corollary2_is_violated_by_the_exact_minimiser():
  """The finding: Corollary 2's s1 does not bound the replace-one change of the exact
  minimiser of eq. (7). A seeded search over 120 small problems (m 3-6, n_t <= d <= 10)
  finds ratios ||dalpha* - dalpha*'|| / s1 far above 1 (about 16 at most for these
  seeds: the replaced sample's own coordinate moves by up to 1 inside the hinge box,
  2 with a label flip, while s1 ~ 1 / n_t), and the package's SDCA run to convergence
  reproduces the worst pair's minimisers (so this is not a solver artefact)."""
  ratios, worst = _corollary2_search(120)
  print(f"Corollary 2: max ||dalpha - dalpha'|| / s1 = {ratios.max():.2f} "
        f"(seed {worst['seed']}); violated in {np.mean(ratios > 1):.0%} of pairs")
  assert ratios.max() > 10.0
  assert np.mean(ratios > 1.0) > 0.2
  n = worst["n"]
  keys = jnp.stack([jax.random.key(1)] * 2)
  da, _ = run_sdca(keys, *f32(np.stack([worst["w"]] * 2), np.stack(worst["alpha"]),
                              np.stack(worst["x"]), np.stack(worst["y"])),
                   jnp.full(2, n, jnp.int32), jnp.full(2, worst["c"], jnp.float32),
                   jnp.full(2, 20000, jnp.int32), 20000)
  da = np.asarray(da, np.float64)
  for k in range(2):
    want = exact_subproblem(worst["w"], worst["alpha"][k], worst["x"][k], worst["y"][k],
                            worst["c"])
    np.testing.assert_allclose(da[k], want, atol=2e-3)


def test_provable_dual_sensitivity_holds_for_sdca_from_different_states():
  """2 sqrt(min(steps, n_t)) bounds ||dalpha - dalpha'|| for SDCA runs of ``steps``
  steps on replace-one neighbours whose hidden states differ (alpha, alpha' and w, w'
  independent; the coordinate draws, which do not depend on the data, are shared):
  1000 random pairs in one vmapped call. The paper's s1 is exceeded in the same runs."""
  rng = np.random.default_rng(123)
  pairs, n_max, d, max_steps = 1000, 12, 6, 36
  counts = rng.integers(3, n_max + 1, size=pairs)
  mask = (np.arange(n_max)[None, :] < counts[:, None]).astype(np.float64)
  x = unit_rows(rng, pairs * n_max, d).reshape(pairs, n_max, d) * mask[..., None]
  y = rng.choice([-1.0, 1.0], size=(pairs, n_max)) * mask
  j = (rng.uniform(size=pairs) * counts).astype(int)
  x2, y2 = x.copy(), y.copy()
  x2[np.arange(pairs), j] = unit_rows(rng, pairs, d)
  flip = rng.uniform(size=pairs) < 0.5
  y2[np.arange(pairs), j] *= np.where(flip, -1.0, 1.0)
  corner = lambda: np.where(rng.uniform(size=(pairs, n_max)) < 0.5,
                            rng.integers(0, 2, size=(pairs, n_max)),
                            rng.uniform(size=(pairs, n_max)))
  alpha, alpha2 = y * corner() * mask, y2 * corner() * mask
  w = rng.normal(size=(pairs, d)) * rng.uniform(0, 2, size=(pairs, 1))
  w2 = rng.normal(size=(pairs, d)) * rng.uniform(0, 2, size=(pairs, 1))
  c = 10 ** rng.uniform(-2, 1.5, size=pairs)
  steps = rng.choice([1, 2, 3, 5, 8, 12, 20, 36], size=pairs)
  keys = jax.random.split(jax.random.key(7), pairs)
  cc = jnp.asarray(counts, jnp.int32)
  st = jnp.asarray(steps, jnp.int32)
  cf = jnp.asarray(c, jnp.float32)
  da, _ = run_sdca(keys, *f32(w, alpha, x, y), cc, cf, st, max_steps)
  da2, _ = run_sdca(keys, *f32(w2, alpha2, x2, y2), cc, cf, st, max_steps)
  diff = np.linalg.norm(np.asarray(da, np.float64) - np.asarray(da2, np.float64), axis=1)
  bound = np.asarray(mechanism.dual_sensitivity_provable(steps, counts), np.float64)
  ratio = diff / bound
  print(f"provable bound: max ||dalpha - dalpha'|| / (2 sqrt(min(steps, n))) = "
        f"{ratio.max():.3f}")
  assert ratio.max() <= 1.0 + 1e-6
  assert ratio.max() > 0.5  # the bound is not loose by orders of magnitude
  beta = 0.5 * 4
  s1 = np.asarray(mechanism.dual_sensitivity_paper(0.1, beta, counts), np.float64)
  assert np.max(diff / s1) > 5.0
  # The bound's closed form.
  np.testing.assert_allclose(mechanism.dual_sensitivity_provable([0, 3, 50], [10, 10, 10]),
                             [0.0, 2 * np.sqrt(3), 2 * np.sqrt(10)], rtol=1e-6)


# ---------------------------------------------------------------------------
# Corollary 3 (s2).
# ---------------------------------------------------------------------------

def test_corollary3_given_the_noisy_dual_step():
  """Given dalpha~ (the output of line 6, identical in both worlds), replacing row j of
  X_t by x' (||x'|| <= 1) moves xi X_t dalpha~ by xi |dalpha~_j| ||x_j - x'||
  <= 2 xi ||dalpha~||_inf <= 2 xi ||dalpha~||_2 = the s2 of ``noisy_l2``; equality in
  the first bound at x' = -x_j, ||x_j|| = 1, j = argmax |dalpha~|. With ``const`` the
  upload is clamped to [-1, 1] and 2 xi bounds the change."""
  rng = np.random.default_rng(3)
  m, n_max, d, xi = 5, 10, 6, 0.5
  counts = np.array([10, 7, 5, 9, 3])
  mask = (np.arange(n_max)[None, :] < counts[:, None]).astype(np.float64)
  x = unit_rows(rng, m * n_max, d, low=1.0).reshape(m, n_max, d) * mask[..., None]
  dalpha = rng.uniform(-1, 1, size=(m, n_max)) * mask
  kb = jax.random.split(jax.random.key(0), m)
  kp = jax.random.split(jax.random.key(1), m)
  active = jnp.ones(m, bool)
  s1 = jnp.full(m, 0.3, jnp.float32)
  for mode in ("noisy_l2", "const"):
    for trial in range(20):
      x2 = x.copy()
      if trial == 0:  # the extreme neighbour on every device
        noisy = np.asarray(perturb(kb, kp, *f32(dalpha, x, mask), active, xi, s1,
                                 jnp.full(m, 2.0), jnp.zeros(m), s2_mode=mode).dalpha_noisy)
        up = np.clip(noisy, -1, 1) if mode == "const" else noisy
        jj = np.argmax(np.abs(up), axis=1)
      else:
        jj = (rng.uniform(size=m) * counts).astype(int)
      x2[np.arange(m), jj] = -x[np.arange(m), jj] if trial == 0 else unit_rows(rng, m, d)
      outs = [perturb(kb, kp, *f32(dalpha, xx, mask), active, xi, s1, jnp.full(m, 2.0),
                      jnp.zeros(m), s2_mode=mode) for xx in (x, x2)]
      np.testing.assert_array_equal(outs[0].dalpha_noisy, outs[1].dalpha_noisy)
      noisy = np.asarray(outs[0].dalpha_noisy, np.float64)
      up = np.clip(noisy, -1, 1) if mode == "const" else noisy
      change = np.linalg.norm(np.asarray(outs[0].du, np.float64)
                              - np.asarray(outs[1].du, np.float64), axis=1)
      inf_bound = 2 * xi * np.abs(up).max(axis=1)
      s2 = np.asarray(outs[0].s2, np.float64)
      assert np.all(change <= inf_bound * (1 + 1e-5) + 1e-6)
      assert np.all(inf_bound <= s2 * (1 + 1e-6))
      if mode == "noisy_l2":
        np.testing.assert_allclose(s2, 2 * xi * np.linalg.norm(noisy, axis=1), rtol=1e-5)
      else:
        np.testing.assert_allclose(s2, 2 * xi, rtol=1e-7)
      if trial == 0:
        np.testing.assert_allclose(change, inf_bound, rtol=1e-4)
