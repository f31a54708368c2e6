"""Frictions a new user hit (issue 19, part 6), each pinned by a test that fails on the
old behaviour: an explicit --data-dir that silently fell back to another copy; a delta
of 0.5 reported as (0.000, 0.5)-DP; --help doubling defaults, booleans shown as
"(default: True)", no --version, no suggestion for a mistyped command; dp_accounting's
convergence warning printed into the progress bar; wall_time_s shared by a block's
rounds without a word."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import logging
import os
import re
import types

import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.algorithms import registry as alg_registry
from fedjax_dp.data import registry as data_registry
from fedjax_dp.data.sources import fashion_mnist, idx, mnist, tfds_source
from fedjax_dp.data.sources.errors import DatasetNotAvailableError
from fedjax_dp.privacy import accountants
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.runs import RunConfig, loop, run
from fedjax_dp.validation import FedJaxDpError

SYNTH = dict(dataset="synthetic", num_clients=10, model="linear")


def _write_idx_dir(directory, n=20, seed=0):
  """The four MNIST-format IDX files (gzip) of a tiny dataset in ``directory``."""
  os.makedirs(directory, exist_ok=True)
  rng = np.random.default_rng(seed)
  for split in ("train", "t10k"):
    labels = (np.arange(n) % 10).astype(np.uint8)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    idx.write_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"), images, True)
    idx.write_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"), labels, True)


@pytest.fixture
def other_copy(tmp_path, monkeypatch):
  """An empty folder, and another copy of (fake) Fashion-MNIST in $FEDJAX_DP_DATA_DIR;
  no system or TFDS copy visible."""
  _write_idx_dir(str(tmp_path / "env" / "fashion_mnist"))
  monkeypatch.setenv("FEDJAX_DP_DATA_DIR", str(tmp_path / "env"))
  monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", ())
  monkeypatch.setattr(tfds_source, "default_data_dirs", lambda: [str(tmp_path / "no_tfds")])
  empty = tmp_path / "empty"
  empty.mkdir()
  return str(empty)


# --- 1. an explicit data_dir is the only place searched -----------------------------


def test_explicit_data_dir_without_the_data_is_an_error_not_another_copy(other_copy):
  with pytest.raises(DatasetNotAvailableError) as e:
    data_registry.load_dataset("fashion_mnist", data_dir=other_copy, verify_checksums=False)
  msg = str(e.value)
  assert e.value.option == "data_dir"
  assert other_copy in msg and os.path.join(other_copy, "fashion_mnist") in msg
  for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
    assert name in msg
  assert fashion_mnist.locate(other_copy) is None
  infos = {i.name: i for i in data_registry.list_datasets(data_dir=other_copy)}
  assert not infos["fashion_mnist"].available
  # Without data_dir the environment variable is still searched (documented).
  fd = data_registry.load_dataset("fashion_mnist", partition="iid", num_clients=2,
                                  verify_checksums=False)
  assert os.path.join(os.environ["FEDJAX_DP_DATA_DIR"], "fashion_mnist") in fd.source


def test_explicit_data_dir_never_falls_back_to_the_mnist_subset(other_copy):
  with pytest.raises(DatasetNotAvailableError, match="t10k-labels-idx1-ubyte"):
    mnist.load_mnist(data_dir=other_copy)
  assert mnist.locate(other_copy) is None


@pytest.mark.parametrize("name", ["har", "adult", "synthetic", "npz:/tmp/x.npz"])
def test_data_dir_is_refused_by_datasets_that_do_not_read_one(tmp_path, name):
  with pytest.raises(FedJaxDpError, match="does not read one") as e:
    data_registry.load_dataset(name, data_dir=str(tmp_path))
  assert e.value.option == "data_dir" and str(tmp_path) in str(e.value)


def test_cli_data_dir_without_the_data(other_copy, tmp_path, capsys):
  rc = cli.main(["run", "--dataset", "fashion_mnist", "--data-dir", other_copy,
                 "--no-verify-checksums", "--rounds", "1", "--no-progress", "--out",
                 str(tmp_path / "out")])
  err = capsys.readouterr().err
  assert rc == 2 and f"not in data_dir {other_copy!r}" in err and "--data-dir" in err
  assert not (tmp_path / "out").exists()


# --- 2. delta below 1/n for the privacy unit's population ----------------------------


def test_delta_at_or_above_one_over_the_clients_is_refused_before_anything_is_written(
    tmp_path):
  cfg = RunConfig(**SYNTH, rounds=1, delta=0.5, out=str(tmp_path / "out"))
  with pytest.raises(FedJaxDpError) as e:
    run(cfg, progress=False)
  msg = str(e.value)
  assert e.value.option == "delta"
  assert "delta must be below 1/n = 1/10 = 0.1" in msg and "delta=0.5" in msg
  assert "user-level" in msg and "number of clients" in msg
  assert not (tmp_path / "out").exists()


def test_record_level_delta_is_measured_against_the_smallest_client():
  setup = types.SimpleNamespace(
      data=types.SimpleNamespace(counts=np.array([7, 0, 9]), num_clients=3),
      phases=[(5, types.SimpleNamespace(counts=np.array([6, 8, 0])))])
  bound = loop.delta_bound(types.SimpleNamespace(unit="record-level"), setup)
  assert bound["n"] == 6 and bound["records_total"] == 16  # empty clients ignored
  loop.check_delta_bound(0.16, bound)  # below 1/6
  with pytest.raises(FedJaxDpError, match=r"1/n = 1/6 .*fewest training records.*1/16"):
    loop.check_delta_bound(1 / 6, bound)
  user = loop.delta_bound(types.SimpleNamespace(unit="user-level"), setup)
  assert user["n"] == 3 and user["limit"] == pytest.approx(1 / 3)
  assert loop.delta_bound(None, setup) is None
  loop.check_delta_bound(0.9, None)  # non-private: nothing to check
  assert "1/n = 1/6" in loop.delta_meaning(bound) and "one training record" in \
      loop.delta_meaning(bound)


def test_record_level_run_refuses_delta_above_one_over_the_smallest_client(tmp_path):
  # synthetic: 100 examples per client, so delta must be below 0.01
  cfg = RunConfig(algorithm="dp_fedavg_record_level", **SYNTH, rounds=1, delta=0.02,
                  out=None)
  with pytest.raises(FedJaxDpError, match=r"1/n = 1/100 = 0\.01 for this record-level"):
    run(cfg, progress=False)


def test_allow_large_delta_accepts_it_and_the_summary_says_the_guarantee_is_weak():
  # A paper's setting (PADPFL's delta 0.01) may lie above 1/n: accepted only when asked.
  cfg = RunConfig(algorithm="dp_fedavg_record_level", **SYNTH, rounds=1, delta=0.02,
                  out=None, allow_large_delta=True)
  s = run(cfg, progress=False).summary
  assert s["delta"] == 0.02 and s["delta_meaning"].startswith("WEAK: delta = 0.02 >= 1/n")
  assert "allow_large_delta" in s["delta_meaning"]
  assert "record of every client" in s["delta_meaning"]
  bound = {"unit": "user-level", "n": 10, "limit": 0.1, "population": "the 10 clients",
           "records_total": 1000}
  assert not loop.delta_meaning(bound, 0.05).startswith("WEAK")
  assert "client's whole data" in loop.delta_meaning(bound, 0.1)


# --- one short run through the command line, for items 2, 4 and 5 ------------------


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
  """5 rounds of DP-FedAvg on 10 synthetic clients with z = 0.3, q = 0.5: epsilon 42.55
  at order 1.4, next to the orders 1.1 ... 1.3 dp_accounting excludes."""
  out = tmp_path_factory.mktemp("friction") / "run"
  buf_out, buf_err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
    rc = cli.main(["run", "--dataset", "synthetic", "--num-clients", "10", "--model",
                   "linear", "--noise-multiplier", "0.3", "--sampling-rate", "0.5",
                   "--rounds", "5", "--eval-every", "2", "--out", str(out)])
  assert rc == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  summary = json.loads((out / "summary.json").read_text())
  return summary, rows, buf_out.getvalue(), buf_err.getvalue()


def test_summary_says_what_delta_means(short_run):
  s = short_run[0]
  assert s["delta_meaning"].startswith("probability bound of the (epsilon, delta) "
                                       "guarantee for one user")
  assert "1/n = 1/10 = 0.1 for the 10 clients" in s["delta_meaning"]


def test_wall_time_is_per_block_and_the_summary_says_so(short_run):
  s, rows = short_run[:2]
  walls = [r["wall_time_s"] for r in rows]
  assert walls[0] == walls[1] < walls[2] == walls[3] < walls[4]  # blocks of eval_every
  assert loop.block_rounds(rows) == [2, 2, 1]
  assert "per compiled block, not per round" in s["wall_time_note"]
  assert "3 block(s) of 2 or 1 rounds" in s["wall_time_note"]


# --- 4. the accounting warning: once, in plain words, only when it matters -----------


def test_excluded_orders_matter_only_at_the_edge_of_the_evaluated_orders():
  orders = [1.5, 2.0, 3.0, 4.0]
  # epsilon attained at order 2, next to the excluded 1.5: reported
  note = accountants.excluded_orders_note(orders, [np.inf, 0.2, 5.0, 9.0], 1e-3)
  assert note and "attained at order 2" in note and "1.5" in note
  # attained at order 3, with order 2 evaluated between it and the excluded 1.5: not
  assert accountants.excluded_orders_note(orders, [np.inf, 3.0, 0.5, 2.0], 1e-3) is None
  assert accountants.excluded_orders_note(orders, [0.1, 0.2, 0.3, 0.4], 1e-3) is None


def test_a_ledger_reports_the_warning_only_when_it_changes_epsilon(caplog):
  caplog.set_level(logging.WARNING)
  usual = PrivacyLedger(1e-3)
  usual.record(2.0, 0.5, count=3)  # dp_accounting excludes orders 1.1 ... 1.8 here
  assert usual.epsilon() == pytest.approx(1.662, abs=1e-3)
  assert usual.accounting_warnings() == []
  large = PrivacyLedger(1e-3)
  large.record(0.8, 0.5, count=200)  # epsilon 118.8 at order 1.8, next to 1.7
  (warning,) = large.accounting_warnings()
  assert "118.8" in warning and "order 1.8" in warning and "valid upper bound" in warning
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING
              and "converge" in r.getMessage()]


def test_a_run_prints_the_accounting_warning_once_when_it_matters(short_run):
  summary, _, printed, err = short_run
  (warning,) = summary["accounting_warnings"]
  assert f"the RDP epsilon {summary['epsilon_rdp']:.4g} may be loose" in warning
  assert printed.count("  accounting: the RDP epsilon") == 1
  assert "converge" not in err  # nothing in the progress bar


# --- 3. the command line ------------------------------------------------------------


def _help_entries(argv):
  """``{flag: its help text}`` of ``fedjax-dp run ... --help`` (`fedjax_dp.cli_help`'s
  layout: the flags, then the text from a column or on the next lines)."""
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as e:
    cli.main(argv)
  assert e.value.code == 0
  out, cur = {}, None
  for line in buf.getvalue().splitlines():
    m = re.match(r"^  (-h, )?(--[a-z][a-z0-9-]*)((?:, --[a-z0-9-]+)*)( [^ ]+)?(?:  +(.*))?$",
                 line)
    if m:
      cur = m.group(2)
      out[cur] = (m.group(5) or "").strip()
    elif cur and re.match(r"^ {4,}\S", line):
      out[cur] = (out[cur] + " " + line.strip()).strip()
    else:
      cur = None
  return out


def test_every_option_of_every_algorithm_has_help_and_one_default(monkeypatch):
  monkeypatch.setenv("COLUMNS", "100")
  for name in alg_registry.names():
    entries = _help_entries(["run", "--algorithm", name, "--help"])
    assert "--rounds" in entries and "--no-verify-checksums" in entries
    for flag, text in entries.items():
      if flag == "--help":
        continue
      assert re.sub(r"\[default:.*$", "", text).strip(), f"{name} {flag}: no help"
      assert text.count("default:") <= 1, f"{name} {flag}: {text}"
      assert not re.search(r"default: (True|False|None)\b", text), f"{name} {flag}: {text}"
      assert "``" not in text and "{None}" not in text, f"{name} {flag}: {text}"
    assert "--overwrite" in entries and "--no-progress" in entries
    assert "[default: the algorithm's]" in entries["--dataset"]
    for dataset in data_registry.DATASET_NAMES:
      assert re.search(rf"\b{dataset}\b", entries["--dataset"]), dataset


def test_version_and_suggestions(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["--version"])
  assert e.value.code == 0
  assert capsys.readouterr().out.strip() == \
      f"fedjax-dp {importlib.metadata.version('fedjax_dp')}"
  assert cli.main(["rnu"]) == 2
  assert "unknown command 'rnu' (did you mean run?)" in capsys.readouterr().err
  assert cli.main(["run", "--rouns", "5"]) == 2
  err = capsys.readouterr().err
  assert "unrecognized option: --rouns (did you mean --rounds?)" in err and ", 5" not in err
