"""Tests for the reconstruction variants of paper 001's LAPA used by the sensitivity
study (experiments/lapa/sensitivity.py): eq. 12's round budget (``exp``, the default;
``normalised``, which spends the whole budget; ``flat``), eq. 16's ``equal`` split, and
eq. 20's ground cost (``index`` against the numbering-invariant ``discrete`` one). Each
test uses inputs on which the variants differ, and checks the property that tells them
apart."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import aggregation
from fedjax_dp.algorithms.lapa import allocators as A
from fedjax_dp.algorithms.lapa.privacy import label_statistics

N, D, T = 4, 16, 30
SELECTED = jnp.array([True, True, True, False])


def _noise_rounds(seed=0, rounds=T):
  """Noise-dominated rounds: independent Gaussian global gradients (consecutive ones
  nearly orthogonal, as under heavy DP noise) and received gradients at different
  angles to them."""
  rng = np.random.default_rng(seed)
  g = rng.normal(size=(rounds, D))
  rec = np.stack([g, g + rng.normal(size=(rounds, D)), rng.normal(size=(rounds, D)), -g],
                 axis=1)
  return jnp.asarray(g, jnp.float32), jnp.asarray(rec, jnp.float32)


def _run(config, seed=0):
  grads, rec = _noise_rounds(seed)
  state = A.init_state(config, N, D, SELECTED)
  step = jax.jit(A.step, static_argnums=0)
  eps, dev = [], []
  for t in range(T):
    eps.append(float(state.epsilon_round))
    dev.append(np.asarray(state.epsilon_devices))
    # unit-norm gradients, as the round's "direction" scaling passes them
    g = grads[t] / jnp.linalg.norm(grads[t])
    state = step(config, state, t + 1, g, rec[t] / jnp.linalg.norm(grads[t]), SELECTED,
                 jax.random.PRNGKey(t))
  return np.array(eps), np.array(dev), state


def test_round_budget_modes_formula():
  # e = 1, remaining 6 over 3 rounds: exp gives e^-1 * 2; flat 2; normalised with a
  # running mean of exp(-e) equal to e^-2 gives e^-1 / e^-2 * 2 = 2e, capped at 6
  kw = dict(epsilon_total=10.0, consumed=4.0, rounds=5, t=3)
  assert float(A.round_budget(1.0, **kw)) == pytest.approx(2 * math.exp(-1), rel=1e-6)
  assert float(A.round_budget(1.0, mode="flat", **kw)) == pytest.approx(2.0, rel=1e-6)
  assert float(A.round_budget(1.0, mode="normalised", multiplier_mean=math.exp(-2),
                              **kw)) == pytest.approx(2 * math.e, rel=1e-6)
  assert float(A.round_budget(1.0, mode="normalised", multiplier_mean=0.01,
                              **kw)) == pytest.approx(6.0, rel=1e-6)   # the cap
  with pytest.raises(Exception):
    A.round_budget(1.0, mode="linear", **kw)


def test_normalised_spends_the_budget_exp_does_not():
  """Under noise-dominated gradients e ~ sqrt 2 (K_p + K_s): the note's eq. 12 leaves
  a large part of eps_T unspent; the normalised variant spends it (the last round's
  factor aside), and both keep sum eps[t] <= eps_T."""
  base = A.AllocatorConfig("lapa", 6.0, T, error_scale=1.0, split="equal")
  eps_exp, _, s_exp = _run(base)
  eps_norm, _, s_norm = _run(base._replace(budget="normalised"))
  eps_flat, dev_flat, s_flat = _run(base._replace(budget="flat"))
  assert eps_exp.sum() <= 6.0 * (1 + 1e-6) and eps_norm.sum() <= 6.0 * (1 + 1e-6)
  assert eps_exp.sum() < 0.8 * 6.0                      # ~30% or more left unspent
  assert eps_norm.sum() > 0.95 * 6.0
  np.testing.assert_allclose(eps_flat.sum(), 6.0, rtol=1e-5)
  # round 1: exp spends exp(-e_0) of the even share, the other two the even share
  assert eps_exp[0] == pytest.approx(math.exp(-1) * 6.0 / T, rel=1e-6)
  assert eps_norm[0] == pytest.approx(6.0 / T, rel=1e-6)
  # flat with the equal split is uniform DP: eps_T / T to every selected device
  np.testing.assert_allclose(dev_flat[:, :3], 6.0 / T, rtol=1e-5)
  assert not dev_flat[:, 3].any()


def test_equal_split_ignores_the_angles_mean_split_does_not():
  base = A.AllocatorConfig("lapa", 6.0, T, error_scale=1.0, min_share=0.0)
  _, dev_mean, _ = _run(base)
  eps_eq, dev_eq, _ = _run(base._replace(split="equal"))
  np.testing.assert_allclose(dev_eq[:, :3], np.repeat(eps_eq[:, None], 3, 1), rtol=1e-5)
  spread = dev_mean[2:, :3].max(axis=1) - dev_mean[2:, :3].min(axis=1)
  assert (spread > 1e-3 * dev_mean[2:, :3].max(axis=1)).all()


def test_split_modes_direct():
  f = jnp.array([1.0, 3.0, 0.0, 5.0])
  sel = jnp.array([True, True, True, False])
  np.testing.assert_allclose(A.split_budget(2.0, f, sel, "equal"), [2, 2, 2, 0])
  np.testing.assert_allclose(A.split_budget(2.0, f, sel, "mean"), [1.5, 4.5, 0, 0])
  np.testing.assert_allclose(A.split_budget(2.0, f, sel, "sum"), [0.5, 1.5, 0, 0])


def _devices(rng, classes_per_device, counts):
  """Label histograms [N, K] of devices holding the given classes in equal shares."""
  hist = np.zeros((len(classes_per_device), 10))
  for i, (cls, n) in enumerate(zip(classes_per_device, counts)):
    hist[i, list(cls)] = n / len(cls)
  return hist


@pytest.mark.parametrize("cost", aggregation.GROUND_COSTS)
def test_ground_cost_and_label_permutation(cost):
  """The discrete ground cost gives the same aggregation weights whatever the label
  numbering; the index cost does not (a {0, 1} device is 'farther' than a {4, 5} one)."""
  rng = np.random.default_rng(0)
  classes = [tuple(range(10)), (0, 1), (4, 5), (8, 9), tuple(range(10))]
  counts = np.array([500.0, 300.0, 300.0, 400.0, 200.0])
  hist = _devices(rng, classes, counts)
  sel = jnp.ones(5, bool)
  _, d0, w0 = label_statistics(jnp.asarray(hist), jnp.asarray(counts), sel, cost)
  perm = np.array([4, 7, 0, 9, 1, 5, 2, 8, 3, 6])     # label k becomes perm[k]
  permuted = np.zeros_like(hist)
  permuted[:, perm] = hist
  _, d1, w1 = label_statistics(jnp.asarray(permuted), jnp.asarray(counts), sel, cost)
  if cost == "discrete":
    np.testing.assert_allclose(np.asarray(w1), np.asarray(w0), rtol=1e-6)
    np.testing.assert_allclose(np.sort(np.asarray(d1)), np.sort(np.asarray(d0)),
                               rtol=1e-6)
    # total variation: 0.5 sum |p - q| in [0, 1]
    p = hist / counts[:, None]
    g = hist.sum(0) / counts.sum()
    np.testing.assert_allclose(np.asarray(d0), 0.5 * np.abs(p - g).sum(1), rtol=1e-5)
  else:
    assert np.abs(np.asarray(w1) - np.asarray(w0)).max() > 1e-2
    assert float(d0[1]) > float(d0[2]) + 0.5           # {0,1} farther than {4,5}


def test_label_distance_rejects_unknown_cost():
  with pytest.raises(Exception):
    aggregation.label_distance(np.ones(3) / 3, np.ones(3) / 3, "euclid")
