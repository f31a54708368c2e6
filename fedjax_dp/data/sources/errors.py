"""Errors raised by the data sources."""

from __future__ import annotations

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "DatasetNotAvailableError", "DataFileError",
]


class DatasetNotAvailableError(FedJaxDpError):
  """A dataset's files are not on this machine (nothing is ever downloaded).

  The message names the dataset, the places searched and how to get the data.
  """


class DataFileError(FedJaxDpError):
  """A data file is truncated, corrupted, of the wrong format, or fails its checksum.

  The message names the file, what is wrong with it and how to replace it.
  """
