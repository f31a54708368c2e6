"""BLT matrix factorisation in DP-FTRL (`fedjax_dp.algorithms.dp_ftrl.blt`, ``--mechanism
blt``): the streamed noise against C^-1 Z computed densely here from the BLT's closed-form
coefficients; the min-separation sensitivity against a brute-force maximum over every
participation pattern; epsilon recomputed from metrics.jsonl alone; the audit's claim;
refusals."""

import itertools
import json
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.algorithms.dp_ftrl.algorithm import blt_noise, dp_ftrl
from fedjax_dp.algorithms.dp_ftrl.blt import (BltNoise, blt_run_event,
                                              blt_sensitivity_history,
                                              blt_sensitivity_squared)
from fedjax_dp.algorithms.dp_ftrl.noise import standard_normal_like
from fedjax_dp.algorithms.dp_ftrl.participation import CyclicSampler
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

LIKE = {"a": jnp.zeros((3,)), "b": jnp.zeros((2, 2))}
ROOT = jax.random.PRNGKey(11)
REL = dp_accounting.NeighboringRelation


def _dense_c(theta, omega, n):
  """C[:n, :n] from the definition: 1 on the diagonal, sum_j omega_j theta_j^(t-u-1)
  below it (a loop, independent of `BltNoise.coefs`)."""
  c = np.eye(n)
  for t in range(n):
    for u in range(t):
      c[t, u] = sum(w * d ** (t - u - 1) for d, w in zip(theta, omega))
  return c


def _scan(gen, rounds, stddev):
  def body(state, t):
    noise, state = gen.sample(state, jax.random.fold_in(ROOT, t), LIKE, stddev)
    return state, noise
  _, noises = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(rounds)))(gen.init(LIKE))
  return np.concatenate([np.asarray(l).reshape(rounds, -1)
                         for l in jax.tree_util.tree_leaves(noises)], axis=1)


def _draws(rounds):
  return np.stack([np.concatenate([np.ravel(np.asarray(l)) for l in jax.tree_util.tree_leaves(
      standard_normal_like(jax.random.fold_in(ROOT, t), LIKE))]) for t in range(rounds)])


@pytest.mark.parametrize("theta,omega", [((0.9, 0.5), (0.3, 0.2)), ((0.7,), (0.6,))])
def test_streamed_noise_is_stddev_c_inverse_z(theta, omega):
  """Rows of stddev C^-1 Z (9 rounds, 7 coordinates); C Z and C^-T Z differ."""
  gen, n = BltNoise(theta, omega), 9
  got = _scan(gen, n, 2.0)
  c, z = _dense_c(theta, omega, n), _draws(n)
  np.testing.assert_allclose(got, 2.0 * np.linalg.solve(c, z), atol=2e-5)
  assert np.abs(got - 2.0 * c @ z).max() > 0.5
  assert np.abs(got - 2.0 * np.linalg.solve(c.T, z)).max() > 0.5
  np.testing.assert_allclose(gen.matrix(n), c, atol=1e-12)


def test_matrix_matches_jax_privacys_materialisation():
  from jax_privacy.matrix_factorization import buffered_toeplitz as bt
  gen = BltNoise((0.95, 0.6, 0.1), (0.2, 0.15, 0.05))
  with jax.enable_x64():
    ref = np.asarray(bt.BufferedToeplitz.build(gen.buf_decay, gen.output_scale)
                     .materialize(12))
  np.testing.assert_allclose(gen.matrix(12), ref, atol=1e-12)


def test_state_is_nbuf_model_copies_and_zero_buffers_is_independent_noise():
  gen = BltNoise((0.9, 0.5, 0.2), (0.3, 0.2, 0.1))
  state = gen.init(LIKE)
  assert jax.tree_util.tree_map(jnp.shape, state) == {
      "buffers": {"a": (3, 3), "b": (3, 2, 2)}}
  assert all(l.dtype == jnp.float32 for l in jax.tree_util.tree_leaves(state))
  np.testing.assert_allclose(_scan(BltNoise((), ()), 4, 1.5), 1.5 * _draws(4), atol=1e-6)


def _worst(c, n, cycle):
  """(max over all patterns with gaps >= cycle, max over the cyclic groups) of
  1_P^T C^T C 1_P, by enumeration."""
  gram = c.T @ c
  best_any = 0.0
  for size in range(1, n + 1):
    for p in itertools.combinations(range(n), size):
      if all(b - a >= cycle for a, b in zip(p, p[1:])):
        best_any = max(best_any, float(gram[np.ix_(p, p)].sum()))
  best_cyc = max(float(gram[np.ix_(range(g, n, cycle), range(g, n, cycle))].sum())
                 for g in range(cycle))
  return best_any, best_cyc


