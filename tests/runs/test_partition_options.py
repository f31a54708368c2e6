"""Partitions from the command line and config files (issue 19, part 3): the shorthand
``--partition dirichlet:0.1``, the partition fields (``--dirichlet-alpha`` ...), their
checks, and that the chosen parameters reach the data and the run's summary."""

import json

import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.data import load_dataset
from fedjax_dp.data.partition import parse_partition_spec, resolve_partition
from fedjax_dp.runs import RunConfig, make_setup
from fedjax_dp.validation import FedJaxDpError

SYNTH = ["--dataset", "synthetic", "--model", "linear"]


# --- parse_partition_spec ---------------------------------------------------------

@pytest.mark.parametrize("text,method,kwargs", [
    ("iid", "iid", {}),
    ("natural", "natural", {}),
    ("dirichlet", "dirichlet", {}),
    ("dirichlet:0.1", "dirichlet", {"alpha": 0.1}),
    ("dirichlet:1e-2", "dirichlet", {"alpha": 0.01}),
    ("shards:2", "shards", {"shards_per_client": 2}),
    ("shards:shards_per_client=3", "shards", {"shards_per_client": 3}),
    ("quantity_skew:sigma=1.5", "quantity_skew", {"sigma": 1.5}),
    ("quantity_skew:sigma=0", "quantity_skew", {"sigma": 0.0}),
    ("quantity_skew:alpha=0.3,min_size=4", "quantity_skew", {"alpha": 0.3, "min_size": 4}),
    ("dirichlet:alpha=0.1,min_size=5", "dirichlet", {"alpha": 0.1, "min_size": 5}),
    (" dirichlet : 0.1 , min_size = 5 ", "dirichlet", {"alpha": 0.1, "min_size": 5}),
])
def test_parse_partition_spec(text, method, kwargs):
  m, kw = parse_partition_spec(text)
  assert (m, kw) == (method, kwargs)
  assert all(type(v) is (int if k in ("min_size", "shards_per_client") else float)
             for k, v in kw.items())


@pytest.mark.parametrize("text,needle", [
    ("", "partition must be a method"),
    ("dirichlett:0.1", "'dirichlett'"),
    ("dirichlet:", "nothing after ':'"),
    ("dirichlet:0", "alpha must be a finite number > 0, got '0'"),
    ("dirichlet:-1", "alpha must be a finite number > 0"),
    ("dirichlet:nan", "alpha must be a finite number > 0"),
    ("dirichlet:inf", "alpha must be a finite number > 0"),
    ("dirichlet:abc", "alpha must be a finite number > 0"),
    ("dirichlet:alpha=0.1,min_size=0", "min_size must be an integer >= 1"),
    ("dirichlet:alpha=0.1,min_size=2.5", "min_size must be an integer >= 1"),
    ("dirichlet:sigma=1", "dirichlet does not take 'sigma'; it accepts: alpha, min_size"),
    ("dirichlet:alpha=1,alpha=2", "alpha is given twice"),
    ("dirichlet:1,2", "a bare value ('2') is only allowed first"),
    ("shards:alpha=1", "shards does not take 'alpha'; it accepts: shards_per_client"),
    ("shards:0", "shards_per_client must be an integer >= 1"),
    ("iid:3", "it takes no parameters"),
    ("natural:min_size=2", "natural does not take 'min_size'; it accepts: no parameters"),
    ("quantity_skew:1.5", "write key=value with key one of: alpha, sigma, min_size"),
    ("quantity_skew:sigma=-1", "sigma must be a finite number >= 0"),
    ("quantity_skew:alpha=1,sigma=1", "exactly one of alpha"),
])
def test_parse_partition_spec_errors(text, needle):
  with pytest.raises(FedJaxDpError) as e:
    parse_partition_spec(text)
  assert needle in str(e.value) and e.value.option == "partition"


def test_resolve_fields_select_or_complete_the_partition():
  no = dict.fromkeys(("dirichlet_alpha", "shards_per_client", "quantity_skew_alpha",
                      "quantity_skew_sigma", "min_client_size"))
  assert resolve_partition(None, no, "natural") == (None, {})
  # A field that one method takes selects it; min_client_size completes the default.
  assert resolve_partition(None, {**no, "dirichlet_alpha": 0.1}, "natural") == (
      "dirichlet", {"alpha": 0.1})
  assert resolve_partition(None, {**no, "min_client_size": 3}, "dirichlet") == (
      "dirichlet", {"min_size": 3})
  assert resolve_partition("quantity_skew", {**no, "quantity_skew_sigma": 2}, None) == (
      "quantity_skew", {"sigma": 2.0})
  # The same value twice is fine.
  assert resolve_partition("dirichlet:0.1", {**no, "dirichlet_alpha": 0.1}, None) == (
      "dirichlet", {"alpha": 0.1})


