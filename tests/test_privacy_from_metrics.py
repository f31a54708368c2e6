"""Every algorithm's epsilon, recomputed independently from metrics.jsonl alone.

For each shipped private algorithm (Poisson and fixed-size cohorts, per-client noise, the
papers' algorithms), a short `fedjax-dp run` writes metrics.jsonl and summary.json; the
recomputation below uses only the file's fields and dp_accounting, with its own event
construction (no fedjax_dp accounting code): z = noise_stddev / sensitivity, the event
chosen by sampler, cohort and population sizes, and dp_accounting's relation for it.
It must match summary.json's epsilon (RDP and PLD), and the truncation probability its
delta. Also: every metrics field is labelled, and --dp-metrics-only writes only released
fields (issue 13, 1e).
"""

import json
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.runs import RunConfig, run

REL = dp_accounting.NeighboringRelation
SYNTH = dict(dataset="synthetic", num_clients=20, model="mlp", hidden="8", rounds=4,
             eval_every=2, delta=1e-5)


def _release_rows(rows):
  """Rows of a run with several releases per round (``releases`` lists them: paper
  003's query and support stages) -> one pseudo-row per release and round, with that
  release's fields under the standard names (the shared fields kept)."""
  out = []
  for r in rows:
    if not r.get("releases"):
      out.append(r)
      continue
    for name in r["releases"]:
      row = {k: v for k, v in r.items() if not k.startswith("truncation_")}
      for f in ("noise_multiplier", "sampling_rate", "dp_steps", "noise_stddev",
                "sensitivity", "truncation_cap", "truncation_population_size",
                "truncation_draws_per_step"):
        if f"{name}_{f}" in r:
          row[f] = r[f"{name}_{f}"]
      out.append(row)
  return out


def recompute(rows):
  """(epsilon RDP, epsilon PLD or None, truncation probability) from metrics rows."""
  events, trunc = [], 0.0
  for r in _release_rows(rows):
    z = r["noise_stddev"] / r["sensitivity"]
    assert z == pytest.approx(r["noise_multiplier"], rel=1e-5)
    g = dp_accounting.GaussianDpEvent(z)
    if r["sampler"] == "fixed_size":
      n, m = r["population_size"], r["cohort_size"]
      assert r["neighboring_relation"] == "replace_one"
      ev = g if m == n else dp_accounting.SampledWithoutReplacementDpEvent(n, m, g)
    else:
      assert r["neighboring_relation"] in ("add_remove", "zero_out")
      q = r["sampling_rate"]
      ev = g if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, g)
    if r["dp_steps"] > 1:
      ev = dp_accounting.SelfComposedDpEvent(ev, r["dp_steps"])
    events.append(ev)
    if "truncation_cap" in r:
      trunc += (r["truncation_draws_per_step"] * r["dp_steps"] * stats.binom.sf(
          r["truncation_cap"], r["truncation_population_size"] + 1, r["sampling_rate"]))
  swor = any(isinstance(e, dp_accounting.SampledWithoutReplacementDpEvent) or (
      isinstance(e, dp_accounting.SelfComposedDpEvent) and
      isinstance(e.event, dp_accounting.SampledWithoutReplacementDpEvent)) for e in events)
  delta = rows[0]["delta"]
  composed = dp_accounting.ComposedDpEvent(events)
  rdp = dp_rdp.RdpAccountant(neighboring_relation=REL.REPLACE_ONE if swor
                             else REL.ADD_OR_REMOVE_ONE).compose(composed)
  eps_rdp = rdp.get_epsilon(delta)
  pld = None
  if not swor:  # the library's grid: 1e-4, coarser for huge epsilons (bounded memory)
    interval = max(1e-4, eps_rdp * 1e-6)
    pld = dp_pld.PLDAccountant(REL.ADD_OR_REMOVE_ONE, interval).compose(
        composed).get_epsilon(delta)
  return eps_rdp, pld, trunc


def _run(tmp_path, name, **kw):
  out = tmp_path / name
  res = run(RunConfig.from_dict(dict(kw, out=str(out))).validate(), progress=False)
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  summary = json.loads((out / "summary.json").read_text())
  return rows, summary, res


