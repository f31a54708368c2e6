"""The public API of `fedjax_dp.federated` as the README's "API in ten lines" uses it:
``import *`` hygiene, 1-based round numbers everywhere, one source of truth for the
sampling rate, the short `ClientMetrics` constructor, the recommended ledger
constructor (`make_ledger`) and custom weights above 1."""

import builtins
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedjax_dp.federated as federated
from fedjax_dp.federated import (ClientMetrics, FixedSizeSampler, PoissonSampler,
                                 PopulationData, RoundConfig, RoundHParams,
                                 constant_schedule, init_server_state, make_ledger,
                                 make_round, run_rounds)
from fedjax_dp.federated.client import DpSgdConfig
from fedjax_dp.privacy.events import Truncation
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.per_client import PerClientLedger
from fedjax_dp.validation import FedJaxDpError

N = 8


# --- import * -----------------------------------------------------------------------

def test_star_import_holds_only_all_and_shadows_no_builtin():
  ns: dict = {}
  exec("from fedjax_dp.federated import *", ns)
  names = set(ns) - {"__builtins__"}
  assert names == set(federated.__all__)
  assert not names & set(dir(builtins)), names & set(dir(builtins))
  assert "round" not in ns and ns.get("round", builtins.round) is builtins.round
  assert not any(isinstance(v, types.ModuleType) for v in ns.values())
  # The submodule stays reachable as an attribute.
  assert isinstance(federated.round, types.ModuleType)
  assert federated.round.make_round is make_round
  for name in federated.__all__:
    assert getattr(federated, name) is ns[name]


# --- a tiny round with a custom client update (the short ClientMetrics) ---------------

def _custom_client(params, x, y, count, key, hp):
  """A custom client update: one fixed step, metrics by the short constructor."""
  del x, y, key, hp
  update = jax.tree_util.tree_map(lambda p: jnp.ones_like(p) * (count > 0), params)
  return update, ClientMetrics.create(loss=0.25, num_examples=count, num_steps=1,
                                      update_norm=optax.tree.norm(update))


def _population(n=N, weights=None):
  return PopulationData(jnp.zeros((n, 2, 1)), jnp.zeros((n, 2), jnp.int32),
                        jnp.full((n,), 2, jnp.int32), weights)


def _round(sampler=None, config=None):
  sampler = sampler or PoissonSampler.create(N, 0.5)
  opt = optax.sgd(1.0)
  config = config or RoundConfig(population_weight=float(N))
  return make_round(_custom_client, sampler, opt, config), init_server_state(
      {"w": jnp.zeros(3)}, opt)


def test_client_metrics_create_fills_the_dp_sgd_fields_with_typed_zeros():
  m = ClientMetrics.create(1.5, 3, 2, 0.5)
  assert [np.asarray(v).dtype for v in m] == [np.float32, np.int32, np.int32, np.float32,
                                               np.float32, np.int32, np.int32]
  assert all(np.shape(v) == () for v in m)
  assert (float(m.example_clip_fraction), int(m.batch_truncated), int(m.nonfinite_grads)) == (
      0.0, 0, 0)
  # A pytree under jit and vmap: [K] per field.
  batched = jax.jit(jax.vmap(lambda c: ClientMetrics.create(0.1 * c, c, 1, 0.0)))(
      jnp.arange(4))
  assert all(np.shape(v) == (4,) for v in batched)
  assert batched.num_examples.dtype == jnp.int32 and batched.loss.dtype == jnp.float32


def test_custom_update_with_the_short_metrics_runs_through_a_round():
  round_fn, state = _round()
  new, m = jax.jit(round_fn)(state, _population(), RoundHParams(1.0, 0.0),
                             jax.random.key(0))
  assert int(m.num_clients) > 0
  assert float(m.train_loss) == pytest.approx(0.25)
  assert float(m.example_clip_fraction) == 0.0 and int(m.batch_truncated) == 0
  assert int(new.round) == 1


# --- round numbers: 1-based everywhere -----------------------------------------------

def test_run_rounds_records_are_one_based_and_continue():
  round_fn, state = _round()
  sched = constant_schedule(RoundHParams(1.0, 1.0), 5)
  state, recs = run_rounds(round_fn, state, _population(), sched, jax.random.key(0),
                           rounds=3, block_size=2)
  assert [r["round"] for r in recs] == [1, 2, 3] and int(state.round) == 3
  _, more = run_rounds(round_fn, state, _population(), sched, jax.random.key(0), rounds=2)
  assert [r["round"] for r in more] == [4, 5]


def test_record_metrics_jsonl_and_tensorboard_step_carry_the_same_round(tmp_path):
  pytest.importorskip("tensorboard")
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  from fedjax_dp.runs import RunConfig, run
  out = str(tmp_path / "run")
  res = run(RunConfig.from_dict(dict(
      algorithm="dp_fedavg", dataset="synthetic", num_clients=20, model="linear",
      batch_size=8, rounds=3, eval_every=3, sampling_rate=0.5, clip_norm=1.0,
      noise_multiplier=1.0, logger="tensorboard", out=out)), progress=False)
  py = {r["round"]: r["train_loss"] for r in res.records}
  with open(os.path.join(out, "metrics.jsonl")) as f:
    jsonl = {r["round"]: r["train_loss"] for r in map(json.loads, f)}
  ea = EventAccumulator(os.path.join(out, "tensorboard"))
  ea.Reload()
  tb = {e.step: e.value for e in ea.Scalars("train/loss")}
  assert sorted(py) == sorted(jsonl) == sorted(tb) == [1, 2, 3]
  for t in py:
    assert jsonl[t] == pytest.approx(py[t], rel=1e-12)
    assert tb[t] == pytest.approx(py[t], rel=1e-6)


