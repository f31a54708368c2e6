"""One DP-SGD release: a Poisson draw of records, their clipped sum, Gaussian noise.

``noisy_clipped_sum`` is the gradient estimate of one DP-SGD step (Abadi et al., CCS
2016, Alg. 1, lines "take a random sample", "clip gradient", "add noise") for any
per-example vector: a loss gradient (local DP-SGD, `fedjax_dp.federated.client`) or a
second-order term (RDP-PFL's per-example meta-gradient). Every record in ``eligible``
is sampled independently with probability ``q`` (Poisson sampling, what
``PoissonSampledDpEvent`` assumes); the sampled rows are gathered into a static
``max_batch_size`` (a draw that overflows it is truncated: the caller's
`fedjax_dp.privacy.events.Truncation` adds that probability to delta) and processed in
micro-batches, only as many as the draw fills; each row's vector is clipped to L2 norm
C and the sum gets ``N(0, (z C)^2 I)``. Under add/remove of one record the clipped sum
has L2 sensitivity C, so the release is the Poisson-subsampled Gaussian mechanism with
noise multiplier z (`fedjax_dp.privacy.events.make_dp_event`). Dividing by a public
constant (the expected batch size) is the caller's post-processing.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from fedjax_dp.privacy import noise

PyTree = Any


class DrawStats(NamedTuple):
  """Diagnostics of one release (float32 / int32 scalars; computed from raw records,
  not covered by epsilon).

  Attributes:
    loss_sum: sum over the processed rows of the per-example ``aux`` (e.g. the loss).
    rows: rows processed (the draw, at most ``max_batch_size``).
    clipped: rows whose vector norm exceeded C.
    nonfinite: rows whose vector had NaN/Inf entries (zeroed before clipping).
    truncated: sampled rows dropped because the draw exceeded ``max_batch_size``.
  """
  loss_sum: jax.Array
  rows: jax.Array
  clipped: jax.Array
  nonfinite: jax.Array
  truncated: jax.Array


def poisson_draw(key, eligible, sampling_rate, max_batch_size: int):
  """Poisson sampling of the ``True`` rows of ``eligible`` (bool ``[n]``) with rate q.

  Returns:
    ``(idx int32 [max_batch_size], num int32, drawn int32)``: the first
    ``num = min(drawn, max_batch_size)`` entries of ``idx`` are the sampled rows in
    increasing order (the rest are 0, padding); ``drawn`` is the size of the draw.
  """
  n = eligible.shape[0]
  sel = eligible & (jax.random.uniform(key, (n,)) < sampling_rate)
  drawn = jnp.sum(sel, dtype=jnp.int32)
  (idx,) = jnp.nonzero(sel, size=max_batch_size, fill_value=0)
  return idx, jnp.minimum(drawn, max_batch_size), drawn


def clipped_sum_of_rows(clipped_sum_fn: Callable, params, x, y, idx, num, clip_norm,
                        micro_batch_size: Optional[int] = None):
  """``sum`` over rows ``idx[:num]`` of the clipped per-example vectors.

  Args:
    clipped_sum_fn: ``fn(params, xb, yb, weights, C) -> ClippedSum`` (e.g.
      ``functools.partial(per_example.clipped_grad_sum, model)``).
    params: passed to ``clipped_sum_fn``.
    x, y: the records ``[n, ...]`` / ``[n]``.
    idx: int32 ``[b]`` row indices (``b`` static), of which the first ``num`` are used.
    num: int32 scalar, rows to process.
    clip_norm: float32 C.
    micro_batch_size: process the rows in micro-batches of this many (a ``while`` loop:
      only ``ceil(num / m)`` passes), or None: one padded pass over all ``b`` rows.
      Changes the cost, not the result (up to float summation order).

  Returns:
    ``(total, (loss_sum, rows, clipped rows, non-finite rows))``.
  """
  b = idx.shape[0]

  def rows_sum(idx_m, mask):
    out = clipped_sum_fn(params, x[idx_m], y[idx_m], mask, clip_norm)
    return out.total, (jnp.sum(out.loss * mask), jnp.sum(mask),
                       jnp.sum((out.norms > clip_norm) * mask),
                       jnp.sum((~out.finite) * mask).astype(jnp.int32))

  if micro_batch_size is None or micro_batch_size >= b:
    return rows_sum(idx, (jnp.arange(b) < num).astype(jnp.float32))
  m = micro_batch_size
  n_micro = -(-b // m)
  idx = jnp.pad(idx, (0, n_micro * m - b))

  def body(carry):
    j, total, st = carry
    rows = j * m + jnp.arange(m)
    g, s_ = rows_sum(jax.lax.dynamic_slice(idx, (j * m,), (m,)),
                     (rows < num).astype(jnp.float32))
    return (j + 1, jax.tree_util.tree_map(jnp.add, total, g),
            tuple(a + c for a, c in zip(st, s_)))

  zero = (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()), jnp.zeros((), jnp.int32))
  init = (jnp.zeros((), jnp.int32), jax.tree_util.tree_map(jnp.zeros_like, params), zero)
  _, total, st = jax.lax.while_loop(lambda cr: cr[0] * m < num, body, init)
  return total, st


def noisy_clipped_sum(key, clipped_sum_fn: Callable, params, x, y, eligible,
                      sampling_rate, clip_norm, noise_multiplier, *, max_batch_size: int,
                      micro_batch_size: Optional[int] = None):
  """One DP-SGD release: ``sum_{i in B} clip_C(v_i) + N(0, (z C)^2 I)`` with B a Poisson
  draw of rate q from the ``eligible`` rows (module docstring).

  Args:
    key: PRNG key of this release (split into the draw's and the noise's keys).
    clipped_sum_fn: ``fn(params, xb, yb, weights, C) -> ClippedSum``
      (`fedjax_dp.privacy.per_example`): the per-example vectors' clipped sum; its
      ``total`` has the structure of the release (usually ``params``').
    params: pytree passed to ``clipped_sum_fn``.
    x: float32 ``[n, ...]`` records; y: int32 ``[n]`` labels.
    eligible: bool ``[n]``: the rows that may be sampled (a client's real records of
      this stage; padding rows are never sampled).
    sampling_rate: float32 q in (0, 1].
    clip_norm: float32 C >= 0 (the L2 sensitivity of the sum under add/remove).
    noise_multiplier: float32 z >= 0; the noise standard deviation is ``z C``.
    max_batch_size: static cap on the draw (rows beyond it are dropped and counted).
    micro_batch_size: see `clipped_sum_of_rows`.

  Returns:
    ``(noisy_sum, DrawStats)``; ``noisy_sum`` has the structure of
    ``clipped_sum_fn``'s ``total``, float32.
  """
  k_sel, k_noise = jax.random.split(key)
  idx, num, drawn = poisson_draw(k_sel, eligible, sampling_rate, max_batch_size)
  total, (loss_sum, rows, clipped, nonfinite) = clipped_sum_of_rows(
      clipped_sum_fn, params, x, y, idx, num, clip_norm, micro_batch_size)
  # z = 0 adds nothing, even with C = inf (no clipping: a non-private baseline).
  std = jnp.where(noise_multiplier > 0, noise_multiplier * clip_norm, 0.0)
  noisy = noise.add_gaussian_noise(k_noise, total, std)
  return noisy, DrawStats(loss_sum, rows, clipped, nonfinite,
                          jnp.maximum(drawn - max_batch_size, 0))
