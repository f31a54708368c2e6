"""Theorem 1 of paper 001 (LAPA): the step-size condition, the switching round and the
convergence bound Phi(p) of eq. (24), checked against a direct loop, its limits, its
monotonicity (the note's section 8 items 5-7) and a Monte-Carlo simulation of noisy
gradient-sharing FL on strongly convex quadratics (item 8)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import bound
from fedjax_dp.validation import FedJaxDpError


def _setting(num_rounds=100, decay=0.995, eta=1.0):
  """Five devices, a geometrically decaying artificial-noise schedule, equal weights."""
  n = 5
  s0 = np.array([1.0, 1.2, 1.4, 1.6, 1.8])
  sigma_art = s0[None, :] * decay ** np.arange(num_rounds)[:, None]
  return dict(sigma_art=sigma_art, gains=np.array([1.0, 0.8, 1.2, 1.0, 0.9]),
              noise_power=1.0, kappa=0.1, rho=np.full(n, 1.0 / n),
              selected=np.ones(n, bool), eta=eta, mu=0.2, lipschitz=1.0, b=1.0, dim=10,
              initial_gap=2.3)


def _reference_phi(powers, *, sigma_art, gains, noise_power, kappa, rho, selected, eta, mu,
                   lipschitz, b, dim, initial_gap, rounds=None):
  """Eq. (24) written as plain float64 loops, for one power vector."""
  sigma_art = np.asarray(sigma_art, np.float64)
  t = sigma_art.shape[0] if rounds is None else rounds
  a = 1 - 2 * mu * eta + mu * lipschitz * eta ** 2 * b ** 2
  sig_c = [kappa * np.sqrt(noise_power / (p * g)) for p, g in zip(powers, gains)]
  t_th = t
  for tau in range(t):
    row = sigma_art[min(tau, sigma_art.shape[0] - 1)]
    if all(row[i] <= sig_c[i] for i in range(len(powers)) if selected[i]):
      t_th = tau
      break
  pref = lipschitz * eta ** 2 * dim / 2
  art = 0.0
  for tau in range(t_th):
    row = sigma_art[min(tau, sigma_art.shape[0] - 1)]
    art += a ** (t - 1 - tau) * sum(rho[i] ** 2 * row[i] ** 2
                                    for i in range(len(powers)) if selected[i])
  chan = sum(rho[i] ** 2 * sig_c[i] ** 2 for i in range(len(powers)) if selected[i])
  return a ** t * initial_gap + pref * art + pref * chan * (1 - a ** t) / (1 - a), t_th


# ---------------------------------------------------------------------------------------
# Step size (eqs. 25-27, 46) and dissimilarity (A4).


def test_contraction_below_one_iff_step_size_condition():
  lipschitz, mu, b = 4.0, 0.5, 1.5
  etas = np.linspace(-0.2, 0.5, 2001)
  a = np.asarray(bound.contraction(etas, mu, lipschitz, b))
  ok = np.asarray(bound.step_size_ok(etas, lipschitz, b))
  edge = 2 / (lipschitz * b ** 2)
  away = np.abs(etas - edge) > 1e-6                     # float32 rounding at the edge
  np.testing.assert_array_equal((a < 1)[away], ok[away])
  np.testing.assert_array_equal(ok, (etas > 0) & (etas < edge))
  # Minimum at eta = 1/(L B^2), value 1 - mu/(L B^2) >= 0 (A3: mu <= L, A4: B >= 1).
  fine = np.linspace(0.0, edge, 100001)
  a_fine = np.asarray(bound.contraction(fine, mu, lipschitz, b), np.float64)
  assert fine[np.argmin(a_fine)] == pytest.approx(1 / (lipschitz * b ** 2), abs=1e-4)
  assert a_fine.min() == pytest.approx(1 - mu / (lipschitz * b ** 2), abs=1e-6)
  assert a_fine.min() >= 0


def test_dissimilarity_b2():
  g = np.tile(np.array([[1.0, -2.0, 0.5]]), (4, 1))
  assert float(bound.dissimilarity_b2(g, np.ones(4))) == pytest.approx(1.0, rel=1e-6)
  # Two opposite-ish gradients: weights 1/2, 1/2 (renormalised from 3, 3).
  g2 = np.array([[1.0, 0.0], [0.0, 1.0]])
  # sum rho ||g||^2 = 1; ||mean||^2 = 0.5 -> B^2 = 2.
  assert float(bound.dissimilarity_b2(g2, [3.0, 3.0])) == pytest.approx(2.0, rel=1e-6)
  rng = np.random.default_rng(0)
  for _ in range(5):
    gr = rng.normal(size=(6, 4))
    w = rng.uniform(0, 1, size=6)
    ref = (w / w.sum() * (gr ** 2).sum(1)).sum() / (((w / w.sum())[:, None] * gr)
                                                    .sum(0) ** 2).sum()
    val = float(bound.dissimilarity_b2(gr, w))
    assert val == pytest.approx(ref, rel=1e-4)
    assert val >= 1.0


# ---------------------------------------------------------------------------------------
# Switching round (eq. 23).


def test_switch_round_rule():
  sigma_art = np.array([[4.0, 4.0], [3.0, 2.0], [2.0, 1.0], [1.0, 0.5]])
  sel = np.array([True, True])
  t = bound.switch_round(sigma_art, np.array([[2.0, 2.0], [1.0, 3.0], [0.1, 5.0],
                                               [5.0, 5.0], [0.0, 0.0]]), sel)
  assert t.dtype == jnp.int32
  # [2, 2]: round 2 (2 <= 2 and 1 <= 2); [1, 3]: round 3; [0.1, 5]: never -> T = 4;
  # [5, 5]: round 0; ideal channel: never.
  np.testing.assert_array_equal(np.asarray(t), [2, 3, 4, 0, 4])
  # An unselected device does not hold the switch back.
  t2 = bound.switch_round(sigma_art, np.array([0.1, 5.0]), np.array([False, True]))
  assert int(t2) == 0
  # Batch axes are kept.
  t3 = bound.switch_round(sigma_art, np.full((2, 3, 2), 2.0), sel)
  assert t3.shape == (2, 3) and np.all(np.asarray(t3) == 2)


def test_switch_round_non_decreasing_in_each_power():
  kw = _setting()
  rng = np.random.default_rng(1)
  _, switch = bound.make_objective(**kw)
  base = rng.uniform(1e-3, 2e-2, size=(200, 5))
  for i in range(5):
    up = base.copy()
    up[:, i] *= rng.uniform(1.0, 3.0, size=200)
    t_base = np.asarray(switch(jnp.asarray(base)))
    t_up = np.asarray(switch(jnp.asarray(up)))
    assert np.all(t_up >= t_base)
  assert np.any(t_up > t_base)                       # the test can fail


# ---------------------------------------------------------------------------------------
# The bound (eq. 24).


def test_bound_matches_direct_loop_and_jit():
  kw = _setting(num_rounds=40, decay=0.97)
  kw["selected"] = np.array([True, True, False, True, True])
  kw["rho"] = np.array([0.3, 0.1, 0.0, 0.4, 0.2])
  rng = np.random.default_rng(2)
  powers = 10 ** rng.uniform(-3, -1, size=(12, 5))
  phi = np.asarray(bound.convergence_bound(jnp.asarray(powers), **kw))
  terms = bound.bound_terms(jnp.asarray(powers), **kw)
  objective, switch = bound.make_objective(**kw)
  phi_jit = np.asarray(jax.jit(objective)(jnp.asarray(powers)))
  t_switch = set()
  for k in range(12):
    ref, t_th = _reference_phi(powers[k], **kw)
    assert phi[k] == pytest.approx(ref, rel=2e-5)
    assert int(terms["switch_round"][k]) == t_th
    t_switch.add(t_th)
  assert len(t_switch) > 3                              # several switching rounds covered
  np.testing.assert_allclose(phi_jit, phi, rtol=1e-6)
  total = terms["initial"] + terms["artificial"] + terms["channel"]
  np.testing.assert_allclose(np.asarray(total), phi, rtol=1e-6)


@pytest.mark.parametrize("consts", [
    dict(mu=0.01, lipschitz=10.0, eta=1e-4),         # A = 1 - 2e-6 (float32 ulp 6e-8)
    dict(mu=1.0, lipschitz=1.0, eta=1.0),            # A = 0
])
def test_bound_accurate_at_extreme_contractions(consts):
  kw = dict(_setting(num_rounds=30, decay=0.9), **consts)
  powers = np.array([[0.01] * 5, [1e-3, 0.1, 0.01, 0.02, 0.05], [10.0] * 5])
  for rounds in (None, 80):
    phi = np.asarray(bound.convergence_bound(jnp.asarray(powers), rounds=rounds, **kw))
    for k in range(3):
      ref, _ = _reference_phi(powers[k], rounds=rounds, **kw)
      assert phi[k] == pytest.approx(ref, rel=1e-4)


def test_rounds_beyond_the_recorded_schedule_repeat_its_last_row():
  kw = _setting(num_rounds=30, decay=0.98)
  rng = np.random.default_rng(3)
  powers = rng.uniform(1e-3, 5e-2, size=(20, 5))
  padded = dict(kw, sigma_art=np.concatenate([kw["sigma_art"],
                                              np.repeat(kw["sigma_art"][-1:], 50, 0)]))
  long = np.asarray(bound.convergence_bound(jnp.asarray(powers), rounds=80, **kw))
  ref = np.asarray(bound.convergence_bound(jnp.asarray(powers), **padded))
  np.testing.assert_allclose(long, ref, rtol=1e-5)
  short = np.asarray(bound.convergence_bound(jnp.asarray(powers), rounds=10, **kw))
  trunc = dict(kw, sigma_art=kw["sigma_art"][:10])
  np.testing.assert_allclose(
      short, np.asarray(bound.convergence_bound(jnp.asarray(powers), **trunc)), rtol=1e-6)


def test_bound_monotone_in_artificial_noise():
  kw = _setting(num_rounds=30, decay=0.97)
  powers = jnp.full((5,), 0.02)
  base = float(bound.convergence_bound(powers, **kw))
  t_th = int(bound.bound_terms(powers, **kw)["switch_round"])
  assert 0 < t_th < 30
  rng = np.random.default_rng(4)
  for _ in range(20):
    tau, i = int(rng.integers(0, 30)), int(rng.integers(0, 5))
    bumped = kw["sigma_art"].copy()
    bumped[tau, i] *= 1.5
    phi = float(bound.convergence_bound(powers, **dict(kw, sigma_art=bumped)))
    if tau < t_th:
      assert phi > base * (1 + 1e-7)                     # strictly, on a used round
    else:
      assert phi >= base                                 # may delay the switch


def test_channel_term_inverse_in_power():
  kw = _setting()
  rng = np.random.default_rng(5)
  p = jnp.asarray(rng.uniform(1e-3, 1e-1, size=(50, 5)))
  c1 = np.asarray(bound.bound_terms(p, **kw)["channel"])
  c2 = np.asarray(bound.bound_terms(2.0 * p, **kw)["channel"])
  np.testing.assert_allclose(c2, c1 / 2.0, rtol=1e-5)
  bigger = p.at[:, 2].mul(3.0)
  assert np.all(np.asarray(bound.bound_terms(bigger, **kw)["channel"]) < c1)


def test_zero_power_gives_infinite_bound_only_on_selected_devices():
  kw = _setting(num_rounds=20)
  p = jnp.array([0.0, 0.01, 0.01, 0.01, 0.01])
  assert np.isinf(float(bound.convergence_bound(p, **kw)))
  kw_sel = dict(kw, selected=np.array([False, True, True, True, True]))
  assert np.isfinite(float(bound.convergence_bound(p, **kw_sel)))


def test_ideal_channel_never_switches_and_has_no_channel_term():
  kw = dict(_setting(num_rounds=25), noise_power=0.0)
  terms = bound.bound_terms(jnp.full((3, 5), 0.01), **kw)
  np.testing.assert_array_equal(np.asarray(terms["switch_round"]), 25)
  np.testing.assert_array_equal(np.asarray(terms["channel"]), 0.0)
  assert np.all(np.asarray(terms["artificial"]) > 0)


def test_long_horizon_limit_is_the_noise_floor():
  kw = _setting(num_rounds=100, decay=0.97)
  p = jnp.full((5,), 0.05)
  assert int(bound.bound_terms(p, **kw)["switch_round"]) < 100
  a = float(bound.contraction(kw["eta"], kw["mu"], kw["lipschitz"], kw["b"]))
  sig_c2 = kw["kappa"] ** 2 * kw["noise_power"] / (0.05 * kw["gains"])
  floor = (kw["lipschitz"] * kw["eta"] ** 2 * kw["dim"] / 2
           * np.sum(kw["rho"] ** 2 * sig_c2) / (1 - a))
  phi_long = float(bound.convergence_bound(p, rounds=5000, **kw))
  assert phi_long == pytest.approx(floor, rel=1e-5)
  phi_short = float(bound.convergence_bound(p, **kw))
  assert phi_short > phi_long                       # the transient terms have decayed


def test_interior_minimum_over_a_common_power():
  """Slowly decaying artificial noise (std factor 0.995 a round, A = 0.8): raising the
  common power lowers the channel term ~1/p but delays the switch; below P_max = 0.012
  the trade-off has an interior minimum (note section 8 item 7)."""
  kw = _setting(num_rounds=100, decay=0.995)
  p_max = 0.012
  grid = np.linspace(p_max / 200, p_max, 200)
  objective, switch = bound.make_objective(**kw)
  phi = np.asarray(objective(jnp.asarray(grid[:, None] * np.ones(5))))
  t_th = np.asarray(switch(jnp.asarray(grid[:, None] * np.ones(5))))
  k = int(np.argmin(phi))
  assert 10 < k < 190
  assert phi[k] < 0.9 * phi[-1] and phi[k] < 0.1 * phi[0]
  assert 0 < t_th[k] < 100
  assert t_th[-1] == 100 and t_th[0] == 0
  # A random search over per-device powers does at least as well as the common grid.
  rng = np.random.default_rng(6)
  cand = rng.uniform(0.5, 1.5, size=(4000, 5)) * grid[k]
  assert float(np.min(np.asarray(objective(jnp.asarray(cand))))) <= phi[k] * (1 + 1e-6)


def test_monotone_schedule_no_switch_is_the_unbounded_infimum():
  """For a non-increasing schedule, Phi(p) >= the no-switch, no-channel-noise value
  Phi(inf), so the interior optimum above exists only because of the power cap: after
  T_th every device's channel noise is at least its (later, smaller) artificial noise."""
  kw = _setting(num_rounds=60, decay=0.99)
  a = float(bound.contraction(kw["eta"], kw["mu"], kw["lipschitz"], kw["b"]))
  s = np.sum(kw["rho"] ** 2 * kw["sigma_art"] ** 2, axis=1)
  t = 60
  phi_inf = a ** t * kw["initial_gap"] + (kw["lipschitz"] * kw["eta"] ** 2 * kw["dim"] / 2
                                          * np.sum(a ** (t - 1 - np.arange(t)) * s))
  rng = np.random.default_rng(7)
  p = jnp.asarray(10 ** rng.uniform(-4, 2, size=(3000, 5)))
  phi = np.asarray(bound.convergence_bound(p, **kw))
  assert np.all(phi >= phi_inf * (1 - 1e-5))
  assert float(bound.convergence_bound(jnp.full((5,), 1e8), **kw)) == pytest.approx(
      phi_inf, rel=1e-4)


