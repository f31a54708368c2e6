"""Your own data and your own model without forking (issue 19, part 4): per-client
arrays (`from_client_lists`), an ``.npz`` file (``--dataset npz:PATH``), any flax module
(`fedjax_dp.models.from_module`, ``run(model=...)``, ``--model package.module:factory``)
and the errors of each."""

import json
import math
import sys
import textwrap

import flax.linen as nn
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.data import DataFileError, DatasetNotAvailableError, from_client_lists, load_dataset
from fedjax_dp.data.sources import npz
from fedjax_dp.models import Model, create_model, from_module, model_from_factory
from fedjax_dp.runs import RunConfig, make_setup, run
from fedjax_dp.validation import FedJaxDpError

NUM_CLASSES = 3
DIM = 5


class Net(nn.Module):
  """A small MLP of our own: [B, 5] -> logits [B, num_classes]."""
  num_classes: int = NUM_CLASSES

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(nn.tanh(nn.Dense(8)(x)))


def client_arrays(num_clients=6, seed=0):
  """Per-client arrays of a learnable task: y = argmax(x @ W)."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(DIM, NUM_CLASSES))
  xs = [rng.normal(size=(12 + 2 * i, DIM)).astype(np.float32) for i in range(num_clients)]
  ys = [(x @ w).argmax(1) for x in xs]
  tx = rng.normal(size=(60, DIM)).astype(np.float32)
  return xs, ys, tx, (tx @ w).argmax(1)


def own_data():
  xs, ys, tx, ty = client_arrays()
  return from_client_lists("mine", xs, ys, NUM_CLASSES, test_x=tx, test_y=ty,
                           client_ids=[f"user_{i}" for i in range(len(xs))])


def write_npz(path, **changes):
  """A valid npz of `client_arrays` (one row per example), with ``changes`` applied
  (None removes a key)."""
  xs, ys, tx, ty = client_arrays()
  arrays = dict(x=np.concatenate(xs), y=np.concatenate(ys),
                client_id=np.repeat(np.arange(len(xs)), [len(x) for x in xs]),
                test_x=tx, test_y=ty)
  arrays.update(changes)
  np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
  return str(path)


CFG = dict(rounds=2, eval_every=2, noise_multiplier=0.5, clip_norm=1.0, sampling_rate=0.5)

HELPERS = textwrap.dedent('''
    import flax.linen as nn
    from fedjax_dp.models import create_model

    class Net(nn.Module):
      num_classes: int

      @nn.compact
      def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(self.num_classes)(nn.tanh(nn.Dense(8)(x)))

    class WithBatchNorm(nn.Module):
      @nn.compact
      def __call__(self, x):
        return nn.Dense(3)(nn.BatchNorm(use_running_average=False)(x))

    def factory(feature_shape, num_classes):
      return Net(num_classes)

    def as_model(feature_shape, num_classes):
      return create_model("linear", feature_shape, num_classes)

    def wrong_shape_model(feature_shape, num_classes):
      return create_model("linear", (7,), num_classes)

    def too_few_logits(feature_shape, num_classes):
      return Net(num_classes - 1)

    def batch_norm(feature_shape, num_classes):
      return WithBatchNorm()

    def returns_int(feature_shape, num_classes):
      return 3

    def no_arguments():
      return Net(3)

    NOT_CALLABLE = 3
''')


@pytest.fixture
def helpers(tmp_path, monkeypatch):
  """``tests_helpers_module.py`` in a fresh current directory that is not on sys.path
  (the factory loader must make it importable, as ``python -m`` does)."""
  (tmp_path / "tests_helpers_module.py").write_text(HELPERS)
  (tmp_path / "broken_helpers.py").write_text("import a_module_that_is_not_there\n")
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
  yield tmp_path
  for name in ("tests_helpers_module", "broken_helpers"):
    sys.modules.pop(name, None)


# --- end to end ---------------------------------------------------------------------

def test_npz_round_trip_through_run_and_the_cli(helpers, capsys):
  path = write_npz(helpers / "data.npz")
  # (The same model and shapes in every run of this file: one compilation.)
  res = run(RunConfig.from_dict(dict(dataset=f"npz:{path}", out=None, **CFG)),
            progress=False, model=Net())
  s = res.summary
  assert s["dataset"] == "data" and s["num_clients"] == 6 and s["rounds"] == 2
  assert "npz file" in s["dataset_description"] and math.isfinite(s["epsilon"])
  assert 0 <= s["final_test_accuracy"] <= 1 and s["model"] == "Net"
  # The command line, with the same model from a module in the current directory.
  args = ["run", "--dataset", "npz:data.npz", "--model", "tests_helpers_module:factory",
          "--rounds", "2", "--eval-every", "2", "--noise-multiplier", "0.5",
          "--sampling-rate", "0.5", "--no-progress", "--out", "out"]
  assert cli.main(args) == 0, capsys.readouterr().err
  summary = json.loads((helpers / "out" / "summary.json").read_text())
  assert summary["model"] == "tests_helpers_module:factory"
  assert summary["config"]["dataset"] == "npz:data.npz" and summary["num_clients"] == 6
  assert summary["epsilon"] == pytest.approx(s["epsilon"])  # same q, z, rounds
  metrics = [json.loads(l) for l in (helpers / "out" / "metrics.jsonl").read_text()
             .splitlines()]
  assert [m["round"] for m in metrics] == [1, 2]


def test_own_arrays_and_own_module_through_run():
  fd = own_data()
  assert fd.client_ids[0] == "user_0" and fd.counts.tolist() == [12, 14, 16, 18, 20, 22]
  res = run(RunConfig.from_dict(dict(out=None, **CFG)), progress=False, data=fd,
            model=Net())
  s = res.summary
  assert s["dataset"] == "mine" and s["model"] == "Net" and s["num_clients"] == 6
  # The trained parameters are our module's: two Dense layers, 5 -> 8 -> 3.
  kernels = sorted(p["kernel"].shape for p in res.state.params.values())
  assert kernels == [(DIM, 8), (8, NUM_CLASSES)]
  assert len(res.records) == 2 and all(np.isfinite(r["train_loss"]) for r in res.records)


# --- npz ------------------------------------------------------------------------------

def test_npz_layout_natural_and_repartitioned(tmp_path):
  path = write_npz(tmp_path / "d.npz", name=np.str_("my_data"),
                   client_id=np.repeat([f"u{i}" for i in range(6)],
                                       [12, 14, 16, 18, 20, 22]))
  fd = load_dataset(f"npz:{path}")
  ref = own_data()
  assert fd.name == "my_data" and fd.partition == "natural" and fd.num_classes == 3
  assert fd.client_ids == tuple(f"u{i}" for i in range(6))
  np.testing.assert_array_equal(fd.counts, ref.counts)
  np.testing.assert_array_equal(fd.x, ref.x)
  np.testing.assert_array_equal(fd.test_y, ref.test_y)
  re = load_dataset(f"npz:{path}", partition="dirichlet", alpha=0.1, seed=1)
  assert re.partition == "dirichlet" and re.num_clients == 6  # the file's clients
  assert re.num_examples == fd.num_examples and "alpha=0.1" in re.describe()
  assert load_dataset(f"npz:{path}", partition="iid", num_clients=4).num_clients == 4
  with pytest.raises(FedJaxDpError) as e:
    load_dataset(f"npz:{path}", num_clients=4)
  assert e.value.option == "num_clients" and "6 natural groups" in str(e.value)
  # save_npz writes the same layout back.
  again = load_dataset("npz:" + npz.save_npz(str(tmp_path / "again"), fd))
  np.testing.assert_array_equal(again.x, fd.x)
  assert again.client_ids == fd.client_ids and again.name == "my_data"


def test_npz_default_model_follows_the_features(tmp_path):
  rng = np.random.default_rng(0)
  img = str(tmp_path / "img.npz")
  np.savez(img, x=rng.normal(size=(40, 8, 8, 1)), y=np.arange(40) % 2,
           client_id=np.arange(40) % 4)
  assert make_setup(RunConfig(dataset=f"npz:{img}")).model_name == "cnn"
  flat = write_npz(tmp_path / "flat.npz")
  assert make_setup(RunConfig(dataset=f"npz:{flat}")).model_name == "mlp"
  assert make_setup(RunConfig(dataset=f"npz:{flat}", model="linear")).model_name == "linear"


N = 12 + 14 + 16 + 18 + 20 + 22


@pytest.mark.parametrize("changes,needle", [
    (dict(client_id=None), "missing key(s) client_id; the file has test_x, test_y, x, y"),
    (dict(y=None, x=None), "missing key(s) x, y"),
    (dict(labels=np.zeros(3)), "unknown key(s) labels"),
    (dict(y=np.zeros(N - 1, int)), f"y must have shape ({N},)"),
    (dict(client_id=np.zeros(N + 1, int)), f"client_id must have shape ({N},)"),
    (dict(client_id=np.zeros(N)), "client_id must hold integers or strings"),
    (dict(y=np.zeros(N)), "y must hold integer class labels, got dtype float64"),
    (dict(y=np.full(N, -1)), "labels must be in [0, num_classes=3), got labels in [-1, 2]"),
    (dict(num_classes=np.int64(2)), "labels must be in [0, num_classes=2)"),
    (dict(num_classes=np.float64(3)), "num_classes must be a scalar integer >= 2"),
    (dict(test_y=np.full(60, 7), num_classes=np.int64(3)), "got labels in [0, 7]"),
    (dict(x=np.full((N, DIM), np.nan)), f"x has non-finite values (NaN or Inf) in {N} row"),
    (dict(test_x=np.full((60, DIM), np.inf)), "test_x has non-finite values"),
    (dict(test_x=np.zeros((60, DIM + 1))), "test_x must have x's feature shape (5,)"),
    (dict(test_y=None), "test_x and test_y must be given together"),
    (dict(x=np.zeros(N)), "at least 2-D"),
    (dict(x=np.full((N, DIM), "a")), "x must be a real-valued array"),
    (dict(client_id=np.array([object()] * N)), "pickled Python objects"),
    (dict(name=np.str_("")), "name must be a non-empty scalar string"),
])
def test_npz_errors(tmp_path, changes, needle):
  path = write_npz(tmp_path / "bad.npz", **changes)
  with pytest.raises(DataFileError) as e:
    load_dataset(f"npz:{path}")
  assert needle in str(e.value) and e.value.option == "dataset", str(e.value)
  assert "bad.npz" in str(e.value) and "expected layout" in str(e.value)


def test_npz_file_errors(tmp_path):
  with pytest.raises(DatasetNotAvailableError, match="no such file") as e:
    load_dataset(f"npz:{tmp_path}/missing.npz")
  assert "missing.npz" in str(e.value) and e.value.option == "dataset"
  (tmp_path / "text.npz").write_text("not a zip")
  with pytest.raises(DataFileError, match="cannot be read as an .npz archive"):
    load_dataset(f"npz:{tmp_path}/text.npz")
  np.save(tmp_path / "one.npy", np.zeros(3))
  with pytest.raises(DataFileError, match="single .npy array"):
    load_dataset(f"npz:{tmp_path}/one.npy")
  with pytest.raises(FedJaxDpError, match="give the file after 'npz:'"):
    load_dataset("npz:")
  with pytest.raises(FedJaxDpError, match="npz:PATH"):  # unknown names mention npz
    load_dataset("not_a_dataset")


def test_npz_errors_on_the_command_line(tmp_path, capsys):
  out = tmp_path / "out"
  base = ["run", "--rounds", "1", "--no-progress", "--out", str(out)]
  assert cli.main(base + ["--dataset", f"npz:{tmp_path}/missing.npz"]) == 2
  err = capsys.readouterr().err
  assert "no such file" in err and "(option --dataset)" in err and err.count("\n") == 1
  bad = write_npz(tmp_path / "bad.npz", y=np.full(N, 9), num_classes=np.int64(3))
  assert cli.main(base + ["--dataset", f"npz:{bad}"]) == 2
  err = capsys.readouterr().err
  assert "labels must be in [0, num_classes=3)" in err and "(option --dataset)" in err
  assert not out.exists()


# --- models -------------------------------------------------------------------------

def test_from_module_wraps_and_checks():
  m = from_module(Net(), (DIM,), NUM_CLASSES)
  assert isinstance(m, Model) and m.name == "Net"
  import jax
  params = m.init(jax.random.key(0))
  assert m.apply(params, np.zeros((4, DIM), np.float32)).shape == (4, NUM_CLASSES)


class Dropout(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(3)(nn.Dropout(0.5, deterministic=False)(x))


class Squeezed(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(x)[:, 0]


@pytest.mark.parametrize("module,needle", [
    (Net, "got the class Net (write Net(...))"),
    ("mlp", "must be a flax linen nn.Module"),
    (Net(num_classes=4), "must return logits [batch, num_classes] = [2, 3]"),
    (Squeezed(), "got float32 (2,)"),
    (Dropout(), "apply on a dummy batch float32 [2, *(5,)] failed"),
])
def test_from_module_errors(module, needle):
  with pytest.raises(FedJaxDpError) as e:
    from_module(module, (DIM,), NUM_CLASSES)
  assert needle in str(e.value) and e.value.option == "model", str(e.value)


def test_run_refuses_a_model_twice_or_one_that_does_not_fit():
  fd = own_data()
  with pytest.raises(FedJaxDpError, match="not both") as e:
    make_setup(RunConfig(model="linear"), data=fd, model=Net())
  assert e.value.option == "model"
  with pytest.raises(FedJaxDpError, match="was built for features"):
    make_setup(RunConfig(), data=fd, model=create_model("linear", (7,), NUM_CLASSES))
  assert make_setup(RunConfig(), data=fd).model_name == "mlp"  # own data: by its shape


@pytest.mark.parametrize("spec,ok", [
    ("tests_helpers_module:factory", True), ("pkg.sub.mod:make_net", True),
    ("a:b:c", False), ("mod:", False), (":factory", False), ("1mod:f", False),
    ("mod:f.g", False), ("mod.:f", False),
])
def test_model_spec_syntax_is_checked_without_importing(spec, ok):
  cfg = RunConfig(dataset="synthetic", model=spec)
  if ok:
    assert cfg.validate() is cfg
    assert "pkg" not in sys.modules
  else:
    with pytest.raises(FedJaxDpError, match="package.module:factory") as e:
      cfg.validate()
    assert e.value.option == "model"


def test_model_factories(helpers):
  m = model_from_factory("tests_helpers_module:factory", (DIM,), NUM_CLASSES)
  assert m.name == "tests_helpers_module:factory" and m.num_classes == NUM_CLASSES
  assert str(helpers) in sys.path  # the current directory was made importable
  m = model_from_factory("tests_helpers_module:as_model", (DIM,), NUM_CLASSES)
  assert m.name == "linear"  # a factory may return a Model


@pytest.mark.parametrize("spec,needle", [
    ("no_such_module_xyz:factory", "cannot import 'no_such_module_xyz': "
     "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("broken_helpers:factory", "No module named 'a_module_that_is_not_there'"),
    ("tests_helpers_module:nope", "has no attribute 'nope'; its callables: "),
    ("tests_helpers_module:NOT_CALLABLE", "NOT_CALLABLE is a int, not a function"),
    ("tests_helpers_module:no_arguments", "must take (feature_shape, num_classes)"),
    ("tests_helpers_module:returns_int", "the factory returned int, expected a flax"),
    ("tests_helpers_module:too_few_logits", "[2, 3] (floating)"),
    ("tests_helpers_module:batch_norm", "init must create only 'params'"),
    ("tests_helpers_module:wrong_shape_model", "was built for features (7,)"),
])
def test_bad_factories(helpers, spec, needle):
  with pytest.raises(FedJaxDpError) as e:
    model_from_factory(spec, (DIM,), NUM_CLASSES)
  assert needle in str(e.value) and e.value.option == "model", str(e.value)


def test_bad_factory_on_the_command_line(helpers, capsys):
  write_npz(helpers / "data.npz")
  rc = cli.main(["run", "--dataset", "npz:data.npz", "--model",
                 "tests_helpers_module:returns_int", "--no-progress", "--out", "out"])
  err = capsys.readouterr().err
  assert rc == 2 and "returned int" in err and "(option --model)" in err, err
  assert err.count("\n") == 1 and not (helpers / "out").exists()
