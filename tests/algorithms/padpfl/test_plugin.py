"""PADPFL through `fedjax-dp run`'s generic loop: the scenario-4 data change is a data
phase of its controller, and checkpoints after it carry the right round (the loop counts
rounds across phases; the pre-interface runner labelled them by the rounds of the
current phase only)."""

import json

import pytest

from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.runs import RunConfig, run

BASE = dict(algorithm="padpfl", dataset="mnist", scenario=4, impact_factors="equal",
            epsilon=20.0, delta=0.01, clip_bound=5.0, hidden="8", local_steps=1,
            eval_every=4)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_checkpoints_count_rounds_across_the_data_change(tmp_path):
  out = tmp_path / "s4"
  res = run(RunConfig.from_dict({**BASE, "rounds": 14, "out": str(out)}), progress=False)
  assert res.summary["rounds"] == 14
  ckpt = RunCheckpointer(str(out / "checkpoints"))
  meta = ckpt.restore_meta()
  assert ckpt.latest() == 14 and meta["rounds_done"] == 14
  assert [r["round"] for r in meta["records"]] == list(range(1, 15))
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  # evaluated at the end of every block: 4, 8, (10: the phase ends), 14
  assert [r["round"] for r in rows if r.get("test_accuracy") is not None] == [4, 8, 10, 14]
  # Resuming the finished run changes nothing (the controller replays the phases).
  again = run(RunConfig(resume=str(out)), progress=False)
  assert again.summary["epsilon_rdp"] == res.summary["epsilon_rdp"]
  assert again.summary["rounds"] == 14


def test_default_options_name_the_papers_quantities():
  cfg = RunConfig(algorithm="padpfl")
  assert cfg.options.clip_bound == 9.0 and cfg.options.epsilon == 20.0
  assert "clip_norm" not in RunConfig.option_names("padpfl")  # B is clip_bound