@pytest.mark.parametrize("n,cycle", [(12, 3), (10, 4)])
def test_sensitivity_is_the_brute_force_worst_pattern(n, cycle):
  """jax-privacy's optimised BLT for (n, R): the min-sep sensitivity equals the maximum
  over every pattern with gaps >= R (and over the cyclic groups), for every prefix."""
  gen = blt_noise(n, cycle)
  coefs = gen.coefs(n)
  assert np.all(coefs >= 0) and np.all(np.diff(coefs) <= 0)  # the theorem's assumptions
  hist = blt_sensitivity_history(gen, cycle, n)
  for t in range(1, n + 1):
    best_any, best_cyc = _worst(_dense_c(gen.buf_decay, gen.output_scale, t), t, cycle)
    assert hist[t - 1] == pytest.approx(best_any, rel=1e-9)
    assert best_cyc == pytest.approx(best_any, rel=1e-9)  # group 0 is the worst pattern
  assert blt_sensitivity_squared(gen, cycle, n) == pytest.approx(hist[-1], rel=1e-12)
  assert hist[-1] > math.ceil(n / cycle)  # overlapping columns: more than k unit columns


def test_single_participation_is_jax_privacys_closed_form():
  from jax_privacy.matrix_factorization import buffered_toeplitz as bt
  gen = BltNoise((0.9, 0.5), (0.3, 0.2))
  with jax.enable_x64():
    ref = float(bt.sensitivity_squared(bt.BufferedToeplitz.build(gen.buf_decay,
                                                                 gen.output_scale), 20))
  assert blt_sensitivity_squared(gen, 20, 20) == pytest.approx(ref, rel=1e-9)


def test_increasing_or_negative_coefficients_are_refused():
  with pytest.raises(FedJaxDpError, match="non-increasing") as err:
    blt_sensitivity_squared(BltNoise((0.9,), (-0.3,)), 2, 6)
  assert err.value.option == "buf_decay"
  with pytest.raises(FedJaxDpError, match="non-increasing"):
    blt_sensitivity_squared(BltNoise((0.9,), (1.5,)), 2, 6)  # c_1 = 1.5 > c_0 = 1
  with pytest.raises(FedJaxDpError, match=r"\[0, 1\]"):
    BltNoise((1.2,), (0.1,))
  with pytest.raises(FedJaxDpError, match="same length"):
    BltNoise((0.5, 0.2), (0.1,))


def test_run_event_is_one_gaussian_and_refuses_amplification():
  gen = BltNoise((0.9, 0.5), (0.3, 0.2))
  samp = CyclicSampler.create(12, 3, 1.0, seed=0)
  best, _ = _worst(_dense_c(gen.buf_decay, gen.output_scale, 8), 8, 3)
  ev = blt_run_event(1.3, 8, gen, samp)
  assert isinstance(ev, dp_accounting.GaussianDpEvent)
  assert ev.noise_multiplier == pytest.approx(1.3 / math.sqrt(best), rel=1e-9)
  assert isinstance(blt_run_event(1.3, 0, gen, samp), dp_accounting.NoOpDpEvent)
  with pytest.raises(FedJaxDpError, match="amplification") as err:
    blt_run_event(1.3, 8, gen, CyclicSampler.create(12, 3, 0.5, seed=0))
  assert err.value.option == "group_rate"


@pytest.mark.parametrize("kwargs,option", [
    (dict(group_rate=0.5, rounds=8), "group_rate"),
    (dict(rounds=None), "rounds"),
    (dict(rounds=8, bands=2), "bands"),
    (dict(rounds=8, buffers=16), "buffers"),
])
def test_dp_ftrl_blt_bad_arguments(kwargs, option):
  data = type("D", (), dict(num_clients=12, max_examples=1, counts=np.ones(12)))()
  model = create_model("linear", (2,), 2)
  with pytest.raises(FedJaxDpError) as err:
    dp_ftrl(model, data, mechanism="blt", cycle_length=3, **kwargs)
  assert err.value.option == option


def test_buffers_refused_for_other_mechanisms():
  data = type("D", (), dict(num_clients=12, max_examples=1, counts=np.ones(12)))()
  with pytest.raises(FedJaxDpError) as err:
    dp_ftrl(create_model("linear", (2,), 2), data, mechanism="banded", rounds=8,
            cycle_length=3, buffers=3)
  assert err.value.option == "buffers"


