"""Property-based bad-input tests over the public API: every invalid value gives a
`FedJaxDpError` naming the argument, before anything is compiled (issue 4, part 3)."""

import math

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, dp_fedavg_record_level, fedavg
from fedjax_dp.data import partition
from fedjax_dp.federated import make_pooled_population
from fedjax_dp.federated.client import DpSgdConfig, make_client_update
from fedjax_dp.federated.round import RoundConfig
from fedjax_dp.federated.sampling import FixedSizeSampler, PoissonSampler
from fedjax_dp.models import create_model
from fedjax_dp.privacy import accountants, calibration
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError

NON_FINITE = [math.nan, math.inf, -math.inf]
NOT_POSITIVE = st.sampled_from([0.0, -1.0, -1e-9, -1e30] + NON_FINITE)
NEGATIVE = st.sampled_from([-1.0, -1e-9, -1e30] + NON_FINITE)
NOT_PROBABILITY = st.sampled_from([0.0, -0.1, 1.0 + 1e-9, 2.0, 1e9] + NON_FINITE)
NOT_DELTA = st.sampled_from([0.0, 1.0, -1e-5, 1.5] + NON_FINITE)
NOT_COUNT = st.sampled_from([0, -1, -(10**9), 1.5, True])
SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def env(synthetic_fd):
  model = create_model("linear", synthetic_fd.feature_shape, synthetic_fd.num_classes)
  return synthetic_fd, model


_COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: _COMPILES.append(event)
    if "backend_compile" in event else None)


def _raises(fn, name):
  """``fn()`` must raise a FedJaxDpError whose message names ``name``, and nothing may be
  compiled by XLA before it does (JAX reports every backend compilation)."""
  before = len(_COMPILES)
  with pytest.raises(FedJaxDpError) as e:
    fn()
  assert name in str(e.value), f"{name!r} not in {e.value!r}"
  assert len(_COMPILES) == before, f"compiled before rejecting {name}: {_COMPILES[before:]}"


def test_compile_listener_sees_compilations():
  before = len(_COMPILES)
  jax.jit(lambda x: x * 3.0 + 1.0)(np.float32(2.0))
  assert len(_COMPILES) > before


@SETTINGS
@given(value=NOT_POSITIVE)
def test_dp_fedavg_clip_norm(env, value):
  fd, model = env
  _raises(lambda: dp_fedavg(model, fd, clip_norm=value, sampling_rate=0.5), "clip_norm")


@SETTINGS
@given(value=NEGATIVE)
def test_dp_fedavg_noise_multiplier(env, value):
  fd, model = env
  _raises(lambda: dp_fedavg(model, fd, noise_multiplier=value, sampling_rate=0.5),
          "noise_multiplier")


@SETTINGS
@given(value=NOT_PROBABILITY)
def test_dp_fedavg_sampling_rate(env, value):
  fd, model = env
  _raises(lambda: dp_fedavg(model, fd, sampling_rate=value), "sampling_rate")


@SETTINGS
@given(value=NOT_POSITIVE, which=st.sampled_from(["client_learning_rate",
                                                  "server_learning_rate"]))
def test_learning_rates(env, value, which):
  fd, model = env
  for alg in (dp_fedavg, fedavg):
    kw = {"sampling_rate": 0.5} if alg is dp_fedavg else {"clients_per_round": 4}
    _raises(lambda: alg(model, fd, **{which: value}, **kw), which)


@SETTINGS
@given(extra=st.integers(1, 10**6))
def test_cohort_larger_than_population(env, extra):
  fd, model = env
  _raises(lambda: dp_fedavg(model, fd, clients_per_round=fd.num_clients + extra),
          "clients_per_round")
  _raises(lambda: FixedSizeSampler.create(fd.num_clients, fd.num_clients + extra),
          "cohort_size")


@SETTINGS
@given(value=NOT_COUNT, which=st.sampled_from(["batch_size", "local_steps",
                                               "chunk_size"]))
