"""Buffered-linear-Toeplitz (BLT) matrix factorisation for DP-FTRL: its noise generator
and its accounting under cyclic participation.

BLT (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, "Efficient and Near-Optimal Noise
Generation for Streaming Differential Privacy", FOCS 2024, arXiv 2404.16706; multiple
participations: McMahan, Xu, Zhang, "A Hassle-free Algorithm for Private Learning in
Practice: Don't Use Tree Aggregation, Use BLTs", EMNLP 2024 Industry, arXiv 2408.08868)
is the mechanism of Gboard's production DP-FTRL. The strategy C is an
infinite lower-triangular Toeplitz matrix with ``C[t, t] = 1`` and, for ``t > u``,

  ``C[t, u] = c_{t-u},  c_k = sum_{j < nbuf} omega_j theta_j^(k-1)``   (arXiv 2404.16706,
  Def. 3.1 / jax-privacy's ``BufferedToeplitz.toeplitz_coefs``)

for ``nbuf`` buffer decays ``theta`` (``buf_decay``) and output scales ``omega``
(``output_scale``). The mechanism releases ``C x + sigma z`` for the stacked round sums x;
the model sees ``x + sigma C^-1 z`` (the same ``A = B C`` convention as `BandedNoise`,
with A the prefix-sum workload that SGD on the noisy round sums computes). ``C^-1 z`` is
generated one row per round with nbuf buffers per parameter (arXiv 2408.08868, Alg. 3:
``w_t = z_t - sum_j omega_j buf_j``, then ``buf_j <- theta_j buf_j + w_t``), so the state
is O(nbuf d), against O(bands d) for banded MF and O(log2(T) d) for the tree.

Privacy (user level, add/remove one client; cyclic participation, a client's rounds
``R = cycle_length`` apart, at most ``k = ceil(t / R)`` of them in t rounds): the first t
releases are ``C_t x + sigma z`` with ``C_t = C[:t, :t]`` (lower triangular, adaptive
inputs allowed: Denisov et al., NeurIPS 2022, arXiv 2202.08312), one Gaussian mechanism
of squared sensitivity ``sens^2 = max_P ||C_t 1_P||^2`` over the participation patterns
P (entries of C >= 0, so aligned unit contributions are the worst case). For Toeplitz
coefficients that are non-negative and non-increasing the worst pattern under
min-separation R is ``0, R, 2R, ...`` (Kalinin, Lampert, arXiv 2405.13763, Thm. 2;
jax-privacy's ``toeplitz.minsep_sensitivity_squared``, which checks both properties):
that is group 0 of the cyclic schedule, so the min-sep value is exact for it.
``GaussianDpEvent(z / sqrt(sens^2))``. With ``group_rate < 1`` no amplification theorem
covers a BLT (the amplified banded MF theorem needs a b-banded C with R >= b; a BLT's C
has every band), so `blt_run_event` refuses it rather than claim an unamplified bound
as if it were the configured mechanism's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional, Tuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
from jax_privacy.matrix_factorization import buffered_toeplitz as jp_blt
from jax_privacy.matrix_factorization import toeplitz as jp_toeplitz

from fedjax_dp.algorithms.dp_ftrl.noise import standard_normal_like
from fedjax_dp.validation import FedJaxDpError, check_int, check_non_negative

__all__ = ["MAX_BUFFERS", "BltNoise", "optimized_blt", "blt_sensitivity_squared",
           "blt_sensitivity_history", "blt_run_event"]

#: Default of the most buffers `optimized_blt` tries (jax-privacy's default; 3 to 7 are
#: typical, more than 15 is refused by jax-privacy as numerically unstable).
MAX_BUFFERS = 10


@functools.lru_cache(maxsize=32)
def optimized_blt(rounds: int, cycle_length: int, max_buffers: int = MAX_BUFFERS
                  ) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
  """``(buf_decay, output_scale)`` (float64 tuples, buf_decay decreasing) of
  jax-privacy's ``buffered_toeplitz.optimize(n=rounds, min_sep=cycle_length,
  max_participations=None, error="max", max_buffers=max_buffers)``: the BLT minimising
  the max squared error of the prefix sums at its min-sep sensitivity for n rounds, the
  number of buffers grown from 0 while the loss improves by > 1% (arXiv 2408.08868,
  Sec. 4). Cached per arguments in the process: about 10 to 30 s each on a
  shared 2-core CPU (n = 10 .. 1000).

  Raises:
    FedJaxDpError: an argument out of range.
  """
  n = check_int("rounds", rounds, minimum=1)
  r = check_int("cycle_length", cycle_length, minimum=1)
  m = check_int("max_buffers", max_buffers, minimum=0, maximum=15)
  blt = jp_blt.optimize(n=n, min_sep=r, max_participations=None, max_buffers=m)
  return (tuple(float(v) for v in np.asarray(blt.buf_decay, np.float64)),
          tuple(float(v) for v in np.asarray(blt.output_scale, np.float64)))


@dataclasses.dataclass(frozen=True, eq=False)
class BltNoise:
  """BLT noise: round t's noise is ``stddev * (C^-1 z)_t`` (module docstring), for every
  t (C is infinite: no round limit; the accounting checks C's coefficients for the
  rounds it accounts).

  Attributes:
    buf_decay: theta, float64 tuple [nbuf], each in [0, 1] (decreasing).
    output_scale: omega, float64 tuple [nbuf].
    rounds: the n the BLT was optimised for (recorded; None for given parameters).
  """
  buf_decay: Tuple[float, ...]
  output_scale: Tuple[float, ...]
  rounds: Optional[int] = None

  def __post_init__(self):
    theta = np.asarray(self.buf_decay, np.float64).reshape(-1)
    omega = np.asarray(self.output_scale, np.float64).reshape(-1)
    if theta.shape != omega.shape:
      raise FedJaxDpError(f"buf_decay and output_scale must have the same length, got "
                          f"{theta.size} and {omega.size}.", option="output_scale")
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(omega))):
      raise FedJaxDpError("buf_decay and output_scale must be finite.", option="buf_decay")
    if np.any((theta < 0) | (theta > 1)):
      raise FedJaxDpError(f"buf_decay must lie in [0, 1] (decaying buffers), got "
                          f"{theta.tolist()}.", option="buf_decay")

  @classmethod
  def create(cls, rounds: int, cycle_length: int,
             max_buffers: int = MAX_BUFFERS) -> "BltNoise":
    """The BLT jax-privacy optimises for ``rounds`` rounds at min-separation
    ``cycle_length`` (`optimized_blt`).

    Raises:
      FedJaxDpError: an argument out of range.
    """
    theta, omega = optimized_blt(rounds, cycle_length, max_buffers)
    return cls(theta, omega, int(rounds))

  @property
  def buffers(self) -> int:
    """nbuf: the buffers per parameter of the streaming state."""
    return len(self.buf_decay)

  def coefs(self, n: int) -> np.ndarray:
    """float64 [n]: ``c_0 = 1, c_k = sum_j omega_j theta_j^(k-1)`` (k >= 1), the first
    column of C (arXiv 2404.16706, Def. 3.1).

    Raises:
      FedJaxDpError: ``n`` < 1.
    """
    n = check_int("n", n, minimum=1)
    theta = np.asarray(self.buf_decay, np.float64)
    omega = np.asarray(self.output_scale, np.float64)
    k = np.arange(n - 1, dtype=np.float64)
    tail = (theta[None, :] ** k[:, None]) @ omega if theta.size else np.zeros(n - 1)
    return np.concatenate([[1.0], tail])

  def matrix(self, n: int) -> np.ndarray:
    """float64 [n, n]: ``C[:n, :n]``, ``C[t, u] = c_{t-u}`` for t >= u, 0 above."""
    c = self.coefs(n)
    idx = np.arange(n)[:, None] - np.arange(n)[None, :]
    return np.where(idx >= 0, c[np.maximum(idx, 0)], 0.0)

  def _inverse(self):
    # float32 parameters: jax-privacy's streaming C^-1 (Alg. 3 of arXiv 2408.08868) then
    # keeps float32 buffers without jax_enable_x64 (its float64 BLTs require x64).
    # (numpy arrays: constants of the jitted round, never traced.)
    decay: Any = np.asarray(self.buf_decay, np.float32).reshape(-1)  # numpy: constants
    scale: Any = np.asarray(self.output_scale, np.float32).reshape(-1)
    blt = jp_blt.BufferedToeplitz(buf_decay=decay, output_scale=scale)
    return blt.inverse_as_streaming_matrix()

  def init(self, params) -> Any:
    """``{"buffers": float32 [nbuf, *leaf.shape] per leaf of params (zeros)}``."""
    like = jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
    inner = self._inverse().init_multiply(like)
    return {"buffers": jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), inner)}

  def sample(self, state, key, like, stddev):
    """Round noise ``stddev * (C^-1 z)_t`` (float32, ``like``'s structure) and the next
    state.

    Args:
      state: from `init` or a previous `sample`.
      key: the round's noise key (z_t = `standard_normal_like` of it).
      like: pytree whose structure and shapes the noise takes.
      stddev: float scalar >= 0 (may be traced).
    """
    z = standard_normal_like(key, like)
    corr, inner = self._inverse().multiply_next(z, state["buffers"])
    std = jnp.asarray(stddev, jnp.float32)
    noise = jax.tree_util.tree_map(lambda c: c.astype(jnp.float32) * std, corr)
    inner = jax.tree_util.tree_map(lambda new, old: jnp.asarray(new, old.dtype), inner,
                                   state["buffers"])
    return noise, {"buffers": inner}


@functools.lru_cache(maxsize=4096)
def _minsep_sens2(coefs: Tuple[float, ...], cycle_length: int) -> float:
  """jax-privacy's ``toeplitz.minsep_sensitivity_squared`` (checks on, float64)."""
  with jax.enable_x64():
    try:
      return float(jp_toeplitz.minsep_sensitivity_squared(
          jnp.asarray(coefs, jnp.float64), min_sep=cycle_length, max_participations=None,
          skip_checks=False))
    except ValueError as err:
      raise FedJaxDpError(
          f"the BLT's Toeplitz coefficients must be non-negative and non-increasing for "
          f"its min-separation sensitivity ({err}).", option="buf_decay") from err


def blt_sensitivity_squared(noise: BltNoise, cycle_length: int, rounds: int) -> float:
  """``max_P ||C_t 1_P||^2`` (units of S^2) for ``C_t = C[:t, :t]`` (t = ``rounds``) over
  the participation patterns with min-separation R = ``cycle_length`` (at most
  ``ceil(t / R)`` rounds): jax-privacy's ``toeplitz.minsep_sensitivity_squared``
  (Kalinin, Lampert, arXiv 2405.13763, Thm. 2: valid for non-negative, non-increasing
  coefficients, which it checks), exact for cyclic participation (module docstring).

  Raises:
    FedJaxDpError: invalid arguments, or coefficients that are negative or increase
      within the t rounds.
  """
  r = check_int("cycle_length", cycle_length, minimum=1)
  t = check_int("rounds", rounds, minimum=0)
  if t == 0:
    return 0.0
  return _minsep_sens2(tuple(noise.coefs(t).tolist()), r)


def blt_sensitivity_history(noise: BltNoise, cycle_length: int, rounds: int) -> np.ndarray:
  """float64 [rounds]: entry t - 1 is `blt_sensitivity_squared` of the first t rounds.

  Computed in O(rounds) from the worst pattern ``0, R, 2R, ...`` (module docstring):
  ``v_i = sum_{j <= i / R} c_{i - jR}`` (row i of C times that pattern; every
  participation before row t is within the t rounds), ``sens^2(t) = sum_{i < t} v_i^2``;
  the last entry is checked against jax-privacy's value (relative 1e-9).

  Raises:
    FedJaxDpError: as `blt_sensitivity_squared`.
  """
  r = check_int("cycle_length", cycle_length, minimum=1)
  t = check_int("rounds", rounds, minimum=0)
  if t == 0:
    return np.zeros(0, np.float64)
  c = noise.coefs(t)
  pad = (-t) % r
  v = np.concatenate([c, np.zeros(pad)]).reshape(-1, r).cumsum(axis=0).reshape(-1)[:t]
  hist = np.cumsum(v * v)
  final = blt_sensitivity_squared(noise, r, t)
  if not math.isclose(hist[-1], final, rel_tol=1e-9):
    raise AssertionError(f"BLT sensitivity history {hist[-1]} != jax-privacy's {final}")
  return hist


def blt_run_event(noise_multiplier: float, rounds: int, noise: BltNoise,
                  sampler: Any) -> dp_accounting.DpEvent:
  """The event of ``rounds`` rounds of ``noise`` under ``sampler`` (a `CyclicSampler`):
  ``GaussianDpEvent(z / sqrt(blt_sensitivity_squared(noise, R, rounds)))``.

  Observation model: only the noisy aggregates are seen (central noise, observation
  ``"aggregate"``); the groups are public; no amplification by sampling is claimed.

  Args:
    noise_multiplier: z >= 0 (std of the i.i.d. draws / S).
    rounds: rounds run, int >= 0 (0: ``NoOpDpEvent``).
    noise: the run's `BltNoise`.
    sampler: the run's `CyclicSampler` (``cycle_length``, ``group_rate``).

  Raises:
    FedJaxDpError: invalid arguments; ``sampler.group_rate < 1`` (no amplification
      theorem for a BLT: module docstring).
  """
  z = check_non_negative("noise_multiplier", noise_multiplier)
  if not isinstance(noise, BltNoise):
    raise FedJaxDpError(f"noise must be a BltNoise, got {type(noise).__name__}.",
                        option="noise")
  if sampler.group_rate < 1.0:
    raise FedJaxDpError(
        f"group_rate must be 1 for mechanism 'blt', got {sampler.group_rate:g}: no "
        "amplification-by-sampling theorem covers a BLT (amplified banded MF needs a "
        "b-banded C with cycle_length >= b; a BLT's C has every band). Use group_rate=1, "
        "or mechanism='banded' for amplification.", option="group_rate")
  t = check_int("rounds", rounds, minimum=0)
  if t == 0:
    return dp_accounting.NoOpDpEvent()
  return dp_accounting.GaussianDpEvent(
      z / math.sqrt(blt_sensitivity_squared(noise, sampler.cycle_length, t)))

