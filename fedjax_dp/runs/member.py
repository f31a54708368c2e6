"""A member of a session: one configured training run (`fedjax_dp.runs.session`).

`start_member` builds one from its configuration, setup and algorithm (or restores it
from its checkpoint, `read_checkpoint` / `Resumed`: state, records, ledger, controller
replayed); `open_outputs` opens its metrics.jsonl (rewritten from the checkpoint's
records on resume) and trackers; `evaluators` compiles the members' test-set evaluators;
`close` closes their files.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, TextIO, Tuple

import jax
import numpy as np

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.interface import Controller, Setup
from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.federated import ServerState, driver, make_device_evaluator, sharding
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.ledger_protocol import Ledger
from fedjax_dp.runs import outputs, plots
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.runs import writers as writers_lib
from fedjax_dp.runs.config import RunConfig
from fedjax_dp.runs.setup import NoiseMultiplier
from fedjax_dp.validation import FedJaxDpError

if TYPE_CHECKING:  # annotations only (no import at run time)
  from fedjax_dp.data import FederatedData

__all__ = ["METRICS_FORMAT", "Resumed", "read_checkpoint", "Member", "evaluators",
           "start_member", "open_outputs", "close"]

#: Version of the records in metrics.jsonl and checkpoints. 2: ``noise_multiplier`` is
#: ``noise_stddev / sensitivity`` under the record's ``neighboring_relation`` (fixed-size
#: cohorts report half of what version 1 did); checkpoints of version 1 are refused.
METRICS_FORMAT = 2


@dataclasses.dataclass
class Resumed:
  """A checkpoint a member continues from.

  Attributes:
    checkpointer: the member's `RunCheckpointer` (``<folder>/checkpoints``).
    step: the checkpoint's ``rounds_done`` (None: the newest).
    meta: its metadata (``config``, ``records`` with 1-based ``round``,
      ``rounds_done``, ``noise_multiplier_hparam``, ``per_client_ledger``).
  """
  checkpointer: RunCheckpointer
  step: Optional[int]
  meta: Dict[str, Any]


def read_checkpoint(folder: str, step: Optional[int] = None,
                    checkpointer: Optional[RunCheckpointer] = None) -> Resumed:
  """The checkpoint ``step`` (default: the newest) of the run in ``folder`` (read with
  ``checkpointer``, default a new one on ``<folder>/checkpoints``).

  Raises:
    FedJaxDpError (option ``resume``): no complete checkpoint there, or one written by
      an earlier fedjax_dp (another `METRICS_FORMAT`).
  """
  if checkpointer is None:
    checkpointer = RunCheckpointer(os.path.join(folder, "checkpoints"))
  meta = checkpointer.restore_meta(step)
  if meta.get("metrics_format") != METRICS_FORMAT:
    raise FedJaxDpError(
        f"resume: the checkpoint in {folder!r} was written by an earlier fedjax_dp "
        f"(metrics format {meta.get('metrics_format', 1)}, this one reads "
        f"{METRICS_FORMAT}), whose noise multipliers for fixed-size cohorts were not "
        "relative to the replace-one sensitivity; start a new run.", option="resume")
  return Resumed(checkpointer, step, meta)


@dataclasses.dataclass
class Member:
  """One configuration of a session and its host-side state while it trains.

  Attributes:
    index, name, axes: position in the session, folder name (``""`` for a run) and
      ``{option: value}`` of its sweep axes (``{}`` for a run).
    cfg, setup, alg, z: its `RunConfig`, `Setup`, `Algorithm` and noise multiplier.
    evaluator: its `DeviceEvaluator` (data on the devices; `evaluators`), set by the
      caller after `start_member` (None until then; read it as `device_evaluator`).
    labels: the disclosure labels of its records (`fedjax_dp.privacy.disclosure`).
    ledger, accounting: its privacy ledger (None: non-private) and the accounting
      fields every record carries.
    planned, guarded: the rounds to run (fewer than ``cfg.rounds`` when the budget
      guard stops early) and whether the guard is on.
    root, state: its root PRNG key and its server state (initial or restored; the
      final one after `finish`).
    controller: its host-side `Controller`.
    resumed, done_before: whether it continues from a checkpoint, and the rounds
      restored from it (0 for a fresh start).
    saved_records: the checkpoint's records (1-based ``round``, every field).
    written: every record so far (1-based ``round``, every field): what checkpoints
      keep; metrics.jsonl gets `published` of each.
    fresh: this session's records as the rounds reported them (1-based ``round``).
    records: after `finish`, every round's record (1-based ``round``).
    summary: after `finish`, its summary (every field).
    kept_per_client: the per-client ledger of its newest checkpoint.
    folder, checkpointer, metrics_file, trackers: its files (None: not written).
    summary_extra: fields added to its summary (a sweep's ``sweep``).
    resume_command: the command an interrupted summary names (default: ``fedjax-dp
      run --resume <folder>``).
  """
  index: int
  name: str
  axes: Dict[str, Any]
  cfg: RunConfig
  setup: Setup
  alg: Algorithm
  z: Optional[NoiseMultiplier]
  evaluator: Optional[driver.DeviceEvaluator]
  labels: Dict[str, Tuple[str, str]]
  ledger: Optional[Ledger]
  accounting: Dict[str, Any]
  planned: int
  guarded: bool
  root: jax.Array
  state: ServerState
  controller: Controller
  resumed: bool = False
  done_before: int = 0
  saved_records: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  written: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  fresh: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  records: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  summary: Dict[str, Any] = dataclasses.field(default_factory=dict)
  kept_per_client: Optional[Dict[str, Any]] = None
  folder: Optional[str] = None
  checkpointer: Optional[RunCheckpointer] = None
  metrics_file: Optional[TextIO] = None
  trackers: writers_lib.WriterGroup = dataclasses.field(
      default_factory=writers_lib.WriterGroup)
  summary_extra: Dict[str, Any] = dataclasses.field(default_factory=dict)
  resume_command: Optional[str] = None

  @property
  def device_evaluator(self) -> driver.DeviceEvaluator:
    """Its `evaluator` (raises ValueError while the caller has not set it)."""
    if self.evaluator is None:
      raise ValueError(f"member {self.index} has no evaluator yet (set it from "
                       "session.evaluators after start_member).")
    return self.evaluator

  @property
  def per_client(self) -> bool:
    """Whether its ledger accounts for every client separately (saved whole)."""
    return self.alg.privacy is not None and self.alg.privacy.per_client

  def published(self, rec: Dict[str, Any]) -> Dict[str, Any]:
    """What metrics.jsonl and the trackers get of a record: every labelled field, or
    only the released ones (``dp_metrics_only``)."""
    return disclosure.released(rec, self.labels) if self.cfg.dp_metrics_only else (
        disclosure.table(rec, self.labels) and rec)

  def new_controller(self, records: Sequence[Dict[str, Any]]) -> Controller:
    """Its algorithm's controller with the rounds of ``records`` (1-based) replayed."""
    c = self.cfg.plugin.controller(self.alg, self.setup, self.cfg.eval_every)
    c.restore(records)
    return c

  def checkpoint_meta(self, rounds_done: int, per_client: Optional[Dict[str, Any]]
                      ) -> Dict[str, Any]:
    """The JSON document of its checkpoint after ``rounds_done`` rounds."""
    meta = {"rounds_done": rounds_done, "config": self.cfg.to_dict(),
            "records": self.written[:rounds_done], "metrics_format": METRICS_FORMAT,
            "noise_multiplier_hparam": outputs.json_safe(
                None if self.z is None else np.asarray(self.z).tolist())}
    if self.per_client:
      meta["per_client_ledger"] = per_client
    return meta


def evaluators(setups: Sequence[Setup], algs: Sequence[Algorithm]
               ) -> List[driver.DeviceEvaluator]:
  """Each member's device evaluator: its algorithm's own (`evaluator`), else the
  test set (the training data where there is none) with its model; data on the
  devices of member 0's mesh. The central test set is padded and placed once for all
  members."""
  data: FederatedData = setups[0].data
  mesh: Optional[jax.sharding.Mesh] = setups[0].mesh
  default, out = None, []
  for alg, s in zip(algs, setups):
    ev = s.run.plugin.evaluator(alg, s)
    if ev is not None:
      out.append(ev._replace(data=sharding.replicate(ev.data, mesh)))
      continue
    if default is None:
      test_x = data.test_x if data.test_x is not None else data.x[data.example_mask]
      test_y = data.test_y if data.test_y is not None else data.y[data.example_mask]
      default = make_device_evaluator(s.model, test_x, test_y)
      default = default._replace(data=sharding.replicate(default.data, mesh))
      out.append(default)
    else:
      out.append(default._replace(fn=driver.device_eval_fn(s.model)))
  return out


def start_member(index: int, name: str, axes: Dict[str, Any], cfg: RunConfig, setup: Setup,
                 alg: Algorithm, z: Optional[NoiseMultiplier],
                 resumed: Optional[Resumed] = None) -> Member:
  """A member ready to train but for its ``evaluator`` (`evaluators`, set by the
  caller): its ledger and accounting fields, the rounds to run (the budget guard's,
  decided before anything is compiled), its root key and initial state, restored from
  ``resumed`` (state, records, ledger, controller) when given.

  Raises:
    FedJaxDpError: an accountant the ledger does not support (option ``accountant``),
      a target epsilon below one round's (option ``target_epsilon``).
  """
  plugin, spec = cfg.plugin, alg.privacy
  ledger, accounting = run_privacy.run_ledger(spec, cfg.accountant, cfg.delta)
  planned, guarded = cfg.rounds, False
  target, option = cfg.target_epsilon, plugin.noise_multiplier_option
  if (spec is not None and z is not None and target is not None and option is not None
      and getattr(cfg.options, option) is not None):
    guarded = True  # decided before anything is compiled or written
    planned = run_privacy.budget_rounds(spec, z, cfg.rounds, target, cfg.delta)
  root = jax.random.key(cfg.seed)
  state = alg.init(jax.random.fold_in(root, 1 << 20))
  meta = {}
  if resumed is not None:
    state, meta = resumed.checkpointer.restore(state, resumed.step)
  saved = list(meta.get("records", []))
  if spec is not None and ledger is not None and saved:
    ledger = run_privacy.restored_ledger(spec, cfg.delta, saved,
                                         meta.get("per_client_ledger"))
  data: FederatedData = setup.data
  # HAR's test windows are the clients' own held-out data; without a test set the
  # training data is evaluated: then test metrics are diagnostics, not DP releases.
  labels = disclosure.labels_for_run(data.test_x is None or data.client_test_x is not None,
                                     plugin.metric_labels, plugin.from_test_metrics)
  controller = plugin.controller(alg, setup, cfg.eval_every)  # as `Member.new_controller`
  controller.restore(saved)
  return Member(index, name, axes, cfg, setup, alg, z, None, labels, ledger,
                accounting, planned, guarded, root, state, controller,
                resumed=resumed is not None, done_before=int(meta.get("rounds_done", 0)),
                saved_records=saved, written=list(saved),
                kept_per_client=meta.get("per_client_ledger"),
                checkpointer=resumed.checkpointer if resumed is not None else None)


def open_outputs(m: Member, folder: str, *, run_name: str, partition: bool = True) -> None:
  """Opens member ``m``'s files in ``folder`` (created): its checkpointer (a fresh
  member's; a resumed one keeps its own), and in the primary process partition.png
  (``partition``, unless ``dp_metrics_only``), its trackers (named ``run_name``; a
  resumed member's TensorBoard hides its earlier session's events) and metrics.jsonl,
  rewritten with the checkpoint's records (rounds after it were lost with the
  session that ran them)."""
  os.makedirs(folder, exist_ok=True)
  m.folder = folder
  if not m.resumed:
    m.checkpointer = RunCheckpointer(os.path.join(folder, "checkpoints"))
  if not sharding.is_primary():
    return
  cfg = m.cfg
  if partition and not cfg.dp_metrics_only:  # the clients' raw label counts: a diagnostic
    plots.plot_partition(m.setup.data, os.path.join(folder, "partition.png"))
  m.trackers.writers.extend(writers_lib.make_writers(
      cfg.logger, folder, cfg.to_dict(), run_name, purge_step=1 if m.resumed else None))
  m.trackers.write_hparams(cfg.to_dict())
  m.metrics_file = open(os.path.join(folder, "metrics.jsonl"), "w")
  for rec in m.saved_records:
    m.metrics_file.write(json.dumps(m.published(rec)) + "\n")
    m.trackers.write_scalars(rec["round"], m.published(rec))
  m.metrics_file.flush()


def close(members: Sequence[Member]) -> None:
  """Closes the members' metrics files and trackers (however the session ended)."""
  for m in members:
    if m.metrics_file is not None:
      m.metrics_file.close()
    m.trackers.close()
