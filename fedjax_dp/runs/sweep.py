"""Sweeps: many configurations of one run (seeds, noise multipliers, clip norms, learning
rates) trained together as one ``jax.vmap``-ped compiled program (``fedjax-dp sweep``).

Privacy parameters and learning rates are data, not compiled constants
(`fedjax_dp.federated.round.RoundHParams`), so configurations that differ only in them
run the *same* round function on different inputs: a sweep stacks the configurations'
server states, hyper-parameter schedules and root keys along a new leading axis and
runs the driver's scan block (`fedjax_dp.federated.make_block_fn`, with evaluation
inside) under ``jax.jit(jax.vmap(block, in_axes=(0, None, 0, 0, None, None)))``: the
population, the evaluation mask and the test set are shared
(`fedjax_dp.runs.program.Lockstep`). Everything else is done per configuration by the
one driver of runs and sweeps (`fedjax_dp.runs.session`; a run is a session of one
member): its own `Algorithm` (built on the host), its own initial state and root key,
its own privacy ledger fed with the rounds' own reported (noise multiplier, sampling
rate, steps), its own controller, and its own output folder with ``metrics.jsonl``,
``summary.json`` (the same keys as a single run's, plus ``"sweep"``), ``curves.png``
and ``checkpoints/``.

That the configurations are one program is checked, not assumed: the block function of
every configuration is traced (``jax.make_jaxpr``) on the same abstract arguments and
must give the same jaxpr with the same constants (`fedjax_dp.runs.program.program`);
an option that changes it (a number of local steps, a cohort size) is refused, naming
it. A sweep loads its data once (``data_seed``: ``--data-seed``, else the first seed,
saved in every member's configuration so that ``fedjax-dp run --config
<member>/summary.json`` repeats that member exactly). Ctrl-C or SIGTERM stops it after
the block in progress with every member's records, checkpoint and summary written;
``fedjax-dp sweep --resume <out>`` continues it (`fedjax_dp.runs.sweep_resume`). It
names no algorithm.

The sweep's seeds and axes are `fedjax_dp.runs.sweep_axes`'s, its command line
`fedjax_dp.runs.sweep_cli`'s and its comparison table and plot
`fedjax_dp.runs.sweep_report`'s (re-exported here).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import numpy as np

from fedjax_dp.algorithms.interface import Block, Setup
from fedjax_dp.federated import PopulationData, ServerState, make_block_fn
from fedjax_dp.federated.population import check_population
from fedjax_dp.interrupts import GracefulInterrupts
from fedjax_dp.privacy.ledger_protocol import Ledger
from fedjax_dp.runs import outputs, plots, session, sweep_resume
from fedjax_dp.runs import sweep_best_of as best_of
from fedjax_dp.runs import writers as writers_lib
from fedjax_dp.runs.config import RunConfig
from fedjax_dp.runs.program import (check_blocks, differing, flags, full_schedule,
                                    one_program, program, program_chunk, same, same_tree)
from fedjax_dp.runs.setup import (build, device_population, load_data, make_setup,
                                  with_default_noise_multiplier)
# The sweep's pieces, re-exported: seeds and axes, command line, comparison.
from fedjax_dp.runs.sweep_axes import (  # noqa: F401
    NOT_AXES, axis_fields, check_axes, check_seeds, configurations, member_name,
    parse_seeds)
from fedjax_dp.runs.sweep_cli import SWEEP_USAGE, command, parse_sweep_args  # noqa: F401
from fedjax_dp.runs.sweep_report import (  # noqa: F401
    comparison_rows, comparison_table, plot_sweep, write_comparison)
from fedjax_dp.runs.sweep_resume import SPEC_FILE, SweepPlan
from fedjax_dp.runs.sweep_select import Selection
from fedjax_dp.validation import FedJaxDpError, check_int

if TYPE_CHECKING:  # annotations only (no import at run time)
  import flax.linen as nn

  from fedjax_dp.data import FederatedData
  from fedjax_dp.models import Model

__all__ = [
    "SWEEP_FILES", "SweepMember", "SweepResult", "fresh_sweep_dir", "run_sweep",
    "NOT_AXES", "axis_fields", "check_axes", "check_seeds", "configurations",
    "member_name", "parse_seeds", "SWEEP_USAGE", "command", "parse_sweep_args",
    "comparison_rows", "comparison_table", "plot_sweep", "write_comparison",
]

#: Files of the sweep's own folder (the members' folders are beside them).
SWEEP_FILES = ("sweep.json", "sweep.md", "sweep.png", "partition.png", SPEC_FILE)


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
  config: RunConfig
  state: Optional[ServerState] = None
  records: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  summary: Dict[str, Any] = dataclasses.field(default_factory=dict)
  ledger: Optional[Ledger] = None


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
    axes: the sweep's axes ``{option: [values]}`` (a resumed sweep's saved ones).
    interrupted: None, or (a signal stopped it) ``{"signal", "rounds_done",
      "rounds_planned", "resume"}``: every member is summarised at its newest
      checkpoint, and ``resume`` is the command that continues the sweep.
    selection: with ``select``: sweep.json's ``selection``
      (`fedjax_dp.runs.sweep_select.selection_summary`), else None.
  """
  members: List[SweepMember]
  rows: List[Dict[str, Any]]
  out: Optional[str]
  wall_time_s: float
  programs: int = 1
  axes: Dict[str, List[Any]] = dataclasses.field(default_factory=dict)
  interrupted: Optional[Dict[str, Any]] = None
  selection: Optional[Dict[str, Any]] = None


