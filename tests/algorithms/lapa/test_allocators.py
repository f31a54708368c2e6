"""Tests for LAPA's privacy-budget allocators (paper 001, eqs. 10-16; note 001 Sec. 2.5,
6 Benchmarks 3-4, 8 items 2-3, 9 B2-B4): the PID-like error and its history sampling,
the round budget (12) (budget safety, monotonicity), angles, smoothing, the Gompertz
map, the device split, the uniform and ARB-approx baselines, the per-device basic-
composition clamp for every kind and split, and jit / lax.scan compatibility.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_dp.algorithms.lapa import allocators as A
from fedjax_dp.validation import FedJaxDpError

N, D, T = 4, 8, 20
SELECTED = np.array([True, True, True, False])
REL = 1e-6    # float32 slack of the budget sums

STEP = jax.jit(A.step, static_argnums=0)


def _trajectory(config, grads, received, selected, key):
  """Runs `A.step` over all rounds under lax.scan; returns the stacked budgets of the
  rounds 1..T (the state each round starts with) and the final state."""
  state0 = A.init_state(config, N, D, selected)

  def body(state, xs):
    t, g, rec, k = xs
    out = (state.epsilon_round, state.epsilon_devices, state.error)
    return A.step(config, state, t, g, rec, selected, k), out

  ts = jnp.arange(1, grads.shape[0] + 1, dtype=jnp.int32)
  keys = jax.random.split(key, grads.shape[0])
  final, (eps, eps_dev, err) = jax.lax.scan(body, state0, (ts, grads, received, keys))
  return final, eps, eps_dev, err


TRAJECTORY = jax.jit(_trajectory, static_argnums=0)


def _heterogeneous_rounds(seed=0, rounds=T, drift=0.05):
  """Global gradients drifting slowly (small PID error with Z = 1) and received
  gradients at angles ~0, pi/4, pi/2 and pi from the global one."""
  rng = np.random.default_rng(seed)
  base = rng.normal(size=D)
  base /= np.linalg.norm(base)
  grads = base + drift * rng.normal(size=(rounds, D)).cumsum(axis=0)
  rec = np.empty((rounds, N, D))
  for t in range(rounds):
    g = grads[t]
    u = rng.normal(size=D)
    u -= u @ g / (g @ g) * g
    u *= np.linalg.norm(g) / np.linalg.norm(u)
    rec[t] = [g, g + u, u, -g]
  return jnp.asarray(grads, jnp.float32), jnp.asarray(rec, jnp.float32)


# ---------------------------------------------------------------------------
# Configuration and round 1.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("kind", "adaptive"), ("epsilon_total", 0.0), ("epsilon_total", float("inf")),
    ("rounds", 0), ("kp", -0.1), ("ks", float("nan")), ("history_points", 1),
    ("window", 3), ("error_scale", 0.0), ("initial_error", -1.0), ("alpha", 0.0),
    ("gompertz", "decreasing"), ("split", "max"), ("arb_beta", 1.0), ("arb_beta", -0.1),
    ("budget", "linear")])
def test_validate_config_names_the_field(field, value):
  config = A.AllocatorConfig("lapa", 1.0, 10)._replace(**{field: value})
  with pytest.raises(FedJaxDpError) as e:
    A.init_state(config, N, D, SELECTED)
  assert e.value.option == field


def test_init_state_errors():
  config = A.AllocatorConfig("lapa", 1.0, 10)
  for args, option in [((0, D, np.ones(0, bool)), "num_devices"),
                       ((N, 0, SELECTED), "dim"),
                       ((N, D, np.ones(N + 1, bool)), "selected")]:
    with pytest.raises(FedJaxDpError) as e:
      A.init_state(config, *args)
    assert e.value.option == option
  with pytest.raises(FedJaxDpError):
    A.init_state(("lapa", 1.0, 10), N, D, SELECTED)


@pytest.mark.parametrize("kind,split,round1,device1", [
    ("lapa", "mean", math.exp(-1.0) * 0.1, math.exp(-1.0) * 0.1),
    ("lapa", "sum", math.exp(-1.0) * 0.1, math.exp(-1.0) * 0.1 / 3),
    ("uniform", "sum", 0.1, 0.1), ("arb", "sum", 0.1, 0.1), ("none", "mean", 0.0, 0.0)])
def test_init_state_round1(kind, split, round1, device1):
  config = A.AllocatorConfig(kind, 2.0, 20, split=split, window=6)
  s = A.init_state(config, N, D, SELECTED)
  assert float(s.epsilon_round) == pytest.approx(round1, rel=1e-6)
  np.testing.assert_allclose(np.asarray(s.epsilon_devices), [device1] * 3 + [0.0],
                             rtol=1e-6)
  assert s.history.shape == (6, D) and s.history.dtype == jnp.float32
  assert int(s.filled) == 0 and float(s.consumed) == 0.0
  assert float(s.error) == (1.0 if kind == "lapa" else 0.0)


# ---------------------------------------------------------------------------
# PID-like error (eqs. 10-11).
# ---------------------------------------------------------------------------

def test_pid_error_initial_below_two_points():
  h = jnp.ones((5, D))
  for filled in (0, 1):
    e = A.pid_error(h, filled, jax.random.PRNGKey(0), 3, 0.9, 0.1, 1.0, 0.7)
    assert float(e) == pytest.approx(0.7)


def _push(history, grads):
  filled = 0
  for g in grads:
    history = history.at[filled % history.shape[0]].set(jnp.asarray(g, jnp.float32))
    filled += 1
  return history, filled


def test_pid_error_hand_computed():
  # W = m = 3: the three stored points are all taken; 5 pushes wrap the ring buffer, so
  # the window holds g3, g4, g5 (E_2 = ||g4 - g3|| / Z, E_3 = ||g5 - g4|| / Z).
  gs = [[9.0, 9.0], [7.0, 7.0], [0.0, 0.0], [3.0, 4.0], [3.0, 4.0 + 12.0]]
  h, filled = _push(jnp.zeros((3, 2)), gs)
  kp, ks, z = 0.9, 0.1, 2.0
  e2, e3 = 5.0 / z, 12.0 / z
  for seed in range(3):
    e = A.pid_error(h, filled, jax.random.PRNGKey(seed), 3, kp, ks, z, 1.0)
    assert float(e) == pytest.approx(kp * e3 + ks * (e2 + e3) / 2, rel=1e-6)
  # two points only (m = 3): one difference, the mean is that difference
  h2, filled2 = _push(jnp.zeros((3, 2)), gs[2:4])
  e = A.pid_error(h2, filled2, jax.random.PRNGKey(0), 3, kp, ks, z, 1.0)
  assert float(e) == pytest.approx((kp + ks) * e2, rel=1e-6)
  # m = 5 with 2 or 3 stored: the mean runs over the available differences only
  for pushed, expected in [(gs[2:4], (kp + ks) * e2),
                           (gs[2:5], kp * e3 + ks * (e2 + e3) / 2)]:
    h3, filled3 = _push(jnp.zeros((6, 2)), pushed)
    e = A.pid_error(h3, filled3, jax.random.PRNGKey(1), 5, kp, ks, z, 1.0)
    assert float(e) == pytest.approx(expected, rel=1e-6)


def test_pid_error_and_budget_robust_to_huge_and_nan_gradients():
  # noise with sigma ~ 1e20 (a nearly exhausted budget): squares overflow float32, the
  # scaled norm does not
  h, filled = _push(jnp.zeros((3, 2)), [[0.0, 0.0], [3e20, 4e20]])
  e = A.pid_error(h, filled, jax.random.PRNGKey(0), 3, 0.9, 0.1, 1.0, 1.0)
  assert float(e) == pytest.approx(5e20, rel=1e-5)
  assert float(A.round_budget(e, 1.0, 0.0, 10, 2)) == 0.0
  h, filled = _push(jnp.zeros((3, 2)), [[0.0, 0.0], [jnp.nan, 1.0]])
  for kp, ks in [(0.9, 0.1), (0.0, 0.1), (0.9, 0.0)]:
    e = A.pid_error(h, filled, jax.random.PRNGKey(0), 3, kp, ks, 1.0, 1.0)
    assert float(e) == math.inf
  for bad in (math.inf, math.nan):
    assert float(A.round_budget(bad, 1.0, 0.0, 10, 2)) == 0.0


def test_sample_history_ages_sorted_and_uniform():
  w, m, reps = 10, 5, 4000
  keys = jax.random.split(jax.random.PRNGKey(1), reps)
  ages, valid = jax.vmap(lambda k: A.sample_history_ages(k, 25, w, m))(keys)
  ages, valid = np.asarray(ages), np.asarray(valid)
  assert valid.all() and (ages[:, -1] == 0).all()
  assert (np.diff(ages, axis=1) < 0).all() and ages.max() <= w - 1
  freq = np.array([(ages[:, :-1] == a).any(axis=1).mean() for a in range(1, w)])
  np.testing.assert_allclose(freq, (m - 1) / (w - 1), atol=0.04)   # ~5 sigma
  # only 3 stored: both older points taken, the two empty slots masked first
  a3, v3 = A.sample_history_ages(jax.random.PRNGKey(2), 3, w, m)
  np.testing.assert_array_equal(np.asarray(v3), [False, False, True, True, True])
  np.testing.assert_array_equal(np.asarray(a3)[2:], [2, 1, 0])


# ---------------------------------------------------------------------------
# Round budget (eq. 12): budget safety and monotonicity (note 8 item 2).
# ---------------------------------------------------------------------------

@jax.jit
def _budgets(errors, eps_total):
  def body(consumed, xs):
    t, e = xs
    eps = A.round_budget(e, eps_total, consumed, errors.shape[0], t)
    return consumed + eps, eps
  ts = jnp.arange(1, errors.shape[0] + 1, dtype=jnp.int32)
  return jax.lax.scan(body, jnp.float32(0.0), (ts, errors))[1]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 6.0), min_size=T, max_size=T), st.floats(0.05, 50.0))
def test_round_budget_never_exceeds_total(errors, eps_total):
  eps = np.asarray(_budgets(jnp.asarray(errors, jnp.float32), eps_total), np.float64)
  assert (eps >= 0).all()
  assert eps.sum() <= eps_total * (1 + REL)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 6.0), min_size=T, max_size=T), st.floats(0.05, 50.0))
def test_round_budget_non_decreasing_when_error_non_increasing(errors, eps_total):
  e = np.sort(np.asarray(errors, np.float32))[::-1].copy()
  eps = np.asarray(_budgets(jnp.asarray(e), eps_total), np.float64)
  assert (np.diff(eps) >= -1e-5 * eps[1:]).all()


@pytest.mark.parametrize("e", [0.0, 0.3, 1.0, 4.0])
def test_round_budget_constant_error(e):
  eps = np.asarray(_budgets(jnp.full((T,), e, jnp.float32), 2.0), np.float64)
  assert (np.diff(eps) >= -1e-6 * eps[1:]).all()
  if e == 0.0:   # no error: the uniform schedule, the whole budget spent
    np.testing.assert_allclose(eps, 2.0 / T, rtol=1e-5)
  else:          # strictly growing, and some budget left unspent
    assert (np.diff(eps) > 0).all() and eps.sum() < 2.0


def test_round_budget_formula_and_range():
  assert float(A.round_budget(0.5, 3.0, 1.0, 10, 4)) == pytest.approx(
      math.exp(-0.5) * 2.0 / 7, rel=1e-6)
  assert float(A.round_budget(0.5, 3.0, 1.0, 10, 11)) == 0.0   # past T
  assert float(A.round_budget(0.5, 3.0, 1.0, 10, 0)) == 0.0
  assert float(A.round_budget(0.5, 3.0, 4.0, 10, 4)) == 0.0    # exhausted


# ---------------------------------------------------------------------------
# Angles, smoothing, Gompertz, split (eqs. 13-16; note 8 item 3).
# ---------------------------------------------------------------------------

def test_angles_are_the_aggregation_modules():
  """eqs. 13-14 are shared with BEDA: one implementation (tested in test_aggregation)."""
  from fedjax_dp.algorithms.lapa import aggregation
  assert A.deviation_angles is aggregation.deviation_angles
  assert A.smoothed_angles is aggregation.smoothed_angles
  th = np.asarray(A.deviation_angles(jnp.array([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]),
                                     jnp.array([1.0, 0.0])))
  np.testing.assert_allclose(th, [0.0, math.pi / 2, math.pi], atol=1e-3)


def test_gompertz_values_and_monotonicity():
  f = np.asarray(A.gompertz(jnp.array([0.0, 0.5, 1.0, 1.5]), 5.0))
  np.testing.assert_allclose(f, [0.0336, 0.394, 3.1606, 5.0], atol=1e-4)   # note 2.5
  np.testing.assert_allclose(f, [5 * (1 - math.exp(-math.exp(5 * (x - 1))))
                                 for x in (0.0, 0.5, 1.0, 1.5)], rtol=1e-5)
  grid = jnp.linspace(0.0, math.pi, 400)
  for alpha in (1.0, 5.0, 50.0):
    inc = np.asarray(A.gompertz(grid, alpha, "increasing"))
    dec = np.asarray(A.gompertz(grid, alpha, "fedadp"))
    assert np.isfinite(inc).all() and np.isfinite(dec).all()
    assert (np.diff(inc) >= 0).all() and (np.diff(dec) <= 0).all()
    assert inc[-1] > inc[0] and dec[0] > dec[-1]
    assert inc.min() >= 0 and inc.max() <= alpha * (1 + 1e-6)
  # the two maps are mirror images about theta = 1
  th = jnp.array([0.2, 0.7])
  np.testing.assert_allclose(np.asarray(A.gompertz(th, 5.0, "fedadp")),
                             np.asarray(A.gompertz(2.0 - th, 5.0)), rtol=1e-5)
  with pytest.raises(FedJaxDpError):
    A.gompertz(th, 5.0, "decreasing")


def test_split_budget_sum_and_mean():
  f = jnp.array([1.0, 3.0, 4.0, 100.0])
  sel = jnp.array(SELECTED)
  s = np.asarray(A.split_budget(0.8, f, sel, "sum"))
  m = np.asarray(A.split_budget(0.8, f, sel, "mean"))
  np.testing.assert_allclose(s, [0.1, 0.3, 0.4, 0.0], rtol=1e-6)
  assert s.sum() == pytest.approx(0.8, rel=1e-6)
  assert m[SELECTED].mean() == pytest.approx(0.8, rel=1e-6) and m[3] == 0.0
  np.testing.assert_allclose(m, 3 * s, rtol=1e-6)
  # all-zero contributions: equal split
  np.testing.assert_allclose(np.asarray(A.split_budget(0.9, jnp.zeros(4), sel, "sum")),
                             [0.3, 0.3, 0.3, 0.0], rtol=1e-6)
  assert not np.asarray(A.split_budget(0.9, f, jnp.zeros(4, bool), "mean")).any()
  with pytest.raises(FedJaxDpError):
    A.split_budget(0.9, f, sel, "max")


@pytest.mark.parametrize("gmap", ["increasing", "fedadp"])
def test_smaller_angle_smaller_budget(gmap):
  theta = jnp.array([0.2, 0.8, 1.4, 2.5])
  eps = np.asarray(A.split_budget(1.0, A.gompertz(theta, 5.0, gmap), jnp.ones(4, bool)))
  if gmap == "increasing":   # the paper's text: high contributors protected more
    assert (np.diff(eps) > 0).all()
  else:
    assert (np.diff(eps) < 0).all()


# ---------------------------------------------------------------------------
# step: LAPA, uniform, ARB-approx, none.
# ---------------------------------------------------------------------------

def test_lapa_step_matches_equations():
  config = A.AllocatorConfig("lapa", 2.0, T, error_scale=1.0, window=5)
  grads, rec = _heterogeneous_rounds()
  sel = jnp.array(SELECTED)
  s = A.init_state(config, N, D, sel)
  key = jax.random.PRNGKey(3)
  for t in (1, 2, 3):
    new = STEP(config, s, t, grads[t - 1], rec[t - 1], sel, key)
    consumed = float(s.consumed + s.epsilon_round)
    e = float(A.pid_error(new.history, new.filled, key, 5, 0.9, 0.1, 1.0, 1.0))
    assert float(new.error) == pytest.approx(e, rel=1e-6)
    expected = math.exp(-e) * (2.0 - consumed) / (T - t)
    assert float(new.epsilon_round) == pytest.approx(expected, rel=1e-5)
    theta = A.smoothed_angles(s.theta_smooth, A.deviation_angles(rec[t - 1],
                                                                 grads[t - 1]), t)
    theta = jnp.where(sel, theta, s.theta_smooth)
    split = A.split_budget(expected, A.gompertz(theta, 5.0), sel, "mean")
    floored = jnp.where(sel, jnp.maximum(split, 0.5 * expected), 0.0)  # min_share
    np.testing.assert_allclose(np.asarray(new.epsilon_devices), np.asarray(floored),
                               rtol=1e-5)
    bare = STEP(config._replace(min_share=0.0), s, t, grads[t - 1], rec[t - 1], sel, key)
    np.testing.assert_allclose(np.asarray(bare.epsilon_devices), np.asarray(split),
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(new.consumed_devices),
                               np.asarray(s.consumed_devices + s.epsilon_devices),
                               rtol=1e-6)
    s = new
  assert int(s.filled) == 3 and float(s.error) != 1.0
  # device 0 (aligned with the global gradient) gets the smallest budget
  eps = np.asarray(s.epsilon_devices)
  assert eps[0] < eps[1] < eps[2] and eps[3] == 0.0


@pytest.mark.parametrize("kind,split", [(k, s) for k in A.ALLOCATORS for s in A.SPLITS
                                        if not (k == "none" and s == "sum")])
def test_every_device_within_total_budget(kind, split):
  config = A.AllocatorConfig(kind, 2.0, T, split=split, error_scale=1.0,
                             min_share=0.5 if split == "mean" else 0.0)
  grads, rec = _heterogeneous_rounds(seed=1)
  sel = jnp.array(SELECTED)
  final, eps, eps_dev, err = TRAJECTORY(config, grads, rec, sel, jax.random.PRNGKey(0))
  eps, eps_dev = np.asarray(eps, np.float64), np.asarray(eps_dev, np.float64)
  per_device = eps_dev.sum(axis=0)
  assert (eps_dev >= 0).all() and (eps >= 0).all()
  assert (per_device <= 2.0 * (1 + REL)).all()
  np.testing.assert_allclose(np.asarray(final.consumed_devices), per_device, rtol=1e-5)
  assert eps.sum() <= 2.0 * (1 + REL)
  assert (eps_dev[:, ~SELECTED] == 0).all() and float(final.consumed_devices[3]) == 0.0
  assert not np.asarray(final.epsilon_devices).any()    # nothing after round T
  if kind == "none":
    assert not eps_dev.any()
  elif kind == "lapa" and split == "mean":
    # device 2 (angle pi/2, the largest f in S) would overspend: the clamp binds and
    # ends its releases before round T
    assert per_device.max() == pytest.approx(2.0, rel=1e-5)
    assert (eps_dev[-3:, SELECTED].min(axis=1) < eps_dev[-3:, SELECTED].max(axis=1)).all()
    assert (eps_dev[:, :3] == 0).any()
  elif kind == "lapa" and split == "sum":
    np.testing.assert_allclose(eps_dev.sum(axis=1), eps, rtol=1e-5)
  elif kind == "lapa":                                                # equal split
    np.testing.assert_allclose(eps_dev[:, SELECTED], np.repeat(eps[:, None], 3, 1),
                               rtol=1e-5)


def test_uniform_constant():
  config = A.AllocatorConfig("uniform", 3.0, T)
  grads, rec = _heterogeneous_rounds(seed=2)
  final, eps, eps_dev, _ = TRAJECTORY(config, grads, rec, jnp.array(SELECTED),
                                      jax.random.PRNGKey(0))
  np.testing.assert_allclose(np.asarray(eps), 3.0 / T, rtol=1e-5)   # float32 remainder
  np.testing.assert_allclose(np.asarray(eps_dev)[:, SELECTED], 3.0 / T, rtol=1e-5)
  assert float(final.consumed) == pytest.approx(3.0, rel=1e-5)


def test_arb_rule_up_and_down():
  config = A.AllocatorConfig("arb", 10.0, 100, arb_beta=0.1)
  sel = jnp.array(SELECTED)
  s = A.init_state(config, N, D, sel)
  rec = jnp.zeros((N, D))
  key = jax.random.PRNGKey(0)
  g = lambda norm: jnp.full((D,), norm / math.sqrt(D), jnp.float32)
  s = STEP(config, s, 1, g(5.0), rec, sel, key)                   # first step: keep
  assert float(s.epsilon_round) == pytest.approx(0.1, rel=1e-6)
  s = STEP(config, s, 2, g(4.0), rec, sel, key)                   # norm fell: up
  assert float(s.epsilon_round) == pytest.approx(0.11, rel=1e-5)
  s = STEP(config, s, 3, g(4.5), rec, sel, key)                   # norm rose: down
  assert float(s.epsilon_round) == pytest.approx(0.099, rel=1e-5)
  np.testing.assert_allclose(np.asarray(s.epsilon_devices), [0.099] * 3 + [0.0],
                             rtol=1e-5)
  assert float(s.prev_grad_norm) == pytest.approx(4.5, rel=1e-5)
  # capped by the remaining budget
  near_end = s._replace(consumed=jnp.float32(10.0 - 0.1 - 0.05),
                        epsilon_round=jnp.float32(0.1),
                        consumed_devices=jnp.zeros(N, jnp.float32))
  s = STEP(config, near_end, 4, g(1.0), rec, sel, key)
  assert float(s.epsilon_round) == pytest.approx(0.05, rel=1e-4)


def test_none_is_zero():
  config = A.AllocatorConfig("none", 3.0, T)
  s = A.init_state(config, N, D, SELECTED)
  s = STEP(config, s, 1, jnp.ones(D), jnp.ones((N, D)), jnp.array(SELECTED),
           jax.random.PRNGKey(0))
  assert float(s.epsilon_round) == 0.0 and not np.asarray(s.epsilon_devices).any()


def test_unselected_devices_get_zero_and_keep_their_angle():
  config = A.AllocatorConfig("lapa", 2.0, T)
  grads, rec = _heterogeneous_rounds(seed=3)
  s = A.init_state(config, N, D, np.ones(N, bool))
  sel = jnp.array([True, False, True, False])
  s = STEP(config, s, 1, grads[0], rec[0], sel, jax.random.PRNGKey(0))
  eps = np.asarray(s.epsilon_devices)
  assert eps[1] == 0.0 and eps[3] == 0.0 and eps[0] > 0 and eps[2] > 0
  np.testing.assert_array_equal(np.asarray(s.theta_smooth)[[1, 3]], [0.0, 0.0])
  # a selected device that did not upload (zero received gradient) keeps its angle but
  # is budgeted again
  before = np.asarray(s.theta_smooth)
  s = STEP(config, s, 2, grads[1], rec[1].at[0].set(0.0), jnp.ones(N, bool),
           jax.random.PRNGKey(1))
  after = np.asarray(s.theta_smooth)
  assert after[0] == before[0] and after[1] != before[1]
  assert (np.asarray(s.epsilon_devices) > 0).all()


def test_step_jits_once_under_scan_and_with_traced_round():
  traces = []

  def counted(config, state, t, g, rec, sel, key):
    traces.append(1)
    return A.step(config, state, t, g, rec, sel, key)

  config = A.AllocatorConfig("lapa", 2.0, T)
  grads, rec = _heterogeneous_rounds(seed=4)
  sel = jnp.array(SELECTED)
  jitted = jax.jit(counted, static_argnums=0)
  s = A.init_state(config, N, D, sel)
  for t in range(1, 6):
    s = jitted(config, s, jnp.int32(t), grads[t - 1], rec[t - 1], sel,
               jax.random.PRNGKey(t))
  assert len(traces) == 1 and int(s.filled) == 5

  traces.clear()

  @jax.jit
  def run(state, grads, rec, keys):
    def body(st, xs):
      t, g, r, k = xs
      return counted(config, st, t, g, r, sel, k), st.epsilon_round
    return jax.lax.scan(body, state, (jnp.arange(1, T + 1, dtype=jnp.int32), grads, rec,
                                      keys))

  s0 = A.init_state(config, N, D, sel)
  for seed in (0, 1):
    final, eps = run(s0, grads, rec, jax.random.split(jax.random.PRNGKey(seed), T))
  assert len(traces) == 1 and eps.shape == (T,) and int(final.filled) == T
  assert np.isfinite(np.asarray(eps)).all()
  assert float(final.consumed) <= 2.0 * (1 + REL)