def test_run_learns_and_epsilon_from_metrics_alone(tmp_path):
  """A CLI run (10 rounds, R = 4, calibrated to epsilon 20): C rebuilt here from the
  recorded BLT parameters, the worst group's ||C 1_P||^2 counted here, dp_accounting fed
  with it; the noise std recorded is z S."""
  out = tmp_path / "blt"
  rc = cli.main(["run", "--algorithm", "dp_ftrl", "--mechanism", "blt", "--dataset",
                 "synthetic", "--num-clients", "20", "--model", "mlp", "--hidden", "8",
                 "--rounds", "10", "--eval-every", "5", "--delta", "1e-3", "--cycle-length",
                 "4", "--server-lr", "0.5", "--clip-norm", "1.0", "--no-progress",
                 "--target-epsilon", "20", "--out", str(out)])
  assert rc == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  s = json.loads((out / "summary.json").read_text())
  assert s["mechanism"] == "blt"
  assert s["final_test_accuracy"] > s["majority_class_accuracy"] + 0.15, s
  z = rows[0]["noise_stddev"] / rows[0]["sensitivity"]
  cyc = rows[0]["ftrl_cycle_length"]
  assert all(r["ftrl_group_rate"] == 1.0 and r["ftrl_mechanism"] == "blt" for r in rows)
  theta, omega = rows[0]["ftrl_blt_buf_decay"], rows[0]["ftrl_blt_output_scale"]
  for t, r in enumerate(rows, start=1):
    c = _dense_c(theta, omega, t)
    gram = c.T @ c
    sens2 = max(float(gram[g::cyc, g::cyc].sum()) for g in range(cyc))
    assert r["ftrl_sensitivity_squared"] == pytest.approx(sens2, rel=1e-9)
  ev = dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))
  eps_rdp = dp_rdp.RdpAccountant(neighboring_relation=REL.ADD_OR_REMOVE_ONE).compose(
      ev).get_epsilon(rows[0]["delta"])
  eps_pld = dp_pld.PLDAccountant(REL.ADD_OR_REMOVE_ONE, 1e-4).compose(ev).get_epsilon(
      rows[0]["delta"])
  assert rows[-1]["epsilon"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["epsilon_pld"] == pytest.approx(eps_pld, rel=1e-6)
  assert s["epsilon"] == pytest.approx(20.0, rel=1e-3) and s["epsilon"] <= 20.0 + 1e-9
  assert s["sensitivity_squared"] == pytest.approx(sens2, rel=1e-9)
  assert s["participation"]["blt_buffers"] == len(theta)


def test_audit_claim_is_one_gaussian_of_the_overlapping_columns(audit_report):
  """The BLT target: the canary in rounds 0 and 2 of 4 (R = 2); the claim is the Gaussian
  of ||C (e_0 + e_2)||^2 (computed here from the BLT's parameters), with z chosen so that
  its effective noise multiplier is the banded target's 1.5 / sqrt(2); the audit proves a
  good part of it (the half-noise break is caught in tests/auditing/test_targets.py)."""
  from fedjax_dp.algorithms import audit_targets
  from fedjax_dp.algorithms.dp_ftrl import audit
  gen = blt_noise(4, 2)
  c = _dense_c(gen.buf_decay, gen.output_scale, 4)
  sens2 = float(np.sum((c[:, 0] + c[:, 2]) ** 2))
  z = audit.PARAMS["dp_ftrl/blt"]["z"]
  assert z / math.sqrt(sens2) == pytest.approx(1.5 / math.sqrt(2), rel=0.02)
  rep = audit_report("dp_ftrl/blt", "none")
  expected = dp_pld.PLDAccountant(REL.ADD_OR_REMOVE_ONE, 1e-4).compose(
      dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))).get_epsilon(audit_targets.DELTA)
  assert rep.claimed_epsilon == pytest.approx(expected, rel=1e-6)
  assert 0.5 * rep.claimed_epsilon < rep.lower_bound.epsilon_lower_bound < rep.claimed_epsilon


def test_checkpointed_buffers_resume_to_the_straight_run_and_more_rounds_are_refused(tmp_path):
  """8 rounds checkpointed every 4; the run "dies" after round 4's checkpoint: the resumed
  run restores the BLT's buffers (rounds 5 to 8 read them) and ends with the straight
  run's model. A resume to more rounds would re-optimise C: refused."""
  import shutil
  from fedjax_dp.runs import RunConfig, run
  base = dict(algorithm="dp_ftrl", mechanism="blt", dataset="synthetic", num_clients=20,
              model="linear", rounds=8, eval_every=4, cycle_length=4, noise_multiplier=1.0,
              seed=3)
  straight = run(RunConfig.from_dict(dict(base, out=str(tmp_path / "a"))), progress=False)
  noise = straight.state.mechanism["noise"]["buffers"]
  assert all(np.shape(l)[0] >= 1 for l in jax.tree_util.tree_leaves(noise))  # nbuf >= 1
  assert any(np.abs(np.asarray(l)).max() > 0 for l in jax.tree_util.tree_leaves(noise))
  shutil.copytree(tmp_path / "a", tmp_path / "b")
  shutil.rmtree(tmp_path / "b" / "checkpoints" / "8")
  resumed = run(RunConfig(resume=str(tmp_path / "b")), progress=False)
  for x, y in zip(jax.tree_util.tree_leaves((straight.state.params, noise)),
                  jax.tree_util.tree_leaves((resumed.state.params,
                                             resumed.state.mechanism["noise"]["buffers"]))):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert resumed.summary["epsilon_rdp"] == straight.summary["epsilon_rdp"]
  with pytest.raises(FedJaxDpError, match="blt_strategy_rounds change from 8 to 10"):
    run(RunConfig(resume=str(tmp_path / "a"), resume_rounds=10), progress=False)
