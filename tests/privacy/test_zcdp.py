"""zCDP reporting (fedjax_dp.privacy.zcdp): rho against hand computations, the claim
that sampling does not lower rho (dp_accounting's RDP at large orders), the conversion
to epsilon, refusals, and rho in a run's summary.json recomputed from metrics.jsonl."""

import json
import math

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from fedjax_dp.privacy import zcdp
from fedjax_dp.privacy.events import VisibleParticipationDpEvent
from fedjax_dp.validation import FedJaxDpError

G = dp_accounting.GaussianDpEvent
REL = dp_accounting.NeighboringRelation


def test_gaussian_and_composition_by_hand():
  # 1 / (2 z^2): z = 2 -> 1/8; z = 0.5 -> 2.
  assert zcdp.zcdp_bound(G(2.0)) == zcdp.ZcdpBound(0.125, True)
  ev = dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(G(2.0), 10),
                                      G(0.5), dp_accounting.NoOpDpEvent()])
  b = zcdp.zcdp_bound(ev)
  assert b.rho == pytest.approx(10 / 8 + 2.0, rel=1e-15) and b.exact
  rho, note = zcdp.zcdp_rho(ev)
  assert rho == pytest.approx(3.25) and note.startswith("exact")
  assert zcdp.zcdp_bound(G(0.0)).rho == math.inf
  assert zcdp.zcdp_bound(dp_accounting.NonPrivateDpEvent()).rho == math.inf
  assert zcdp.zcdp_bound(dp_accounting.ZCDpEvent(0.3)) == zcdp.ZcdpBound(0.3, True)


def test_sampled_runs_report_the_unsampled_rho_although_their_epsilon_is_smaller():
  """50 rounds at z = 2: Poisson q = 0.1, visible participation q = 0.1, and no
  sampling. Their RDP epsilons differ (amplification), their rho is the same 50/8."""
  z, q, n = 2.0, 0.1, 50
  events = {"poisson": dp_accounting.PoissonSampledDpEvent(q, G(z)),
            "visible": VisibleParticipationDpEvent(q, G(z)),
            "none": G(z)}
  runs = {k: dp_accounting.SelfComposedDpEvent(e, n) for k, e in events.items()}
  eps = {k: dp_rdp.RdpAccountant(neighboring_relation=REL.ADD_OR_REMOVE_ONE).compose(
      e).get_epsilon(1e-5) for k, e in runs.items() if k != "visible"}
  assert eps["poisson"] < 0.5 * eps["none"], eps  # sampling amplifies epsilon ...
  for k, e in runs.items():  # ... not rho
    b = zcdp.zcdp_bound(e)
    assert b.rho == pytest.approx(n / (2 * z * z), rel=1e-15), k
    assert b.exact == (k == "none"), k
    assert (zcdp.SAMPLING_NOTE in b.notes) == (k != "none"), k
  wor = dp_accounting.SampledWithoutReplacementDpEvent(100, 10, G(z))
  assert zcdp.zcdp_bound(wor).rho == 0.125 and not zcdp.zcdp_bound(wor).exact
  tr = dp_accounting.TruncatedSubsampledGaussianDpEvent(100, 0.1, 20, z)
  assert zcdp.zcdp_bound(tr).rho == 0.125 and not zcdp.zcdp_bound(tr).exact


@pytest.mark.parametrize("z,q", [(2.0, 0.1), (1.0, 0.01), (0.8, 0.5)])
def test_no_smaller_rho_holds_for_a_sampled_gaussian(z, q):
  """The claim of the module docstring: RDP(alpha)/alpha of the Poisson-subsampled
  Gaussian stays below 1/(2 z^2) but tends to it as alpha grows (dp_accounting's RDP),
  so sup_alpha RDP(alpha)/alpha = 1/(2 z^2): no rho below the unsampled one holds at
  every order. Measured (z=2, q=0.1): the ratio is 0.011 of the slope at alpha = 2,
  0.81 at alpha = 100, 0.982 at 1000 and 0.998 at 10^4."""
  orders = [2.0, 10.0, 100.0, 1000.0, 10000.0]
  acc = dp_rdp.RdpAccountant(orders, REL.ADD_OR_REMOVE_ONE)
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, G(z)))
  ratio = np.asarray(acc.rdp) / np.asarray(orders) * (2 * z * z)  # in units of 1/(2z^2)
  assert np.all(ratio <= 1 + 1e-9), ratio
  assert np.all(np.diff(ratio) > 0), ratio
  assert ratio[0] < 0.5 and ratio[-1] > 0.99, ratio
  # The large-order asymptote R(a) ~ a/(2z^2) + log(q) a/(a-1): within 1% of it at 10^4.
  a = orders[-1]
  approx = a / (2 * z * z) + math.log(q) * a / (a - 1)
  assert acc.rdp[-1] == pytest.approx(approx, rel=1e-2)


def test_tree_rho_equals_dp_accountings_rdp_slope():
  """SingleEpochTreeAggregationDpEvent(z, T): rho = ceil(log2(T + 1)) / (2 z^2), and
  dp_accounting's RDP of the tree (REPLACE_SPECIAL) is rho * alpha at every order."""
  for z, t, depth in ((1.5, 7, 3), (2.0, 8, 4), (1.0, 1, 1)):
    ev = dp_accounting.SingleEpochTreeAggregationDpEvent(z, t)
    b = zcdp.zcdp_bound(ev)
    assert b.rho == pytest.approx(depth / (2 * z * z), rel=1e-15) and b.exact
    orders = [1.5, 2.0, 8.0, 64.0]
    acc = dp_rdp.RdpAccountant(orders, REL.REPLACE_SPECIAL).compose(ev)
    np.testing.assert_allclose(acc.rdp, b.rho * np.asarray(orders), rtol=1e-12)


