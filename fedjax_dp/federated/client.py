"""Local training on one client: a pure function, `jax.vmap`ped over the cohort.

`make_client_update` returns ``client_update(params, x, y, count, key, hparams)`` which
runs ``num_steps`` optimiser steps of any optax optimiser with ``lax.scan`` over a
client's padded data (``x [max_examples, ...]``, ``y [max_examples]``, ``count`` real
examples) and returns the model delta (``w_final - w_start``; or the final weights) and
`ClientMetrics`.

Batching (static shapes):

* ``local_epochs=E``: each epoch walks a fresh random permutation of the client's
  real examples in minibatches of ``batch_size``; a client with ``n`` examples takes
  ``ceil(n / b)`` steps per epoch, the last minibatch partial and masked; steps past a
  client's own count are no-ops (params and optimiser state unchanged). All clients
  share the static step count ``E * ceil(max_examples / b)``.
* ``local_steps=tau``: exactly ``tau`` steps for every client, cycling through one
  random permutation of its examples (FedAvg with a fixed number of local steps); a
  batch never holds an example twice (``b > n`` gives full-batch steps).
* Record-level DP (``dp_sgd=DpSgdConfig(...)``): DP-SGD (Abadi et al., CCS 2016,
  Alg. 1) locally: each step Poisson-samples each real example with probability
  ``hparams.record_sampling_rate`` (``q_r``), clips each per-example gradient to
  ``hparams.record_clip_norm`` (C_r), adds ``N(0, (z_r C_r)^2 I)`` to the sum and divides
  by ``hparams.record_denominator``, a *public* constant (the expected batch size b).
  Dividing by the client's own ``q_r n_k`` would not be post-processing under
  add/remove of one record (n_k is the client's data). Every step is taken, by empty
  clients too (their step is pure noise): skipping it would reveal that the client
  has no record. Sampled batches are padded to the static ``max_batch_size``; the
  probability that a draw overflows it is added to delta by the ledger
  (`fedjax_dp.privacy.events.Truncation`). The clipped sum comes from
  `fedjax_dp.privacy.per_example.clipped_grad_sum`: ghost norms and book-keeping
  (no per-example gradients materialised) whenever the model allows, vmap(grad)
  otherwise (``per_example_method``).
* Per-example gradient clipping without noise (``hparams.grad_clip_norm``): each step
  averages the minibatch's per-example gradients, each clipped to G, which bounds how
  far one example can move the local model
  (`fedjax_dp.privacy.sensitivity.clipped_gd_sensitivity`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from scipy import stats

from fedjax_dp.privacy import clipping, per_example
from fedjax_dp.privacy import dp_sgd as dp_sgd_lib
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_probability)

PyTree = Any


class ClientMetrics(NamedTuple):
  """Per-client metrics, the second output of a client update: each field a scalar
  for one client (``[K]`` after the round's ``vmap`` over the cohort). A pytree (a
  NamedTuple of arrays), so it passes through ``jit``, ``vmap`` and ``lax.scan``.

  A custom client update builds it with `ClientMetrics.create`, which needs the four
  fields every update has and fills the three DP-SGD-only ones with zeros.

  Attributes:
    loss: float32 scalar, mean training loss over the examples processed in local
      steps (the model's loss units, e.g. nats for cross-entropy); the round averages
      it over participants into ``RoundMetrics.train_loss``.
    num_examples: int32 scalar, the client's number of real examples.
    num_steps: int32 scalar, local steps actually taken (not no-ops).
    update_norm: float32 scalar, global L2 norm of the delta before any server-side
      clipping (parameter units).
    example_clip_fraction: float32 scalar in [0, 1], record-level DP (local DP-SGD)
      only: fraction of sampled examples whose gradient norm exceeded C_r (0
      otherwise); averaged into ``RoundMetrics.example_clip_fraction``.
    batch_truncated: int32 scalar, record-level DP only: examples dropped because a
      Poisson batch exceeded ``max_batch_size`` (0 otherwise); summed into
      ``RoundMetrics.batch_truncated``.
    nonfinite_grads: int32 scalar, gradients that were NaN/Inf and zeroed: per example
      under DP-SGD; per step only with ``skip_nonfinite_steps=True`` (otherwise 0: a
      non-finite step makes the whole update non-finite, and the round zeroes that
      client's update and counts it in ``RoundMetrics.nonfinite_updates``).
  """
  loss: jax.Array
  num_examples: jax.Array
  num_steps: jax.Array
  update_norm: jax.Array
  example_clip_fraction: jax.Array
  batch_truncated: jax.Array
  nonfinite_grads: jax.Array

  @classmethod
  def create(cls, loss: Any, num_examples: Any, num_steps: Any, update_norm: Any, *,
             example_clip_fraction: Any = 0.0,
             batch_truncated: Any = 0, nonfinite_grads: Any = 0) -> "ClientMetrics":
    """The metrics of one client, each field cast to its documented dtype (jit- and
    vmap-safe: use it inside a custom client update).

    Args:
      loss: float scalar, the mean local training loss (cast to float32).
      num_examples: int scalar, the client's real examples (cast to int32).
      num_steps: int scalar, local steps taken (cast to int32).
      update_norm: float scalar, the global L2 norm of the client's update
        (``optax.tree.norm(update)``; cast to float32; informational: the round
        computes its own norms for clipping).
      example_clip_fraction, batch_truncated, nonfinite_grads: the DP-SGD-only fields
        (keyword-only), default zeros of dtype float32, int32, int32.

    Returns:
      A `ClientMetrics` of scalars (shape ``()``).

    Raises:
      TypeError: a value that cannot be converted to an array (from ``jnp.asarray``).
    """
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    i32 = lambda v: jnp.asarray(v, jnp.int32)
    return cls(loss=f32(loss), num_examples=i32(num_examples), num_steps=i32(num_steps),
               update_norm=f32(update_norm),
               example_clip_fraction=f32(example_clip_fraction),
               batch_truncated=i32(batch_truncated), nonfinite_grads=i32(nonfinite_grads))


class ClientHParams(NamedTuple):
  """Per-round arrays read by local training (traced: changing them never recompiles).

  Attributes:
    record_clip_norm: float32 C_r for local DP-SGD (ignored without DP-SGD).
    record_noise_multiplier: float32 z_r for local DP-SGD.
    record_sampling_rate: float32 q_r for local DP-SGD.
    learning_rate: float32 eta_c multiplying every local optimiser step, or None (no
      scaling: the optimiser's own rate). Build the client optimiser with learning
      rate 1 and set this (as the algorithms do) so that a learning-rate sweep never
      recompiles; for optax's sgd (with or without momentum) and adam this gives
      exactly the iterates of ``opt(eta_c)``.
    param_clip_norm: float32 C_w, or None (off, nothing compiled): after every local
      step the *model parameters* are projected to ``||w||_2 <= C_w`` (global norm
      over all leaves), ``w <- w / max(1, ||w|| / C_w)`` (Yuan et al., Algorithm 1,
      line 9; the parameter clipping behind the sensitivity ``2 C_w / |D_k|``).
    final_param_clip_norm: float32 B, or None (off): once, after local training, the
      client's final *model parameters* are projected to ``||x_i||_2 <= B``
      (NbAFL, Wei et al. 2020; Talaei and Izadi (PADPFL), section III: "clipping the
      local weights using a bounding limit B"). A client without examples keeps the
      received model unclipped (its update stays exactly zero).
    prox_mu: float32 mu >= 0, or None (off, nothing compiled): FedProx's proximal term
      ``(mu / 2) ||w - w_0||^2`` anchored at the received (possibly noisy) global
      model ``w_0`` is added to the local objective (Li et al. 2020, FedProx, eq. 2;
      PADPFL eqs. 4, 30 and 31: the gradient gains ``mu (w - w_0)``). Non-private local
      training only.
    record_denominator: float32 b > 0 for local DP-SGD: the public constant each noisy
      gradient sum is divided by (the expected batch size; required with ``dp_sgd``).
    grad_clip_norm: float32 G, or None (off, nothing compiled): noise-free local
      training clips every per-example gradient to L2 norm G and averages them over
      the minibatch (the bound behind
      `fedjax_dp.privacy.sensitivity.clipped_gd_sensitivity`).
  """
  record_clip_norm: Any = 1.0
  record_noise_multiplier: Any = 0.0
  record_sampling_rate: Any = 1.0
  learning_rate: Any = None
  param_clip_norm: Any = None
  final_param_clip_norm: Any = None
  prox_mu: Any = None
  record_denominator: Any = None
  grad_clip_norm: Any = None


@dataclasses.dataclass(frozen=True)
class DpSgdConfig:
  """Static part of local DP-SGD (record-level DP).

  Attributes:
    num_steps: local DP-SGD steps per round (the ``dp_steps`` composed per round).
    max_batch_size: static padded Poisson batch size.
    micro_batch_size: the sampled batch is processed in micro-batches of this many
      rows, only as many as the draw needs (``ceil(drawn / micro_batch_size)``, a
      ``while`` loop), so a step costs about its real batch, not ``max_batch_size``
      rows; None: the whole padded batch in one pass. Changes the cost, not the
      result (up to float summation order).
  """
  num_steps: int
  max_batch_size: int
  micro_batch_size: Optional[int] = None

  @classmethod
  def create(cls, max_examples: int, record_sampling_rate: float,
             local_epochs: Optional[int] = None, local_steps: Optional[int] = None,
             overflow_prob: float = 1e-12,
             micro_batch_size: Optional[int] = -1) -> "DpSgdConfig":
    """Steps ``= local_steps`` or ``E * ceil(1 / q_r)`` (E expected epochs);
    ``max_batch_size`` = the (1 - overflow_prob) quantile of Binomial(max_examples, q_r).
    The overflow probability (over max_examples + 1, a neighbour's size) is added to
    delta (`truncation`), so it is kept small. ``micro_batch_size`` (-1: automatic,
    half the expected batch ``q_r max_examples``, at least 8 rows; None: off)."""
    q = check_probability("record_sampling_rate", record_sampling_rate)
    if (local_epochs is None) == (local_steps is None):
      raise FedJaxDpError("give exactly one of local_epochs and local_steps.")
    steps = (check_int("local_steps", local_steps, minimum=1) if local_steps is not None
             else check_int("local_epochs", local_epochs, minimum=1) * math.ceil(1.0 / q))
    b = max(1, min(max_examples, int(stats.binom.isf(overflow_prob, max_examples, q)) + 1))
    if micro_batch_size == -1:
      micro_batch_size = max(8, math.ceil(q * max_examples / 2))
    if micro_batch_size is not None:
      micro_batch_size = min(b, check_int("micro_batch_size", micro_batch_size, minimum=1))
      if micro_batch_size == b:
        micro_batch_size = None
    return cls(num_steps=steps, max_batch_size=b, micro_batch_size=micro_batch_size)

  def truncation(self, max_examples: int, client_slots: int):
    """The `fedjax_dp.privacy.events.Truncation` of this config's Poisson batches:
    drawn from at most ``max_examples + 1`` records (a neighbour may hold one more),
    capped at ``max_batch_size``, once per step in each of ``client_slots`` clients."""
    from fedjax_dp.privacy.events import Truncation
    return Truncation(int(max_examples), self.max_batch_size, int(client_slots))


def _learning_rate(hparams: ClientHParams) -> jax.Array:
  lr = 1.0 if hparams.learning_rate is None else hparams.learning_rate
  return jnp.asarray(lr, jnp.float32)


def _tree_where(c, a, b):
  return jax.tree_util.tree_map(lambda u, v: jnp.where(c, u, v), a, b)


def make_client_update(model, optimizer: optax.GradientTransformation, *, batch_size: int,
                       max_examples: int, local_epochs: Optional[int] = None,
                       local_steps: Optional[int] = None,
                       dp_sgd: Optional[DpSgdConfig] = None,
                       return_weights: bool = False,
                       skip_nonfinite_steps: bool = False,
                       per_example_method: str = "auto",
                       grad_correction: Optional[Callable] = None) -> Callable:
  """Builds the pure local-training function of one client.

  Args:
    model: a `fedjax_dp.models.Model` (``apply``, ``per_example_loss``).
    optimizer: any optax ``GradientTransformation`` (client optimiser; state is
      re-initialised at every round, as in FedAvg).
    batch_size: minibatch size b >= 1 (non-private training).
    max_examples: the padded per-client example count (static).
    local_epochs: E local epochs (exclusive with ``local_steps``).
    local_steps: tau local steps.
    dp_sgd: `DpSgdConfig` for record-level DP-SGD, or None.
    return_weights: return the final weights instead of the delta.
    skip_nonfinite_steps: non-private training only: check every step's gradient and
      skip (and count) steps whose gradient has NaN/Inf entries. Off by default: the
      check is a separate pass and reduction per step (about a third of the MLP
      benchmark's local-training time on a CPU), and the round already zeroes and
      counts a client whose final update is non-finite.
    per_example_method: how per-example clipped gradients are computed (DP-SGD and
      ``grad_clip_norm``): ``"auto"``, ``"ghost"`` or ``"vmap"``
      (`fedjax_dp.privacy.per_example.clipped_grad_sum`; equal results, ghost is the
      fast one and auto picks it whenever the model allows).
    grad_correction: ``grad_correction(grads, params, params0, context) -> grads``
      applied to every local step's gradient (after DP-SGD's noise: post-processing)
      before the optimiser, or None: the local objective's extra terms of an
      algorithm's client stage (`fedjax_dp.federated.stages`), e.g. FedProx's
      ``mu (w - w_0)`` (Li et al. 2020, eq. 2) or SCAFFOLD's ``c - c_i`` (Karimireddy
      et al. 2020, Alg. 1 line 10). ``context`` is what the caller passes as
      ``client_update``'s last argument (per-round values, the client's state).

  Returns:
    ``client_update(params, x, y, count, key, hparams, context=None) -> (update,
    ClientMetrics)``: ``x [max_examples, ...]`` float32, ``y [max_examples]`` int32,
    ``count`` int32, ``key`` the client's training key, ``hparams`` a `ClientHParams`,
    ``context`` handed to ``grad_correction``.

  Raises:
    FedJaxDpError: invalid batch size / epochs / steps.
  """
  b = check_int("batch_size", batch_size, minimum=1)
  check_choice("per_example_method", per_example_method, per_example.METHODS)
  max_n = check_int("max_examples", max_examples, minimum=1)
  if dp_sgd is None and (local_epochs is None) == (local_steps is None):
    raise FedJaxDpError("give exactly one of local_epochs and local_steps.")
  if dp_sgd is None and local_epochs is not None:
    local_epochs = check_int("local_epochs", local_epochs, minimum=1)
  if dp_sgd is None and local_steps is not None:
    local_steps = check_int("local_steps", local_steps, minimum=1)
  b = min(b, max_n)
  steps_per_epoch = math.ceil(max_n / b)

  def batch_loss(params, xb, yb, mask):
    # Masked rows (padding) are zeroed first, so that whatever they hold (NaN,
    # out-of-range labels) they contribute exactly 0 to the loss and its gradient.
    keep = mask > 0
    xb = jnp.where(keep.reshape(keep.shape + (1,) * (xb.ndim - 1)), xb, 0)
    yb = jnp.where(keep, yb, 0)
    per_ex = model.per_example_loss(model.apply(params, xb), yb)
    total = jnp.sum(per_ex * mask)
    return total / jnp.maximum(jnp.sum(mask), 1.0), total

  def project(params, bound):
    """``w <- w / max(1, ||w|| / bound)``; NaN parameters stay NaN (the round then
    zeroes and counts that client)."""
    c = jnp.asarray(bound, jnp.float32)
    norm = clipping.global_norm(params)
    scale = jnp.where(norm > c, c / jnp.maximum(norm, 1e-30), 1.0)
    return jax.tree_util.tree_map(lambda l: (l * scale).astype(l.dtype), params)

  def sgd_step(params, opt_state, grads, active, lr, param_clip_norm=None):
    updates, new_opt = optimizer.update(grads, opt_state, params)
    updates = jax.tree_util.tree_map(lambda u: (u * lr).astype(u.dtype), updates)
    new_params = optax.apply_updates(params, updates)
    if param_clip_norm is not None:  # project the parameters onto ||w|| <= C_w
      new_params = project(new_params, param_clip_norm)
    return _tree_where(active, new_params, params), _tree_where(active, new_opt, opt_state)

  def finish(params0, params, loss_sum, seen, count, steps, clip_frac, trunc, nonfinite,
             final_clip=None):
    if final_clip is not None:  # PADPFL / NbAFL: ||x_i|| <= B after local training
      params = _tree_where(count > 0, project(params, final_clip), params)
    delta = jax.tree_util.tree_map(jnp.subtract, params, params0)
    out = params if return_weights else delta
    metrics = ClientMetrics(
        loss=loss_sum / jnp.maximum(seen, 1.0), num_examples=count.astype(jnp.int32),
        num_steps=steps.astype(jnp.int32), update_norm=clipping.global_norm(delta),
        example_clip_fraction=clip_frac, batch_truncated=trunc.astype(jnp.int32),
        nonfinite_grads=nonfinite.astype(jnp.int32))
    return out, metrics

  def correct(grads, params, params0, context):
    if grad_correction is None:
      return grads
    return grad_correction(grads, params, params0, context)

  def non_private_update(params0, x, y, count, key, hparams, context=None):
    lr = _learning_rate(hparams)
    valid = jnp.arange(max_n) < count
    if local_steps is not None:
      num_steps = local_steps
      u = jax.random.uniform(key, (max_n,))
      perm = jnp.argsort(jnp.where(valid, u, 2.0))  # real examples first, shuffled
      def batch_at(s):
        pos = (s * b + jnp.arange(b)) % jnp.maximum(count, 1)
        # A batch never repeats an example: when b > count only the first `count`
        # slots (each real example once) are used, so the step is full-batch.
        return perm[pos], (jnp.arange(b) < count).astype(jnp.float32), count > 0
    else:
      assert local_epochs is not None  # checked above: exactly one of the two is given
      num_steps = local_epochs * steps_per_epoch
      u = jax.random.uniform(key, (local_epochs, max_n))
      perms = jnp.argsort(jnp.where(valid[None], u, 2.0), axis=1)
      def batch_at(s):
        epoch, j = s // steps_per_epoch, s % steps_per_epoch
        pos = j * b + jnp.arange(b)
        idx = jax.lax.dynamic_slice(
            jnp.pad(perms[epoch], (0, steps_per_epoch * b - max_n)), (j * b,), (b,))
        return idx, (pos < count).astype(jnp.float32), j * b < count

    def clipped_mean_grad(params, xb, yb, mask):
      """Mean over the batch of per-example gradients clipped to G, and the loss sum."""
      out = per_example.clipped_grad_sum(
          model, params, xb, yb, mask, jnp.asarray(hparams.grad_clip_norm, jnp.float32),
          method=per_example_method)
      denom = jnp.maximum(jnp.sum(mask), 1.0)
      return (jnp.sum(out.loss * mask),
              jax.tree_util.tree_map(lambda l: l / denom, out.total))

    def step(carry, s):
      params, opt_state, loss_sum, seen, taken, nonfinite = carry
      idx, mask, active = batch_at(s)
      if hparams.grad_clip_norm is None:
        (_, total), grads = jax.value_and_grad(batch_loss, has_aux=True)(
            params, x[idx], y[idx], mask)
      else:
        keep = mask > 0
        xb = jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 1)), x[idx], 0)
        total, grads = clipped_mean_grad(params, xb, jnp.where(keep, y[idx], 0), mask)
      if hparams.prox_mu is not None:  # FedProx: grad of (mu/2)||w - w_0||^2
        mu = jnp.asarray(hparams.prox_mu, jnp.float32)
        grads = jax.tree_util.tree_map(
            lambda g, w, w0: (g + mu * (w - w0)).astype(g.dtype), grads, params, params0)
      grads = correct(grads, params, params0, context)
      if skip_nonfinite_steps:
        grads, finite = clipping.zero_if_nonfinite(grads)
      else:
        finite = jnp.array(True)
      params, opt_state = sgd_step(params, opt_state, grads, active, lr,
                                   hparams.param_clip_norm)
      act = active.astype(jnp.float32)
      return (params, opt_state, loss_sum + act * total, seen + act * jnp.sum(mask),
              taken + active, nonfinite + (active & ~finite)), None

    init = (params0, optimizer.init(params0), jnp.zeros(()), jnp.zeros(()),
            jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    (params, _, loss_sum, seen, taken, nonfinite), _ = jax.lax.scan(
        step, init, jnp.arange(num_steps))
    return finish(params0, params, loss_sum, seen, count, taken, jnp.zeros(()),
                  jnp.zeros((), jnp.int32), nonfinite, hparams.final_param_clip_norm)

  def dp_sgd_update(params0, x, y, count, key, hparams, context=None):
    cfg = dp_sgd
    assert cfg is not None  # only returned with a DpSgdConfig
    if hparams.prox_mu is not None:
      raise FedJaxDpError("ClientHParams.prox_mu (FedProx) is available with non-private "
                          "local training only, not with local DP-SGD (dp_sgd).")
    bmax = cfg.max_batch_size
    valid = jnp.arange(max_n) < count
    q = jnp.asarray(hparams.record_sampling_rate, jnp.float32)
    c = jnp.asarray(hparams.record_clip_norm, jnp.float32)
    z = jnp.asarray(hparams.record_noise_multiplier, jnp.float32)
    if hparams.record_denominator is None:
      raise FedJaxDpError("ClientHParams.record_denominator is required with local DP-SGD: "
                          "the public constant (expected batch size) each noisy gradient "
                          "sum is divided by.")
    denom = jnp.asarray(hparams.record_denominator, jnp.float32)
    lr = _learning_rate(hparams)

    def clipped_grads(params, xb, yb, weights, c):
      return per_example.clipped_grad_sum(model, params, xb, yb, weights, c,
                                          method=per_example_method)

    def step(carry, s):
      params, opt_state, loss_sum, seen, clipped_n, trunc, nonfinite = carry
      g_noisy, st = dp_sgd_lib.noisy_clipped_sum(
          jax.random.fold_in(key, s), clipped_grads, params, x, y, valid, q, c, z,
          max_batch_size=bmax, micro_batch_size=cfg.micro_batch_size)
      grads = correct(jax.tree_util.tree_map(lambda l: l / denom, g_noisy), params, params0,
                      context)
      # Every client steps, an empty one too (pure noise): whether a step happens must
      # not depend on the client's records.
      params_new, opt_state = sgd_step(params, opt_state, grads, jnp.array(True), lr,
                                       hparams.param_clip_norm)
      return (params_new, opt_state, loss_sum + st.loss_sum, seen + st.rows,
              clipped_n + st.clipped, trunc + st.truncated,
              nonfinite + st.nonfinite), None

    init = (params0, optimizer.init(params0), jnp.zeros(()), jnp.zeros(()), jnp.zeros(()),
            jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    (params, _, loss_sum, seen, clipped_n, trunc, nonfinite), _ = jax.lax.scan(
        step, init, jnp.arange(cfg.num_steps))
    return finish(params0, params, loss_sum, seen, count,
                  jnp.asarray(cfg.num_steps, jnp.int32),
                  clipped_n / jnp.maximum(seen, 1.0), trunc, nonfinite,
                  hparams.final_param_clip_norm)

  return dp_sgd_update if dp_sgd is not None else non_private_update
