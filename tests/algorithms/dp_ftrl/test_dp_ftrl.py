"""DP-FTRL end to end (`fedjax-dp run --algorithm dp_ftrl`): tree, banded and independent
noise learn on a small task; epsilon recomputed from metrics.jsonl alone with
dp_accounting (the tree's sensitivity counted here from the released dyadic nodes and the
groups' rounds, and cross-checked against dp_accounting's
SingleEpochTreeAggregationDpEvent per tree when T = R; the banded C rebuilt with
jax-privacy and its sensitivity computed here); calibration to
--target-epsilon; the equal-epsilon comparison behind the tree's claim; resume refused
where C was built for fewer rounds; argument errors."""

import json
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.algorithms.dp_ftrl.algorithm import dp_ftrl
from fedjax_dp.algorithms.dp_ftrl.noise import TreeNoise
from fedjax_dp.models import create_model
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.runs.privacy import calibrate_noise_multiplier
from fedjax_dp.validation import FedJaxDpError

from .test_tree_sensitivity import release_matrix, worst_group

REL = dp_accounting.NeighboringRelation
SYNTH = ["--dataset", "synthetic", "--num-clients", "20", "--model", "mlp", "--hidden", "8",
         "--rounds", "10", "--eval-every", "5", "--delta", "1e-3", "--cycle-length", "4",
         "--server-lr", "0.5", "--clip-norm", "1.0", "--no-progress"]
#: (mechanism, its extra flags): tree and banded calibrated to --target-epsilon, the
#: independent noise at a given z.
CASES = {"tree": ["--target-epsilon", "20"],
         "banded": ["--target-epsilon", "20", "--bands", "3"],
         "independent": ["--noise-multiplier", "0.4"]}


def _cli_run(tmp_path, mechanism, extra=()):
  out = tmp_path / mechanism
  rc = cli.main(["run", "--algorithm", "dp_ftrl", "--mechanism", mechanism, *SYNTH,
                 *CASES[mechanism], *extra, "--out", str(out)])
  assert rc == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  return rows, json.loads((out / "summary.json").read_text())


def _depth(steps):
  """dp_accounting's tree depth: ceil(log2(steps + 1))."""
  return math.ceil(math.log2(steps + 1))


def _banded_matrix(n, bands, strategy):
  """C rebuilt here with jax-privacy (the strategy the records name), columns normalised
  in float64."""
  from jax_privacy.matrix_factorization import banded, toeplitz
  if strategy == "sqrt":
    c = np.asarray(banded.ColumnNormalizedBanded.default(n, bands).materialize(), np.float64)
  else:
    coefs = np.asarray(toeplitz.optimize_banded_toeplitz(n, bands), np.float64)
    c = np.zeros((n, n))
    for d in range(bands):
      c[np.arange(d, n), np.arange(n - d)] = coefs[d]
  return c / np.linalg.norm(c, axis=0, keepdims=True)


def _tree_sens2(rounds, restart_every, cycle):
  """The tree's sensitivity^2 from its definition (`test_tree_sensitivity`'s release
  matrix of the dyadic blocks each tree's prefix sums use, and the worst group's
  ||A u_g||^2), not from the code under test."""
  return float(worst_group(release_matrix(rounds, restart_every), rounds, cycle))


