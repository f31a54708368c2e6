"""Tests of `fedjax_dp.federated.driver` (blocks of jitted rounds, records, schedules)."""

import warnings

import chex
import dp_accounting
from dp_accounting import rdp as dp_rdp
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.federated import server
from fedjax_dp.federated.client import ClientHParams, ClientMetrics
from fedjax_dp.federated.driver import (constant_schedule, make_block_fn,
                                        make_device_evaluator, make_evaluator,
                                        metrics_to_records, run_rounds)
from fedjax_dp.federated.round import (PopulationData, RoundConfig, RoundHParams,
                                       RoundMetrics, make_round)
from fedjax_dp.federated.sampling import PoissonSampler
from fedjax_dp.models import create_model
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.multi_release import MultiReleaseLedger
from fedjax_dp.validation import FedJaxDpError

REQUIRED_KEYS = {"round", "train_loss", "noise_multiplier", "sampling_rate", "dp_steps",
                 "clip_fraction", "wall_time_s", "num_clients", "num_truncated",
                 "noise_stddev", "aggregate_norm"}


@pytest.fixture(scope="module")
def setup(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  alg = dp_fedavg(model, fd, clip_norm=0.5, noise_multiplier=0.2, clients_per_round=6,
                  batch_size=8, client_learning_rate=0.3)
  traces = []

  def counting_round(state, data, hp, key):
    traces.append(1)  # runs only while tracing
    return alg.round_fn(state, data, hp, key)

  block_fn = make_block_fn(counting_round)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  evaluator = make_evaluator(model)
  evaluate = lambda p: evaluator(p, fd.test_x, fd.test_y)
  return dict(fd=fd, alg=alg, block_fn=block_fn, traces=traces, data=data,
              evaluate=evaluate, model=model)


def _assert_states_identical(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_blocks_equal_one_block_and_records(setup):
  alg, data, block_fn = setup["alg"], setup["data"], setup["block_fn"]
  rounds = 6
  schedule = constant_schedule(alg.hparams, rounds)
  init = alg.init(jax.random.key(0))
  seen = []
  s_blocks, recs = run_rounds(alg.round_fn, init, data, schedule, jax.random.key(1),
                              rounds=rounds, block_size=2, block_fn=block_fn,
                              evaluate=setup["evaluate"], eval_every=3, on_round=seen.append)
  s_one, recs_one = run_rounds(alg.round_fn, init, data, schedule, jax.random.key(1),
                               rounds=rounds, block_size=rounds, block_fn=block_fn)
  _assert_states_identical(s_blocks, s_one)
  assert int(s_blocks.round) == rounds
  # Continuing from a returned state equals running straight through.
  s_a, _ = run_rounds(alg.round_fn, init, data, schedule, jax.random.key(1), rounds=2,
                      block_size=2, block_fn=block_fn)
  s_b, recs_b = run_rounds(alg.round_fn, s_a, data,
                           jax.tree_util.tree_map(lambda a: a[2:], schedule),
                           jax.random.key(1), rounds=4, block_size=2, block_fn=block_fn)
  _assert_states_identical(s_b, s_blocks)
  assert [r["round"] for r in recs_b] == [3, 4, 5, 6]  # 1-based, continuing

  # Records: one per round, in order, with the required keys.
  assert [r["round"] for r in recs] == list(range(1, rounds + 1))  # 1-based
  assert seen == recs
  for r in recs:
    assert REQUIRED_KEYS <= set(r), REQUIRED_KEYS - set(r)
    assert "epsilon" not in r  # no ledger given
    assert r["dp_steps"] == 1
    assert r["noise_multiplier"] == pytest.approx(0.2)
    assert r["sampling_rate"] == pytest.approx(6 / 24)
    assert r["noise_stddev"] == pytest.approx(0.2 * 0.5)
    assert 0.0 <= r["clip_fraction"] <= 1.0
    assert np.isfinite(r["train_loss"])
  # eval_every=3 rounds up to block ends: after rounds 4 and 6 (indices 3 and 5).
  evaluated = [i for i, r in enumerate(recs) if "test_accuracy" in r]
  assert evaluated == [3, 5]
  for i in evaluated:
    assert 0.0 <= recs[i]["test_accuracy"] <= 1.0 and "test_loss" in recs[i]
  walls = [r["wall_time_s"] for r in recs]
  assert walls == sorted(walls) and walls[0] >= 0
  for a, b in zip(recs, recs_one):
    assert a["train_loss"] == b["train_loss"] and a["num_clients"] == b["num_clients"]


def test_schedule_values_change_without_recompiling(setup):
  alg, data, block_fn, traces = setup["alg"], setup["data"], setup["block_fn"], setup["traces"]
  init = alg.init(jax.random.key(0))
  base = constant_schedule(alg.hparams, 2)
  run_rounds(alg.round_fn, init, data, base, jax.random.key(0), rounds=2, block_size=2,
             block_fn=block_fn)  # make sure the length-2 block is compiled
  cache0, traces0 = block_fn._cache_size(), len(traces)
  finals = []
  for z, c, q, lr, slr, seed in (([0.0, 3.0], [0.1, 2.0], [0.1, 0.3], 0.1, 1.0, 0),
                                 ([1.5, 0.7], [5.0, 0.01], [0.2, 0.05], 0.3, 0.5, 7)):
    sched = RoundHParams(np.array(c, np.float32), np.array(z, np.float32),
                         np.array(q, np.float32),
                         base.client._replace(learning_rate=np.full(2, lr, np.float32)),
                         np.full(2, slr, np.float32))
    final, recs = run_rounds(alg.round_fn, init, data, sched, jax.random.key(seed),
                             rounds=2, block_size=2, block_fn=block_fn)
    finals.append(final.params)
    # Each round used its own schedule entry.
    np.testing.assert_allclose([r["noise_multiplier"] for r in recs], z, rtol=1e-6)
    np.testing.assert_allclose([r["sampling_rate"] for r in recs], q, rtol=1e-6)
    np.testing.assert_allclose([r["noise_stddev"] for r in recs], np.multiply(z, c), rtol=1e-6)
  # Sigma, C, q, both learning rates and the seed changed: no new trace, no compile.
  assert block_fn._cache_size() == cache0
  assert len(traces) == traces0
  assert not np.allclose(jax.tree_util.tree_leaves(finals[0])[0],
                         jax.tree_util.tree_leaves(finals[1])[0])


def test_ledger_receives_each_round():

  class FakeLedger:
    def __init__(self):
      self.calls = []

    def record(self, report):
      zs, qs, steps = report.noise_multiplier, report.sampling_rate, report.dp_steps
      self.calls.append((list(zs), list(qs), list(steps)))
      return [float(len(self.calls) * 10 + i) for i in range(len(zs))]

  opt = optax.sgd(1.0)
  round_fn = make_round(_zero_client, PoissonSampler.create(8, 0.5), opt,
                        RoundConfig(population_weight=8.0))
  state = server.init_server_state({"w": jnp.zeros(3)}, opt)
  sched = RoundHParams(np.ones(3, np.float32), np.array([0.5, 1.0, 2.0], np.float32),
                       np.full(3, 0.5, np.float32), constant_schedule(ClientHParams(), 3))
  ledger = FakeLedger()
  _, recs = run_rounds(round_fn, state, _population(8), sched, jax.random.key(0), rounds=3,
                       block_size=2, ledger=ledger)
  assert len(ledger.calls) == 2
  np.testing.assert_allclose(ledger.calls[0][0] + ledger.calls[1][0], [0.5, 1.0, 2.0])
  np.testing.assert_allclose(ledger.calls[0][1] + ledger.calls[1][1], [0.5] * 3)
  assert ledger.calls[0][2] + ledger.calls[1][2] == [1, 1, 1]
  assert [r["epsilon"] for r in recs] == [10.0, 11.0, 20.0]


def test_scalar_hparams_are_constant_schedules(setup):
  alg, data = setup["alg"], setup["data"]
  init = alg.init(jax.random.key(0))
  s1, r1 = run_rounds(alg.round_fn, init, data, alg.hparams, jax.random.key(0), rounds=2,
                      block_fn=setup["block_fn"])
  s2, r2 = run_rounds(alg.round_fn, init, data, constant_schedule(alg.hparams, 2),
                      jax.random.key(0), rounds=2, block_fn=setup["block_fn"])
  chex.assert_trees_all_close(s1.params, s2.params)
  assert [r["train_loss"] for r in r1] == [r["train_loss"] for r in r2]


def test_schedule_errors(setup):
  alg, data = setup["alg"], setup["data"]
  init = alg.init(jax.random.key(0))
  short = constant_schedule(alg.hparams, 3)
  with pytest.raises(FedJaxDpError, match="schedule"):
    run_rounds(alg.round_fn, init, data, short, jax.random.key(0), rounds=4)
  with pytest.raises(FedJaxDpError, match="schedule"):
    run_rounds(alg.round_fn, init, data, short._replace(clip_norm=np.ones(1, np.float32)),
               jax.random.key(0), rounds=2)
  with pytest.raises(FedJaxDpError, match="rounds"):
    run_rounds(alg.round_fn, init, data, short, jax.random.key(0), rounds=0)
  with pytest.raises(FedJaxDpError, match="block_size"):
    run_rounds(alg.round_fn, init, data, short, jax.random.key(0), rounds=2, block_size=0)
  with pytest.raises(FedJaxDpError, match="eval_every"):
    run_rounds(alg.round_fn, init, data, short, jax.random.key(0), rounds=2, eval_every=0)


def test_constant_schedule():
  sched = constant_schedule(RoundHParams(1.0, 0.5, 0.1, ClientHParams(2.0, 0.0, 1.0)), 5)
  for leaf in jax.tree_util.tree_leaves(sched):
    assert leaf.shape == (5,) and leaf.dtype == np.float32
  np.testing.assert_array_equal(sched.noise_multiplier, 0.5)
  np.testing.assert_array_equal(sched.client.record_clip_norm, 2.0)
  vec = constant_schedule(RoundHParams(1.0, np.array([0.1, 0.2, 0.3]), 0.5), 4)
  assert vec.noise_multiplier.shape == (4, 3)


# --- Truncation warning (stub client) -------------------------------------------------

def _zero_client(params, x, y, count, key, hp):
  del x, y, key, hp
  z, i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
  return (jax.tree_util.tree_map(jnp.zeros_like, params),
          ClientMetrics(z, count.astype(jnp.int32), i + 1, z, z, i, i))


def _population(n):
  return PopulationData(jnp.zeros((n, 2, 1)), jnp.zeros((n, 2), jnp.int32),
                        jnp.full((n,), 2, jnp.int32))


def test_truncation_warns():
  n = 12
  opt = optax.sgd(1.0)
  sampler = PoissonSampler.create(n, 0.5, k_max=1)
  round_fn = make_round(_zero_client, sampler, opt, RoundConfig(population_weight=float(n)))
  state = server.init_server_state({"w": jnp.zeros(3)}, opt)
  sched = constant_schedule(RoundHParams(1.0, 0.0, 0.5), 3)
  with pytest.warns(RuntimeWarning, match="k_max"):
    _, recs = run_rounds(round_fn, state, _population(n), sched, jax.random.key(0), rounds=3)
  assert all(r["num_clients"] == 1 for r in recs)
  assert sum(r["num_truncated"] for r in recs) > 0
  for r in recs:
    assert r["num_truncated"] == r["num_sampled"] - 1
  # No warning without truncation.
  full = make_round(_zero_client, PoissonSampler.create(n, 0.5, k_max=n), opt,
                    RoundConfig(population_weight=float(n)))
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)
    run_rounds(full, state, _population(n), sched, jax.random.key(0), rounds=3)


# --- Evaluator ------------------------------------------------------------------------

def test_evaluator_matches_numpy():
  rng = np.random.default_rng(0)
  model = create_model("linear", (4,), 3)
  params = {"Dense_0": {"kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
                        "bias": jnp.asarray(rng.normal(size=3), jnp.float32)}}
  evaluate = make_evaluator(model, batch_size=3)
  for n in (7, 3, 1):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=n)
    logits = x @ np.asarray(params["Dense_0"]["kernel"]) + np.asarray(params["Dense_0"]["bias"])
    lse = np.log(np.exp(logits).sum(1))
    out = evaluate(params, x, y)
    assert out["accuracy"] == pytest.approx(np.mean(logits.argmax(1) == y), abs=1e-6)
    assert out["loss"] == pytest.approx(np.mean(lse - logits[np.arange(n), y]), rel=1e-5)


