"""``fedjax-dp run --canaries K``: summary.json's canary fields (labelled simulation
diagnostics, left out by --dp-metrics-only), canaries.png, the printed lines, and the
algorithms that refuse canaries."""

import io
import json
import contextlib
import os

import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.runs.canary_report import describe
from fedjax_dp.runs.report import print_summary
from fedjax_dp.validation import FedJaxDpError

BASE = dict(algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
            batch_size=8, rounds=4, eval_every=2, sampling_rate=0.5, clip_norm=1.0,
            canaries=40, logger="none")


def _run(tmp_path, **extra):
  out = str(tmp_path / "run")
  res = run(RunConfig.from_dict({**BASE, **extra, "out": out}), progress=False)
  with open(os.path.join(out, "summary.json")) as f:
    return out, res, json.load(f)


def test_run_reports_canaries_as_diagnostics(tmp_path):
  out, _, s = _run(tmp_path)
  audit = s["canary_audit"]
  n1 = audit["inserted"]
  assert 5 <= n1 <= 35 and audit["held_out"] == 40 - n1 and audit["real_clients"] == 20
  assert audit["population_size"] == 20 + n1 and len(audit["scores"]["inserted"]) == n1
  assert len(audit["scores"]["held_out"]) == 40 - n1
  assert s["empirical_epsilon"]["delta"] == s["delta"]
  assert 0.0 <= s["one_run_lower_bound"]["epsilon"] <= s["epsilon"]
  assert s["one_run_lower_bound"]["confidence"] == 0.95
  for k in ("canary_audit", "empirical_epsilon", "one_run_lower_bound",
            "one_run_lower_bound_gdp"):
    assert s["summary_disclosure"][k]["kind"] == "diagnostic", k
  assert os.path.isfile(os.path.join(out, "canaries.png"))
  lines = describe(s)
  assert "not a bound" in lines[1] and "95% confidence" in lines[2]
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    print_summary(s)
  assert "canaries (simulation diagnostics, not releases)" in buf.getvalue()


def test_dp_metrics_only_leaves_canaries_out(tmp_path):
  out, res, s = _run(tmp_path, dp_metrics_only=True)
  assert "empirical_epsilon" not in s and "canary_audit" not in s
  assert not os.path.exists(os.path.join(out, "canaries.png"))


def test_local_noise_states_its_limitation(tmp_path):
  _, _, s = _run(tmp_path, noise_placement="local", rounds=2)
  assert "final model only" in s["canary_audit"]["limitation"]


def test_algorithms_that_cannot_host_canaries_refuse():
  """Every registered algorithm either hosts canaries or refuses --canaries, naming
  itself and its reason."""
  refused = 0
  for name in registry.names():
    why = registry.get(name).canaries_refused
    if why is None:
      continue
    refused += 1
    with pytest.raises(FedJaxDpError) as e:
      RunConfig.from_dict(dict(algorithm=name, rounds=4, canaries=40)).validate()
    assert e.value.option == "canaries" and name in str(e.value) and why in str(e.value)
  assert refused >= 3  # the record-level variant, SCAFFOLD, DP-FTRL at least


@pytest.mark.parametrize("k", [3, 1, -2])
def test_bad_canary_counts_are_refused(k):
  with pytest.raises(FedJaxDpError) as e:
    RunConfig.from_dict({**BASE, "canaries": k}).validate()
  assert e.value.option == "canaries"
