"""The wireless uplink of LAPA (Sun et al., arXiv 2505.19823), Sec. II-B.

One base station (BS) with M antennas serves N single-antenna devices placed at random in
two regions ([D]: region I near the BS, region II far from it). Block
fading ([T]): the channels are drawn once per experiment and stay fixed.

* geometry and path loss, eq. (39) [R+]: PL_i = G_BS G_D (c / (4 pi f_c d_i))^alpha_PL;
* Rayleigh channels h_i = sqrt(PL_i) hbar_i, hbar_i ~ CN(0, I_M) ([D]);
* SNR after perfect SIC with an MRC receiver, eq. (6) ([R?]):
  gamma_i = p_i ||h_i||^2 / sigma_z^2;
* symbol error rate of BPSK / QPSK ([D]) and its inverse, so that an SER
  threshold maps to the SNR threshold gamma_th of eq. (22);
* the decoded channel noise in gradient units: gradients are sent as symbols
  x_i = g_i / kappa with kappa = C / sqrt(d) ([D]), so the decoded noise has std
  sigma_c,i = kappa / sqrt(gamma_i) per real coordinate ([R+]; real coordinates [D]);
* SER-threshold device selection, eq. (22) converted to an SER threshold ([T]).

Host-side set-up (`ChannelConfig`, `make_uplink`, `snr_for_ser`, `symbol_scale`) uses
numpy float64 and runs once per experiment. The functions used per round or on batches of
power vectors (`snr`, `symbol_error_rate`, `decoded_noise_std`, `add_channel_noise`,
`select_devices`) accept numpy and jax arrays alike and are jit-compatible on jax inputs;
they validate values only for numpy inputs (traced values cannot be inspected).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Optional, Tuple, Union, overload

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp_special
import numpy as np
import scipy.special as sp_special

from fedjax_dp.validation import (FedJaxDpError, check_choice, check_finite, check_int,
                                  check_positive)

__all__ = ["SPEED_OF_LIGHT", "MODULATIONS", "RngLike", "ChannelConfig", "db_to_linear",
           "dbm_to_watts", "watts_to_dbm", "device_positions", "distances_to_bs",
           "path_loss", "rayleigh_channels", "channel_gains", "Uplink", "make_uplink",
           "snr", "symbol_error_rate", "snr_for_ser", "symbol_scale",
           "decoded_noise_std", "add_channel_noise", "select_devices"]

SPEED_OF_LIGHT = 3e8  # m/s, as in eq. (39).
MODULATIONS = ("bpsk", "qpsk")
# The SER of an SNR-0 link (the largest SER each modulation can reach).
_MAX_SER = {"bpsk": 0.5, "qpsk": 0.75}

RngLike = Union[np.random.Generator, int, np.integer]


def _is_jax(*values: Any) -> bool:
  return any(isinstance(v, jax.Array) for v in values)


def _as_rng(seed: Any, name: str = "seed") -> np.random.Generator:
  if isinstance(seed, np.random.Generator):
    return seed
  if isinstance(seed, (numbers.Integral, np.integer)) and not isinstance(seed, bool):
    if seed < 0:
      raise FedJaxDpError(f"{name} must be >= 0, got {seed}.", option=name)
    return np.random.default_rng(int(seed))
  raise FedJaxDpError(
      f"{name} must be a non-negative int or a numpy.random.Generator, got {seed!r}.",
      option=name)


def _check_interval(name: str, value: Any) -> Tuple[float, float]:
  try:
    lo, hi = value
  except (TypeError, ValueError):
    raise FedJaxDpError(f"{name} must be a pair (low, high), got {value!r}.",
                        option=name) from None
  lo, hi = check_finite(name, lo), check_finite(name, hi)
  if lo > hi:
    raise FedJaxDpError(f"{name} must have low <= high, got {value!r}.", option=name)
  return lo, hi


@dataclasses.dataclass(frozen=True)
class ChannelConfig:
  """Geometry and radio parameters of the uplink (all [D]).

  Attributes:
    num_antennas: M, BS antennas (>= 1).
    bs_position: (x, y, z) of the BS in metres.
    regions: one ``((x_low, x_high), (y_low, y_high))`` rectangle (metres) per region;
      devices lie at height ``device_height``. Default: region I x in [-20, 0] (near),
      region II x in [100, 120] (far), both y in [-10, 10].
    devices_per_region: devices in each region (>= 0 each, >= 1 in total); default 7 + 8.
    device_height: z of every device in metres (default 0).
    bs_gain_dbi, device_gain_dbi: antenna gains G_BS, G_D of eq. (39) in dBi.
    carrier_hz: carrier frequency f_c of eq. (39) in Hz (> 0).
    pathloss_exponent: alpha_PL of eq. (39) (> 0).
    noise_dbm: environmental noise power sigma_z^2 in dBm.
    p_max_dbm: the device power limit P_max of eq. (5) in dBm.
    modulation: ``"bpsk"`` or ``"qpsk"``, for the SER mapping ([D]).

  Raises:
    FedJaxDpError: naming the field, for any invalid value.
  """

  num_antennas: int = 4
  bs_position: Tuple[float, float, float] = (-50.0, 0.0, 10.0)
  regions: Tuple[Tuple[Tuple[float, float], Tuple[float, float]], ...] = (
      ((-20.0, 0.0), (-10.0, 10.0)), ((100.0, 120.0), (-10.0, 10.0)))
  devices_per_region: Tuple[int, ...] = (7, 8)
  device_height: float = 0.0
  bs_gain_dbi: float = 5.0
  device_gain_dbi: float = 0.0
  carrier_hz: float = 915e6
  pathloss_exponent: float = 3.76
  noise_dbm: float = -110.0
  p_max_dbm: float = 20.0
  modulation: str = "bpsk"

  def __post_init__(self):
    def setf(k, v):
      object.__setattr__(self, k, v)

    setf("num_antennas", check_int("num_antennas", self.num_antennas, minimum=1))
    try:
      bs = tuple(self.bs_position)
    except TypeError:
      bs = ()
    if len(bs) != 3:
      raise FedJaxDpError(
          f"bs_position must be (x, y, z) in metres, got {self.bs_position!r}.",
          option="bs_position")
    setf("bs_position", tuple(check_finite("bs_position", v) for v in bs))
    try:
      regions = tuple(self.regions)
    except TypeError:
      raise FedJaxDpError(f"regions must be a tuple of ((x_low, x_high), (y_low, y_high)), "
                          f"got {self.regions!r}.", option="regions") from None
    if not regions:
      raise FedJaxDpError("regions must name at least one region.", option="regions")
    checked = []
    for r in regions:
      try:
        rx, ry = r
      except (TypeError, ValueError):
        raise FedJaxDpError(
            f"each region must be ((x_low, x_high), (y_low, y_high)), got {r!r}.",
            option="regions") from None
      checked.append((_check_interval("regions", rx), _check_interval("regions", ry)))
    setf("regions", tuple(checked))
    try:
      per = tuple(self.devices_per_region)
    except TypeError:
      per = None
    if per is None or len(per) != len(checked):
      raise FedJaxDpError(
          f"devices_per_region must give one count per region ({len(checked)}), got "
          f"{self.devices_per_region!r}.", option="devices_per_region")
    per = tuple(check_int("devices_per_region", n, minimum=0) for n in per)
    if sum(per) < 1:
      raise FedJaxDpError(f"devices_per_region must place at least one device, got {per}.",
                          option="devices_per_region")
    setf("devices_per_region", per)
    for name in ("device_height", "bs_gain_dbi", "device_gain_dbi", "noise_dbm",
                 "p_max_dbm"):
      setf(name, check_finite(name, getattr(self, name)))
    setf("carrier_hz", check_positive("carrier_hz", self.carrier_hz))
    setf("pathloss_exponent", check_positive("pathloss_exponent", self.pathloss_exponent))
    check_choice("modulation", self.modulation, MODULATIONS)

  @property
  def num_devices(self) -> int:
    """N, the total number of devices."""
    return int(sum(self.devices_per_region))

  @property
  def noise_w(self) -> float:
    """sigma_z^2 in watts."""
    return float(dbm_to_watts(self.noise_dbm))

  @property
  def p_max_w(self) -> float:
    """P_max in watts."""
    return float(dbm_to_watts(self.p_max_dbm))


@overload
def db_to_linear(db: float) -> float: ...
@overload
def db_to_linear(db: jax.Array) -> jax.Array: ...
@overload
def db_to_linear(db: Any) -> Union[float, np.ndarray, jax.Array]: ...
def db_to_linear(db):
  """10^(db / 10): a power ratio in dB to linear (numpy or jax; floats stay floats)."""
  if _is_jax(db):
    return jnp.power(10.0, db / 10.0)
  out = np.power(10.0, np.asarray(db, dtype=np.float64) / 10.0)
  return float(out) if out.ndim == 0 else out


@overload
def dbm_to_watts(dbm: float) -> float: ...
@overload
def dbm_to_watts(dbm: jax.Array) -> jax.Array: ...
@overload
def dbm_to_watts(dbm: Any) -> Union[float, np.ndarray, jax.Array]: ...
def dbm_to_watts(dbm):
  """A power in dBm to watts: 10^((dBm - 30) / 10) (numpy or jax)."""
  return db_to_linear(dbm - 30.0) if _is_jax(dbm) else db_to_linear(
      np.asarray(dbm, dtype=np.float64) - 30.0)


def watts_to_dbm(w):
  """A power in watts (> 0) to dBm: 10 log10(w) + 30 (numpy or jax; 0 W gives -inf)."""
  if _is_jax(w):
    return 10.0 * jnp.log10(w) + 30.0
  with np.errstate(divide="ignore"):
    out = 10.0 * np.log10(np.asarray(w, dtype=np.float64)) + 30.0
  return float(out) if out.ndim == 0 else out


def device_positions(config: ChannelConfig, seed: RngLike) -> np.ndarray:
  """Uniform random device positions in the configured regions ([D]).

  Args:
    config: the `ChannelConfig`.
    seed: a non-negative int or a ``np.random.Generator``.

  Returns:
    float64 ``[N, 3]`` (metres): ``devices_per_region[0]`` devices of region I first,
    then region II's, ...; z is ``config.device_height``.

  Raises:
    FedJaxDpError: on a bad seed.
  """
  rng = _as_rng(seed)
  parts = []
  for ((x0, x1), (y0, y1)), n in zip(config.regions, config.devices_per_region):
    xs = rng.uniform(x0, x1, size=n)
    ys = rng.uniform(y0, y1, size=n)
    parts.append(np.stack([xs, ys, np.full(n, config.device_height)], axis=1))
  return np.concatenate(parts, axis=0).astype(np.float64)


def distances_to_bs(positions: Any, config: ChannelConfig) -> np.ndarray:
  """Euclidean device-BS distances d_i in metres: float64 ``[N]`` from ``[N, 3]``."""
  pos = np.asarray(positions, dtype=np.float64)
  if pos.ndim != 2 or pos.shape[1] != 3:
    raise FedJaxDpError(f"positions must be [N, 3], got shape {pos.shape}.",
                        option="positions")
  return np.linalg.norm(pos - np.asarray(config.bs_position), axis=1)


def path_loss(distances_m: Any, config: ChannelConfig) -> np.ndarray:
  """Linear large-scale power gain, eq. (39) of LAPA ([R+]):

    PL_i = G_BS G_D (c / (4 pi f_c d_i))^alpha_PL,  c = 3e8 m/s,

  with G_BS, G_D converted from dBi. With the defaults (5 dBi, 0 dBi, 915 MHz, 3.76) it is
  -114.8 dB at 40 m and -137.4 dB at 160 m (our geometry).

  Args:
    distances_m: ``[N]`` distances in metres, finite and > 0.
    config: supplies the gains, f_c and alpha_PL.

  Returns:
    float64 ``[N]``.

  Raises:
    FedJaxDpError: if a distance is not finite and > 0.
  """
  d = np.asarray(distances_m, dtype=np.float64)
  if not np.all(np.isfinite(d)) or np.any(d <= 0):
    raise FedJaxDpError(f"distances_m must be finite and > 0, got {d!r}.",
                        option="distances_m")
  gain = db_to_linear(config.bs_gain_dbi + config.device_gain_dbi)
  return gain * (SPEED_OF_LIGHT / (4.0 * math.pi * config.carrier_hz * d)) ** (
      config.pathloss_exponent)


def rayleigh_channels(path_loss: Any, num_antennas: int, seed: RngLike) -> np.ndarray:
  """Block-fading Rayleigh channels h_i = sqrt(PL_i) hbar_i, hbar_i ~ CN(0, I_M)
  ([D]; drawn once, fixed for the whole run).

  Args:
    path_loss: float ``[N]`` linear path-loss gains (>= 0), e.g. from `path_loss`.
    num_antennas: M (>= 1).
    seed: a non-negative int or a ``np.random.Generator``.

  Returns:
    complex128 ``[N, M]``; each entry has variance E|h_im|^2 = PL_i.

  Raises:
    FedJaxDpError: on a negative / non-finite path loss, a bad M or seed.
  """
  pl = np.asarray(path_loss, dtype=np.float64)
  if pl.ndim != 1 or not np.all(np.isfinite(pl)) or np.any(pl < 0):
    raise FedJaxDpError(f"path_loss must be a 1-D array of finite values >= 0, got {pl!r}.",
                        option="path_loss")
  m = check_int("num_antennas", num_antennas, minimum=1)
  rng = _as_rng(seed)
  hbar = (rng.standard_normal((pl.size, m)) + 1j * rng.standard_normal((pl.size, m)))
  hbar /= math.sqrt(2.0)
  return (np.sqrt(pl)[:, None] * hbar).astype(np.complex128)


def channel_gains(h: Any) -> np.ndarray:
  """||h_i||^2, the MRC receive gain of each device (eq. 6 with v_i = h_i, [R?]).

  Args:
    h: complex ``[N, M]`` channels.

  Returns:
    float64 ``[N]``.
  """
  h = np.asarray(h)
  if h.ndim != 2:
    raise FedJaxDpError(f"h must be [N, M], got shape {h.shape}.", option="h")
  return np.sum(np.abs(h) ** 2, axis=1).astype(np.float64)


@dataclasses.dataclass(frozen=True, eq=False)
class Uplink:
  """One experiment's fixed uplink (block fading); compared and hashed by identity
  (it holds arrays).

  Attributes:
    positions: float64 ``[N, 3]`` device positions (m).
    distances: float64 ``[N]`` device-BS distances (m).
    path_loss: float64 ``[N]`` linear gains of eq. (39).
    channels: complex128 ``[N, M]``, h_i.
    gains: float64 ``[N]``, ||h_i||^2.
    config: the `ChannelConfig` it was drawn from.
  """

  positions: np.ndarray
  distances: np.ndarray
  path_loss: np.ndarray
  channels: np.ndarray
  gains: np.ndarray
  config: ChannelConfig

  @property
  def num_devices(self) -> int:
    return int(self.gains.shape[0])

  def snr(self, powers_w: Any):
    """gamma_i of eq. (6) at transmit powers ``powers_w`` (``[..., N]`` W); see `snr`."""
    return snr(powers_w, self.gains, self.config.noise_w)


def make_uplink(config: Optional[ChannelConfig] = None, seed: RngLike = 0) -> Uplink:
  """Draws the positions, then the Rayleigh channels, of one experiment.

  Both come from one generator seeded by ``seed`` (positions first, so
  ``make_uplink(c, s).positions == device_positions(c, s)``).

  Args:
    config: a `ChannelConfig` (default: our defaults).
    seed: a non-negative int or a ``np.random.Generator``.

  Returns:
    An `Uplink`.
  """
  config = ChannelConfig() if config is None else config
  if not isinstance(config, ChannelConfig):
    raise FedJaxDpError(f"config must be a ChannelConfig, got {type(config).__name__}.",
                        option="config")
  rng = _as_rng(seed)
  pos = device_positions(config, rng)
  dist = distances_to_bs(pos, config)
  pl = path_loss(dist, config)
  h = rayleigh_channels(pl, config.num_antennas, rng)
  return Uplink(positions=pos, distances=dist, path_loss=pl, channels=h,
                gains=channel_gains(h), config=config)


def snr(powers_w, gains, noise_w):
  """Post-SIC SNR with an MRC receiver, eq. (6) of LAPA ([R?]):

    gamma_i = p_i ||h_i||^2 / sigma_z^2.

  Args:
    powers_w: transmit powers in watts, ``[..., N]`` (leading axes: many power vectors at
      once, e.g. a DDPG batch or a grid) or a scalar (one power for every device).
    gains: ``[N]`` channel gains ||h_i||^2 (`channel_gains`).
    noise_w: sigma_z^2 in watts (> 0).

  Returns:
    ``[..., N]`` linear SNRs: numpy float64 for numpy inputs, a jax array if any input is
    one (jit-compatible).

  Raises:
    FedJaxDpError: if the last axis of ``powers_w`` does not match ``gains``; for numpy
      inputs also on negative powers / gains or a noise power that is not > 0.
  """
  if _is_jax(powers_w, gains, noise_w):
    p, g = jnp.asarray(powers_w), jnp.asarray(gains)
    _check_snr_shapes(p.shape, g.shape)
    return p * g / noise_w
  p = np.asarray(powers_w, dtype=np.float64)
  g = np.asarray(gains, dtype=np.float64)
  _check_snr_shapes(p.shape, g.shape)
  noise = check_positive("noise_w", noise_w)
  if np.any(~(p >= 0)):
    raise FedJaxDpError("powers_w must be >= 0 (and not NaN).", option="powers_w")
  if np.any(~(g >= 0)):
    raise FedJaxDpError("gains must be >= 0 (and not NaN).", option="gains")
  return p * g / noise


def _check_snr_shapes(p_shape, g_shape) -> None:
  if len(g_shape) != 1:
    raise FedJaxDpError(f"gains must be [N], got shape {g_shape}.", option="gains")
  if len(p_shape) and p_shape[-1] != g_shape[0]:
    raise FedJaxDpError(
        f"powers_w must be [..., N] with N = {g_shape[0]}, got shape {p_shape}.",
        option="powers_w")


def _check_snr_values(name: str, value: np.ndarray) -> None:
  if np.any(~(value >= 0)):
    raise FedJaxDpError(f"{name} must be >= 0 (inf allowed, NaN not), got {value!r}.",
                        option=name)


def symbol_error_rate(snr, modulation: str = "bpsk"):
  """Symbol error rate at linear SNR gamma over AWGN ([D]):

  * BPSK: Q(sqrt(2 gamma)) = 0.5 erfc(sqrt(gamma));
  * QPSK: 2 Q(sqrt(gamma)) - Q(sqrt(gamma))^2, Q(x) = 0.5 erfc(x / sqrt(2)).

  gamma = inf gives 0; gamma = 0 gives 0.5 (BPSK) / 0.75 (QPSK).

  Args:
    snr: linear SNR(s), any shape, >= 0 (numpy or jax; jax inputs are clamped at 0).
    modulation: ``"bpsk"`` or ``"qpsk"``.

  Returns:
    SER, same shape: numpy float64 or a jax array (jit-compatible,
    `jax.scipy.special.erfc`).

  Raises:
    FedJaxDpError: on an unknown modulation, or (numpy) a negative / NaN SNR.
  """
  check_choice("modulation", modulation, MODULATIONS)
  if _is_jax(snr):
    erfc, root = jsp_special.erfc, jnp.sqrt
    g = jnp.maximum(snr, 0.0)
  else:
    erfc, root = sp_special.erfc, np.sqrt
    g = np.asarray(snr, dtype=np.float64)
    _check_snr_values("snr", g)
  if modulation == "bpsk":
    return 0.5 * erfc(root(g))
  q = 0.5 * erfc(root(g / 2.0))
  return 2.0 * q - q * q


def snr_for_ser(ser: float, modulation: str = "bpsk") -> float:
  """The linear SNR threshold whose SER equals ``ser``: the inverse of
  `symbol_error_rate` (closed form with erfcinv), so that an SER threshold of the
  experiments maps to the gamma_th of eq. (22) ([T]).

  * BPSK: gamma = erfcinv(2 SER)^2;
  * QPSK: q = 1 - sqrt(1 - SER), gamma = 2 erfcinv(2 q)^2.

  Args:
    ser: in (0, 0.5] for BPSK, (0, 0.75] for QPSK.
    modulation: ``"bpsk"`` or ``"qpsk"``.

  Returns:
    gamma_th as a Python float (>= 0).

  Raises:
    FedJaxDpError: on an unknown modulation or an out-of-range ``ser``.
  """
  check_choice("modulation", modulation, MODULATIONS)
  s = check_finite("ser", ser)
  top = _MAX_SER[modulation]
  if not 0.0 < s <= top:
    raise FedJaxDpError(f"ser must be in (0, {top}] for {modulation}, got {ser!r}.",
                        option="ser")
  if modulation == "bpsk":
    return float(sp_special.erfcinv(2.0 * s) ** 2)
  q = 1.0 - math.sqrt(1.0 - s)
  return float(2.0 * sp_special.erfcinv(2.0 * q) ** 2)


def symbol_scale(clip_norm: float, dim: int) -> float:
  """kappa = C / sqrt(d): gradients are transmitted as symbols x_i = g_i / kappa, so a
  clipped gradient (norm <= C) has mean symbol power <= 1 ([D]).

  Args:
    clip_norm: C (> 0).
    dim: d, the number of real gradient coordinates (>= 1).

  Returns:
    kappa as a Python float.

  Raises:
    FedJaxDpError: on C <= 0 or d < 1.
  """
  c = check_positive("clip_norm", clip_norm)
  d = check_int("dim", dim, minimum=1)
  return c / math.sqrt(d)


def decoded_noise_std(snr, kappa):
  """Std of the decoded channel noise per real gradient coordinate, in gradient units:

    sigma_c,i = kappa / sqrt(gamma_i)

  ([R+]: per-symbol variance 1 / gamma_i; [D]: times kappa, per real
  coordinate). gamma = inf (ideal channel) gives 0, gamma = 0 gives inf.

  Args:
    snr: linear SNR(s) gamma_i, any shape, >= 0 (numpy or jax).
    kappa: the symbol scale (`symbol_scale`), >= 0.

  Returns:
    Same shape as ``snr``: numpy float64 or a jax array (jit-compatible).

  Raises:
    FedJaxDpError: (numpy inputs) on a negative / NaN SNR or kappa.
  """
  if _is_jax(snr, kappa):
    return kappa / jnp.sqrt(snr)
  g = np.asarray(snr, dtype=np.float64)
  _check_snr_values("snr", g)
  k = check_finite("kappa", kappa, ">= 0")
  if k < 0:
    raise FedJaxDpError(f"kappa must be >= 0, got {kappa!r}.", option="kappa")
  with np.errstate(divide="ignore"):
    return k / np.sqrt(g)


def add_channel_noise(key: jax.Array, received, std) -> jax.Array:
  """Adds the decoded channel noise: y_i = x_i + sigma_c,i * N(0, I_d)
  (Algorithm 1 line 12; eq. 4 after SIC/MRC decoding).

  Device i's noise uses ``jax.random.fold_in(key, i)``, so it does not depend on the other
  devices. Pure jnp, jit-compatible.

  Args:
    key: a PRNG key.
    received: float ``[N, d]`` transmitted (clipped, maybe DP-noised) gradients.
    std: float ``[N]`` per-device noise stds (`decoded_noise_std`); 0 adds nothing.

  Returns:
    ``[N, d]`` in the dtype of ``received``.

  Raises:
    FedJaxDpError: if ``received`` is not 2-D or ``std`` is not ``[N]``.
  """
  x = jnp.asarray(received)
  s = jnp.asarray(std)
  if x.ndim != 2:
    raise FedJaxDpError(f"received must be [N, d], got shape {x.shape}.", option="received")
  if s.shape != (x.shape[0],):
    raise FedJaxDpError(f"std must have shape ({x.shape[0]},), got {s.shape}.",
                        option="std")
  keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
  noise = jax.vmap(lambda k: jax.random.normal(k, (x.shape[1],), x.dtype))(keys)
  return x + s.astype(x.dtype)[:, None] * noise


def select_devices(ser, threshold: Optional[float]):
  """SER-threshold selection, eq. (22) in its SER form ([T]):
  S = {i : SER_i <= threshold}, equivalent to gamma_i >= gamma_th with
  gamma_th = `snr_for_ser`(threshold). A stricter (smaller) threshold never adds devices.

  Args:
    ser: ``[N]`` symbol error rates (numpy or jax).
    threshold: the SER threshold in [0, 1], or None for no selection (all devices).

  Returns:
    bool ``[N]`` (numpy for numpy ``ser``, jax for jax ``ser``).

  Raises:
    FedJaxDpError: on a threshold outside [0, 1] or NaN (when it is a host number).
  """
  xp = jnp if _is_jax(ser, threshold) else np
  s = xp.asarray(ser)
  if threshold is None:
    return xp.ones(s.shape, dtype=bool)
  if not _is_jax(threshold):
    t = check_finite("threshold", threshold, "in [0, 1]")
    if not 0.0 <= t <= 1.0:
      raise FedJaxDpError(f"threshold must be in [0, 1] or None, got {threshold!r}.",
                          option="threshold")
  return s <= threshold
