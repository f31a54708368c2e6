"""Experiment tracking: a run's configuration, per-round metrics and final numbers sent
to TensorBoard, Weights & Biases or MLflow, behind one small interface (`MetricWriter`).

``fedjax-dp run --logger tensorboard,wandb`` (`RunConfig.logger`) picks the writers;
`make_writers` builds them and `WriterGroup` is what the run loop talks to. The run's own
files (``metrics.jsonl``, ``summary.json``) stay the record of the run: a writer that
fails mid-run is reported once as a warning and dropped, and the run goes on.

What is written:

* ``write_hparams(config)``: the run's flat option table (`RunConfig.to_dict`), once at
  the start (TensorBoard's HParams dashboard, the W&B run config, MLflow params).
* ``write_scalars(step, record)``: each round's record as ``metrics.jsonl`` holds it
  (step = the 1-based round), grouped by `scalar_tag`: ``train/loss``,
  ``test/accuracy``, ``privacy/epsilon``, ``privacy/noise_multiplier``,
  ``clients/clip_fraction``, ``time/wall_time_s`` ...
* ``write_summary(summary)``: the numbers of ``summary.json`` (final test accuracy and
  loss, every epsilon, rounds, ...), as ``summary/<name>`` (W&B: the run summary).

Only numbers are sent (bool, int, float and numpy scalars; nested dicts are flattened
with ``/``); lists, strings and None are skipped, and so are NaN and +-inf (a
non-private run's epsilon = inf is absent rather than drawn as a spike).
"""

from __future__ import annotations

import importlib
import logging
import math
import numbers
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "LOGGERS", "INSTALL", "parse_logger_spec", "flatten_scalars", "scalar_tag",
    "record_scalars", "summary_scalars", "hparam_values", "MetricWriter",
    "TensorBoardWriter", "WandbWriter", "mlflow_key", "MlflowWriter", "check_installed",
    "make_writers", "WriterGroup",
]

_log = logging.getLogger(__name__)

#: The writers ``--logger`` may name (comma-separated), or ``none`` alone.
LOGGERS = ("tensorboard", "wandb", "mlflow")

#: How to install each writer's library (named in the error when it is missing).
INSTALL = {"tensorboard": "pip install tensorboardX",
           "wandb": 'pip install "fedjax_dp[trackers]"',
           "mlflow": 'pip install "fedjax_dp[trackers]"'}
_MODULES = {"tensorboard": "tensorboardX", "wandb": "wandb", "mlflow": "mlflow"}

#: Summary fields that are not final numbers (they go to the hyper-parameters or are
#: descriptions).
_NOT_SUMMARY = ("config", "algorithm_config", "metrics_disclosure")

#: Words that mark a record field as a privacy quantity (accounting parameter or the
#: privacy spent): grouped under ``privacy/``.
_PRIVACY_WORDS = ("epsilon", "delta", "noise", "sigma", "sampling_rate", "dp_steps",
                  "sensitivity", "truncation", "cohort_size", "population_size", "rho")


def parse_logger_spec(spec: Any) -> List[str]:
  """The writer names of a ``--logger`` value.

  Args:
    spec: a comma list of `LOGGERS` (``"tensorboard,wandb"``; spaces around names are
      ignored), or ``"none"`` (no writer).

  Returns:
    The names in the order given (``[]`` for ``"none"``).

  Raises:
    FedJaxDpError (option ``logger``): not a string, an empty or unknown name (the
      allowed ones are listed), a name given twice, or ``none`` with another name.
  """
  allowed = f"a comma list of {', '.join(LOGGERS)}, or none"
  if not isinstance(spec, str):
    raise FedJaxDpError(f"logger must be {allowed}; got {spec!r}.", option="logger")
  names = [n.strip().lower() for n in spec.split(",")]
  if names == ["none"]:
    return []
  for n in names:
    if n == "none":
      raise FedJaxDpError(f"logger: 'none' cannot be combined with other writers; got "
                          f"{spec!r}.", option="logger")
    if n not in LOGGERS:
      raise FedJaxDpError(f"logger must be {allowed}; got {spec!r} (unknown writer "
                          f"{n!r}).", option="logger")
  dup = sorted({n for n in names if names.count(n) > 1})
  if dup:
    raise FedJaxDpError(f"logger names each writer at most once; got {spec!r} "
                        f"({', '.join(dup)} twice).", option="logger")
  return names


