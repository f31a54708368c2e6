"""Graceful interruption of a run: Ctrl-C (SIGINT) and SIGTERM stop training at a safe
point instead of in the middle of a checkpoint or a metrics line.

`GracefulInterrupts` turns both signals into a `RunInterrupted` exception (a
`KeyboardInterrupt`, so code that already handles Ctrl-C keeps working). Inside
`GracefulInterrupts.critical` (a checkpoint write, a metrics line) the signal is only
noted, and raised when the critical section ends, so every checkpoint and every line
of metrics.jsonl is either complete or not started. Once a signal has been received,
later ones are noted and not raised, so that a second Ctrl-C cannot cut short the
summary that the first one asked for. Signals are only handled in the main thread
(Python delivers them there); elsewhere the context does nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Optional

__all__ = [
    "SIGNALS", "RunInterrupted", "GracefulInterrupts",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
  """Raised at a safe point after SIGINT or SIGTERM; ``signum`` is the signal."""

  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = int(signum)

  @property
  def exit_code(self) -> int:
    """The shell convention for a process ended by the signal: 128 + its number."""
    return 128 + self.signum


class GracefulInterrupts:
  """Context manager: SIGINT and SIGTERM raise `RunInterrupted`, deferred out of
  `critical` sections; the previous handlers are restored on exit.

  Attributes:
    received: the first signal's number, or None.
  """

  def __init__(self):
    self.received: Optional[int] = None
    self._depth = 0
    self._raised = False
    self._previous = {}

  def __enter__(self) -> "GracefulInterrupts":
    if threading.current_thread() is threading.main_thread():
      for s in SIGNALS:
        self._previous[s] = signal.signal(s, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for s, h in self._previous.items():
      signal.signal(s, h)
    self._previous = {}

  def _handle(self, signum, frame) -> None:
    del frame
    if self.received is None:
      self.received = signum
    if self._depth == 0 and not self._raised:
      self._raised = True
      raise RunInterrupted(signum)

  @contextlib.contextmanager
  def critical(self) -> Iterator[None]:
    """A section that a signal does not cut short: the signal is raised after it."""
    self._depth += 1
    try:
      yield
    finally:
      self._depth -= 1
    if self._depth == 0 and self.received is not None and not self._raised:
      self._raised = True
      raise RunInterrupted(self.received)
