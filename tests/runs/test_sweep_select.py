"""Best-of selection (fedjax_dp.runs.sweep_select, sweep_best_of; fedjax-dp sweep
--select best-of): its epsilon recomputed from the members' RDP curves with Papernot and
Steinke's theorems (independently of dp_accounting's implementation), the number of
trials' distribution, the refusals, and tiny end-to-end sweeps."""

import json
import math
import os

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest
from scipy import optimize

from fedjax_dp import cli
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.accountants import DEFAULT_RDP_ORDERS
from fedjax_dp.runs import RunConfig, sweep
from fedjax_dp.runs import sweep_best_of, sweep_select
from fedjax_dp.runs.sweep_select import Selection
from fedjax_dp.validation import FedJaxDpError

ORDERS = np.asarray(DEFAULT_RDP_ORDERS)
G = dp_accounting.GaussianDpEvent
DELTA = 1e-5


def _curve(event):
  return np.asarray(dp_rdp.RdpAccountant(list(ORDERS)).compose(event).rdp, np.float64)


# --- the selection's epsilon, recomputed ----------------------------------------------
# Written from the papers, not from dp_accounting's code: RDP -> (eps, delta) and back
# by Canonne, Kamath and Steinke (NeurIPS 2020, arXiv 2004.00010, Prop. 12) with the
# KL bound delta <= sqrt(1 - exp(-KL)) (Bretagnolle-Huber), and the repeat-and-select
# theorems of Papernot and Steinke (ICLR 2022, arXiv 2110.03620 v2: Thm. 6 Poisson,
# Thm. 2 truncated negative binomial).


def _delta_of(curve, eps):
  """The smallest delta at ``eps`` over the orders (in logs: the bounds overflow)."""
  best = 0.0  # log(1)
  for a, r in zip(ORDERS, curve):
    if not math.isfinite(r):
      continue
    best = min(best, 0.5 * math.log(-math.expm1(-r)) if r > 0 else -math.inf)
    if a > 1.01:
      best = min(best, (a - 1) * (r - eps + math.log1p(-1 / a)) - math.log(a))
  return math.exp(best)


def _eps_of(curve, delta):
  """The smallest epsilon at ``delta`` over the orders."""
  out = math.inf
  for a, r in zip(ORDERS, curve):
    if delta ** 2 + math.expm1(-r) > 0:
      return 0.0
    if a > 1.01:
      out = min(out, r + math.log1p(-1 / a) - math.log(delta * a) / (a - 1))
  return out


def _poisson_select(curve, mu):
  """Thm. 6: eps'(lam) = eps(lam) + mu delta_hat + log(mu)/(lam - 1), delta_hat the
  delta of one trial at eps_hat = log(1 + 1/(lam - 1))."""
  return np.asarray([r + mu * _delta_of(curve, math.log1p(1 / (a - 1)))
                     + math.log(mu) / (a - 1) for a, r in zip(ORDERS, curve)])


def _tnb_select(curve, mu, eta):
  """Thm. 2, minimised over lam_hat, then monotone in the order (RDP grows with it)."""
  def mean(g):
    return ((1 - g) / (g * math.log(1 / g)) if eta == 0 else
            eta * (1 - g) / (g * (1 - g ** eta)))
  gamma = optimize.brentq(lambda g: mean(g) - mu, 1e-12, 1 - 1e-12, xtol=1e-15)
  c = min((1 + eta) * ((1 - 1 / b) * rb + math.log(1 / gamma) / b)
          for b, rb in zip(ORDERS, curve))
  raw = np.asarray([r + c + math.log(mu) / (a - 1) for a, r in zip(ORDERS, curve)])
  return np.minimum.accumulate(raw[::-1])[::-1]


MEMBER = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.5, G(1.5)), 10)


