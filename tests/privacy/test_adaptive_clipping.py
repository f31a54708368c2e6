"""Adaptive clipping's primitives (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021,
arXiv:1905.03871): the split of the combined noise multiplier (Sec. 3.1), the clip-norm
updates (Sec. 2) and the quantile they track."""

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.dp_fedavg import COUNT_NOISE_FLOOR, default_count_stddev
from fedjax_dp.privacy import adaptive_clipping as ac
from fedjax_dp.validation import FedJaxDpError

DELTA = 1e-5


@pytest.mark.parametrize("z,z_b", [(0.5, 3.0), (1.0, 10.0), (2.0, 6.0), (3.7, 3.8)])
def test_split_is_the_combined_gaussian(z, z_b):
  """The sum at z_Delta and the count at z_b, composed, have the epsilon of one Gaussian
  at the combined z (RDP: alpha / 2z^2 adds up; PLD: two independent Gaussians are one)."""
  z_delta = ac.check_noise_split(z, z_b)
  # float32 on the device: cancellation in z^-2 - z_b^-2 when z is near z_b.
  assert float(ac.update_noise_multiplier(z, z_b)) == pytest.approx(z_delta, rel=1e-4)
  assert z_delta > z
  assert (z_delta ** -2 + z_b ** -2) ** -0.5 == pytest.approx(z, rel=1e-12)
  pair = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z_delta),
                                        dp_accounting.GaussianDpEvent(z_b)])
  one = dp_accounting.GaussianDpEvent(z)
  for rounds in (1, 25):
    eps_pair = dp_rdp.RdpAccountant().compose(pair, rounds).get_epsilon(DELTA)
    eps_one = dp_rdp.RdpAccountant().compose(one, rounds).get_epsilon(DELTA)
    assert eps_pair == pytest.approx(eps_one, rel=1e-9)
  eps_pair = dp_pld.PLDAccountant(value_discretization_interval=1e-4).compose(
      pair, 5).get_epsilon(DELTA)
  eps_one = dp_pld.PLDAccountant(value_discretization_interval=1e-4).compose(
      one, 5).get_epsilon(DELTA)
  assert eps_pair == pytest.approx(eps_one, rel=2e-3)


def test_split_edge_cases():
  assert ac.check_noise_split(0.0, 1.0) == 0.0  # no noise: nothing to split
  assert float(ac.update_noise_multiplier(0.0, 1.0)) == 0.0
  assert np.isnan(float(ac.update_noise_multiplier(2.0, 2.0)))  # z >= z_b: impossible
  with pytest.raises(FedJaxDpError, match="must be below") as e:
    ac.check_noise_split(2.0, 1.5, option="noise_multiplier")
  assert e.value.option == "noise_multiplier"
  assert ac.count_sensitivity("add_remove") == 0.5
  assert ac.count_sensitivity("replace_one") == 1.0
  with pytest.raises(FedJaxDpError, match="relation"):
    ac.count_sensitivity("zero_out")


def test_next_clip_norm_formulas():
  geo = ac.AdaptiveClipping(target_quantile=0.3, learning_rate=0.2, initial_clip_norm=0.1)
  lin = ac.AdaptiveClipping(target_quantile=0.3, learning_rate=0.2, initial_clip_norm=0.1,
                            update_rule="linear")
  for c, b in ((1.0, 0.8), (0.5, 0.0), (2.0, 0.3), (0.7, 1.4)):
    assert float(ac.next_clip_norm(c, b, geo)) == pytest.approx(
        c * np.exp(-0.2 * (b - 0.3)), rel=1e-6)
    assert float(ac.next_clip_norm(c, b, lin)) == pytest.approx(
        max(c - 0.2 * (b - 0.3), 1e-7), rel=1e-6)
  # Linear updates are floored at 1e-6 C_0: the clip norm stays positive.
  assert float(ac.next_clip_norm(0.01, 1.0, lin)) == pytest.approx(1e-7, rel=1e-5)


