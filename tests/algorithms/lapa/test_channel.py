"""Tests of the paper-001 uplink model (fedjax_dp.algorithms.lapa.channel)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from fedjax_dp.algorithms.lapa import channel as ch
from fedjax_dp.validation import FedJaxDpError


@pytest.fixture(scope="module")
def uplink():
  return ch.make_uplink(ch.ChannelConfig(), seed=3)


def test_config_defaults():
  c = ch.ChannelConfig()
  assert c.num_devices == 15
  assert c.num_antennas == 4
  assert c.devices_per_region == (7, 8)
  assert c.noise_w == pytest.approx(1e-14)
  assert c.p_max_w == pytest.approx(0.1)
  assert c.modulation == "bpsk"


@pytest.mark.parametrize("field,value", [
    ("num_antennas", 0), ("num_antennas", 2.5), ("bs_position", (0.0, 1.0)),
    ("bs_position", (0.0, float("nan"), 1.0)), ("regions", ()),
    ("regions", (((0.0, -1.0), (0.0, 1.0)),)), ("devices_per_region", (7,)),
    ("devices_per_region", (0, 0)), ("devices_per_region", (-1, 8)),
    ("carrier_hz", 0.0), ("pathloss_exponent", -1.0), ("noise_dbm", float("inf")),
    ("p_max_dbm", "20"), ("modulation", "qam16"),
])
def test_config_rejects_bad_values(field, value):
  with pytest.raises(FedJaxDpError) as err:
    ch.ChannelConfig(**{field: value})
  assert err.value.option == field


def test_unit_conversions():
  assert ch.dbm_to_watts(30.0) == pytest.approx(1.0)
  assert ch.dbm_to_watts(20.0) == pytest.approx(0.1)
  assert ch.db_to_linear(10.0) == pytest.approx(10.0)
  assert ch.watts_to_dbm(1e-3) == pytest.approx(0.0, abs=1e-12)
  x = np.array([-110.0, 0.0, 23.0])
  np.testing.assert_allclose(ch.watts_to_dbm(ch.dbm_to_watts(x)), x)
  np.testing.assert_allclose(np.asarray(ch.dbm_to_watts(jnp.asarray(x))), ch.dbm_to_watts(x),
                             rtol=1e-5)


def test_path_loss_matches_note_numbers():
  c = ch.ChannelConfig()
  pl_db = 10 * np.log10(ch.path_loss(np.array([40.0, 160.0]), c))
  np.testing.assert_allclose(pl_db, [-114.8, -137.4], atol=0.05)
  # Exponent: doubling the distance costs 10 * 3.76 * log10(2) dB.
  ratio = ch.path_loss(np.array([80.0]), c) / ch.path_loss(np.array([40.0]), c)
  assert ratio[0] == pytest.approx(2.0 ** -3.76)
  with pytest.raises(FedJaxDpError, match="distances_m"):
    ch.path_loss(np.array([10.0, 0.0]), c)


def test_device_positions_in_regions():
  c = ch.ChannelConfig()
  pos = ch.device_positions(c, 5)
  assert pos.shape == (15, 3) and pos.dtype == np.float64
  near, far = pos[:7], pos[7:]
  assert np.all((near[:, 0] >= -20) & (near[:, 0] <= 0))
  assert np.all((far[:, 0] >= 100) & (far[:, 0] <= 120))
  assert np.all(np.abs(pos[:, 1]) <= 10) and np.all(pos[:, 2] == 0)
  np.testing.assert_array_equal(pos, ch.device_positions(c, 5))
  assert not np.allclose(pos, ch.device_positions(c, 6))


def test_rayleigh_channel_statistics():
  pl = np.full(4000, 2e-12)
  h = ch.rayleigh_channels(pl, 4, seed=0)
  assert h.shape == (4000, 4) and h.dtype == np.complex128
  # E|h_im|^2 = PL, real and imaginary parts each half of it; ||h||^2 ~ PL * Gamma(M, 1).
  assert np.mean(np.abs(h) ** 2) == pytest.approx(2e-12, rel=0.03)
  assert np.var(h.real) == pytest.approx(1e-12, rel=0.05)
  g = ch.channel_gains(h)
  assert np.mean(g) == pytest.approx(4 * 2e-12, rel=0.03)
  assert np.var(g) == pytest.approx(4 * (2e-12) ** 2, rel=0.1)


def test_make_uplink_is_consistent(uplink):
  c = uplink.config
  np.testing.assert_array_equal(uplink.positions, ch.device_positions(c, 3))
  np.testing.assert_allclose(
      uplink.distances, np.linalg.norm(uplink.positions - np.array(c.bs_position), axis=1))
  np.testing.assert_allclose(uplink.path_loss, ch.path_loss(uplink.distances, c))
  np.testing.assert_allclose(uplink.gains, np.sum(np.abs(uplink.channels) ** 2, axis=1))
  assert uplink.path_loss[:7].min() > uplink.path_loss[7:].max()  # near > far region
  again = ch.make_uplink(c, seed=3)
  np.testing.assert_array_equal(again.channels, uplink.channels)


def test_snr_numpy_jax_and_broadcast(uplink):
  p = np.random.default_rng(0).uniform(0, 0.1, size=(5, 3, 15))
  want = p * uplink.gains / uplink.config.noise_w
  got = ch.snr(p, uplink.gains, uplink.config.noise_w)
  assert got.shape == (5, 3, 15)
  np.testing.assert_allclose(got, want)
  np.testing.assert_allclose(uplink.snr(p), want)
  jitted = jax.jit(lambda q: ch.snr(q, jnp.asarray(uplink.gains * 1e14), 1.0))
  np.testing.assert_allclose(np.asarray(jitted(jnp.asarray(p))), want, rtol=1e-5)
  np.testing.assert_allclose(ch.snr(0.1, uplink.gains, 1e-14), 0.1 * uplink.gains / 1e-14)
  with pytest.raises(FedJaxDpError, match="powers_w"):
    ch.snr(np.ones(4), uplink.gains, 1e-14)
  with pytest.raises(FedJaxDpError, match="powers_w"):
    ch.snr(-np.ones(15), uplink.gains, 1e-14)


def test_note_snr_calibration(uplink):
  # Note Sec. 3: at 20 dBm near devices have SNR ~ 20 dB, far ones ~ 0 dB.
  snr_db = 10 * np.log10(uplink.snr(np.full(15, uplink.config.p_max_w)))
  assert 10 < np.median(snr_db[:7]) < 30
  assert -8 < np.median(snr_db[7:]) < 5


def test_ser_formulas_and_jax_agree():
  g = np.array([0.0, 0.5, 1.0, 4.0, 20.0, np.inf])
  bpsk = ch.symbol_error_rate(g, "bpsk")
  np.testing.assert_allclose(bpsk, norm.sf(np.sqrt(2 * g)), rtol=1e-12)
  q = norm.sf(np.sqrt(g))
  np.testing.assert_allclose(ch.symbol_error_rate(g, "qpsk"), 2 * q - q * q, rtol=1e-12)
  assert bpsk[0] == 0.5 and bpsk[-1] == 0.0
  assert ch.symbol_error_rate(0.0, "qpsk") == pytest.approx(0.75)
  assert np.all(np.diff(bpsk) < 0)
  for mod in ("bpsk", "qpsk"):
    f = jax.jit(lambda x, m=mod: ch.symbol_error_rate(x, m))
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(g[:-1], jnp.float32))),
                               ch.symbol_error_rate(g[:-1], mod), rtol=1e-5)
  with pytest.raises(FedJaxDpError, match="snr"):
    ch.symbol_error_rate(np.array([-1.0]))
  with pytest.raises(FedJaxDpError, match="modulation"):
    ch.symbol_error_rate(1.0, "8psk")


@pytest.mark.parametrize("mod", ["bpsk", "qpsk"])
def test_ser_matches_monte_carlo(mod):
  # Es / N0 = gamma; unit-energy symbols, complex AWGN of variance 1 / gamma.
  gamma, n = 2.0, 400_000
  rng = np.random.default_rng(1)
  noise = (rng.standard_normal(n) + 1j * rng.standard_normal(n)) * np.sqrt(0.5 / gamma)
  if mod == "bpsk":
    errors = np.mean((1.0 + noise).real < 0)
  else:
    y = (1 + 1j) / np.sqrt(2) + noise
    errors = np.mean((y.real < 0) | (y.imag < 0))
  assert errors == pytest.approx(ch.symbol_error_rate(gamma, mod), rel=0.03)


@pytest.mark.parametrize("mod", ["bpsk", "qpsk"])
def test_snr_for_ser_inverts(mod):
  for s in (0.3, 1e-1, 1e-3, 1e-6, 1e-12):
    gamma = ch.snr_for_ser(s, mod)
    assert isinstance(gamma, float)
    assert ch.symbol_error_rate(gamma, mod) == pytest.approx(s, rel=1e-8)
  assert ch.snr_for_ser(0.5 if mod == "bpsk" else 0.75, mod) == pytest.approx(0.0, abs=1e-12)
  for bad in (0.0, 0.8, float("nan")):
    with pytest.raises(FedJaxDpError, match="ser"):
      ch.snr_for_ser(bad, mod)


def test_symbol_scale_and_decoded_noise_std():
  kappa = ch.symbol_scale(2.0, 10_000)
  assert kappa == pytest.approx(0.02)
  std = ch.decoded_noise_std(np.array([4.0, 100.0, np.inf, 0.0]), 2.0)
  np.testing.assert_allclose(std, [1.0, 0.2, 0.0, np.inf])
  jstd = jax.jit(ch.decoded_noise_std)(jnp.array([4.0, 100.0, jnp.inf]), 2.0)
  np.testing.assert_allclose(np.asarray(jstd), [1.0, 0.2, 0.0], rtol=1e-6)
  with pytest.raises(FedJaxDpError, match="clip_norm"):
    ch.symbol_scale(0.0, 10)
  with pytest.raises(FedJaxDpError, match="dim"):
    ch.symbol_scale(1.0, 0)
  with pytest.raises(FedJaxDpError, match="kappa"):
    ch.decoded_noise_std(np.array([1.0]), -1.0)


def test_add_channel_noise():
  key = jax.random.PRNGKey(0)
  x = jnp.ones((3, 20_000), jnp.float32)
  std = jnp.array([0.0, 0.5, 2.0])
  y = jax.jit(ch.add_channel_noise)(key, x, std)
  assert y.shape == x.shape and y.dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(y[0]), np.ones(20_000))
  emp = np.std(np.asarray(y - x), axis=1)
  np.testing.assert_allclose(emp[1:], [0.5, 2.0], rtol=0.03)
  # Per-device keys: device 1's noise does not depend on the other devices.
  y2 = ch.add_channel_noise(key, x[:2], jnp.array([1.0, 0.5]))
  np.testing.assert_allclose(np.asarray(y2[1]), np.asarray(y[1]), atol=1e-6)
  # Devices get independent noise.
  a, b = np.asarray(y[1] - 1) / 0.5, np.asarray(y[2] - 1) / 2.0
  assert abs(np.corrcoef(a, b)[0, 1]) < 0.05
  with pytest.raises(FedJaxDpError, match="std"):
    ch.add_channel_noise(key, x, jnp.ones(2))


def test_select_devices(uplink):
  ser = ch.symbol_error_rate(uplink.snr(np.full(15, uplink.config.p_max_w)))
  assert ch.select_devices(ser, None).all()
  previous = np.ones(15, bool)
  for th in (0.5, 0.15, 0.1, 0.05, 1e-3, 1e-9, 0.0):  # stricter and stricter
    sel = ch.select_devices(ser, th)
    assert sel.dtype == np.bool_
    np.testing.assert_array_equal(sel, ser <= th)
    assert not np.any(sel & ~previous)  # never adds a device
    previous = sel
  # Same set as the SNR form of eq. (22).
  gamma = uplink.snr(np.full(15, uplink.config.p_max_w))
  np.testing.assert_array_equal(ch.select_devices(ser, 0.1), gamma >= ch.snr_for_ser(0.1))
  assert ch.select_devices(ser, 0.1).sum() < 15  # the default geometry splits devices
  jsel = jax.jit(lambda s: ch.select_devices(s, 0.1))(jnp.asarray(ser))
  np.testing.assert_array_equal(np.asarray(jsel), ser <= 0.1)
  with pytest.raises(FedJaxDpError, match="threshold"):
    ch.select_devices(ser, 1.5)