def test_device_evaluation_inside_the_compiled_block(setup):
  """Evaluation after rounds 3, 6 and 7 (the last) happens inside one 7-round block;
  the values equal a host evaluation of the same states; a new evaluation schedule does
  not recompile."""
  fd, alg, data, model = setup["fd"], setup["alg"], setup["data"], setup["model"]
  dev = make_device_evaluator(model, fd.test_x, fd.test_y, batch_size=64)
  block = make_block_fn(alg.round_fn, dev)
  init = alg.init(jax.random.key(0))
  sched = constant_schedule(alg.hparams, 7)
  final, recs = run_rounds(alg.round_fn, init, data, sched, jax.random.key(0), rounds=7,
                           block_size=7, eval_every=3, device_evaluator=dev, block_fn=block)
  evaluated = [i + 1 for i, r in enumerate(recs) if "test_accuracy" in r]
  assert evaluated == [3, 6, 7]
  host = setup["evaluate"](final.params)
  np.testing.assert_allclose(recs[-1]["test_accuracy"], host["accuracy"], rtol=1e-6)
  np.testing.assert_allclose(recs[-1]["test_loss"], host["loss"], rtol=1e-5)
  # Rounds 1..3 through a host-evaluated run end in the same state as round 3 here.
  s3, _ = run_rounds(alg.round_fn, init, data, sched, jax.random.key(0), rounds=3,
                     block_size=3)
  np.testing.assert_allclose(recs[2]["test_accuracy"],
                             setup["evaluate"](s3.params)["accuracy"], rtol=1e-6)
  n = block._cache_size()
  _, recs2 = run_rounds(alg.round_fn, init, data, sched, jax.random.key(0), rounds=7,
                        block_size=7, eval_every=2, device_evaluator=dev, block_fn=block)
  assert [i + 1 for i, r in enumerate(recs2) if "test_accuracy" in r] == [2, 4, 6, 7]
  assert block._cache_size() == n == 1
  with pytest.raises(FedJaxDpError, match="at most one"):
    run_rounds(alg.round_fn, init, data, sched, jax.random.key(0), rounds=2,
               evaluate=setup["evaluate"], device_evaluator=dev)
  with pytest.raises(FedJaxDpError, match="test set"):
    make_device_evaluator(model, fd.test_x[:0], fd.test_y[:0])