def flatten_scalars(values: Mapping[str, Any], prefix: str = "") -> Dict[str, float]:
  """The finite numbers of ``values`` as floats, nested dicts flattened with ``/``.

  Args:
    values: a mapping (a metrics record, a summary); keys are converted with `str`.
    prefix: prepended to every name (``"summary/"``).

  Returns:
    ``{name: float}``: bool, int, float and numpy scalar entries that are finite; lists,
    arrays, strings, None, NaN and +-inf are left out.
  """
  out: Dict[str, float] = {}
  for k, v in values.items():
    name = f"{prefix}{k}"
    if isinstance(v, Mapping):
      out.update(flatten_scalars(v, name + "/"))
    elif isinstance(v, (bool, numbers.Real)) and not isinstance(v, complex):
      f = float(v)
      if math.isfinite(f):
        out[name] = f
  return out


def scalar_tag(field: str) -> str:
  """The grouped tag of a ``metrics.jsonl`` field.

  ``test_*`` -> ``test/*``; ``train_*`` -> ``train/*``; privacy quantities (public
  accounting parameters and epsilons: `fedjax_dp.privacy.disclosure` labels them
  "public", or the name says epsilon, noise, sigma, delta, sampling rate, ...) ->
  ``privacy/<field>``; ``wall_time_s`` -> ``time/wall_time_s``; diagnostics of the
  cohort (clip fraction, update norms, cohort size) -> ``clients/<field>``; anything
  else -> ``other/<field>``.
  """
  from fedjax_dp.privacy import disclosure
  if field.startswith("test_"):
    return "test/" + field[len("test_"):]
  if field.startswith("train_"):
    return "train/" + field[len("train_"):]
  if field == "wall_time_s":
    return "time/" + field
  kind = disclosure.LABELS.get(field, (None,))[0]
  if kind == disclosure.PUBLIC or any(w in field for w in _PRIVACY_WORDS):
    return "privacy/" + field
  if kind == disclosure.DIAGNOSTIC:
    return "clients/" + field
  return "other/" + field


def record_scalars(record: Mapping[str, Any]) -> Dict[str, float]:
  """The grouped scalars (`scalar_tag`) of one ``metrics.jsonl`` record (its ``round``
  is the step, not a scalar)."""
  return {scalar_tag(k): v for k, v in flatten_scalars(
      {k: v for k, v in record.items() if k != "round"}).items()}


def summary_scalars(summary: Mapping[str, Any]) -> Dict[str, float]:
  """The numbers of a ``summary.json`` dict (final test accuracy and loss, epsilons,
  rounds, ...; nested fields flattened with ``/``), without its ``config``,
  ``algorithm_config`` and ``metrics_disclosure``."""
  return flatten_scalars({k: v for k, v in summary.items() if k not in _NOT_SUMMARY})


def hparam_values(config: Mapping[str, Any]) -> Dict[str, Any]:
  """``config`` with every value a str, bool, int or float (others, None included,
  as their ``str``): what hyper-parameter tables take."""
  out = {}
  for k, v in config.items():
    if isinstance(v, (bool, str)):
      out[str(k)] = v
    elif isinstance(v, numbers.Integral):
      out[str(k)] = int(v)
    elif isinstance(v, numbers.Real):
      out[str(k)] = float(v)
    else:
      out[str(k)] = str(v)
  return out


class MetricWriter:
  """One experiment tracker. Subclasses implement the four methods; each is called on
  the primary process only.

  * ``write_hparams(config)``: the flat option table, once at the start.
  * ``write_scalars(step, scalars)``: one round's record (``metrics.jsonl``'s fields;
    step = the 1-based round).
  * ``write_summary(summary)``: the run's ``summary.json`` dict, at the end.
  * ``close()``: flush and release (also after an interrupted or failed run).

  Each may raise; `WriterGroup` turns a failure into one warning and drops the writer.
  """

  name = "writer"

  def write_hparams(self, config: Mapping[str, Any]) -> None:
    raise NotImplementedError

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    raise NotImplementedError

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    raise NotImplementedError

  def close(self) -> None:
    raise NotImplementedError


