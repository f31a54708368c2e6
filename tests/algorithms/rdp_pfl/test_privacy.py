"""Paper 003's guarantee (issue 30): per-record release groups (F8), the records' fixed
roles, uniform aggregation (F5), the observation model, the paper mode's enforced
product bound and the public divisors.

Reference epsilons are built here from the definition with dp_accounting alone: a record
in a client's query set is subject to the query stage's tau0 T Poisson-subsampled
Gaussians, one in its support set to the support stage's; the run's epsilon is the
larger, and the old accounting composed both stages for every record."""

import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.rdp_pfl import clients, meta
from fedjax_dp.algorithms.rdp_pfl.algorithm import rdp_pfl
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.federated.population import PopulationData
from fedjax_dp.models import create_model
from fedjax_dp.privacy import clipping
from fedjax_dp.privacy.multi_release import MultiReleaseLedger
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.validation import FedJaxDpError

ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
DELTA, Z, ROUNDS, TAU0 = 1e-5, 1.5, 30, 2
Q_Q, Q_S = 0.3, 0.2
#: Each mode's (query, support) noise multiplier over sigma, by the sensitivities the
#: modes enforce (per-example: C; paper: the query pair 2 sqrt 2 C, support 2C).
SCALES = {"per_example_hessian": (1.0, 1.0), "first_order": (1.0, 1.0), "dp_fedavg": (1.0, 1.0),
          "dp_fedavg_one_step": (1.0, 1.0),
          "paper": (1 / (2 * math.sqrt(2)), 0.5)}


def _data(clients_=2, n=6, seed=0, d=4):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(clients_, n, d)).astype(np.float32)
  y = rng.integers(0, 2, size=(clients_, n)).astype(np.int32)
  return FederatedData("t", x, y, np.full(clients_, n, np.int32), 2)


def _model(d=4):
  return create_model("linear", (d,), 2)


def _stage(z, q, steps):
  return dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)


def _by_definition(mode, z=Z, rounds=ROUNDS, accountant="rdp"):
  """(new: the larger stage, old: both stages composed) from dp_accounting alone."""
  sq, ss = SCALES[mode]
  query, support = _stage(z * sq, Q_Q, TAU0 * rounds), _stage(z * ss, Q_S, TAU0 * rounds)

  def eps(event):
    acc = (dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE) if accountant == "rdp"
           else dp_pld.PLDAccountant(ADD_REMOVE, 1e-3))
    return acc.compose(event).get_epsilon(DELTA)

  return max(eps(query), eps(support)), eps(dp_accounting.ComposedDpEvent([query, support]))


def _alg(mode="first_order", data=None, **kw):
  kw = dict(dict(noise_multiplier=Z, query_sampling_rate=Q_Q, support_sampling_rate=Q_S,
                 local_epochs=TAU0, clip_mode=mode), **kw)
  return rdp_pfl(_model(), data or _data(), **kw)


def _ledger(spec, rounds=ROUNDS, z=Z):
  ledger = spec.make_ledger(DELTA)
  ledger.record_many({r.name: np.full(rounds, z * r.event_scale) for r in spec.releases},
                     {r.name: r.sampling_rate for r in spec.releases},
                     {r.name: r.steps for r in spec.releases})
  return ledger


@pytest.mark.parametrize("mode", sorted(SCALES))
def test_epsilon_is_the_larger_stage_not_both_composed(mode):
  """F8: every mode's groups are {query}, {support}; the run's epsilon is the larger
  stage's, from the definition, strictly below the old composition of both stages --
  in paper mode too: its "query" release is already the pair (inner, outer) a query
  record moves (sensitivity 2 sqrt 2 C), so composing the support release for it as
  well charged its outer release twice."""
  spec = _alg(mode).privacy
  assert [r.event_scale for r in spec.releases] == pytest.approx(SCALES[mode])
  new, old = _by_definition(mode)
  ledger = _ledger(spec)
  assert ledger.epsilon() == pytest.approx(new, rel=1e-9)
  assert ledger.epsilon() < 0.9 * old
  assert spec.groups == (("query",), ("support",)) == meta.release_groups(mode)
  assert ledger.epsilon_history()[-1] == ledger.epsilon()
  # The old accounting (one group of both releases) is the composition, exactly.
  both = MultiReleaseLedger(["query", "support"], DELTA, sampler="poisson")
  both.record_many({r.name: np.full(ROUNDS, Z * r.event_scale) for r in spec.releases},
                   {r.name: r.sampling_rate for r in spec.releases},
                   {r.name: r.steps for r in spec.releases})
  assert both.epsilon() == pytest.approx(old, rel=1e-9)


def test_pld_epsilon_is_the_larger_stage():
  spec = _alg("first_order").privacy
  new, old = _by_definition("first_order", accountant="pld")
  ledger = _ledger(spec)
  assert ledger.epsilon(accountant="pld") == pytest.approx(new, rel=5e-3)
  assert ledger.epsilon(accountant="pld") < 0.9 * old