def test_noisy_fraction_is_centred_count_over_m():
  cfg = ac.AdaptiveClipping(count_stddev=0.0, expected_cohort_size=8.0)
  key = jax.random.key(0)
  # 6 of 10 participants unclipped, m = 8: (6 - 5) / 8 + 1/2.
  assert float(ac.noisy_unclipped_fraction(key, 6.0, 10.0, cfg)) == pytest.approx(0.625)
  noisy = ac.AdaptiveClipping(count_stddev=2.0, expected_cohort_size=8.0)
  draws = jax.vmap(lambda k: ac.noisy_unclipped_fraction(k, 6.0, 10.0, noisy))(
      jax.random.split(key, 4000))
  assert float(jnp.std(draws)) == pytest.approx(2.0 / 8.0, rel=0.05)
  assert float(jnp.mean(draws)) == pytest.approx(0.625, abs=0.02)


@pytest.mark.parametrize("gamma", [0.2, 0.5, 0.9])
@pytest.mark.parametrize("rule", ["geometric", "linear"])
def test_clip_norm_converges_to_the_quantile_without_noise(gamma, rule):
  """200 rounds of 200 lognormal(0, 0.5) update norms each, no count noise: the clip
  norm settles at the gamma-quantile exp(0.5 Phi^-1(gamma)) of the norm distribution."""
  m, sigma = 200, 0.5
  cfg = ac.AdaptiveClipping(target_quantile=gamma, learning_rate=0.2, initial_clip_norm=0.1,
                            count_stddev=0.0, expected_cohort_size=float(m),
                            update_rule=rule)

  def step(c, key):
    norms = jnp.exp(sigma * jax.random.normal(key, (m,)))
    unclipped = jnp.sum(norms <= c)
    b = ac.noisy_unclipped_fraction(key, unclipped, float(m), cfg)
    return ac.next_clip_norm(c, b, cfg), c

  _, path = jax.lax.scan(step, jnp.float32(0.1), jax.random.split(jax.random.key(1), 200))
  from scipy import stats
  target = np.exp(sigma * stats.norm.ppf(gamma))
  assert float(jnp.mean(path[-50:])) == pytest.approx(target, rel=0.05)
  assert float(path[0]) == pytest.approx(0.1)


@pytest.mark.parametrize("kw,option", [
    (dict(target_quantile=1.0), "target_quantile"),
    (dict(target_quantile=0.0), "target_quantile"),
    (dict(learning_rate=0.0), "clip_learning_rate"),
    (dict(initial_clip_norm=-1.0), "initial_clip_norm"),
    (dict(count_stddev=-0.1), "clipped_count_stddev"),
    (dict(expected_cohort_size=0.0), "expected_cohort_size"),
    (dict(update_rule="cubic"), "clip_update_rule"),
])
def test_config_errors_name_the_option(kw, option):
  with pytest.raises(FedJaxDpError) as e:
    ac.AdaptiveClipping(**kw)
  assert e.value.option == option


def test_default_count_stddev():
  """The paper's m / 20, raised to 3 z Delta_b for small cohorts (the split then
  always exists, with z_Delta = z / sqrt(1 - 1/9))."""
  assert default_count_stddev(200.0, 1.0, "add_remove") == pytest.approx(10.0)
  assert default_count_stddev(15.0, 2.0, "add_remove") == pytest.approx(3.0)
  assert default_count_stddev(15.0, 1.0, "replace_one") == pytest.approx(3.0)
  for m, z, rel in ((15.0, 2.0, "add_remove"), (4.0, 5.0, "replace_one")):
    z_b = default_count_stddev(m, z, rel) / ac.count_sensitivity(rel)
    assert z_b >= COUNT_NOISE_FLOOR * z
    assert ac.check_noise_split(z, z_b) <= z / np.sqrt(1 - 1 / 9) + 1e-9