def recompute(rows):
  """(epsilon RDP, epsilon PLD, sensitivity^2) of the run from its metrics rows alone."""
  z = rows[0]["noise_stddev"] / rows[0]["sensitivity"]
  for r in rows:
    assert r["noise_stddev"] / r["sensitivity"] == pytest.approx(z, rel=1e-6)
    assert r["noise_multiplier"] == pytest.approx(z, rel=1e-5)
    assert r["neighboring_relation"] == "add_remove" and r["privacy_unit"] == "user-level"
    assert r["ftrl_group_rate"] == 1.0  # no amplification in these runs
  z = rows[0]["noise_multiplier"]
  t, cyc, mech = len(rows), rows[0]["ftrl_cycle_length"], rows[0]["ftrl_mechanism"]
  if mech == "tree":
    re = rows[0]["ftrl_restart_every"]
    assert re <= cyc  # each client in each tree at most once
    sens2 = _tree_sens2(t, re, cyc)
    eps_rdp = dp_rdp.RdpAccountant(neighboring_relation=REL.ADD_OR_REMOVE_ONE).compose(
        dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))).get_epsilon(rows[0]["delta"])
    if re == cyc:  # group 0 is every tree's first leaf: dp_accounting's tree per tree
      trees = [re] * (t // re) + ([t % re] if t % re else [])
      events = [dp_accounting.SingleEpochTreeAggregationDpEvent(z, s) for s in trees]
      # dp_accounting's RDP takes the tree under REPLACE_SPECIAL (zero-out; the same
      # Gaussian arithmetic as add/remove); one tree is a Gaussian of sensitivity
      # sqrt(depth).
      assert sens2 == float(sum(_depth(s) for s in trees))
      assert dp_rdp.RdpAccountant(neighboring_relation=REL.REPLACE_SPECIAL).compose(
          dp_accounting.ComposedDpEvent(events)).get_epsilon(
              rows[0]["delta"]) == pytest.approx(eps_rdp, rel=1e-9)
  else:
    if mech == "banded":
      c = _banded_matrix(rows[0]["ftrl_strategy_rounds"], rows[0]["ftrl_bands"],
                         rows[0]["ftrl_strategy"])[:t, :t]
      assert rows[0]["ftrl_bands"] <= cyc  # min-separation: a client's columns disjoint
    else:
      c = np.eye(t)
    col2 = np.sum(c * c, axis=0)
    sens2 = max(float(np.sum(col2[g::cyc])) for g in range(cyc))
    eps_rdp = dp_rdp.RdpAccountant(neighboring_relation=REL.ADD_OR_REMOVE_ONE).compose(
        dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))).get_epsilon(rows[0]["delta"])
  eps_pld = dp_pld.PLDAccountant(REL.ADD_OR_REMOVE_ONE, 1e-4).compose(
      dp_accounting.GaussianDpEvent(z / math.sqrt(sens2))).get_epsilon(rows[0]["delta"])
  return eps_rdp, eps_pld, sens2


@pytest.mark.parametrize("mechanism", sorted(CASES))
def test_run_learns_and_epsilon_from_metrics_alone(tmp_path, mechanism):
  rows, s = _cli_run(tmp_path, mechanism)
  assert s["algorithm"] == "dp_ftrl" and s["mechanism"] == mechanism
  assert s["final_test_accuracy"] > s["majority_class_accuracy"] + 0.15, s
  eps_rdp, eps_pld, sens2 = recompute(rows)
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["epsilon_pld"] == pytest.approx(eps_pld, rel=1e-6)
  assert rows[-1]["epsilon"] == pytest.approx(eps_rdp, rel=1e-6)
  assert rows[-1]["ftrl_sensitivity_squared"] == pytest.approx(sens2, rel=1e-6)
  assert s["sensitivity_squared"] == pytest.approx(sens2, rel=1e-6)
  assert s["effective_noise_multiplier"] == pytest.approx(
      s["noise_multiplier"] / math.sqrt(sens2), rel=1e-6)
  assert s["participation"]["max_participations_per_client"] == 3  # ceil(10 / 4)
  assert s["truncation_probability"] == 0.0 and s["delta_total"] == s["delta"]
  assert "t mod 4 = g_i" in s["privacy_note"]
  if mechanism == "tree":  # trees of 4, 4 and 2 rounds: 3 + 3 + 2 nodes per leaf
    assert sens2 == 8.0
  elif mechanism == "independent":
    assert sens2 == 3.0
  else:  # unit columns that never overlap for one client: its 3 participations
    assert sens2 == pytest.approx(3.0, rel=1e-6)
  if "--target-epsilon" in CASES[mechanism]:  # calibration hits the target, from below
    assert s["epsilon"] == pytest.approx(20.0, rel=1e-3) and s["epsilon"] <= 20.0 + 1e-9


