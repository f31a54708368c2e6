"""IDX reader on small generated files: raw, gzip, and every kind of corruption."""

import gzip
import os

import numpy as np
import pytest

from fedjax_dp.data.sources.idx import read_idx, write_idx
from fedjax_dp.validation import FedJaxDpError


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("shape", [(7,), (5, 3, 4), (2, 28, 28)])
def test_roundtrip(tmp_path, compress, shape):
  a = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
  p = tmp_path / "f.idx"
  write_idx(p, a, compress=compress)
  assert (p.read_bytes()[:2] == b"\x1f\x8b") == compress
  out = read_idx(p)
  assert out.dtype == np.uint8 and out.shape == shape
  np.testing.assert_array_equal(out, a)


def test_header_layout_is_big_endian(tmp_path):
  p = tmp_path / "labels"
  write_idx(p, np.array([1, 2, 3], np.uint8))
  assert p.read_bytes() == bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3])


def test_gzip_detected_by_content_not_name(tmp_path):
  p = tmp_path / "no_gz_suffix"
  write_idx(p, np.arange(6, dtype=np.uint8).reshape(2, 3), compress=True)
  np.testing.assert_array_equal(read_idx(p), np.arange(6).reshape(2, 3))


def _raw(tmp_path, payload, name="bad"):
  p = tmp_path / name
  p.write_bytes(payload)
  return str(p)


def test_truncated_data_names_file(tmp_path):
  p = _raw(tmp_path, bytes([0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + b"\x01" * 5)
  with pytest.raises(FedJaxDpError, match=r"truncated.*\(2, 3\) needs 6 data bytes, found 5") as e:
    read_idx(p)
  assert p in str(e.value)


def test_trailing_bytes_rejected(tmp_path):
  p = _raw(tmp_path, bytes([0, 0, 8, 1, 0, 0, 0, 2]) + b"\x01" * 3)
  with pytest.raises(FedJaxDpError, match="longer than its header says"):
    read_idx(p)


def test_truncated_header(tmp_path):
  p = _raw(tmp_path, bytes([0, 0, 8, 3, 0, 0, 0, 2]))
  with pytest.raises(FedJaxDpError, match="truncated: 8 bytes, header alone needs 16"):
    read_idx(p)


@pytest.mark.parametrize("payload", [b"", b"\x01\x00\x08\x01", b"PK\x03\x04rest"])
def test_bad_magic(tmp_path, payload):
  p = _raw(tmp_path, payload)
  with pytest.raises(FedJaxDpError, match="is not an IDX file: bad magic") as e:
    read_idx(p)
  assert p in str(e.value)


def test_unsupported_dtype_byte(tmp_path):
  p = _raw(tmp_path, bytes([0, 0, 0x0D, 1, 0, 0, 0, 1]) + b"\0\0\0\0")
  with pytest.raises(FedJaxDpError, match="dtype byte 0x0d; only 0x08"):
    read_idx(p)


def test_zero_ndim(tmp_path):
  with pytest.raises(FedJaxDpError, match="ndim=0"):
    read_idx(_raw(tmp_path, bytes([0, 0, 8, 0])))


def test_truncated_gzip_names_file(tmp_path):
  good = gzip.compress(bytes([0, 0, 8, 1, 0, 0, 0, 100]) + bytes(range(100)))
  p = _raw(tmp_path, good[:len(good) // 2], "cut.gz")
  with pytest.raises(FedJaxDpError, match="corrupted or truncated gzip") as e:
    read_idx(p)
  assert p in str(e.value)


def test_corrupted_gzip(tmp_path):
  good = bytearray(gzip.compress(bytes([0, 0, 8, 1, 0, 0, 0, 100]) + bytes(range(100))))
  good[12:20] = b"\xff" * 8
  with pytest.raises(FedJaxDpError, match="corrupted or truncated gzip"):
    read_idx(_raw(tmp_path, bytes(good), "corrupt.gz"))


def test_missing_file(tmp_path):
  p = os.path.join(tmp_path, "nope")
  with pytest.raises(FedJaxDpError, match="cannot read IDX file") as e:
    read_idx(p)
  assert p in str(e.value)


def test_write_idx_rejects_non_uint8(tmp_path):
  with pytest.raises(FedJaxDpError, match="uint8"):
    write_idx(tmp_path / "x", np.zeros(3, np.float32))
