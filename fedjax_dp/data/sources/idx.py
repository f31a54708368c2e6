"""Reader (and a small writer, for fixtures) of IDX files, the MNIST file format.

An IDX file is a 4-byte magic ``00 00 <dtype> <ndim>``, then ``ndim`` big-endian
uint32 sizes, then the data in C order. Only dtype ``0x08`` (unsigned byte), the
one MNIST, Fashion-MNIST and EMNIST use, is supported. Files may be gzip-compressed
(detected from the content, not the file name).
"""

from __future__ import annotations

import gzip
import os
import zlib
from typing import Union

import numpy as np

from fedjax_dp.data.sources.errors import DataFileError
from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "read_idx_bytes", "read_idx", "parse_idx", "write_idx",
]

_GZIP_MAGIC = b"\x1f\x8b"
_UBYTE = 0x08


def read_idx_bytes(path: Union[str, os.PathLike]) -> bytes:
  """The bytes of an IDX file, decompressed if it is gzip (detected from the content).

  Raises:
    DataFileError: naming the file if it cannot be read or is a corrupted or truncated
      gzip stream (gzip's CRC-32 and length trailer are checked).
  """
  path = os.fspath(path)
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataFileError(f"cannot read IDX file {path!r}: {e}.") from e
  if raw[:2] != _GZIP_MAGIC:
    return raw
  try:
    return gzip.decompress(raw)
  except (OSError, EOFError, zlib.error) as e:
    raise DataFileError(
        f"IDX file {path!r} is a corrupted or truncated gzip file ({e}).") from e


def read_idx(path: Union[str, os.PathLike]) -> np.ndarray:
  """Reads an unsigned-byte IDX file (raw or gzip).

  Args:
    path: path to the file.

  Returns:
    uint8 array of the shape stored in the header, e.g. ``[60000, 28, 28]`` for
    images or ``[60000]`` for labels.

  Raises:
    DataFileError: naming the file if it cannot be read, the gzip stream is broken,
      the magic is wrong, the dtype byte is not 0x08, or the data is shorter or longer
      than the header says.
  """
  return parse_idx(read_idx_bytes(path), os.fspath(path))


def parse_idx(data: bytes, path: str = "<bytes>") -> np.ndarray:
  """Parses the (decompressed) bytes of an IDX file; see `read_idx`.

  Raises:
    DataFileError: as `read_idx` (``path`` only names the file in messages).
  """
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise DataFileError(
        f"{path!r} is not an IDX file: bad magic {data[:4].hex() or '(empty)'}; expected "
        "00 00 <dtype> <ndim>.")
  if data[2] != _UBYTE:
    raise DataFileError(
        f"IDX file {path!r} has dtype byte 0x{data[2]:02x}; only 0x08 (unsigned byte) "
        "is supported.")
  ndim = data[3]
  if ndim < 1:
    raise DataFileError(f"IDX file {path!r} declares ndim={ndim}; expected >= 1.")
  header = 4 + 4 * ndim
  if len(data) < header:
    raise DataFileError(
        f"IDX file {path!r} is truncated: {len(data)} bytes, header alone needs {header}.")
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
  expected = int(np.prod(shape, dtype=np.int64))
  got = len(data) - header
  if got != expected:
    what = "truncated" if got < expected else "longer than its header says"
    raise DataFileError(
        f"IDX file {path!r} is {what}: header shape {shape} needs {expected} data bytes, "
        f"found {got}.")
  return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def write_idx(path: Union[str, os.PathLike], array: np.ndarray,
              compress: bool = False) -> None:
  """Writes a uint8 array as an IDX file (gzip-compressed if ``compress``).

  Raises:
    FedJaxDpError: if ``array`` is not uint8 or has no dimensions.
  """
  array = np.asarray(array)
  if array.dtype != np.uint8 or array.ndim < 1:
    raise FedJaxDpError(
        f"write_idx needs a uint8 array with ndim >= 1, got {array.dtype} {array.shape}.")
  header = bytes([0, 0, _UBYTE, array.ndim]) + b"".join(
      int(s).to_bytes(4, "big") for s in array.shape)
  payload = header + np.ascontiguousarray(array).tobytes()
  opener = gzip.open if compress else open
  with opener(os.fspath(path), "wb") as f:
    f.write(payload)
