"""The LAPA round (note 001, Algorithm 1): the noise-free step is FedSGD with the
aggregation weights, the noise added has the scale the round reports (the ledger composes
only its artificial part), the switch (eq. 23) turns artificial noise off for good (and
the guarantee with it), and the plug-in's checks. The privacy of the label release, the
channel noise and the filter: test_lapa_privacy.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.lapa import algorithm as A
from fedjax_dp.algorithms.lapa import allocators as al
from fedjax_dp.algorithms.lapa import plugin as P
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.federated import PopulationData
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

N, M, F, K = 4, 6, 5, 3          # devices, rows per device, features, classes


@pytest.fixture(scope="module")
def problem():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, M, F)).astype(np.float32)
  y = rng.integers(0, K, (N, M)).astype(np.int32)
  counts = np.array([6, 5, 6, 4])
  for i, c in enumerate(counts):
    x[i, c:], y[i, c:] = 0, 0
  fd = FederatedData(name="toy", x=x, y=y, counts=counts, num_classes=K,
                     test_x=x[0], test_y=y[0])
  pop = PopulationData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(counts))
  return fd, pop, create_model("linear", (F,), K)


def run_jitted_rounds(alg, pop, rounds, seed=1):
  """``rounds`` jitted rounds of ``alg`` on ``pop`` (one root key): ``(state, [metrics])``
  (also used by test_lapa_privacy.py)."""
  f = jax.jit(alg.round_fn)
  s = alg.init(jax.random.PRNGKey(0))
  out = []
  for _ in range(rounds):
    s, m = f(s, pop, alg.hparams, jax.random.PRNGKey(seed))
    out.append(m)
  return s, out


def test_noise_free_round_is_the_weighted_clipped_fedsgd_step(problem):
  fd, pop, model = problem
  acfg = al.AllocatorConfig("none", 1.0, 5)
  alg = A.lapa(model, fd, allocator=acfg, aggregator="fedavg", batch_size=M,
               learning_rate=0.5, clip_norm=0.3)
  assert alg.privacy is None                     # nothing is ever noised
  s0 = alg.init(jax.random.PRNGKey(0))
  s1, m = jax.jit(alg.round_fn)(s0, pop, alg.hparams, jax.random.PRNGKey(1))
  # by hand: every row of every device (B >= count), per-example clipping to C, the mean
  # over the fixed B, FedAvg weights n_i / sum n
  flat0, unravel = jax.flatten_util.ravel_pytree(s0.params)
  total = np.zeros_like(np.asarray(flat0))
  for i in range(N):
    g_sum = np.zeros_like(total)
    for j in range(int(fd.counts[i])):
      g = jax.grad(lambda p: model.per_example_loss(
          model.apply(p, fd.x[i, j][None]), fd.y[i, j][None])[0])(s0.params)
      g = np.asarray(jax.flatten_util.ravel_pytree(g)[0])
      g_sum += g * min(1.0, 0.3 / np.linalg.norm(g))
    total += fd.counts[i] / fd.counts.sum() * g_sum / M
  expected = np.asarray(flat0) - 0.5 * total
  got = np.asarray(jax.flatten_util.ravel_pytree(s1.params)[0])
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
  assert float(m.noise_stddev) == 0.0 and int(m.num_clients) == N


def test_noise_has_the_scale_the_round_reports(problem):
  """E||g~||^2 = ||signal||^2 + d sum_i rho_i^2 (sigma_i^2 + sigma_c,i^2): measured over
  many rounds with the signal negligible; half the noise would be a quarter of it. The
  noise multipliers the ledger composes are the artificial noise's alone."""
  fd, pop, model = problem
  rounds = 60
  acfg = al.AllocatorConfig("uniform", 2.0, rounds)
  ch = np.array([0.0, 0.05, 0.1, 0.2])
  alg = A.lapa(model, fd, allocator=acfg, aggregator="fedavg", batch_size=4,
               learning_rate=1e-9, clip_norm=0.01, delta=1e-5, channel_std=ch,
               switch=False)
  _, ms = run_jitted_rounds(alg, pop, rounds)
  sig = np.asarray(ms[0].extras["sigma_devices"], np.float64)
  c, ds = alg.config["gaussian_constant"], np.asarray(alg.config["paper_sensitivity"])
  np.testing.assert_allclose(sig, c * ds / (2.0 / rounds), rtol=1e-5)   # eqs. 18-19
  d = int(alg.config["num_params"])
  rho = np.asarray(alg.config["static_weights"])
  expected = d * np.sum(rho ** 2 * (sig ** 2 + ch ** 2))
  measured = np.mean([float(m.aggregate_norm) ** 2 for m in ms])
  assert measured == pytest.approx(expected, rel=0.15)
  sens = alg.config["sensitivity"]
  for m in ms:   # FedAvg: no label release; every round the artificial noise alone
    z = np.asarray(m.client_noise_multipliers, np.float64)
    np.testing.assert_allclose(z, sig / sens, rtol=1e-5)
    np.testing.assert_allclose(m.extras["device_noise_multiplier_channel_assumption"],
                               np.sqrt(sig ** 2 + ch ** 2) / sens, rtol=1e-5)
  assert sens == pytest.approx(2 * 0.01 / 4)      # 2C/B