class TensorBoardWriter(MetricWriter):
  """TensorBoard event files through tensorboardX's ``SummaryWriter``.

  Args:
    logdir: the folder of the event files (the run loop uses ``<out>/tensorboard``).
    purge_step: on resume, the first round to be re-logged: TensorBoard hides the
      events of that round and later ones from the earlier session (the rounds run after
      the last checkpoint), so each round shows once.

  Scalars are `record_scalars`' tags; the configuration goes to the HParams dashboard
  (one session per run folder; values that are not str/bool/int/float as str) with the
  last ``test/accuracy``, ``test/loss``, ``train/loss``, ``privacy/epsilon`` and the
  final ``summary/*`` numbers as its metrics.
  """

  name = "tensorboard"

  #: The metrics the HParams dashboard shows beside the hyper-parameters.
  HPARAM_METRICS = ("test/accuracy", "test/loss", "train/loss", "privacy/epsilon",
                    "summary/final_test_accuracy", "summary/final_test_loss",
                    "summary/epsilon")

  def __init__(self, logdir: str, purge_step: Optional[int] = None):
    import time

    from tensorboardX import SummaryWriter
    self.logdir = logdir
    # Event file names hold the second and the host; TensorBoard reads them in name
    # order. The nanosecond suffix keeps a session started within the same second as
    # the previous one in a file of its own, read after it.
    self._w = SummaryWriter(logdir=logdir, purge_step=purge_step, flush_secs=10,
                            filename_suffix=f".{time.time_ns()}")

  def _events(self):
    """The writer's event file writer (tensorboardX opens it with the writer and
    clears it on ``close``).

    Raises:
      RuntimeError: the writer is closed.
    """
    events = self._w.file_writer
    if events is None:
      raise RuntimeError(f"the TensorBoard writer of {self.logdir!r} is closed.")
    return events

  def write_hparams(self, config: Mapping[str, Any]) -> None:
    from tensorboardX.summary import hparams
    exp, ssi, _ = hparams(hparam_values(config), {m: 0.0 for m in self.HPARAM_METRICS})
    events = self._events()
    events.add_summary(exp)
    events.add_summary(ssi)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    for tag, v in record_scalars(scalars).items():
      self._w.add_scalar(tag, v, global_step=int(step))

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    from tensorboardX.summary import hparams
    step = int(summary.get("rounds") or 0)
    for k, v in summary_scalars(summary).items():
      self._w.add_scalar("summary/" + k, v, global_step=step)
    _, _, sei = hparams({}, {})  # the HParams session ends (status: success)
    self._events().add_summary(sei)

  def close(self) -> None:
    self._w.close()


class WandbWriter(MetricWriter):
  """A Weights & Biases run (``wandb.init(project=..., dir=run_dir, config=config,
  name=run_name)``).

  Online or offline as the user's environment says (``WANDB_MODE``, ``WANDB_PROJECT``,
  ``wandb login``): nothing is changed here; ``WANDB_MODE=offline`` keeps the run in
  ``<run_dir>/wandb`` for a later ``wandb sync``. The project is ``$WANDB_PROJECT``, else
  ``fedjax_dp``. A resumed run starts a new W&B run (it re-logs the rounds after the
  checkpoint).

  Args:
    run_dir: the run's output folder (W&B writes ``<run_dir>/wandb``).
    config: the flat option table (the W&B run config).
    run_name: the W&B run's display name.
  """

  name = "wandb"

  def __init__(self, run_dir: str, config: Mapping[str, Any], run_name: str):
    import wandb
    self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "fedjax_dp"),
                           dir=run_dir, config=hparam_values(config), name=run_name)

  def write_hparams(self, config: Mapping[str, Any]) -> None:
    self._run.config.update(hparam_values(config), allow_val_change=True)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    self._run.log(record_scalars(scalars), step=int(step))

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    self._run.summary.update(summary_scalars(summary))

  def close(self) -> None:
    self._run.finish()


_MLFLOW_KEY = re.compile(r"[^\w\-. /:]")


def mlflow_key(name: str) -> str:
  """``name`` with the characters MLflow refuses in a key (all but letters, digits,
  ``_ - . space / :``) replaced by ``_``, at most 250 characters."""
  return _MLFLOW_KEY.sub("_", str(name))[:250]


class MlflowWriter(MetricWriter):
  """An MLflow run through ``mlflow.tracking.MlflowClient``.

  The tracking URI is ``$MLFLOW_TRACKING_URI`` when set, else ``file:<run_dir>/mlruns``
  (a local file store: works offline; MLflow 3 keeps that store in maintenance mode and
  refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true``, which is set here only when this
  default is used and the variable is unset; view it with
  ``mlflow ui --backend-store-uri <run_dir>/mlruns``). The experiment is
  ``$MLFLOW_EXPERIMENT_NAME``, else ``fedjax_dp``. Params are the configuration (keys
  sanitised by `mlflow_key`, values cut to 500 characters); metrics are
  `record_scalars` with the round as step, and ``summary/*`` at the last round. A
  resumed run starts a new MLflow run.

  Args:
    run_dir: the run's output folder.
    run_name: the MLflow run name.
  """

  name = "mlflow"
  MAX_PARAM_CHARS = 500

  def __init__(self, run_dir: str, run_name: str):
    from mlflow.tracking import MlflowClient
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
      uri = "file:" + os.path.join(os.path.abspath(run_dir), "mlruns")
      os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    self.tracking_uri = uri
    self._client = MlflowClient(tracking_uri=uri)
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedjax_dp")
    exp = self._client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp is not None else self._client.create_experiment(
        experiment)
    self.run_id = self._client.create_run(exp_id, run_name=run_name).info.run_id

  def write_hparams(self, config: Mapping[str, Any]) -> None:
    from mlflow.entities import Param
    params = [Param(mlflow_key(k), str(v)[:self.MAX_PARAM_CHARS])
              for k, v in hparam_values(config).items()]
    for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
      self._client.log_batch(self.run_id, params=params[i:i + 100])

  def _log(self, step: int, scalars: Mapping[str, float]) -> None:
    import time

    from mlflow.entities import Metric
    now = int(time.time() * 1000)
    metrics = [Metric(mlflow_key(k), v, now, int(step)) for k, v in scalars.items()]
    for i in range(0, len(metrics), 1000):  # at most 1000 metrics a batch
      self._client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    self._log(step, record_scalars(scalars))

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    self._log(int(summary.get("rounds") or 0),
              {"summary/" + k: v for k, v in summary_scalars(summary).items()})

  def close(self) -> None:
    self._client.set_terminated(self.run_id)