# --- the sweep's folder -----------------------------------------------------------------


def _holds_sweep(folder: str) -> bool:
  if not os.path.isdir(folder):
    return False
  if outputs.holds_run(folder) or any(os.path.exists(os.path.join(folder, f))
                                      for f in SWEEP_FILES):
    return True
  return any(outputs.holds_run(os.path.join(folder, d)) for d in os.listdir(folder))


def _member_folders(out: str) -> List[str]:
  """The member folders an earlier sweep in ``out`` names (its sweep.json, else its
  `SPEC_FILE`)."""
  for name, key in (("sweep.json", "folder"), (SPEC_FILE, None)):
    try:
      with open(os.path.join(out, name)) as f:
        doc = json.load(f)
      return [str(m[key]) if key else str(m) for m in doc["members"]]
    except (OSError, ValueError, KeyError, TypeError):
      continue
  return []


def fresh_sweep_dir(out: str, overwrite: bool) -> str:
  """The folder a sweep writes to: ``out`` if it holds no earlier run or sweep (nor a
  subfolder holding a run); with ``overwrite`` the earlier sweep's own files, its
  members' run files (the folders its sweep.json or sweep_config.json names) and a
  run's files in ``out`` itself are removed first, nothing else; otherwise the first
  of ``<out>-2``, ``<out>-3``, ... that holds none (logged as a warning, like a run's
  `fedjax_dp.runs.outputs.fresh_out_dir`)."""
  if not _holds_sweep(out):
    return out
  if overwrite:
    for name in _member_folders(out):
      sub = os.path.join(out, os.path.basename(name))
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


# --- the sweep ----------------------------------------------------------------------


