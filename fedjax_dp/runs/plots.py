"""A run's pictures: its learning and privacy curves (``curves.png``), several runs
overlaid (``fedjax-dp plot``), and the label distribution of its partition
(``partition.png``). matplotlib with the Agg backend (no display needed).

Stable entry points (the run loop and sweeps call them for each run folder):
`plot_run` (records + summary -> ``curves.png``), `plot_compare`, `plot_partition`
(a `FederatedData` -> ``partition.png``), and `read_run` (a run folder's records and
summary).

Every epsilon in a title says what it is: the accountant's (RDP or PLD, with its
delta: the guarantee for the noise the code added) and, when the algorithm reports one,
the paper's own (``summary["epsilon_paper"]``: its calibration or accounting, as the
paper states it). A non-private run says ``non-private (epsilon = inf)``; a private run
with no rounds (stopped before its first block finished) ``no rounds completed
(epsilon = 0)``.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypeGuard

import numpy as np

from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "MAX_PARTITION_ROWS", "format_delta", "paper_epsilon_method", "epsilon_label",
    "run_title", "curves_figure", "plot_run", "read_run", "differing_labels",
    "plot_compare", "compare_figure", "label_distribution", "plot_partition",
    "partition_figure",
]

#: Config keys that differ between runs without describing them (left out of legends).
_NOT_LABELS = ("out", "resume", "resume_rounds", "overwrite", "data_dir", "logger",
               "devices", "chunk_size", "verify_checksums")

#: Rows of ``partition.png`` at most (the largest clients).
MAX_PARTITION_ROWS = 100


def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def _finite(v: object) -> TypeGuard[float]:
  """Whether ``v`` is a finite int or float (not a bool): a number to plot."""
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def format_delta(delta: float) -> str:
  """``1e-3`` for 0.001, ``2.5e-5`` for 2.5e-05, ``0.05`` for 0.05."""
  if delta <= 0 or delta >= 0.01:
    return f"{delta:g}"
  mantissa, exponent = f"{delta:.3e}".split("e")
  mantissa = mantissa.rstrip("0").rstrip(".")
  return f"{mantissa}e{int(exponent)}"


def _eps(v: float) -> str:
  return f"{v:.4g}"


def paper_epsilon_method(summary: Mapping[str, Any]) -> str:
  """A short name of how the paper's epsilon (``epsilon_paper``) was obtained, read from
  the summary's note on it (``epsilon_paper_note`` / ``epsilon_paper_mechanism``):
  ``"Theorem 5"``, ``"basic composition"``, ``"classical Gaussian, linear
  composition"``, ``"moments bound"``, else ``"the paper's accounting"``."""
  text = " ".join(str(summary.get(k) or "") for k in (
      "epsilon_paper_method", "epsilon_paper_note", "epsilon_paper_mechanism"))
  theorem = re.search(r"Theorem \d+", text)
  if theorem:
    return theorem.group(0)
  if "basic composition" in text:
    return "basic composition"
  if "classical Gaussian" in text and "linear" in text:
    return "classical Gaussian, linear composition"
  if any("moment" in k for k in summary if k.startswith("epsilon_paper")):
    return "moments bound"
  return "the paper's accounting"


NON_PRIVATE = "non-private (epsilon = inf)"
NO_ROUNDS = "no rounds completed (epsilon = 0)"


def is_private(summary: Mapping[str, Any]) -> bool:
  """Whether a summary.json claims a DP guarantee: its ``private`` field (summaries
  written before it existed: a finite ``epsilon``)."""
  if "private" in summary:
    return bool(summary["private"])
  return _finite(summary.get("epsilon"))