def test_tree_restarted_within_the_cycle_epsilon_from_metrics_alone(tmp_path):
  """--restart-every 3 < R = 4 over 10 rounds (trees of 3, 3, 3, 1 rounds): the worst
  client (group 0: rounds 0, 4, 8, leaves 1, 2, 3 of trees 0, 1, 2) is in 2 + 1 + 1 = 4
  released nodes, not the 2 + 2 + 2 + 1 = 7 of charging every tree its depth; at z = 1,
  delta = 1e-3, epsilon RDP 8.42 (not 12.15), PLD 7.58 (not 11.02)."""
  out = tmp_path / "tree3"
  rc = cli.main(["run", "--algorithm", "dp_ftrl", "--mechanism", "tree", *SYNTH,
                 "--restart-every", "3", "--noise-multiplier", "1.0", "--out", str(out)])
  assert rc == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  s = json.loads((out / "summary.json").read_text())
  assert rows[0]["ftrl_restart_every"] == 3 and rows[0]["ftrl_cycle_length"] == 4
  eps_rdp, eps_pld, sens2 = recompute(rows)
  assert sens2 == 4.0
  assert [r["ftrl_sensitivity_squared"] for r in rows] == [
      _tree_sens2(t, 3, 4) for t in range(1, 11)]
  assert s["sensitivity_squared"] == 4.0
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  assert s["epsilon_pld"] == pytest.approx(eps_pld, rel=1e-6)
  assert rows[-1]["epsilon"] == pytest.approx(eps_rdp, rel=1e-6)
  assert eps_rdp == pytest.approx(8.416, abs=2e-3)
  assert eps_pld == pytest.approx(7.581, abs=2e-3)


def test_equal_epsilon_tree_versus_independent_noise():
  """What the tree buys. At equal z the tree's epsilon is LARGER than independent noise's
  (a leaf is in floor(log2 T) + 1 nodes: sensitivity^2 7 instead of 1 for one tree of 64
  rounds); calibrated to the same epsilon (each through its own run event), z_tree =
  sqrt(7) z_ind, and the noise in the model, the prefix sums of the rounds' noises, has
  variance popcount(t) z_tree^2 for the tree against t z_ind^2: on average over the 64
  rounds about 2/3 of independent noise's, and 7/64 of it at the end of the tree."""
  data = type("D", (), dict(num_clients=64, max_examples=1, counts=np.ones(64)))()
  model = create_model("linear", (2,), 2)
  algs = {m: dp_ftrl(model, data, mechanism=m, noise_multiplier=1.0, rounds=64,
                     cycle_length=64) for m in ("tree", "independent")}
  eps_at_equal_z = {m: a.privacy.make_ledger(1e-5) for m, a in algs.items()}
  for ledger in eps_at_equal_z.values():
    ledger.record(1.0, 1 / 64, count=64)
  assert eps_at_equal_z["tree"].epsilon() > 2 * eps_at_equal_z["independent"].epsilon()
  z = {m: calibrate_noise_multiplier(a.privacy, 64, 4.0, 1e-5, "rdp")
       for m, a in algs.items()}
  assert z["tree"] / z["independent"] == pytest.approx(math.sqrt(7), rel=1e-3)
  # The tree's prefix-sum noise, sampled through the generator the round uses.
  tree = TreeNoise(64)
  like = jnp.zeros(())

  def prefix_noise(key):
    def step(state, k):
      w, state = tree.sample(state, k, like, 1.0)
      return state, w
    _, ws = jax.lax.scan(step, tree.init(like), jax.random.split(key, 64))
    return jnp.cumsum(ws)

  draws = np.asarray(jax.vmap(prefix_noise)(jax.random.split(jax.random.key(0), 4000)))
  var_tree = draws.var(axis=0) * z["tree"] ** 2                   # [64], t = 1..64
  t = np.arange(1, 65)
  popcount = np.array([bin(i).count("1") for i in t])
  np.testing.assert_allclose(var_tree, popcount * z["tree"] ** 2, rtol=0.1)
  var_ind = t * z["independent"] ** 2
  assert var_tree.mean() < 0.75 * var_ind.mean()
  assert var_tree[-1] < 0.15 * var_ind[-1]


