"""The restricted unpickler: admits numpy/builtins and stubs pandas, refuses the rest."""

import os
import pathlib
import pickle
import subprocess

import numpy as np
import pytest

from fedjax_dp.data.sources import unpickle
from fedjax_dp.validation import FedJaxDpError


class _Evil:

  def __init__(self, func, *args):
    self.func, self.args = func, args

  def __reduce__(self):
    return self.func, self.args


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_refuses_os_system_and_does_not_run_it(tmp_path, protocol):
  marker = tmp_path / "pwned"
  payload = pickle.dumps(_Evil(os.system, f"touch {marker}"), protocol=protocol)
  with pytest.raises(pickle.UnpicklingError,
                     match=r"refusing to unpickle global (posix|os)\.system"):
    unpickle.restricted_loads(payload)
  assert not marker.exists()


@pytest.mark.parametrize("func,args", [
    (eval, ("1+1",)), (exec, ("x=1",)), (subprocess.Popen, (["true"],)),
    (getattr, (1, "real")), (pathlib.Path.unlink, ("/nonexistent",)),
    (np.load, ("/nonexistent.npy",)),
])
def test_refuses_other_dangerous_globals(func, args):
  with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle global"):
    unpickle.restricted_loads(pickle.dumps(_Evil(func, *args), protocol=2))


def test_refuses_handwritten_global_opcode():
  payload = b"cbuiltins\n__import__\n(S'os'\ntR."
  with pytest.raises(pickle.UnpicklingError, match=r"builtins\.__import__"):
    unpickle.restricted_loads(payload)


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_reads_numpy_and_builtin_containers(protocol):
  obj = {1: [np.arange(6, dtype=np.float64).reshape(2, 3), np.array([1, -1], np.int64)],
         "s": (slice(1, 5), b"raw", "text", 3.5)}
  out = unpickle.restricted_loads(pickle.dumps(obj, protocol=protocol))
  np.testing.assert_array_equal(out[1][0], obj[1][0])
  assert out[1][0].dtype == np.float64 and out[1][1].dtype == np.int64
  assert out["s"] == obj["s"]


def test_pandas_globals_become_inert_stubs():
  # copyreg._reconstructor(pandas.core.frame.DataFrame, object, None), then BUILD.
  payload = (b"ccopyreg\n_reconstructor\n(cpandas.core.frame\nDataFrame\n"
             b"cbuiltins\nobject\nNtR}S'k'\nI7\nsb.")
  out = unpickle.restricted_loads(payload)
  assert isinstance(out, unpickle.PandasStub)
  assert out.pandas_name == "pandas.core.frame.DataFrame"
  assert out.state == {"k": 7}


def test_pandas_new_index_becomes_dict():
  payload = b"cpandas.core.indexes.base\n_new_Index\n(cbuiltins\nobject\n}S'data'\nI3\nstR."
  assert unpickle.restricted_loads(payload) == {"data": 3}


def test_frame_columns_reads_blockmanager_state():
  mgr = unpickle._stub_class("pandas.core.internals.managers", "BlockManager")()
  mgr.__setstate__(([None, None], [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5, 6]])],
                    [{"data": ["a", "b"]}, ["label"]]))
  frame = unpickle._stub_class("pandas.core.frame", "DataFrame")()
  frame.__setstate__({"_data": mgr})
  cols = unpickle.frame_columns(frame)
  assert sorted(cols) == ["a", "b", "label"]
  np.testing.assert_array_equal(cols["b"], [3.0, 4.0])
  np.testing.assert_array_equal(cols["label"], [5, 6])


def test_frame_columns_rejects_unknown_layout():
  frame = unpickle._stub_class("pandas.core.frame", "DataFrame")()
  frame.__setstate__({"something": 1})
  with pytest.raises(FedJaxDpError, match="unexpected pickled DataFrame layout"):
    unpickle.frame_columns(frame)


def test_no_plain_pickle_load_in_data_package():
  root = pathlib.Path(unpickle.__file__).resolve().parents[1]
  for path in root.rglob("*.py"):
    text = path.read_text()
    for call in ("load(", "loads("):  # spelled in two parts so this file passes too
      assert "pickle." + call not in text, path
    assert "allow_pickle=True" not in text, path