def epsilon_label(summary: Mapping[str, Any]) -> str:
  """What the run's epsilon is, for a title.

  * non-private (``private`` false; summaries without it: ``epsilon`` None or inf):
    ``"non-private (epsilon = inf)"``;
  * private with no rounds run (``rounds`` 0): ``"no rounds completed (epsilon = 0)"``;
  * the accountant's alone: ``"epsilon 268.9 (RDP accountant, delta 1e-3)"``;
  * with the paper's own (``epsilon_paper`` finite): ``"accountant: eps=268.9 (RDP,
    delta 1e-3); paper's calibration: eps=20 (basic composition)"``
    (`paper_epsilon_method`).

  Args:
    summary: a ``summary.json`` dict (``epsilon``, ``accountant``, ``delta``, optional
      ``epsilon_paper`` and its note).
  """
  eps = summary.get("epsilon")
  if not is_private(summary):
    return NON_PRIVATE
  if summary.get("rounds") == 0:
    return NO_ROUNDS
  if not _finite(eps):
    return "no finite epsilon"
  acc = str(summary.get("accountant") or "rdp").upper()
  delta = summary.get("delta")
  delta_txt = f", delta {format_delta(delta)}" if _finite(delta) else ""
  paper = summary.get("epsilon_paper")
  if not _finite(paper):
    return f"epsilon {_eps(eps)} ({acc} accountant{delta_txt})"
  return (f"accountant: eps={_eps(eps)} ({acc}{delta_txt}); paper's calibration: "
          f"eps={_eps(paper)} ({paper_epsilon_method(summary)})")


def run_title(summary: Mapping[str, Any]) -> str:
  """``"<algorithm> on <dataset>\\n<epsilon_label>"`` of a ``summary.json`` dict."""
  return (f"{summary.get('algorithm', '?')} on {summary.get('dataset', '?')}\n"
          f"{epsilon_label(summary)}")


def _series(records: Sequence[Mapping[str, Any]], key: str, x: str = "round"
            ) -> Tuple[List[float], List[float]]:
  """(xs, ys) of the records with a finite ``key`` (and finite x)."""
  pts = [(r.get(x), r.get(key)) for r in records]
  pts = [(a, b) for a, b in pts if _finite(a) and _finite(b)]
  return [a for a, _ in pts], [b for _, b in pts]


def _draw(axes, runs: Sequence[Tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]],
          labels: Sequence[Optional[str]], x: str) -> None:
  """The four panels (accuracy vs x, train loss vs x, epsilon vs round, accuracy vs
  epsilon; with x = epsilon the last is accuracy vs round) for each run."""
  from matplotlib.ticker import MaxNLocator
  (a_acc, a_loss), (a_eps, a_last) = axes
  colours = [f"C{i % 10}" for i in range(len(runs))]
  last_x = "round" if x == "epsilon" else "epsilon"
  xlabel = {"round": "round", "epsilon": "epsilon (accountant)"}
  any_loss = any_eps = any_last = False
  for (records, summary), label, c in zip(runs, labels, colours):
    a_acc.plot(*_series(records, "test_accuracy", x), "o-", color=c, ms=3, label=label)
    base = summary.get("majority_class_accuracy")
    if _finite(base):
      a_acc.axhline(base, color=c, ls="--", lw=1,
                    label="majority-class baseline" if len(runs) == 1 else None)
    xs, ys = _series(records, "train_loss", x)
    if ys:
      any_loss = True
      a_loss.plot(xs, ys, "-", color=c, label=label)
    xs, ys = _series(records, "epsilon", "round")
    if ys:
      any_eps = True
      a_eps.plot(xs, ys, "-", color=c, label=label)
    xs, ys = _series(records, "test_accuracy", last_x)
    if ys:
      any_last = True
      a_last.plot(xs, ys, "o-", color=c, ms=3, label=label)
  acc_name = str(runs[0][1].get("accountant") or "rdp").upper() if runs else "RDP"
  last_round = max((r["round"] for records, _ in runs for r in records
                    if _finite(r.get("round"))), default=0)
  for ax, title, xl, yl in (
      (a_acc, "test accuracy", xlabel[x], "test accuracy"),
      (a_loss, "train loss", xlabel[x], "train loss"),
      (a_eps, "privacy spent", "round", f"epsilon ({acc_name} accountant)"),
      (a_last, "accuracy vs " + ("round" if last_x == "round" else "privacy"),
       xlabel[last_x], "test accuracy")):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.grid(alpha=0.3)
    if xl == "round":
      ax.xaxis.set_major_locator(MaxNLocator(integer=True))
      if last_round:  # every round-axis panel spans the run, whatever it holds
        ax.set_xlim(0.5, last_round + 0.5)
  if not any_loss:
    dp_only = any(s.get("metrics_dp_only") for _, s in runs)
    a_loss.text(0.5, 0.5, "train loss not released" + (" (--dp-metrics-only)" if dp_only
                                                        else ""),
                ha="center", va="center", transform=a_loss.transAxes)
  private = any(is_private(s) for _, s in runs)
  empty = (NO_ROUNDS if private and not any(records for records, _ in runs) else
           "epsilon not released" if private else NON_PRIVATE)
  if not any_eps:
    a_eps.text(0.5, 0.5, empty, ha="center", va="center", transform=a_eps.transAxes)
  if not any_last and last_x == "epsilon":
    a_last.text(0.5, 0.5, empty, ha="center", va="center", transform=a_last.transAxes)


