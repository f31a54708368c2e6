"""A session's progress on stderr: a tqdm bar on a terminal, periodic plain lines
elsewhere (a log file, a batch job's output), and a line saying that the first block
compiles (the bar would otherwise sit at 0/N) and how long compiling took.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional, Sequence, TextIO

import numpy as np

__all__ = ["Progress", "compile_seconds", "EVERY_FRACTION", "EVERY_SECONDS"]

#: Without a terminal: a line every tenth of the rounds or every 30 s, whichever first.
EVERY_FRACTION = 0.1
EVERY_SECONDS = 30.0

_COMPILE_S: List[float] = [0.0]
_LISTENING: List[bool] = [False]


def _listen() -> None:
  """Sums XLA's compile times (JAX's monitoring events), once per process."""
  if _LISTENING[0]:
    return
  import jax

  def on_duration(event: str, duration_secs: float, **_: Any) -> None:
    if event.endswith("backend_compile_duration"):
      _COMPILE_S[0] += duration_secs

  jax.monitoring.register_event_duration_secs_listener(on_duration)
  _LISTENING[0] = True


def compile_seconds() -> float:
  """Seconds spent in XLA compilation in this process since the first `Progress`."""
  return _COMPILE_S[0]


def _cache_note() -> str:
  from fedjax_dp import compilation_cache
  folder = compilation_cache.active_dir()
  return (f"first run only; cached afterwards in {folder}" if folder else
          "no compilation cache: every run compiles")


class Progress:
  """One member's loss, accuracy and epsilon (or several members' mean accuracy) per
  compiled block: a tqdm bar when ``stream`` is a terminal, else a plain line every
  `EVERY_FRACTION` of the rounds or `EVERY_SECONDS` (``round 10/50: 2.1 s/round, loss
  0.532, acc 0.812, eps 3.20``). Before the first block it says that the round program
  compiles, after it how long compiling took.
  """

  def __init__(self, members: Sequence[Any], stream: Optional[TextIO] = None,
               tty: Optional[bool] = None):
    m = members[0]
    name = m.setup.data.name
    self.desc = (f"{m.alg.name} on {name}" if len(members) == 1 else
                 f"sweep of {len(members)} {m.alg.name} runs on {name}")
    self.stream = sys.stderr if stream is None else stream
    isatty = getattr(self.stream, "isatty", None)
    self.tty = bool(isatty and isatty()) if tty is None else tty
    self.total, self.done = m.planned, m.done_before
    self.t0 = self.t_last = time.perf_counter()
    self.t_compiled: Optional[float] = None
    self.done_compiled = self.done
    self.last_line_at = self.done
    try:
      _listen()
    except Exception:  # pylint: disable=broad-except  # monitoring is optional
      pass
    self.compile_before = _COMPILE_S[0]
    self._print(f"{self.desc}: compiling the round program ({_cache_note()})")
    self.bar = None
    if self.tty:
      from tqdm.auto import tqdm
      self.bar = tqdm(total=self.total, desc=self.desc, unit="round", file=self.stream)
      self.bar.update(self.done)

  def _print(self, line: str) -> None:
    if getattr(self, "bar", None) is not None:
      self.bar.write(line, file=self.stream)  # type: ignore[union-attr]
    else:
      print(line, file=self.stream, flush=True)

  def update(self, members: Sequence[Any], rounds: int) -> None:
    now = time.perf_counter()
    self.done += rounds
    if self.t_compiled is None:
      self.t_compiled, self.done_compiled = now, self.done
      compiled = _COMPILE_S[0] - self.compile_before
      self._print(f"{self.desc}: compiled in {compiled:.1f} s (first block done in "
                  f"{now - self.t0:.1f} s)")
    accs = [next((r["test_accuracy"] for r in reversed(m.fresh) if "test_accuracy" in r),
                 float("nan")) for m in members]
    if len(members) > 1:
      accs = [a for a in accs if not np.isnan(a)]
      stats: Dict[str, str] = {"mean_acc": f"{np.mean(accs):.3f}"} if accs else {}
    else:
      last = members[0].fresh[-1] if members[0].fresh else {}
      stats = {"loss": f"{last.get('train_loss', float('nan')):.3f}",
               "acc": f"{accs[0]:.3f}", "eps": f"{last.get('epsilon', float('inf')):.2f}"}
    if self.bar is not None:
      self.bar.update(rounds)
      self.bar.set_postfix(stats)
      return
    step = max(1, int(np.ceil(self.total * EVERY_FRACTION)))
    due = (self.done - self.last_line_at >= step or now - self.t_last >= EVERY_SECONDS
           or self.done >= self.total)
    if not due:
      return
    after = self.done - self.done_compiled
    per = ((now - self.t_compiled) / after if after > 0 and self.t_compiled is not None
           else (now - self.t0) / max(self.done, 1))
    self._print(f"round {self.done}/{self.total}: {per:.2f} s/round"
                + "".join(f", {k} {v}" for k, v in stats.items()))
    self.last_line_at, self.t_last = self.done, now

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()