@pytest.mark.parametrize("bad, option", [
    (dict(eta=2.5), "eta"),                        # A >= 1: 2/(L B^2) = 2
    (dict(eta=0.0), "eta"),
    (dict(mu=2.0), "mu"),
    (dict(b=0.5), "b"),
    (dict(rho=np.ones(4)), "rho"),
    (dict(gains=-np.ones(5)), "gains"),
    (dict(selected=np.ones(3, bool)), "selected"),
    (dict(sigma_art=np.ones(5)), "sigma_art"),
    (dict(dim=0), "dim"),
    (dict(rounds=0), "rounds"),
])
def test_bad_input_names_the_option(bad, option):
  kw = dict(_setting(num_rounds=10), **bad)
  with pytest.raises(FedJaxDpError) as err:
    bound.convergence_bound(jnp.full((5,), 0.01), **kw)
  assert err.value.option == option
  if option == "eta" and bad["eta"] > 0:
    assert "does not converge" in str(err.value) and "2.5" in str(err.value)


# ---------------------------------------------------------------------------------------
# Empirical validation (note section 8 item 8).


@functools.partial(jax.jit, static_argnames=("num_seeds",))
def _simulate(key, w0, centers, q_diag, rho, eta, sigma_art, sigma_c, t_th, num_seeds):
  """Gradient-sharing FL on F_i(w) = 0.5 (w - c_i)^T Q (w - c_i), Q diagonal: per round
  w <- w - eta (sum_i rho_i (grad F_i(w) + 1{tau < T_th} n_i + z_i)). Returns the final
  gaps F(w_T) - F* [num_seeds]."""
  cbar = rho @ centers
  num_rounds, n = sigma_art.shape
  d = w0.shape[0]

  def one_seed(k):
    def step(w, inp):
      tau, kk = inp
      grads = q_diag * (w[None, :] - centers)                     # [N, d]
      k1, k2 = jax.random.split(kk)
      art = jnp.where(tau < t_th, sigma_art[tau], 0.0)[:, None]
      noise = (art * jax.random.normal(k1, (n, d))
               + sigma_c[:, None] * jax.random.normal(k2, (n, d)))
      return w - eta * (rho @ (grads + noise)), None

    w_t, _ = jax.lax.scan(step, w0, (jnp.arange(num_rounds),
                                     jax.random.split(k, num_rounds)))
    diff = w_t - cbar
    return 0.5 * jnp.sum(q_diag * diff * diff)

  return jax.vmap(one_seed)(jax.random.split(key, num_seeds))