@pytest.mark.parametrize("sel", [Selection(5.0), Selection(1.0), Selection(20.0),
                                 Selection(5.0, "logarithmic"),
                                 Selection(5.0, "negative_binomial", 1.0),
                                 Selection(8.0, "negative_binomial", 0.5)],
                         ids=lambda s: f"{s.distribution}-{s.mean:g}-{s.shape}")
def test_selection_epsilon_recomputed_from_the_papers(sel):
  """Both of the library's paths (RepeatAndSelectDpEvent on the member's event; the
  per-order curve) equal the theorem computed here, and the selection costs more than
  one member (10 rounds of q = 0.5, z = 1.5: one member epsilon 6.445 at delta 1e-5;
  the selection 10.31, 7.10 and 20.47 for Poisson means 5, 1 and 20; 8.98 logarithmic,
  9.91 geometric and 10.02 negative binomial eta = 0.5 with means 5, 5 and 8)."""
  curve = _curve(MEMBER)
  mine = (_poisson_select(curve, sel.mean) if sel.distribution == "poisson" else
          _tnb_select(curve, sel.mean, sel.dp_shape))
  want = _eps_of(mine, DELTA)
  via_event, how = sweep_select.selection_epsilon([curve], ORDERS, sel, DELTA, [MEMBER])
  via_curve, how2 = sweep_select.selection_epsilon([curve], ORDERS, sel, DELTA)
  assert how["method"] == "RepeatAndSelectDpEvent" and how2["method"] == "per-order maximum"
  assert via_event == pytest.approx(want, rel=1e-6)
  assert via_curve == pytest.approx(want, rel=1e-6)
  member = _eps_of(curve, DELTA)
  assert member == pytest.approx(6.445, abs=1e-3)
  assert want > member + 0.3, (want, member)


def test_no_member_dominates_the_per_order_maximum_is_used():
  """A plain Gaussian (z = 3) and a sampled one (q = 0.01, z = 0.7) cross: each is the
  larger at some orders. The selection is bounded through their per-order maximum, which
  is above either member's own selection."""
  a, b = G(3.0), dp_accounting.PoissonSampledDpEvent(0.01, G(0.7))
  ca, cb = _curve(a), _curve(b)
  assert np.any(ca > cb) and np.any(cb > ca)
  sel = Selection(4.0)
  eps, how = sweep_select.selection_epsilon([ca, cb], ORDERS, sel, DELTA, [a, b])
  assert how["method"] == "per-order maximum" and how["dominating_member"] is None
  want = _eps_of(_poisson_select(np.maximum(ca, cb), 4.0), DELTA)
  assert eps == pytest.approx(want, rel=1e-6)
  alone = [sweep_select.selection_epsilon([c], ORDERS, sel, DELTA)[0] for c in (ca, cb)]
  assert eps >= max(alone) - 1e-12 and eps > min(alone)


# --- the number of trials -------------------------------------------------------------


@pytest.mark.parametrize("sel", [Selection(3.0), Selection(3.0, "logarithmic"),
                                 Selection(3.0, "negative_binomial", 2.0),
                                 Selection(4.0, "negative_binomial", 1.0)],
                         ids=lambda s: f"{s.distribution}-{s.shape}")
def test_number_of_trials_has_the_stated_distribution(sel):
  n = 200_000
  k = sweep_select.draw_repetitions(sel, np.random.default_rng(7), n)
  se = k.std() / math.sqrt(n)
  assert abs(k.mean() - sel.mean) < 5 * se, (k.mean(), se)
  if sel.distribution == "poisson":
    assert k.var() == pytest.approx(3.0, rel=0.02)
    assert np.mean(k == 0) == pytest.approx(math.exp(-3.0), abs=0.003)
    return
  assert k.min() >= 1  # truncated at 0
  # P[K = 1] of D_{eta, gamma}: eta (1 - gamma) gamma^eta / (1 - gamma^eta), and
  # (1 - gamma) / log(1/gamma) for eta = 0; gamma solved here from the mean.
  eta = sel.dp_shape
  mean = (lambda g: (1 - g) / (g * math.log(1 / g))) if eta == 0 else (
      lambda g: eta * (1 - g) / (g * (1 - g ** eta)))
  g = optimize.brentq(lambda x: mean(x) - sel.mean, 1e-9, 1 - 1e-9)
  p1 = (1 - g) / math.log(1 / g) if eta == 0 else eta * (1 - g) * g ** eta / (1 - g ** eta)
  assert np.mean(k == 1) == pytest.approx(p1, abs=0.004)
  if eta == 1:  # geometric: P[K = 1] = gamma = 1/mean
    assert p1 == pytest.approx(0.25, rel=1e-6)


