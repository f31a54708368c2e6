"""The engine's client loop for rounds with their own code: ``lax.scan`` over chunks of
the cohort's slots on every device, one ``psum`` of the running sums
(`sum_over_cohort`; re-exported by `fedjax_dp.federated.engine`)."""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.flatten_util
import jax.numpy as jnp

from fedjax_dp.federated import sharding

__all__ = ["sum_over_cohort"]


def sum_over_cohort(chunk_fn: Callable, args, slots, *, chunk_size: int,
                    mesh: Optional[jax.sharding.Mesh] = None):
  """The engine's client loop for a round that needs its own code: ``lax.scan`` over
  chunks of the cohort's slots on every device of ``mesh`` (``shard_map``), with one
  ``psum`` of the running sums and one ``pmax`` of the running maxima.

  Args:
    chunk_fn: ``chunk_fn(*args, *chunk_slots) -> (sums, maxes)`` for one chunk: two
      pytrees of arrays (float or int), summed (``sums``) and max-reduced (``maxes``,
      non-negative values: the running maxima start at 0) over the chunks and devices.
    args: a tuple of replicated arguments (the model, the population, the
      hyper-parameters, keys).
    slots: a tuple of ``[S]`` arrays, one entry per cohort slot (client ids, weights,
      masks), ``S`` a multiple of ``chunk_size`` times the mesh size
      (`fedjax_dp.federated.chunking.chunk_layout`'s ``padded_size``).
    chunk_size: clients per chunk (static).
    mesh: a mesh with a ``"clients"`` axis, or None for one device.

  Returns:
    ``(sums, maxes)`` over all slots (the same structure as ``chunk_fn``'s).
  """
  def device(*a):
    dev_args, dev_slots = a[:len(args)], a[len(args):]
    per_chunk = lambda v: v.reshape((-1, chunk_size) + v.shape[1:])
    first = jax.eval_shape(chunk_fn, *dev_args, *(v[:chunk_size] for v in dev_slots))
    init = jax.tree_util.tree_map(lambda l: jnp.zeros(l.shape, l.dtype), first)

    def body(acc, xs):
      sums, maxes = chunk_fn(*dev_args, *xs)
      return (jax.tree_util.tree_map(jnp.add, acc[0], sums),
              jax.tree_util.tree_map(jnp.maximum, acc[1], maxes)), None

    out, _ = jax.lax.scan(body, init, tuple(per_chunk(v) for v in dev_slots))
    return out

  if mesh is None:
    return device(*args, *slots)
  P = jax.sharding.PartitionSpec

  def sharded(*a):
    sums, maxes = device(*a)
    flat, unravel = jax.flatten_util.ravel_pytree(sums)
    return (unravel(jax.lax.psum(flat, sharding.CLIENTS_AXIS)),
            jax.tree_util.tree_map(lambda m: jax.lax.pmax(m, sharding.CLIENTS_AXIS), maxes))

  return jax.shard_map(sharded, mesh=mesh,
                       in_specs=(P(),) * len(args) + (P(sharding.CLIENTS_AXIS),) * len(slots),
                       out_specs=(P(), P()), check_vma=False)(*args, *slots)
