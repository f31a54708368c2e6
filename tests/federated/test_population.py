"""`PooledPopulation`: compact layout, exact gather, same rounds as the padded layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.data.federated_data import from_client_lists
from fedjax_dp.federated.driver import constant_schedule, run_rounds
from fedjax_dp.federated.population import (MAX_POOL, PopulationData, gather_clients,
                                            make_pooled_population)
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError


def _pool(m=97, n=40, dim=5, seed=0):
  rng = np.random.default_rng(seed)
  px = rng.normal(size=(m, dim)).astype(np.float32)
  py = (px[:, 0] > 0).astype(np.int32)
  counts = rng.integers(3, 9, n)
  return px, py, counts


def _expected_rows(ids, pop, m):
  j = np.arange(pop.max_examples)
  return (np.asarray(ids)[:, None] * pop.client_stride + j[None] * pop.example_stride) % m


def test_gather_matches_the_documented_row_formula():
  px, py, counts = _pool()
  pop = make_pooled_population(px, py, counts, max_examples=10)
  ids = jnp.asarray([0, 5, 39, 17, 17], jnp.int32)
  x, y, c = jax.jit(gather_clients)(pop, ids)
  rows = _expected_rows(ids, pop, len(py))
  np.testing.assert_array_equal(np.asarray(x), px[rows])
  np.testing.assert_array_equal(np.asarray(y), py[rows])
  np.testing.assert_array_equal(np.asarray(c), counts[np.asarray(ids)])
  # A client's examples are distinct pool rows (count <= M).
  assert all(len(set(r)) == len(r) for r in rows)


def test_gather_is_exact_for_ids_up_to_int32_max():
  """Row arithmetic stays exact in uint32 for huge populations and the largest pool."""
  m = MAX_POOL - 1
  rng = np.random.default_rng(1)
  px = rng.normal(size=(m, 1)).astype(np.float32)
  pop = make_pooled_population(px, np.arange(m) % 7, np.full(4, 3))
  big = np.array([10**9, 2**31 - 1, 123456789, 3], np.int64)
  expected = (big[:, None] % m * (pop.client_stride % m) +
              np.arange(3)[None] * pop.example_stride) % m
  x, _, _ = gather_clients(pop, jnp.asarray(big, jnp.int32))
  np.testing.assert_array_equal(np.asarray(x)[..., 0], px[expected, 0])


def test_pooled_round_equals_the_materialised_population():
  px, py, counts = _pool(m=211, n=30, dim=6)
  pop = make_pooled_population(px, py, counts)
  ids = jnp.arange(30, dtype=jnp.int32)
  x, y, c = gather_clients(pop, ids)
  mask = np.arange(pop.max_examples)[None] < counts[:, None]
  dense = PopulationData(jnp.where(mask[..., None], x, 0.0), jnp.where(mask, y, 0), c)
  fd = from_client_lists("pooled", [np.asarray(x)[i, :counts[i]] for i in range(30)],
                         [np.asarray(y)[i, :counts[i]] for i in range(30)], num_classes=2)
  model = create_model("mlp", (6,), 2, hidden=(8,))
  alg = dp_fedavg(model, fd, clip_norm=0.1, noise_multiplier=1.0, sampling_rate=0.3,
                  batch_size=3, chunk_size=4)
  outs = []
  for data in (pop, dense):
    outs.append(run_rounds(alg.round_fn, alg.init(jax.random.key(0)), data,
                           constant_schedule(alg.hparams, 2), jax.random.key(1), rounds=2,
                           block_size=2))
  (s1, r1), (s2, r2) = outs
  for a, b in zip(jax.tree_util.tree_leaves(s1.params), jax.tree_util.tree_leaves(s2.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  assert [r["num_clients"] for r in r1] == [r["num_clients"] for r in r2]
  np.testing.assert_allclose([r["train_loss"] for r in r1], [r["train_loss"] for r in r2],
                             rtol=1e-5)


def test_pooled_population_is_compact():
  px, py, _ = _pool(m=1000, dim=4)
  pop = make_pooled_population(px, py, np.full(1_000_000, 50, np.int32))
  nbytes = sum(np.asarray(l).nbytes for l in jax.tree_util.tree_leaves(pop))
  assert nbytes < 5 * 2**20  # 1e6 clients x 50 examples in under 5 MiB
  assert pop.num_clients == 10**6 and pop.max_examples == 50


@pytest.mark.parametrize("args,match", [
    ((np.zeros((0, 3)), np.zeros(0), [1]), "pool_x"),
    ((np.zeros((4, 3)), np.zeros(3), [1]), "pool_x"),
    ((np.zeros((4, 3)), np.zeros(4), []), "counts"),
    ((np.zeros((4, 3)), np.zeros(4), [0, 2]), "counts"),
    ((np.zeros((MAX_POOL + 1, 1)), np.zeros(MAX_POOL + 1), [1]), "at most"),
])
def test_pooled_population_rejects_bad_input(args, match):
  with pytest.raises(FedJaxDpError, match=match):
    make_pooled_population(*args)
  with pytest.raises(FedJaxDpError, match="counts"):
    make_pooled_population(np.zeros((4, 3)), np.zeros(4), [5], max_examples=4)