def test_trials_are_drawn_from_the_recorded_seed_uniformly():
  sel = Selection(50.0, seed=11)
  k, idx = sweep_select.draw_trials(sel, 4)
  rng = np.random.default_rng(11)  # the same two draws, written out
  assert k == rng.poisson(50.0) and idx == rng.integers(0, 4, size=k).tolist()
  assert sweep_select.draw_trials(sel, 4) == (k, idx)
  _, many = sweep_select.draw_trials(Selection(40_000.0, seed=3), 4)
  assert np.bincount(many, minlength=4) / len(many) == pytest.approx([0.25] * 4, abs=0.01)


# --- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("kw,option", [
    (dict(mean=0.5), "repetitions_mean"), (dict(mean=math.inf), "repetitions_mean"),
    (dict(mean=2.0, distribution="uniform"), "repetitions_distribution"),
    (dict(mean=2.0, shape=1.0), "repetitions_shape"),
    (dict(mean=2.0, distribution="logarithmic", shape=1.0), "repetitions_shape"),
    (dict(mean=2.0, distribution="negative_binomial"), "repetitions_shape"),
    (dict(mean=2.0, distribution="negative_binomial", shape=0.0), "repetitions_shape"),
    (dict(mean=2.0, seed=-1), "selection_seed"), (dict(mean=2.0, metric=""), "select_metric"),
])
def test_bad_selections_are_refused_naming_the_option(kw, option):
  with pytest.raises(FedJaxDpError) as e:
    Selection(**kw)
  assert e.value.option == option


@pytest.mark.parametrize("argv,option", [
    (["--repetitions-mean", "3"], "select"),
    (["--keep-trials"], "select"),
    (["--select", "top-3", "--repetitions-mean", "3"], "select"),
    (["--select", "best-of"], "repetitions_mean"),
    (["--select", "best-of", "--repetitions-mean", "three"], "repetitions_mean"),
    (["--select", "best-of", "--repetitions-mean", "3", "--selection-seed", "1.5"],
     "selection_seed"),
])
def test_bad_command_lines_are_refused(argv, option):
  with pytest.raises(FedJaxDpError) as e:
    sweep_select.parse_select_args(argv)
  assert e.value.option == option


BASE = dict(algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
            batch_size=8, rounds=3, eval_every=3, sampling_rate=0.5, clip_norm=1.0,
            logger="none")


@pytest.mark.parametrize("kw,axes,seeds,option", [
    (dict(resume="somewhere"), None, None, "resume"),
    ({}, None, [0, 1], "seeds"),
    ({}, {"delta": [1e-5, 1e-6]}, None, "delta"),
    (dict(logger="tensorboard,wandb"), None, None, "logger"),
])
def test_contradictory_options_are_refused(kw, axes, seeds, option):
  with pytest.raises(FedJaxDpError) as e:
    sweep_best_of.check_best_of(RunConfig.from_dict({**BASE, **kw}), axes, seeds)
  assert e.value.option == option