# --- the sampling rate: given once, to the sampler -----------------------------------

def test_sampling_rate_defaults_to_the_samplers():
  for sampler in (PoissonSampler.create(N, 0.25), FixedSizeSampler.create(N, 2)):
    round_fn, state = _round(sampler)
    _, recs = run_rounds(round_fn, state, _population(), constant_schedule(
        RoundHParams(1.0, 1.0), 2), jax.random.key(0), rounds=2)
    assert [r["sampling_rate"] for r in recs] == [pytest.approx(sampler.sampling_rate)] * 2
    # The same rate given explicitly is accepted.
    run_rounds(round_fn, state, _population(), constant_schedule(
        RoundHParams(1.0, 1.0, sampler.sampling_rate), 1), jax.random.key(0), rounds=1)


@pytest.mark.parametrize("sampler", [PoissonSampler.create(N, 0.25),
                                     FixedSizeSampler.create(N, 2)], ids=["poisson", "fixed"])
def test_a_sampling_rate_other_than_the_samplers_is_refused(sampler):
  round_fn, state = _round(sampler)
  sched = constant_schedule(RoundHParams(1.0, 1.0, 0.5), 2)
  with pytest.raises(ValueError, match=r"schedule.sampling_rate=0.5.*sampler's "
                                       r"sampling_rate=0.25") as err:
    run_rounds(round_fn, state, _population(), sched, jax.random.key(0), rounds=2)
  assert isinstance(err.value, FedJaxDpError) and err.value.option == "sampling_rate"
  # An eager call of the round refuses it too (under jit run_rounds checks).
  with pytest.raises(ValueError, match=r"RoundHParams.sampling_rate=0.5"):
    round_fn(state, _population(), RoundHParams(1.0, 1.0, 0.5), jax.random.key(0))


# --- one way to build a ledger -------------------------------------------------------

def test_make_ledger_reads_the_round():
  poisson = PoissonSampler.create(N, 0.5)
  led = make_ledger(poisson, RoundConfig(population_weight=float(N)), 1e-5)
  assert isinstance(led, PrivacyLedger)
  assert (led.sampler, led.neighboring_relation, led.observation) == (
      "poisson", "add_remove", "aggregate")
  assert led.truncation == Truncation(N, poisson.k_max, 1)
  fixed = FixedSizeSampler.create(N, 2)
  local = RoundConfig(noise="local", population_weight=float(N))
  led = make_ledger(fixed, local, 1e-5)
  assert (led.sampler, led.neighboring_relation, led.observation, led.truncation) == (
      "fixed_size", "replace_one", "attributable", None)
  assert isinstance(make_ledger(poisson, local, 1e-5, num_clients=N), PerClientLedger)
  record = RoundConfig(record_level=True, clip_updates=False, noise="none",
                       denominator="actual", dp_steps=2)
  with pytest.raises(FedJaxDpError, match="dp_sgd"):
    make_ledger(poisson, record, 1e-5)
  dp = DpSgdConfig.create(max_examples=2, record_sampling_rate=0.5, local_steps=2)
  led = make_ledger(poisson, record, 1e-5, dp_sgd=dp, max_examples=2)
  assert led.truncation == dp.truncation(2, poisson.k_max)
  with pytest.raises(FedJaxDpError, match="relation"):
    make_ledger(poisson, local, 1e-5, relation="add_remove")


def test_make_ledger_composes_what_the_round_reports():
  round_fn, state = _round()
  ledger = make_ledger(round_fn.sampler, round_fn.config, 1e-5)
  _, recs = run_rounds(round_fn, state, _population(), constant_schedule(
      RoundHParams(1.0, 1.5), 3), jax.random.key(0), rounds=3, ledger=ledger)
  np.testing.assert_allclose([r["epsilon"] for r in recs], ledger.epsilon_history())


# --- custom weights above 1: accepted and accounted ----------------------------------

def test_weights_above_one_scale_the_sensitivity():
  cfg = RoundConfig(weighting="custom", population_weight=float(N))
  round_fn, state = _round(PoissonSampler.create(N, 1.0), cfg)
  w = np.ones(N, np.float32)
  _, m1 = round_fn(state, _population(weights=w), RoundHParams(1.0, 2.0),
                   jax.random.key(0))
  _, m4 = round_fn(state, _population(weights=4.0 * w), RoundHParams(1.0, 2.0),
                   jax.random.key(0))
  assert float(m1.sensitivity) == pytest.approx(1.0)
  assert float(m4.sensitivity) == pytest.approx(4.0)  # C * max_k w_k
  assert float(m4.noise_multiplier) == pytest.approx(2.0 / 4.0)  # z / max_k w_k
  # A schedule of weights above 1 passes run_rounds' checks; negative ones do not.
  sched = constant_schedule(RoundHParams(1.0, 2.0, client_weights=2.0 * w), 1)
  run_rounds(round_fn, state, _population(), sched, jax.random.key(0), rounds=1)
  with pytest.raises(FedJaxDpError, match="client_weights.*>= 0"):
    run_rounds(round_fn, state, _population(), sched._replace(
        client_weights=-sched.client_weights), jax.random.key(0), rounds=1)
