"""The generic run loop: one configured training run, end to end, with outputs on disk.

`run` validates the `RunConfig`, loads the data (and lets the algorithm prepare it),
builds the model and the algorithm, sets its noise multiplier (given, calibrated, or
the resumed run's), runs the rounds in compiled blocks that the algorithm's controller
chooses, composes each round's DpEvent in the privacy ledger, streams
``metrics.jsonl`` (one JSON object per round, flushed as each compiled block finishes;
its ``wall_time_s`` is the block's end time, shared by the block's rounds:
`block_rounds`), checkpoints,
and writes ``summary.json``, ``curves.png`` and ``partition.png`` (`plots`); the
trackers of ``--logger`` (`writers`: TensorBoard, W&B, MLflow) get the same records.
It names no algorithm: everything algorithm-specific comes through
`fedjax_dp.algorithms.interface.FederatedAlgorithm`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.interface import Setup
from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.federated import (PopulationData, make_block_fn, make_device_evaluator,
                                 run_rounds, sharding)
from fedjax_dp.interrupts import GracefulInterrupts, RunInterrupted
from fedjax_dp.privacy import disclosure
from fedjax_dp.runs import outputs, plots
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.runs import writers as writers_lib
from fedjax_dp.runs.config import RunConfig, parse_hidden
# The summary's pieces live in `fedjax_dp.runs.summary` (re-exported for callers).
from fedjax_dp.runs.summary import (  # noqa: F401
    accounting_warnings, block_rounds, check_delta_bound, common_summary, delta_bound,
    delta_meaning, label_summary, published_summary, wall_time_note)
from fedjax_dp.validation import FedJaxDpError

#: Version of the records in metrics.jsonl and checkpoints. 2: ``noise_multiplier`` is
#: ``noise_stddev / sensitivity`` under the record's ``neighboring_relation`` (fixed-size
#: cohorts report half of what version 1 did); checkpoints of version 1 are refused.
METRICS_FORMAT = 2

#: The model of a dataset when neither ``--model`` nor the algorithm names one.
DEFAULT_MODELS = {"adult": "linear", "har": "har_cnn", "har_features": "linear",
                  "fashion_mnist": "cnn", "mnist": "cnn", "emnist": "cnn", "cifar10": "cnn",
                  "synthetic": "mlp"}


@dataclasses.dataclass
class RunResult:
  """What `run` returns: final server state, per-round records (0-based ``round``),
  the summary, the ledger."""
  state: Any
  records: List[Dict[str, Any]]
  summary: Dict[str, Any]
  ledger: Any


def run_mesh(devices: Optional[int]):
  """The client mesh over ``devices`` local devices (default all) of every process, or
  None for a single device in a single process.

  In a multi-process run (`jax.distributed`), the mesh spans the first ``devices``
  local devices of *every* process (`sharding.global_client_mesh`), so each process
  trains its share of the cohort.

  Raises:
    FedJaxDpError: more devices asked for than there are.
  """
  local = jax.local_devices()
  n = len(local) if devices is None else devices
  if n > len(local):
    raise FedJaxDpError(
        f"devices must be at most the {len(local)} local device(s), got {n} (on a CPU, "
        "start with XLA_FLAGS=--xla_force_host_platform_device_count=N).",
        option="devices")
  if jax.process_count() > 1:
    return sharding.global_client_mesh(n)
  return sharding.client_mesh(local[:n]) if n > 1 else None


def with_default_noise_multiplier(cfg: RunConfig) -> RunConfig:
  """``cfg`` with the algorithm's default noise multiplier filled in when neither it
  nor ``target_epsilon`` (which would calibrate it) is given; or, for an algorithm with
  a ``default_target_epsilon``, that target epsilon (z is then calibrated to it)."""
  plugin = cfg.plugin
  name = plugin.noise_multiplier_option
  if name is None or getattr(cfg.options, name) is not None or cfg.target_epsilon is not None:
    return cfg
  if plugin.default_target_epsilon is not None:
    if not plugin.calibrates(cfg.options):
      return cfg
    return dataclasses.replace(cfg, target_epsilon=plugin.default_target_epsilon)
  return dataclasses.replace(cfg, options=dataclasses.replace(
      cfg.options, **{name: plugin.default_noise_multiplier}))


def make_setup(cfg: RunConfig, data=None, model=None) -> Setup:
  """Loads the data (unless given), lets the algorithm prepare it, builds the model
  (unless given) and the mesh: the `Setup` the algorithm is built from.

  Args:
    cfg: the run's configuration; its partition (``partition`` spec and fields,
      `RunConfig.partition_options`) goes to `fedjax_dp.data.load_dataset`.
    data: a `FederatedData` to use instead of loading ``cfg.dataset``.
    model: a `fedjax_dp.models.Model` or a flax module (wrapped by
      `fedjax_dp.models.from_module`) to use instead of ``cfg.model``; a
      ``package.module:factory`` in ``cfg.model`` is imported and called here.

  Raises:
    FedJaxDpError: ``model`` given together with ``cfg.model``, or a model that does not
      fit the data (option ``model``).
  """
  from fedjax_dp.data import load_dataset  # deferred: keeps `import fedjax_dp` light
  from fedjax_dp.models import create_model
  from fedjax_dp.models import core as model_core
  plugin = cfg.plugin
  dataset = cfg.dataset or plugin.default_dataset
  if model is not None and cfg.model is not None:
    raise FedJaxDpError(f"model: give the model either as an argument or as the model "
                        f"option ({cfg.model!r}), not both.", option="model")
  if data is None:
    method, part_kw = cfg.partition_options()
    data = load_dataset(dataset, partition=method, num_clients=cfg.num_clients,
                        seed=cfg.seed if cfg.data_seed is None else cfg.data_seed,
                        data_dir=cfg.data_dir,
                        verify_checksums=cfg.verify_checksums, **part_kw)
  else:  # the caller's data: its own name, not the algorithm's default dataset's
    dataset = cfg.dataset or data.name
  prepared = plugin.prepare(cfg.options, cfg, data)
  data = prepared.data
  if model is not None or model_core.is_factory_spec(cfg.model):
    if model is None:
      model = model_core.model_from_factory(cfg.model, data.feature_shape, data.num_classes)
    model = model_core.as_model(model, data.feature_shape, data.num_classes)
    name = model.name
  else:
    spec = plugin.model_spec(cfg.options, cfg)
    name = (cfg.model or spec.name or DEFAULT_MODELS.get(dataset)
            or model_core.default_model_name(data.feature_shape))
    kwargs = {}
    if name in ("mlp", "cnn3"):
      kwargs = dict(spec.kwargs) if cfg.model in (None, spec.name) else {}
      if cfg.activation is not None and name == "mlp":
        kwargs["activation"] = cfg.activation
      if cfg.hidden is not None:
        kwargs["hidden"] = parse_hidden(cfg.hidden)
    model = create_model(name, data.feature_shape, data.num_classes, **kwargs)
  mesh = run_mesh(cfg.devices)
  phases = None
  if prepared.phases:
    phases = [(first, _device_population(fd, mesh)) for first, fd in prepared.phases]
  return Setup(cfg, cfg.options, data, model, mesh, prepared.extras, phases,
               model_name=name)


def _device_population(data, mesh) -> PopulationData:
  return sharding.replicate(PopulationData(
      jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts)), mesh)


def build(setup: Setup, saved_z: Any = None) -> Tuple[Any, Any]:
  """The algorithm of ``setup`` with its noise multiplier set, and that multiplier.

  The noise-multiplier hyper-parameter z (the algorithm's
  ``noise_multiplier_option``) is, in this order: ``saved_z`` (a resumed run's), the
  option's value (per-client values where the algorithm takes them), or calibrated so
  that ``rounds`` rounds spend ``target_epsilon`` through the algorithm's own
  `PrivacySpec`. None for algorithms that set their noise themselves or add none.

  Returns:
    ``(alg, z)``: an `Algorithm` and z (a float, a float32 ``[N]`` vector, or None).

  Raises:
    FedJaxDpError: ``delta`` at or above 1/n for the privacy unit's population
      (`delta_bound`), before any calibration or compilation.
  """
  cfg, plugin = setup.run, setup.run.plugin
  alg = plugin.build(setup)
  if not cfg.allow_large_delta:
    check_delta_bound(cfg.delta, delta_bound(alg.privacy, setup))
  name = plugin.noise_multiplier_option
  if name is None or alg.privacy is None:
    return alg, None
  given = getattr(setup.options, name)
  if saved_z is not None:
    z = np.asarray(saved_z, np.float32) if np.ndim(saved_z) else float(saved_z)
    return plugin.with_noise_multiplier(alg, z), z
  if given is None:
    z = run_privacy.calibrate_noise_multiplier(alg.privacy, cfg.rounds, cfg.target_epsilon,
                                               cfg.delta, cfg.accountant)
    return plugin.with_noise_multiplier(alg, z), z
  if alg.privacy.per_client:
    return alg, np.asarray(alg.config[name], np.float32)
  return alg, float(given)


def run(cfg: RunConfig, progress: bool = True, data=None, model=None) -> RunResult:
  """Runs one training job and writes ``metrics.jsonl``, ``summary.json``, ``curves.png``,
  ``partition.png`` and ``checkpoints/`` into ``cfg.out`` (unless ``cfg.out`` is None),
  and sends the configuration, each round's record and the summary to the trackers of
  ``cfg.logger`` (default ``<out>/tensorboard``; closed however the run ends; one that
  fails is dropped with a warning). On resume they get the checkpoint's rounds again
  (TensorBoard hides its earlier session's events, so each round shows once; W&B and
  MLflow start a new run).

  Args:
    cfg: a `RunConfig` (validated here, before any loading or compilation).
    progress: show a tqdm progress bar with loss, accuracy and epsilon.
    data: an already loaded `FederatedData` (skips loading ``cfg.dataset``), e.g. your
      own arrays through `fedjax_dp.data.from_client_lists`.
    model: your own model instead of ``cfg.model``: a `fedjax_dp.models.Model` or any
      flax module mapping ``[B, *feature_shape]`` to logits ``[B, num_classes]``
      (`fedjax_dp.models.from_module`). A resumed run needs the same model again.

  Ctrl-C (SIGINT) and SIGTERM stop training at a safe point (never inside a
  checkpoint write or a metrics line): the run goes back to its newest checkpoint,
  rewrites metrics.jsonl to its rounds and writes summary.json (``interrupted`` says
  so and how to resume) and curves.png for them. A fresh run checkpoints its initial
  state, so a run stopped at any time after its output folder exists can be resumed.

  Returns:
    A `RunResult`.

  Raises:
    FedJaxDpError: invalid configuration; `DatasetNotAvailableError` when the data
      is missing (its message says how to get it).
  """
  trackers = writers_lib.WriterGroup()  # filled by _run; closed even if the run fails
  with GracefulInterrupts() as interrupts:
    try:
      return _run(cfg, progress, data, interrupts, model, trackers)
    finally:
      trackers.close()


def _resumed(cfg: RunConfig):
  """``(config, checkpointer, saved meta, rounds to extend to)`` of ``cfg.resume``: the
  configuration comes from the checkpoint, so the run continues as it started."""
  checkpointer = RunCheckpointer(os.path.join(cfg.resume, "checkpoints"))
  saved = checkpointer.restore_meta()
  if saved.get("metrics_format") != METRICS_FORMAT:
    raise FedJaxDpError(
        f"resume: the checkpoint in {cfg.resume!r} was written by an earlier fedjax_dp "
        f"(metrics format {saved.get('metrics_format', 1)}, this one reads "
        f"{METRICS_FORMAT}), whose noise multipliers for fixed-size cohorts were not "
        "relative to the replace-one sensitivity; start a new run.", option="resume")
  extend_to = cfg.resume_rounds
  cfg = RunConfig.from_dict({**saved["config"], "out": cfg.resume, "resume": None,
                             "resume_rounds": None, "overwrite": False},
                            source=f"checkpoint in {cfg.resume}").validate()
  if extend_to is not None:
    if extend_to <= saved["rounds_done"]:
      raise FedJaxDpError(f"resume_rounds (--rounds with --resume) must be more than the "
                          f"{saved['rounds_done']} rounds the run in {cfg.out!r} has "
                          f"done, got {extend_to}.", option="resume_rounds")
    if "noise_multiplier_hparam" not in saved:
      raise FedJaxDpError(f"resume_rounds: the checkpoint in {cfg.out!r} does not record "
                          "the run's noise multiplier (an older fedjax_dp wrote it); "
                          "resume it without --rounds, or start a new run.",
                          option="resume_rounds")
  return cfg, checkpointer, saved, extend_to


def _rounds_dependent(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
  """The keys of an algorithm's config (other than ``rounds``) that differ between
  ``before`` and ``after``, built for different numbers of rounds."""
  def plain(v):
    if isinstance(v, dict):
      return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
      return [plain(x) for x in v]
    return np.asarray(v).tolist() if hasattr(v, "__array__") else v
  a, b = plain(before), plain(after)
  return sorted(k for k in set(a) | set(b) if k != "rounds" and a.get(k) != b.get(k))


def _run(cfg: RunConfig, progress: bool, data, interrupts: GracefulInterrupts,
         model=None, trackers: Optional[writers_lib.WriterGroup] = None) -> RunResult:
  """`run` with its signal handlers installed (``interrupts``); the experiment trackers
  of ``cfg.logger`` go into ``trackers`` (the caller closes them)."""
  cfg.validate()
  t_start = time.perf_counter()
  checkpointer, saved, extend_to = None, None, None
  if cfg.resume:
    cfg, checkpointer, saved, extend_to = _resumed(cfg)
  cfg = with_default_noise_multiplier(cfg)
  writers_lib.check_installed(cfg.logger)  # before loading data or compiling
  trackers = writers_lib.WriterGroup() if trackers is None else trackers
  plugin = cfg.plugin
  setup = make_setup(cfg, data, model)
  data = setup.data
  saved_z = saved.get("noise_multiplier_hparam") if saved is not None else None
  alg, z = build(setup, saved_z)
  if saved is not None and extend_to is not None:
    # Extending must not change the rounds already run: refused where the algorithm's
    # hyper-parameters depend on the number of rounds (a noise schedule calibrated for
    # them, say).
    rounds_before = cfg.rounds
    cfg = dataclasses.replace(cfg, rounds=extend_to)
    setup = dataclasses.replace(setup, run=cfg)
    longer, _ = build(setup, z)
    changed = _rounds_dependent(alg.config, longer.config)
    if changed:
      raise FedJaxDpError(
          f"resume_rounds: {alg.name}'s configuration depends on the number of rounds "
          f"({', '.join(changed)} change from {rounds_before} to {extend_to} rounds), so "
          "the rounds already run could not be continued as they were; start a new run "
          "with the rounds you want.", option="resume_rounds")
    alg = longer

  spec = alg.privacy
  ledger, accounting = run_privacy.run_ledger(spec, cfg.accountant, cfg.delta)
  planned = cfg.rounds
  guarded = (spec is not None and z is not None and cfg.target_epsilon is not None
             and getattr(cfg.options, plugin.noise_multiplier_option) is not None)
  if guarded:  # decided before anything is compiled or written
    planned = run_privacy.budget_rounds(spec, z, cfg.rounds, cfg.target_epsilon, cfg.delta)
  root = jax.random.key(cfg.seed)
  state = alg.init(jax.random.fold_in(root, 1 << 20))
  done_before, saved_records, meta = 0, [], {}
  if saved is not None:
    state, meta = checkpointer.restore(state)
    saved_records = meta["records"]
    done_before = int(meta["rounds_done"])
  pop = _device_population(data, setup.mesh)
  if ledger is not None and saved_records:
    ledger = run_privacy.restored_ledger(spec, cfg.delta, saved_records,
                                         meta.get("per_client_ledger"))
  test_x = data.test_x if data.test_x is not None else data.x[data.example_mask]
  test_y = data.test_y if data.test_y is not None else data.y[data.example_mask]
  # HAR's test windows are the clients' own held-out data; without a test set the
  # training data is evaluated: then test metrics are diagnostics, not DP releases.
  labels = disclosure.labels_for_run(data.test_x is None or data.client_test_x is not None,
                                     plugin.metric_labels, plugin.from_test_metrics)

  def published(rec):
    """What metrics.jsonl gets: every labelled field, or only the released ones."""
    return disclosure.released(rec, labels) if cfg.dp_metrics_only else (
        disclosure.table(rec, labels) and rec)
  # Evaluation runs inside the compiled rounds (no host round trip).
  device_eval = plugin.evaluator(alg, setup) or make_device_evaluator(setup.model, test_x,
                                                                     test_y)
  device_eval = device_eval._replace(data=sharding.replicate(device_eval.data, setup.mesh))
  eval_jit = jax.jit(device_eval.fn)

  def evaluate(params):
    values = eval_jit(params, device_eval.data)
    return {k: float(v) for k, v in zip(device_eval.names, values)}

  out = cfg.out
  metrics_file = None
  # Multi-process: process 0 writes the files and shows progress; every process saves
  # its part of each checkpoint (orbax, into the same folder).
  primary = sharding.is_primary()
  if out and saved is None:  # only now, after every check has passed
    out = outputs.fresh_out_dir(out, cfg.overwrite)  # chosen by process 0 for all
    cfg = dataclasses.replace(cfg, out=out)
  interrupted: Optional[RunInterrupted] = None
  if out:
    os.makedirs(out, exist_ok=True)
    if saved is None:
      checkpointer = RunCheckpointer(os.path.join(out, "checkpoints"))
  if out and primary:
    if not cfg.dp_metrics_only:  # the clients' raw label counts: a diagnostic
      plots.plot_partition(data, os.path.join(out, "partition.png"))
    # Trackers (--logger). On resume they get the checkpoint's rounds again, and
    # TensorBoard hides its earlier session's events (purge_step 1): one point a round.
    trackers.writers.extend(writers_lib.make_writers(
        cfg.logger, out, cfg.to_dict(), os.path.basename(os.path.normpath(out)),
        purge_step=1 if saved is not None else None))
    trackers.write_hparams(cfg.to_dict())
    # Rewritten from the checkpoint on resume: rounds after it were lost with the run.
    metrics_file = open(os.path.join(out, "metrics.jsonl"), "w")
    for rec in saved_records:
      metrics_file.write(json.dumps(published(rec)) + "\n")
      trackers.write_scalars(rec["round"], published(rec))
    metrics_file.flush()
  bar = None
  if progress and primary:
    from tqdm.auto import tqdm
    bar = tqdm(total=cfg.rounds, desc=f"{alg.name} on {data.name}", unit="round")
    bar.update(done_before)
  last = {"test_accuracy": float("nan"), "wall": 0.0}
  written: List[Dict[str, Any]] = list(saved_records)
  fresh: List[Dict[str, Any]] = []  # this session's records, as the rounds reported them

  def make_controller(records):
    """The algorithm's host-side controller, with the rounds of ``records`` replayed."""
    c = plugin.controller(alg, setup, cfg.eval_every)
    c.restore(records)
    return c
  controller = make_controller(saved_records)
  offset = {"wall": 0.0}  # seconds of this session's earlier run_rounds calls

  def on_round(r):
    r["wall_time_s"] += offset["wall"]
    fresh.append(r)
    rec = dict(r)
    rec["round"] = r["round"] + 1  # 1-based: the number of rounds completed
    rec.update(accounting)
    rec.update(controller.round_fields(r))
    rec = outputs.json_safe(rec)
    with interrupts.critical():  # a metrics line is written whole or not at all
      written.append(rec)  # the checkpoint keeps every field (resuming needs them)
      if metrics_file is not None:
        metrics_file.write(json.dumps(published(rec)) + "\n")
        metrics_file.flush()
    trackers.write_scalars(rec["round"], published(rec))  # primary only (else no writers)
    last["wall"] = r["wall_time_s"]
    if "test_accuracy" in r:
      last["test_accuracy"] = r["test_accuracy"]
    if bar is not None:
      bar.update(1)
      bar.set_postfix(loss=f"{r['train_loss']:.3f}", acc=f"{last['test_accuracy']:.3f}",
                      eps=f"{r.get('epsilon', float('inf')):.2f}")

  # The newest consistent (rounds, state, per-client ledger): what an interrupted run
  # keeps. Updated once a block's checkpoint is complete.
  per_client = spec is not None and spec.per_client
  kept = {"rounds": done_before, "state": state, "per_client": meta.get("per_client_ledger")}

  def on_block(s, rounds_done):
    ledger_dict = ledger.to_dict() if per_client else None
    # A checkpoint is written whole (orbax renames it when complete), and what the run
    # keeps moves to it in the same step.
    with interrupts.critical():
      if checkpointer is not None:
        m = {"rounds_done": rounds_done, "config": cfg.to_dict(),
             "records": written[:rounds_done], "metrics_format": METRICS_FORMAT,
             "noise_multiplier_hparam": outputs.json_safe(
                 None if z is None else np.asarray(z).tolist())}
        if per_client:
          m["per_client_ledger"] = ledger_dict
        checkpointer.save(rounds_done, s, m)
      kept.update(rounds=rounds_done, state=s, per_client=ledger_dict)
    if multi_process:  # every process stops after the same block (see below)
      signum = _signal_of_any_process(interrupts.received)
      if signum:
        raise RunInterrupted(signum)

  # Multi-process: a signal (SLURM's SIGTERM reaches the processes at slightly different
  # times) is only noted during training, and all processes agree after each block
  # whether one of them received it; a process stopping alone would leave the others
  # waiting in the next block's collectives.
  multi_process = jax.process_count() > 1
  try:
    with interrupts.critical() if multi_process else contextlib.nullcontext():
      if saved is None and checkpointer is not None:
        on_block(state, 0)  # round 0: a run stopped before its first block can resume
      block_fn = make_block_fn(alg.round_fn, device_eval)  # compiled once, reused
      done = done_before
      while (blk := controller.next_block(done, planned)) is not None:
        base = done
        state, _ = run_rounds(
            alg.round_fn, state, pop if blk.population is None else blk.population,
            blk.hparams, root, rounds=blk.rounds, block_size=blk.block_size,
            eval_every=blk.eval_every, ledger=ledger, device_evaluator=device_eval,
            on_round=on_round, block_fn=block_fn,
            on_block=lambda s, d, base=base: on_block(s, base + d))
        done += blk.rounds
        offset["wall"] = last["wall"]
  except RunInterrupted as e:
    interrupted = e
  finally:
    if bar is not None:
      bar.close()
    if metrics_file is not None:
      metrics_file.close()
  records = [dict(r, round=r["round"] - 1) for r in saved_records] + fresh
  if interrupted is not None:
    # Back to the newest checkpoint: its state, its rounds' records (metrics.jsonl
    # rewritten to match), its ledger; the summary below is of those rounds.
    state = kept["state"]
    del written[kept["rounds"]:]
    records = [dict(r, round=r["round"] - 1) for r in written]
    if out and primary:
      outputs.write_atomic(os.path.join(out, "metrics.jsonl"),
                           "".join(json.dumps(published(r)) + "\n" for r in written))
    if ledger is not None:
      ledger = run_privacy.restored_ledger(spec, cfg.delta, written, kept["per_client"])
    controller = make_controller(written)

  final = evaluate(state.params)
  summary = common_summary(cfg, setup, alg, z, ledger, records, written, final, labels,
                     planned, guarded, interrupted, time.perf_counter() - t_start)
  summary.update(plugin.summary_fields(alg, setup, controller, written))
  summary = label_summary(summary, plugin, data, final)
  released = published_summary(summary, cfg)
  if out and primary:
    outputs.write_atomic(os.path.join(out, "summary.json"),
                         json.dumps(outputs.json_safe(released), indent=2))
    plots.plot_run([published(r) for r in written], outputs.json_safe(released),
                   os.path.join(out, "curves.png"))
    trackers.write_summary(released)
  return RunResult(state, records, summary, ledger)


def _signal_of_any_process(received: Optional[int]) -> int:
  """The signal number received by the lowest-indexed process that received one (0:
  none), the same in every process of a multi-process run (a collective: all processes
  call it, after every block)."""
  from jax.experimental import multihost_utils
  got = np.asarray(multihost_utils.process_allgather(np.int32(received or 0)))
  hits = got[got != 0]
  return int(hits[0]) if hits.size else 0