def test_switch_turns_artificial_noise_off_for_good(problem):
  fd, pop, model = problem
  rounds = 6
  ch = np.full(N, 50.0)                       # channel noise above any artificial SD
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 30.0, rounds),
               channel_std=ch, batch_size=2, clip_norm=1.0, learning_rate=1e-3)
  _, ms = run_jitted_rounds(alg, pop, rounds)
  sw = [int(m.extras["switched"]) for m in ms]
  assert sw == [0, 1, 1, 1, 1, 1]            # decided after round 1: T_th = 2
  assert int(ms[-1].extras["switch_round"]) == 2
  assert float(np.max(ms[0].extras["sigma_devices"])) > 0
  for m in ms[1:]:
    assert float(np.max(m.extras["sigma_devices"])) == 0.0
    # channel noise alone: no DP noise, noise multiplier 0 (the paper's assumption
    # reported beside it)
    np.testing.assert_array_equal(np.asarray(m.client_noise_multipliers), 0.0)
    np.testing.assert_allclose(m.extras["device_noise_multiplier_channel_assumption"],
                               ch / alg.config["sensitivity"], rtol=1e-5)
  ledger = alg.privacy.make_ledger(1e-5)
  ledger.record_many(np.stack([np.asarray(m.client_noise_multipliers) for m in ms]))
  assert ledger.worst_epsilon() == np.inf       # the switch ends the guarantee
  # without the switch the artificial noise stays
  off = A.lapa(model, fd, allocator=al.AllocatorConfig("uniform", 30.0, rounds),
               channel_std=ch, batch_size=2, clip_norm=1.0, learning_rate=1e-3,
               switch=False)
  _, ms_off = run_jitted_rounds(off, pop, 3)
  assert all(float(np.max(m.extras["sigma_devices"])) > 0 for m in ms_off)


def test_unscheduled_devices_release_nothing(problem):
  fd, pop, model = problem
  sel = np.array([True, False, True, True])
  alg = A.lapa(model, fd, allocator=al.AllocatorConfig("lapa", 5.0, 4), selected=sel,
               channel_std=np.full(N, 0.01))
  _, ms = run_jitted_rounds(alg, pop, 4)
  for r, m in enumerate(ms):
    z = np.asarray(m.client_noise_multipliers)
    # round 1: every device's label histogram (device 1's alone); then only uploads
    assert np.isinf(z[1]) == (r > 0) and np.all(np.isfinite(z[sel]))
    assert float(np.asarray(m.extras["aggregation_weights"])[1]) == 0.0
    assert float(np.sum(m.extras["aggregation_weights"])) == pytest.approx(1.0, rel=1e-5)
  assert float(np.asarray(ms[-1].extras["epsilon_devices"])[1]) == 0.0


def test_builder_errors(problem):
  fd, _, model = problem
  acfg = al.AllocatorConfig("lapa", 5.0, 4)
  with pytest.raises(FedJaxDpError, match="selected"):
    A.lapa(model, fd, allocator=acfg, selected=np.zeros(N, bool))
  with pytest.raises(FedJaxDpError, match="channel_std"):
    A.lapa(model, fd, allocator=acfg, channel_std=np.full(N, np.inf))
  with pytest.raises(FedJaxDpError, match="aggregator"):
    A.lapa(model, fd, allocator=acfg, aggregator="median")
  with pytest.raises(FedJaxDpError, match="calibration_sensitivity"):
    A.lapa(model, fd, allocator=acfg, calibration_sensitivity="guess")
  with pytest.raises(FedJaxDpError, match="label_statistics"):
    A.lapa(model, fd, allocator=acfg, label_statistics="rounded")
  with pytest.raises(FedJaxDpError, match="label_noise_multiplier"):
    A.lapa(model, fd, allocator=acfg, label_noise_multiplier=0.0)
  for bad in ("lavish", -1.0, "0"):
    with pytest.raises(FedJaxDpError, match="filter_budget"):
      A.lapa(model, fd, allocator=acfg, filter_budget=bad)
  with pytest.raises(FedJaxDpError, match="label release"):  # below the histogram's rho
    A.lapa(model, fd, allocator=acfg, filter_budget=0.05, delta=1e-5)
  assert A.provable_sensitivity(1.0, 32, "per_example") == pytest.approx(2 / 32)
  assert A.provable_sensitivity(1.0, 32, "aggregate") == pytest.approx(2.0)


def test_parse_powers(tmp_path):
  np.testing.assert_allclose(P.parse_powers("max", 3, 0.1), [0.1] * 3)
  np.testing.assert_allclose(P.parse_powers("half", 2, 0.1), [0.05] * 2)
  np.testing.assert_allclose(P.parse_powers("0.01,0.02", 2, 0.1), [0.01, 0.02])
  f = tmp_path / "p.json"
  f.write_text('{"powers_w": [0.03, 0.04]}')
  np.testing.assert_allclose(P.parse_powers(str(f), 2, 0.1), [0.03, 0.04])
  for bad, what in (("0.2", "P_max"), ("0.01,0.02,0.03", "2 values"), ("loud", "powers"),
                    ("ddpg:/no/such/metrics.jsonl", "pilot")):
    with pytest.raises(FedJaxDpError, match=what):
      P.parse_powers(bad, 2, 0.1)