def curves_figure(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]):
  """`plot_run`'s matplotlib figure (the caller closes it: ``plt.close(fig)``)."""
  plt = _pyplot()
  fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
  _draw(axes, [(records, summary)], [None], "round")
  if _finite(summary.get("majority_class_accuracy")):
    axes[0][0].legend(fontsize=8)
  fig.suptitle(run_title(summary), fontsize=11)
  fig.tight_layout()
  return fig


def _save(fig, path: str, **kwargs) -> str:
  plt = _pyplot()
  try:
    fig.savefig(path, **kwargs)
  finally:
    plt.close(fig)
  return path


def plot_run(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any],
             path: str) -> str:
  """``curves.png`` of one run: 2x2 panels, test accuracy vs round with the
  majority-class baseline dashed, train loss vs round ("train loss not released" when
  the records lack it, e.g. ``--dp-metrics-only``), epsilon vs round, test accuracy vs
  epsilon; titled by `run_title` (which epsilon is which).

  Args:
    records: the rows of ``metrics.jsonl`` (1-based ``round``; ``test_accuracy`` on
      evaluation rounds; ``epsilon`` None or absent when non-private), not
      `RunResult.records`.
    summary: the ``summary.json`` dict.
    path: the PNG file to write.

  Returns:
    ``path``.
  """
  return _save(curves_figure(records, summary), path, dpi=110)


def read_run(folder: str) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
  """``(records, summary)`` of a run folder: its ``metrics.jsonl`` rows and its
  ``summary.json``.

  Raises:
    FedJaxDpError (option ``run_dirs``): the folder does not exist or lacks one of the
      two files (naming the folder and the file expected), or a file is not valid JSON.
  """
  if not os.path.isdir(folder):
    raise FedJaxDpError(f"run_dirs: {folder!r} is not a folder; expected the output "
                        "folder of `fedjax-dp run` (with metrics.jsonl and summary.json).",
                        option="run_dirs")
  paths = {f: os.path.join(folder, f) for f in ("metrics.jsonl", "summary.json")}
  for f, p in paths.items():
    if not os.path.isfile(p):
      raise FedJaxDpError(f"run_dirs: {folder!r} holds no {f} (expected the output "
                          "folder of a `fedjax-dp run` that has finished or been "
                          "interrupted: it writes metrics.jsonl and summary.json).",
                          option="run_dirs")
  try:
    with open(paths["metrics.jsonl"]) as fh:
      records = [json.loads(line) for line in fh if line.strip()]
    with open(paths["summary.json"]) as fh:
      summary = json.load(fh)
  except json.JSONDecodeError as e:
    raise FedJaxDpError(f"run_dirs: {folder!r} has a file that is not valid JSON ({e}).",
                        option="run_dirs") from None
  return records, summary