def test_resume_to_more_rounds_refused_for_banded_allowed_for_tree(tmp_path):
  base = dict(algorithm="dp_ftrl", dataset="synthetic", num_clients=20, model="linear",
              rounds=4, eval_every=4, cycle_length=4, noise_multiplier=1.0)
  out = tmp_path / "banded"
  run(RunConfig.from_dict(dict(base, mechanism="banded", out=str(out))), progress=False)
  with pytest.raises(FedJaxDpError, match="banded_strategy_rounds change from 4 to 6"):
    run(RunConfig(resume=str(out), resume_rounds=6), progress=False)
  out = tmp_path / "tree"
  run(RunConfig.from_dict(dict(base, mechanism="tree", out=str(out))), progress=False)
  res = run(RunConfig(resume=str(out), resume_rounds=6), progress=False)
  assert len(res.records) == 6
  # Trees of 4 and 2 rounds: 3 + 2 nodes per leaf.
  expected = dp_rdp.RdpAccountant().compose(
      dp_accounting.GaussianDpEvent(1.0 / math.sqrt(5.0))).get_epsilon(1e-3)
  assert res.summary["epsilon_rdp"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("kwargs,option", [
    (dict(mechanism="tree", restart_every=5, cycle_length=4), "restart_every"),
    (dict(mechanism="banded", rounds=8, bands=5, cycle_length=4), "bands"),
    (dict(mechanism="banded", cycle_length=4), "rounds"),
    (dict(mechanism="tree", bands=2), "bands"),
    (dict(mechanism="independent", restart_every=2), "restart_every"),
    (dict(mechanism="ring"), "mechanism"),
    (dict(cycle_length=30), "cycle_length"),
    (dict(cycle_length=4, clients_per_round=5), "cycle_length"),
    (dict(group_rate=0.0), "group_rate"),
])
def test_bad_arguments_raise_named_errors(kwargs, option):
  data = type("D", (), dict(num_clients=20, max_examples=1, counts=np.ones(20)))()
  with pytest.raises(FedJaxDpError) as e:
    dp_ftrl(create_model("linear", (2,), 2), data, **kwargs)
  assert e.value.option == option, str(e.value)


def test_amplified_banded_run_epsilon_from_metrics_alone(tmp_path):
  """Cyclic Poisson sampling (group_rate < 1, R >= bands): the amplified banded MF event
  (Choquette-Choo et al. 2023, Thm. 4), ceil(T / R) Poisson-sampled Gaussians, rebuilt
  from the records alone; it is below the same run's unamplified bound."""
  out = tmp_path / "amplified"
  rc = cli.main(["run", "--algorithm", "dp_ftrl", "--mechanism", "banded", *SYNTH,
                 "--bands", "4", "--group-rate", "0.5", "--noise-multiplier", "1.0",
                 "--out", str(out)])
  assert rc == 0
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  s = json.loads((out / "summary.json").read_text())
  q, cyc, z = rows[0]["ftrl_group_rate"], rows[0]["ftrl_cycle_length"], 1.0
  assert q == 0.5 and cyc == 4 and rows[0]["ftrl_bands"] <= cyc
  assert all(r["noise_multiplier"] == pytest.approx(z, rel=1e-6) for r in rows)
  steps = math.ceil(len(rows) / cyc)
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
  eps_rdp = dp_rdp.RdpAccountant(neighboring_relation=REL.ADD_OR_REMOVE_ONE).compose(
      event).get_epsilon(rows[0]["delta"])
  assert s["epsilon_rdp"] == pytest.approx(eps_rdp, rel=1e-6)
  unamplified = dp_rdp.RdpAccountant().compose(
      dp_accounting.GaussianDpEvent(z / math.sqrt(steps))).get_epsilon(rows[0]["delta"])
  assert eps_rdp < unamplified
  # about half of each group takes part: the cohorts are Poisson draws within the group
  assert 0 < np.mean([r["num_clients"] for r in rows]) < 20 / cyc
