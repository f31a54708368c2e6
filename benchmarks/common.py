"""Helpers shared by benchmark scripts (standard library only: peers import this)."""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from typing import Any, Dict, List


def machine_info() -> Dict[str, Any]:
  """CPU model, core count, memory and Python version of this machine."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  mem_gib = None
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemTotal"):
          mem_gib = round(int(line.split()[1]) / 2**20, 1)
  except OSError:
    pass
  return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem_gib,
          "python": sys.version.split()[0], "platform": platform.platform()}


def peak_rss_mib() -> float:
  """Peak resident set size of this process so far, MiB (Linux ru_maxrss is KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def throughput_record(framework: str, versions: Dict[str, str], workload: Dict[str, Any],
                      round_seconds: List[float], **extra) -> Dict[str, Any]:
  """The JSON record every throughput script prints (one per framework x workload).

  ``round_seconds`` are wall-clock seconds of the timed rounds (after warm-up), each
  measured until the round's new global model is materialised.
  """
  total = sum(round_seconds)
  cu = workload["cohort_size"] * len(round_seconds)
  rec = {"framework": framework, "versions": versions, "workload": workload["name"],
         "cohort_size": workload["cohort_size"], "timed_rounds": len(round_seconds),
         "round_seconds": round_seconds,
         "median_round_s": sorted(round_seconds)[len(round_seconds) // 2],
         "client_updates_per_s": cu / total if total > 0 else None,
         "machine": machine_info(), "peak_rss_mib": peak_rss_mib()}
  rec.update(extra)
  return rec


def emit(record: Dict[str, Any], out: str | None) -> None:
  """Writes ``record`` as JSON to ``out`` (if given) and to stdout's last line."""
  text = json.dumps(record)
  if out:
    with open(out, "w") as f:
      f.write(text + "\n")
  print(text, flush=True)


class Timer:
  """``with Timer() as t: ...; t.seconds``."""

  def __enter__(self):
    self.t0 = time.perf_counter()
    return self

  def __exit__(self, *exc):
    self.seconds = time.perf_counter() - self.t0


def _median(xs: List[float]) -> float:
  s = sorted(xs)
  n = len(s)
  return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def losses_ok(losses: List[float]) -> bool:
  """The loss sanity check of a training record: every round's loss is finite and the
  last round's is below the first's (a broken framework cannot post a fast time)."""
  import math
  return (len(losses) >= 2 and all(math.isfinite(l) for l in losses)
          and losses[-1] < losses[0])


def dpsgd_record(framework: str, versions: Dict[str, str], workload: Dict[str, Any],
                 round_seconds: List[float], round_losses: List[float],
                 **extra) -> Dict[str, Any]:
  """The JSON record of one federated record-level DP-SGD run (section "dpsgd").

  ``round_seconds``: wall-clock seconds of the timed rounds (after warm-up).
  ``round_losses``: mean training loss of EVERY round run, warm-up included (the loss
  check compares the first with the last). Per-example gradients per second and
  GFLOP/s use the median round time and the expected examples of a round
  (`workloads.dpsgd_examples_per_round`, `workloads.dpsgd_flops_per_round`).
  """
  from benchmarks import workloads
  rec = throughput_record(framework, versions, workload, round_seconds, **extra)
  med = _median(round_seconds)
  ex = workloads.dpsgd_examples_per_round(workload)
  rec.update(benchmark="dpsgd", median_round_s=med, expected_examples_per_round=ex,
             per_example_grads_per_s=ex / med,
             gflops=workloads.dpsgd_flops_per_round(workload) / med / 1e9,
             round_losses=list(round_losses), first_round_loss=round_losses[0],
             last_round_loss=round_losses[-1], loss_ok=losses_ok(list(round_losses)))
  return rec


def micro_result(arch: str, batch_size: int, method: str, seconds: List[float],
                 **extra) -> Dict[str, Any]:
  """One microbenchmark line: the clipped gradient sum of one batch of ``batch_size``
  real examples on model ``arch``. Rates use the BEST time of the repeats (calls of
  milliseconds on a machine shared with other jobs: the best is the least disturbed);
  the median is kept too. ``extra``: the fields of `check_sum`."""
  from benchmarks import workloads
  best = min(seconds)
  rec = {"model": arch, "batch_size": batch_size, "method": method, "seconds": seconds,
         "median_s": _median(seconds), "best_s": best,
         "per_example_grads_per_s": batch_size / best,
         "gflops": batch_size * workloads.DPSGD_FLOPS_PER_EXAMPLE[arch] / best / 1e9}
  rec.update(extra)
  return rec


def micro_record(framework: str, versions: Dict[str, str], results: List[Dict[str, Any]],
                 **extra) -> Dict[str, Any]:
  """The JSON record of one framework's microbenchmark (a list of `micro_result`)."""
  rec = {"benchmark": "dpsgd_micro", "framework": framework, "versions": versions,
         "results": results, "machine": machine_info(), "peak_rss_mib": peak_rss_mib()}
  rec.update(extra)
  return rec


def check_sum(got, ref, batch_size: int, clip_norm: float, rtol: float = 1e-4):
  """Sanity fields of a clipped gradient sum ``got`` (flat numpy) against a reference
  ``ref`` computed independently (per-example gradients, clip, sum): the relative L2
  error, whether it is below ``rtol`` and the sum finite with norm <= B C."""
  import numpy as np
  got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
  norm = float(np.linalg.norm(got))
  err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
  ok = bool(np.all(np.isfinite(got)) and norm <= batch_size * clip_norm * (1 + 1e-4)
            and err <= rtol)
  return {"clipped_sum_norm": norm, "rel_err_vs_reference": err, "correct": ok}


# --- Serve mode: one round per stdin command (`benchmarks.interleave`) ----------------
#
# A benchmark script started with ``--serve`` builds its workload, runs the warm-up
# rounds, prints ``{"event": "ready", ...}`` and then reads one command per stdin line:
# ``round`` runs and times one round and prints ``{"event": "round", "round": i,
# "seconds": s, "loss": l}``; ``done`` (or end of input) prints ``{"event": "record",
# "record": {...}}`` (the script's usual JSON record over the rounds served) and exits.
# Protocol lines go to the original stdout; everything else the process prints (Python
# or C) is redirected to stderr, so stdout carries nothing but the protocol.


def _protocol_out():
  """A text stream on the original stdout; fd 1 then points at stderr."""
  sys.stdout.flush()
  out = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)
  sys.stdout = sys.stderr
  return out


def timed_rounds(run_round, warmup: int, timed: int):
  """Runs ``warmup + timed`` rounds; returns ``(seconds, losses)``: the wall time of
  each timed round (``time.perf_counter``) and every round's loss."""
  seconds, losses = [], []
  for r in range(warmup + timed):
    t0 = time.perf_counter()
    losses.append(run_round(r))
    if r >= warmup:
      seconds.append(time.perf_counter() - t0)
  return seconds, losses


def serve(run_round, warmup: int, finish, ready_info=None, extras=None) -> None:
  """Serves rounds on stdin/stdout (protocol above).

  ``run_round(r) -> loss``: runs round ``r`` (0-based, warm-up rounds included) and
  returns only once its new global parameters exist (the caller times it).
  ``finish(seconds, losses) -> record``: the JSON record from the timed rounds' seconds
  and every round's loss (warm-up included). ``ready_info``: extra fields of the ready
  line. ``extras``: ``{command: fn}``, more commands (``fn() -> dict``, answered as
  ``{"event": command, **fn()}``; fedjax_dp's ``profile``)."""
  out = _protocol_out()
  extras = extras or {}

  def say(**fields):
    out.write(json.dumps(fields) + "\n")
    out.flush()

  seconds, losses, warm_s = [], [], []
  for r in range(warmup):
    t0 = time.perf_counter()
    losses.append(float(run_round(r)))
    warm_s.append(time.perf_counter() - t0)
  say(event="ready", warmup_seconds=warm_s, **(ready_info or {}))
  for line in sys.stdin:
    cmd = line.strip()
    if cmd == "done":
      break
    if cmd in extras:
      say(event=cmd, **extras[cmd]())
      continue
    if cmd != "round":
      say(event="error", message=f"unknown command {cmd!r}")
      continue
    r = len(losses)
    t0 = time.perf_counter()
    loss = float(run_round(r))
    dt = time.perf_counter() - t0
    seconds.append(dt)
    losses.append(loss)
    say(event="round", round=len(seconds) - 1, seconds=dt, loss=loss)
  say(event="record", record=finish(seconds, losses))
  out.close()