def _validation_case(q_diag, centers, rho, eta, b, powers, num_rounds=30, num_seeds=512,
                     seed=0):
  n, d = centers.shape
  gains = np.linspace(0.5, 1.5, n)
  sigma_art = np.linspace(0.6, 1.0, n)[None, :] * 0.9 ** np.arange(num_rounds)[:, None]
  w0 = np.full(d, 3.0)
  cbar = rho @ centers
  gap0 = 0.5 * np.sum(q_diag * (w0 - cbar) ** 2)
  kw = dict(sigma_art=sigma_art, gains=gains, noise_power=0.01, kappa=1.0, rho=rho,
            selected=np.ones(n, bool), eta=eta, mu=float(q_diag.min()),
            lipschitz=float(q_diag.max()), b=b, dim=d, initial_gap=gap0)
  terms = bound.bound_terms(jnp.asarray(powers), **kw)
  phi = float(terms["initial"] + terms["artificial"] + terms["channel"])
  t_th = int(terms["switch_round"])
  sigma_c = np.asarray(bound.channel_noise_std(powers, gains, 0.01, 1.0))
  gaps = np.asarray(_simulate(jax.random.PRNGKey(seed), jnp.asarray(w0, jnp.float32),
                              jnp.asarray(centers, jnp.float32),
                              jnp.asarray(q_diag, jnp.float32), jnp.asarray(rho, jnp.float32),
                              eta, jnp.asarray(sigma_art, jnp.float32),
                              jnp.asarray(sigma_c, jnp.float32), t_th, num_seeds),
                    np.float64)
  return phi, t_th, gaps.mean(), gaps.std() / np.sqrt(num_seeds)


