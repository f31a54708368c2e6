"""Canary clients inside a real training run, for one-run empirical privacy
estimation (Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical
Privacy Estimation for Federated Learning", ICLR 2024, Sec. 3 and Alg. 2).

A `CanaryPlan` of K canaries (K even) over a population of N real clients:

* every canary i in [0, K) has a fixed random unit direction u_i in the space of the
  upload (the model delta), drawn from the public ``seed`` (`canary_direction`:
  a standard normal vector ``[P]`` divided by its norm);
* each canary is *inserted* independently with probability 1/2 (a Bernoulli draw from
  the public ``seed``, `CanaryPlan.inserted_mask`), as the one-run bound of Steinke,
  Nasr, Jagielski (NeurIPS 2023, Sec. 3: S_i i.i.d.) requires; the n_1 inserted ones
  (about K/2) are population clients N .. N + n_1 - 1 of a population of N + n_1, in
  increasing canary order, sampled by the run's own sampler exactly like real
  clients. Sampled, canary i uploads ``C u_i`` (C the round's clip norm, adaptive or
  fixed): the worst-case norm, so the canary is the client the guarantee is tightest
  for. Its upload then goes through the engine's clipping and noise like any other;
* the other n_0 = K - n_1 are *held out*: they never join.

The population grows by n_1 (written K/2 below, its expectation): a Poisson sampler
keeps its q (the expected cohort grows by q n_1), a fixed-size one keeps its cohort size
m given as ``clients_per_round`` (q = m / (N + n_1)). The run's ledger is made from that
sampler, so the accountant's epsilon is the guarantee of the mechanism that ran, over
N + n_1 users.

The engine's `ClientStage` does not receive the population id, so the canary's index
rides in the per-client state (`canary_stage`: ``(row, inner state)``, row -1 for real
clients, i for inserted canary i; `canary_client_states`), and `canary_round` hands the
engine the population with K/2 extra counts (1 each). The canaries' data gathers
(ids >= N) read past ``x [N, ...]``: JAX clamps out-of-bounds gathers to the last real
client (a pooled population wraps around), whose training is computed and discarded.

After training, `canary_cosines` scores every canary by the cosine between the final
model delta theta_T - theta_0 and u_i (`fedjax_dp.auditing.empirical` turns the
scores into the estimate and the lower bound).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Tuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from fedjax_dp.federated.population import PooledPopulation, PopulationData
from fedjax_dp.federated.stages import ClientStage
from fedjax_dp.validation import FedJaxDpError, check_int

__all__ = ["CanaryPlan", "PopulationView", "canary_direction", "canary_stage",
           "canary_client_states", "canary_round", "canary_cosines", "extend_population"]


@dataclasses.dataclass(frozen=True)
class PopulationView:
  """What a builder reads of a population (``num_clients``, ``max_examples``,
  ``counts``), with the inserted canaries appended (count 1 each)."""
  num_clients: int
  max_examples: int
  counts: np.ndarray


@dataclasses.dataclass(frozen=True)
class CanaryPlan:
  """K canary clients over N real ones (module docstring).

  Attributes:
    num_canaries: K >= 4, each inserted with probability 1/2 (`inserted_mask`).
    num_real_clients: N >= 1.
    seed: the public seed of the directions (int >= 0).
  """
  num_canaries: int
  num_real_clients: int
  seed: int = 0

  def __post_init__(self):
    check_int("canaries", self.num_canaries, minimum=4)
    check_int("num_real_clients", self.num_real_clients, minimum=1)
    check_int("canary_seed", self.seed, minimum=0)
    n1 = int(self.inserted_mask.sum())
    if n1 in (0, self.num_canaries):
      raise FedJaxDpError(f"canary_seed {self.seed} draws {'every' if n1 else 'no'} canary "
                          f"of {self.num_canaries} as inserted (each with probability "
                          "1/2); give more canaries or another canary_seed.",
                          option="canaries")

  @property
  def inserted_mask(self) -> np.ndarray:
    """bool ``[K]``: canary i is inserted (i.i.d. Bernoulli(1/2) from the public seed,
    a stream of its own: ``numpy.random.default_rng([seed, 1])``)."""
    return np.random.default_rng([self.seed, 1]).random(self.num_canaries) < 0.5

  @property
  def inserted_indices(self) -> np.ndarray:
    """int32 ``[n_1]``: the inserted canaries' indices, increasing (population client
    N + j is canary ``inserted_indices[j]``)."""
    return np.flatnonzero(self.inserted_mask).astype(np.int32)

  @property
  def inserted(self) -> int:
    """n_1 (about K/2), the canaries that join the population."""
    return int(self.inserted_mask.sum())

  @property
  def held_out(self) -> int:
    return self.num_canaries - self.inserted

  @property
  def population_size(self) -> int:
    """N + K/2: the population the sampler draws from."""
    return self.num_real_clients + self.inserted

  def view(self, data) -> PopulationView:
    """``data`` (anything with ``num_clients``, ``max_examples``, ``counts``) as the
    builder sees it with the inserted canaries.

    Raises:
      FedJaxDpError: ``data`` does not have N clients.
    """
    if data.num_clients != self.num_real_clients:
      raise FedJaxDpError(f"the population has {data.num_clients} clients, the canary plan "
                          f"{self.num_real_clients}.", option="canaries")
    counts = np.concatenate([np.asarray(data.counts, np.int32),
                             np.ones(self.inserted, np.int32)])
    return PopulationView(self.population_size, int(data.max_examples), counts)

  def to_dict(self) -> dict:
    return dict(canaries=self.num_canaries, inserted=self.inserted,
                held_out=self.held_out, canary_seed=self.seed,
                population_size=self.population_size)

  def report(self, theta0, theta_final, delta: float, accountant_epsilon=None
             ) -> dict:
    """The canary summary of a finished run (`fedjax_dp.auditing.empirical.report`)."""
    from fedjax_dp.auditing import empirical
    ins, out = canary_cosines(self, theta0, theta_final)
    return empirical.report(self, ins, out, delta, accountant_epsilon)


def canary_direction(seed: int, index: jax.Array, size: int, dtype=jnp.float32
                     ) -> jax.Array:
  """u_i: a unit vector ``[size]`` (float32), uniform on the sphere (a standard normal
  draw from ``fold_in(key(seed), index)`` divided by its L2 norm)."""
  v = jax.random.normal(jax.random.fold_in(jax.random.key(seed), index), (size,), dtype)
  return v / jnp.linalg.norm(v)


def canary_stage(inner: ClientStage, plan: CanaryPlan) -> ClientStage:
  """``inner`` with inserted canaries: a client whose state row is i >= 0 uploads
  ``hp.clip_norm * u_i`` (unravelled to the upload's structure and dtypes) instead of
  its trained update; real clients (row -1) upload ``inner``'s update unchanged. The
  per-client state is ``(row int32, inner state)``; `canary_client_states` makes it.
  The canary slots' metrics are the dummy client's (they enter the round's
  ``train_loss`` and norm diagnostics)."""

  def update(broadcast, x, y, count, key, hp, client_state):
    row, inner_state = client_state
    upload, new_inner, metrics = inner.update(broadcast, x, y, count, key, hp, inner_state)
    flat, unravel = jax.flatten_util.ravel_pytree(upload)
    u = canary_direction(plan.seed, jnp.maximum(row, 0), flat.size)
    canary = unravel((jnp.asarray(hp.clip_norm, jnp.float32) * u).astype(flat.dtype))
    is_canary = row >= 0
    upload = jax.tree_util.tree_map(lambda a, b: jnp.where(is_canary, b, a), upload, canary)
    return upload, (row, new_inner), metrics

  return ClientStage(update=update, init_state=None, fallback=inner.fallback)


def canary_client_states(inner: ClientStage, params, plan: CanaryPlan):
  """The ``[N + n_1]`` client states of `canary_stage`: rows ``-1`` (real clients) then
  the inserted canaries' indices (`CanaryPlan.inserted_indices`), with ``inner``'s
  initial state stacked (or ``()``)."""
  rows = jnp.concatenate([jnp.full((plan.num_real_clients,), -1, jnp.int32),
                          jnp.asarray(plan.inserted_indices, jnp.int32)])
  if inner.init_state is None:
    return rows, ()
  one = inner.init_state(params)
  n = plan.population_size
  return rows, jax.tree_util.tree_map(
      lambda l: jnp.broadcast_to(jnp.asarray(l)[None], (n,) + jnp.shape(l)), one)


def extend_population(data, plan: CanaryPlan):
  """The population ``data`` with the inserted canaries' counts (1 each) appended:
  ``counts [N + K/2]``; the examples stay ``[N, ...]`` (canaries never read theirs).

  Raises:
    FedJaxDpError: ``data`` is not a `PopulationData` or `PooledPopulation` of N
      clients, or has custom weights (a canary's weight would be undefined).
  """
  if not isinstance(data, (PopulationData, PooledPopulation)):
    raise FedJaxDpError(f"canaries need a PopulationData or PooledPopulation, got "
                        f"{type(data).__name__}.", option="canaries")
  n = data.counts.shape[0]
  if n != plan.num_real_clients:
    raise FedJaxDpError(f"canaries: the population has {n} clients, the plan "
                        f"{plan.num_real_clients}.", option="canaries")
  if data.weights is not None:
    raise FedJaxDpError("canaries cannot be combined with custom client weights.",
                        option="canaries")
  counts = jnp.concatenate([jnp.asarray(data.counts, jnp.int32),
                            jnp.ones((plan.inserted,), jnp.int32)])
  return data._replace(counts=counts)


def canary_round(round_fn, plan: CanaryPlan):
  """``round_fn`` run on `extend_population` of its population (same signature; the
  attributes ``sampler`` and ``config`` are carried over)."""

  def wrapped(state, data, hp, root_key):
    return round_fn(state, extend_population(data, plan), hp, root_key)

  for name in ("sampler", "config"):
    if hasattr(round_fn, name):
      setattr(wrapped, name, getattr(round_fn, name))
  return wrapped


def canary_cosines(plan: CanaryPlan, theta0, theta_final) -> Tuple[np.ndarray, np.ndarray]:
  """Each canary's score: cos(theta_final - theta0, u_i), float64 ``[n_1]`` for the
  inserted and ``[n_0]`` for the held-out canaries, each in canary order (0 when the
  model did not move).

  Args:
    theta0, theta_final: the initial and final model parameters (same pytree; the
      canary directions live in the upload's flattened order, which for a FedAvg
      upload is the parameters').
  """
  d0 = jax.flatten_util.ravel_pytree(jax.device_get(theta0))[0]
  d1 = jax.flatten_util.ravel_pytree(jax.device_get(theta_final))[0]
  delta = jnp.asarray(d1, jnp.float32) - jnp.asarray(d0, jnp.float32)
  norm = jnp.linalg.norm(delta)
  size = delta.size

  @jax.jit
  def scores(idx):
    return jax.lax.map(lambda i: jnp.dot(canary_direction(plan.seed, i, size), delta),
                       idx) / jnp.maximum(norm, 1e-30)

  cos = np.asarray(scores(jnp.arange(plan.num_canaries, dtype=jnp.int32)), np.float64)
  mask = plan.inserted_mask
  return cos[mask], cos[~mask]