def test_counts(env, value, which):
  fd, model = env
  kw = {which: value}
  if which == "local_steps":
    kw["local_epochs"] = None
  _raises(lambda: dp_fedavg(model, fd, sampling_rate=0.5, **kw), which)


@SETTINGS
@given(value=NOT_POSITIVE)
def test_record_level_clip_norm(env, value):
  fd, model = env
  _raises(lambda: dp_fedavg_record_level(model, fd, record_clip_norm=value,
                                         sampling_rate=0.5), "record_clip_norm")


@SETTINGS
@given(value=NOT_PROBABILITY)
def test_record_sampling_rate(value):
  _raises(lambda: DpSgdConfig.create(10, value, local_epochs=1), "record_sampling_rate")


@SETTINGS
@given(eps=NOT_POSITIVE, delta=st.sampled_from([1e-5]))
def test_calibration_epsilon(eps, delta):
  _raises(lambda: calibration.calibrate_noise_multiplier(eps, delta, 0.1, 10),
          "epsilon")


@SETTINGS
@given(delta=NOT_DELTA)
def test_accounting_delta(delta):
  _raises(lambda: accountants.compute_epsilon(1.0, 0.1, 10, delta), "delta")
  _raises(lambda: calibration.calibrate_noise_multiplier(1.0, delta, 0.1, 10), "delta")
  _raises(lambda: PrivacyLedger(delta=delta), "delta")


@SETTINGS
@given(z=NEGATIVE, q=st.sampled_from([0.1]))
def test_accounting_noise_multiplier(z, q):
  _raises(lambda: accountants.compute_epsilon(z, q, 10, 1e-5), "noise_multiplier")


@SETTINGS
@given(q=NOT_PROBABILITY)
def test_accounting_sampling_rate(q):
  _raises(lambda: accountants.compute_epsilon(1.0, q, 10, 1e-5), "sampling_rate")
  _raises(lambda: PoissonSampler.create(100, q), "sampling_rate")


@SETTINGS
@given(rounds=NOT_COUNT)
def test_accounting_rounds(rounds):
  _raises(lambda: accountants.compute_epsilon(1.0, 0.1, rounds, 1e-5), "rounds")


@SETTINGS
@given(value=NOT_POSITIVE)
def test_round_config_population_weight(value):
  _raises(lambda: RoundConfig(population_weight=value), "population_weight")


@SETTINGS
@given(name=st.text(min_size=1, max_size=12).filter(
    lambda s: s not in ("mlp", "cnn", "lenet5", "cnn_fc50", "har_cnn", "linear")))
def test_unknown_model(name):
  _raises(lambda: create_model(name, (4,), 3), "model")


@SETTINGS
@given(alpha=NOT_POSITIVE)
def test_dirichlet_alpha(alpha):
  labels = np.arange(100) % 5
  _raises(lambda: partition.dirichlet(labels, 4, alpha, 0), "alpha")


@SETTINGS
@given(num_clients=NOT_COUNT)
def test_partition_num_clients(num_clients):
  _raises(lambda: partition.iid(100, num_clients, 0), "num_clients")


def test_mismatched_and_empty_shapes():
  _raises(lambda: make_pooled_population(np.zeros((4, 2)), np.zeros(3), [1]), "pool_x")
  _raises(lambda: make_pooled_population(np.zeros((4, 2)), np.zeros(4), []), "counts")
  model = create_model("linear", (4,), 3)
  _raises(lambda: make_client_update(model, None, batch_size=0, max_examples=4,
                                     local_epochs=1), "batch_size")


# --- run_rounds: per-round schedules and populations are checked on the host ------

from fedjax_dp.federated import PopulationData, run_rounds  # noqa: E402
from fedjax_dp.federated.client import ClientHParams  # noqa: E402
from fedjax_dp.federated.round import RoundHParams  # noqa: E402


