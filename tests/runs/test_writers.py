"""Experiment trackers (fedjax_dp.runs.writers): TensorBoard event files read back with
TensorBoard's own reader, W&B (offline) and MLflow (local file store) runs read back
from what they wrote, and the run going on when a tracker fails."""

import dataclasses
import glob
import json
import logging
import math
import os
import struct
import sys

import pytest

from fedjax_dp import cli
from fedjax_dp.runs import RunConfig
from fedjax_dp.runs import writers as writers_lib
from fedjax_dp.validation import FedJaxDpError
from tiny_runs import BASE, tiny_run

ALL = "tensorboard,wandb,mlflow"


class _Failing(writers_lib.MetricWriter):
  """A tracker that breaks at its second round (and counts its calls)."""
  name = "failing"

  def __init__(self):
    self.calls = []

  def write_hparams(self, config):
    self.calls.append("hparams")

  def write_scalars(self, step, scalars):
    self.calls.append(step)
    if step >= 2:
      raise ConnectionError("tracker server went away")

  def write_summary(self, summary):
    self.calls.append("summary")

  def close(self):
    self.calls.append("close")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
  """A 4-round run with all three trackers (W&B offline, MLflow's default local store)
  and a fourth that fails mid-run: ``(out, result, failing writer, log records)``."""
  failing = _Failing()
  real = writers_lib.make_writers
  handler = _Collect()
  logger = logging.getLogger("fedjax_dp.runs.writers")
  logger.addHandler(handler)
  with pytest.MonkeyPatch.context() as mp:
    for var in ("WANDB_MODE", "WANDB_SILENT", "WANDB_CONSOLE"):
      mp.setenv(var, {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                      "WANDB_CONSOLE": "off"}[var])
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    mp.delenv("WANDB_PROJECT", raising=False)
    mp.setattr(writers_lib, "make_writers",
               lambda *a, **k: real(*a, **k) + [failing])
    try:
      out, res = tiny_run(tmp_path_factory, logger=ALL, noise_multiplier=1.0)
    finally:
      logger.removeHandler(handler)
  return out, res, failing, handler.records


class _Collect(logging.Handler):
  def __init__(self):
    super().__init__(logging.WARNING)
    self.records = []

  def emit(self, record):
    self.records.append(record)


