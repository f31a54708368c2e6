"""Multi-round driver: blocks of jitted rounds under ``lax.scan``, metrics streamed out.

The host loop runs ``ceil(rounds / block_size)`` compiled blocks. Each block scans the
round function over a slice of the per-round hyper-parameter schedule (so sigma, q or C
may change every round without recompiling) and returns the stacked `RoundMetrics`.
Between blocks the host composes the block's DpEvents in the privacy ledger, evaluates
the model, and hands one record per round to a callback (progress bar, metrics.jsonl).
At most two block shapes are compiled: full blocks and one shorter final block.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.federated.population import check_population
from fedjax_dp.federated.round import (PopulationData, RoundHParams, RoundMetrics,
                                       check_sampling_rate)
from fedjax_dp.federated.server import ServerState
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.ledger_protocol import Ledger, PrivacyReport
from fedjax_dp.privacy.multi_release import (RELEASE_METRICS, check_release_name,
                                             release_field)
from fedjax_dp.validation import FedJaxDpError, check_int

PyTree = Any


class DeviceEvaluator(NamedTuple):
  """A test set resident on the device and the jittable ``fn(params, data) -> (loss,
  accuracy, ...)`` that reduces over it (`make_device_evaluator`), one float32 scalar
  per entry of ``names`` (records get ``test_<name>``). Passed to `make_block_fn` /
  `run_rounds`, it evaluates *inside* the compiled block."""
  fn: Callable
  data: Any
  names: tuple = ("loss", "accuracy")


def make_block_fn(round_fn: Callable, evaluator: Optional[DeviceEvaluator] = None) -> Callable:
  """``block(state, data, hp_block, root_key[, eval_mask, eval_data])`` jitted, returning
  ``(state, RoundMetrics [L])`` (or ``(state, (RoundMetrics [L], (loss [L], acc [L])))``
  with an evaluator).

  ``hp_block`` has a leading axis of length L (one entry per round). With an
  ``evaluator``, ``eval_mask`` (bool ``[L]``) says after which rounds of the block the
  model is evaluated on ``eval_data`` inside the scan (``lax.cond``: no host round
  trip); rounds not evaluated report NaN. The mask is data, so changing when to
  evaluate never recompiles.
  """

  if evaluator is None:
    def block(state, data, hp_block, root_key):
      def body(s, hp):
        return round_fn(s, data, hp, root_key)
      return jax.lax.scan(body, state, hp_block)
    return jax.jit(block)

  def block_eval(state, data, hp_block, root_key, eval_mask, eval_data):
    nan = jnp.full((), jnp.nan, jnp.float32)

    def body(s, xs):
      hp, do_eval = xs
      s, m = round_fn(s, data, hp, root_key)
      res = jax.lax.cond(do_eval, lambda p: tuple(
          jnp.asarray(v, jnp.float32) for v in evaluator.fn(p, eval_data)),
                         lambda p: (nan,) * len(evaluator.names), s.params)
      return s, (m, res)

    return jax.lax.scan(body, state, (hp_block, eval_mask))

  return jax.jit(block_eval)


def constant_schedule(hp: RoundHParams, rounds: int) -> RoundHParams:
  """Broadcasts scalar hyper-parameters to a ``[rounds]`` schedule (float32 arrays;
  a ``[d]`` leaf becomes ``[rounds, d]``; None fields stay None, e.g. a
  ``sampling_rate`` left to the sampler)."""
  return jax.tree_util.tree_map(
      lambda v: np.broadcast_to(np.asarray(v, np.float32), (rounds,) + np.shape(v)).copy(),
      hp)


def _eval_fn(model) -> Callable:
  """``fn(params, (xb, yb, mb)) -> (mean loss, accuracy)`` over padded test batches
  ``xb [nb, bs, ...]`` (``lax.map`` over batches; rows with ``mb == 0`` are padding)."""

  def fn(params, data):
    xs, ys, ms = data

    def one(args):
      xi, yi, mi = args
      logits = model.apply(params, xi)
      loss = model.per_example_loss(logits, yi)
      correct = (jnp.argmax(logits, -1) == yi).astype(jnp.float32)
      return jnp.sum(loss * mi), jnp.sum(correct * mi)

    losses, corrects = jax.lax.map(one, (xs, ys, ms))
    total = jnp.maximum(jnp.sum(ms), 1.0)
    return jnp.sum(losses) / total, jnp.sum(corrects) / total

  return fn


def device_eval_fn(model) -> Callable:
  """The ``fn`` of `make_device_evaluator` for ``model``, without a test set: e.g. to
  evaluate several models of one architecture (a sweep's) on one test set placed once
  (``evaluator._replace(fn=device_eval_fn(model))``)."""
  return _eval_fn(model)


def _padded_test_set(x, y, batch_size: int):
  """Device arrays ``(xb [nb, bs, ...], yb [nb, bs], mb [nb, bs])`` of a test set padded
  to a multiple of ``bs = min(batch_size, n)``.

  Raises:
    FedJaxDpError: empty or mismatched arrays, or a bad batch size.
  """
  x = np.asarray(x)
  y = np.asarray(y)
  if len(y) == 0 or len(x) != len(y):
    raise FedJaxDpError(f"test set must be non-empty with len(x) == len(y), got {len(x)} "
                        f"and {len(y)}.")
  batch_size = check_int("batch_size", batch_size, minimum=1)
  n = len(y)
  bs = min(batch_size, n)
  nb = math.ceil(n / bs)
  pad = nb * bs - n
  xb = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)]).reshape(
      (nb, bs) + x.shape[1:]).astype(np.float32)
  yb = np.concatenate([y, np.zeros((pad,), y.dtype)]).astype(np.int32).reshape(nb, bs)
  mb = (np.arange(nb * bs) < n).astype(np.float32).reshape(nb, bs)
  return jnp.asarray(xb), jnp.asarray(yb), jnp.asarray(mb)


def make_evaluator(model, batch_size: int = 1024) -> Callable:
  """``evaluate(params, x, y) -> {"loss", "accuracy"}`` over a whole test set, on the host
  side of the loop (for evaluation inside compiled rounds use `make_device_evaluator`).

  The test set is padded on the host to a multiple of ``batch_size`` (once per test
  array) and reduced with ``lax.map`` inside one jitted call (padding rows masked out).
  """
  fn = jax.jit(_eval_fn(model))
  cache: Dict[int, tuple] = {}

  def evaluate(params, x: np.ndarray, y: np.ndarray) -> Dict[str, float]:
    key = id(x)
    if key not in cache:
      cache.clear()
      cache[key] = (_padded_test_set(x, y, batch_size), x)  # x kept: its id stays valid
    loss, acc = fn(params, cache[key][0])
    return {"loss": float(loss), "accuracy": float(acc)}

  return evaluate


def make_device_evaluator(model, x: np.ndarray, y: np.ndarray,
                          batch_size: int = 1024) -> DeviceEvaluator:
  """A `DeviceEvaluator` for the test set ``x [n, ...]``, ``y [n]`` (padded on the host to
  a multiple of ``batch_size`` and moved to the device once).

  Its ``fn(params, data)`` returns the mean loss (the model's, e.g. cross-entropy) and
  the accuracy over the ``n`` real examples, float32 scalars.

  Raises:
    FedJaxDpError: empty or mismatched test arrays.
  """
  return DeviceEvaluator(_eval_fn(model), _padded_test_set(x, y, batch_size))


def _host_value(x) -> Any:
  """One round's entry of a host metric: int for integer dtypes, else float; a 1-D
  entry (a per-client extra, e.g. which devices took part) becomes a list of them."""
  arr = np.asarray(x)
  if arr.ndim == 1:
    return [_host_value(v) for v in arr]
  return int(x) if np.issubdtype(arr.dtype, np.integer) else float(x)


def _release_columns(releases: Any) -> Dict[str, Any]:
  """``RoundMetrics.releases`` (``{name: {metric: [L]}}``, host arrays) -> the record
  columns ``{name}_{metric}``.

  Raises:
    FedJaxDpError: not a dict of dicts, a bad release name, or a release whose keys are
      not exactly `fedjax_dp.privacy.multi_release.RELEASE_METRICS`.
  """
  if not isinstance(releases, dict) or not releases:
    raise FedJaxDpError(f"RoundMetrics.releases must be a non-empty dict {{release name: "
                        f"{{metric: value}}}} or None, got {type(releases).__name__}.")
  out = {}
  for name, metrics in releases.items():
    check_release_name(name, "RoundMetrics.releases")
    keys = set(metrics) if isinstance(metrics, dict) else None
    if keys != set(RELEASE_METRICS):
      raise FedJaxDpError(f"RoundMetrics.releases[{name!r}] must be a dict with exactly the "
                          f"keys {list(RELEASE_METRICS)}, got "
                          f"{sorted(keys) if keys is not None else metrics!r}.")
    for m in RELEASE_METRICS:
      out[release_field(name, m)] = metrics[m]
  return out


def metrics_to_records(metrics: RoundMetrics) -> List[Dict[str, Any]]:
  """Stacked device metrics ``[L]`` -> L plain-Python dicts (one host transfer).

  Per-client arrays (``client_noise_multipliers``, ``[L, N]``) are left out: the driver
  hands them to the per-client ledger. ``releases`` (several releases per round) is
  flattened into the fields ``{name}_noise_multiplier``, ``{name}_sampling_rate``,
  ``{name}_dp_steps``, ``{name}_noise_stddev``, ``{name}_sensitivity``, and ``extras``
  into one field per name (ints stay ints, the rest are floats; an extra of shape
  ``[L, N]``, one value per client, becomes a list of N per record).

  Raises:
    FedJaxDpError: malformed ``releases`` or ``extras``, or a flattened field that
      clashes with another field or a standard one (``epsilon``, ``test_loss``, ...).
  """
  host = jax.device_get(metrics._asdict())
  releases, extras = host.pop("releases", None), host.pop("extras", None)
  host = {k: v for k, v in host.items() if v is not None and k != "client_noise_multipliers"}
  added = []
  if releases is not None:
    added.append(("RoundMetrics.releases", _release_columns(releases)))
  if extras is not None:
    if not isinstance(extras, dict):
      raise FedJaxDpError(f"RoundMetrics.extras must be a dict {{name: value}} or None, got "
                          f"{type(extras).__name__}.")
    added.append(("RoundMetrics.extras", extras))
  for where, columns in added:
    for k, v in columns.items():
      if not isinstance(k, str) or not k or k in host or k in disclosure.LABELS:
        raise FedJaxDpError(f"{where} gives the field {k!r}, which is not a name or is "
                            "already a field of the record (or a standard field, "
                            "fedjax_dp.privacy.disclosure.LABELS); rename it.")
      host[k] = v
  length = len(host["round"])
  return [{k: _host_value(v[i]) for k, v in host.items()} for i in range(length)]


class ScheduleBound(NamedTuple):
  """What one per-round hyper-parameter may hold (`check_schedule`).

  Attributes:
    allowed: the allowed values in words, for the error (e.g. ``"in (0, 1]"``).
    ok: ``ok(v) -> bool array``, elementwise on a float64 array (NaN never reaches it).
    allow_inf: whether +inf passes (a clip norm of inf means "no clipping", as the
      non-private algorithms set it).
  """
  allowed: str
  ok: Callable[[np.ndarray], np.ndarray]
  allow_inf: bool = False


#: The common bounds, for the engine's table below and algorithms' `schedule_bounds`.
NON_NEGATIVE = ScheduleBound(">= 0", lambda v: v >= 0)
POSITIVE = ScheduleBound("> 0", lambda v: v > 0)
PROBABILITY = ScheduleBound("in (0, 1]", lambda v: (v > 0) & (v <= 1))
CLIP_NORM = ScheduleBound("> 0 (inf: no clipping)", lambda v: v > 0, True)

# The engine's schedule leaves (`RoundHParams` and `ClientHParams` fields, by name): what
# each round may hold. An algorithm's own hyper-parameter fields are bounded by its
# plug-in (`fedjax_dp.algorithms.interface.FederatedAlgorithm.schedule_bounds`), passed
# to `check_schedule` / `run_rounds` as ``bounds`` / ``schedule_bounds``.
_SCHEDULE_BOUNDS = {
    "noise_multiplier": NON_NEGATIVE,
    "record_noise_multiplier": NON_NEGATIVE,
    "clip_norm": CLIP_NORM,
    "record_clip_norm": CLIP_NORM,
    "learning_rate": POSITIVE,
    "server_learning_rate": POSITIVE,
    "sampling_rate": PROBABILITY,
    "record_sampling_rate": PROBABILITY,
    "param_clip_norm": CLIP_NORM,
    "final_param_clip_norm": CLIP_NORM,
    "prox_mu": NON_NEGATIVE,
    "server_noise_stddev": NON_NEGATIVE,
    "noise_stddev": NON_NEGATIVE,
    "sensitivity": POSITIVE,
    "record_denominator": POSITIVE,
    "grad_clip_norm": CLIP_NORM,
    # Any public weights >= 0: the round's sensitivity scales with their maximum
    # (`fedjax_dp.federated.round.RoundHParams.client_weights`).
    "client_weights": NON_NEGATIVE,
}


def _schedule_bounds(bounds: Optional[Mapping[str, ScheduleBound]]
                     ) -> Dict[str, ScheduleBound]:
  """The engine's bounds plus an algorithm's ``bounds`` for its own fields.

  Raises:
    FedJaxDpError: ``bounds`` not a mapping of names to `ScheduleBound`-like
      ``(allowed, ok, allow_inf)``, or naming an engine field (the engine bounds those).
  """
  if bounds is None:
    return _SCHEDULE_BOUNDS
  if not hasattr(bounds, "items"):
    raise FedJaxDpError(f"schedule bounds must be a mapping {{field: ScheduleBound}}, got "
                        f"{type(bounds).__name__}.")
  out = dict(_SCHEDULE_BOUNDS)
  for name, bound in bounds.items():
    if name in _SCHEDULE_BOUNDS:
      raise FedJaxDpError(f"schedule bounds may only name an algorithm's own fields; "
                          f"{name!r} is the engine's (bounded "
                          f"{_SCHEDULE_BOUNDS[name].allowed}).")
    if not (isinstance(bound, tuple) and len(bound) == 3 and callable(bound[1])):
      raise FedJaxDpError(f"schedule bound of {name!r} must be a ScheduleBound(allowed, "
                          f"ok, allow_inf), got {bound!r}.")
    out[name] = ScheduleBound(*bound)
  return out


def _field_name(path) -> str:
  """A schedule leaf's field: the innermost attribute or dict key on its path (a
  ``RoundHParams.client.learning_rate`` leaf is ``learning_rate``, an entry of a dict of
  an algorithm's own hyper-parameters its key)."""
  for k in reversed(path):
    if isinstance(k, jax.tree_util.GetAttrKey):
      return k.name
    if isinstance(k, jax.tree_util.DictKey):
      return str(k.key)
  return ""


def check_schedule(schedule: Any,
                   bounds: Optional[Mapping[str, ScheduleBound]] = None) -> None:
  """Every per-round hyper-parameter must be finite (clip norms may be +inf: no
  clipping), and those the engine bounds (``_SCHEDULE_BOUNDS``: noise multipliers >= 0,
  clip norms and learning rates > 0, sampling rates in (0, 1], ...) or ``bounds`` names
  within range in every round.

  Args:
    schedule: a pytree (`RoundHParams` or an algorithm's own hyper-parameters) of
      ``[rounds, ...]`` leaves; a leaf is named by its last field name.
    bounds: ``{field: ScheduleBound}`` for the algorithm's own fields (its plug-in's
      `schedule_bounds`), or None.

  Raises:
    FedJaxDpError: naming the leaf, the first offending entry and its value; or bad
      ``bounds`` (see `_schedule_bounds`).
  """
  table = _schedule_bounds(bounds)
  leaves, _ = jax.tree_util.tree_flatten_with_path(schedule)
  for path, leaf in leaves:
    name = jax.tree_util.keystr(path)
    field = _field_name(path)
    v = np.asarray(leaf, np.float64)
    allowed, ok, allow_inf = table.get(field, ("finite", None, False))
    bad = np.isnan(v) | (np.isinf(v) & ~(allow_inf & (v > 0)))
    if ok is not None:
      bad |= ~ok(np.nan_to_num(v, nan=-1.0, posinf=1.0))
    if np.any(bad):
      i = int(np.argmax(np.ravel(bad)))
      raise FedJaxDpError(f"schedule{name} must be {allowed} in every round; entry {i} "
                          f"is {float(np.ravel(v)[i])!r}.")


def account_block(ledger: Ledger, block: List[Dict[str, Any]],
                  metrics: RoundMetrics) -> None:
  """Composes a compiled block's rounds in ``ledger`` and puts the epsilon after each
  round into its record (``record["epsilon"]``): the one ledger feed of runs and sweeps.

  The ledger records `PrivacyReport.from_metrics` of the block (each round's noise
  multiplier, sampling rate and steps; per-client noise multipliers and per-release
  fields where the rounds report them) through the `Ledger` protocol; the ledger refuses
  what it cannot compose.

  Args:
    ledger: the run's ledger (`fedjax_dp.privacy.ledger_protocol.Ledger`).
    block: the block's records (`metrics_to_records`), updated in place.
    metrics: the block's `RoundMetrics` (leaves ``[rounds]``).

  Raises:
    FedJaxDpError: the rounds report what ``ledger`` cannot compose (per-client noise
      multipliers, several releases, or the reverse; the message names the ledger to
      use).
  """
  eps = ledger.record(PrivacyReport.from_metrics(metrics))
  for r, e in zip(block, eps):
    r["epsilon"] = float(e)


def block_records(metrics: RoundMetrics, ledger=None, evals: Any = None,
                  eval_mask: Any = None, names: tuple = ("loss", "accuracy"),
                  label: str = "") -> List[Dict[str, Any]]:
  """A compiled block's outputs -> one record per round: the `RoundMetrics` fields
  (`metrics_to_records`), ``test_<name>`` on the rounds ``eval_mask`` marks (from
  ``evals``, one ``[L]`` array per name), and with a ``ledger`` the rounds composed in
  it (``epsilon`` after each, `account_block`); warns when a Poisson cohort overflowed
  ``k_max`` (``label`` prefixes the warning). What `run_rounds` and the run driver
  (`fedjax_dp.runs.session`) make of every block.

  Args:
    metrics: the block's `RoundMetrics` (leaves ``[L, ...]``, device or host arrays).
    ledger: the run's ledger, or None (non-private).
    evals: the evaluation values (``[L]`` each, NaN where not evaluated), or None.
    eval_mask: bool ``[L]``: the evaluated rounds (with ``evals``).
    names: the evaluation values' names.
    label: names the run in the warning (a sweep's member), or ``""``.

  Raises:
    FedJaxDpError: as `metrics_to_records` and `account_block`.
  """
  block = metrics_to_records(metrics)
  if evals is not None:
    evals = [np.asarray(v) for v in evals]
    for i, (r, do) in enumerate(zip(block, eval_mask)):
      if do:
        r.update({f"test_{name}": float(v[i]) for name, v in zip(names, evals)})
  if ledger is not None:
    account_block(ledger, block, metrics)
  truncated = sum(r["num_truncated"] for r in block)
  if truncated:
    warnings.warn(
        f"{label + ': ' if label else ''}Poisson cohort overflowed k_max in this block: "
        f"{truncated} sampled clients were dropped (recorded as num_truncated). "
        "Increase k_max.", RuntimeWarning)
  return block


def run_rounds(round_fn: Callable, state: ServerState, data: PopulationData,
               schedule: RoundHParams, root_key: jax.Array, *, rounds: int,
               block_size: int = 10, ledger=None,
               evaluate: Optional[Callable[[PyTree], Dict[str, float]]] = None,
               eval_every: Optional[int] = None,
               device_evaluator: Optional[DeviceEvaluator] = None,
               on_round: Optional[Callable[[Dict[str, Any]], None]] = None,
               block_fn: Optional[Callable] = None,
               on_block: Optional[Callable[[ServerState, int], None]] = None,
               schedule_bounds: Optional[Dict[str, ScheduleBound]] = None):
  """Runs ``rounds`` rounds in jitted blocks and streams one record per round.

  Args:
    round_fn: from `fedjax_dp.federated.round.make_round` (or an algorithm).
    state: initial `ServerState` (its ``round`` counter continues from there).
    data: device `PopulationData`.
    schedule: `RoundHParams` whose leaves have a leading ``[rounds]`` axis
      (see `constant_schedule`); entry ``t`` (0-based position) is used in the
      ``t + 1``-th round run here. A 0-d leaf is a constant for all rounds. Leave its
      ``sampling_rate`` None: the round uses its sampler's rate (given, it must
      equal the sampler's in every round).
    root_key: the run's root PRNG key.
    rounds: number of rounds (>= 1).
    block_size: rounds per compiled block (evaluation happens at block ends).
    ledger: a `fedjax_dp.privacy.ledger_protocol.Ledger` (build it with
      `fedjax_dp.federated.round.make_ledger` for a `make_round` round, or
      ``alg.privacy.make_ledger(delta)``) or None; each block's rounds are
      recorded (`account_block`) and the RDP epsilon after each round is put in its
      record. A round with per-client noise multipliers
      (`RoundMetrics.client_noise_multipliers`) needs a
      `fedjax_dp.privacy.per_client.PerClientLedger`, which accounts for every client
      in every round; the record's epsilon is then the worst client's. A round with
      several releases (`RoundMetrics.releases`) needs a
      `fedjax_dp.privacy.multi_release.MultiReleaseLedger`, which records each
      release's fields; the record's epsilon is then that of all releases composed.
    evaluate: ``evaluate(params) -> {"loss", "accuracy"}`` run on the host at block
      ends, or None.
    eval_every: evaluate every this many rounds and after the last round (defaults to
      ``block_size``). With ``evaluate`` the rounds are rounded up to block ends; with
      ``device_evaluator`` evaluation happens exactly after those rounds.
    device_evaluator: a `DeviceEvaluator` (`make_device_evaluator`): evaluation runs
      inside the compiled block (no host round trip), so blocks may be long.
    on_round: callback receiving each round's record (dict) as blocks finish.
    block_fn: a precompiled `make_block_fn(round_fn)` to reuse across calls.
    on_block: ``on_block(state, rounds_done)`` after each block's records were handed
      to ``on_round`` (e.g. to checkpoint).
    schedule_bounds: ``{field: ScheduleBound}`` of the algorithm's own hyper-parameter
      fields (its plug-in's `FederatedAlgorithm.schedule_bounds`), checked with the
      engine's (`check_schedule`); None: the engine's fields only.

  Returns:
    ``(state, records)``; each record has the `RoundMetrics` fields (``round``: the
    round's 1-based number, ``state.round + 1`` of the state it started from, as in
    metrics.jsonl and TensorBoard) plus
    ``epsilon`` (when a ledger is given), ``test_loss``/``test_accuracy`` (rounds where
    evaluation ran), and ``wall_time_s``: seconds from the start of this call to the
    end of the compiled block that ran the round (the block's host work, its ledger
    update and records, included). Every round of one block has the same value: a
    round's own time is not observable inside the compiled ``lax.scan`` without a host
    callback in every round, which would slow the hot path. A block's time is the
    difference of consecutive blocks' ``wall_time_s``; divided by its rounds (the
    records sharing the value) it is the mean time per round of that block.

  Raises:
    FedJaxDpError: bad ``rounds``/``block_size``, a schedule shorter than ``rounds``
      or with invalid entries (`check_schedule`), a ``schedule.sampling_rate`` other
      than the sampler's of an engine round (`fedjax_dp.federated.round
      .check_sampling_rate`: a ``ValueError`` naming both), or an inconsistent population
      (`population.check_population`); all before anything is compiled. After the
      first block: a round reporting releases with a ledger that is not a
      `MultiReleaseLedger`, or the reverse, or per-client noise multipliers without a
      `PerClientLedger`.
  """
  rounds = check_int("rounds", rounds, minimum=1)
  block_size = check_int("block_size", block_size, minimum=1)
  eval_every = block_size if eval_every is None else check_int("eval_every", eval_every,
                                                                minimum=1)
  # A scalar leaf is a constant: it is broadcast to every round.
  schedule = jax.tree_util.tree_map(
      lambda l: np.full((rounds,), l, np.float32) if np.ndim(l) == 0 else l, schedule)
  lengths = {np.shape(l)[0] for l in jax.tree_util.tree_leaves(schedule)}
  if any(n < rounds for n in lengths):
    raise FedJaxDpError(
        f"schedule must have at least rounds={rounds} entries per leaf, got {sorted(lengths)}.")
  if evaluate is not None and device_evaluator is not None:
    raise FedJaxDpError("give at most one of evaluate and device_evaluator.")
  check_schedule(schedule, schedule_bounds)
  sampler = getattr(round_fn, "sampler", None)  # an engine round's (make_round)
  if sampler is not None and isinstance(schedule, RoundHParams):
    check_sampling_rate(sampler, None if schedule.sampling_rate is None
                        else np.asarray(schedule.sampling_rate)[:rounds],
                        "schedule.sampling_rate")
  check_population(data)
  block_fn = block_fn or make_block_fn(round_fn, device_evaluator)
  records: List[Dict[str, Any]] = []
  t0 = time.perf_counter()
  done, next_eval = 0, eval_every
  while done < rounds:
    length = min(block_size, rounds - done)
    hp_block = jax.tree_util.tree_map(lambda a: a[done:done + length], schedule)
    if device_evaluator is not None:
      t = np.arange(done + 1, done + length + 1)  # rounds completed after each step
      eval_mask = (t % eval_every == 0) | (t == rounds)
      state, (metrics, evals) = block_fn(state, data, hp_block, root_key, eval_mask,
                                         device_evaluator.data)
      block = block_records(metrics, ledger, evals, eval_mask, device_evaluator.names)
    else:
      state, metrics = block_fn(state, data, hp_block, root_key)
      block = block_records(metrics, ledger)
    done += length
    if evaluate is not None and (done >= next_eval or done == rounds):
      block[-1].update({f"test_{k}": v for k, v in evaluate(state.params).items()})
      while next_eval <= done:
        next_eval += eval_every
    # Per block, not per round: the rounds of a compiled block finish together (see
    # the docstring); each of them gets the block's end time.
    wall = time.perf_counter() - t0
    for r in block:
      r["wall_time_s"] = wall
      records.append(r)
      if on_round is not None:
        on_round(r)
    if on_block is not None:
      on_block(state, done)
  return state, records
