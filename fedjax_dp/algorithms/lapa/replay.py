"""The replay buffer of LAPA's DDPG power optimisation (Algorithm 3 line 8;
`fedjax_dp.algorithms.lapa.ddpg`): a ring buffer of transitions as fixed-size jnp
arrays, written and sampled inside the jit-compiled episode."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp.validation import check_int

__all__ = ["ReplayBuffer", "Transition", "buffer_init", "buffer_add", "buffer_sample"]


class ReplayBuffer(NamedTuple):
  """Ring buffer of transitions (Algorithm 3 line 8) as fixed-size jnp arrays.

  Attributes:
    states: float32 ``[capacity, N + 2]``.
    actions: float32 ``[capacity, N]``.
    rewards: float32 ``[capacity]``.
    next_states: float32 ``[capacity, N + 2]``.
    position: int32 scalar, the slot the next transition is written to (not ``index``:
      a NamedTuple field of that name would hide ``tuple.index``).
    size: int32 scalar, the number of valid transitions (<= capacity).
  """
  states: jnp.ndarray
  actions: jnp.ndarray
  rewards: jnp.ndarray
  next_states: jnp.ndarray
  position: jnp.ndarray
  size: jnp.ndarray


class Transition(NamedTuple):
  """A minibatch: states ``[B, N+2]``, actions ``[B, N]``, rewards ``[B]``,
  next_states ``[B, N+2]``."""
  states: jnp.ndarray
  actions: jnp.ndarray
  rewards: jnp.ndarray
  next_states: jnp.ndarray


def buffer_init(capacity: int, state_dim: int, action_dim: int) -> ReplayBuffer:
  """An empty buffer of ``capacity`` transitions (float32 zeros, position = size = 0).

  Raises:
    FedJaxDpError: a size < 1.
  """
  capacity = check_int("capacity", capacity, minimum=1)
  state_dim = check_int("state_dim", state_dim, minimum=1)
  action_dim = check_int("action_dim", action_dim, minimum=1)
  return ReplayBuffer(jnp.zeros((capacity, state_dim), jnp.float32),
                      jnp.zeros((capacity, action_dim), jnp.float32),
                      jnp.zeros((capacity,), jnp.float32),
                      jnp.zeros((capacity, state_dim), jnp.float32),
                      jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def buffer_add(buffer: ReplayBuffer, state, action, reward, next_state) -> ReplayBuffer:
  """Writes one transition at ``buffer.position`` (overwriting the oldest once full) and
  advances the position modulo the capacity (pure jnp, jit-compatible).

  Args:
    state, next_state: float ``[N + 2]``; action: float ``[N]``; reward: scalar.
  """
  cap = buffer.rewards.shape[0]
  i = buffer.position
  return ReplayBuffer(buffer.states.at[i].set(state),
                      buffer.actions.at[i].set(action),
                      buffer.rewards.at[i].set(reward),
                      buffer.next_states.at[i].set(next_state),
                      ((i + 1) % cap).astype(jnp.int32),
                      jnp.minimum(buffer.size + 1, cap).astype(jnp.int32))


def buffer_sample(buffer: ReplayBuffer, key, batch: int) -> Transition:
  """``batch`` transitions drawn uniformly with replacement from the ``size`` valid
  ones (slot 0 only while the buffer is empty). ``batch`` is static."""
  idx = jax.random.randint(key, (batch,), 0, jnp.maximum(buffer.size, 1))
  return Transition(buffer.states[idx], buffer.actions[idx], buffer.rewards[idx],
                    buffer.next_states[idx])
