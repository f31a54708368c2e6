"""DDPG transmit-power optimisation of LAPA (Sun et al., arXiv 2505.19823, Sec. IV-C,
eqs. 29-36) as Algorithm 3, our numbered reconstruction of the paper's description:

  1   initialise the actor, the critic, their targets (equal to them), a replay buffer;
  2   for each episode:
  3     start from the powers p = P_max / 2;
  4     for each step:
  5       act: a = clip(mu(s) + exploration noise, 0, P_max) (eqs. 30, 32);
  6       evaluate T_th(a) (eq. 23) and Phi(a) (eq. 24);
  7       reward r = -Phi(a) (eq. 31) and the next state (eq. 29);
  8       store the transition in the replay buffer;
  9       sample a minibatch: critic step (eqs. 33-34), actor step (eq. 35);
  10      soft-update the targets (eq. 36);

with random-search and uniform-grid baselines ([D]).

The environment is an analytic surrogate ([D]): an objective
``objective_fn(powers [..., N]) -> Phi [...]`` (the bound of Theorem 1, eq. 24, built by
`fedjax_dp.algorithms.lapa.bound.make_objective` from a recorded artificial-noise
schedule) and ``switch_fn(powers [..., N]) -> T_th [...]`` (eq. 23). Both must be pure
jnp so that a whole episode (actions, environment, replay buffer, updates) runs inside
one ``jax.lax.scan``.

MDP (Sec. IV-B/C, [R+] with [D] normalisation):
  * state (eq. 29): ``s = [p_prev / P_max (N), T_th / T, Phi / Phi_ref]``, dimension
    N + 2; after action a: ``s' = [a / P_max, T_th(a) / T, Phi(a) / Phi_ref]``;
  * action (eq. 30): powers ``a = mu(s) in [0, P_max]^N`` (actor output sigmoid * P_max);
  * exploration (eq. 32): ``a = clip(mu(s) + N(0, (std P_max)^2 I), 0, P_max)`` with std
    decaying linearly from ``explore_std`` to ``explore_std_final`` over training;
  * reward (eq. 31): ``r = -Phi(a) / Phi_ref`` with ``Phi_ref = Phi(P_max / 2 * 1)``,
    capped at ``-reward_clip`` (Phi = inf at zero power, [D]); option
    ``reward="log"``: ``r = -log(Phi(a) / Phi_ref)`` (our alternative), which
    trains a markedly better final policy on the bound of eq. (24);
  * critic target (eq. 33) ``y = r + gamma Q'(s', mu'(s'))``, critic MSE (eq. 34),
    deterministic policy gradient (eq. 35), soft target updates (eq. 36).
  The problem is static (block fading, channels fixed), so it is effectively a bandit;
  every episode restarts from ``p = P_max / 2`` (Algorithm 3 line 3).

Units: powers in watts (the unit of ``p_max``), Phi in loss units.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

# The replay buffer is `replay`'s; re-exported here, where the agent uses it.
from fedjax_dp.algorithms.lapa.replay import (ReplayBuffer, Transition, buffer_add,
                                              buffer_init, buffer_sample)
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_positive)

__all__ = ["REWARDS", "DdpgConfig", "Actor", "Critic", "TrainState", "DdpgAgent",
           "ReplayBuffer", "Transition", "buffer_init", "buffer_add", "buffer_sample",
           "soft_update", "update_step", "DdpgResult", "train_ddpg", "random_search",
           "uniform_grid"]

REWARDS = ("ratio", "log")


# --------------------------------------------------------------------------------------
# Configuration.


@dataclasses.dataclass(frozen=True)
class DdpgConfig:
  """DDPG hyper-parameters (the paper gives none; our defaults,
  [D]).

  Attributes:
    hidden: widths of the hidden ReLU layers of both actor and critic.
    actor_lr: Adam learning rate of the actor (eq. 35).
    critic_lr: Adam learning rate of the critic (eq. 34).
    gamma: discount factor of eq. (33), in [0, 1).
    tau: soft target-update rate of eq. (36), in (0, 1].
    buffer_size: replay-buffer capacity (transitions), >= batch_size.
    batch_size: minibatch size B_r of eqs. (34)-(35).
    explore_std: initial Gaussian exploration std as a fraction of P_max (eq. 32).
    explore_std_final: final exploration std (fraction of P_max); the std decays
      linearly over all training steps.
    episodes: number of episodes E_ep.
    steps_per_episode: steps K_st per episode.
    warmup: transitions stored before the first update (None: ``batch_size``).
    reward_clip: cap on ``Phi / Phi_ref`` in rewards and states ([D]: Phi is inf at
      zero power and ~1/p near it; with a cap of 1e3 the ratio reward left the actor
      stuck at near-zero powers, with 10 it does not).
    reward: ``"ratio"``: ``r = -Phi / Phi_ref`` (eq. 31 normalised, [D], the
      default); ``"log"``: ``r = -log(Phi / Phi_ref)`` (our alternative, better
      conditioned: on a 15-device bound its final policy was within 2-14% of the best
      action seen, against 50-300% for "ratio"); the same transform is the last state
      entry.
    seed: PRNG seed of network initialisation, exploration and replay sampling.

  Raises:
    FedJaxDpError: naming the field, on any value outside the ranges above.
  """
  hidden: Tuple[int, ...] = (256, 256)
  actor_lr: float = 1e-4
  critic_lr: float = 1e-3
  gamma: float = 0.9
  tau: float = 0.005
  buffer_size: int = 100_000
  batch_size: int = 64
  explore_std: float = 0.1
  explore_std_final: float = 0.01
  episodes: int = 200
  steps_per_episode: int = 50
  warmup: Optional[int] = None
  reward_clip: float = 10.0
  reward: str = "ratio"
  seed: int = 0

  def __post_init__(self):
    try:
      hidden = tuple(self.hidden)
    except TypeError:
      raise FedJaxDpError(f"hidden must be a sequence of positive integers, got "
                          f"{self.hidden!r}.", option="hidden") from None
    if not hidden:
      raise FedJaxDpError("hidden must name at least one layer width, got ().",
                          option="hidden")
    hidden = tuple(check_int("hidden", h, minimum=1) for h in hidden)
    object.__setattr__(self, "hidden", hidden)
    check_positive("actor_lr", self.actor_lr)
    check_positive("critic_lr", self.critic_lr)
    gamma = check_non_negative("gamma", self.gamma)
    if gamma >= 1.0:
      raise FedJaxDpError(f"gamma must be in [0, 1), got {self.gamma!r}.", option="gamma")
    tau = check_positive("tau", self.tau)
    if tau > 1.0:
      raise FedJaxDpError(f"tau must be in (0, 1], got {self.tau!r}.", option="tau")
    batch = check_int("batch_size", self.batch_size, minimum=1)
    check_int("buffer_size", self.buffer_size, minimum=batch)
    check_non_negative("explore_std", self.explore_std)
    check_non_negative("explore_std_final", self.explore_std_final)
    check_int("episodes", self.episodes, minimum=1)
    check_int("steps_per_episode", self.steps_per_episode, minimum=1)
    if self.warmup is not None:
      check_int("warmup", self.warmup, minimum=1, maximum=self.buffer_size)
    check_positive("reward_clip", self.reward_clip)
    check_choice("reward", self.reward, REWARDS)
    check_int("seed", self.seed, minimum=0)

  @property
  def warmup_transitions(self) -> int:
    """Transitions stored before updates start (``warmup`` or ``batch_size``)."""
    return self.batch_size if self.warmup is None else int(self.warmup)


# --------------------------------------------------------------------------------------
# Networks.


class Actor(nn.Module):
  """Deterministic policy mu(s) (eq. 30): ReLU MLP, output ``sigmoid * p_max``.

  Maps states float ``[..., N + 2]`` to powers float ``[..., N]`` in ``(0, p_max)``.
  """
  hidden: Tuple[int, ...]
  num_devices: int
  p_max: float

  @nn.compact
  def __call__(self, s):
    x = s
    for width in self.hidden:
      x = nn.relu(nn.Dense(width)(x))
    return nn.sigmoid(nn.Dense(self.num_devices)(x)) * self.p_max


class Critic(nn.Module):
  """Action value Q(s, a) (eqs. 33-35): ReLU MLP on ``concat(s, a / p_max)``.

  Maps states ``[..., N + 2]`` and powers ``[..., N]`` (watts) to float ``[...]``.
  """
  hidden: Tuple[int, ...]
  p_max: float

  @nn.compact
  def __call__(self, s, a):
    x = jnp.concatenate([s, a / self.p_max], axis=-1)
    for width in self.hidden:
      x = nn.relu(nn.Dense(width)(x))
    return nn.Dense(1)(x)[..., 0]


class TrainState(NamedTuple):
  """Online and target parameters of actor and critic, and their Adam states."""
  actor: Any
  critic: Any
  target_actor: Any
  target_critic: Any
  actor_opt: Any
  critic_opt: Any


@dataclasses.dataclass(frozen=True)
class DdpgAgent:
  """The static part of a DDPG learner (hashable: a static argument of `update_step`).

  Attributes:
    num_devices: N, the action dimension.
    p_max: power cap P_max (watts).
    config: the `DdpgConfig`.
  """
  num_devices: int
  p_max: float
  config: DdpgConfig

  @property
  def state_dim(self) -> int:
    """N + 2 (eq. 29)."""
    return self.num_devices + 2

  @property
  def actor(self) -> Actor:
    return Actor(self.config.hidden, self.num_devices, self.p_max)

  @property
  def critic(self) -> Critic:
    return Critic(self.config.hidden, self.p_max)

  @property
  def actor_tx(self) -> optax.GradientTransformation:
    return optax.adam(self.config.actor_lr)

  @property
  def critic_tx(self) -> optax.GradientTransformation:
    return optax.adam(self.config.critic_lr)

  def init(self, key) -> TrainState:
    """Fresh parameters; targets start equal to the online networks (Algorithm 3
    line 1)."""
    ka, kc = jax.random.split(key)
    s = jnp.zeros((1, self.state_dim), jnp.float32)
    a = jnp.zeros((1, self.num_devices), jnp.float32)
    actor = self.actor.init(ka, s)
    critic = self.critic.init(kc, s, a)
    # Targets are copies (distinct buffers, so that the episode can donate its state).
    copy = functools.partial(jax.tree_util.tree_map, jnp.copy)
    return TrainState(actor, critic, copy(actor), copy(critic), self.actor_tx.init(actor),
                      self.critic_tx.init(critic))


# --------------------------------------------------------------------------------------
# Updates (eqs. 33-36).


def soft_update(target, online, tau):
  """Soft target update ``theta' <- tau theta + (1 - tau) theta'`` (LAPA, eq. 36)
  on matching pytrees (``optax.incremental_update``). ``tau = 1`` copies ``online``;
  ``tau = 0`` keeps ``target``."""
  return optax.incremental_update(online, target, tau)


def _apply(module: nn.Module, params: Any, *inputs) -> jax.Array:
  """``module.apply(params, *inputs)``: the network's output (flax types ``apply``'s
  result as the output or ``(output, variables)`` whatever ``mutable`` is; without
  ``mutable`` it is the output)."""
  out = module.apply(params, *inputs)
  assert not isinstance(out, tuple), type(out)
  return out


def _update(agent: DdpgAgent, state: TrainState, batch: Transition):
  cfg = agent.config
  actor, critic = agent.actor, agent.critic
  next_a = _apply(actor, state.target_actor, batch.next_states)
  y = batch.rewards + cfg.gamma * _apply(critic, state.target_critic, batch.next_states,
                                         next_a)                        # eq. 33
  y = jax.lax.stop_gradient(y)

  def critic_loss(params):                                               # eq. 34
    q = _apply(critic, params, batch.states, batch.actions)
    return jnp.mean((y - q) ** 2), q

  (c_loss, q), c_grads = jax.value_and_grad(critic_loss, has_aux=True)(state.critic)
  c_upd, critic_opt = agent.critic_tx.update(c_grads, state.critic_opt, state.critic)
  critic_params = optax.apply_updates(state.critic, c_upd)

  def actor_loss(params):                                                # eq. 35
    return -jnp.mean(_apply(critic, critic_params, batch.states,
                            _apply(actor, params, batch.states)))

  a_loss, a_grads = jax.value_and_grad(actor_loss)(state.actor)
  a_upd, actor_opt = agent.actor_tx.update(a_grads, state.actor_opt, state.actor)
  actor_params = optax.apply_updates(state.actor, a_upd)
  new = TrainState(actor_params, critic_params,
                   soft_update(state.target_actor, actor_params, cfg.tau),  # eq. 36
                   soft_update(state.target_critic, critic_params, cfg.tau),
                   actor_opt, critic_opt)
  metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": jnp.mean(q)}
  return new, metrics


@functools.partial(jax.jit, static_argnums=0)
def update_step(agent: DdpgAgent, state: TrainState, batch: Transition
                ) -> Tuple[TrainState, Dict[str, jnp.ndarray]]:
  """One DDPG update (jitted; ``agent`` static): critic target ``y = r + gamma Q'(s',
  mu'(s'))`` (eq. 33), one Adam step on the critic MSE (eq. 34), one Adam step of
  deterministic-policy-gradient ascent on ``Q(s, mu(s))`` with the updated critic
  (eq. 35), soft updates of both targets (eq. 36).

  Returns:
    ``(new_state, metrics)``; metrics are float32 scalars ``critic_loss`` (eq. 34),
    ``actor_loss`` (``-mean Q(s, mu(s))``) and ``q_mean`` (mean ``Q(s, a)`` on the
    batch before the step).
  """
  return _update(agent, state, batch)


# --------------------------------------------------------------------------------------
# Training (Algorithm 3).


@dataclasses.dataclass
class DdpgResult:
  """Outcome of `train_ddpg`.

  Attributes:
    best_powers: float64 ``[N]``, the allocation with the smallest Phi among the
      explored actions and the initial ``P_max / 2 * 1`` (within ``[0, P_max]`` in
      float64 too).
    best_phi: Phi(best_powers).
    episode_rewards: float64 ``[E]``, mean reward per episode.
    episode_critic_loss: float64 ``[E]``, mean critic loss per episode (0 before
      warm-up).
    final_powers: float64 ``[N]``, the final actor's action at the initial state
      ``s_1`` (powers P_max / 2).
    final_phi: Phi(final_powers).
    num_updates: number of update steps taken.
    wall_time_s: seconds, compilation included.
    phi_ref: Phi(P_max / 2 * 1), the reward scale.
    switch_scale: the T used to normalise T_th in the state.
    state: the final `TrainState`.
  """
  best_powers: np.ndarray
  best_phi: float
  episode_rewards: np.ndarray
  episode_critic_loss: np.ndarray
  final_powers: np.ndarray
  final_phi: float
  num_updates: int
  wall_time_s: float
  phi_ref: float
  switch_scale: float
  state: Any = None


def _observe(powers, t_th, phi, p_max, switch_scale, phi_ref, clip, reward):
  """State of eq. (29) after playing ``powers`` and the clipped normalised Phi (minus
  the reward of eq. 31)."""
  ratio = phi / phi_ref
  ratio = jnp.minimum(jnp.nan_to_num(ratio, nan=clip, posinf=clip), clip)
  if reward == "log":
    ratio = jnp.log(jnp.maximum(ratio, 1e-30))
  state = jnp.concatenate([powers / p_max,
                           jnp.reshape(t_th / switch_scale, (1,)),
                           jnp.reshape(ratio, (1,))]).astype(jnp.float32)
  return state, ratio


def _env_step(agent: DdpgAgent, objective_fn, switch_fn, consts, carry, step):
  """One step of Algorithm 3 (lines 5-10) inside the episode scan."""
  cfg, n, p_max = agent.config, agent.num_devices, agent.p_max
  _, phi_ref, switch_scale = consts
  ts, buf, s, key, best_phi, best_p, n_upd = carry
  key, k_noise, k_sample = jax.random.split(key, 3)
  total_steps = cfg.episodes * cfg.steps_per_episode
  frac = step.astype(jnp.float32) / max(total_steps - 1, 1)
  std = (cfg.explore_std + (cfg.explore_std_final - cfg.explore_std) * frac) * p_max
  a = agent.actor.apply(ts.actor, s) + std * jax.random.normal(k_noise, (n,))
  a = jnp.clip(a, 0.0, p_max)                                             # eq. 32
  phi = jnp.asarray(objective_fn(a), jnp.float32)
  s2, ratio = _observe(a, switch_fn(a), phi, p_max, switch_scale, phi_ref,
                       float(cfg.reward_clip), cfg.reward)
  r = -ratio                                                              # eq. 31
  buf = buffer_add(buf, s, a, r, s2)
  batch = buffer_sample(buf, k_sample, cfg.batch_size)
  do = buf.size >= cfg.warmup_transitions
  zeros = {"critic_loss": jnp.float32(0), "actor_loss": jnp.float32(0),
           "q_mean": jnp.float32(0)}
  ts, metrics = jax.lax.cond(do, lambda: _update(agent, ts, batch), lambda: (ts, zeros))
  better = phi < best_phi
  best_phi = jnp.where(better, phi, best_phi)
  best_p = jnp.where(better, a, best_p)
  return (ts, buf, s2, key, best_phi, best_p, n_upd + do.astype(jnp.int32)), (
      r, metrics["critic_loss"])


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(3, 4))
def _episode(agent, objective_fn, switch_fn, ts, buf, key, best_phi, best_p, n_upd,
             first_step, consts):
  """One episode (K steps from s_1) as one ``lax.scan``; compiled once per (agent,
  objective_fn, switch_fn)."""
  steps = first_step + jnp.arange(agent.config.steps_per_episode)
  carry = (ts, buf, consts[0], key, best_phi, best_p, n_upd)
  step = functools.partial(_env_step, agent, objective_fn, switch_fn, consts)
  (ts, buf, _, key, best_phi, best_p, n_upd), (r, c_loss) = jax.lax.scan(step, carry,
                                                                         steps)
  return ts, buf, key, best_phi, best_p, n_upd, jnp.mean(r), jnp.mean(c_loss)


def _check_env(num_devices, p_max, config):
  n = check_int("num_devices", num_devices, minimum=1)
  p_max = check_positive("p_max", p_max)
  if config is None:
    config = DdpgConfig()
  if not isinstance(config, DdpgConfig):
    raise FedJaxDpError(f"config must be a DdpgConfig, got {type(config).__name__}.",
                        option="config")
  return n, p_max, config


def train_ddpg(objective_fn: Callable[[Any], Any], switch_fn: Callable[[Any], Any],
               num_devices: int, p_max: float, config: Optional[DdpgConfig] = None, *,
               switch_scale: Optional[float] = None) -> DdpgResult:
  """DDPG power optimisation, Algorithm 3 (LAPA Sec. IV-C, eqs. 29-36).

  Each episode restarts from ``p = P_max / 2`` and runs ``steps_per_episode`` steps in
  one jitted ``jax.lax.scan``: explore (eq. 32, projection onto ``[0, P_max]``), evaluate
  ``Phi(a)`` and ``T_th(a)``, store the transition, and (once ``warmup`` transitions are
  stored) take one `update_step` per environment step.

  The episode is compiled once per ``(num_devices, p_max, config without its seed,
  objective_fn, switch_fn)``: pass the same function objects to reuse it (e.g. for
  several seeds).

  Args:
    objective_fn: ``powers float [..., N] -> Phi float [...]`` (pure jnp), e.g. from
      `fedjax_dp.algorithms.lapa.bound.make_objective` (eq. 24).
    switch_fn: ``powers -> T_th [...]`` (pure jnp, eq. 23).
    num_devices: N.
    p_max: power cap P_max (watts), > 0.
    config: `DdpgConfig` (default: ``DdpgConfig()``).
    switch_scale: the T normalising T_th in the state (default: ``max(T_th(P_max * 1),
      1)``, the largest T_th since T_th is non-decreasing in the powers).

  Returns:
    `DdpgResult`.

  Raises:
    FedJaxDpError: bad ``num_devices``/``p_max``/``config``/``switch_scale``, or
      ``Phi(P_max / 2 * 1)`` not finite and > 0 (option ``objective_fn``; it is the
      reward scale).
  """
  n, p_max, cfg = _check_env(num_devices, p_max, config)
  start = time.perf_counter()
  agent = DdpgAgent(n, p_max, cfg)
  p_half = jnp.full((n,), 0.5 * p_max, jnp.float32)
  phi_ref = float(objective_fn(p_half))
  if not (np.isfinite(phi_ref) and phi_ref > 0):
    raise FedJaxDpError(f"objective_fn(P_max / 2 * 1) must be finite and > 0 (it scales "
                        f"the reward), got {phi_ref!r}.", option="objective_fn")
  if switch_scale is None:
    switch_scale = max(float(switch_fn(jnp.full((n,), p_max, jnp.float32))), 1.0)
  switch_scale = check_positive("switch_scale", switch_scale)
  s0, _ = _observe(p_half, switch_fn(p_half), phi_ref, p_max, switch_scale, phi_ref,
                   float(cfg.reward_clip), cfg.reward)
  # The seed only feeds the key: leave it out of the static agent of the compiled
  # episode, so that runs differing only in the seed share one compilation.
  static_agent = DdpgAgent(n, p_max, dataclasses.replace(cfg, seed=0))
  consts = (s0, jnp.float32(phi_ref), jnp.float32(switch_scale))
  key = jax.random.PRNGKey(cfg.seed)
  key, k_init = jax.random.split(key)
  ts = agent.init(k_init)
  buf = buffer_init(cfg.buffer_size, agent.state_dim, n)
  best_phi = jnp.float32(phi_ref)                  # s_1's allocation counts as seen
  best_p = p_half
  n_upd = jnp.int32(0)
  rewards, c_losses = [], []
  for e in range(cfg.episodes):
    ts, buf, key, best_phi, best_p, n_upd, r_mean, c_mean = _episode(
        static_agent, objective_fn, switch_fn, ts, buf, key, best_phi, best_p, n_upd,
        jnp.int32(e * cfg.steps_per_episode), consts)
    rewards.append(r_mean)
    c_losses.append(c_mean)
  final_p = agent.actor.apply(ts.actor, s0)
  final_phi = float(objective_fn(final_p))
  rewards = np.asarray(jnp.stack(rewards), np.float64)
  c_losses = np.asarray(jnp.stack(c_losses), np.float64)
  wall = time.perf_counter() - start
  # float32 P_max can exceed the float64 cap by an ulp: clip, so that the powers pass
  # a ``p <= P_max`` check downstream.
  box = functools.partial(np.clip, a_min=0.0, a_max=p_max)
  return DdpgResult(best_powers=box(np.asarray(best_p, np.float64)),
                    best_phi=float(best_phi), episode_rewards=rewards,
                    episode_critic_loss=c_losses,
                    final_powers=box(np.asarray(final_p, np.float64)), final_phi=final_phi,
                    num_updates=int(n_upd), wall_time_s=wall, phi_ref=phi_ref,
                    switch_scale=switch_scale, state=ts)


# --------------------------------------------------------------------------------------
# Baselines ([D]).


def _best(objective_fn, candidates, p_max, chunk: int = 4096):
  best_phi, best_p = np.inf, None
  for lo in range(0, candidates.shape[0], chunk):
    c = candidates[lo:lo + chunk]
    phi = np.asarray(objective_fn(c), np.float64)
    phi = np.where(np.isnan(phi), np.inf, phi)
    k = int(np.argmin(phi))
    if best_p is None or phi[k] < best_phi:
      best_phi, best_p = float(phi[k]), np.asarray(c[k], np.float64)
  assert best_p is not None, "no candidates"
  return np.clip(best_p, 0.0, p_max), best_phi


def random_search(objective_fn: Callable[[Any], Any], num_devices: int, p_max: float,
                  samples: int, key) -> Tuple[np.ndarray, float]:
  """Random-search baseline: ``samples`` power vectors uniform on ``[0, P_max]^N``,
  evaluated in chunks; returns ``(best powers float64 [N], best Phi)`` (NaN counts as
  inf).

  Raises:
    FedJaxDpError: ``num_devices`` or ``samples`` < 1, ``p_max`` not > 0.
  """
  n, p_max, _ = _check_env(num_devices, p_max, None)
  samples = check_int("samples", samples, minimum=1)
  cand = jax.random.uniform(key, (samples, n), jnp.float32, 0.0, p_max)
  return _best(objective_fn, cand, p_max)


def uniform_grid(objective_fn: Callable[[Any], Any], num_devices: int, p_max: float,
                 points: int) -> Tuple[np.ndarray, float]:
  """Uniform-grid baseline (and the paper's "average power setting"): the common power
  ``p * 1`` for
  ``p = P_max k / points``, ``k = 1..points`` (0 is left out: Phi = inf there); returns
  ``(best powers float64 [N], best Phi)``.

  Raises:
    FedJaxDpError: ``num_devices`` or ``points`` < 1, ``p_max`` not > 0.
  """
  n, p_max, _ = _check_env(num_devices, p_max, None)
  points = check_int("points", points, minimum=1)
  levels = p_max * jnp.arange(1, points + 1, dtype=jnp.float32) / points
  return _best(objective_fn, levels[:, None] * jnp.ones((1, n), jnp.float32), p_max)