@pytest.fixture(scope="module")
def dp_env(env):
  fd, model = env
  alg = dp_fedavg(model, fd, clip_norm=1.0, noise_multiplier=0.5, sampling_rate=0.5)
  pop = PopulationData(np.asarray(fd.x), np.asarray(fd.y), np.asarray(fd.counts))
  return alg, pop, alg.init(jax.random.key(0))


def _schedule(alg, rounds, field, index, value):
  hp = alg.hparams
  full = lambda v: np.full(rounds, v, np.float32)
  arrays = {"clip_norm": full(hp.clip_norm), "noise_multiplier": full(hp.noise_multiplier),
            "sampling_rate": full(hp.sampling_rate),
            "server_learning_rate": full(hp.server_learning_rate),
            "learning_rate": full(hp.client.learning_rate)}
  arrays[field][index] = value
  client = hp.client._replace(learning_rate=arrays.pop("learning_rate"))
  return RoundHParams(client=client, **arrays)


BAD_ENTRIES = {"clip_norm": [0.0, -1.0, math.nan, -math.inf],
               "noise_multiplier": [-1e-3, math.nan, math.inf],
               "sampling_rate": [0.0, 1.5, math.nan, math.inf],
               "server_learning_rate": [0.0, -0.1, math.inf],
               "learning_rate": [0.0, -2.0, math.nan]}


@SETTINGS
@given(field=st.sampled_from(sorted(BAD_ENTRIES)), index=st.integers(0, 4),
       data=st.data())
def test_schedule_entries(dp_env, field, index, data):
  alg, pop, state = dp_env
  value = data.draw(st.sampled_from(BAD_ENTRIES[field]))
  sched = _schedule(alg, 5, field, index, value)
  _raises(lambda: run_rounds(alg.round_fn, state, pop, sched, jax.random.key(1), rounds=5),
          f"{field} must be")
  with pytest.raises(FedJaxDpError, match=f"entry {index} is"):
    run_rounds(alg.round_fn, state, pop, sched, jax.random.key(1), rounds=5)


def test_clip_norm_inf_means_no_clipping_and_is_allowed():
  from fedjax_dp.federated.driver import check_schedule
  check_schedule(RoundHParams(np.full(3, np.inf), np.zeros(3), np.full(3, 0.5),
                              ClientHParams(np.inf, 0.0, 1.0, np.full(3, 0.1))))


@pytest.mark.parametrize("change,needle", [
    (lambda p: p._replace(y=p.y[:, :-1]), "shapes disagree"),
    (lambda p: p._replace(counts=p.counts[:-1]), "shapes disagree"),
    (lambda p: p._replace(counts=p.counts.astype(np.float32)), "counts must be integers"),
    (lambda p: p._replace(counts=p.counts - 100), "counts must lie in"),
    (lambda p: p._replace(counts=p.counts + p.x.shape[1]), "counts must lie in"),
    (lambda p: p._replace(weights=-np.ones(p.num_clients)), "weights must be finite and >= 0"),
    (lambda p: p._replace(weights=np.full(p.num_clients, np.nan)), "weights must be finite"),
    (lambda p: p._replace(weights=np.ones(p.num_clients + 1)), "weights must have shape"),
    (lambda p: PopulationData(p.x[:0], p.y[:0], p.counts[:0]), "no clients"),
])
def test_population_checks(dp_env, change, needle):
  alg, pop, state = dp_env
  sched = _schedule(alg, 2, "clip_norm", 0, 1.0)
  _raises(lambda: run_rounds(alg.round_fn, state, change(pop), sched, jax.random.key(1),
                             rounds=2), needle)


