"""The round engine with an algorithm's own stages (`fedjax_dp.federated.engine`,
`fedjax_dp.federated.stages`): per-client state gathered and scattered, an upload that
is any pytree clipped jointly, a server stage with its own state, metric defaults."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
from fedjax_dp.federated.client import ClientMetrics
from fedjax_dp.federated.engine import default_metrics, make_engine_round
from fedjax_dp.federated.round import RoundConfig, RoundHParams
from fedjax_dp.federated.sampling import PoissonSampler
from fedjax_dp.federated.server import init_server_state
from fedjax_dp.federated.stages import ClientStage, ServerStage, init_client_states
from fedjax_dp.validation import FedJaxDpError

N = 13


def _metrics(count):
  z = jnp.zeros(())
  return ClientMetrics(loss=z, num_examples=count, num_steps=jnp.int32(1),
                       update_norm=z, example_clip_fraction=z,
                       batch_truncated=jnp.int32(0), nonfinite_grads=jnp.int32(0))


def _counting_client(a, b):
  """Uploads {"a": a, "b": b} (norm 5 for 3, 4) and counts its own rounds."""
  def update(broadcast, x, y, count, key, hp, times):
    took = (count > 0).astype(jnp.float32)
    upload = {"a": jnp.full((2,), a, jnp.float32) * took / np.sqrt(2),
              "b": jnp.full((1,), b, jnp.float32) * took}
    return upload, times + (count > 0).astype(jnp.int32), _metrics(count)
  return ClientStage(update=update, init_state=lambda params: jnp.zeros((), jnp.int32))


def _summing_server():
  """Keeps the running sum of the aggregates in its state; the model is unused."""
  def apply(state, aggregate, hp):
    total = jax.tree_util.tree_map(jnp.add, state.opt_state, aggregate)
    return state._replace(opt_state=total, round=state.round + 1)
  return ServerStage(init=lambda params: {"a": jnp.zeros((2,)), "b": jnp.zeros((1,))},
                     apply=apply, broadcast=lambda state: state.params)


@pytest.fixture
def population():
  counts = np.arange(N) % 4 + 1
  counts[5] = 0  # a client without examples never counts a round
  return PopulationData(jnp.zeros((N, 4, 2)), jnp.zeros((N, 4), jnp.int32),
                        jnp.asarray(counts, jnp.int32))


def _run(population, rounds, clip, chunk_size=2):
  client, server = _counting_client(3.0, 4.0), _summing_server()
  config = RoundConfig(noise="none", clip_updates=True, denominator="actual",
                       chunk_size=chunk_size)
  round_fn = make_engine_round(client, PoissonSampler.create(N, 0.5), server, config)
  params = {"w": jnp.zeros(())}
  state = init_server_state(params, server, clients=init_client_states(client, params, N))
  return run_rounds(round_fn, state, population,
                    constant_schedule(RoundHParams(clip, 0.0, 0.5), rounds),
                    jax.random.key(0), rounds=rounds, block_size=rounds)


def test_client_state_counts_exactly_the_rounds_each_client_took_part(population):
  state, recs = _run(population, 6, clip=100.0)
  times = np.asarray(state.clients)
  assert times.shape == (N,) and times[5] == 0 and 0 < times.max() <= 6
  # With every client holding examples, each participation is counted exactly once
  # (num_clients counts the cohort) and padding slots (id 0) never write.
  full = population._replace(counts=jnp.asarray(np.arange(N) % 4 + 1, jnp.int32))
  state, recs = _run(full, 6, clip=100.0)
  assert int(np.asarray(state.clients).sum()) == sum(r["num_clients"] for r in recs)
  again, _ = _run(population, 6, clip=100.0, chunk_size=5)  # layout does not matter
  np.testing.assert_array_equal(np.asarray(again.clients), times)


def test_any_pytree_upload_is_clipped_jointly(population):
  state, recs = _run(population, 1, clip=1.0)
  # One upload is (3, 4) in norm 5 -> clipped to (0.6, 0.8): the mean over the
  # participants with examples (denominator "actual" counts every slot's weight).
  a = float(np.linalg.norm(np.asarray(state.opt_state["a"])))
  b = float(np.asarray(state.opt_state["b"])[0])
  assert b > 0 and a / b == pytest.approx(3.0 / 4.0, rel=1e-5)
  assert recs[0]["clip_fraction"] > 0 and recs[0]["max_update_norm"] == pytest.approx(5.0)


def test_default_metrics():
  m = default_metrics(jnp.int32(3), train_loss=jnp.float32(1.5))
  assert int(m.round) == 4 and float(m.train_loss) == 1.5  # 1-based: rounds done + 1
  assert float(m.sensitivity) == np.inf and int(m.dp_steps) == 0
  with pytest.raises(FedJaxDpError, match="unknown RoundMetrics fields"):
    default_metrics(jnp.int32(0), epsilon=1.0)