def run_sweep(base: RunConfig, axes: Optional[Mapping[str, Sequence[Any]]] = None,
              seeds: Optional[Sequence[int]] = None, *, data_seed: Optional[int] = None,
              sweep_chunk: Optional[int] = None, progress: bool = True,
              data: Optional[FederatedData] = None,
              given: Optional[Sequence[str]] = None,
              model: Optional[Union[Model, nn.Module]] = None,
              select: Optional[Selection] = None) -> SweepResult:
  """Runs every configuration of a sweep as one vmapped compiled program and writes
  one run folder per configuration plus the comparison (see the module docstring).

  Args:
    base: a `RunConfig`: everything a single run takes. Its ``out`` is the sweep's
      folder (None: nothing written); each configuration writes to
      ``<out>/<member_name>``. With ``resume`` (a sweep's folder) the sweep there is
      continued from the newest round of which every configuration has a checkpoint,
      with its saved configuration; what is given besides must be that sweep's.
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
    data: an already loaded `FederatedData` (skips loading ``base.dataset``; give it
      again to resume).
    given: with ``resume``: the options the caller set, compared with the saved
      sweep's (the command line passes those typed); default: the options of ``base``
      that differ from their defaults, the axes, and ``seeds``, ``data_seed`` and
      ``sweep_chunk`` when given.
    model: your own model instead of ``base.model``, shared by every configuration
      (as `fedjax_dp.runs.run`'s ``model``: a `fedjax_dp.models.Model` or a flax
      module); give it again to resume.
    select: a `fedjax_dp.runs.sweep_select.Selection`: a random number K of trials,
      each a configuration drawn uniformly from the grid of ``axes`` (root seed
      ``base.seed + i``); only the best by ``select.metric`` is published, with the
      selection's epsilon (`fedjax_dp.runs.sweep_best_of`).

  Ctrl-C (SIGINT) and SIGTERM let the compiled block in progress finish, with every
  configuration's records and checkpoint; then the sweep stops there and writes each
  configuration's summary (``interrupted``) and the comparison, and the result's
  ``interrupted`` says how to continue.

  Returns:
    A `SweepResult`.

  Raises:
    FedJaxDpError: bad seeds or axes, a configuration that does not validate, an
      option that changes the compiled program (its jaxpr differs: ``--X changes the
      compiled program of ALG (it is not a hyper-parameter array); sweep it with
      separate runs``), configurations whose controllers ask for different blocks
      (rounds, evaluation, data), or whose algorithm prepares different client data
      for them; with ``resume``: no sweep there, or an option that differs from the
      saved sweep's (naming it); with ``select``: `sweep_best_of.check_best_of`'s
      refusals and `sweep_best_of.check_score`'s; all before anything is trained.
  """
  t_start = time.perf_counter()
  members: List[session.Member] = []  # their files are closed however the sweep ends
  with GracefulInterrupts() as interrupts:
    try:
      plan = _plan(base, axes, seeds, data_seed, sweep_chunk, given, select)
      drawn = None if select is None else best_of.draw(plan, select)
      if select is not None and drawn is not None and not drawn["trials"]:
        return _nothing_selected(plan, select, drawn, t_start)
      writers_lib.check_installed(plan.base.logger)  # before loading data or compiling
      infos, pop, block_fn, first, resumed_at, setup_of = _prepare(
          plan, data, members, model, None if drawn is None else drawn["trials"])
      if select is not None and drawn is not None:
        _account_grid(plan, select, drawn, members, setup_of)
      out = _open_outputs(plan, infos, members, resumed_at, spec=select is None)
      done = session.execute(members, block_fn, first, population=pop,
                             mesh=members[0].setup.mesh, interrupts=interrupts,
                             t_start=t_start, progress=progress, group=plan.sweep_chunk)
      result = _result(plan, infos, members, done, out, t_start, select, drawn)
    finally:
      session.close(members)
  return best_of.remove_unchosen(result)  # once every trial's files are closed


def _account_grid(plan: SweepPlan, select: Selection, drawn: Dict[str, Any],
                  members: List[session.Member], setup_of: Callable) -> None:
  """A best-of selection, before training: its score checked on the first trial
  (`fedjax_dp.runs.sweep_best_of.check_score`), and every grid configuration's planned
  privacy in ``drawn["privacy"]`` (the undrawn ones built on the loaded data)."""
  best_of.check_score(select, members[0])
  drawn["privacy"] = best_of.grid_privacy(
      plan, drawn, members, lambda c: build(setup_of(with_default_noise_multiplier(c))))


def _plan(base: RunConfig, axes: Optional[Mapping[str, Sequence[Any]]],
          seeds: Optional[Sequence[int]], data_seed: Optional[int],
          sweep_chunk: Optional[int], given: Optional[Sequence[str]],
          select: Optional[Selection] = None) -> SweepPlan:
  """The sweep's checked configuration (a resumed sweep's saved one); with ``select``,
  `fedjax_dp.runs.sweep_best_of.check_best_of`'s refusals first."""
  if select is not None:
    best_of.check_best_of(base, axes, seeds)
  if base.resume is not None:
    return sweep_resume.resumed_plan(base, axes, seeds, data_seed, sweep_chunk, given)
  base.validate()
  seeds = check_seeds([base.seed] if seeds is None else list(seeds))
  axes = check_axes(base.algorithm, axes)
  if sweep_chunk is not None:
    sweep_chunk = check_int("sweep_chunk", sweep_chunk, minimum=1)
  if data_seed is None:
    data_seed = base.data_seed if base.data_seed is not None else seeds[0]
  data_seed = check_int("data_seed", data_seed, minimum=0, maximum=2**32 - 1)
  return SweepPlan(base, axes, seeds, data_seed, sweep_chunk)