def test_bound_is_exact_for_isotropic_quadratics():
  """Q = mu I = L I and B = 1: E[F(w_T) - F*] obeys the recursion of eq. (46) with
  equality, so the Monte-Carlo mean must match Phi (and not only stay below it)."""
  n, d = 4, 6
  rng = np.random.default_rng(8)
  centers = rng.normal(size=(n, d))
  rho = np.array([0.1, 0.2, 0.3, 0.4])
  seen = set()
  for p in (0.05, 0.5, 5.0):
    phi, t_th, mean, se = _validation_case(np.ones(d), centers, rho, 0.3, 1.0,
                                           np.full(n, p))
    seen.add(t_th)
    assert abs(mean - phi) <= 4 * se + 1e-6 * phi, (p, phi, mean, se)
  assert len(seen) == 3                                 # three different switch rounds


def test_bound_holds_for_heterogeneous_quadratics():
  """Anisotropic Q (mu = 0.2, L = 2), non-IID centres, B from the local gradients at w0.
  With exact local gradients sum_i rho_i grad F_i = grad F, so the chain (43)-(46)
  holds for any B >= 1 along the whole trajectory, not only at w0."""
  n, d = 4, 6
  rng = np.random.default_rng(9)
  centers = rng.normal(scale=2.0, size=(n, d))
  q_diag = np.linspace(0.2, 2.0, d)
  rho = np.array([0.1, 0.2, 0.3, 0.4])
  w0 = np.full(d, 3.0)
  b2 = float(bound.dissimilarity_b2(q_diag * (w0 - centers), rho))
  b = float(np.sqrt(b2))
  eta = 0.8 / (2.0 * b2)
  seen = set()
  for powers in (np.full(n, 0.05), np.full(n, 5.0), np.array([0.05, 5.0, 0.5, 1.0])):
    phi, t_th, mean, se = _validation_case(q_diag, centers, rho, eta, b, powers)
    seen.add(t_th)
    assert mean + 3 * se <= phi, (powers, phi, mean, se)
  assert len(seen) >= 2
