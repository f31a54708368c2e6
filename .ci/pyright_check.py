"""Type check with a baseline that may only shrink (CI step; issue 31).

Runs pyright (the version pinned in pyproject's ``dev`` extra, its default "standard"
mode) on ``fedjax_dp/`` and compares its error count per file
with ``.ci/pyright_baseline.json``:

* a file with more errors than its baseline entry (a file absent from the baseline has
  0) fails the check, listing the errors;
* ``--update`` rewrites the baseline from this run, refusing any file whose count grew:
  the baseline only shrinks.

Usage: ``python .ci/pyright_check.py [--update]`` from the repository root, with the
project's virtual environment active.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(ROOT, ".ci", "pyright_baseline.json")


def run_pyright() -> list:
  """The error diagnostics of ``pyright fedjax_dp`` (dicts with file, line, message)."""
  out = subprocess.run(
      [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable,
       "fedjax_dp"], cwd=ROOT, capture_output=True, text=True)
  try:
    report = json.loads(out.stdout)
  except json.JSONDecodeError:
    sys.exit(f"pyright did not produce a report (exit {out.returncode}):\n"
             f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
  errors = []
  for d in report["generalDiagnostics"]:
    if d["severity"] == "error":
      errors.append(dict(file=os.path.relpath(d["file"], ROOT),
                         line=d["range"]["start"]["line"] + 1, message=d["message"]))
  return errors


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--update", action="store_true",
                 help="rewrite the baseline from this run (counts may only shrink)")
  args = p.parse_args()
  errors = run_pyright()
  counts = collections.Counter(e["file"] for e in errors)
  with open(BASELINE) as f:
    baseline = json.load(f)
  grew = {f: n for f, n in counts.items() if n > baseline.get(f, 0)}
  if grew:
    print(f"pyright: {len(grew)} file(s) have more errors than .ci/pyright_baseline.json:")
    for f in sorted(grew):
      print(f"  {f}: {counts[f]} (baseline {baseline.get(f, 0)})")
      for e in errors:
        if e["file"] == f:
          print(f"    {f}:{e['line']}: {e['message'].splitlines()[0]}")
    return 1
  total, base_total = sum(counts.values()), sum(baseline.values())
  if args.update:
    with open(BASELINE, "w") as f:
      json.dump(dict(sorted(counts.items())), f, indent=1)
      f.write("\n")
    print(f"pyright: baseline updated, {base_total} -> {total} errors")
  else:
    shrunk = " (fewer than the baseline: run with --update)" if total < base_total else ""
    print(f"pyright: {total} errors, baseline {base_total}{shrunk}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