# --- Several releases per round (stub round) ------------------------------------------

_RELEASES = {"inner": (0.1, 2), "outer": (0.05, 3)}  # name -> (q, steps)


def _scalar_metrics(z, round_, **kw):
  """A `RoundMetrics` of scalars (the per-round fields a round reports)."""
  f, i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
  return RoundMetrics(
      round=round_, train_loss=f, num_clients=i, num_sampled=i, num_truncated=i,
      clip_fraction=f, mean_update_norm=f, max_update_norm=f, nonfinite_updates=i,
      noise_multiplier=z, noise_stddev=2.0 * z, sampling_rate=jnp.float32(0.1),
      dp_steps=jnp.int32(5), example_clip_fraction=f, batch_truncated=i,
      aggregate_norm=f, server_noise_stddev=f, sensitivity=jnp.float32(2.0), **kw)


def _two_release_round(state, data, hp, key):
  """A round releasing an inner and an outer DP-SGD stage: the outer stage's noise
  multiplier is twice the inner's (its own event scale)."""
  del data, key
  z = jnp.asarray(hp.noise_multiplier, jnp.float32)
  releases = {}
  for k, (name, (q, steps)) in enumerate(_RELEASES.items()):
    zk = z * (k + 1)
    releases[name] = {"noise_multiplier": zk, "sampling_rate": jnp.float32(q),
                      "dp_steps": jnp.int32(steps), "noise_stddev": 2.0 * zk,
                      "sensitivity": jnp.float32(2.0)}
  extras = {"meta_loss": 3.0 * z, "support_batches": jnp.int32(7) + state.round}
  metrics = _scalar_metrics(z, state.round, releases=releases, extras=extras)
  return state._replace(round=state.round + 1), metrics


