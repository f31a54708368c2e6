"""Tests for `fedjax_dp.algorithms.rdp_pfl.theory` (paper 003's convergence theory): the
numerical checks of the implementation note's section 10.2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedjax_dp.algorithms.rdp_pfl import paper_accounting as pa
from fedjax_dp.algorithms.rdp_pfl import theory as th
from fedjax_dp.validation import FedJaxDpError

MLP_S = 199_210  # 784-200-200-10
CONSTS = th.Constants(L=1.0, rho=0.5, B=1.5, lam=2.0, l=0.2, eps_het=0.3, gamma_het=0.4,
                      sigma_G=1.2, sigma_H=0.7)


# ---------------------------------------------------------------------------
# Theta (Eq. 27) vs the exact E||n||.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("S,expected", [
    (1, 2 * math.sqrt(2 / math.pi)),
    (2, 2 * math.sqrt(2 * math.pi)),
    (3, 2 * math.sqrt(2 / math.pi) * 2),
    (5, 2 * math.sqrt(2 / math.pi) * (4 / 3) * 2),
    (6, 2 * math.sqrt(2 * math.pi) * (5 / 4) * (3 / 2)),
    (7, 2 * math.sqrt(2 / math.pi) * (6 / 5) * (4 / 3) * 2),
])
def test_theta_paper_is_eq27_literally(S, expected):
  assert th.theta_paper(0.5, S, 3.0) == pytest.approx(1.5 * expected, rel=1e-13)


def test_theta_exact_small_S_closed_forms():
  # E||z|| for z ~ N(0, I): S=1 sqrt(2/pi), S=2 sqrt(pi/2), S=3 2 sqrt(2/pi).
  assert th.theta_exact(1.0, 1, 1.0) == pytest.approx(math.sqrt(2 / math.pi), rel=1e-13)
  assert th.theta_exact(1.0, 2, 1.0) == pytest.approx(math.sqrt(math.pi / 2), rel=1e-13)
  assert th.theta_exact(2.0, 3, 0.5) == pytest.approx(2 * math.sqrt(2 / math.pi), rel=1e-13)
  assert th.theta_exact(1.0, 10**6, 1.0) == pytest.approx(math.sqrt(10**6 - 0.5), rel=1e-9)


def test_theta_ratio_is_2_for_odd_and_4_for_even_S():
  S = np.arange(3, 2002)
  ratios = np.array([th.theta_ratio(int(s)) for s in S])
  np.testing.assert_allclose(ratios[S % 2 == 1], 2.0, rtol=1e-10)
  np.testing.assert_allclose(ratios[S % 2 == 0], 4.0, rtol=1e-10)
  assert th.theta_ratio(10**5) == pytest.approx(4.0, rel=1e-8)
  assert th.theta_ratio(10**5 + 1) == pytest.approx(2.0, rel=1e-8)
  # Works (no overflow) up to S = 1e7, and is linear in C sigma.
  assert th.theta_ratio(10**7) == pytest.approx(4.0, rel=1e-7)
  assert th.theta_ratio(10**7 + 1) == pytest.approx(2.0, rel=1e-7)
  big = th.theta_paper(2.0, 10**7, 3.0)
  assert math.isfinite(big) and big == pytest.approx(4 * 6.0 * math.sqrt(10**7), rel=1e-6)
  assert th.theta_paper(1.0, 10, 0.0) == 0.0 == th.theta_exact(1.0, 10, 0.0)


def test_theta_exact_matches_monte_carlo():
  rng = np.random.default_rng(0)
  C, sigma, S = 1.7, 0.8, 50
  norms = np.linalg.norm(rng.normal(scale=C * sigma, size=(20_000, S)), axis=1)
  assert norms.mean() == pytest.approx(th.theta_exact(C, S, sigma), rel=0.02)
  # The paper's Theta over-estimates E||n|| 4-fold at even S.
  assert th.theta_paper(C, S, sigma) / norms.mean() == pytest.approx(4.0, rel=0.02)
  assert th.noise_norm_factor(S, "exact") == pytest.approx(th.theta_exact(1.0, S, 1.0))
  assert th.noise_norm_factor(S, "paper") == pytest.approx(th.theta_paper(1.0, S, 1.0))


@pytest.mark.parametrize("call,match", [
    (lambda: th.theta_paper(0.0, 10, 1.0), "C must be > 0"),
    (lambda: th.theta_exact(1.0, 0, 1.0), "S must be >= 1"),
    (lambda: th.theta_exact(1.0, 2.5, 1.0), "S must be an integer"),
    (lambda: th.theta_paper(1.0, 10, -1.0), "sigma must be >= 0"),
    (lambda: th.noise_norm_factor(10, "approx"), "theta must be one of"),
])
def test_theta_errors(call, match):
  with pytest.raises(FedJaxDpError, match=match):
    call()


# ---------------------------------------------------------------------------
# Lemmas 1 and 6 on random quadratics.
# ---------------------------------------------------------------------------

def _random_spd(rng, d, lo, hi):
  q, _ = np.linalg.qr(rng.normal(size=(d, d)))
  eig = np.concatenate([[lo, hi], rng.uniform(lo, hi, size=d - 2)])
  return (q * eig) @ q.T


def test_lemma1_and_lemma6_on_quadratics():
  """F_i(w) = 1/2 w^T A_i w - b_i^T w (rho = 0): grad G_i(w) = (I - eta A)(A (w - eta
  grad F(w)) - b), whose Jacobian (I - eta A) A (I - eta A) must have eigenvalues in
  [l', L'] (Lemmas 6 and 1)."""
  rng = np.random.default_rng(1)
  d, l, L = 6, 0.5, 2.0
  for eta in (0.0, 0.05, 0.2, 0.45):
    L_prime = th.meta_smoothness(L, 0.0, 3.0, eta)
    l_prime = th.meta_strong_convexity(l, L, 0.0, 3.0, eta)
    assert L_prime == pytest.approx(L * (1 + eta * L) ** 2)
    assert l_prime == pytest.approx((1 - eta * L) * (l - eta * L * L))
    for _ in range(20):
      A, b = _random_spd(rng, d, l, L), rng.normal(size=d)
      I = np.eye(d)

      def meta_grad(w, A=A, b=b, eta=eta, I=I):
        theta = w - eta * (A @ w - b)
        return (I - eta * A) @ (A @ theta - b)

      jac = np.stack([meta_grad(e) - meta_grad(np.zeros(d)) for e in I], axis=1)
      np.testing.assert_allclose(jac, (I - eta * A) @ A @ (I - eta * A), atol=1e-12)
      eig = np.linalg.eigvalsh(0.5 * (jac + jac.T))
      assert eig.max() <= L_prime + 1e-12
      assert eig.min() >= l_prime - 1e-12
  # eta = 0: L' = L; rho adds eta rho B to L' and subtracts it from l'.
  assert th.meta_smoothness(2.0, 5.0, 3.0, 0.0) == 2.0
  assert th.meta_smoothness(2.0, 5.0, 3.0, 0.1) == pytest.approx(2.0 * 1.44 + 1.5)
  assert th.meta_strong_convexity(0.5, 2.0, 5.0, 3.0, 0.1) == pytest.approx(0.8 * 0.1 - 1.5)


def test_zeta_and_its_errors():
  assert th.zeta(0.5, 2.0, 0.1) == pytest.approx(1 - 2 * 0.5 * 0.1 + 2.0 * 0.5 * 0.01)
  assert th.zeta(1.0, 1.0, 1.0) == pytest.approx(0.0)  # l' = L', beta = 1/L'
  with pytest.raises(FedJaxDpError, match="beta must be < 2/L'"):
    th.zeta(0.5, 2.0, 1.0)
  with pytest.raises(FedJaxDpError, match="l_prime must be > 0"):
    th.zeta(-0.1, 2.0, 0.1)
  with pytest.raises(FedJaxDpError, match="l_prime must be <= L_prime"):
    th.zeta(3.0, 2.0, 0.1)
  with pytest.raises(FedJaxDpError, match="eta must be < 1/L"):
    th.meta_strong_convexity(0.5, 2.0, 0.0, 1.0, 0.5)
  with pytest.raises(FedJaxDpError, match="l must be <= L"):
    th.meta_strong_convexity(3.0, 2.0, 0.0, 1.0, 0.1)


# ---------------------------------------------------------------------------
# Lemmas 2, 4 and 5 and the drift sum.
# ---------------------------------------------------------------------------

def test_h_and_local_drift_sum():
  beta, Lp, eps, gam, eta, L, B = 0.05, 3.0, 0.3, 0.4, 0.02, 1.0, 1.5
  c0 = beta * (eps * (1 + eta * L) + eta * B * gam)
  r = 1 + beta * Lp
  assert th.h(1, beta, Lp, eps, gam, eta, L, B) == 0.0
  values = [th.h(t, beta, Lp, eps, gam, eta, L, B) for t in range(1, 12)]
  assert all(b > a for a, b in zip(values, values[1:]))
  for t, v in zip(range(1, 12), values):
    assert v == pytest.approx(c0 * ((r**t - 1) / (r - 1) - t), rel=1e-12, abs=1e-15)
    assert v == pytest.approx(c0 * sum(r**j - 1 for j in range(t)), rel=1e-12, abs=1e-15)
    drift = th.local_drift_sum(t, beta, Lp)
    assert drift == pytest.approx((r ** (t + 1) - (t + 1) * r + t) / (r - 1) ** 2, rel=1e-12)
  assert th.local_drift_sum(1, beta, Lp) == 1.0
  assert th.local_drift_sum(4, 0.0, Lp) == 10.0  # 4 + 3 + 2 + 1
  with pytest.raises(FedJaxDpError, match="tau0 must be >= 1"):
    th.h(0, beta, Lp, eps, gam, eta, L, B)


def test_lemma2():
  out = th.lemma2_dissimilarity([0.1, 0.2], [1.0, 0.0], eta=0.1, L=2.0, B=3.0)
  np.testing.assert_allclose(out, [0.1 * 1.2 + 0.3, 0.2 * 1.2])
  assert th.lemma2_dissimilarity(0.1, 1.0, 0.1, 2.0, 3.0) == pytest.approx(0.42)
  with pytest.raises(FedJaxDpError, match="eps_i must be finite and >= 0"):
    th.lemma2_dissimilarity(-0.1, 1.0, 0.1, 2.0, 3.0)


def test_xi_eq26():
  eta, L, B, S, sigma = 0.1, 2.0, 1.5, 11, 0.3
  c = 1 + eta * L
  for C in (0.3, 1.0, 2.0, 9.0):
    theta = th.theta_paper(C, S, sigma)
    expected = c * (2 * eta * L * B + eta * L * theta + math.sqrt(C) / min(math.sqrt(C) / B, 1)
                    - math.sqrt(C) * min(math.sqrt(C) / c, 1))
    assert th.xi(C, S, sigma, eta, L, B) == pytest.approx(expected, rel=1e-13)
    assert th.xi(C, S, sigma, eta, L, B, theta="exact") < th.xi(C, S, sigma, eta, L, B)
  # sigma = 0, C >= max(B^2, c^2): only the 2 eta L B clipping term is left.
  assert th.xi(1e6, S, 0.0, eta, L, B) == pytest.approx(c * 2 * eta * L * B, rel=1e-12)


# ---------------------------------------------------------------------------
# Lemma 3 by Monte Carlo (linear regression with Gaussian features).
# ---------------------------------------------------------------------------

def _lemma3_monte_carlo(eta, n, reps=4000, d=5, noise=0.5, seed=0):
  """Mean ||grad~ G - grad G|| for F(w) = E 1/2 (x^T w - y)^2, x ~ N(0, diag(s^2)),
  y = x^T w* + N(0, noise^2), with independent query / support sets of size n, and the
  constants of Assumptions 1-4 in closed form at the points visited."""
  rng = np.random.default_rng(seed)
  s = np.linspace(0.5, 1.5, d)
  Sig = np.diag(s**2)
  w_star = rng.normal(size=d)
  w = w_star + rng.normal(size=d)
  I = np.eye(d)

  def sample():
    x = rng.normal(size=(reps, n, d)) * s
    return x, np.einsum("rnd,d->rn", x, w_star) + noise * rng.normal(size=(reps, n))

  xq, yq = sample()
  xs, ys = sample()
  grad_q = np.einsum("rnd,rn->rd", xq, np.einsum("rnd,d->rn", xq, w) - yq) / n
  theta_t = w - eta * grad_q  # [reps, d], noisy inner step
  res_s = np.einsum("rnd,rd->rn", xs, theta_t) - ys
  grad_s = np.einsum("rnd,rn->rd", xs, res_s) / n
  hess_q = np.einsum("rnd,rne->rde", xq, xq) / n
  stoch = grad_s - eta * np.einsum("rde,re->rd", hess_q, grad_s)
  theta = w - eta * Sig @ (w - w_star)
  exact = (I - eta * Sig) @ (Sig @ (theta - w_star))
  measured = float(np.linalg.norm(stoch - exact, axis=1).mean())
  # Constants: L = lambda_max(Sigma); B = ||grad F(theta)||; sigma_G^2(u = v - w*) =
  # (u^T S u) tr S + ||S u||^2 + noise^2 tr S (Isserlis), sup over the visited points;
  # sigma_H^2 = E||x x^T - S||_F^2 = (tr S)^2 + tr S^2.
  L = float(s.max() ** 2)
  B = float(np.linalg.norm(Sig @ (theta - w_star)))
  R = max(np.linalg.norm(theta_t - w_star, axis=1).max(), np.linalg.norm(w - w_star))
  tr = float(np.trace(Sig))
  sigma_G = math.sqrt(R * R * (L * tr + L * L) + noise**2 * tr)
  sigma_H = math.sqrt(tr**2 + float(np.trace(Sig @ Sig)))
  return measured, (eta, L, B, sigma_G, sigma_H, n)


@pytest.mark.parametrize("eta,n", [(0.01, 30), (0.05, 30), (0.05, 120)])
def test_lemma3_printed_bound_fails_and_corrected_bound_holds(eta, n):
  """Eq. (25) misses the outer-gradient sampling error sigma_G/sqrt(|D^S|) (no factor
  eta), so the measured error exceeds it; the corrected bound holds and is not vacuous."""
  measured, args = _lemma3_monte_carlo(eta, n)
  paper = th.lemma3_bias(*args)
  corrected = th.lemma3_bias(*args, form="corrected")
  assert measured > 2.0 * paper  # the paper's Lemma 3 is violated
  assert measured < corrected
  assert measured > 0.25 * corrected


def test_lemma3_formulas():
  eta, L, B, sG, sH = 0.1, 2.0, 3.0, 0.5, 0.7
  n = np.array([25.0, 100.0])
  expected = eta * 1.2 * L * sG / np.sqrt(n) + eta * B * sH / np.sqrt(n) + eta**2 * L * sG * sH / n
  np.testing.assert_allclose(th.lemma3_bias(eta, L, B, sG, sH, n), expected, rtol=1e-14)
  corr = th.lemma3_bias(eta, L, B, sG, sH, 25.0, form="corrected", n_query=100.0)
  assert corr == pytest.approx(1.2 * (sG / 5 + eta * L * sG / 10) + eta * B * sH / 10
                               + eta * sG * sH / 50 + eta**2 * L * sG * sH / 100)
  with pytest.raises(FedJaxDpError, match="n_support must be a positive size"):
    th.lemma3_bias(eta, L, B, sG, sH, 0)


# ---------------------------------------------------------------------------
# Theorems 2 and 3.
# ---------------------------------------------------------------------------

KW = dict(tau0=2, eta=0.02, beta=0.05, C=2.4, S=1001, sigma=1.3, n_support=300, gap0=2.3)


def _bracket_by_hand(k, tau0, eta, beta, C, S, sigma, n):
  Lp = k.L * (1 + eta * k.L) ** 2 + eta * k.rho * k.B
  c = 1 + eta * k.L
  r = 1 + beta * Lp
  hh = beta * (k.eps_het * c + eta * k.B * k.gamma_het) * ((r**tau0 - 1) / (r - 1) - tau0)
  theta = th.theta_paper(C, S, sigma)
  xi = c * (2 * eta * k.L * k.B + eta * k.L * theta + max(math.sqrt(C), k.B)
            - min(C / c, math.sqrt(C)))
  data = (eta * c * k.L * k.sigma_G / math.sqrt(n) + eta * k.B * k.sigma_H / math.sqrt(n)
          + eta**2 * k.L * k.sigma_G * k.sigma_H / n)
  drift = sum((tau0 - j) * r**j for j in range(tau0))
  return Lp, c * hh, beta * tau0 * c * xi * drift, beta * tau0 * c * data * drift


def test_theorem3_matches_a_hand_computation():
  Lp, a, b, c = _bracket_by_hand(CONSTS, 2, 0.02, 0.05, 2.4, 1001, 1.3, 300)
  den = 0.05 * (1 - 0.05 * Lp / 2)
  out = th.theorem3_bound(CONSTS, T=50, **KW)
  assert out.optimization == pytest.approx(2.3 / (50 * den), rel=1e-12)
  assert out.multi_step == pytest.approx(CONSTS.lam / den * a, rel=1e-12)
  assert out.dp == pytest.approx(CONSTS.lam / den * b, rel=1e-12)
  assert out.data_size == pytest.approx(CONSTS.lam / den * c, rel=1e-12)
  assert out.total == pytest.approx(sum(out[1:]), rel=1e-14)


def test_theorem2_matches_a_hand_computation():
  Lp, a, b, c = _bracket_by_hand(CONSTS, 2, 0.02, 0.05, 2.4, 1001, 1.3, 300)
  lp = (1 - 0.02) * (0.2 - 0.02) - 0.02 * 0.5 * 1.5
  z = 1 - 2 * lp * 0.05 + Lp * lp * 0.05**2
  out = th.theorem2_bound(CONSTS, T=50, **KW)
  pre = (1 - z**100) / (1 - z**2) * CONSTS.lam
  assert out.optimization == pytest.approx(z**100 * 2.3, rel=1e-12)
  assert (out.multi_step, out.dp, out.data_size) == pytest.approx(
      (pre * a, pre * b, pre * c), rel=1e-12)
  # More rounds: the initial gap shrinks geometrically.
  assert th.theorem2_bound(CONSTS, T=100, **KW).optimization < out.optimization


def test_theorem3_monotone_in_data_size_and_model_size():
  base = dict(KW, S=MLP_S)
  totals = [th.theorem3_bound(CONSTS, T=50, **dict(base, n_support=n)).total
            for n in (30, 100, 300, 1000, 10_000)]
  assert all(b < a for a, b in zip(totals, totals[1:]))
  for theta in ("exact", "paper"):
    # Same parity for "paper" (Theta jumps 2x with the parity of S).
    totals = [th.theorem3_bound(CONSTS, T=50, **dict(base, S=S), theta=theta).total
              for S in (1_001, 10_001, 100_001, 1_000_001)]
    assert all(b > a for a, b in zip(totals, totals[1:]))
  odd = th.theorem3_bound(CONSTS, T=50, **dict(base, S=1001)).dp
  even = th.theorem3_bound(CONSTS, T=50, **dict(base, S=1000)).dp
  assert even > odd  # the paper's Theta is not monotone in S across parities


def test_theorem3_without_dp_at_one_local_epoch():
  """tau0 = 1, sigma = 0, C large (Remark 1's "conventional meta-learning" limit): the
  multi-step part is 0 and the DP part is finite, lambda (1+eta L)^2 2 eta L B / (1 -
  beta L'/2), not 0 (Lemma 4 keeps a clipping term)."""
  k, eta, beta = CONSTS, 0.02, 0.05
  kw = dict(KW, tau0=1, sigma=0.0)
  out = th.theorem3_bound(k, T=50, **dict(kw, C=1e6))
  Lp = th.meta_smoothness(k.L, k.rho, k.B, eta)
  c = 1 + eta * k.L
  assert out.multi_step == 0.0
  assert out.dp == pytest.approx(k.lam * c * c * 2 * eta * k.L * k.B / (1 - beta * Lp / 2))
  assert out.dp == pytest.approx(th.theorem3_bound(k, T=50, **dict(kw, C=1e9)).dp)
  assert out.dp < th.theorem3_bound(k, T=50, **dict(kw, C=1.0)).dp  # clipping costs
  # Per-client sizes with the paper's p_i = |D_i^S| / |D^S| default.
  per = th.theorem3_bound(k, T=50, **dict(kw, n_support=[100, 300]))
  bias = th.lemma3_bias(eta, k.L, k.B, k.sigma_G, k.sigma_H, np.array([100.0, 300.0]))
  pre = k.lam / (beta * (1 - beta * Lp / 2)) * beta * c
  assert per.data_size == pytest.approx(pre * (0.25 * bias[0] + 0.75 * bias[1]))
  uniform = th.theorem3_bound(k, T=50, **dict(kw, n_support=[100, 300]), p=[0.5, 0.5])
  assert uniform.data_size > per.data_size
  with pytest.raises(FedJaxDpError, match="p must sum to 1"):
    th.theorem3_bound(k, T=50, **dict(kw, n_support=[100, 300]), p=[0.5, 0.6])
  with pytest.raises(FedJaxDpError, match="beta must be < 2/L'"):
    th.theorem3_bound(k, T=50, **dict(kw, beta=2.0))


# ---------------------------------------------------------------------------
# Optimal T and the U-shape in C.
# ---------------------------------------------------------------------------

MLP_KW = dict(tau0=1, eta=0.01, beta=0.01, C=2.4, S=MLP_S)
MLP_CONSTS = th.Constants(L=1.0, rho=0.0, B=1.0, lam=1.0, l=0.0, eps_het=0.1, gamma_het=0.1,
                          sigma_G=1.0, sigma_H=1.0)
GAP0 = math.log(10.0)  # initial cross-entropy of a 10-class model


def _bound(theta):
  return lambda T, s: th.theorem3_bound(MLP_CONSTS, T, sigma=s, n_support=300, gap0=GAP0,
                                        theta=theta, **MLP_KW)


@pytest.mark.parametrize("theta", ["exact", "paper"])
def test_optimal_rounds_closed_form_matches_numeric(theta):
  t_star = th.optimal_rounds_nonconvex(MLP_CONSTS, q=0.1, epsilon=2.0, delta=1e-3, gap0=GAP0,
                                       theta=theta, **MLP_KW)
  grid = np.arange(2, 401)
  t_num, values = th.optimal_rounds_numeric(
      _bound(theta), lambda T: th.sigma_approx(T, 1, 0.1, 2.0, 1e-3), grid)
  assert values.shape == grid.shape and values.min() == values[int(t_num) - 2]
  assert abs(t_star - t_num) <= 0.3 * t_num
  A, B0, B1 = th.nonconvex_round_coefficients(MLP_CONSTS, q=0.1, epsilon=2.0, delta=1e-3,
                                              gap0=GAP0, n_support=300, theta=theta, **MLP_KW)
  np.testing.assert_allclose(values, A / grid + B0 + B1 * np.sqrt(grid), rtol=1e-10)
  assert t_star == pytest.approx((2 * A / B1) ** (2 / 3))


def test_optimal_rounds_with_the_exact_accountant():
  """The paper's own sigma(T) (Theorem 1) grows more slowly than sqrt(T) over this range,
  so T* moves up (about 37 vs 29.5 for theta="exact"; see the experiment README)."""
  t_star = th.optimal_rounds_nonconvex(MLP_CONSTS, q=0.1, epsilon=2.0, delta=1e-3, gap0=GAP0,
                                       theta="exact", **MLP_KW)
  grid = [10, 15, 20, 25, 30, 35, 40, 45, 50, 60, 80, 120]
  t_exact, values = th.optimal_rounds_numeric(
      _bound("exact"), lambda T: pa.paper_calibrate_sigma(2.0, 1e-3, 0.1, 0.1, T, 1), grid)
  assert 25.0 <= t_star <= 35.0
  assert 1.0 < t_exact / t_star < 2.0
  assert values[0] > values.min() < values[-1]  # an interior optimum


def test_sigma_approx_vs_table():
  assert th.sigma_approx(200, 1, 0.1, 2.0, 1e-3) == pytest.approx(
      2 * 0.1 * math.sqrt(200 * math.log(1e3)) / 2.0)
  # Within ~15% of the paper's calibration (note 3.5 table: 3.349 at T = 200).
  assert th.sigma_approx(200, 1, 0.1, 2.0, 1e-3) == pytest.approx(3.349, rel=0.15)


def test_u_shape_in_C():
  eta, L = 1e-3, 1.0
  for B in (0.5, 3.0):  # below and above 1 + eta L
    small = th.u_shape_in_C(eta, L, B, sigma=1.0, S=100)
    assert small.has_interior_minimum and small.note_condition and small.slope_small_c < 0
    grid = np.geomspace(1e-4, 1e3, 40_001)
    xi = np.array([th.xi(C, 100, 1.0, eta, L, B, theta="exact") for C in grid])
    assert small.argmin_c == pytest.approx(grid[np.argmin(xi)], rel=2e-3)
    assert th.xi(small.argmin_c, 100, 1.0, eta, L, B, "exact") <= xi.min() * (1 + 1e-12)
  realistic = th.u_shape_in_C(0.01, 1.0, 1.0, sigma=1.0, S=MLP_S)
  assert not realistic.has_interior_minimum and not realistic.note_condition
  assert realistic.slope_small_c > 0 and realistic.argmin_c == 0.0
  assert realistic.kappa_s == pytest.approx(math.sqrt(MLP_S), rel=1e-5)
  # Threshold: (1 + eta L) eta L kappa sigma < 1.
  kappa = th.noise_norm_factor(MLP_S)
  L_edge = 1.0 / (0.01 * kappa)  # sigma = 1, ignoring 1 + eta L ~ 1
  assert th.u_shape_in_C(0.01, 0.9 * L_edge, 1.0, 1.0, MLP_S).has_interior_minimum
  assert not th.u_shape_in_C(0.01, 1.01 * L_edge, 1.0, 1.0, MLP_S).has_interior_minimum
  # sigma = 0: Xi decreases to a plateau, no U.
  flat = th.u_shape_in_C(0.01, 1.0, 2.0, sigma=0.0, S=MLP_S)
  assert not flat.has_interior_minimum and flat.argmin_c == pytest.approx(4.0)


def test_u_shape_condition_agrees_with_the_note_on_random_settings():
  rng = np.random.default_rng(3)
  for _ in range(300):
    eta, L = 10 ** rng.uniform(-4, -1), 10 ** rng.uniform(-1, 1)
    B, sigma = 10 ** rng.uniform(-1, 1), 10 ** rng.uniform(-1, 1)
    S = int(10 ** rng.uniform(0, 6))
    out = th.u_shape_in_C(eta, L, B, sigma, S)
    assert out.has_interior_minimum == out.note_condition
    if out.has_interior_minimum:
      xi0 = th.xi(1e-12, S, sigma, eta, L, B, "exact")
      assert th.xi(out.argmin_c, S, sigma, eta, L, B, "exact") < xi0