def _prepare(plan: SweepPlan, data: Optional[FederatedData],
             members: List[session.Member],
             model: Optional[Union[Model, nn.Module]] = None,
             trials: Optional[Sequence[Tuple[str, Dict[str, Any], RunConfig]]] = None
             ) -> Tuple[List[SweepMember], PopulationData, Callable,
                        List[Optional[Block]], Optional[int], Callable]:
  """The sweep's configurations (``infos``: ``trials``' ``(name, axes, config)`` where
  given, else the Cartesian product), data (loaded once), algorithms (built on the
  host) and members (appended to ``members``), their first blocks and the one-program
  proof: ``(infos, population, block_fn, first blocks, resumed round or None,
  setup_of)`` (``setup_of(cfg)``: a `Setup` on the loaded data)."""
  points = trials if trials is not None else [
      (member_name(p), p, cfg)
      for p, cfg in configurations(plan.base, plan.axes, plan.seeds, plan.data_seed)]
  infos = [SweepMember(i, name, p, with_default_noise_multiplier(cfg))
           for i, (name, p, cfg) in enumerate(points)]
  resumed_at, resumed = None, {}
  if plan.resume is not None:
    resumed_at, resumed = sweep_resume.resume_points(plan.resume, [m.name for m in infos])
    for m in infos:
      sweep_resume.check_member(plan.resume, m.name, resumed[m.name], m.config)
  raw = data if data is not None else load_data(infos[0].config)

  def setup_of(cfg: RunConfig) -> Setup:
    return (make_setup(cfg, data, model) if data is not None
            else make_setup(cfg, model=model, loaded=raw))
  setups = [setup_of(m.config) for m in infos]
  for i, s in enumerate(setups[1:], 1):
    if s.data is not setups[0].data and not same(s.data, setups[0].data):
      diff = differing(infos, 0, i)
      raise FedJaxDpError(
          f"{flags(diff)} changes the client data that {plan.base.algorithm} prepares "
          f"(the configurations {infos[0].name} and {infos[i].name} train on different "
          "data), but a sweep shares one dataset; sweep it with separate runs.",
          option=diff[0] if diff else None)
  pop = device_population(setups[0].data, setups[0].mesh)
  check_population(pop)
  built = [build(s, resumed[m.name].meta.get("noise_multiplier_hparam")
                 if resumed else None) for m, s in zip(infos, setups)]
  for m, s, (alg, z) in zip(infos, setups, built):
    members.append(session.start_member(m.index, m.name, m.axes, m.config, s, alg, z,
                                         resumed.get(m.name)))
  for m, ev in zip(members, session.evaluators(setups, [alg for alg, _ in built])):
    m.evaluator = ev
  first = [m.controller.next_block(m.done_before, m.planned) for m in members]
  check_blocks(members, first, members[0].done_before)
  block_fn = _one_program(plan, members, first, pop, setup_of)
  return infos, pop, block_fn, first, resumed_at, setup_of


def _one_program(plan: SweepPlan, members: List[session.Member],
                 first: Sequence[Optional[Block]], pop: PopulationData,
                 setup_of: Callable[[RunConfig], Setup]) -> Callable:
  """The block function the members share (member 0's, rebuilt with a smaller chunk
  for a vmapped program, `program_chunk`), after checking that every member's block
  (round and evaluation) traces to the same jaxpr with the same constants on member
  0's arguments, and evaluates the same data.

  Raises:
    FedJaxDpError: naming the options of the first member that differs.
  """
  import jax
  m0 = members[0]
  blocks = [make_block_fn(m.alg.round_fn, m.device_evaluator) for m in members]
  if first[0] is not None and len(members) > 1:
    length = min(first[0].block_size, first[0].rounds)
    hp0 = jax.tree_util.tree_map(lambda a: np.asarray(a)[:length],
                                 full_schedule(first[0].hparams, first[0].rounds))
    args = (m0.state, pop if first[0].population is None else first[0].population, hp0,
            m0.root, np.zeros(length, bool), m0.device_evaluator.data)
    ref = program(blocks[0], args)
    order = sorted(range(1, len(members)), key=lambda i: (len(differing(members, 0, i)), i))
    for i in order:
      what = None
      if not one_program(blocks[i], args, ref, members[i].state, m0.state):
        what = ("changes the compiled program of {alg} (it is not a hyper-parameter "
                "array: the configurations {a} and {b} trace to different jaxprs)")
      elif not same_tree(members[i].device_evaluator.data, m0.device_evaluator.data):
        what = ("changes what {alg} evaluates on (the configurations {a} and {b} have "
                "different evaluation data)")
      if what:
        diff = differing(members, 0, i)
        raise FedJaxDpError(
            f"{flags(diff)} " + what.format(alg=plan.base.algorithm, a=m0.name,
                                            b=members[i].name)
            + "; sweep it with separate runs.", option=diff[0] if diff else None)
  group = len(members) if plan.sweep_chunk is None else min(plan.sweep_chunk, len(members))
  chunk = program_chunk(m0.alg, m0.cfg, m0.state, pop, m0.setup.mesh, group)
  if chunk is None or len(members) == 1:
    return blocks[0]
  # Member 0 built with the program's smaller chunk (the same results up to rounding).
  alg, _ = build(setup_of(dataclasses.replace(m0.cfg, chunk_size=chunk)), m0.z)
  return make_block_fn(alg.round_fn, m0.device_evaluator)