def _metrics(out):
  with open(os.path.join(out, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def _series(records, field):
  return [(r["round"], r[field]) for r in records if r.get(field) is not None]


def test_tensorboard_events_hold_every_round_and_the_hparams(tracked):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  from tensorboard.plugins.hparams import plugin_data_pb2
  out, res, _, _ = tracked
  records = _metrics(out)
  ea = EventAccumulator(os.path.join(out, "tensorboard"))
  ea.Reload()
  tags = set(ea.Tags()["scalars"])
  assert {"train/loss", "test/accuracy", "test/loss", "privacy/epsilon",
          "privacy/noise_multiplier", "privacy/sampling_rate", "privacy/dp_steps",
          "clients/clip_fraction", "time/wall_time_s", "summary/final_test_accuracy",
          "summary/epsilon_rdp", "summary/rounds"} <= tags
  # Every numeric field of every record is a scalar, round by round (float32 in TB).
  for field, tag in (("epsilon", "privacy/epsilon"), ("train_loss", "train/loss"),
                     ("test_accuracy", "test/accuracy"),
                     ("noise_multiplier", "privacy/noise_multiplier")):
    got = [(e.step, e.value) for e in ea.Scalars(tag)]
    want = _series(records, field)
    assert [s for s, _ in got] == [s for s, _ in want], tag
    assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), tag
  assert [e.step for e in ea.Scalars("test/accuracy")] == [2, 4]
  (final,) = ea.Scalars("summary/final_test_accuracy")
  assert final.step == 4
  assert final.value == pytest.approx(res.summary["final_test_accuracy"], rel=1e-6)
  # HParams dashboard: the run's options, and which metrics go beside them.
  content = ea.PluginTagToContent("hparams")
  start = plugin_data_pb2.HParamsPluginData.FromString(
      content["_hparams_/session_start_info"]).session_start_info
  assert start.hparams["algorithm"].string_value == "dp_fedavg"
  assert start.hparams["noise_multiplier"].number_value == 1.0
  assert start.hparams["rounds"].number_value == 4
  assert start.hparams["dataset"].string_value == "synthetic"
  assert start.hparams["target_epsilon"].string_value == "None"  # not str/num: as str
  exp = plugin_data_pb2.HParamsPluginData.FromString(
      content["_hparams_/experiment"]).experiment
  assert "privacy/epsilon" in {m.name.tag for m in exp.metric_infos}
  end = plugin_data_pb2.HParamsPluginData.FromString(
      content["_hparams_/session_end_info"]).session_end_info
  assert end.status == 1  # STATUS_SUCCESS


def _wandb_records(path):
  """The protobuf records of a W&B transaction log (``run-*.wandb``: a 7-byte header,
  then LevelDB-log chunks in 32 KiB blocks, each chunk a 7-byte header: crc, length,
  type 1 full / 2 first / 3 middle / 4 last)."""
  from wandb.proto import wandb_internal_pb2 as pb
  data = open(path, "rb").read()
  assert data[:4] == b":W&B"
  pos, buf, out = 7, b"", []
  while pos + 7 <= len(data):
    left = 32768 - pos % 32768
    if left < 7:
      pos += left
      continue
    _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
    pos += 7
    if kind == 0:
      break
    buf += data[pos:pos + n]
    pos += n
    if kind in (1, 4):
      rec = pb.Record()
      rec.ParseFromString(buf)
      out.append(rec)
      buf = b""
  return out


def test_wandb_offline_run_logs_what_metrics_jsonl_holds(tracked):
  out, res, _, _ = tracked
  records = _metrics(out)
  (path,) = glob.glob(os.path.join(out, "wandb", "offline-run-*", "run-*.wandb"))
  history, summary, config = {}, {}, {}
  for rec in _wandb_records(path):
    kind = rec.WhichOneof("record_type")
    if kind == "history":
      row = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
             for i in rec.history.item}
      history[row["_step"]] = row
    elif kind == "summary":
      summary.update({i.key: json.loads(i.value_json) for i in rec.summary.update if i.key})
    elif kind == "run":
      config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
  assert sorted(history) == [1, 2, 3, 4]
  for r in records:
    row = history[r["round"]]
    assert row["privacy/epsilon"] == pytest.approx(r["epsilon"], rel=1e-12)
    assert row["train/loss"] == pytest.approx(r["train_loss"], rel=1e-12)
    assert row["privacy/noise_multiplier"] == pytest.approx(r["noise_multiplier"])
    assert ("test/accuracy" in row) == ("test_accuracy" in r)
  assert summary["final_test_accuracy"] == pytest.approx(res.summary["final_test_accuracy"])
  assert summary["epsilon"] == pytest.approx(res.summary["epsilon"])
  assert config["algorithm"] == "dp_fedavg"
  assert config["noise_multiplier"] == 1.0


def test_mlflow_run_logs_what_metrics_jsonl_holds(tracked):
  from mlflow.tracking import MlflowClient
  out, res, _, _ = tracked
  records = _metrics(out)
  client = MlflowClient(tracking_uri="file:" + os.path.join(out, "mlruns"))
  (exp,) = [e for e in client.search_experiments() if e.name == "fedjax_dp"]
  (run,) = client.search_runs([exp.experiment_id])
  assert run.info.status == "FINISHED"
  assert run.info.run_name == os.path.basename(out)
  hist = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                    "privacy/epsilon"))
  assert hist == [(s, pytest.approx(v, rel=1e-12)) for s, v in _series(records, "epsilon")]
  acc = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                   "test/accuracy"))
  assert acc == [(s, pytest.approx(v)) for s, v in _series(records, "test_accuracy")]
  assert run.data.params["algorithm"] == "dp_fedavg"
  assert float(run.data.params["noise_multiplier"]) == 1.0
  assert run.data.metrics["summary/final_test_accuracy"] == pytest.approx(
      res.summary["final_test_accuracy"])


def test_a_failing_tracker_is_dropped_with_one_warning_and_the_run_goes_on(tracked):
  out, res, failing, logged = tracked
  # It got the hyper-parameters and rounds 1 and 2, failed there, and was closed.
  assert failing.calls == ["hparams", 1, 2, "close"]
  warnings = [r.getMessage() for r in logged if "failing" in r.getMessage()]
  assert len(warnings) == 1 and "tracker server went away" in warnings[0]
  assert "metrics.jsonl" in warnings[0]
  # The run, its files and the other trackers are complete.
  assert [r["round"] for r in _metrics(out)] == [1, 2, 3, 4]
  assert res.summary["rounds"] == 4
  assert os.path.isfile(os.path.join(out, "summary.json"))


