"""DDPG power optimisation of paper 001 (LAPA, Sec. IV-C, eqs. 29-36): replay buffer,
soft updates, the jitted update step, actions within [0, P_max], a short training run
on a convex toy objective, determinism, and the random/grid baselines."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import bound, ddpg
from fedjax_dp.validation import FedJaxDpError

TARGET = np.array([0.2, 0.5, 0.8])
P_MAX = 1.0


def _toy_objective(p):
  """Convex, optimum 0.01 at p = TARGET (inside the box)."""
  return jnp.sum((p - jnp.asarray(TARGET, jnp.float32)) ** 2, axis=-1) + 0.01


def _no_switch(p):
  return jnp.zeros(p.shape[:-1], jnp.int32)


TOY_CONFIG = ddpg.DdpgConfig(hidden=(64, 64), actor_lr=1e-3, critic_lr=3e-3, tau=0.05,
                             buffer_size=2000, batch_size=32, explore_std=0.2,
                             episodes=20, steps_per_episode=50)


@pytest.fixture(scope="module")
def toy_run():
  return ddpg.train_ddpg(_toy_objective, _no_switch, 3, P_MAX, TOY_CONFIG)


# ---------------------------------------------------------------------------------------
# Building blocks.


def test_config_defaults_and_validation():
  cfg = ddpg.DdpgConfig()
  assert cfg.hidden == (256, 256) and cfg.gamma == 0.9 and cfg.tau == 0.005
  assert cfg.buffer_size == 100_000 and cfg.batch_size == 64
  assert cfg.episodes == 200 and cfg.steps_per_episode == 50
  assert cfg.warmup_transitions == 64
  assert ddpg.DdpgConfig(hidden=[8]).hidden == (8,)
  for bad, option in [(dict(gamma=1.0), "gamma"), (dict(tau=0.0), "tau"),
                      (dict(tau=1.5), "tau"), (dict(batch_size=0), "batch_size"),
                      (dict(buffer_size=10, batch_size=64), "buffer_size"),
                      (dict(hidden=()), "hidden"), (dict(hidden=(8, 0)), "hidden"),
                      (dict(actor_lr=-1.0), "actor_lr"), (dict(explore_std=-0.1),
                                                         "explore_std"),
                      (dict(warmup=0), "warmup"), (dict(reward="sq"), "reward"),
                      (dict(episodes=0), "episodes")]:
    with pytest.raises(FedJaxDpError) as err:
      ddpg.DdpgConfig(**bad)
    assert err.value.option == option


def test_soft_update_math():
  target = {"w": jnp.array([1.0, 2.0]), "b": jnp.array(3.0)}
  online = {"w": jnp.array([5.0, -2.0]), "b": jnp.array(-1.0)}
  copied = ddpg.soft_update(target, online, 1.0)
  kept = ddpg.soft_update(target, online, 0.0)
  mixed = ddpg.soft_update(target, online, 0.25)
  for k in target:
    np.testing.assert_allclose(copied[k], online[k])
    np.testing.assert_allclose(kept[k], target[k])
    np.testing.assert_allclose(mixed[k], 0.25 * online[k] + 0.75 * target[k], rtol=1e-6)


def test_buffer_wraps_around_and_samples_valid_slots():
  buf = ddpg.buffer_init(3, 4, 2)
  for k in range(5):
    buf = ddpg.buffer_add(buf, jnp.full((4,), k, jnp.float32), jnp.full((2,), k, jnp.float32),
                          float(k), jnp.full((4,), k + 0.5, jnp.float32))
  assert int(buf.position) == 2 and int(buf.size) == 3
  # Slots 0, 1 were overwritten by transitions 3, 4; slot 2 still holds transition 2.
  np.testing.assert_array_equal(np.asarray(buf.rewards), [3.0, 4.0, 2.0])
  np.testing.assert_array_equal(np.asarray(buf.states[:, 0]), [3.0, 4.0, 2.0])
  np.testing.assert_array_equal(np.asarray(buf.next_states[:, 0]), [3.5, 4.5, 2.5])
  half = ddpg.buffer_init(5, 4, 2)
  for k in range(2):
    half = ddpg.buffer_add(half, jnp.zeros(4), jnp.zeros(2), float(k + 1), jnp.zeros(4))
  batch = ddpg.buffer_sample(half, jax.random.PRNGKey(0), 200)
  assert batch.states.shape == (200, 4) and batch.actions.shape == (200, 2)
  assert set(np.asarray(batch.rewards).tolist()) == {1.0, 2.0}   # never an empty slot


def _random_batch(key, n, size, p_max):
  ks = jax.random.split(key, 4)
  return ddpg.Transition(jax.random.uniform(ks[0], (size, n + 2)),
                         jax.random.uniform(ks[1], (size, n), maxval=p_max),
                         -jax.random.uniform(ks[2], (size,)),
                         jax.random.uniform(ks[3], (size, n + 2)))


def test_update_step_shapes_losses_and_targets():
  cfg = ddpg.DdpgConfig(hidden=(16, 16), batch_size=8, tau=0.1, gamma=0.0)
  agent = ddpg.DdpgAgent(4, 2.0, cfg)
  state = agent.init(jax.random.PRNGKey(0))
  batch = _random_batch(jax.random.PRNGKey(1), 4, 8, 2.0)
  new, metrics = ddpg.update_step(agent, state, batch)
  assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(state)
  for old_leaf, new_leaf in zip(jax.tree_util.tree_leaves(state),
                                jax.tree_util.tree_leaves(new)):
    assert old_leaf.shape == new_leaf.shape
  assert set(metrics) == {"critic_loss", "actor_loss", "q_mean"}
  assert all(np.isfinite(float(v)) for v in metrics.values())
  # Eq. 36: target' = tau * online' + (1 - tau) * target.
  for t_old, on_new, t_new in zip(jax.tree_util.tree_leaves(state.target_critic),
                                  jax.tree_util.tree_leaves(new.critic),
                                  jax.tree_util.tree_leaves(new.target_critic)):
    np.testing.assert_allclose(t_new, 0.1 * on_new + 0.9 * t_old, rtol=1e-5, atol=1e-7)
  # Eq. 35: the actor step ascends Q(s, mu(s)) under the (just updated) critic.
  q_old = agent.critic.apply(new.critic, batch.states,
                             agent.actor.apply(state.actor, batch.states))
  q_new = agent.critic.apply(new.critic, batch.states,
                             agent.actor.apply(new.actor, batch.states))
  assert float(jnp.mean(q_new)) > float(jnp.mean(q_old))
  # Eq. 34 with gamma = 0 regresses Q(s, a) on r: repeated steps shrink the loss.
  first = metrics
  for _ in range(60):
    new, metrics = ddpg.update_step(agent, new, batch)
  assert float(metrics["critic_loss"]) < 0.2 * float(first["critic_loss"])


def test_actor_actions_within_box():
  cfg = ddpg.DdpgConfig(hidden=(8,))
  agent = ddpg.DdpgAgent(5, 0.3, cfg)
  state = agent.init(jax.random.PRNGKey(2))
  s = 100.0 * jax.random.normal(jax.random.PRNGKey(3), (500, 7))
  a = np.asarray(agent.actor.apply(state.actor, s))
  assert a.shape == (500, 5)
  assert np.all(a >= 0.0) and np.all(a <= 0.3)


# ---------------------------------------------------------------------------------------
# Training and baselines.


def test_short_training_finds_the_toy_optimum(toy_run):
  """Optimum Phi* = 0.01 at p = (0.2, 0.5, 0.8); the best common power only reaches
  0.19 (at p = 0.5 * 1)."""
  _, grid_phi = ddpg.uniform_grid(_toy_objective, 3, P_MAX, 50)
  assert grid_phi == pytest.approx(0.19, rel=1e-5)
  assert toy_run.best_phi <= 0.01 + 0.01                     # within 0.01 of optimum
  assert toy_run.best_phi <= grid_phi
  np.testing.assert_allclose(toy_run.best_powers, TARGET, atol=0.1)
  # The learnt policy itself (not only the explored actions) beats the grid.
  assert toy_run.final_phi < grid_phi
  assert toy_run.final_phi == pytest.approx(float(_toy_objective(
      jnp.asarray(toy_run.final_powers, jnp.float32))), rel=1e-5)
  assert toy_run.num_updates == 20 * 50 - 32 + 1             # from the warm-up on
  assert toy_run.episode_rewards.shape == (20,)
  assert toy_run.episode_rewards[-5:].mean() > toy_run.episode_rewards[:2].mean()
  assert toy_run.phi_ref == pytest.approx(0.19, rel=1e-5)


def _bound_objective():
  n, t = 5, 40
  sigma_art = np.linspace(1.0, 1.8, n)[None, :] * 0.98 ** np.arange(t)[:, None]
  return bound.make_objective(sigma_art=sigma_art, gains=np.linspace(0.8, 1.2, n),
                              noise_power=1.0, kappa=0.1, rho=np.full(n, 1.0 / n),
                              selected=np.ones(n, bool), eta=1.0, mu=0.2, lipschitz=1.0,
                              b=1.0, dim=10, initial_gap=2.3)


def test_deterministic_given_the_seed_and_projected_exploration():
  """Two runs with one seed agree exactly (the second reuses the first's compilation),
  another seed differs; with a huge exploration std every evaluated action still lies
  in [0, P_max] (eq. 32's projection), and the bound of eq. (24) plugs in directly."""
  objective, switch = _bound_objective()
  seen = []

  def recording_objective(p):
    jax.debug.callback(lambda x: seen.append(np.asarray(x)), p)
    return objective(p)

  p_max = 0.05
  cfg = ddpg.DdpgConfig(hidden=(16, 16), episodes=3, steps_per_episode=10, batch_size=8,
                        buffer_size=100, explore_std=2.0, explore_std_final=1.0, seed=3)
  r1 = ddpg.train_ddpg(recording_objective, switch, 5, p_max, cfg)
  acts = np.stack([x for x in seen if x.shape == (5,)])
  assert acts.shape[0] == 30 + 2              # 30 steps, Phi_ref, final policy
  assert np.all(acts >= 0.0) and np.all(acts <= p_max)
  assert np.any(acts == 0.0) and np.any(acts == np.float32(p_max))  # projection active
  r2 = ddpg.train_ddpg(recording_objective, switch, 5, p_max, cfg)
  np.testing.assert_array_equal(r1.episode_rewards, r2.episode_rewards)
  np.testing.assert_array_equal(r1.best_powers, r2.best_powers)
  np.testing.assert_array_equal(r1.final_powers, r2.final_powers)
  assert r1.best_phi == r2.best_phi and r1.num_updates == r2.num_updates == 23
  assert r1.switch_scale == float(switch(jnp.full((5,), p_max)))
  assert np.all(np.isfinite(r1.episode_rewards))
  assert np.all((r1.best_powers >= 0) & (r1.best_powers <= p_max))
  assert r1.best_phi == pytest.approx(float(objective(jnp.asarray(r1.best_powers,
                                                                  jnp.float32))), rel=1e-5)
  r3 = ddpg.train_ddpg(recording_objective, switch, 5, p_max,
                       ddpg.DdpgConfig(**{**cfg.__dict__, "seed": 4}))
  assert not np.array_equal(r1.episode_rewards, r3.episode_rewards)


def test_baselines():
  p, phi = ddpg.uniform_grid(_toy_objective, 3, P_MAX, 10)
  np.testing.assert_allclose(p, 0.5)
  assert phi == pytest.approx(0.19, rel=1e-5)
  p, phi = ddpg.uniform_grid(_toy_objective, 3, 2.0, 4)    # levels 0.5, 1, 1.5, 2
  np.testing.assert_allclose(p, 0.5)
  p, phi = ddpg.random_search(_toy_objective, 3, P_MAX, 5000, jax.random.PRNGKey(0))
  assert p.shape == (3,) and np.all((p >= 0) & (p <= P_MAX))
  assert phi == pytest.approx(float(_toy_objective(jnp.asarray(p, jnp.float32))), rel=1e-5)
  assert phi < 0.01 + 0.005
  # NaN objective values never win.
  nan_obj = lambda q: jnp.where(q[..., 0] < 0.5, jnp.nan, _toy_objective(q))
  p, phi = ddpg.random_search(nan_obj, 3, P_MAX, 500, jax.random.PRNGKey(1))
  assert p[0] >= 0.5 and np.isfinite(phi)
  with pytest.raises(FedJaxDpError) as err:
    ddpg.uniform_grid(_toy_objective, 3, P_MAX, 0)
  assert err.value.option == "points"


def test_bad_reference_objective_is_refused():
  with pytest.raises(FedJaxDpError) as err:
    ddpg.train_ddpg(lambda p: jnp.sum(p, -1) * jnp.inf, _no_switch, 3, P_MAX,
                    ddpg.DdpgConfig(hidden=(4,), episodes=1, steps_per_episode=1,
                                    batch_size=1, buffer_size=1))
  assert err.value.option == "objective_fn"
  with pytest.raises(FedJaxDpError) as err:
    ddpg.train_ddpg(_toy_objective, _no_switch, 3, -1.0)
  assert err.value.option == "p_max"