def test_a_score_from_the_clients_own_data_is_refused():
  """On a dataset whose test set is the clients' own (e.g. HAR's per-subject windows),
  the test accuracy is a diagnostic: selecting on it would leak, so it is refused; on a
  central test set it is a DP post-processing and allowed."""
  finals = ["final_test_accuracy", "final_test_loss"]
  own = disclosure.summary_labels_for_run(True)
  with pytest.raises(FedJaxDpError, match="without noise") as e:
    sweep_select.check_metric("final_test_accuracy", own, finals)
  assert e.value.option == "select_metric"
  central = disclosure.summary_labels_for_run(False)
  assert sweep_select.check_metric("final_test_loss", central, finals)[0] == "dp"
  with pytest.raises(FedJaxDpError, match="not a numeric summary field"):
    sweep_select.check_metric("majority_class_accuracy", central, finals)
  with pytest.raises(FedJaxDpError) as e:  # before anything is trained
    sweep.run_sweep(RunConfig.from_dict(BASE), {"noise_multiplier": [1.0, 2.0]},
                    progress=False, select=Selection(3.0, metric="train_loss", seed=1))
  assert e.value.option == "select_metric"


# --- end to end -----------------------------------------------------------------------


def test_best_of_sweep_end_to_end_with_every_trial_kept(tmp_path):
  """fedjax-dp sweep --select best-of --keep-trials: K and the configurations are the
  seed's draws, the chosen trial is the best score, and the selection's epsilon is the
  Poisson theorem over the grid's planned curves (recomputed here from the noise
  multipliers, rounds and rate)."""
  out = tmp_path / "bo"
  argv = ["sweep", "--algorithm", "dp_fedavg", "--dataset", "synthetic", "--num-clients",
          "20", "--model", "linear", "--batch-size", "8", "--rounds", "3", "--eval-every",
          "3", "--sampling-rate", "0.5", "--clip-norm", "1.0", "--logger", "none",
          "--delta", "1e-5", "--noise-multiplier", "1.0,2.0", "--select", "best-of",
          "--repetitions-mean", "3", "--selection-seed", "5", "--keep-trials",
          "--no-progress", "--out", str(out)]
  assert cli.main(argv) == 0
  doc = json.loads((out / "sweep.json").read_text())
  sel = doc["selection"]
  rng = np.random.default_rng(5)
  k = int(rng.poisson(3.0))
  idx = rng.integers(0, 2, size=k).tolist()
  assert k >= 1 and sel["repetitions"] == k
  grid = ["noise_multiplier=1.0", "noise_multiplier=2.0"]
  assert sel["grid"] == grid and sel["drawn"] == [grid[i] for i in idx]
  names = [t["name"] for t in sel["trials"]]
  assert names == [f"trial={i},{grid[j]},seed={i}" for i, j in enumerate(idx)]
  assert sorted(os.listdir(out)) == sorted(names + ["sweep.json", "sweep.md", "sweep.png",
                                                     "partition.png"])
  scores = [json.loads((out / n / "summary.json").read_text())["final_test_accuracy"]
            for n in names]
  assert sel["chosen"] == names[int(np.argmax(scores))]
  assert [t["score"] for t in sel["trials"]] == pytest.approx(scores)
  curves = [_curve(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(0.5, G(z)), 3)) for z in (1.0, 2.0)]
  want = _eps_of(_poisson_select(np.maximum(*curves), 3.0), 1e-5)
  assert sel["epsilon_selection_rdp"] == pytest.approx(want, rel=1e-6)
  own = {t["name"]: t["epsilon_rdp"] for t in sel["trials"]}
  assert sel["epsilon_selection_rdp"] > max(own.values())
  total = sum(curves[j] for j in idx)
  assert sel["epsilon_all_trials_rdp"] == pytest.approx(_eps_of(total, 1e-5), rel=1e-6)
  assert "Best-of selection" in (out / "sweep.md").read_text()
  assert sel["score_data"]["kind"] == "dp" and "central test set" in sel["score_data"]["what"]


