"""`fedjax-dp run --aggregation distributed_dgauss|distributed_skellam`: epsilon recomputed
from metrics.jsonl alone, the options' refusals, dropouts, --target-epsilon and the
one-run canary estimate through a secure sum."""

import json
import math

from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError

SYNTH = dict(dataset="synthetic", num_clients=20, model="mlp", hidden="8", rounds=4,
             eval_every=2, delta=1e-5, sampling_rate=0.5, clip_norm=0.5)


def _run(tmp_path, name, **kw):
  out = tmp_path / name
  res = run(RunConfig.from_dict(dict(SYNTH, **kw, out=str(out))).validate(), progress=False)
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  return rows, json.loads((out / "summary.json").read_text()), res


def _rho(row):
  """The round's zCDP from the row's fields alone (Kairouz et al. 2021, Prop. 14;
  Agarwal et al. 2021, Thm. 3.5; written here independently of the library)."""
  n = row["secagg_survivors"]
  sigma = row["secagg_local_stddev"]
  f = row["secagg_sensitivity_factor"]
  d2, d1, d = f * row["secagg_l2_bound"], f * row["secagg_l1_bound"], row["secagg_dim"]
  var = n * sigma * sigma
  if n < 1 or sigma <= 0:
    return math.inf
  if row["secagg_mechanism"] == "ddgauss":
    tau = 10 * sum(math.exp(-2 * math.pi ** 2 * sigma ** 2 * k / (k + 1))
                   for k in range(1, int(n)))
    s = math.sqrt(var)
    return min((d2 / s) ** 2 / 2 + tau * d,
               ((d2 / s) ** 2 + 2 * (d1 / s) * tau + tau * tau * d) / 2,
               (d2 / s + math.sqrt(d) * tau) ** 2 / 2)
  base = d2 * d2 / (2 * var)
  return min(base + d2 * d2 / (2 * var * var) + max(0.0, 6 * d1 - d2 * d2) / (4 * var * var),
             base + 3 * d1 / (2 * var))


def recompute(rows):
  """Visible participation (the secure-aggregation server knows its participants):
  each round's RDP is log(1 - q + q exp((a - 1) a rho)) / (a - 1); summed; dp_accounting's
  RDP-to-epsilon conversion."""
  orders = np.asarray(dp_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, np.float64)
  rdp = np.zeros_like(orders)
  for r in rows:
    assert r["observation"] == "secure_sum"
    q = r["sampling_rate"]
    if r["sampler"] == "fixed_size":
      assert r["neighboring_relation"] == "replace_one"
      q = r["cohort_size"] / r["population_size"]
    else:
      assert r["neighboring_relation"] == "zero_out"
    rho = _rho(r)
    assert r["secagg_rho"] == pytest.approx(rho, rel=1e-4)
    with np.errstate(divide="ignore"):
      rdp += np.logaddexp(np.log1p(-q) if q < 1 else -np.inf,
                          np.log(q) + (orders - 1) * orders * rho) / (orders - 1)
  return dp_rdp.rdp_privacy_accountant.compute_epsilon(orders, rdp, rows[0]["delta"])[0]


@pytest.mark.parametrize("aggregation,extra", [
    ("distributed_dgauss", dict(bits=16)),
    ("distributed_skellam", dict(bits=12, dropout_rate=0.3)),
    ("distributed_dgauss", dict(bits=20, sampler="fixed_size", clients_per_round=6,
                                sampling_rate=None)),
])
def test_epsilon_from_metrics_alone(tmp_path, aggregation, extra):
  rows, s, _ = _run(tmp_path, aggregation, aggregation=aggregation, noise_multiplier=1.5,
                    **extra)
  eps = recompute(rows)
  assert s["epsilon_rdp"] == pytest.approx(eps, rel=1e-5)
  assert rows[-1]["epsilon"] == pytest.approx(eps, rel=1e-5)
  assert s.get("epsilon_pld") is None  # a zCDP bound gives no Gaussian PLD
  assert s["observation"] == "secure_sum"
  sa = s["secure_aggregation"]
  assert sa["rounds"] == 4 and sa["rounds_with_overflow"] == 0
  if extra.get("dropout_rate"):
    assert all(r["secagg_survivors"] <= r["num_clients"] for r in rows)
    assert sa["mean_survivors"] < np.mean([r["num_clients"] for r in rows])