#: Options whose None means another option's value (`fedjax_dp.runs.config.RunConfig`):
#: ``data_seed`` None is the run's ``seed``.
_RESOLVED_FROM = {"data_seed": "seed"}


def _effective(config: Dict[str, Any]) -> Dict[str, Any]:
  """``config`` with each None of `_RESOLVED_FROM` replaced by the value it resolves to,
  so that ``data_seed=None`` and ``data_seed=0`` of a seed-0 run compare equal."""
  for key, source in _RESOLVED_FROM.items():
    if key in config and config[key] is None and source in config:
      config[key] = config[source]
  return config


def differing_labels(summaries: Sequence[Mapping[str, Any]],
                     names: Optional[Sequence[str]] = None) -> List[str]:
  """Legend labels from the config keys whose values differ between runs, e.g.
  ``"noise_multiplier=1.0"`` (keys in the first run's order; ``out``, ``resume``,
  ``logger`` and other keys that do not change results are left out; a key a run lacks
  is left out of its label). Runs whose configs do not differ are labelled by
  ``names`` (their folders), else ``run 1``, ``run 2``, ...

  Args:
    summaries: the runs' ``summary.json`` dicts (``config``: the flat option table).
    names: fallback labels, one per run.
  """
  configs = [_effective(dict(s.get("config") or {})) for s in summaries]
  keys: List[str] = []
  for c in configs:
    keys += [k for k in c if k not in keys and k not in _NOT_LABELS]
  diff = [k for k in keys
          if len({json.dumps(c[k], sort_keys=True, default=str) if k in c else "\0absent"
                  for c in configs}) > 1]
  out = []
  for i, c in enumerate(configs):
    parts = [f"{k}={c[k]}" for k in diff if k in c]
    out.append(", ".join(parts) if parts else
               (names[i] if names is not None else f"run {i + 1}"))
  return out


def plot_compare(runs: Sequence[Tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]],
                 path: str, x: str = "round", labels: Optional[Sequence[str]] = None,
                 names: Optional[Sequence[str]] = None) -> str:
  """Several runs overlaid, one colour each, in `plot_run`'s 2x2 layout: test accuracy
  (each run's majority-class baseline dashed in its colour) and train loss against
  ``x``, epsilon vs round, and test accuracy vs epsilon (vs round when ``x`` is
  epsilon).

  Args:
    runs: ``(records, summary)`` per run (`read_run`).
    path: the PNG file to write.
    x: ``"round"`` or ``"epsilon"`` (the accountant's epsilon spent so far).
    labels: one legend label per run (default: `differing_labels`).
    names: fallback labels when the configs do not differ (the folders).

  Returns:
    ``path``.

  Raises:
    FedJaxDpError: no runs (option ``run_dirs``), ``x`` not round/epsilon (option
      ``x``), or a number of labels other than the number of runs (option ``labels``).
  """
  if not runs:
    raise FedJaxDpError("run_dirs: give at least one run folder.", option="run_dirs")
  if x not in ("round", "epsilon"):
    raise FedJaxDpError(f"x must be 'round' or 'epsilon', got {x!r}.", option="x")
  if labels is not None and len(labels) != len(runs):
    raise FedJaxDpError(f"labels must give one label per run ({len(runs)}), got "
                        f"{len(labels)}: {list(labels)!r}.", option="labels")
  return _save(compare_figure(runs, labels, x, names), path, dpi=110)


def compare_figure(runs: Sequence[Tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]],
                   labels: Optional[Sequence[str]] = None, x: str = "round",
                   names: Optional[Sequence[str]] = None):
  """`plot_compare`'s matplotlib figure (arguments checked there; the caller closes
  it)."""
  if labels is None:
    labels = differing_labels([s for _, s in runs], names)
  plt = _pyplot()
  fig, axes = plt.subplots(2, 2, figsize=(11, 8))
  _draw(axes, runs, labels, x)
  handles, texts = axes[0][0].get_legend_handles_labels()
  if handles:
    fig.legend(handles, texts, loc="lower center", ncol=min(3, len(handles)),
               fontsize=8, frameon=False)
  algos = sorted({str(s.get("algorithm", "?")) for _, s in runs})
  data = sorted({str(s.get("dataset", "?")) for _, s in runs})
  fig.suptitle(f"{', '.join(algos)} on {', '.join(data)}: {len(runs)} runs "
               "(dashed: majority-class baseline)", fontsize=11)
  rows = math.ceil(len(handles) / 3) if handles else 0
  fig.tight_layout(rect=(0, 0.03 * rows + 0.01, 1, 1))
  return fig


