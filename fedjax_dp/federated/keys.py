"""Explicit, stable PRNG key derivation.

One root key per run. For round ``t`` the round key is ``fold_in(root, t)``; from it,
one independent stream per purpose (`SAMPLING`, `TRAINING`, `NOISE`, ...) and, for
per-client randomness, ``fold_in(stream, client_id)`` with the *population* client id
(never the slot in the padded cohort). Hence the same seed gives the same run whatever
``K_max`` padding, chunking or number of devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SAMPLING = 0
TRAINING = 1
NOISE = 2
LOCAL_NOISE = 3
EVAL = 4
SERVER = 5
CLIP_COUNT = 6
SECAGG_ROTATION = 7  # public: the round's shared rotation
SECAGG_ROUNDING = 8
SECAGG_NOISE = 9
DROPOUT = 10


def round_key(root: jax.Array, round_index) -> jax.Array:
  """Key of round ``round_index`` (int scalar, may be traced)."""
  return jax.random.fold_in(root, jnp.asarray(round_index, jnp.uint32))


def stream(key: jax.Array, purpose: int) -> jax.Array:
  """An independent stream of ``key`` for one purpose (`SAMPLING`, `NOISE`, ...)."""
  return jax.random.fold_in(key, purpose)


def client_keys(key: jax.Array, client_ids: jax.Array) -> jax.Array:
  """``[K]`` keys ``fold_in(key, client_ids[k])`` for population ids ``int32 [K]``."""
  return jax.vmap(lambda c: jax.random.fold_in(key, c.astype(jnp.uint32)))(client_ids)