def test_dp_metrics_only_drops_the_overflow_and_rounding_diagnostics(tmp_path):
  rows, _, _ = _run(tmp_path, "only", aggregation="distributed_skellam",
                    noise_multiplier=1.0, dp_metrics_only=True)
  for r in rows:
    assert "secagg_survivors" in r and "secagg_rho" in r
    assert not {"secagg_overflow_rate", "secagg_rounding_bias",
                "secagg_rounding_error", "secagg_rounding_retries"} & set(r)


def test_target_epsilon_calibrates_the_planned_rounds(tmp_path):
  rows, s, _ = _run(tmp_path, "target", aggregation="distributed_dgauss", bits=16,
                    target_epsilon=8.0, sampler="fixed_size", clients_per_round=8,
                    sampling_rate=None)
  # Fixed-size cohorts without dropouts: every round has the planned survivors.
  assert s["epsilon"] == pytest.approx(8.0, rel=0.02)
  assert recompute(rows) == pytest.approx(s["epsilon"], rel=1e-5)


@pytest.mark.parametrize("kw,option", [
    (dict(bits=16), "bits"),
    (dict(aggregation="distributed_dgauss", noise_placement="local"), "aggregation"),
    (dict(aggregation="distributed_dgauss", clip_norm="adaptive"), "aggregation"),
    (dict(aggregation="distributed_skellam", bits=1), "bits"),
    (dict(aggregation="distributed_skellam", dropout_rate=1.0), "dropout_rate"),
    (dict(aggregation="distributed_dgauss", accountant="pld"), "accountant"),
])
def test_bad_options_are_refused(tmp_path, kw, option):
  with pytest.raises(FedJaxDpError) as e:
    _run(tmp_path, "bad", noise_multiplier=1.0, **kw)
  assert e.value.option == option, e.value


def test_too_few_bits_for_the_rounding_are_refused_with_the_minimum(tmp_path):
  with pytest.raises(FedJaxDpError, match="bits") as e:
    _run(tmp_path, "few", aggregation="distributed_dgauss", bits=3, noise_multiplier=1.0)
  assert e.value.option == "bits"


def test_one_run_canaries_through_the_secure_sum(tmp_path):
  rows, s, _ = _run(tmp_path, "canaries", aggregation="distributed_dgauss", bits=16,
                    noise_multiplier=1.0, canaries=20, rounds=3)
  assert "secure sum" in s["canary_audit"]["limitation"]
  assert s["empirical_epsilon"] and s["one_run_lower_bound"]
  assert rows[-1]["secagg_survivors"] > 0


def test_seeds_of_a_sweep_are_one_vmapped_program_through_the_secure_sum():
  from fedjax_dp.runs.sweep import run_sweep
  cfg = RunConfig.from_dict(dict(SYNTH, rounds=2, out=None, logger="none",
                                 aggregation="distributed_dgauss", bits=10,
                                 noise_multiplier=1.0))
  sw = run_sweep(cfg, seeds=[0, 1], progress=False)
  survivors = [m.summary["secure_aggregation"]["mean_survivors"] for m in sw.members]
  assert all(s > 0 for s in survivors) and len(sw.members) == 2
  eps = [m.summary["epsilon"] for m in sw.members]
  assert all(np.isfinite(e) and e > 0 for e in eps)


def test_calibration_with_the_plan_finds_the_fixed_point_or_says_the_bits_are_too_few():
  """--target-epsilon plans the grid at the z it calibrates: a fixed point of z ->
  calibrate(plan(z)). A plan whose equivalent noise saturates (the rounding's inflation
  grows with z) has none: refused, naming bits."""
  from fedjax_dp.algorithms.dp_fedavg.distributed import calibrate_with_plan
  from fedjax_dp.algorithms.secure_sum_spec import SecureSumSpec

  def spec_at(inflation):
    def at(z_plan):
      return SecureSumSpec("user-level", "zero_out", "poisson", sampling_rate=0.2,
                           observation="secure_sum",
                           equivalent=lambda z: z / inflation(z_plan))
    return at

  z = calibrate_with_plan(spec_at(lambda zp: 1.0 + 0.01 * zp), 1.0, 20, 4.0, 1e-5, "rdp", 16)
  mild = spec_at(lambda zp: 1.0 + 0.01 * zp)(z)
  from fedjax_dp.privacy import accountants
  eps = accountants.event_epsilon(mild.events_of_run(z, 20), 1e-5, "rdp")
  assert eps == pytest.approx(4.0, rel=1e-3)
  with pytest.raises(FedJaxDpError, match="out of reach") as e:
    calibrate_with_plan(spec_at(lambda zp: 0.5 * zp), 1.0, 20, 4.0, 1e-5, "rdp", 10)
  assert e.value.option == "bits"
