"""DP-FTRL's zCDP (fedjax_dp.privacy.zcdp through the run's summary): without
amplification the run is one Gaussian of sensitivity sqrt(sens^2), so rho = sens^2 /
(2 z^2) is exact; recomputed here from metrics.jsonl alone."""

import json
import math

import pytest

from fedjax_dp import cli

SYNTH = ["--dataset", "synthetic", "--num-clients", "20", "--model", "linear",
         "--rounds", "6", "--eval-every", "6", "--delta", "1e-3", "--cycle-length", "4",
         "--clip-norm", "1.0", "--noise-multiplier", "1.3", "--no-progress",
         "--logger", "none"]


@pytest.mark.parametrize("mechanism", ["tree", "independent"])
def test_dp_ftrl_summary_rho_is_exact_and_recomputed_from_metrics(tmp_path, mechanism):
  out = tmp_path / mechanism
  assert cli.main(["run", "--algorithm", "dp_ftrl", "--mechanism", mechanism, *SYNTH,
                   "--out", str(out)]) == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  s = json.loads((out / "summary.json").read_text())
  assert all(r["ftrl_group_rate"] == 1.0 for r in rows)  # no amplification
  z, sens2 = rows[-1]["noise_multiplier"], rows[-1]["ftrl_sensitivity_squared"]
  # sens^2 from the records (checked against its definition in test_dp_ftrl.py);
  # independent noise: the worst group takes part twice in 6 rounds, sens^2 = 2.
  if mechanism == "independent":
    assert sens2 == 2.0
  rho = sens2 / (2 * z * z)
  assert s["rho_zcdp"] == pytest.approx(rho, rel=1e-6)
  assert s["rho_zcdp_exact"] is True and s["rho_zcdp_note"].startswith("exact")
  assert s["epsilon_from_rho"] == pytest.approx(
      rho + 2 * math.sqrt(rho * math.log(1e3)), rel=1e-9)
  # The RDP epsilon of that Gaussian is below the zCDP conversion (it is tighter).
  assert s["epsilon_rdp"] < s["epsilon_from_rho"]
