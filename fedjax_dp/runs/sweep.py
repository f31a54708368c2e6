"""Sweeps: many configurations of one run (seeds, noise multipliers, clip norms, learning
rates) trained together as one ``jax.vmap``-ped compiled program (``fedjax-dp sweep``).

Privacy parameters and learning rates are data, not compiled constants
(`fedjax_dp.federated.round.RoundHParams`), so configurations that differ only in them
run the *same* round function on different inputs: a sweep stacks the configurations'
server states, hyper-parameter schedules and root keys along a new leading axis and
runs the driver's scan block (`fedjax_dp.federated.make_block_fn`, with evaluation
inside) under ``jax.jit(jax.vmap(block, in_axes=(0, None, 0, 0, None, None)))``: the
population, the evaluation mask and the test set are shared. Everything else is done
per configuration, exactly as `fedjax_dp.runs.run` does it: its own `Algorithm`
(built on the host), its own initial state and root key, its own privacy ledger fed
with the rounds' own reported (noise multiplier, sampling rate, steps), its own
controller, and its own output folder with ``metrics.jsonl``, ``summary.json`` (the
same keys as a single run's, plus ``"sweep"``) and ``curves.png``.

That the configurations are one program is checked, not assumed: the block function of
every configuration is traced (``jax.make_jaxpr``) on the same abstract arguments and
must give the same jaxpr with the same constants; an option that changes it (a number
of local steps, a cohort size) is refused, naming it. A sweep loads its data once
(``data_seed``: ``--data-seed``, else the first seed, saved in every member's
configuration so that ``fedjax-dp run --config <member>/summary.json`` repeats that
member exactly). It names no algorithm.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import time
import typing
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int

#: Options that cannot be axes: they fix the data every configuration shares (it is
#: loaded once), the device layout, or they are the seeds (``seeds``). The partition
#: fields (``dirichlet_alpha``, ...) are added from `fedjax_dp.data.partition`.
_NOT_AXES = {
    "seed": "give the seeds with --seeds (seeds=[...] in Python)",
    "data_seed": "the data is loaded once for all configurations (give one --data-seed)",
    "num_clients": "the data is loaded once for all configurations",
    "devices": "the device layout is one for the whole sweep",
    "chunk_size": "it changes the compiled program (the chunk layout of the cohort)",
    "resume_rounds": "a sweep cannot be resumed",
}

#: Files of the sweep's own folder (the members' folders are beside them).
SWEEP_FILES = ("sweep.json", "sweep.md", "sweep.png", "partition.png")


@dataclasses.dataclass
class SweepMember:
  """One configuration of a sweep and its outcome.

  Attributes:
    index: position in the sweep (the Cartesian product of the axes in the order
      given, seeds innermost).
    name: folder name, e.g. ``noise_multiplier=2.0,seed=3``.
    axes: ``{option: value}`` of this configuration's axis values (``seed`` included).
    config: its `RunConfig` (validated; what its summary.json's ``config`` holds).
    state: final server state (a pytree of device arrays).
    records: per-round records (0-based ``round``), as `fedjax_dp.runs.RunResult`'s.
    summary: its summary.json (dict).
    ledger: its privacy ledger (None for a non-private algorithm).
  """
  index: int
  name: str
  axes: Dict[str, Any]
  config: Any
  state: Any = None
  records: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  summary: Dict[str, Any] = dataclasses.field(default_factory=dict)
  ledger: Any = None


@dataclasses.dataclass
class SweepResult:
  """What `run_sweep` returns.

  Attributes:
    members: one `SweepMember` per configuration, in sweep order.
    rows: the comparison table: one dict per setting of the non-seed axes (see
      `comparison_rows`).
    out: the sweep's folder (None: nothing written).
    wall_time_s: seconds from the call to the end of the last write.
    programs: how many vmapped programs ran side by side each block (``ceil(S /
      sweep_chunk)``).
  """
  members: List[SweepMember]
  rows: List[Dict[str, Any]]
  out: Optional[str]
  wall_time_s: float
  programs: int = 1


# --- checking seeds and axes ---------------------------------------------------------


def parse_seeds(text: str) -> List[int]:
  """``"0-7"`` (inclusive), ``"0,3,5"`` or a mix (``"0-3,8"``) -> the list of seeds.

  Raises:
    FedJaxDpError (option ``seeds``): empty items, non-integers, a range whose end is
      below its start, seeds out of [0, 2**32 - 1], or a seed given twice.
  """
  seeds: List[int] = []
  for item in str(text).split(","):
    item = item.strip()
    m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", item)
    if m:
      lo, hi = int(m.group(1)), int(m.group(2))
      if hi < lo:
        raise FedJaxDpError(f"seeds: the range {item!r} ends below its start; write "
                            f"LO-HI with LO <= HI, e.g. 0-7.", option="seeds")
      seeds.extend(range(lo, hi + 1))
    elif re.fullmatch(r"\d+", item):
      seeds.append(int(item))
    else:
      raise FedJaxDpError(f"seeds must be non-negative integers and ranges separated by "
                          f"commas, e.g. 0-7 or 0,3,5; got {text!r} (the item {item!r}).",
                          option="seeds")
  return check_seeds(seeds)


def check_seeds(seeds: Sequence[int]) -> List[int]:
  """The seeds as a list of ints.

  Raises:
    FedJaxDpError (option ``seeds``): not a non-empty sequence of distinct integers
      in [0, 2**32 - 1].
  """
  if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
    raise FedJaxDpError(f"seeds must be a non-empty list of integers, got {seeds!r}.",
                        option="seeds")
  out = []
  for s in seeds:
    try:
      out.append(check_int("seeds", s, minimum=0, maximum=2**32 - 1))
    except FedJaxDpError as e:
      raise FedJaxDpError(f"seeds: {e}", option="seeds") from None
  dup = sorted({s for s in out if out.count(s) > 1})
  if dup:
    raise FedJaxDpError(f"seeds must be distinct, got {dup[0]} more than once in {out}.",
                        option="seeds")
  return out


def _numeric_type(hint) -> Optional[type]:
  """``int`` or ``float`` for a field typed (Optional) int / float, or a number or a
  word (``Union[float, Literal["adaptive"]]``: its numbers are the axis), else None
  (bools, strings, choices)."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  args = [a for a in typing.get_args(hint) if a is not type(None)
          and typing.get_origin(a) is not typing.Literal]
  if typing.get_origin(hint) is typing.Union and len(args) == 1:
    hint = args[0]
  return hint if hint in (int, float) else None


def axis_fields(algorithm: str) -> Dict[str, type]:
  """``{option: int or float}``: the numeric options of the run and of ``algorithm``
  that a sweep may take as axes (every numeric field of `RunConfig` and of the
  algorithm's ``Options``, except those in ``_NOT_AXES`` and the partition fields)."""
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import RunConfig
  hints = {**typing.get_type_hints(RunConfig, include_extras=True),
           **typing.get_type_hints(registry.get(algorithm).Options, include_extras=True)}
  names = RunConfig.option_names(algorithm)
  out = {}
  for name in names:
    t = _numeric_type(hints.get(name))
    if t is not None and name not in _not_axes():
      out[name] = t
  return out


