"""Reading a run's output folder in tests."""

import json
import os


def read_metrics(out):
  """The records of ``out``/metrics.jsonl without ``wall_time_s`` (timing differs run
  to run; everything else of a resumed run must equal the uninterrupted one)."""
  with open(os.path.join(out, "metrics.jsonl")) as f:
    recs = [json.loads(line) for line in f]
  for r in recs:
    r.pop("wall_time_s")
  return recs
