"""Shared test setup: JAX on CPU and a small synthetic federated dataset."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fedjax_dp.data.federated_data import from_client_lists  # noqa: E402

jax.config.update("jax_platforms", "cpu")

from fedjax_dp import compilation_cache  # noqa: E402

# JAX's persistent compilation cache for the whole session, in the default folder
# (~/.cache/fedjax_dp/jax-<version>, shared with the CLI: a second run of the suite
# loads its programs instead of compiling them). FEDJAX_DP_COMPILATION_CACHE=0 turns it
# off; FEDJAX_DP_CACHE_DIR moves it. Each pytest-xdist worker imports this file and opens
# the same folder, which is safe (see fedjax_dp/compilation_cache.py).
compilation_cache.enable()


def make_synthetic_data(num_clients=24, dim=8, num_classes=3, min_examples=6,
                        max_examples=20, num_test=400, seed=0):
  """Linearly separable-ish clients: labels are argmax(x @ W) for one shared W."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(dim, num_classes))
  xs, ys = [], []
  for _ in range(num_clients):
    n = int(rng.integers(min_examples, max_examples + 1))
    x = rng.normal(size=(n, dim)).astype(np.float32)
    xs.append(x)
    ys.append((x @ w).argmax(1).astype(np.int32))
  tx = rng.normal(size=(num_test, dim)).astype(np.float32)
  ty = (tx @ w).argmax(1).astype(np.int32)
  return from_client_lists("synthetic", xs, ys, num_classes, test_x=tx, test_y=ty,
                           source="tests/conftest.py")


@pytest.fixture(scope="session")
def synthetic_fd():
  """A tiny `FederatedData`: 24 clients, 6..20 examples each, 8 features, 3 classes."""
  return make_synthetic_data()


@pytest.fixture(scope="session")
def make_fd():
  """Factory for other synthetic datasets: ``make_fd(num_clients=..., seed=...)``."""
  return make_synthetic_data


@pytest.fixture(scope="session")
def audit_report():
  """``audit_report(target_name, brk="none")``: the canary audit of a registered
  algorithm's target (`fedjax_dp.algorithms.audit_targets.target`) as ``fedjax-dp audit``
  and CI run it: 20,000 scored repetitions per world, 10,000 to fix the test, seed 0.
  Setups that differ only in their claim share one simulation for the whole session
  (`fedjax_dp.auditing.Setup.simulation_key`)."""
  from fedjax_dp import auditing
  from fedjax_dp.algorithms import audit_targets
  cache = {}

  def report(name, brk="none"):
    return auditing.run(audit_targets.target(name).build(brk), repetitions=20000,
                        calibration=10000, key=jax.random.key(0), cache=cache)
  return report
