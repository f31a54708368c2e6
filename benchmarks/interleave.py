"""Interleaved side-by-side timing of benchmark processes, round by round.

On a shared machine a slow minute (another job, a noisy neighbour) would land on one
framework if each ran its rounds alone. Here every framework runs as a long-lived
process in serve mode (``--serve`` of `benchmarks.dpsgd`, ``peer_opacus.py``,
``peer_jax_privacy.py``; protocol: `benchmarks.common.serve`), built and warmed up once,
one after the other. Then, for each round r, every process runs ONE timed round, in an
order rotated by one each round (round 0: A B C, round 1: B C A, ...), so that a slow
stretch of the machine hits all of them about equally and no framework is always first
or last. Only one process computes at a time: the others block on their stdin, so they
do not compete for the cores.

Ratios fedjax_dp / peer (per-example gradients per second, i.e. peer seconds / our
seconds) are computed per round pair (round r of both) and summarised by their median,
next to the ratio of the median round times.

  from benchmarks import interleave
  summary = interleave.run([Entry("fedjax_dp", [python, "-m", "benchmarks.dpsgd", ...,
                                                "--serve"]), ...], rounds=5)
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

from benchmarks import common, workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = "fedjax_dp"


@dataclasses.dataclass
class Entry:
  """One framework/mode to serve: its label, command line and environment."""
  label: str
  cmd: List[str]
  env: Optional[dict] = None


class Server:
  """A benchmark process in serve mode; stderr goes to a log file (its tail is quoted
  when the process fails)."""

  def __init__(self, entry: Entry, log_dir: str):
    self.label = entry.label
    self.log_path = os.path.join(log_dir, entry.label.replace(" ", "_") + ".log")
    self._log = open(self.log_path, "w")
    self.t0 = time.perf_counter()
    self.proc = subprocess.Popen(entry.cmd, cwd=ROOT, env=entry.env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self._log, bufsize=1)

  def ask(self, command: Optional[str], expect: str, timeout: float) -> dict:
    """Sends ``command`` (if any) and returns the next protocol line of event
    ``expect``; kills the process if none comes within ``timeout`` seconds."""
    if command:
      self.proc.stdin.write(command + "\n")
      self.proc.stdin.flush()
    timer = threading.Timer(timeout, self.proc.kill)
    timer.start()
    try:
      while True:
        line = self.proc.stdout.readline()
        if not line:
          self.proc.wait()
          raise RuntimeError(f"[interleave] {self.label} ended (exit {self.proc.returncode})"
                             f" waiting for {expect!r}:\n{self.stderr_tail()}")
        try:
          msg = json.loads(line)
        except ValueError:
          continue
        if msg.get("event") == "error":
          raise RuntimeError(f"[interleave] {self.label}: {msg.get('message')}")
        if msg.get("event") == expect:
          return msg
    finally:
      timer.cancel()

  def stderr_tail(self, n: int = 4000) -> str:
    self._log.flush()
    with open(self.log_path) as f:
      return f.read()[-n:]

  def close(self) -> None:
    if self.proc.poll() is None:
      try:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
      except (OSError, subprocess.TimeoutExpired):
        self.proc.kill()
        self.proc.wait()
    self._log.close()


def _median(xs):
  return common._median(list(xs))  # pylint: disable=protected-access


def summarize(workload: dict, ready: Dict[str, dict], rounds: Dict[str, List[dict]],
              orders: List[List[str]]) -> dict:
  """Per framework: median/min/max seconds per round, per-example gradients/s; per peer:
  our per-round speed-ups (peer s / our s of the same round r), their median and the
  ratio of the medians; per peer framework, its best mode (lower median)."""
  ex = workloads.dpsgd_examples_per_round(workload)
  flops = workloads.dpsgd_flops_per_round(workload)
  per = {}
  for label, msgs in rounds.items():
    secs = [m["seconds"] for m in msgs]
    med = _median(secs)
    per[label] = {"framework": ready[label].get("framework", label),
                  "method": ready[label].get("method", ""), "round_seconds": secs,
                  "round_losses": [m["loss"] for m in msgs], "median_s": med,
                  "min_s": min(secs), "max_s": max(secs),
                  "per_example_grads_per_s": ex / med, "gflops": flops / med / 1e9,
                  "warmup_seconds": ready[label].get("warmup_seconds", []),
                  "ready_s": ready[label].get("ready_s")}
  speedups, best = {}, {}
  if OURS in per:
    ours = per[OURS]["round_seconds"]
    for label, p in per.items():
      if label == OURS:
        continue
      pr = [t / o for t, o in zip(p["round_seconds"], ours)]
      speedups[label] = {"per_round": pr, "median_of_round_ratios": _median(pr),
                         "ratio_of_medians": p["median_s"] / per[OURS]["median_s"]}
      fw = p["framework"]
      if fw not in best or p["median_s"] < per[best[fw]]["median_s"]:
        best[fw] = label
  return {"workload": workload["name"], "rounds": len(orders), "order": orders,
          "examples_per_round": ex, "frameworks": per, "speedups": speedups,
          "best_mode": best}


def run(entries: List[Entry], workload: dict, rounds: int, timeout: float = 3600.0,
        profile: bool = False, log: Callable[[str], None] = print) -> dict:
  """Serves ``entries``, one after another built and warmed up, then ``rounds``
  interleaved rounds (rotating order); returns `summarize`'s dict plus ``records``
  (each process's own JSON record over the same rounds) and, with ``profile``,
  ``profile``: fedjax_dp's `benchmarks.dpsgd.profile_round` (one more round, traced)."""
  log_dir = tempfile.mkdtemp(prefix=f"interleave_{workload['name']}_")
  servers: List[Server] = []
  ready: Dict[str, dict] = {}
  try:
    for e in entries:
      s = Server(e, log_dir)
      servers.append(s)
      ready[e.label] = dict(s.ask(None, "ready", timeout), ready_s=time.perf_counter() - s.t0)
      log(f"[interleave] {workload['name']}: {e.label} ready "
          f"({ready[e.label]['ready_s']:.1f} s with warm-up)")
    rounds_msgs: Dict[str, List[dict]] = {s.label: [] for s in servers}
    orders = []
    for r in range(rounds):
      k = r % len(servers)
      order = servers[k:] + servers[:k]
      orders.append([s.label for s in order])
      for s in order:
        rounds_msgs[s.label].append(s.ask("round", "round", timeout))
      log(f"[interleave] {workload['name']} round {r}: " + ", ".join(
          f"{s.label} {rounds_msgs[s.label][-1]['seconds']:.3f} s" for s in order))
    out = summarize(workload, ready, rounds_msgs, orders)
    out["ready"] = ready
    out["log_dir"] = log_dir
    by_label = {s.label: s for s in servers}
    if profile and OURS in by_label:
      out["profile"] = by_label[OURS].ask("profile", "profile", timeout)
    out["records"] = [s.ask("done", "record", timeout)["record"] for s in servers]
    return out
  finally:
    for s in servers:
      s.close()