def test_run_rounds_accounts_for_every_release():
  opt = optax.sgd(1.0)
  state = server.init_server_state({"w": jnp.zeros(3)}, opt)
  zs = np.array([1.0, 1.2, 1.2, 1.5, 2.0], np.float32)
  sched = RoundHParams(np.ones(5, np.float32), zs, np.full(5, 0.5, np.float32),
                       constant_schedule(ClientHParams(), 5))
  ledger = MultiReleaseLedger(["inner", "outer"], 1e-5)
  _, recs = run_rounds(_two_release_round, state, _population(4), sched,
                       jax.random.key(0), rounds=5, block_size=2, ledger=ledger)
  assert ledger.num_rounds == 5
  for t, r in enumerate(recs):
    assert r["inner_noise_multiplier"] == float(zs[t])
    assert r["outer_noise_multiplier"] == float(np.float32(2) * zs[t])
    assert r["inner_sampling_rate"] == float(np.float32(0.1))
    assert r["outer_sampling_rate"] == float(np.float32(0.05))
    assert r["inner_dp_steps"] == 2 and r["outer_dp_steps"] == 3
    assert type(r["outer_dp_steps"]) is int
    assert r["outer_noise_stddev"] == pytest.approx(4 * zs[t], rel=1e-6)
    assert r["inner_sensitivity"] == 2.0
    assert r["meta_loss"] == pytest.approx(3 * zs[t], rel=1e-6)
    assert r["support_batches"] == 7 + t and type(r["support_batches"]) is int
    assert r["dp_steps"] == 5 and "releases" not in r and "extras" not in r
  # The record's epsilon: every release of every round so far, composed.
  g = lambda z, q: dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
  # The ledger accounts for the float32 values the round reported, exactly.
  events = [dp_accounting.SelfComposedDpEvent(
      g(float(np.float32(k + 1) * z), float(np.float32(q))), steps)
            for z in zs for k, (q, steps) in enumerate(_RELEASES.values())]
  ref = dp_rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE).compose(
          dp_accounting.ComposedDpEvent(events)).get_epsilon(1e-5)
  assert recs[-1]["epsilon"] == pytest.approx(ref, rel=1e-9)
  np.testing.assert_array_equal([r["epsilon"] for r in recs], ledger.epsilon_history())
  assert all(a < b for a, b in zip([r["epsilon"] for r in recs],
                                   [r["epsilon"] for r in recs][1:]))