def test_logger_none_writes_no_tracker_files(tmp_path_factory):
  out, res = tiny_run(tmp_path_factory, logger="none", noise_multiplier=1.0)
  assert res.summary["rounds"] == 4
  assert os.path.isfile(os.path.join(out, "metrics.jsonl"))
  for folder in ("tensorboard", "wandb", "mlruns"):
    assert not os.path.exists(os.path.join(out, folder))


def test_tensorboard_resume_shows_each_round_once(tmp_path):
  """On resume the run loop re-logs the checkpoint's rounds with purge_step=1: the
  earlier session's events (and rounds it ran after its checkpoint) are hidden."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  logdir = str(tmp_path / "tb")
  w = writers_lib.TensorBoardWriter(logdir)
  for step in (1, 2, 3):  # the first session: killed after round 3, checkpoint at 2
    w.write_scalars(step, {"round": step, "epsilon": 10.0 * step})
  w.close()
  w = writers_lib.TensorBoardWriter(logdir, purge_step=1)
  for step in (1, 2, 3, 4):
    w.write_scalars(step, {"round": step, "epsilon": float(step)})
  w.close()
  assert len(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))) == 2
  ea = EventAccumulator(logdir)
  ea.Reload()
  assert [(e.step, e.value) for e in ea.Scalars("privacy/epsilon")] == [
      (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]


@pytest.mark.parametrize("spec,needle", [
    ("tensorbord", "unknown writer 'tensorbord'"),
    ("", "unknown writer ''"),
    (3, "got 3"),
    ("tensorboard,tensorboard", "tensorboard twice"),
    ("none,wandb", "'none' cannot be combined"),
])
def test_bad_logger_is_refused_with_the_option_named(spec, needle):
  cfg = dataclasses.replace(RunConfig.from_dict(BASE), logger=spec)
  with pytest.raises(FedJaxDpError) as e:
    cfg.validate()
  assert e.value.option == "logger"
  assert needle in str(e.value)
  if "unknown" in needle or "got" in needle:
    assert "a comma list of tensorboard, wandb, mlflow, or none" in str(e.value)


def test_cli_refuses_an_unknown_logger_before_loading_data(tmp_path, capsys):
  rc = cli.main(["run", "--dataset", "synthetic", "--logger", "tensorboard,neptune",
                 "--out", str(tmp_path / "x"), "--no-progress"])
  assert rc == 2
  err = capsys.readouterr().err
  assert "logger" in err and "neptune" in err and "tensorboard, wandb, mlflow" in err
  assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name,module,hint", [
    ("wandb", "wandb", 'pip install "fedjax_dp[trackers]"'),
    ("mlflow", "mlflow", 'pip install "fedjax_dp[trackers]"')])
def test_missing_library_names_its_pip_install(tmp_path, monkeypatch, name, module, hint):
  monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
  with pytest.raises(FedJaxDpError) as e:
    writers_lib.make_writers(f"tensorboard,{name}", str(tmp_path), {}, "r")
  assert e.value.option == "logger" and hint in str(e.value)
  assert not (tmp_path / "tensorboard").exists()  # checked before any writer starts


def test_scalars_are_finite_numbers_flattened_and_grouped():
  got = writers_lib.record_scalars({
      "round": 3, "train_loss": 0.5, "test_accuracy": 0.75, "epsilon": 1.5,
      "noise_multiplier": 1.1, "clip_fraction": 0.2, "sampler": "poisson",
      "epsilon_devices": [1.0, 2.0], "aggregate_norm": None, "nan_field": math.nan,
      "inf_field": math.inf, "switched": True, "nested": {"a": 1, "b": "x"},
      "wall_time_s": 2.0, "pid_error": 0.1})
  assert got == {"train/loss": 0.5, "test/accuracy": 0.75, "privacy/epsilon": 1.5,
                 "privacy/noise_multiplier": 1.1, "clients/clip_fraction": 0.2,
                 "other/switched": 1.0, "other/nested/a": 1.0, "time/wall_time_s": 2.0,
                 "other/pid_error": 0.1}
  assert writers_lib.summary_scalars({"final_test_accuracy": 0.9, "epsilon": math.inf,
                                      "config": {"rounds": 4},
                                      "budget_guard": {"rounds_run": 3}}) == {
      "final_test_accuracy": 0.9, "budget_guard/rounds_run": 3.0}
  assert writers_lib.hparam_values({"a": None, "b": (1, 2), "c": 1, "d": 0.5,
                                    "e": True, "f": "x"}) == {
      "a": "None", "b": "(1, 2)", "c": 1, "d": 0.5, "e": True, "f": "x"}
  assert writers_lib.mlflow_key("a*b/c (x)") == "a_b/c _x_"