def test_calibration_inverts_the_larger_stage():
  """Calibration to a target epsilon inverts the run's accounting: the dominating stage
  (equal scales and steps, the larger rate) is the worst for every accountant, so its z
  spends exactly the target; the old composition would spend more at that z."""
  spec = _alg("first_order").privacy
  z = run_privacy.calibrate_noise_multiplier(spec, ROUNDS, 2.0, DELTA, "rdp")
  new, old = _by_definition("first_order", z=z)
  assert new == pytest.approx(2.0, abs=1e-3) and new <= 2.0 + 1e-9
  assert old > 2.3
  assert spec.dominating_group() == ("query",)  # q^Q = 0.3 > q^S = 0.2
  assert _ledger(spec, z=z).epsilon() == pytest.approx(new, rel=1e-9)
  # The budget guard (the spec's own ledger) agrees.
  assert run_privacy.budget_rounds(spec, z, ROUNDS, 2.0 + 1e-6, DELTA) == ROUNDS
  # Each group's event of the run, by hand: the larger z over them calibrates the max.
  ev = spec.group_events_of_run(z, ROUNDS)
  eps = [dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(e).get_epsilon(DELTA)
         for e in ev]
  assert max(eps) == pytest.approx(new, rel=1e-9)


def test_without_a_dominating_stage_calibration_is_conservative():
  """Paper mode with q^Q < q^S: the query pair has the smaller z, the support stage the
  larger rate; neither dominates for every delta, so calibration composes both (an
  upper bound): the run then spends at most the target."""
  spec = _alg("paper", query_sampling_rate=0.1, support_sampling_rate=0.3).privacy
  assert spec.dominating_group() is None
  z = run_privacy.calibrate_noise_multiplier(spec, ROUNDS, 2.0, DELTA, "rdp")
  assert _ledger(spec, z=z).epsilon() < 2.0


def test_records_keep_their_roles_and_the_round_reads_them():
  """Each record's role is stored with it (``query_rows``): permuting a client's rows
  together with their roles leaves the round unchanged (q = 1, no noise: deterministic),
  so the round is a function of the (record, role) pairs. A position rule is not:
  removing a record in the middle shifts every later row, and for a 50/50 split flips
  the role of each later record -- the neighbouring dataset would then differ in many
  records of each stage, which no accounting of one record covers."""
  data = _data(clients_=1, n=6)
  kw = dict(noise_multiplier=0.0, query_sampling_rate=1.0, support_sampling_rate=1.0,
            inner_learning_rate=0.5, outer_learning_rate=0.5)
  roles = np.array([[True, False, True, True, False, False]])
  perm = np.array([4, 2, 0, 5, 1, 3])
  permuted = FederatedData("t", data.x[:, perm], data.y[:, perm], data.counts, 2)

  def one_round(d, r):
    alg = _alg(data=d, query_rows=r, **kw)
    pop = PopulationData(jnp.asarray(d.x), jnp.asarray(d.y), jnp.asarray(d.counts))
    state, _ = alg.round_fn(alg.init(jax.random.key(0)), pop, alg.hparams,
                            jax.random.key(1))
    return np.concatenate([np.ravel(l) for l in jax.tree_util.tree_leaves(state.params)])

  base = one_round(data, roles)
  np.testing.assert_allclose(one_round(permuted, roles[:, perm]), base, rtol=1e-5,
                             atol=1e-6)
  # The same permutation with roles by position changes the round.
  assert not np.allclose(one_round(permuted, None), one_round(data, None), atol=1e-4)
  # A position rule flips the later records' roles when a middle record is removed.
  by_pos = clients.is_query_row(6, 0.5)
  kept = [0, 1, 3, 4, 5]                      # remove record 2
  assert np.all(by_pos[:5][2:] != by_pos[kept][2:])
  with pytest.raises(FedJaxDpError, match="query_rows"):
    _alg(query_rows=np.zeros((3, 6), bool))
  with pytest.raises(FedJaxDpError, match="query_rows"):
    _alg(query_rows=np.zeros((2, 6), bool))    # no query record