def check_installed(spec: str) -> List[str]:
  """The writer names of ``spec`` (`parse_logger_spec`), once each one's library
  imports: what a run checks when it starts, before loading data or training.

  Raises:
    FedJaxDpError (option ``logger``): as `parse_logger_spec`, or a library that is not
      installed (with the ``pip install`` that adds it).
  """
  names = parse_logger_spec(spec)
  for name in names:
    try:
      importlib.import_module(_MODULES[name])
    except ImportError as e:
      raise FedJaxDpError(f"logger {name!r} needs {_MODULES[name]}, which is not "
                          f"installed ({e}); install it with `{INSTALL[name]}`, or choose "
                          f"another logger (--logger {', '.join(LOGGERS)} or none).",
                          option="logger") from None
  return names


def make_writers(spec: str, run_dir: str, config: Mapping[str, Any], run_name: str,
                 purge_step: Optional[int] = None) -> List[MetricWriter]:
  """The writers of a ``--logger`` value for the run in ``run_dir`` (a stable entry
  point: the run loop and sweeps call it for each run folder).

  Args:
    spec: `parse_logger_spec`'s comma list (``"tensorboard"``, ``"wandb,mlflow"``,
      ``"none"``).
    run_dir: the run's output folder (must exist): TensorBoard writes
      ``<run_dir>/tensorboard``, W&B ``<run_dir>/wandb``, MLflow (default)
      ``<run_dir>/mlruns``.
    config: the run's flat option table (for the W&B run config; `WriterGroup` writes
      the hyper-parameters of every writer with ``write_hparams``).
    run_name: the run's display name in W&B and MLflow.
    purge_step: on resume, the first round that will be logged again (TensorBoard
      hides the earlier session's events from it on).

  Returns:
    The writers, in the order named (``[]`` for ``"none"``).

  Raises:
    FedJaxDpError (option ``logger``): an unknown or repeated name; a writer whose
      library is not installed (with the ``pip install`` that adds it); a library that
      fails to start its run (its message).
  """
  names = check_installed(spec)
  out: List[MetricWriter] = []
  for n in names:
    try:
      if n == "tensorboard":
        out.append(TensorBoardWriter(os.path.join(run_dir, "tensorboard"), purge_step))
      elif n == "wandb":
        out.append(WandbWriter(run_dir, config, run_name))
      else:
        out.append(MlflowWriter(run_dir, run_name))
    except Exception as e:  # a library that cannot start: before training, so refuse
      for w in out:
        try:
          w.close()
        except Exception:  # noqa: BLE001 (already failing; the first error is reported)
          pass
      raise FedJaxDpError(f"logger {n!r} could not start its run: "
                          f"{type(e).__name__}: {e}", option="logger") from e
  return out


class WriterGroup:
  """The run's writers, called together; a writer that raises is reported once as a
  warning (logged) and dropped, so the run and its own files go on.

  Args:
    writers: `MetricWriter` s (e.g. from `make_writers`); an empty list does nothing.
  """

  def __init__(self, writers: Sequence[MetricWriter] = ()):
    self.writers = list(writers)
    self.dropped: List[str] = []

  def _call(self, method: str, *args) -> None:
    for w in list(self.writers):
      try:
        getattr(w, method)(*args)
      except Exception as e:  # noqa: BLE001 (any tracker failure must not stop the run)
        self.writers.remove(w)
        self.dropped.append(w.name)
        _log.warning("logger %s failed in %s (%s: %s); it is dropped for the rest of the "
                     "run (metrics.jsonl and summary.json are unaffected).",
                     w.name, method, type(e).__name__, e)
        if method != "close":
          try:
            w.close()
          except Exception:  # noqa: BLE001 (already reported)
            pass

  def write_hparams(self, config: Mapping[str, Any]) -> None:
    self._call("write_hparams", config)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    self._call("write_scalars", step, scalars)

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    self._call("write_summary", summary)

  def close(self) -> None:
    """Closes every writer (once; later calls do nothing)."""
    self._call("close")
    self.writers = []