def test_empty_clients_take_part_with_a_zero_update(dp_env):
  """Clients with no examples are legal (a zero update); with every client empty and no
  noise the server model does not move, and nothing is NaN."""
  alg, pop, state = dp_env
  empty = pop._replace(counts=np.zeros_like(pop.counts))
  sched = _schedule(alg, 3, "noise_multiplier", 0, 0.0)
  sched = sched._replace(noise_multiplier=np.zeros(3, np.float32),
                         sampling_rate=np.ones(3, np.float32))
  new, records = run_rounds(alg.round_fn, state, empty, sched, jax.random.key(2), rounds=3)
  for a, b in zip(jax.tree_util.tree_leaves(state.params),
                  jax.tree_util.tree_leaves(new.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert [r["num_sampled"] for r in records] == [pop.num_clients] * 3  # all took part
  assert all(r["max_update_norm"] == 0.0 and r["nonfinite_updates"] == 0 for r in records)


def test_empty_clients_take_every_noisy_local_dp_sgd_step(env):
  """Record level (issue 13, 1d): a client without examples still takes every DP-SGD
  step, each pure noise divided by the public batch size b (on the old code it took no
  step, so adding one record to it changed the upload from exactly 0 to noisy: an
  unbounded privacy loss); a direct (un-jitted) call with NumPy data works."""
  fd, _ = env
  model = create_model("mlp", fd.feature_shape, fd.num_classes, hidden=(64,))
  z, c, lr, b = 1.0, 1.0, 0.1, 4
  alg = dp_fedavg_record_level(model, fd, record_clip_norm=c, record_noise_multiplier=z,
                               record_sampling_rate=0.5, sampling_rate=1.0, local_steps=3,
                               batch_size=b, client_learning_rate=lr)
  state = alg.init(jax.random.key(0))
  empty = PopulationData(np.asarray(fd.x), np.asarray(fd.y), np.zeros_like(fd.counts))
  new, metrics = alg.round_fn(state, empty, alg.hparams, jax.random.key(1))
  change = np.concatenate([np.ravel(np.asarray(b_) - np.asarray(a))
                           for a, b_ in zip(jax.tree_util.tree_leaves(state.params),
                                            jax.tree_util.tree_leaves(new.params))])
  # Uniform mean of K clients' uploads, each lr * sum of 3 steps of N(0, (z c)^2) / b.
  k = int(metrics.num_clients)
  expected = lr * z * c * np.sqrt(3) / b / np.sqrt(k)
  assert k == fd.num_clients and change.size > 100
  assert abs(change.std() / expected - 1) < 6 / np.sqrt(2 * change.size)
  assert float(metrics.max_update_norm) > 0.0


# --- weight vectors -------------------------------------------------------------

from fedjax_dp.federated import aggregation  # noqa: E402
from fedjax_dp.validation import check_weights  # noqa: E402

WEIGHTS = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8)


@SETTINGS
@given(w=WEIGHTS, i=st.integers(0, 7), bad=st.sampled_from([-1e-9, -1.0, math.nan,
                                                            math.inf, -math.inf]))
def test_weights_negative_or_non_finite(w, i, bad):
  w = list(w)
  w[i % len(w)] = bad
  _raises(lambda: check_weights("impact_factors", w), "impact_factors")
  _raises(lambda: aggregation.custom_weights(w, len(w)), "weights")


@SETTINGS
@given(w=WEIGHTS.filter(lambda w: abs(sum(w) - 1.0) > 1e-3))
def test_weights_that_must_sum_to_one(w):
  _raises(lambda: check_weights("impact_factors", w, sum_to_one=True), "must sum to 1")
  total = sum(w)
  if total > 0:  # normalised, the same vector passes
    np.testing.assert_allclose(
        check_weights("impact_factors", np.asarray(w) / total, sum_to_one=True).sum(), 1.0)


@SETTINGS
@given(w=WEIGHTS, extra=st.integers(1, 3))
def test_weights_of_the_wrong_length_or_negative(w, extra):
  _raises(lambda: aggregation.custom_weights(w, len(w) + extra), "length")
  # Above 1 is accounted (the sensitivity scales with the largest weight), not refused.
  _raises(lambda: aggregation.custom_weights(np.asarray(w) - 1.5, len(w)), "non-negative")
  _raises(lambda: check_weights("w", np.ones((2, len(w)))), "1-D")