def label_distribution(fd) -> np.ndarray:
  """Examples per class of every client of a `FederatedData` (padding excluded).

  Args:
    fd: a `FederatedData` (``y`` int ``[num_clients, max_examples]``, ``counts``
      ``[num_clients]``, ``num_classes``).

  Returns:
    int64 ``[num_clients, num_classes]``; row i sums to ``counts[i]``.

  Raises:
    FedJaxDpError: a real example's label outside ``[0, num_classes)``.
  """
  y = np.asarray(fd.y)
  counts = np.asarray(fd.counts)
  n, k = y.shape[0], int(fd.num_classes)
  mask = np.arange(y.shape[1])[None, :] < counts[:, None]
  labels = y[mask].astype(np.int64)
  if labels.size and (labels.min() < 0 or labels.max() >= k):
    raise FedJaxDpError(f"labels must be in [0, num_classes={k}), got values from "
                        f"{labels.min()} to {labels.max()}.", option="y")
  client = np.repeat(np.arange(n), counts.astype(np.int64))
  return np.bincount(client * k + labels, minlength=n * k).reshape(n, k)


def plot_partition(fd, path: str, max_clients: int = MAX_PARTITION_ROWS) -> str:
  """``partition.png``: per-client label distribution as a heat map (rows: clients,
  largest first, ties by position; columns: classes; colour: the fraction of the
  client's examples in the class) with a side bar of client sizes. More than
  ``max_clients`` clients: the largest ``max_clients`` are shown and the title says so.
  Title: dataset, partition, number of clients.

  Args:
    fd: a `FederatedData`.
    path: the PNG file to write.
    max_clients: the most rows drawn.

  Returns:
    ``path``.
  """
  return _save(partition_figure(fd, max_clients), path, dpi=100)


def partition_figure(fd, max_clients: int = MAX_PARTITION_ROWS):
  """`plot_partition`'s matplotlib figure (the caller closes it)."""
  plt = _pyplot()
  dist = label_distribution(fd)
  sizes = dist.sum(axis=1)
  order = np.argsort(-sizes, kind="stable")[:max_clients]
  frac = dist[order] / np.maximum(sizes[order], 1)[:, None]
  n, k = dist.shape
  shown = len(order)
  height = min(12.0, 2.5 + 0.12 * shown)
  fig, (ax, bar) = plt.subplots(1, 2, figsize=(min(14.0, 5 + 0.15 * k), height),
                                gridspec_kw={"width_ratios": [4, 1]}, sharey=True,
                                layout="constrained")
  im = ax.imshow(frac, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                 interpolation="nearest")
  ax.set_xlabel("class")
  ax.set_ylabel("client (largest first)" if shown <= 40 else "client rank by size")
  if k <= 30:
    ax.set_xticks(range(k))
  ids = list(fd.client_ids)
  if shown <= 40:
    ax.set_yticks(range(shown))
    ax.set_yticklabels([str(ids[i]) for i in order], fontsize=7)
  fig.colorbar(im, ax=[ax, bar], orientation="horizontal", fraction=0.04, pad=0.01,
               aspect=40, label="fraction of the client's examples in the class")
  bar.barh(range(shown), sizes[order], color="0.5")
  bar.set_xlabel("examples")
  bar.set_ylim(shown - 0.5, -0.5)
  more = f" (the {shown} largest shown)" if shown < n else ""
  fig.suptitle(f"{fd.name}: partition {fd.partition}, {n} clients{more}", fontsize=11)
  return fig
