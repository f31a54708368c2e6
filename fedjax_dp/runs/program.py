"""The compiled program of a training session: its members' blocks run in lockstep, and
the proof that several members are one program.

`Lockstep` runs the driver's scan block (`fedjax_dp.federated.make_block_fn`, with
evaluation inside) for every member of a session: one member (a run) runs the block
function itself, several (a sweep) run it under ``jax.vmap`` with their server states,
hyper-parameter schedules and root keys stacked along a new leading axis. That the
members are one program is checked, not assumed (`program`, `one_program`): each
member's block is traced (``jax.make_jaxpr``) on the same abstract arguments and must
give the same jaxpr with the same constants. `check_blocks` and
`check_same_structure` refuse members whose controllers or schedules would not run in
lockstep, naming the options in which they differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Optional, Protocol, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.interface import Block
from fedjax_dp.federated import PopulationData, ServerState, sharding
from fedjax_dp.runs.config import RunConfig
from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "Configuration", "same", "same_tree", "jaxpr_consts", "program", "one_program",
    "differing", "flags", "check_blocks", "check_same_structure", "full_schedule",
    "stack", "program_chunk", "Lockstep",
]


class Configuration(Protocol):
  """What the checks here read of a session's member (a `fedjax_dp.runs.session.Member`
  or a `fedjax_dp.runs.sweep.SweepMember`): its folder name and its sweep axes
  ``{option: value}``."""

  @property
  def name(self) -> str: ...

  @property
  def axes(self) -> Mapping[str, Any]: ...


# --- equality of values and programs ---------------------------------------------------


def same(a: Any, b: Any) -> bool:
  """Equal values (arrays by content, dataclasses field by field)."""
  if a is b:
    return True
  if dataclasses.is_dataclass(a) and type(a) is type(b):
    return all(same(getattr(a, f.name), getattr(b, f.name))
               for f in dataclasses.fields(a))
  if isinstance(a, (np.ndarray, np.generic)) or hasattr(a, "__array__"):
    if not (isinstance(b, (np.ndarray, np.generic)) or hasattr(b, "__array__")):
      return False
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
  try:
    return bool(a == b)
  except Exception:  # noqa: BLE001 (incomparable: not the same)
    return False


def same_tree(a: Any, b: Any) -> bool:
  """Same pytree structure and equal leaves."""
  la, ta = jax.tree_util.tree_flatten(a)
  lb, tb = jax.tree_util.tree_flatten(b)
  return ta == tb and all(same(x, y) for x, y in zip(la, lb))


def jaxpr_consts(closed) -> List[Any]:
  """Every constant of a closed jaxpr and of the jaxprs nested in its equations (jit,
  scan, cond and shard_map bodies), in a fixed order: the values ``str(jaxpr)`` does
  not show."""
  from jax.extend import core as jcore
  out = list(closed.consts)

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      for v in eqn.params.values():
        for sub in (v if isinstance(v, (list, tuple)) else (v,)):
          if isinstance(sub, jcore.ClosedJaxpr):
            out.extend(sub.consts)
            walk(sub.jaxpr)
          elif isinstance(sub, jcore.Jaxpr):
            walk(sub)

  walk(closed.jaxpr)
  return out


def program(block_fn, args) -> Tuple[str, List[Any]]:
  """``(jaxpr text, constants)`` of the block function on ``args``: two configurations
  are one program when both agree."""
  fn = getattr(block_fn, "__wrapped__", block_fn)  # trace the scan itself, not a jit call
  closed = jax.make_jaxpr(fn)(*args)
  return str(closed), jaxpr_consts(closed)


def one_program(block_fn, args, ref: Tuple[str, List[Any]], state, state0) -> bool:
  """Whether ``block_fn`` on ``args`` (configuration 0's) traces to ``ref``'s jaxpr and
  constants (`program`), its own initial ``state`` having ``state0``'s structure,
  shapes and dtypes."""
  la, ta = jax.tree_util.tree_flatten(state)
  lb, tb = jax.tree_util.tree_flatten(state0)
  if ta != tb or any(np.shape(a) != np.shape(b) or a.dtype != b.dtype
                     for a, b in zip(la, lb)):
    return False
  try:
    text, consts = program(block_fn, args)
  except Exception:  # noqa: BLE001 (it does not even take configuration 0's arguments)
    return False
  return (text == ref[0] and len(consts) == len(ref[1])
          and all(same(a, b) for a, b in zip(consts, ref[1])))


# --- members that differ ---------------------------------------------------------------


def differing(members: Sequence[Configuration], i: int, j: int) -> List[str]:
  """The axes (options) in which members ``i`` and ``j`` differ."""
  return [k for k in members[i].axes if members[i].axes[k] != members[j].axes[k]]


def flags(names: Sequence[str]) -> str:
  """Options as the command line spells them (``seed`` is given with ``--seeds``)."""
  return ", ".join("--" + ("seeds" if n == "seed" else n.replace("_", "-")) for n in names)


def check_blocks(members: Sequence[Configuration], blocks: Sequence[Optional[Block]],
                 done: int) -> List[Block]:
  """Every member's controller must ask for the same block (rounds, compiled block
  size, evaluation, data): a session runs its members in lockstep.

  Args:
    members: the session's members.
    blocks: each member's `fedjax_dp.algorithms.interface.Block`, or None (no more
      rounds).
    done: the rounds run so far (for the message).

  Returns:
    The blocks (every member has one), or ``[]`` when every member is done.

  Raises:
    FedJaxDpError: naming the options in which the first disagreeing member differs
      from member 0.
  """
  def shape(b):
    return None if b is None else (b.rounds, b.block_size, b.eval_every)

  def words(b):
    return ("no more rounds" if b is None else
            f"{b.rounds} rounds in blocks of {b.block_size}, evaluated every "
            f"{b.eval_every}")

  b0 = blocks[0]
  for i, b in enumerate(blocks[1:], 1):
    ok = shape(b) == shape(b0)
    if ok and b is not None and b0 is not None:  # the same shape: both blocks, or both None
      ok = ((b.population is None) == (b0.population is None)
            and (b.population is None or same_tree(b.population, b0.population)))
    if not ok:
      diff = differing(members, 0, i)
      raise FedJaxDpError(
          f"{flags(diff)}: the configurations {members[0].name} and {members[i].name} "
          f"run differently after round {done} ({words(b0)} against "
          f"{words(b)}, or different client data), but a sweep runs its configurations "
          "in lockstep; sweep it with separate runs.", option=diff[0] if diff else None)
  return [b for b in blocks if b is not None]  # all of them, or none (checked above)


def check_same_structure(members: Sequence[Configuration], schedules: Sequence[Any]
                         ) -> None:
  """The members' schedules must stack: the same fields and shapes.

  Raises:
    FedJaxDpError: naming the options of the first member that differs from member 0.
  """
  l0, t0 = jax.tree_util.tree_flatten(schedules[0])
  for i, sch in enumerate(schedules[1:], 1):
    li, ti = jax.tree_util.tree_flatten(sch)
    if ti != t0 or any(np.shape(a) != np.shape(b) for a, b in zip(li, l0)):
      diff = differing(members, 0, i)
      raise FedJaxDpError(
          f"{flags(diff)} changes the hyper-parameters' structure of the configurations "
          f"{members[0].name} and {members[i].name} (different fields or shapes), so "
          "they cannot run as one program; sweep it with separate runs.",
          option=diff[0] if diff else None)


# --- schedules and the lockstep executor -----------------------------------------------


def full_schedule(hparams: Any, rounds: int) -> Any:
  """A block's hyper-parameters with 0-d leaves broadcast to float32 ``[rounds]`` (as
  `fedjax_dp.federated.driver.run_rounds` does); other leaves as given.

  Raises:
    FedJaxDpError: a leaf with fewer than ``rounds`` entries.
  """
  sch = jax.tree_util.tree_map(
      lambda l: np.full((rounds,), l, np.float32) if np.ndim(l) == 0 else l, hparams)
  lengths = {np.shape(l)[0] for l in jax.tree_util.tree_leaves(sch)}
  if any(n < rounds for n in lengths):
    raise FedJaxDpError(f"schedule must have at least rounds={rounds} entries per leaf, "
                        f"got {sorted(lengths)}.")
  return sch


def stack(trees: Sequence[Any], xnp) -> Any:
  """The pytrees ``trees`` (same structure) stacked leaf by leaf along a new axis 0 with
  ``xnp.stack`` (``numpy`` for host schedules, ``jax.numpy`` for device states)."""
  return jax.tree_util.tree_map(lambda *a: xnp.stack(a), *trees)


def program_chunk(alg: Algorithm, cfg: RunConfig, state: ServerState, pop: PopulationData,
                  mesh: Optional[jax.sharding.Mesh], group: int) -> Optional[int]:
  """Clients per chunk (per device) of a vmapped program of ``group`` members, or None
  to keep member 0's own (``alg``, ``cfg``, initial ``state``).

  A vmapped chunk trains ``group`` copies of each of its clients at once, so the
  automatic chunk size (`fedjax_dp.federated.chunking.auto_chunk_size`, sized for one
  run's memory and, on CPUs, for its caches) is divided by ``group``: the program then
  holds at most as many client copies per chunk as one run does. Measured on the 2-core
  CPU (default HAR job, 8 seeds, 2 devices, an otherwise idle machine): 0.225 s per
  configuration and round with the single run's chunk of 14 clients, 0.16 s with 2 and
  0.145 s with 1 (one run: 0.19 s). Chunking changes only the order of the float sums
  (every client's keys come from its population id), so each configuration's results
  equal its own run's up to rounding. None when the run's ``chunk_size`` is given (it
  is kept), the algorithm has no padded cohort (``k_max``), or ``group`` is 1.
  """
  from fedjax_dp.federated import chunking, engine
  k_max = getattr(alg, "k_max", None)
  if cfg.chunk_size is not None or not k_max or group <= 1:
    return None
  per_device = -(-int(k_max) // sharding.mesh_size(mesh))
  params = sum(int(np.size(l)) for l in jax.tree_util.tree_leaves(state.params))
  single = chunking.auto_chunk_size(per_device, params, engine.client_data_bytes(pop))
  chunk = max(1, single // group)
  return chunk if chunk < single else None


class Lockstep:
  """The compiled block of a session's members and their device states.

  One member runs ``block_fn`` itself: exactly the program and arguments of a single
  run. Several run it under ``jax.jit(jax.vmap(block_fn, in_axes=(0, None, 0, 0, None,
  None)))`` in groups of at most ``group`` members (one vmapped program per group, one
  after another): their states ``[k, ...]`` (replicated over ``mesh``), schedules
  ``[k, L]`` and root keys ``[k]`` stacked, the population, evaluation mask and
  evaluation data shared.

  Attributes:
    groups: the members' indices of each program.
    vmapped: whether the block runs vmapped (more than one member).
  """

  def __init__(self, block_fn, states: Sequence[Any], roots: Sequence[Any], mesh,
               group: Optional[int] = None):
    n = len(states)
    self.vmapped = n > 1
    k = n if group is None else min(group, n)
    self.groups = [list(range(g, min(g + k, n))) for g in range(0, n, k)]
    if self.vmapped:
      self._fn = jax.jit(jax.vmap(block_fn, in_axes=(0, None, 0, 0, None, None)))
      self._states = [sharding.replicate(stack([states[i] for i in g], jnp), mesh)
                      for g in self.groups]
      self._roots = [jnp.stack([roots[i] for i in g]) for g in self.groups]
    else:
      self._fn, self._states, self._roots = block_fn, [states[0]], [roots[0]]

  def run(self, population, hps: Sequence[Any], eval_mask: np.ndarray, eval_data
          ) -> List[Tuple[Any, List[np.ndarray]]]:
    """Runs one compiled block of ``L`` rounds for every member.

    Args:
      population: the device population of these rounds (shared).
      hps: each member's hyper-parameters of the block (leaves ``[L, ...]``).
      eval_mask: bool ``[L]``: after which rounds the model is evaluated.
      eval_data: the evaluation data (shared).

    Returns:
      Per member ``(metrics, evals)``: its `RoundMetrics` (leaves ``[L, ...]``; device
      arrays for a single member, host arrays otherwise) and its evaluation values
      (host arrays ``[L]``, NaN where not evaluated).
    """
    out = []
    for gi, g in enumerate(self.groups):
      hp = hps[g[0]] if not self.vmapped else stack([hps[i] for i in g], np)
      self._states[gi], (metrics, evals) = self._fn(
          self._states[gi], population, hp, self._roots[gi], eval_mask, eval_data)
      evals = [np.asarray(v) for v in evals]
      if not self.vmapped:
        out.append((metrics, evals))
        continue
      host = jax.device_get(metrics)
      for j in range(len(g)):
        out.append((jax.tree_util.tree_map(lambda a, j=j: a[j], host),
                    [v[j] for v in evals]))
    return out

  def snapshot(self) -> List[Any]:
    """The current device states of the programs (immutable arrays: keeping the list
    keeps these states)."""
    return list(self._states)

  def member_state(self, i: int, snapshot: Optional[List[Any]] = None) -> Any:
    """Member ``i``'s server state, now or in ``snapshot`` (`snapshot`'s value)."""
    states = self._states if snapshot is None else snapshot
    if not self.vmapped:
      return states[0]
    for gi, g in enumerate(self.groups):
      if i in g:
        j = g.index(i)
        return jax.tree_util.tree_map(lambda a: a[j], states[gi])
    raise IndexError(f"no member {i} in a session of {sum(map(len, self.groups))}")