def _open_outputs(plan: SweepPlan, infos: List[SweepMember],
                  members: List[session.Member], resumed_at: Optional[int],
                  spec: bool = True) -> Optional[str]:
  """The sweep's folder (a fresh one, `fresh_sweep_dir`, only now that every check has
  passed; a resumed sweep's own) with its `SPEC_FILE`, and each member's files in
  ``<out>/<name>`` (`fedjax_dp.runs.session.open_outputs`)."""
  out = plan.resume or plan.base.out
  if out and plan.resume is None:
    out = fresh_sweep_dir(out, plan.base.overwrite)
    os.makedirs(out, exist_ok=True)
    if spec:  # a best-of selection is not resumable (no spec)
      sweep_resume.write_spec(out, plan, [m.name for m in infos])
  for info, m in zip(infos, members):
    m.summary_extra = {"sweep": {
        "index": info.index, "axes": info.axes, "size": len(members), "folder": out,
        "note": ("trained in one vmapped program with the sweep's other configurations: "
                 "wall times are the sweep's")}}
    if not out:
      continue
    folder = os.path.join(out, info.name)
    if plan.resume is None:
      os.makedirs(folder, exist_ok=True)
      outputs.fresh_out_dir(folder, True)  # with --overwrite: a run left in its place
    else:  # resumed: its checkpointer is its checkpoint's, resumed_at their common round
      assert m.checkpointer is not None and resumed_at is not None
      m.checkpointer.drop_after(resumed_at)  # rounds not every member reached
    m.cfg = info.config = dataclasses.replace(m.cfg, out=folder)
    m.resume_command = f"fedjax-dp sweep --resume {out}"
    session.open_outputs(m, folder, run_name=f"{os.path.basename(out)}/{info.name}",
                         partition=False)
  return out


def _result(plan: SweepPlan, infos: List[SweepMember], members: List[session.Member],
            done: session.Session, out: Optional[str], t_start: float,
            select: Optional[Selection] = None,
            drawn: Optional[Dict[str, Any]] = None) -> SweepResult:
  """The `SweepResult` of the finished (or interrupted) members, and the sweep's own
  files: partition.png (unless ``dp_metrics_only``), sweep.json, sweep.md, sweep.png;
  with ``select``, the selection (`fedjax_dp.runs.sweep_best_of.finish`: only the
  chosen trial is kept unless ``keep_trials``)."""
  for info, m in zip(infos, members):
    info.state, info.records, info.summary, info.ledger = (m.state, m.records, m.summary,
                                                           m.ledger)
  stop = None
  if done.interrupted is not None:
    stop = dict(members[0].summary["interrupted"])
    stop["resume"] = f"fedjax-dp sweep --resume {out}" if out else None
  rows = comparison_rows(infos, list(plan.axes))
  result = SweepResult(infos, rows, out, 0.0, len(done.lockstep.groups), dict(plan.axes),
                       stop)
  if select is not None and drawn is not None:
    result.selection = best_of.finish(result, select, drawn, plan.base.delta)
  if out:
    if not any(m.config.dp_metrics_only for m in infos):  # raw label counts
      plots.plot_partition(members[0].setup.data, os.path.join(out, "partition.png"))
    write_comparison(result, plan.axes, plan.seeds, plan.data_seed, plan.sweep_chunk)
  result.wall_time_s = time.perf_counter() - t_start
  if out:  # the final wall time in sweep.json
    write_comparison(result, plan.axes, plan.seeds, plan.data_seed, plan.sweep_chunk,
                     plot=False)
  return result


def _nothing_selected(plan: SweepPlan, select: Selection, drawn: Dict[str, Any],
                      t_start: float) -> SweepResult:
  """K = 0: nothing trained; sweep.json holds the selection alone (in a fresh folder)."""
  out = plan.base.out
  result = SweepResult([], [], out, 0.0, 0, dict(plan.axes), None,
                       best_of.nothing_selected(select, drawn))
  if out:
    out = result.out = fresh_sweep_dir(out, plan.base.overwrite)
    os.makedirs(out, exist_ok=True)
    outputs.write_atomic(os.path.join(out, "sweep.json"), json.dumps(outputs.json_safe(
        {"algorithm": plan.base.algorithm, "axes": dict(plan.axes), "configurations": 0,
         "selection": result.selection}), indent=2))
  result.wall_time_s = time.perf_counter() - t_start
  return result