def test_best_of_publishes_only_the_chosen_trial_and_k_zero_outputs_nothing(tmp_path):
  out = str(tmp_path / "only")

  def only_z2(s):  # K in {2, 3}, every trial the second configuration (z = 2)
    rng = np.random.default_rng(s)
    k = rng.poisson(2.0)
    return k in (2, 3) and set(rng.integers(0, 2, size=k).tolist()) == {1}
  seed = next(s for s in range(1000) if only_z2(s))
  res = sweep.run_sweep(RunConfig.from_dict({**BASE, "out": out}),
                        {"noise_multiplier": [1.0, 2.0]}, progress=False,
                        select=Selection(2.0, seed=seed))
  sel = res.selection
  assert sel["repetitions"] >= 2 and len(res.members) == 1
  assert res.members[0].name == sel["chosen"]
  assert [t["score"] is not None for t in sel["trials"]] == [
      t["name"] == sel["chosen"] for t in sel["trials"]]
  assert sorted(d for d in os.listdir(out) if d.startswith("trial=")) == [sel["chosen"]]
  # The bound covers the whole grid, the undrawn z = 1 included (its curve dominates).
  assert set(sel["drawn"]) == {"noise_multiplier=2.0"}
  curves = [_curve(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(0.5, G(z)), 3)) for z in (1.0, 2.0)]
  want = _eps_of(_poisson_select(curves[0], 2.0), sel["delta"])
  assert sel["epsilon_selection_rdp"] == pytest.approx(want, rel=1e-6)
  assert sel["how"]["member"] == "noise_multiplier=1.0"
  assert sel["epsilon_selection_rdp"] > _eps_of(_poisson_select(curves[1], 2.0), sel["delta"])
  # K = 0 under Poisson(1) (probability 1/e): nothing trained, nothing output.
  seed = next(s for s in range(100) if np.random.default_rng(s).poisson(1.0) == 0)
  none = sweep.run_sweep(RunConfig.from_dict({**BASE, "out": str(tmp_path / "zero")}),
                         {"noise_multiplier": [1.0, 2.0]}, progress=False,
                         select=Selection(1.0, seed=seed))
  assert none.members == [] and none.selection["repetitions"] == 0
  assert none.selection["chosen"] is None
  assert json.loads((tmp_path / "zero" / "sweep.json").read_text())["configurations"] == 0


def test_choose_takes_the_best_finite_score_first_on_ties():
  assert sweep_select.choose([0.5, 0.9, 0.9, float("nan")], "max") == 1
  assert sweep_select.choose([0.5, None, 0.2, 0.2], "min") == 2
  assert sweep_select.choose([float("nan"), None], "max") is None
  assert sweep_select.score_direction("final_test_loss") == "min"
  assert sweep_select.score_direction("final_test_accuracy") == "max"


def test_a_ledger_above_its_plan_raises_the_grid_curve():
  """The selection bounds each configuration by the larger of its planned curve and
  its trials' own ledgers at every order (equal in every run here; a ledger above its
  plan would raise it and drop the event)."""
  from fedjax_dp.privacy.ledger import PrivacyLedger

  class Info:
    def __init__(self, ledger):
      self.ledger = ledger

  def ledger(z, rounds):
    led = PrivacyLedger(DELTA)
    for _ in range(rounds):
      led.record(z, 1.0, 1)
    return led
  planned = ledger(2.0, 3)
  grid = [(tuple(planned.orders), planned.rdp(), planned.dp_event())]
  spec = type("Spec", (), {"guarantee_ledger": lambda self, l, a: l})()
  same = {"privacy": grid, "indices": [0], "trial_specs": [spec]}
  assert sweep_best_of._with_realised(same, [Info(ledger(2.0, 3))]) == grid
  more = sweep_best_of._with_realised(same, [Info(ledger(2.0, 4))])
  np.testing.assert_allclose(more[0][1], ledger(2.0, 4).rdp())
  assert more[0][2] is None
