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