def test_mixing_ledger_kinds_is_refused():
  opt = optax.sgd(1.0)
  state = server.init_server_state({"w": jnp.zeros(3)}, opt)
  sched = constant_schedule(RoundHParams(1.0, 1.0, 0.5), 2)
  with pytest.raises(FedJaxDpError, match="MultiReleaseLedger"):
    run_rounds(_two_release_round, state, _population(4), sched, jax.random.key(0),
               rounds=2, ledger=PrivacyLedger(1e-5))
  plain = make_round(_zero_client, PoissonSampler.create(4, 0.5), opt,
                     RoundConfig(population_weight=4.0))
  multi = MultiReleaseLedger(["inner", "outer"], 1e-5)
  with pytest.raises(FedJaxDpError, match="no RoundMetrics.releases"):
    run_rounds(plain, state, _population(4), sched, jax.random.key(0), rounds=2,
               ledger=multi)
  assert multi.num_rounds == 0
  # A ledger of other releases than the round's: the ledger names the mismatch.
  other = MultiReleaseLedger(["inner", "query"], 1e-5)
  with pytest.raises(FedJaxDpError, match=r"missing \['query'\]"):
    run_rounds(_two_release_round, state, _population(4), sched, jax.random.key(0),
               rounds=2, ledger=other)
  assert other.num_rounds == 0


