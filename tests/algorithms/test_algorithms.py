"""The shared test of every registered algorithm: it learns the shared test task, and what
its rounds report is what its ledger will compose. Each algorithm's configuration and its
own checks of the records come from its plug-in
(`fedjax_dp.algorithms.interface.FederatedAlgorithm.test_config`); this file names no
algorithm. Builder-specific tests live in tests/algorithms/<name>/."""

import jax
import jax.numpy as jnp
import pytest

from fedjax_dp.algorithms import registry
from fedjax_dp.algorithms.interface import SmokeConfig
from fedjax_dp.federated import PopulationData, constant_schedule, run_rounds
from fedjax_dp.federated.driver import make_evaluator
from fedjax_dp.models import create_model


@pytest.fixture(scope="module")
def env(synthetic_fd):
  fd = synthetic_fd
  model = create_model("linear", fd.feature_shape, fd.num_classes)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  evaluator = make_evaluator(model)
  return fd, model, data, lambda p: evaluator(p, fd.test_x, fd.test_y)


def _config(name, env) -> SmokeConfig:
  fd, model, _, _ = env
  cfg = registry.get(name).test_config(model, fd)
  assert isinstance(cfg, SmokeConfig), (
      f"no test configuration for the registered algorithm {name!r}: its plug-in must "
      "return a SmokeConfig from FederatedAlgorithm.test_config")
  return cfg


@pytest.mark.parametrize("name", registry.names())
def test_every_algorithm_has_a_test_configuration(name, env):
  cfg = _config(name, env)
  assert cfg.learns or cfg.why, f"{name}: a SmokeConfig with learns=False says why"


@pytest.mark.parametrize("name", sorted(registry.names()))
def test_algorithm_learns(name, env):
  fd, model, data, evaluate = env
  cfg = _config(name, env)
  if not cfg.learns:
    pytest.skip(cfg.why)
  alg = registry.get(name).function(model, fd, **cfg.kwargs)
  assert alg.name == name
  rounds = 12
  state0 = alg.init(jax.random.key(0))
  acc0 = evaluate(state0.params)["accuracy"]
  state, recs = run_rounds(alg.round_fn, state0, data, constant_schedule(alg.hparams, rounds),
                           jax.random.key(1), rounds=rounds, block_size=rounds,
                           evaluate=evaluate,
                           schedule_bounds=registry.get(name).schedule_bounds())
  acc = recs[-1]["test_accuracy"]
  chance = max(1.0 / fd.num_classes, fd.majority_class_accuracy())
  assert acc > chance + 0.15, (acc, chance, acc0)
  assert acc > acc0
  assert recs[-1]["train_loss"] < recs[0]["train_loss"]
  assert all(r["num_truncated"] == 0 for r in recs)
  # What the ledger will compose is what the round actually did (the algorithm's own
  # checks of its records).
  if cfg.check is not None:
    cfg.check(alg, recs, fd)