CASES = {
    "dp_fedavg_poisson": dict(SYNTH, algorithm="dp_fedavg", sampling_rate=0.3,
                              noise_multiplier=1.2),
    "dp_fedavg_fixed_size": dict(SYNTH, algorithm="dp_fedavg", clients_per_round=5,
                                 sampling_rate=None, sampler="fixed_size",
                                 noise_multiplier=2.0),
    "dp_fedavg_whole_population": dict(SYNTH, algorithm="dp_fedavg", clients_per_round=20,
                                       sampling_rate=None, sampler="fixed_size",
                                       noise_multiplier=2.0, accountant="pld"),
    "dp_fedsgd_poisson": dict(SYNTH, algorithm="dp_fedsgd", sampling_rate=0.5,
                              noise_multiplier=1.5),
    "record_level": dict(SYNTH, algorithm="dp_fedavg_record_level", sampling_rate=0.5,
                         record_noise_multiplier=1.0, local_steps=2,
                         record_sampling_rate=0.2),
    "amplitude_varying": dict(SYNTH, algorithm="amplitude_varying", clients_per_round=5,
                              epsilon=10.0, param_clip_norm=2.0, vartheta=1.05,
                              activation="linear", delta=1e-3),
    "amplitude_varying_clipped": dict(SYNTH, algorithm="amplitude_varying",
                                      clients_per_round=5, epsilon=10.0,
                                      param_clip_norm=2.0, local_steps=1,
                                      sensitivity_mode="clipped_gradients",
                                      grad_clip_norm=1.0, delta=1e-3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_epsilon_from_metrics_alone_matches_the_summary(tmp_path, name):
  rows, s, _ = _run(tmp_path, name, **CASES[name])
  eps_rdp, eps_pld, trunc = recompute(rows)
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  if eps_pld is None:
    assert s["epsilon_pld"] is None
  else:
    assert s["epsilon_pld"] == pytest.approx(eps_pld, rel=1e-6)
  assert s["truncation_probability"] == pytest.approx(trunc, rel=1e-6, abs=1e-300)
  eps = s["epsilon"]
  assert s["delta_total"] == pytest.approx(s["delta"] + (1 + math.exp(eps)) * trunc
                                           if trunc else s["delta"], rel=1e-9)
  # The per-round epsilons are the same composition's prefixes.
  assert rows[-1]["epsilon"] == pytest.approx(eps_rdp, rel=1e-6)


@pytest.mark.parametrize("clip_mode", ["per_example", "paper"])
def test_rdp_pfl_epsilon_from_metrics_alone(tmp_path, clip_mode):
  """Paper 003: two releases per local epoch (query and support stages, different
  rates), each with its own Poisson truncation; the paper mode's releases are charged
  at sigma / (2 sqrt 2) and sigma / 2 (their sensitivities 2 sqrt 2 C and 2C)."""
  rows, s, _ = _run(tmp_path, clip_mode, algorithm="rdp_pfl", dataset="mnist", rounds=3,
                    eval_every=3, clients=8, samples_per_class=10, test_per_class=5,
                    hidden="8", local_epochs=2, query_sampling_rate=0.3,
                    support_sampling_rate=0.2, noise_multiplier=1.5, clip_mode=clip_mode)
  assert all(r["releases"] == ["query", "support"] for r in rows)
  for r in rows:
    assert r["query_dp_steps"] == r["support_dp_steps"] == 2
    assert r["query_sampling_rate"] == pytest.approx(0.3)
    assert r["support_sampling_rate"] == pytest.approx(0.2)
    for name in ("query", "support"):
      assert r[f"{name}_noise_multiplier"] == pytest.approx(
          r[f"{name}_noise_stddev"] / r[f"{name}_sensitivity"], rel=1e-6)
  scale = (1 / (2 * math.sqrt(2)), 0.5) if clip_mode == "paper" else (1.0, 1.0)
  assert rows[0]["query_noise_multiplier"] == pytest.approx(1.5 * scale[0], rel=1e-6)
  assert rows[0]["support_noise_multiplier"] == pytest.approx(1.5 * scale[1], rel=1e-6)
  eps_rdp, eps_pld, trunc = recompute(rows)
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["epsilon_pld"] == pytest.approx(eps_pld, rel=1e-6)
  assert s["truncation_probability"] == pytest.approx(trunc, rel=1e-6, abs=1e-300)
  assert rows[-1]["epsilon"] == pytest.approx(eps_rdp, rel=1e-6)
  # The paper's own epsilon (Theorem 1) for the same sigma, beside the accountant's:
  # equal stages at sigma, so in per-example mode it is close to the RDP epsilon.
  if clip_mode == "per_example":
    assert s["epsilon_paper"] == pytest.approx(eps_rdp, rel=0.05)
  else:
    assert s["epsilon_paper"] < 0.6 * eps_rdp  # the paper's claim is weaker than enforced


def test_padpfl_epsilon_from_metrics_alone(tmp_path):
  """PADPFL: every client in every round (plain Gaussian events, PLD available)."""
  rows, s, _ = _run(tmp_path, "padpfl", algorithm="padpfl", dataset="mnist", rounds=2,
                    eval_every=2, epsilon=20.0, delta=0.01, clip_bound=5.0,
                    hidden="8", local_steps=1, client_learning_rate=0.02)
  eps_rdp, eps_pld, trunc = recompute(rows)
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert eps_pld is not None and s["epsilon_pld"] == pytest.approx(eps_pld, rel=1e-3)
  assert trunc == 0.0 and s["delta_total"] == 0.01
  # The conditional epsilon from the same file's noise_multiplier_conditional.
  cond = dp_rdp.RdpAccountant().compose(dp_accounting.ComposedDpEvent(
      [dp_accounting.GaussianDpEvent(r["noise_multiplier_conditional"]) for r in rows]))
  assert s["epsilon_conditional_rdp"] == pytest.approx(cond.get_epsilon(0.01), rel=1e-6)


def test_lapa_epsilon_from_metrics_alone(tmp_path):
  """Paper 001 (LAPA), per-device record-level accounting: each device's epsilon from
  metrics.jsonl's ``sigma_devices`` (artificial SD), ``sigma_channel`` (decoded channel
  SD), ``device_uploaded`` and ``sensitivity`` (2C/B, checked against the run's config):
  one GaussianDpEvent(sqrt(sigma_i^2 + sigma_c,i^2) / (2C/B)) per round the device
  uploaded in, composed by dp_accounting's RDP accountant (not `DeviceLedger`). The
  practical channel and the LAPA allocator give every device its own noise every round;
  the SER threshold leaves the farthest devices unscheduled (never uploading: epsilon
  0) and schedules one whose channel noise is a visible part of its total."""
  rows, s, _ = _run(tmp_path, "lapa", algorithm="lapa", dataset="mnist", rounds=4,
                    eval_every=4, model="mlp", hidden="8", delta=1e-5, allocator="lapa",
                    channel="practical", num_iid=2, num_non_iid=4, epsilon_total=1.0,
                    ser_threshold=0.2)
  cfg = s["config"]
  sens = 2 * cfg["clip_norm"] / cfg["batch_size"]
  up = np.array([r["device_uploaded"] for r in rows], bool)           # [T, N]
  sd_art = np.array([r["sigma_devices"] for r in rows], np.float64)
  sd_ch = np.array([r["sigma_channel"] for r in rows], np.float64)
  assert up.shape == (4, 6) and up.any() and not up.all()  # some devices never upload
  assert np.all(sd_ch[:, up.any(0)] > 0)                         # practical channel
  assert np.max(sd_ch[up] / sd_art[up]) > 0.02     # and not negligible for every device
  assert np.all(sd_art[up] > 0) and np.ptp(sd_art[up]) > 0      # LAPA's own budgets
  per_device = []
  for i in range(up.shape[1]):
    acc = dp_rdp.RdpAccountant(neighboring_relation=REL.REPLACE_ONE)
    for r, row in enumerate(rows):
      assert row["sensitivity"] == pytest.approx(sens, rel=1e-6)
      if up[r, i]:
        z = math.sqrt(sd_art[r, i] ** 2 + sd_ch[r, i] ** 2) / sens
        acc.compose(dp_accounting.GaussianDpEvent(z))
    per_device.append(acc.get_epsilon(rows[0]["delta"]))
  per_device = np.array(per_device)
  assert np.all(per_device[~up.any(0)] == 0) and np.all(per_device[up.any(0)] > 0)
  np.testing.assert_allclose(s["per_client_epsilon_rdp"], per_device, rtol=1e-6)
  assert s["epsilon"] == pytest.approx(per_device.max(), rel=1e-6)
  assert s["epsilon_rdp"] == pytest.approx(per_device.max(), rel=1e-6)
  assert s["worst_client"] == int(np.argmax(per_device))
  assert rows[-1]["epsilon"] == pytest.approx(per_device.max(), rel=1e-6)
  # Each round's reported noise multiplier is the smallest over the uploading devices.
  for r, row in enumerate(rows):
    z = np.sqrt(sd_art[r] ** 2 + sd_ch[r] ** 2)[up[r]] / sens
    assert row["noise_multiplier"] == pytest.approx(z.min(), rel=1e-5)


def test_per_client_noise_multipliers_from_a_file(tmp_path):
  """Local noise with a noise multiplier per client: the summary's epsilon is the worst
  client's (recomputable from metrics.jsonl: each round reports the population's
  smallest), and every client's epsilon is listed."""
  z = np.linspace(1.0, 3.0, 20)
  path = tmp_path / "z.txt"
  path.write_text(" ".join(f"{v:.6f}" for v in z))
  rows, s, res = _run(tmp_path, "per_client", **dict(
      SYNTH, algorithm="dp_fedavg", sampling_rate=0.5, noise_multiplier=1.0,
      noise_placement="local", client_noise_multipliers=str(path)))
  eps_rdp, eps_pld, _ = recompute(rows)
  assert all(r["neighboring_relation"] == "zero_out" for r in rows)
  assert all(r["sampling_rate"] == 1.0 for r in rows)  # participation is visible
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["worst_client"] == 0
  per = np.asarray(s["per_client_epsilon_rdp"])
  assert per.shape == (20,) and np.all(np.diff(per) < 0)  # more noise, less epsilon
  assert per[0] == pytest.approx(eps_rdp, rel=1e-6)


def test_dp_metrics_only_writes_released_fields_and_every_field_is_labelled(tmp_path):
  kw = dict(SYNTH, algorithm="dp_fedavg", sampling_rate=0.3, noise_multiplier=1.2)
  full_rows, full, _ = _run(tmp_path, "full", **kw)
  rows, s, _ = _run(tmp_path, "released", dp_metrics_only=True, **kw)
  labels = full["metrics_disclosure"]
  assert set(labels) == set().union(*(r.keys() for r in full_rows))
  kinds = {k: v["kind"] for k, v in labels.items()}
  for f in ("train_loss", "clip_fraction", "mean_update_norm", "max_update_norm",
            "num_clients", "nonfinite_updates"):
    assert kinds[f] == "diagnostic"
  for f in ("noise_multiplier", "epsilon", "sensitivity", "sampling_rate"):
    assert kinds[f] == "public"
  assert kinds["aggregate_norm"] == "dp"
  # Synthetic data has a central test set: test metrics are released under DP.
  assert kinds["test_accuracy"] == "dp"
  for r in rows:
    assert not any(kinds[k] == "diagnostic" for k in r)
    assert "train_loss" not in r and "noise_multiplier" in r
  assert s["metrics_dp_only"] is True
  # Still enough to recompute epsilon, and the training itself is unchanged.
  assert recompute(rows)[0] == pytest.approx(s["epsilon_rdp"], rel=1e-6)
  assert s["final_test_accuracy"] == full["final_test_accuracy"]


def test_har_test_metrics_are_diagnostics():
  """HAR's test windows are the clients' own held-out data: not covered by epsilon."""
  from fedjax_dp.privacy import disclosure
  labels = disclosure.labels_for_run(test_set_is_client_data=True)
  assert labels["test_accuracy"][0] == "diagnostic"
  with pytest.raises(Exception, match="no disclosure label"):
    disclosure.table(["a_new_metric"])