def test_metrics_to_records_checks_releases_and_extras():
  z = np.float32([1.0, 2.0])

  def stacked(**kw):  # as after the driver's scan: every leaf [2]
    return jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (2,)),
                                  _scalar_metrics(z, np.arange(2), **kw))

  rel = {"noise_multiplier": z, "sampling_rate": z / 10, "dp_steps": np.int32([1, 1]),
         "noise_stddev": z, "sensitivity": np.float32([1.0, 1.0])}
  recs = metrics_to_records(stacked(releases={"a": rel}, extras={"x": z}))
  assert [r["a_noise_multiplier"] for r in recs] == [1.0, 2.0]
  assert [r["a_dp_steps"] for r in recs] == [1, 1]
  assert [r["x"] for r in recs] == [1.0, 2.0]
  # Without releases and extras: exactly the fields of before.
  assert set(metrics_to_records(stacked())[0]) == set(RoundMetrics._fields) - {
      "client_noise_multipliers", "releases", "extras"}
  bad = [({"a": {k: v for k, v in rel.items() if k != "sensitivity"}}, None,
          "exactly the keys"),
         ({"A": rel}, None, "lowercase identifier"),
         (None, {"train_loss": z}, "train_loss"),
         (None, {"epsilon": z}, "standard field"),  # the driver writes epsilon
         ({"a": rel}, {"a_noise_multiplier": z}, "a_noise_multiplier")]
  for releases, extras, match in bad:
    with pytest.raises(FedJaxDpError, match=match):
      metrics_to_records(stacked(releases=releases, extras=extras))


def test_check_schedule_takes_an_algorithms_own_bounds():
  """The engine bounds its own fields; an algorithm's plug-in bounds its own
  (`FederatedAlgorithm.schedule_bounds`), which may not redefine an engine field."""
  from fedjax_dp.federated import driver
  sched = {"clip_norm": np.ones(3), "inner_rate": np.array([0.1, 0.0, 0.2])}
  driver.check_schedule(sched)  # a field nobody bounds need only be finite
  with pytest.raises(FedJaxDpError, match=r"\['inner_rate'\] must be > 0 in every round; "
                     r"entry 1 is 0.0"):
    driver.check_schedule(sched, {"inner_rate": driver.POSITIVE})
  driver.check_schedule(sched, {"inner_rate": driver.NON_NEGATIVE})
  with pytest.raises(FedJaxDpError, match="'clip_norm' is the engine's"):
    driver.check_schedule(sched, {"clip_norm": driver.POSITIVE})
  with pytest.raises(FedJaxDpError, match="must be a ScheduleBound"):
    driver.check_schedule(sched, {"inner_rate": "> 0"})
  with pytest.raises(FedJaxDpError, match="must be a mapping"):
    driver.check_schedule(sched, [("inner_rate", driver.POSITIVE)])
  # A plain (allowed, ok, allow_inf) tuple is a bound too; +inf only where allowed.
  inf = {"inner_rate": np.array([np.inf])}
  driver.check_schedule(inf, {"inner_rate": ("> 0", lambda v: v > 0, True)})
  with pytest.raises(FedJaxDpError, match="entry 0 is inf"):
    driver.check_schedule(inf, {"inner_rate": driver.POSITIVE})


def test_run_rounds_checks_the_algorithms_bounds_before_compiling():
  from fedjax_dp.federated.driver import PROBABILITY
  sched = {"noise_multiplier": np.ones(2, np.float32),
           "inner_rate": np.array([0.5, 2.0], np.float32)}
  with pytest.raises(FedJaxDpError, match=r"\['inner_rate'\] must be in \(0, 1\]"):
    run_rounds(None, None, _population(4), sched, jax.random.key(0), rounds=2,
               schedule_bounds={"inner_rate": PROBABILITY})