@pytest.mark.parametrize("spec,fields,option,needle", [
    ("dirichlet:0.1", {"dirichlet_alpha": 0.2}, "dirichlet_alpha",
     "dirichlet_alpha=0.2 conflicts with partition 'dirichlet:0.1'"),
    ("dirichlet:min_size=2", {"min_client_size": 3}, "min_client_size", "conflicts"),
    ("iid", {"dirichlet_alpha": 0.2}, "dirichlet_alpha",
     "not to partition 'iid', which accepts: no parameters"),
    ("shards", {"min_client_size": 2}, "min_client_size",
     "not to partition 'shards', which accepts: shards_per_client"),
    ("dirichlet", {"quantity_skew_sigma": 1.0}, "quantity_skew_sigma",
     "which accepts: dirichlet_alpha, min_client_size"),
    (None, {"min_client_size": 2}, "min_client_size", "default partition is 'natural'"),
    (None, {"dirichlet_alpha": 1.0, "shards_per_client": 2}, "dirichlet_alpha",
     "belong to different partitions"),
    ("quantity_skew:sigma=1", {"quantity_skew_alpha": 0.5}, "quantity_skew_alpha",
     "exactly one of alpha"),
    (None, {"dirichlet_alpha": 0.0}, "dirichlet_alpha", "must be a finite number > 0"),
    (None, {"dirichlet_alpha": float("nan")}, "dirichlet_alpha", "finite number > 0"),
    (None, {"shards_per_client": 0}, "shards_per_client", "integer >= 1"),
    ("dirichlet:x", {}, "partition", "alpha must be"),
])
def test_resolve_errors_name_the_option(spec, fields, option, needle):
  with pytest.raises(FedJaxDpError) as e:
    resolve_partition(spec, fields, "natural")
  assert e.value.option == option and needle in str(e.value), str(e.value)


# --- RunConfig and config files ------------------------------------------------------

def test_run_config_from_dict_fields_and_shorthand():
  a = RunConfig.from_dict({"dataset": "synthetic", "partition": "dirichlet",
                           "dirichlet_alpha": 0.1, "min-client-size": 3}).validate()
  b = RunConfig.from_dict({"dataset": "synthetic",
                           "partition": "dirichlet:alpha=0.1,min_size=3"}).validate()
  assert a.partition_options() == b.partition_options() == (
      "dirichlet", {"alpha": 0.1, "min_size": 3})
  # partition stays a string: summary.json's config reads back the same run.
  assert isinstance(b.partition, str)
  again = RunConfig.from_dict(json.loads(json.dumps(b.to_dict())))
  assert again.partition_options() == b.partition_options()
  q = RunConfig.from_dict({"dataset": "fashion_mnist", "quantity_skew_alpha": 0.3})
  assert q.validate().partition_options() == ("quantity_skew", {"alpha": 0.3})
  # Image datasets default to dirichlet: min_client_size alone completes it.
  m = RunConfig.from_dict({"dataset": "mnist", "min_client_size": 5}).validate()
  assert m.partition_options() == ("dirichlet", {"min_size": 5})


@pytest.mark.parametrize("table,option", [
    ({"partition": "dirichlet:0.1", "dirichlet_alpha": 0.5}, "dirichlet_alpha"),
    ({"partition": "iid", "shards_per_client": 2}, "shards_per_client"),
    ({"partition": "shards:alpha=1"}, "partition"),
    ({"dirichlet_alpha": -0.5}, "dirichlet_alpha"),
    ({"quantity_skew_alpha": 1.0, "quantity_skew_sigma": 1.0}, "quantity_skew_sigma"),
    ({"min_client_size": 0, "partition": "dirichlet"}, "min_client_size"),
])
def test_run_config_refuses_with_the_option_named(table, option):
  with pytest.raises(FedJaxDpError) as e:
    RunConfig.from_dict({"dataset": "synthetic", **table}).validate()
  assert e.value.option == option


