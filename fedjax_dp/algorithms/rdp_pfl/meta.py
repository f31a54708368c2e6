"""RDP-PFL's local epoch: a DP-SGD inner step on the query set and a DP-SGD outer
step with the MAML meta-gradient on the support set (Wei et al., IEEE TIFS 2023,
Sec. III-A, eqs. 6-11), in the clipping modes below.

Notation (the paper's): w the meta model, theta~ the one-step adapted model, eta the
inner and beta the outer learning rate, C the clip norm, sigma the noise multiplier (the
noise per coordinate is N(0, C^2 sigma^2)), q^Q / q^S the Poisson rates of the query and
support draws.

``clip_mode``:

* ``"first_order"`` (default; first-order MAML): Abadi-style
  per-example DP-SGD in both stages. Inner: ``g^Q = (sum_{x in B_Q} clip_C(grad l(w; x))
  + N(0, C^2 sigma^2 I)) / (q^Q n^Q)``, ``theta~ = w - eta g^Q``. Outer: per support
  example ``m_x = clip_C(grad l(theta~; x))``, summed, noised and divided by
  ``q^S n^S``; ``w <- w - beta g^S``. This is eq. (2)'s meta-gradient with its second
  factor ``(I - eta grad^2 F_Q(w))`` replaced by I: an O(eta) approximation (Finn et
  al. 2017, Sec. 5.2; `tests/algorithms/rdp_pfl/test_meta.py` measures its error
  against autodiff of the MAML objective on distinct query and support data). Why it
  is the default: the exact factor is the *query batch's* Hessian, so a per-example
  outer release that used it would read every query record again (each support
  record's vector would move when a query record is added), and no per-example clip
  bounds that; the first-order outer release reads query records only through theta~,
  which is already private (post-processing). So each stage is exactly one
  Poisson-subsampled Gaussian release with noise multiplier sigma under add/remove of
  one record, and a record influences only its own stage's release
  (`release_groups`).
* ``"per_example_hessian"`` (the earlier default; not the paper's
  meta-gradient): as ``"first_order"`` with ``m_x = (I - eta grad^2 l(w; x))
  grad l(theta~; x)``, the Hessian taken on each *support example itself* (a
  Hessian-vector product: ``jax.jvp`` of ``jax.grad``). Its accounting is the same as
  first-order's, but ``sum_x m_x`` is not eq. (2): besides ``(I - eta H_S) g2`` it
  carries ``-eta sum_x grad^2 l(w; x) (grad l(theta~; x) - g2)``, which for small
  eta points along the gradient of the mean squared per-example gradient norm (measured
  cosine 0.996-0.998), so the update climbs that norm; its relative error
  against the paper's meta-gradient was 15-18% at eta = 0.01 and 68-85% at
  eta = 0.05 (first-order: 5% and 20%). Kept to reproduce the earlier results.
* ``"paper"`` (eqs. 6-11 as printed): the *batch-mean* gradient is clipped to C and
  N(0, C^2 sigma^2 I) is added without dividing by the batch (eqs. 6-7); the outer step
  is ``c1 c2 (g2 - eta H_Q g2) + N(0, C^2 sigma^2 I)`` with g2 the support batch's mean
  gradient at theta~, H_Q the Hessian of the query batch's mean loss at w (the same
  draw B_Q as the inner step; our reading), ``c1 = min(1, sqrt(C) / ||I - eta H_Q||_2)``
  (spectral norm by power iteration: the paper does not name the norm; Lemma 4's
  proof implies the spectral one) and ``c2 = min(1, sqrt(C) / ||g2||)``
  (eqs. 9-11), so the product has norm <= C; power iteration can only under-estimate
  the spectral norm, so the product is clipped to C once more (a no-op when the estimate
  is exact; without it the bound would rest on the estimate). Each release is bounded
  by C but can move by 2C when one record is added (a batch mean is not a sum), and the
  outer release also reads the query draw: the guarantee this code enforces is weaker
  than the paper's (`release_scales`, `release_groups`).
* ``"dp_fedavg"`` (DP-FedAvg with local DP-SGD; a baseline the paper lacks): no meta
  step, the outer step is a plain DP-SGD step from theta~: ``w <- theta~ - beta g^S``
  with g^S the noisy clipped support gradients at theta~: two model updates per local
  epoch. Same releases and accounting as ``"first_order"``; the target clients
  personalise the same way.
* ``"dp_fedavg_one_step"`` (the same baseline at MAML's local work: one model update
  per local epoch): ``w <- w - beta g^S`` with g^S the noisy clipped support gradients
  at w; the inner release is still made and charged (the same ledger as the other
  per-example modes) but not used.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Literal, NamedTuple, Tuple, get_args

import jax
import jax.numpy as jnp

from fedjax_dp.privacy import clipping, dp_sgd, noise, per_example

__all__ = ["PyTree", "ClipMode", "CLIP_MODES", "release_scales", "STAGE_GROUPS",
           "release_groups", "example_loss", "per_example_meta_gradient",
           "meta_clipped_sum", "grad_clipped_sum", "meta_gradient",
           "spectral_norm_i_minus_eta_h", "StageStats", "StageConfig", "local_epoch"]

PyTree = Any

ClipMode = Literal["first_order", "paper", "per_example_hessian", "dp_fedavg",
                   "dp_fedavg_one_step"]
CLIP_MODES: Tuple[str, ...] = get_args(ClipMode)


def release_scales(clip_mode: str) -> Tuple[float, float]:
  """``(query, support)`` event scales: the noise multiplier of each stage's DpEvent is
  sigma times this (noise std ``sigma C`` over the release's L2 sensitivity under
  add/remove of one record).

  * per-example modes: each stage is a sum of per-example vectors clipped to C:
    sensitivity C, scale 1 (Theorem 1's accounting, exactly).
  * ``"paper"``: a clipped batch mean (or a product clipped to C) changes by up to 2C
    when one record is added; a query record also changes the outer release (its
    Hessian uses the same draw B_Q), so a query record's pair of releases (inner, outer)
    is one Poisson-subsampled Gaussian with sensitivity sqrt((2C)^2 + (2C)^2) = 2 sqrt(2)
    C: scale ``1 / (2 sqrt 2)``; a support record changes only the outer release:
    scale 1/2.
  """
  if clip_mode == "paper":
    return 1.0 / (2.0 * math.sqrt(2.0)), 0.5
  return 1.0, 1.0


#: Every clip mode's release groups (`release_groups`).
STAGE_GROUPS = (("query",), ("support",))


def release_groups(clip_mode: str) -> Tuple[Tuple[str, ...], ...]:
  """The releases one record can influence, for each role it can hold:
  ``(("query",), ("support",))`` in every mode. A record is in its client's query set
  or its support set, never both, and keeps that role whatever other records are added
  or removed (`fedjax_dp.algorithms.rdp_pfl.algorithm.rdp_pfl`'s ``query_rows``):

  * per-example modes (every mode but ``"paper"``): a query
    record enters the inner release; the outer release reads only the support draw, w
    and theta~, and theta~ is the inner release itself (noisy), so the outer release is
    post-processing for a query record. A support record enters only the outer
    release. Each record's guarantee is its own stage's Poisson-subsampled Gaussian,
    composed over the run: one stage, not two.
  * ``"paper"``: a query record enters the inner release and, through the Hessian on
    the same draw B_Q (eq. 10), the outer one; the ``"query"`` release is already that
    pair, one Gaussian of sensitivity 2 sqrt 2 C over the record's inclusion in B_Q
    (`release_scales`), so it is the query record's whole privacy loss. A support record
    enters only the outer release (the ``"support"`` release, 2C). So the groups are the
    same; composing both for every record charged the query record's outer release
    twice.
  """
  del clip_mode  # the same in every mode (see above)
  return STAGE_GROUPS


def example_loss(model) -> Callable:
  """``loss(params, x, y)``: one example's loss (``x`` without the batch axis)."""
  def loss(p, x, y):
    return model.per_example_loss(model.apply(p, x[None]), y[None])[0]
  return loss


def per_example_meta_gradient(model, theta: PyTree, eta) -> Callable:
  """``fn(w, (x, y)) -> (m_x, loss)``: ``clip_mode="per_example_hessian"``'s vector of
  one support example, ``m_x = (I - eta grad^2 l(w; x)) grad l(theta~; x)`` (eq. 2
  with the Hessian on the example itself, not on the query batch: not the paper's
  meta-gradient, see the module docstring) and its loss at theta~ (the running meta
  loss, our reading of the paper's "training loss"). The Hessian-vector product is
  forward-over-reverse (``jax.jvp(jax.grad(l), (w,), (v,))``): no Hessian is formed."""
  loss = example_loss(model)

  def fn(w, example):
    x, y = example
    value, g = jax.value_and_grad(loss)(theta, x, y)
    hvp = jax.jvp(lambda p: jax.grad(loss)(p, x, y), (w,), (g,))[1]
    return jax.tree_util.tree_map(lambda a, b: a - eta * b, g, hvp), value

  return fn


def meta_clipped_sum(model, theta: PyTree, eta) -> Callable:
  """``fn(w, xb, yb, weights, C) -> ClippedSum`` of the per-example meta-gradients
  (`per_example_meta_gradient`), for `fedjax_dp.privacy.dp_sgd.noisy_clipped_sum`."""
  fn = per_example_meta_gradient(model, theta, eta)

  def clipped(w, xb, yb, weights, c):
    return per_example.clipped_sum(fn, w, (xb, yb), weights, c)

  return clipped


def grad_clipped_sum(model, method: str = "auto", at: PyTree = None) -> Callable:
  """``fn(w, xb, yb, weights, C) -> ClippedSum`` of per-example loss gradients at ``w``
  (or at the fixed ``at``: first-order MAML's gradients at theta~), ghost-clipped where
  the model allows (`fedjax_dp.privacy.per_example.clipped_grad_sum`)."""
  def clipped(w, xb, yb, weights, c):
    p = w if at is None else at
    return per_example.clipped_grad_sum(model, p, xb, yb, weights, c, method=method)
  return clipped


def meta_gradient(model, w: PyTree, xq, yq, xs, ys, eta) -> PyTree:
  """The exact (no clipping, no noise) second-order MAML gradient of
  ``G(w) = F_S(w - eta grad F_Q(w))`` written as eq. (2):
  ``(I - eta grad^2 F_Q(w)) grad F_S(theta)``, ``theta = w - eta grad F_Q(w)``,
  with F the mean loss over ``xq [nq, ...]`` / ``xs [ns, ...]`` (a reference for
  tests and the theory checks)."""
  def f(p, x, y):
    return jnp.mean(model.per_example_loss(model.apply(p, x), y))
  gq = jax.grad(f)(w, xq, yq)
  theta = jax.tree_util.tree_map(lambda a, b: a - eta * b, w, gq)
  g2 = jax.grad(f)(theta, xs, ys)
  hvp = jax.jvp(lambda p: jax.grad(f)(p, xq, yq), (w,), (g2,))[1]
  return jax.tree_util.tree_map(lambda a, b: a - eta * b, g2, hvp)


def spectral_norm_i_minus_eta_h(hvp: Callable, w: PyTree, eta, key,
                                iterations: int = 20) -> jax.Array:
  """``||I - eta H||_2`` (our reading of ``||g1||`` in eq. 9, as the spectral norm) by power
  iteration on ``v -> v - eta H v`` (H symmetric, so the iteration converges to the
  largest |eigenvalue|; ``iterations`` fixed, a lower bound that is tight to a few
  percent after 20 for the models here).

  Args:
    hvp: ``hvp(v) -> H v`` (pytrees like ``w``).
    w: pytree giving the structure of v.
    eta: float32 step.
    key: PRNG key of the start vector.
    iterations: power iterations (static).

  Returns:
    float32 scalar estimate of the spectral norm.
  """
  v = noise.gaussian_like(key, w, 1.0)

  def apply(u):
    return jax.tree_util.tree_map(lambda a, b: a - eta * b, u, hvp(u))

  def body(_, u):
    au = apply(u)
    return jax.tree_util.tree_map(lambda a: a / jnp.maximum(clipping.global_norm(au), 1e-30),
                                  au)

  v = body(0, v)
  v = jax.lax.fori_loop(0, iterations, body, v)
  return clipping.global_norm(apply(v))


class StageStats(NamedTuple):
  """One local epoch's diagnostics per stage (raw-data quantities, not covered by
  epsilon): ``[2]`` arrays, entry 0 the query (inner) stage, 1 the support (outer).

  Attributes:
    loss_sum: per-example losses summed (inner: at w; outer: at theta~, the
      paper's "training loss").
    rows: rows processed.
    clipped: rows whose vector (per-example modes) or whose batch's vector (paper
      mode: every row of a clipped batch) exceeded the bound, so ``clipped / rows`` is
      the fraction of rows clipped in every mode.
    nonfinite: rows whose vector was NaN/Inf (zeroed).
    truncated: sampled rows dropped by the static batch cap.
  """
  loss_sum: jax.Array
  rows: jax.Array
  clipped: jax.Array
  nonfinite: jax.Array
  truncated: jax.Array


def _stack(a: dp_sgd.DrawStats, b: dp_sgd.DrawStats) -> StageStats:
  return StageStats(*(jnp.stack([jnp.asarray(u, jnp.float32), jnp.asarray(v, jnp.float32)])
                      for u, v in zip(a, b)))


class StageConfig(NamedTuple):
  """Static shapes of one stage's Poisson draws: the padded batch cap and the
  micro-batch size (None: one pass)."""
  max_batch_size: int
  micro_batch_size: Any = None


def local_epoch(model, w: PyTree, x, y, query_mask, support_mask, key, *, eta, beta,
                clip_norm, noise_multiplier, q_query, q_support, denom_query,
                denom_support, query_cfg: StageConfig, support_cfg: StageConfig,
                clip_mode: str = "first_order", per_example_method: str = "auto",
                power_iterations: int = 20) -> Tuple[PyTree, StageStats]:
  """One local epoch of Algorithm 1 (lines 7-8): the DP inner step (eqs. 6-7) then the
  DP outer step (eqs. 8-11) in ``clip_mode`` (module docstring).

  Args:
    model: a `fedjax_dp.models.Model`.
    w: the client's meta model w_i^{t,tau} (pytree of float32).
    x: float32 ``[n, ...]`` the client's rows; y: int32 ``[n]``.
    query_mask, support_mask: bool ``[n]``: the rows of D^Q and D^S (disjoint).
    key: PRNG key of this epoch.
    eta, beta: float32 inner and outer learning rates.
    clip_norm: float32 C; noise_multiplier: float32 sigma (std sigma C per coordinate).
    q_query, q_support: float32 Poisson rates q^Q, q^S.
    denom_query, denom_support: float32 public divisors of the per-example modes' noisy
      sums (the expected batch sizes q^Q n^Q, q^S n^S with the public nominal sizes);
      unused in paper mode.
    query_cfg, support_cfg: `StageConfig` (static).
    clip_mode: one of `CLIP_MODES`.
    per_example_method: the clipped-gradient method of the first-order terms
      (`fedjax_dp.privacy.per_example.METHODS`).
    power_iterations: paper mode's power iterations for ``||I - eta H_Q||_2``.

  Returns:
    ``(w_i^{t,tau+1}, StageStats)``.
  """
  k_q, k_s, k_pow = jax.random.split(key, 3)
  if clip_mode == "paper":
    return _paper_epoch(model, w, x, y, query_mask, support_mask, k_q, k_s, k_pow,
                        eta=eta, beta=beta, clip_norm=clip_norm,
                        noise_multiplier=noise_multiplier, q_query=q_query,
                        q_support=q_support, query_cfg=query_cfg, support_cfg=support_cfg,
                        power_iterations=power_iterations)
  # Inner step, eqs. (6)-(7): per-example clipped query gradients at w, noised.
  g_q, st_q = dp_sgd.noisy_clipped_sum(
      k_q, grad_clipped_sum(model, per_example_method), w, x, y, query_mask, q_query,
      clip_norm, noise_multiplier, max_batch_size=query_cfg.max_batch_size,
      micro_batch_size=query_cfg.micro_batch_size)
  theta = jax.tree_util.tree_map(lambda a, g: a - eta * g / denom_query, w, g_q)
  # Outer step, eqs. (8)-(11): per-example meta-gradients (or first-order gradients at
  # theta~) clipped to C, noised.
  base = w
  if clip_mode == "first_order":
    fn = grad_clipped_sum(model, per_example_method, at=theta)
  elif clip_mode == "dp_fedavg":  # plain DP-SGD from theta~
    fn, base = grad_clipped_sum(model, per_example_method), theta
  elif clip_mode == "dp_fedavg_one_step":  # plain DP-SGD from w; theta~ unused
    fn = grad_clipped_sum(model, per_example_method)
  elif clip_mode == "per_example_hessian":
    fn = meta_clipped_sum(model, theta, eta)
  else:
    raise ValueError(f"clip_mode must be one of {CLIP_MODES}, got {clip_mode!r}")
  g_s, st_s = dp_sgd.noisy_clipped_sum(
      k_s, fn, base, x, y, support_mask, q_support, clip_norm, noise_multiplier,
      max_batch_size=support_cfg.max_batch_size,
      micro_batch_size=support_cfg.micro_batch_size)
  w_new = jax.tree_util.tree_map(lambda a, g: a - beta * g / denom_support, base, g_s)
  return w_new, _stack(st_q, st_s)


def _batch_mean_loss(model, p, xb, yb, mask):
  per = model.per_example_loss(model.apply(p, xb), yb)
  return jnp.sum(per * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def _clip_to(tree, bound):
  """``tree / max(1, ||tree|| / bound)`` and whether it was clipped (non-finite -> 0)."""
  tree, finite = clipping.zero_if_nonfinite(tree)
  norm = clipping.global_norm(tree)
  s = jnp.minimum(1.0, bound / jnp.maximum(norm, 1e-30))
  return jax.tree_util.tree_map(lambda l: l * s, tree), norm > bound, finite


def _paper_epoch(model, w, x, y, query_mask, support_mask, k_q, k_s, k_pow, *, eta, beta,
                 clip_norm, noise_multiplier, q_query, q_support, query_cfg, support_cfg,
                 power_iterations):
  """Eqs. (6)-(11) as printed (``clip_mode="paper"``)."""
  kq_sel, kq_noise = jax.random.split(k_q)
  ks_sel, ks_noise = jax.random.split(k_s)
  iq, nq, dq = dp_sgd.poisson_draw(kq_sel, query_mask, q_query, query_cfg.max_batch_size)
  is_, ns, ds = dp_sgd.poisson_draw(ks_sel, support_mask, q_support,
                                    support_cfg.max_batch_size)
  mq = (jnp.arange(iq.shape[0]) < nq).astype(jnp.float32)
  ms = (jnp.arange(is_.shape[0]) < ns).astype(jnp.float32)
  xq, yq, xs, ys = x[iq], y[iq], x[is_], y[is_]
  f_q = functools.partial(_batch_mean_loss, model, xb=xq, yb=yq, mask=mq)
  f_s = functools.partial(_batch_mean_loss, model, xb=xs, yb=ys, mask=ms)
  sigma_c = jnp.where(noise_multiplier > 0, noise_multiplier * clip_norm, 0.0)
  # Eqs. (6)-(7): theta~ = w - eta (clip_C(grad F(w, B_Q)) + n^Q).
  loss_q, g = jax.value_and_grad(f_q)(w)
  g_bar, clipped_q, finite_q = _clip_to(g, clip_norm)
  theta = jax.tree_util.tree_map(lambda a, b: a - eta * b, w,
                                 noise.add_gaussian_noise(kq_noise, g_bar, sigma_c))
  # Eqs. (9)-(11): g1 = I - eta H(F, B_Q) at w, g2 = grad F(theta~, B_S); each clipped
  # to sqrt(C) (g1 by its spectral norm), product plus n^S.
  loss_s, g2 = jax.value_and_grad(f_s)(theta)
  g2, finite_s = clipping.zero_if_nonfinite(g2)

  def hvp(v):
    return jax.jvp(jax.grad(f_q), (w,), (v,))[1]

  root_c = jnp.sqrt(clip_norm)
  s1 = spectral_norm_i_minus_eta_h(hvp, w, eta, k_pow, power_iterations)
  c1 = jnp.minimum(1.0, root_c / jnp.maximum(s1, 1e-30))
  n2 = clipping.global_norm(g2)
  c2 = jnp.minimum(1.0, root_c / jnp.maximum(n2, 1e-30))
  prod = jax.tree_util.tree_map(lambda a, b: c1 * c2 * (a - eta * b), g2, hvp(g2))
  # ||c1 (I - eta H)|| <= sqrt(C) holds only if s1 is not below the spectral norm, and
  # power iteration under-estimates it: clip the product to C itself, so the release's
  # bound is enforced whatever the estimate (a no-op when s1 is exact).
  prod, over_p, finite_p = _clip_to(prod, clip_norm)
  w_new = jax.tree_util.tree_map(lambda a, b: a - beta * b, w,
                                 noise.add_gaussian_noise(ks_noise, prod, sigma_c))
  # A clipped batch counts all its rows, so clipped / rows is a fraction of rows.
  st_q = dp_sgd.DrawStats(loss_q * nq, nq, clipped_q.astype(jnp.float32) * nq,
                          (~finite_q).astype(jnp.int32),
                          jnp.maximum(dq - query_cfg.max_batch_size, 0))
  st_s = dp_sgd.DrawStats(loss_s * ns, ns,
                          ((c1 < 1) | (c2 < 1) | over_p).astype(jnp.float32) * ns,
                          (~(finite_s & finite_p)).astype(jnp.int32),
                          jnp.maximum(ds - support_cfg.max_batch_size, 0))
  return w_new, _stack(st_q, st_s)