@pytest.mark.parametrize("event,words", [
    (dp_accounting.LaplaceDpEvent(1.0), "no Gaussian structure"),
    (dp_accounting.RandomizedResponseDpEvent(0.5, 2), "no Gaussian structure"),
    (dp_accounting.SampledWithReplacementDpEvent(100, 10, G(1.0)), "with replacement"),
    (dp_accounting.ZCDpEvent(0.3, xi=0.1), "xi"),
    (dp_accounting.ComposedDpEvent([G(1.0), dp_accounting.LaplaceDpEvent(1.0)]),
     "no Gaussian structure"),
])
def test_no_rho_without_gaussian_structure(event, words):
  rho, note = zcdp.zcdp_rho(event)
  assert rho is None and words in note


def test_epsilon_from_rho_is_the_optimum_of_the_rdp_conversion():
  """Prop. 1.3 of Bun and Steinke: rho + 2 sqrt(rho log(1/delta)) equals the minimum
  over alpha of rho alpha + log(1/delta)/(alpha - 1) (found here on a fine grid), and is
  never below dp_accounting's (tighter) epsilon of the Gaussian with that rho."""
  for rho, delta in ((0.125, 1e-5), (2.0, 1e-3), (0.01, 1e-6)):
    alphas = 1 + np.geomspace(1e-4, 1e4, 400001)
    grid = float(np.min(rho * alphas + math.log(1 / delta) / (alphas - 1)))
    assert zcdp.epsilon_from_rho(rho, delta) == pytest.approx(grid, rel=1e-6)
    z = 1 / math.sqrt(2 * rho)
    tight = dp_rdp.RdpAccountant().compose(G(z)).get_epsilon(delta)
    assert tight <= zcdp.epsilon_from_rho(rho, delta)
  assert zcdp.epsilon_from_rho(math.inf, 1e-5) == math.inf


@pytest.mark.parametrize("call,option", [
    (lambda: zcdp.epsilon_from_rho(-0.1, 1e-5), "rho"),
    (lambda: zcdp.epsilon_from_rho(float("nan"), 1e-5), "rho"),
    (lambda: zcdp.epsilon_from_rho(0.1, 0.0), "delta"),
    (lambda: zcdp.epsilon_from_rho(0.1, 1.5), "delta"),
    (lambda: zcdp.zcdp_bound("gaussian"), "event"),
    (lambda: zcdp.zcdp_bound(G(-1.0)), "noise_multiplier"),
])
def test_bad_input_is_refused_naming_the_argument(call, option):
  with pytest.raises(FedJaxDpError) as e:
    call()
  assert e.value.option == option


def test_summary_of_a_tiny_dp_fedavg_run_has_rho_recomputed_from_metrics(tmp_path,
                                                                          capsys):
  """rho from metrics.jsonl alone: sum over rounds of dp_steps / (2 z^2), z =
  noise_stddev / sensitivity; the run samples (Poisson q = 0.5), so it is an upper
  bound, while the RDP epsilon is below the unsampled one."""
  from fedjax_dp.runs import RunConfig, run
  from fedjax_dp.runs.report import print_summary
  out = tmp_path / "r"
  res = run(RunConfig.from_dict(dict(
      algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
      batch_size=8, rounds=3, eval_every=3, sampling_rate=0.5, clip_norm=1.0,
      noise_multiplier=1.7, logger="none", out=str(out))), progress=False)
  rows = [json.loads(l) for l in open(out / "metrics.jsonl")]
  s = json.loads((out / "summary.json").read_text())
  rho = sum(r["dp_steps"] / (2 * (r["noise_stddev"] / r["sensitivity"]) ** 2) for r in rows)
  assert rho == pytest.approx(3 / (2 * 1.7 ** 2), rel=1e-6)
  assert s["rho_zcdp"] == pytest.approx(rho, rel=1e-6) and s["rho_zcdp_exact"] is False
  assert "amplification" in s["rho_zcdp_note"]
  assert s["epsilon_from_rho"] == pytest.approx(
      rho + 2 * math.sqrt(rho * math.log(1 / s["delta"])), rel=1e-9)
  assert s["epsilon_rdp"] < s["epsilon_from_rho"]
  assert s["summary_disclosure"]["rho_zcdp"]["kind"] == "public"
  assert res.summary["rho_zcdp"] == s["rho_zcdp"]
  print_summary(s)
  assert f"zCDP: rho = {s['rho_zcdp']:.4g} (upper bound" in capsys.readouterr().out


def test_non_private_run_states_no_rho():
  from fedjax_dp.runs import privacy as run_privacy
  f = run_privacy.privacy_summary(None, None, "rdp", 1e-5)
  assert f["rho_zcdp"] is None and f["epsilon_from_rho"] is None
  assert "non-private" in f["rho_zcdp_note"] and f["rho_zcdp_exact"] is False


def test_ledgers_without_events_state_no_rho():
  class MonteCarlo:
    monte_carlo = True

  class NoEvent:
    pass

  for ledger, words in ((MonteCarlo(), "Monte Carlo"), (NoEvent(), "holds no DpEvent")):
    f = zcdp.zcdp_summary_fields(ledger, 1e-5)
    assert f["rho_zcdp"] is None and words in f["rho_zcdp_note"]
  from fedjax_dp.privacy.ledger import PrivacyLedger
  led = PrivacyLedger(1e-5)
  led.record(2.0, 1.0, 3)  # 3 unsampled Gaussian steps at z = 2: rho 3/8, exact
  f = zcdp.zcdp_summary_fields(led, 1e-5)
  assert f["rho_zcdp"] == pytest.approx(0.375) and f["rho_zcdp_exact"] is True