def test_config_file_with_partition_fields(tmp_path):
  path = tmp_path / "c.toml"
  path.write_text('dataset = "synthetic"\npartition = "quantity_skew"\n'
                  "quantity_skew_sigma = 2.0\nnum_clients = 7\n")
  cfg = cli.parse_run_args(["--config", str(path)])[0].validate()
  assert cfg.partition_options() == ("quantity_skew", {"sigma": 2.0})
  assert cfg.num_clients == 7


# --- the command line -------------------------------------------------------------

def _counts(args):
  cfg = cli.parse_run_args(SYNTH + args)[0].validate()
  return make_setup(cfg).data


def test_cli_shorthand_and_flag_give_the_same_partition():
  short = _counts(["--partition", "dirichlet:0.1"])
  flag = _counts(["--dirichlet-alpha", "0.1"])
  both = _counts(["--partition", "dirichlet", "--dirichlet-alpha", "0.1"])
  direct = load_dataset("synthetic", partition="dirichlet", alpha=0.1)
  for fd in (short, flag, both):
    assert fd.partition == "dirichlet"
    np.testing.assert_array_equal(fd.counts, direct.counts)
    np.testing.assert_array_equal(fd.y, direct.y)
  default = load_dataset("synthetic", partition="dirichlet")  # the registry's alpha 0.5
  assert not np.array_equal(default.counts, short.counts)
  shards = _counts(["--partition", "shards:5", "--num-clients", "8"])
  assert shards.num_clients == 8
  assert "shards(shards_per_client=5) over 8 clients" in shards.describe()
  qs = _counts(["--partition", "quantity_skew:sigma=3", "--min-client-size", "20"])
  assert qs.counts.min() >= 20 and qs.counts.max() > 3 * qs.counts.min()


@pytest.mark.parametrize("args,needle,flag", [
    (["--partition", "dirichlet:0.1", "--dirichlet-alpha", "0.2"], "conflicts",
     "--dirichlet-alpha"),
    (["--partition", "iid", "--dirichlet-alpha", "0.2"], "which accepts: no parameters",
     "--dirichlet-alpha"),
    (["--partition", "shards:alpha=1"], "it accepts: shards_per_client", "--partition"),
    (["--partition", "dirichlet:0"], "alpha must be a finite number > 0", "--partition"),
    (["--dirichlet-alpha", "nan"], "dirichlet_alpha must be a finite number > 0",
     "--dirichlet-alpha"),
    (["--min-client-size", "2"], "default partition is 'natural'", "--min-client-size"),
    (["--partition", "quantity_skew", "--quantity-skew-alpha", "1",
      "--quantity-skew-sigma", "1"], "exactly one of alpha", "--quantity-skew"),
])
def test_cli_refuses_with_the_option_named(tmp_path, capsys, args, needle, flag):
  out = tmp_path / "out"
  rc = cli.main(["run", *SYNTH, "--rounds", "1", "--no-progress", "--out", str(out), *args])
  err = capsys.readouterr().err
  assert rc == 2 and err.startswith("fedjax-dp: error:") and err.count("\n") == 1, err
  assert needle in err and f"(option {flag}" in err, err
  assert not out.exists()


def _mean_label_entropy(fd):
  ent = []
  for i in range(fd.num_clients):
    p = np.bincount(fd.client_data(i)[1], minlength=fd.num_classes) / fd.counts[i]
    p = p[p > 0]
    ent.append(-(p * np.log(p)).sum())
  return float(np.mean(ent))


def test_run_with_a_small_alpha_is_more_label_skewed(tmp_path, capsys):
  out = tmp_path / "skewed"
  args = SYNTH + ["--partition", "dirichlet:0.05", "--rounds", "2", "--eval-every", "2"]
  assert cli.main(["run", *args, "--no-progress", "--out", str(out)]) == 0
  summary = json.loads((out / "summary.json").read_text())
  assert "partition dirichlet(alpha=0.05, min_size=1) over 10 clients" in (
      summary["dataset_description"])
  assert summary["config"]["partition"] == "dirichlet:0.05" and summary["rounds"] == 2
  skewed = make_setup(cli.parse_run_args(args)[0]).data
  near_iid = _counts(["--partition", "dirichlet:100"])
  h_skewed, h_iid = _mean_label_entropy(skewed), _mean_label_entropy(near_iid)
  # 4 classes: near-IID clients are close to log(4) = 1.386; alpha 0.05 far below.
  assert h_iid > 1.3 and h_skewed < 0.7, (h_skewed, h_iid)