def _not_axes() -> Dict[str, str]:
  from fedjax_dp.data import partition as partition_lib
  extra = {f: "the data is loaded once for all configurations"
           for f in getattr(partition_lib, "FIELD_PARAMS", {})}
  return {**_NOT_AXES, **extra}


def check_axes(algorithm: str, axes: Optional[Mapping[str, Sequence[Any]]]
               ) -> Dict[str, List[Any]]:
  """The sweep's axes ``{option: [values]}`` with names normalised (dashes to
  underscores, flag aliases such as ``client_lr`` to their field) and values typed
  (floats for float options, ints for int options).

  Raises:
    FedJaxDpError (option: the axis): an unknown option, one that is not numeric (a
      choice, a string, a flag) or cannot be an axis (`_NOT_AXES`), an empty list, a
      value of the wrong type, or a value given twice.
  """
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import RunConfig, flag_aliases
  if axes is None:
    return {}
  if not isinstance(axes, Mapping):
    raise FedJaxDpError(f"axes must be a dict {{option: [values]}}, got "
                        f"{type(axes).__name__}.", option="axes")
  aliases = {**flag_aliases(RunConfig), **flag_aliases(registry.get(algorithm).Options)}
  numeric = axis_fields(algorithm)
  known = RunConfig.option_names(algorithm)
  out: Dict[str, List[Any]] = {}
  for raw, values in axes.items():
    name = aliases.get(str(raw).replace("-", "_"), str(raw).replace("-", "_"))
    if name in _not_axes():
      raise FedJaxDpError(f"{name} cannot be a sweep axis: {_not_axes()[name]}.",
                          option=name)
    if name not in known:
      raise FedJaxDpError(f"axes: unknown option {raw!r} of {algorithm}; a sweep axis is "
                          f"one of its numeric options: {', '.join(sorted(numeric))}.",
                          option=name)
    if name not in numeric:
      raise FedJaxDpError(f"{name} is not a numeric option, so it cannot be a sweep axis "
                          f"(axes are numeric options given as comma lists, e.g. "
                          f"--noise-multiplier 1,2,3; numeric options of {algorithm}: "
                          f"{', '.join(sorted(numeric))}).", option=name)
    if name in out:
      raise FedJaxDpError(f"axes: {name} is given twice.", option=name)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
      raise FedJaxDpError(f"{name}: a sweep axis needs a non-empty list of values, got "
                          f"{values!r}.", option=name)
    typed = []
    for v in values:
      if numeric[name] is int:
        ok = (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or (
            isinstance(v, float) and v.is_integer())
      else:
        ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
      if not ok:
        raise FedJaxDpError(f"{name}: every value of a sweep axis must be "
                            f"{'an integer' if numeric[name] is int else 'a number'}, "
                            f"got {v!r} in {list(values)!r}.", option=name)
      typed.append(int(v) if numeric[name] is int else float(v))
    dup = [v for v in typed if typed.count(v) > 1]
    if dup:
      raise FedJaxDpError(f"{name}: the values of a sweep axis must be distinct, got "
                          f"{dup[0]!r} twice in {typed}.", option=name)
    out[name] = typed
  return out


def _fmt(v: Any) -> str:
  """An axis value in a folder name: ints as written, floats by ``repr``."""
  return str(v) if isinstance(v, int) else repr(float(v))


def member_name(axes: Mapping[str, Any]) -> str:
  """The folder name of a configuration: ``option=value`` pairs joined by commas (the
  non-seed axes in the order given, then ``seed``); letters, digits, ``_ . - + = ,``
  only, so it is a valid file name on every common file system."""
  return ",".join(f"{k}={_fmt(v)}" for k, v in axes.items())


def configurations(base, axes: Mapping[str, List[Any]], seeds: Sequence[int],
                   data_seed: int) -> List[Tuple[Dict[str, Any], Any]]:
  """``[(axis values, RunConfig)]``: the Cartesian product of ``axes`` (in the order
  given) and ``seeds`` (innermost), each a copy of ``base`` with those values and
  ``data_seed``, validated (`RunConfig.validate`).

  Raises:
    FedJaxDpError: a configuration that does not validate (naming the option).
  """
  from fedjax_dp.runs.config import RunConfig
  run_fields = set(RunConfig.run_fields())
  names = list(axes)
  out = []
  for values in itertools.product(*(axes[n] for n in names), seeds):
    point = dict(zip(names + ["seed"], values))
    run_kw = {k: v for k, v in point.items() if k in run_fields}
    alg_kw = {k: v for k, v in point.items() if k not in run_fields}
    # A value typed on the command line replaces the other of an EXCLUSIVE pair.
    for a, b in getattr(type(base.options), "EXCLUSIVE", ()):
      for one, other in ((a, b), (b, a)):
        if one in alg_kw and other not in alg_kw:
          alg_kw[other] = None
    cfg = dataclasses.replace(base, data_seed=data_seed,
                              options=dataclasses.replace(base.options, **alg_kw),
                              **run_kw)
    out.append((point, cfg.validate()))
  return out


# --- the sweep ----------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
  """Equal values (arrays by content, dataclasses field by field)."""
  if a is b:
    return True
  if dataclasses.is_dataclass(a) and type(a) is type(b):
    return all(_same(getattr(a, f.name), getattr(b, f.name))
               for f in dataclasses.fields(a))
  if isinstance(a, (np.ndarray, np.generic)) or hasattr(a, "__array__"):
    if not (isinstance(b, (np.ndarray, np.generic)) or hasattr(b, "__array__")):
      return False
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  try:
    return bool(a == b)
  except Exception:  # noqa: BLE001 (incomparable: not the same)
    return False


def _same_tree(a: Any, b: Any) -> bool:
  """Same pytree structure and equal leaves."""
  import jax
  la, ta = jax.tree_util.tree_flatten(a)
  lb, tb = jax.tree_util.tree_flatten(b)
  return ta == tb and all(_same(x, y) for x, y in zip(la, lb))


def _jaxpr_consts(closed) -> List[Any]:
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


def _program(block_fn, args) -> Tuple[str, List[Any]]:
  """``(jaxpr text, constants)`` of the block function on ``args``: two configurations
  are one program when both agree."""
  import jax
  fn = getattr(block_fn, "__wrapped__", block_fn)  # trace the scan itself, not a jit call
  closed = jax.make_jaxpr(fn)(*args)
  return str(closed), _jaxpr_consts(closed)


def _differing(members: Sequence[SweepMember], i: int, j: int) -> List[str]:
  return [k for k in members[i].axes if members[i].axes[k] != members[j].axes[k]]


def _flags(names: Sequence[str]) -> str:
  return ", ".join("--" + ("seeds" if n == "seed" else n.replace("_", "-")) for n in names)


def _load_data(cfg):
  """The dataset of ``cfg`` (loaded once for the whole sweep): the same call as
  `fedjax_dp.runs.loop.make_setup` makes, with ``cfg.data_seed``."""
  from fedjax_dp.data import load_dataset
  dataset = cfg.dataset or cfg.plugin.default_dataset
  method, part_kw = cfg.partition_options()
  seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
  return load_dataset(dataset, partition=method, num_clients=cfg.num_clients, seed=seed,
                      data_dir=cfg.data_dir, verify_checksums=cfg.verify_checksums,
                      **part_kw)


def _holds_sweep(folder: str) -> bool:
  from fedjax_dp.runs import outputs
  if not os.path.isdir(folder):
    return False
  if outputs.holds_run(folder) or any(os.path.exists(os.path.join(folder, f))
                                      for f in SWEEP_FILES):
    return True
  return any(outputs.holds_run(os.path.join(folder, d)) for d in os.listdir(folder))


def fresh_sweep_dir(out: str, overwrite: bool) -> str:
  """The folder a sweep writes to: ``out`` if it holds no earlier run or sweep (nor a
  subfolder holding a run); with ``overwrite`` the earlier sweep's own files, its
  members' run files (the folders its sweep.json names) and a run's files in ``out``
  itself are removed first, nothing else; otherwise the first of ``<out>-2``,
  ``<out>-3``, ... that holds none (logged as a warning, like a run's
  `fedjax_dp.runs.outputs.fresh_out_dir`)."""
  import logging

  from fedjax_dp.runs import outputs
  if not _holds_sweep(out):
    return out
  if overwrite:
    old = os.path.join(out, "sweep.json")
    folders = []
    if os.path.isfile(old):
      try:
        with open(old) as f:
          folders = [m["folder"] for m in json.load(f).get("members", [])]
      except (OSError, ValueError, KeyError, TypeError):
        folders = []
    for name in folders:
      sub = os.path.join(out, os.path.basename(str(name)))
      if os.path.isdir(sub):
        outputs.fresh_out_dir(sub, True)  # removes its run files
        if not os.listdir(sub):
          os.rmdir(sub)
    for f in SWEEP_FILES:
      if os.path.exists(os.path.join(out, f)):
        os.remove(os.path.join(out, f))
    outputs.fresh_out_dir(out, True)
    return out
  base = out.rstrip(os.sep) or out
  k = 2
  while _holds_sweep(f"{base}-{k}"):
    k += 1
  logging.getLogger(__name__).warning(
      "%s holds an earlier run or sweep; this sweep writes to %s-%d (--overwrite "
      "replaces it instead).", out, base, k)
  return f"{base}-{k}"


@dataclasses.dataclass
class _Member:
  """A member's host-side state while the sweep runs."""
  info: SweepMember
  cfg: Any
  setup: Any
  alg: Any
  z: Any
  spec: Any
  ledger: Any
  accounting: Dict[str, Any]
  planned: int
  guarded: bool
  controller: Any
  labels: Any
  root: Any
  state: Any
  written: List[Dict[str, Any]]
  fresh: List[Dict[str, Any]]
  metrics_file: Any = None
  trackers: Any = None

  def published(self, rec):
    from fedjax_dp.privacy import disclosure
    return disclosure.released(rec, self.labels) if self.cfg.dp_metrics_only else (
        disclosure.table(rec, self.labels) and rec)


def run_sweep(base, axes: Optional[Mapping[str, Sequence[Any]]] = None,
              seeds: Optional[Sequence[int]] = None, *, data_seed: Optional[int] = None,
              sweep_chunk: Optional[int] = None, progress: bool = True, data=None
              ) -> SweepResult:
  """Runs every configuration of a sweep as one vmapped compiled program and writes
  one run folder per configuration plus the comparison (see the module docstring).

  Args:
    base: a `RunConfig`: everything a single run takes. Its ``out`` is the sweep's
      folder (None: nothing written); each configuration writes to
      ``<out>/<member_name>``. ``resume`` is refused.
    axes: ``{option: [values]}`` over numeric options of the run or the algorithm
      (`check_axes`), e.g. ``{"noise_multiplier": [1.0, 2.0]}``; None: no axis.
    seeds: the root seeds (default ``[base.seed]``); every setting of the axes runs
      with each of them.
    data_seed: seed of the data partition and synthetic data shared by all
      configurations (default ``base.data_seed``, else the first seed); saved in each
      member's configuration.
    sweep_chunk: at most this many configurations per vmapped program (memory and
      compute grow linearly with it); programs run one after another each block, with
      the same results. Default: all configurations in one program.
    progress: show a tqdm progress bar over the rounds.
    data: an already loaded `FederatedData` (skips loading ``base.dataset``).

  Returns:
    A `SweepResult`.

  Raises:
    FedJaxDpError: bad seeds or axes, a configuration that does not validate, an
      option that changes the compiled program (its jaxpr differs: ``--X changes the
      compiled program of ALG (it is not a hyper-parameter array); sweep it with
      separate runs``), configurations whose controllers ask for different blocks
      (rounds, evaluation, data), or whose algorithm prepares different client data
      for them; all before anything is trained.
  """
  import jax

  from fedjax_dp.federated import driver, make_block_fn, make_device_evaluator, sharding
  from fedjax_dp.federated.population import check_population
  from fedjax_dp.privacy import disclosure
  from fedjax_dp.runs import loop, outputs
  from fedjax_dp.runs import privacy as run_privacy
  t_start = time.perf_counter()
  base.validate()
  if base.resume is not None:
    raise FedJaxDpError("resume: a sweep cannot be resumed; run it again (or resume one "
                        "member's run with fedjax-dp run --resume, if it checkpointed).",
                        option="resume")
  seeds = check_seeds([base.seed] if seeds is None else list(seeds))
  axes = check_axes(base.algorithm, axes)
  if sweep_chunk is not None:
    sweep_chunk = check_int("sweep_chunk", sweep_chunk, minimum=1)
  if data_seed is None:
    data_seed = base.data_seed if base.data_seed is not None else seeds[0]
  data_seed = check_int("data_seed", data_seed, minimum=0, maximum=2**32 - 1)
  plugin = base.plugin
  from fedjax_dp.runs import writers as writers_lib
  writers_lib.check_installed(base.logger)  # before loading data or compiling

  # The configurations, their data (loaded once) and algorithms (built on the host).
  points = configurations(base, axes, seeds, data_seed)
  members: List[SweepMember] = [
      SweepMember(i, member_name(p), p, cfg) for i, (p, cfg) in enumerate(points)]
  cfgs = [loop.with_default_noise_multiplier(m.config) for m in members]
  for m, cfg in zip(members, cfgs):
    m.config = cfg
  raw = data if data is not None else _load_data(cfgs[0])
  setups = [loop.make_setup(cfg, raw) for cfg in cfgs]
  for i, s in enumerate(setups[1:], 1):
    if s.data is not setups[0].data and not _same(s.data, setups[0].data):
      diff = _differing(members, 0, i)
      raise FedJaxDpError(
          f"{_flags(diff)} changes the client data that {base.algorithm} prepares (the "
          f"configurations {members[0].name} and {members[i].name} train on different "
          "data), but a sweep shares one dataset; sweep it with separate runs.",
          option=diff[0] if diff else None)
  data = setups[0].data
  mesh = setups[0].mesh
  pop = loop._device_population(data, mesh)
  check_population(pop)
  built = [loop.build(s) for s in setups]

  # Per configuration: privacy (as a single run sets it up), controller, initial state.
  test_is_clients = data.test_x is None or data.client_test_x is not None
  labels = disclosure.labels_for_run(test_is_clients, plugin.metric_labels,
                                     plugin.from_test_metrics)
  test_x = data.test_x if data.test_x is not None else data.x[data.example_mask]
  test_y = data.test_y if data.test_y is not None else data.y[data.example_mask]
  default_eval = None
  evaluators = []
  for (alg, _), s in zip(built, setups):
    ev = plugin.evaluator(alg, s)
    if ev is None:  # the central test set, padded and placed once for all of them
      if default_eval is None:
        default_eval = make_device_evaluator(s.model, test_x, test_y)
        default_eval = default_eval._replace(data=sharding.replicate(default_eval.data,
                                                                     mesh))
      ev = default_eval._replace(fn=driver._eval_fn(s.model))
    else:
      ev = ev._replace(data=sharding.replicate(ev.data, mesh))
    evaluators.append(ev)
  runs: List[_Member] = []
  for m, cfg, s, (alg, z), ev in zip(members, cfgs, setups, built, evaluators):
    spec = alg.privacy
    ledger, accounting = run_privacy.run_ledger(spec, cfg.accountant, cfg.delta)
    planned, guarded = cfg.rounds, (
        spec is not None and z is not None and cfg.target_epsilon is not None
        and getattr(cfg.options, plugin.noise_multiplier_option) is not None)
    if guarded:
      planned = run_privacy.budget_rounds(spec, z, cfg.rounds, cfg.target_epsilon,
                                          cfg.delta)
    root = jax.random.key(cfg.seed)
    state = alg.init(jax.random.fold_in(root, 1 << 20))
    controller = plugin.controller(alg, s, cfg.eval_every)
    controller.restore([])
    runs.append(_Member(m, cfg, s, alg, z, spec, ledger, accounting, planned, guarded,
                        controller, labels, root, state, [], []))

  # One program: every configuration's block (round + evaluation) traces to the same
  # jaxpr with the same constants on configuration 0's arguments.
  blocks = [make_block_fn(r.alg.round_fn, ev) for r, ev in zip(runs, evaluators)]
  first = [r.controller.next_block(0, r.planned) for r in runs]
  _check_blocks(members, first, 0)
  if first[0] is not None:
    length = min(first[0].block_size, first[0].rounds)
    hp0 = jax.tree_util.tree_map(lambda a: np.asarray(a)[:length], _full_schedule(
        first[0].hparams, first[0].rounds))
    args = (runs[0].state, pop if first[0].population is None else first[0].population,
            hp0, runs[0].root, np.zeros(length, bool), evaluators[0].data)
    ref = _program(blocks[0], args)
    order = sorted(range(1, len(runs)), key=lambda i: (len(_differing(members, 0, i)), i))
    for i in order:
      if not _one_program(blocks[i], args, ref, runs[i].state, runs[0].state):
        diff = _differing(members, 0, i)
        raise FedJaxDpError(
            f"{_flags(diff)} changes the compiled program of {base.algorithm} (it is "
            f"not a hyper-parameter array: the configurations {members[0].name} and "
            f"{members[i].name} trace to different jaxprs); sweep it with separate "
            "runs.", option=diff[0] if diff else None)
      if not _same_tree(evaluators[i].data, evaluators[0].data):
        diff = _differing(members, 0, i)
        raise FedJaxDpError(
            f"{_flags(diff)} changes what {base.algorithm} evaluates on (the "
            f"configurations {members[0].name} and {members[i].name} have different "
            "evaluation data); sweep it with separate runs.",
            option=diff[0] if diff else None)

  # Groups of at most sweep_chunk configurations, each one vmapped program.
  k = len(runs) if sweep_chunk is None else min(sweep_chunk, len(runs))
  groups = [list(range(g, min(g + k, len(runs)))) for g in range(0, len(runs), k)]
  program_block = blocks[0]
  program_chunk = _program_chunk(runs[0], pop, mesh, k)
  if program_chunk is not None:  # configuration 0 built with a smaller chunk
    cfg = dataclasses.replace(cfgs[0], chunk_size=program_chunk)
    alg, _ = loop.build(loop.make_setup(cfg, raw), runs[0].z)
    program_block = make_block_fn(alg.round_fn, evaluators[0])
  vblock = jax.jit(jax.vmap(program_block, in_axes=(0, None, 0, 0, None, None)))
  eval_data = evaluators[0].data

  group_states = [sharding.replicate(_stack([runs[i].state for i in g], jax.numpy), mesh)
                  for g in groups]
  group_roots = [jax.numpy.stack([runs[i].root for i in g]) for g in groups]

  # Output folders (only now, after every check has passed).
  out = base.out
  if out:
    out = fresh_sweep_dir(out, base.overwrite)
    os.makedirs(out, exist_ok=True)
    for r in runs:
      folder = os.path.join(out, r.info.name)
      os.makedirs(folder, exist_ok=True)
      outputs.fresh_out_dir(folder, True)  # with --overwrite: a run left in its place
      r.cfg = dataclasses.replace(r.cfg, out=folder)
      r.info.config = r.cfg
      r.metrics_file = open(os.path.join(folder, "metrics.jsonl"), "w")
      r.trackers = writers_lib.WriterGroup(writers_lib.make_writers(
          r.cfg.logger, folder, r.cfg.to_dict(), f"{os.path.basename(out)}/{r.info.name}"))
      r.trackers.write_hparams(r.cfg.to_dict())
  bar = None
  if progress:
    from tqdm.auto import tqdm
    bar = tqdm(total=runs[0].planned,
               desc=f"sweep of {len(runs)} {runs[0].alg.name} runs on {data.name}",
               unit="round")

  t_train = time.perf_counter()
  try:
    done = 0
    blks = first
    while blks[0] is not None:
      blk = blks[0]
      population = pop if blk.population is None else blk.population
      schedules = [_full_schedule(b.hparams, b.rounds) for b in blks]
      for sch in schedules:
        driver.check_schedule(sch)
      _check_same_structure(members, schedules)
      pos = 0
      while pos < blk.rounds:
        length = min(blk.block_size, blk.rounds - pos)
        t = np.arange(pos + 1, pos + length + 1)
        eval_mask = (t % blk.eval_every == 0) | (t == blk.rounds)
        for gi, g in enumerate(groups):
          hp = _stack([jax.tree_util.tree_map(
              lambda a: np.asarray(a)[pos:pos + length], schedules[i]) for i in g], np)
          group_states[gi], (metrics, evals) = vblock(
              group_states[gi], population, hp, group_roots[gi], eval_mask, eval_data)
          host_metrics = jax.device_get(metrics)
          host_evals = [np.asarray(v) for v in evals]
          for j, i in enumerate(g):
            one = jax.tree_util.tree_map(lambda a: a[j], host_metrics)
            _records(runs[i], one, [v[j] for v in host_evals], eval_mask,
                     evaluators[i].names, t_train)
        pos += length
        if bar is not None:
          bar.update(length)
          accs = [r.fresh[-1].get("test_accuracy") for r in runs if r.fresh]
          accs = [a for a in accs if a is not None]
          if accs:
            bar.set_postfix(mean_acc=f"{np.mean(accs):.3f}")
      done += blk.rounds
      blks = [r.controller.next_block(done, r.planned) for r in runs]
      _check_blocks(members, blks, done)
  except BaseException:
    for r in runs:
      if r.trackers is not None:
        r.trackers.close()
    raise
  finally:
    if bar is not None:
      bar.close()
    for r in runs:
      if r.metrics_file is not None:
        r.metrics_file.close()

  # Final states, evaluation and summaries, one per configuration (as a single run).
  eval_jit = jax.jit(evaluators[0].fn)
  for gi, g in enumerate(groups):
    for j, i in enumerate(g):
      runs[i].state = jax.tree_util.tree_map(lambda a: a[j], group_states[gi])
  wall = time.perf_counter() - t_start
  for r, ev in zip(runs, evaluators):
    values = eval_jit(r.state.params, eval_data)
    final = {k: float(v) for k, v in zip(ev.names, values)}
    summary = loop.common_summary(r.cfg, r.setup, r.alg, r.z, r.ledger, r.fresh,
                                  r.written, final, r.labels, r.planned, r.guarded, None,
                                  wall)
    summary.update(plugin.summary_fields(r.alg, r.setup, r.controller, r.written))
    summary["sweep"] = {"index": r.info.index, "axes": r.info.axes,
                        "size": len(runs), "folder": out,
                        "note": ("trained in one vmapped program with the sweep's other "
                                 "configurations: wall times are the sweep's")}
    summary = loop.label_summary(summary, plugin, r.setup.data, final)
    released = loop.published_summary(summary, r.cfg)
    r.info.state, r.info.records, r.info.summary, r.info.ledger = (
        r.state, r.fresh, summary, r.ledger)
    if out:
      folder = r.cfg.out
      outputs.write_atomic(os.path.join(folder, "summary.json"),
                           json.dumps(outputs.json_safe(released), indent=2))
      _plot_member([r.published(x) for x in r.written], outputs.json_safe(released),
                   os.path.join(folder, "curves.png"))
      r.trackers.write_summary(released)
      r.trackers.close()
  rows = comparison_rows(members, list(axes))
  result = SweepResult(members, rows, out, 0.0, len(groups))
  if out:
    from fedjax_dp.runs import plots
    if hasattr(plots, "plot_partition") and not any(m.config.dp_metrics_only
                                                       for m in members):
      plots.plot_partition(data, os.path.join(out, "partition.png"))  # raw label counts
    write_comparison(result, axes, seeds, data_seed, sweep_chunk)
  result.wall_time_s = time.perf_counter() - t_start
  if out:  # the final wall time in sweep.json
    write_comparison(result, axes, seeds, data_seed, sweep_chunk, plot=False)
  return result


def _stack(trees: Sequence[Any], xnp) -> Any:
  """The pytrees ``trees`` (same structure) stacked leaf by leaf along a new axis 0 with
  ``xnp.stack`` (``numpy`` for host schedules, ``jax.numpy`` for device states)."""
  import jax
  return jax.tree_util.tree_map(lambda *a: xnp.stack(a), *trees)


def _program_chunk(first: _Member, pop, mesh, group: int) -> Optional[int]:
  """Clients per chunk (per device) of the vmapped program, or None to keep
  configuration 0's own.

  A vmapped chunk trains ``group`` copies of each of its clients at once, so the
  automatic chunk size (`fedjax_dp.federated.chunking.auto_chunk_size`, sized for one
  run's memory and, on CPUs, for its caches) is divided by ``group``: the program then
  holds at most as many client copies per chunk as one run does. Measured on the 2-core
  CPU (default HAR job, 8 seeds, 2 devices, an otherwise idle machine): 0.225 s per
  configuration and round with the single run's chunk of 14 clients, 0.16 s with 2 and
  0.145 s with 1 (one run: 0.19 s). Chunking changes only the
  order of the float sums (every client's keys come from its population id), so each
  configuration's results equal its own run's up to rounding. None when the run's
  ``chunk_size`` is given (it is kept), the algorithm has no padded cohort
  (``k_max``), or ``group`` is 1.
  """
  import jax

  from fedjax_dp.federated import chunking, sharding
  from fedjax_dp.federated import round as round_lib
  k_max = getattr(first.alg, "k_max", None)
  if first.cfg.chunk_size is not None or not k_max or group <= 1:
    return None
  per_device = -(-int(k_max) // sharding.mesh_size(mesh))
  params = sum(int(np.size(l)) for l in jax.tree_util.tree_leaves(first.state.params))
  single = chunking.auto_chunk_size(per_device, params, round_lib._client_data_bytes(pop))
  chunk = max(1, single // group)
  return chunk if chunk < single else None


def _one_program(block_fn, args, ref: Tuple[str, List[Any]], state, state0) -> bool:
  """Whether ``block_fn`` on ``args`` (configuration 0's) traces to ``ref``'s jaxpr and
  constants, its own initial ``state`` having ``state0``'s structure, shapes and
  dtypes."""
  import jax
  la, ta = jax.tree_util.tree_flatten(state)
  lb, tb = jax.tree_util.tree_flatten(state0)
  if ta != tb or any(np.shape(a) != np.shape(b) or a.dtype != b.dtype
                     for a, b in zip(la, lb)):
    return False
  try:
    text, consts = _program(block_fn, args)
  except Exception:  # noqa: BLE001 (it does not even take configuration 0's arguments)
    return False
  return (text == ref[0] and len(consts) == len(ref[1])
          and all(_same(a, b) for a, b in zip(consts, ref[1])))


def _full_schedule(hparams: Any, rounds: int) -> Any:
  """A block's hyper-parameters with 0-d leaves broadcast to ``[rounds]`` (as
  `fedjax_dp.federated.driver.run_rounds` does), as host arrays.

  Raises:
    FedJaxDpError: a leaf with fewer than ``rounds`` entries.
  """
  import jax
  sch = jax.tree_util.tree_map(
      lambda l: np.full((rounds,), l, np.float32) if np.ndim(l) == 0 else np.asarray(l),
      hparams)
  lengths = {np.shape(l)[0] for l in jax.tree_util.tree_leaves(sch)}
  if any(n < rounds for n in lengths):
    raise FedJaxDpError(f"schedule must have at least rounds={rounds} entries per leaf, "
                        f"got {sorted(lengths)}.")
  return sch


def _check_blocks(members: Sequence[SweepMember], blocks: Sequence[Any], done: int) -> None:
  """Every configuration's controller must ask for the same block (rounds, compiled
  block size, evaluation, data): a sweep runs them in lockstep.

  Raises:
    FedJaxDpError: naming the options in which the first disagreeing configuration
      differs from configuration 0.
  """
  def shape(b):
    return None if b is None else (b.rounds, b.block_size, b.eval_every)

  def words(b):
    return ("no more rounds" if b is None else
            f"{b.rounds} rounds in blocks of {b.block_size}, evaluated every "
            f"{b.eval_every}")

  for i, b in enumerate(blocks[1:], 1):
    same = shape(b) == shape(blocks[0])
    if same and b is not None and (b.population is None) != (blocks[0].population is None):
      same = False
    if same and b is not None and b.population is not None:
      same = _same_tree(b.population, blocks[0].population)
    if not same:
      diff = _differing(members, 0, i)
      raise FedJaxDpError(
          f"{_flags(diff)}: the configurations {members[0].name} and {members[i].name} "
          f"run differently after round {done} ({words(blocks[0])} against "
          f"{words(b)}, or different client data), but a sweep runs its configurations "
          "in lockstep; sweep it with separate runs.", option=diff[0] if diff else None)


def _check_same_structure(members: Sequence[SweepMember], schedules: Sequence[Any]) -> None:
  """The configurations' schedules must stack: the same fields and shapes.

  Raises:
    FedJaxDpError: naming the options of the first configuration that differs.
  """
  import jax
  l0, t0 = jax.tree_util.tree_flatten(schedules[0])
  for i, sch in enumerate(schedules[1:], 1):
    li, ti = jax.tree_util.tree_flatten(sch)
    if ti != t0 or any(np.shape(a) != np.shape(b) for a, b in zip(li, l0)):
      diff = _differing(members, 0, i)
      raise FedJaxDpError(
          f"{_flags(diff)} changes the hyper-parameters' structure of the configurations "
          f"{members[0].name} and {members[i].name} (different fields or shapes), so "
          "they cannot run as one program; sweep it with separate runs.",
          option=diff[0] if diff else None)


def _records(r: _Member, metrics: Any, evals: Sequence[np.ndarray], eval_mask: np.ndarray,
             names: Sequence[str], t_train: float) -> None:
  """One configuration's share of a vmapped call (host arrays ``[L]``) -> its records,
  exactly as `fedjax_dp.federated.driver.run_rounds` and `fedjax_dp.runs.run` make
  them: evaluation fields on the evaluated rounds, the rounds composed in its ledger
  (epsilon after each), ``wall_time_s`` (seconds since ``t_train``, a
  ``time.perf_counter`` value, once its ledger is updated), then the run's accounting
  and controller fields, written to its metrics.jsonl and trackers."""
  from fedjax_dp.federated import driver
  from fedjax_dp.runs import outputs
  block = driver.metrics_to_records(metrics)
  for k, (rec, do) in enumerate(zip(block, eval_mask)):
    if do:
      rec.update({f"test_{n}": float(v[k]) for n, v in zip(names, evals)})
  if r.ledger is not None:
    driver.account_block(r.ledger, block, metrics)
  truncated = sum(rec["num_truncated"] for rec in block)
  if truncated:
    warnings.warn(
        f"{r.info.name}: Poisson cohort overflowed k_max in this block: {truncated} "
        "sampled clients were dropped (recorded as num_truncated). Increase k_max.",
        RuntimeWarning)
  wall = time.perf_counter() - t_train
  for rec in block:
    rec["wall_time_s"] = wall
    r.fresh.append(rec)
    out = dict(rec)
    out["round"] = rec["round"] + 1  # 1-based: the number of rounds completed
    out.update(r.accounting)
    out.update(r.controller.round_fields(rec))
    out = outputs.json_safe(out)
    r.written.append(out)
    if r.metrics_file is not None:
      r.metrics_file.write(json.dumps(r.published(out)) + "\n")
    if r.trackers is not None:
      r.trackers.write_scalars(out["round"], r.published(out))
  if r.metrics_file is not None:
    r.metrics_file.flush()


def _plot_member(records, summary, path: str) -> None:
  from fedjax_dp.runs import plots
  plots.plot_run(records, summary, path)


# --- the comparison -------------------------------------------------------------------


def _finite_or_none(v: Any) -> Optional[float]:
  return None if v is None or not math.isfinite(float(v)) else float(v)


def comparison_rows(members: Sequence[SweepMember], axis_names: Sequence[str]
                    ) -> List[Dict[str, Any]]:
  """One row per setting of the non-seed axes (in sweep order), over its seeds.

  Each row: the axis values; ``seeds``; ``runs``; the final test accuracy's
  ``accuracy_mean``, ``accuracy_std`` (the *sample* standard deviation over the seeds,
  ddof = 1; None for a single seed), ``accuracy_min``, ``accuracy_max``; ``epsilon``
  (the summaries' epsilon, the same for every seed: it depends on the noise, sampling
  and rounds only; when the seeds disagree, e.g. a budget guard stopping at different
  rounds, it is None and ``epsilon_range`` gives [min, max]); ``delta``; ``rounds``
  (or [min, max]); ``wall_time_s`` (the sweep's, all configurations ran together);
  ``members`` (their folder names); ``curve``: ``{"round": [...], "mean": [...],
  "min": [...], "max": [...]}`` of the test accuracy over the evaluated rounds.
  """
  settings: Dict[Tuple, List[SweepMember]] = {}
  for m in members:
    settings.setdefault(tuple(m.axes[a] for a in axis_names), []).append(m)
  rows = []
  for key, ms in settings.items():
    accs = np.asarray([m.summary["final_test_accuracy"] for m in ms], np.float64)
    eps = [m.summary.get("epsilon") for m in ms]
    eps_f = [float("inf") if e is None else float(e) for e in eps]
    rounds = [m.summary["rounds"] for m in ms]
    row = dict(zip(axis_names, key))
    row.update(
        seeds=[m.axes["seed"] for m in ms], runs=len(ms),
        accuracy_mean=float(np.mean(accs)),
        accuracy_std=float(np.std(accs, ddof=1)) if len(ms) > 1 else None,
        accuracy_min=float(np.min(accs)), accuracy_max=float(np.max(accs)),
        epsilon=_finite_or_none(eps_f[0]) if len(set(eps_f)) == 1 else None,
        epsilon_range=(None if len(set(eps_f)) == 1 else
                       [_finite_or_none(min(eps_f)), _finite_or_none(max(eps_f))]),
        delta=ms[0].summary.get("delta"),
        rounds=rounds[0] if len(set(rounds)) == 1 else [min(rounds), max(rounds)],
        wall_time_s=max(m.summary.get("wall_time_s", 0.0) for m in ms),
        members=[m.name for m in ms])
    curves = [[(r["round"] + 1, r["test_accuracy"]) for r in m.records
               if r.get("test_accuracy") is not None] for m in ms]
    common = sorted(set.intersection(*(set(t for t, _ in c) for c in curves))) if curves else []
    table = np.asarray([[dict(c)[t] for t in common] for c in curves], np.float64)
    row["curve"] = {"round": common,
                    "mean": table.mean(0).tolist() if common else [],
                    "min": table.min(0).tolist() if common else [],
                    "max": table.max(0).tolist() if common else []}
    rows.append(row)
  return rows


def _num(v: Any, digits: int = 4) -> str:
  if v is None:
    return "-"
  if isinstance(v, list):
    return f"{_num(v[0], digits)}-{_num(v[1], digits)}"
  if isinstance(v, float):
    return f"{v:.{digits}f}" if abs(v) < 1e4 else f"{v:.4g}"
  return str(v)


def comparison_table(rows: Sequence[Dict[str, Any]], axis_names: Sequence[str]) -> str:
  """The rows as a Markdown table (what sweep.md and the command line show)."""
  head = list(axis_names) + ["seeds", "final test accuracy (mean)", "std (ddof=1)",
                             "min", "max", "epsilon", "delta", "rounds", "wall time (s)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    eps = r["epsilon"] if r["epsilon_range"] is None else r["epsilon_range"]
    if eps is None:
      eps = "inf (non-private)"
    cells = [_fmt(r[a]) for a in axis_names] + [
        str(r["runs"]), _num(r["accuracy_mean"]), _num(r["accuracy_std"]),
        _num(r["accuracy_min"]), _num(r["accuracy_max"]),
        eps if isinstance(eps, str) else _num(eps, 3), f"{r['delta']:g}",
        _num(r["rounds"]), f"{r['wall_time_s']:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def write_comparison(result: SweepResult, axes: Mapping[str, List[Any]],
                     seeds: Sequence[int], data_seed: int, sweep_chunk: Optional[int],
                     plot: bool = True) -> None:
  """Writes ``sweep.json``, ``sweep.md`` and (``plot``) ``sweep.png`` into
  ``result.out``."""
  from fedjax_dp.runs import outputs
  out, members = result.out, result.members
  names = list(axes)
  s0 = members[0].summary
  doc = {
      "algorithm": s0["algorithm"], "dataset": s0["dataset"], "axes": dict(axes),
      "seeds": list(seeds), "data_seed": data_seed, "configurations": len(members),
      "sweep_chunk": sweep_chunk, "programs": result.programs,
      "wall_time_s": result.wall_time_s,
      "std": "sample standard deviation over the seeds (ddof = 1)",
      "rows": result.rows,
      "members": [{"index": m.index, "name": m.name, "axes": m.axes, "folder": m.name,
                   "final_test_accuracy": m.summary["final_test_accuracy"],
                   "epsilon": m.summary["epsilon"], "rounds": m.summary["rounds"]}
                  for m in members]}
  outputs.write_atomic(os.path.join(out, "sweep.json"),
                       json.dumps(outputs.json_safe(doc), indent=2))
  seeds_txt = ", ".join(str(s) for s in seeds)
  axes_txt = "; ".join(f"{k} in {', '.join(_fmt(v) for v in vs)}" for k, vs in axes.items())
  md = [f"# Sweep: {s0['algorithm']} on {s0['dataset']}", "",
        f"{len(members)} configurations ({axes_txt}{'; ' if axes else ''}seeds "
        f"{seeds_txt}), trained in "
        f"{result.programs} vmapped program(s) side by side, on one dataset (data seed "
        f"{data_seed}) in {result.wall_time_s:.1f} s. Final test accuracy over the seeds: "
        "mean, sample standard deviation (ddof = 1), min and max. Epsilon is each "
        "configuration's own ledger's (the same for every seed of a setting; a range "
        "where they differ). Each configuration's folder holds its metrics.jsonl, "
        "summary.json and curves.png; `fedjax-dp run --config <folder>/summary.json` "
        "repeats it alone.", "", comparison_table(result.rows, names), "",
        "| configuration | final test accuracy | epsilon | rounds |", "|---|---|---|---|"]
  for m in members:
    eps = m.summary["epsilon"]
    md.append(f"| [{m.name}]({m.name}/summary.json) | "
              f"{m.summary['final_test_accuracy']:.4f} | "
              f"{'inf' if eps is None or not math.isfinite(eps) else f'{eps:.3f}'} | "
              f"{m.summary['rounds']} |")
  outputs.write_atomic(os.path.join(out, "sweep.md"), "\n".join(md) + "\n")
  if plot:
    plot_sweep(result.rows, names, os.path.join(out, "sweep.png"),
               f"{s0['algorithm']} on {s0['dataset']}: {len(members)} configurations, "
               f"seeds {seeds_txt}")


def plot_sweep(rows: Sequence[Dict[str, Any]], axis_names: Sequence[str], path: str,
               title: str) -> str:
  """``sweep.png``: test accuracy against the round, one colour per setting of the
  non-seed axes: the mean over the seeds (line) and the min-max band over them; beside
  it the final accuracy's mean with +-1 sample std error bars against epsilon. Returns
  ``path``."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
  for k, r in enumerate(rows):
    label = ", ".join(f"{a}={_fmt(r[a])}" for a in axis_names) or "all"
    label += f" ({r['runs']} seed{'s' if r['runs'] > 1 else ''})"
    c = r["curve"]
    color = f"C{k % 10}"
    if c["round"]:
      a1.plot(c["round"], c["mean"], "-o", ms=3, color=color, label=label)
      a1.fill_between(c["round"], c["min"], c["max"], color=color, alpha=0.2, lw=0)
    eps = r["epsilon"] if r["epsilon"] is not None else (
        r["epsilon_range"][1] if r["epsilon_range"] else None)
    if eps is not None:
      a2.errorbar([eps], [r["accuracy_mean"]], yerr=[[r["accuracy_std"] or 0.0]],
                  fmt="o", color=color, capsize=4, label=label)
  a1.set_xlabel("round")
  a1.set_ylabel("test accuracy (mean; band: min-max over seeds)")
  a1.grid(alpha=0.3)
  a1.legend(fontsize=7)
  a2.set_xlabel("epsilon")
  a2.set_ylabel("final test accuracy (mean +- std, ddof=1)")
  a2.grid(alpha=0.3)
  if not a2.lines and not a2.collections:
    a2.text(0.5, 0.5, "non-private (epsilon = inf)", ha="center", transform=a2.transAxes)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


# --- the command line -----------------------------------------------------------------

SWEEP_USAGE = """\
usage: fedjax-dp sweep [RUN OPTIONS] [--seeds SEEDS] [--OPTION V1,V2,...] [--sweep-chunk K]

Runs every configuration of a sweep as one vmapped compiled program: the Cartesian
product of the seeds (--seeds 0-7, or 0,3,5; default: --seed) and of every numeric
option given as a comma list (e.g. --noise-multiplier 1,2,3 --clip-norm 0.5,1). Each
configuration writes its own run folder <out>/<option=value,...,seed=S> (metrics.jsonl,
summary.json, curves.png, its own privacy ledger); <out> (default runs/sweep) gets
sweep.json, sweep.md and sweep.png: final test accuracy mean and sample std (ddof=1)
over the seeds, and epsilon, per setting. An option that changes the compiled program
(a number of local steps, a cohort size) is refused: sweep it with separate runs.
  --seeds SEEDS      root seeds: ranges and values separated by commas (0-7, 0,3,5)
  --sweep-chunk K    at most K configurations per vmapped program (default: all; the
                     results are the same, memory and compute grow with K)
  --data-seed N      seed of the data partition shared by all (default: the first seed)
Every option of `fedjax-dp run` is taken (listed below).
"""


def _pull(argv: List[str], flag: str) -> Tuple[Optional[str], List[str]]:
  """``(value of the last flag, argv without any of them)``."""
  value, rest, i = None, [], 0
  while i < len(argv):
    tok = argv[i]
    if tok == flag:
      if i + 1 >= len(argv):
        raise FedJaxDpError(f"{flag} needs a value.", option=flag[2:].replace("-", "_"))
      value = argv[i + 1]
      i += 2
      continue
    if tok.startswith(flag + "="):
      value = tok.split("=", 1)[1]
    else:
      rest.append(tok)
    i += 1
  return value, rest


def _flag_value(argv: List[str], flag: str) -> Optional[str]:
  """The value of the last ``flag`` in ``argv`` (`fedjax_dp.runs.config.flag_value`)."""
  from fedjax_dp.runs.config import flag_value
  return flag_value(argv, flag)


def _flag_names(cls: type) -> Dict[str, str]:
  """``{flag: field}`` of a dataclass's options as the command line spells them
  (dashes for underscores, declared aliases such as ``--client-lr``)."""
  from fedjax_dp.runs.config import flag_aliases
  out = {"--" + f.name.replace("_", "-"): f.name for f in dataclasses.fields(cls)}
  out.update({"--" + alias.replace("_", "-"): name
              for alias, name in flag_aliases(cls).items()})
  return out


def _algorithm_of(argv: List[str]) -> str:
  """The algorithm the command line runs (as ``fedjax-dp run`` picks it: --algorithm,
  else the config file's, else the default)."""
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import load_config_file
  algorithm = _flag_value(argv, "--algorithm")
  if algorithm is None:
    path = _flag_value(argv, "--config")
    table = load_config_file(path) if path else {}
    algorithm = table.get("algorithm", registry.DEFAULT)
  return algorithm


def parse_sweep_args(argv: Sequence[str], parse_run_args):
  """``fedjax-dp sweep``'s arguments -> ``(base RunConfig, axes, seeds, sweep_chunk,
  CommandLineOptions, where)``.

  The sweep's own flags (``--seeds``, ``--sweep-chunk``) are taken out; every numeric
  option whose value holds commas becomes an axis and is replaced by its first value;
  the rest goes to ``parse_run_args`` (`fedjax_dp.cli.parse_run_args`, so every run
  option, config file and check is a run's). Options that are not numeric keep their
  commas (``--hidden 200,200``), except choices and flags, which cannot hold a list.

  Raises:
    FedJaxDpError: bad seeds, chunk, axis values, an axis on an option that cannot be
      one, or --distributed (a sweep runs in one process).
    Whatever ``parse_run_args`` raises for the run options.
  """
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import RunConfig
  argv = list(argv)
  seeds_text, argv = _pull(argv, "--seeds")
  chunk_text, argv = _pull(argv, "--sweep-chunk")
  algorithm = _algorithm_of(argv)
  axes_raw: Dict[str, List[str]] = {}
  flag_where: Dict[str, str] = {}
  if algorithm in registry.REGISTRY:
    options_cls = registry.get(algorithm).Options
    hints = {**typing.get_type_hints(RunConfig, include_extras=True),
             **typing.get_type_hints(options_cls, include_extras=True)}
    by_flag = {**_flag_names(RunConfig), **_flag_names(options_cls)}
    out, i = [], 0
    while i < len(argv):
      tok = argv[i]
      flag, eq, value = tok.partition("=")
      name = by_flag.get(flag) if flag.startswith("--") else None
      if name is None or (not eq and (i + 1 >= len(argv) or _is_flag(hints.get(name))
                                      or argv[i + 1].startswith("--"))):
        out.append(tok)  # not an option that takes a value here
        i += 1
        continue
      if not eq:
        value = argv[i + 1]
      if "," in value and name != "options":
        hint = hints.get(name)
        if name == "seed":
          raise FedJaxDpError(f"--seed {value}: give several seeds with --seeds "
                              f"{value}.", option="seed")
        if _numeric_type(hint) is None and _is_choice(hint):
          raise FedJaxDpError(f"{flag} is not a numeric option, so it cannot be a sweep "
                              f"axis (got {value!r}); sweep choices with separate runs.",
                              option=name)
        if _numeric_type(hint) is not None:
          items = [v.strip() for v in value.split(",")]
          typed = []
          for v in items:
            try:
              typed.append(int(v) if _numeric_type(hint) is int else float(v))
            except ValueError:
              raise FedJaxDpError(
                  f"{flag} {value}: {v!r} is not "
                  f"{'an integer' if _numeric_type(hint) is int else 'a number'} (a "
                  "sweep axis is a comma list of values).", option=name) from None
          axes_raw[name] = typed
          flag_where[name] = f"option {flag}"
          value = items[0]
      out.extend([f"{flag}={value}"] if eq else [flag, value])
      i += 1 if eq else 2
    argv = out
  axes = check_axes(algorithm, axes_raw) if algorithm in registry.REGISTRY else {}
  base, cli_opts, where, dist = parse_run_args(argv)
  if dist.joins:
    raise FedJaxDpError("distributed: a sweep runs in one process (its configurations "
                        "share the devices of this one); drop --distributed.",
                        option="distributed")
  where = {**where, **flag_where}
  seeds = None
  if seeds_text is not None:
    seeds = parse_seeds(seeds_text)
    where["seeds"] = "option --seeds"
  chunk = None
  if chunk_text is not None:
    if not re.fullmatch(r"\d+", chunk_text.strip()):
      raise FedJaxDpError(f"sweep_chunk (--sweep-chunk) must be a positive integer, got "
                          f"{chunk_text!r}.", option="sweep_chunk")
    chunk = check_int("sweep_chunk", int(chunk_text), minimum=1)
    where["sweep_chunk"] = "option --sweep-chunk"
  if "out" not in where:  # not the single run's default folder
    base = dataclasses.replace(base, out="runs/sweep")
  return base, axes, seeds, chunk, cli_opts, where


def _is_flag(hint) -> bool:
  """A bool option (``--X`` / ``--no-X``: it takes no value)."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  return hint is bool


def _is_choice(hint) -> bool:
  """A ``Literal`` or bool option (a comma list is never one of its values)."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  if typing.get_origin(hint) is typing.Union and len(args) == 1:
    hint = args[0]
  return hint is bool or typing.get_origin(hint) is typing.Literal


def command(argv: Sequence[str], parse_run_args) -> int:
  """``fedjax-dp sweep``: parse (`parse_sweep_args` with the run parser
  ``parse_run_args``), run the sweep, print the comparison table; returns the exit
  status.

  Raises:
    FedJaxDpError: as `parse_sweep_args` and `run_sweep`, with where the value came from
      (the command line prints it as one line).
    Whatever ``parse_run_args`` raises for the run options.
  """
  argv = list(argv)
  if any(t in ("-h", "--help") for t in argv):
    print(SWEEP_USAGE)
    algorithm = _flag_value(argv, "--algorithm")
    parse_run_args(["--help"] + (["--algorithm", algorithm] if algorithm else []))
    return 0
  base, axes, seeds, chunk, cli_opts, where = parse_sweep_args(argv, parse_run_args)
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(base.devices)  # one JAX CPU device per core (before JAX starts)
  try:
    result = run_sweep(base, axes, seeds, sweep_chunk=chunk,
                       progress=not cli_opts.no_progress)
  except FedJaxDpError as e:
    hint = f" ({where[e.option]})" if getattr(e, "option", None) in where else ""
    raise FedJaxDpError(f"{e}{hint}", option=getattr(e, "option", None)) from e
  m0 = result.members[0].summary
  print(f"\nsweep: {len(result.members)} configurations of {m0['algorithm']} on "
        f"{m0['dataset']} in {result.wall_time_s:.1f} s ({result.programs} vmapped "
        f"program(s) per block)")
  print(comparison_table(result.rows, list(axes)))
  print("  std: sample standard deviation over the seeds (ddof = 1)")
  if result.out:
    print(f"  outputs: {result.out}/sweep.md, sweep.json, sweep.png and one run folder "
          f"per configuration ({result.out}/{result.members[0].name}/summary.json, ...)")
  return 0