def test_uniform_weights_by_default_and_data_size_weights_only_without_a_guarantee():
  """F5: the default averages the source clients uniformly (public weights); eq. 3's
  data-size weights move when a record is added, so with a guarantee they are refused,
  naming the option; without one (private=False) they are the paper's weights."""
  x = np.random.default_rng(3).normal(size=(2, 8, 4)).astype(np.float32)
  y = np.zeros((2, 8), np.int32)
  data = FederatedData("t", x, y, np.array([8, 4], np.int32), 2)
  kw = dict(noise_multiplier=0.0, query_sampling_rate=1.0, support_sampling_rate=1.0,
            inner_learning_rate=0.5, outer_learning_rate=0.5)

  def update(d, **extra):
    alg = _alg(data=d, **dict(kw, **extra))
    pop = PopulationData(jnp.asarray(d.x), jnp.asarray(d.y), jnp.asarray(d.counts))
    s0 = alg.init(jax.random.key(0))
    s1, _ = alg.round_fn(s0, pop, alg.hparams, jax.random.key(1))
    return (np.concatenate([np.ravel(a - b) for a, b in zip(
        jax.tree_util.tree_leaves(s1.params), jax.tree_util.tree_leaves(s0.params))]), alg)

  def client(i):  # client i alone (q = 1, no noise: its update does not depend on keys)
    d = FederatedData("t", x[i:i + 1], y[i:i + 1], data.counts[i:i + 1], 2)
    return update(d, nominal_sizes=(4, 4))[0]

  uniform, alg = update(data)
  assert alg.config["aggregation"] == "uniform" and alg.privacy is not None
  u0, u1 = client(0), client(1)
  np.testing.assert_allclose(uniform, (u0 + u1) / 2, rtol=1e-4, atol=1e-6)
  with pytest.raises(FedJaxDpError, match="depend on the client's records") as err:
    _alg(data=data, aggregation="data_size")
  assert err.value.option == "aggregation"
  sized, alg = update(data, aggregation="data_size", private=False)
  assert alg.privacy is None
  np.testing.assert_allclose(sized, (4 * u0 + 2 * u1) / 6, rtol=1e-4, atol=1e-6)


def test_observation_and_participation():
  """The record sampling inside a client's DP-SGD steps is hidden (the upload is an
  aggregate over the Poisson draw): ``observation="aggregate"``; every source client
  uploads every round, visibly, and each round accounts every release (no client
  sampling is claimed)."""
  alg = _alg()
  spec = alg.privacy
  assert spec.observation == "aggregate" and spec.sampler == "poisson"
  assert spec.unit == "record-level" and spec.relation == "add_remove"
  assert alg.sampling_rate == 1.0 and alg.k_max == 2
  assert "participation is visible" in spec.note
  data = _data()
  pop = PopulationData(jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts))
  _, m = alg.round_fn(alg.init(jax.random.key(0)), pop, alg.hparams, jax.random.key(1))
  assert int(m.num_sampled) == int(m.num_clients) == 2
  for name, q in (("query", Q_Q), ("support", Q_S)):
    assert float(m.releases[name]["sampling_rate"]) == pytest.approx(q)
    assert int(m.releases[name]["dp_steps"]) == TAU0


def test_public_divisors_do_not_depend_on_the_records():
  """With the public nominal sizes (the plugin passes the configured ones), adding a
  record changes no divisor or cap; the largest client's count is the fallback."""
  small = _data(clients_=2, n=6)
  counts = np.array([6, 5], np.int32)
  out = FederatedData("t", small.x, small.y, counts, 2)
  a = _alg(data=small, nominal_sizes=(3, 3))
  b = _alg(data=out, nominal_sizes=(3, 3))
  keys = ("nominal_query_size", "nominal_support_size", "query_max_batch",
          "support_max_batch")
  assert [a.config[k] for k in keys] == [b.config[k] for k in keys]
  with pytest.raises(FedJaxDpError, match="nominal_sizes"):
    _alg(data=small, nominal_sizes=(2, 3))


def test_paper_mode_enforces_the_product_bound_whatever_the_power_iteration(monkeypatch):
  """Eq. 9's product is <= C only if the spectral-norm estimate is not below ||I - eta
  H||; power iteration under-estimates it. With an estimate far too small (c1 = 1), the
  outer step must still move w by at most beta C (before noise)."""
  model = create_model("mlp", (6,), 3, hidden=(5,))
  w = model.init(jax.random.key(0))
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(12, 6)), jnp.float32)
  y = jnp.asarray(rng.integers(0, 3, 12), jnp.int32)
  monkeypatch.setattr(meta, "spectral_norm_i_minus_eta_h",
                      lambda *a, **k: jnp.asarray(1e-6, jnp.float32))
  c, beta = 0.01, 0.7
  cfg = meta.StageConfig(12)
  qmask, smask = jnp.arange(12) < 6, jnp.arange(12) >= 6
  new_w, st = meta.local_epoch(
      model, w, x, y, qmask, smask, jax.random.key(0), eta=1e-3, beta=beta, clip_norm=c,
      noise_multiplier=0.0, q_query=1.0, q_support=1.0, denom_query=6.0,
      denom_support=6.0, query_cfg=cfg, support_cfg=cfg, clip_mode="paper")
  step = clipping.global_norm(jax.tree_util.tree_map(jnp.subtract, new_w, w))
  assert float(step) <= beta * c * (1 + 1e-5)
  assert float(st.clipped[1]) == float(st.rows[1]) == 6.0  # every row of the clipped batch
