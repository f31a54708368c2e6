"""Per-example clipped gradient sums for DP-SGD, at matmul speed where the layers allow.

DP-SGD (Abadi et al., CCS 2016, Algorithm 1) needs, for a batch of B examples with
weights ``w_i`` (1 for a sampled record, 0 for padding),

    S = sum_i w_i * clip_C(g_i),   clip_C(g) = g * min(1, C / ||g||_2),       (Abadi eq. 2)

where ``g_i`` is the gradient of example i's loss over *all* parameters (global L2
norm). Two ways to compute it, chosen automatically (``method="auto"``):

``"ghost"`` (norms without per-example gradients, then book-keeping)
    One forward pass records each layer's input ``a_l`` ([B, ...]) and one backward
    pass, taken with respect to a zero perturbation added to each layer's output,
    gives the per-example output gradients ``e_l = dL_i / d(out_l)_i``. A dense
    layer's per-example kernel gradient is the outer product ``a_i e_i^T``, so its
    squared norm is ``||a_i||^2 ||e_i||^2`` and its bias gradient's is ``||e_i||^2``
    (Goodfellow, "Efficient per-example gradient computations", 2015); for inputs with
    a sequence/spatial axis T the norm is ``<a_i a_i^T, e_i e_i^T>_F`` (the ghost norm of
    Li et al., ICLR 2022, eq. 4) or the direct ``||a_i^T e_i||_F``, whichever is cheaper.
    A convolution (flax ``nn.Conv`` with any strides, dilation, padding mode and
    feature groups, or `fedjax_dp.models.layers.Conv`) is the same dense layer on its
    unfolded input: ``a_i`` becomes the patches ``[T, K * C_in]`` (T output positions,
    K kernel taps; per feature group) and the same two formulas apply, with the layer
    itself computed as patches x kernel (`fedjax_dp.models.conv_lowering`).
    Any other parameterised layer (normalisation, embeddings, a masked or transposed
    convolution, a researcher's own) gets its per-example parameter gradients from its
    own VJP vmapped over the batch (materialises only that layer's per-example
    gradients, ``[B, *param_shape]``). With the norms known, the clipped sum
    is each layer's VJP over the whole batch with the output gradients re-weighted by
    ``w_i min(1, C / ||g_i||)`` (book-keeping, Bu et al., "Differentially private
    optimization on large models at small cost", ICML 2023, Algorithm 1): one extra
    weight-gradient matmul per layer, no second backward pass.
``"vmap"`` (the general reference)
    ``jax.vmap(jax.grad(loss of one example))``: materialises ``[B, P]`` per-example
    gradients, clips each (`fedjax_dp.privacy.clipping.clip_per_example`) and sums.
    Works for any model and any per-example function (`clipped_sum`, used for
    second-order terms such as a per-example Hessian-vector product).

A layer class of one's own that computes ``x @ kernel (+ bias)`` like ``nn.Dense``
(``kernel [d_in, d_out]``, optional ``bias [d_out]``, ``use_bias`` attribute) declares
``per_example_rule = "dense"`` to get the closed form instead of the vmapped VJP. A
recurrence ``z_t = a_t + h_{t-1} W`` (one parameter ``W``, input ``a [B, T, F]``, output
``h [B, T, H]``, `fedjax_dp.models.sequence.LSTMRecurrence`) declares
``per_example_rule = "recurrent"``: its per-example gradient ``sum_t h_{t-1}^T
delta_t`` is a dense layer on ``h_{t-1}`` with output gradients ``delta_t = dL/da_t``,
which one batched VJP of the layer gives (then the same two formulas apply).

``"ghost"`` applies when every parameter belongs to a flax *leaf* module (one whose
``params`` are arrays, not sub-dicts) that is called exactly once, through
``__call__`` with one array argument, whose output rows depend only on the matching
input rows (true of Dense, Conv, LayerNorm, Embed; not of BatchNorm, which also has a
non-``params`` collection and is refused), and whose parameters are read nowhere
else. `ghost_support` says whether a model qualifies and why not; ``"auto"`` uses
``"ghost"`` when it does and ``"vmap"`` otherwise; both are tested equal.

Edge cases (as `fedjax_dp.privacy.clipping`): a per-example gradient with a NaN/Inf
entry contributes zeros and is flagged (``finite = False``, norm 0); a zero gradient
is unchanged; ``C = 0`` gives zeros. Rows with weight 0 are zeroed before the forward
pass, so whatever padding holds contributes exactly nothing. The ghost path squares
entries in float32: a per-example gradient norm above about 1e19 overflows to Inf and
is treated as non-finite (the vmap path rescales and clips it).
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Tuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from fedjax_dp.models import conv_lowering
from fedjax_dp.privacy import clipping
from fedjax_dp.validation import FedJaxDpError, check_choice

PyTree = Any
METHODS = ("auto", "ghost", "vmap")


class ClippedSum(NamedTuple):
  """Result of a per-example clipped sum over a batch of B rows.

  Attributes:
    total: pytree like ``params``: ``sum_i w_i * clip_C(g_i)`` (float32 leaves).
    loss: float32 ``[B]``: each row's loss (for `clipped_sum`, the aux output of the
      per-example function); padded rows hold the loss of a zeroed input.
    norms: float32 ``[B]``: each row's pre-clip global L2 norm (0 for a non-finite row).
    finite: bool ``[B]``: False where the row's gradient had NaN/Inf entries (zeroed).
  """
  total: PyTree
  loss: jax.Array
  norms: jax.Array
  finite: jax.Array


class _Leaf(NamedTuple):
  path: Tuple[str, ...]
  module: nn.Module          # unbound clone: ``module.apply({"params": p}, a)``
  kind: str                  # "dense", "conv", "recurrent" (closed forms) or "generic"


def _leaf_kind(mod: nn.Module) -> str:
  if type(mod) is nn.Dense or getattr(type(mod), "per_example_rule", None) == "dense":
    return "dense"
  if getattr(type(mod), "per_example_rule", None) == "recurrent":
    return "recurrent"
  if conv_lowering.conv_plan(mod) is not None and getattr(mod, "mask", None) is None:
    return "conv"
  return "generic"


def _zero_padding(x, y, weights):
  keep = weights > 0
  x = jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 1)), x, 0)
  return x, jnp.where(keep, y, 0)


def _get(tree, path):
  for p in path:
    tree = tree[p]
  return tree


def _leaf_paths(params, prefix=()):
  out = []
  for k, v in params.items():
    if isinstance(v, dict) or hasattr(v, "items"):
      out += _leaf_paths(v, prefix + (k,))
    else:
      out.append(prefix + (k,))
  return out


def _is_leaf_module(mod: nn.Module) -> bool:
  try:
    p = mod.variables.get("params", {})
  except Exception:  # an unbound module or no scope
    return False
  return bool(p) and all(not hasattr(v, "items") for v in p.values())


def _traced_forward(model, params, x, perturbations=None):
  """Applies the model, recording each leaf module's input and (when given) adding a
  zero perturbation to its output. Returns ``(logits, inputs, leaves, problems)``."""
  inputs: List[jax.Array] = []
  leaves: List[_Leaf] = []
  problems: List[str] = []
  seen = set()

  def interceptor(next_fun, args, kwargs, context):
    mod = context.module
    if not _is_leaf_module(mod) or context.method_name == "setup":
      # ``setup`` declares parameters (nn.Embed's table); they are used in __call__
      return next_fun(*args, **kwargs)
    path = tuple(mod.scope.path)
    name = "/".join(path) or type(mod).__name__
    if context.method_name != "__call__":
      problems.append(f"{name}.{context.method_name} reads parameters outside __call__")
      return next_fun(*args, **kwargs)
    if path in seen:
      problems.append(f"{name} is called more than once (shared weights)")
    seen.add(path)
    if kwargs or len(args) != 1 or not hasattr(args[0], "shape"):
      problems.append(f"{name} is not called with exactly one array argument")
      return next_fun(*args, **kwargs)
    out = next_fun(*args, **kwargs)
    if not hasattr(out, "shape"):
      problems.append(f"{name} does not return one array")
      return out
    i = len(leaves)
    leaves.append(_Leaf(path, mod.clone(parent=None), _leaf_kind(mod)))
    inputs.append(args[0])
    if perturbations is not None:
      out = out + perturbations[i]
    return out

  with nn.intercept_methods(interceptor):  # outside Model.apply's conv lowering
    logits = model.apply(params, x)
  return logits, inputs, leaves, problems


def ghost_support(model, params, x) -> Tuple[bool, str]:
  """Whether the ghost path is exact for ``model`` (see the module docstring).

  Traced abstractly (``jax.eval_shape``: nothing is computed).

  Args:
    model: a `fedjax_dp.models.Model` (``module`` a flax linen module).
    params: its parameters.
    x: an input batch ``[B, *feature_shape]`` (only its shape and dtype are used).

  Returns:
    ``(supported, reason)``; ``reason`` says why not (empty when supported).
  """
  found = {}

  def probe(p, xb):
    _, _, leaves, problems = _traced_forward(model, p, xb)
    found["leaves"], found["problems"] = leaves, problems
    return 0.0

  try:
    jax.eval_shape(probe, params, x)
  except Exception as e:  # e.g. a module needing other collections (BatchNorm)
    return False, f"the model does not apply with params alone ({type(e).__name__}: {e})"
  if found["problems"]:
    return False, "; ".join(sorted(set(found["problems"])))
  covered = set()
  for leaf in found["leaves"]:
    try:
      covered |= {leaf.path + (k,) for k in _get(params, leaf.path).keys()}
    except (KeyError, TypeError, AttributeError):  # e.g. LoRA: the layer's weights are
      return False, (f"layer {'/'.join(leaf.path)} reads parameters that are not in "
                     "params (derived from them, as LoRA's merged kernels)")
  missing = [p for p in _leaf_paths(params) if tuple(p) not in covered]
  if missing:
    return False, ("parameters outside a leaf module's __call__: "
                   + ", ".join("/".join(p) for p in missing[:5]))
  return True, ""


def _dense_sq_norms(mod: nn.Module, a, e):
  """Per-example squared norms of a Dense layer's kernel (+ bias) gradients.

  ``a [B, ..., d_in]``, ``e [B, ..., d_out]`` -> ``(sq, per_example)``: float32 ``[B]``
  (Goodfellow 2015 for 2-D inputs; for inputs with extra axes, `_grouped_sq_norms`),
  and the per-example gradients ``{"kernel": [B, d_in, d_out], "bias": [B, d_out]}``
  when they were formed to get the norms (else None)."""
  a = a.astype(jnp.float32)
  e = e.astype(jnp.float32)
  b = a.shape[0]
  use_bias = getattr(mod, "use_bias", True)
  if a.ndim == 2:
    sq = jnp.sum(a * a, axis=1) * jnp.sum(e * e, axis=1)
    if use_bias:
      sq = sq + jnp.sum(e * e, axis=1)
    return sq, None
  a4 = a.reshape((b, -1, 1, a.shape[-1]))
  e4 = e.reshape((b, -1, 1, e.shape[-1]))
  sq, g = _grouped_sq_norms(a4, e4, use_bias)
  if g is None:
    return sq, None
  per = {"kernel": g[:, 0]}
  if use_bias:
    per["bias"] = jnp.sum(e4[:, :, 0], axis=1)
  return sq, per


def _grouped_sq_norms(a, e, use_bias: bool):
  """``sum_g ||a_g^T e_g||_F^2`` (+ the bias term ``||sum_t e||^2``) per example.

  ``a [B, T, G, D]`` (layer inputs per position and group), ``e [B, T, G, F]`` (output
  gradients) -> ``(sq float32 [B], g)``: the squared norm of each example's weight
  gradient ``g_i = sum_t a_t e_t^T`` of every group. When T is small the ghost norm
  ``<a a^T, e e^T>_F`` (Li et al., ICLR 2022, eq. 4; O(T^2 (D + F)) per group) avoids
  forming ``g`` (returned as None); otherwise ``g [B, G, D, F]`` is formed (O(T D F),
  the weight gradient's own cost) and returned, so that the clipped sum reuses it
  instead of a second weight-gradient product (per-layer choice of Bu et al., "Scalable
  and efficient training of large convolutional neural networks with differential
  privacy", NeurIPS 2022, mixed ghost clipping)."""
  t, d, f = a.shape[1], a.shape[3], e.shape[3]
  bias_sq = (jnp.sum(jnp.square(jnp.sum(e, axis=1)), axis=(1, 2)) if use_bias
             else jnp.zeros(a.shape[0], jnp.float32))
  if 2 * t * t <= d * f:
    sq = jnp.sum(jnp.einsum("btgd,bsgd->bgts", a, a) * jnp.einsum("btgf,bsgf->bgts", e, e),
                 axis=(1, 2, 3))
    return sq + bias_sq, None
  if a.shape[2] == 1:
    # e^T a, contracting T, then a small transpose: the large patches ``a`` stay in
    # their [B, T, D] layout (``einsum`` would copy them to [B, D, T] first).
    gt = lax.dot_general(e[:, :, 0], a[:, :, 0], (((1,), (1,)), ((0,), (0,))))
    g = jnp.swapaxes(gt, 1, 2)[:, None]                         # [B, 1, D, F]
  else:
    g = jnp.einsum("btgd,btgf->bgdf", a, e)
  return jnp.sum(jnp.square(g), axis=(1, 2, 3)) + bias_sq, g


def _conv_sq_norms(mod: nn.Module, a, e):
  """Per-example squared norms of a convolution's kernel (+ bias) gradients, as a
  dense layer on the unfolded input: ``a [B, ..., *spatial, C_in]`` ->
  patches ``[B, T, G, K * C_in / G]`` against ``e [B, ..., *out, C_out]`` ->
  ``[B, T, G, C_out / G]`` (T = output positions of the example; G feature groups).
  Returns ``(sq [B], per_example)`` as `_dense_sq_norms` (kernel ``[B, *kernel_shape]``)."""
  plan = conv_lowering.conv_plan(mod)
  assert plan is not None
  n, b, g = len(plan.kernel_size), a.shape[0], plan.groups
  flat = a.astype(jnp.float32).reshape((-1,) + a.shape[a.ndim - n - 1:])
  p = conv_lowering.conv_patches(flat, plan)                  # [N, *out, K, C_in]
  k, c_in = p.shape[-2], p.shape[-1]
  p = p.reshape((b, -1, k, g, c_in // g)).transpose(0, 1, 3, 2, 4)
  a4 = p.reshape((b, p.shape[1], g, k * (c_in // g)))
  e4 = e.astype(jnp.float32).reshape((b, -1, g, e.shape[-1] // g))
  sq, gr = _grouped_sq_norms(a4, e4, plan.use_bias)
  if gr is None:
    return sq, None
  fg = e4.shape[-1]                                           # [B, G, K*Cg, Fg] ->
  kern = gr.reshape((b, g, k, c_in // g, fg)).transpose(0, 2, 3, 1, 4)  # [B, K, Cg, G, Fg]
  per = {"kernel": kern.reshape((b,) + plan.kernel_size + (c_in // g, g * fg))}
  if plan.use_bias:
    per["bias"] = jnp.sum(e4, axis=1).reshape((b, -1))
  return sq, per


def _conv_leaf_apply(mod: nn.Module, q, a):
  """The conv leaf's output from its parameters ``q`` as patches x kernel."""
  plan = conv_lowering.conv_plan(mod)
  assert plan is not None
  kernel, bias = conv_lowering.kernel_bias(mod, q)
  a, kernel, bias = getattr(mod, "promote_dtype", _same)(a, kernel, bias,
                                                          dtype=getattr(mod, "dtype", None))
  return conv_lowering.conv_apply(plan, a, kernel, bias, getattr(mod, "precision", None))


def _leaf_apply(mod: nn.Module, q, a) -> jax.Array:
  """A leaf module applied alone (any nn.Conv inside lowered to patches x kernel)."""
  with conv_lowering.lowered_convs():
    # flax annotates apply as `Any | (output, variables)`; without ``mutable`` it is the
    # output alone
    return cast(jax.Array, mod.apply({"params": q}, a))


def _same(*args, dtype=None):
  del dtype
  return args


def _generic_sq_norms(mod: nn.Module, p, a, e):
  """Per-example squared norms of any row-wise layer's parameter gradients: its own
  VJP on one row, vmapped over the batch. ``[B]`` float32."""
  def one(ai, ei):
    out, vjp = jax.vjp(lambda q: _leaf_apply(mod, q, ai[None]), p)
    (gp,) = vjp(ei[None].astype(out.dtype))  # the output's dtype (an Embed's input is int)
    return sum(jnp.sum(jnp.square(l.astype(jnp.float32))) for l in jax.tree_util.tree_leaves(gp))
  return jax.vmap(one)(a, e)


def _recurrent_sq_norms(mod: nn.Module, p, a, e):
  """Per-example squared norms of a recurrence's kernel gradient (``per_example_rule =
  "recurrent"``, e.g. `fedjax_dp.models.sequence.LSTMRecurrence`).

  The layer maps ``a [B, T, F]`` to ``h [B, T, H]`` through ``z_t = a_t + h_{t-1} W``
  (``W [H, F]``, its only parameter, ``h_{-1} = 0``), so example i's gradient is
  ``sum_t h_{i,t-1}^T delta_{i,t}`` with ``delta_{i,t} = dL_i/dz_t = dL_i/da_t``: a
  dense layer on the sequence ``h_{t-1}`` whose output gradients are the layer's input
  gradients, which one batched VJP of the layer with respect to ``a`` gives (rows are
  independent, so the batch VJP is per example). Returns ``(sq [B], per, (h_prev,
  delta))``: ``per`` as `_grouped_sq_norms`' ``g`` (``{"<name>": [B, H, F]}`` or None)."""
  (name,) = tuple(p.keys())
  h, vjp = jax.vjp(lambda a_: _leaf_apply(mod, p, a_), a)
  (delta,) = vjp(e.astype(h.dtype))
  h = h.astype(jnp.float32)
  h_prev = jnp.concatenate([jnp.zeros_like(h[:, :1]), h[:, :-1]], axis=1)
  delta = delta.astype(jnp.float32)
  sq, g = _grouped_sq_norms(h_prev[:, :, None], delta[:, :, None], use_bias=False)
  return sq, (None if g is None else {name: g[:, 0]}), (h_prev, delta)


def _clip_scale(sq_norms, weights, clip_norm):
  """``w_i min(1, C / ||g_i||)`` with the edge cases of `fedjax_dp.privacy.clipping`."""
  finite = jnp.isfinite(sq_norms)
  norms = jnp.where(finite, jnp.sqrt(jnp.where(finite, sq_norms, 0.0)), 0.0)
  c = jnp.asarray(clip_norm, jnp.float32)
  scale = jnp.where(norms > c, c / jnp.maximum(norms, 1e-30), 1.0)
  return jnp.where(finite, scale * weights, 0.0), norms, finite


def _ghost(model, params, x, y, weights, clip_norm) -> ClippedSum:
  shapes = jax.eval_shape(lambda p, xb: _outputs(model, p, xb), params, x)

  def loss_of_perturbations(perturbations):
    logits, inputs, leaves, _ = _traced_forward(model, params, x, perturbations)
    losses = model.per_example_loss(logits, y)
    return jnp.sum(losses), (losses, inputs, leaves)

  zeros = [jnp.zeros(s.shape, s.dtype) for s in shapes]
  (_, (losses, inputs, leaves)), outs_grads = jax.value_and_grad(
      loss_of_perturbations, has_aux=True)(zeros)
  sq = jnp.zeros(x.shape[0], jnp.float32)
  formed, recurrent = [], {}
  for i, (leaf, a, e) in enumerate(zip(leaves, inputs, outs_grads)):
    p = _get(params, leaf.path)
    if leaf.kind == "generic":
      sq_l, per = _generic_sq_norms(leaf.module, p, a, e), None
    elif leaf.kind == "recurrent":
      sq_l, per, recurrent[i] = _recurrent_sq_norms(leaf.module, p, a, e)
    else:
      sq_l, per = (_dense_sq_norms if leaf.kind == "dense" else _conv_sq_norms)(
          leaf.module, a, e)
    sq, formed = sq + sq_l, formed + [per]
  scale, norms, finite = _clip_scale(sq, weights, clip_norm)
  total = _unfreeze(jax.tree_util.tree_map(jnp.zeros_like, params))
  for i, (leaf, a, e, per) in enumerate(zip(leaves, inputs, outs_grads, formed)):
    p = _get(params, leaf.path)
    if per is not None:  # per-example gradients formed for the norms: weight and sum
      g = {k: jnp.tensordot(scale, jnp.where(_rows(finite, v), v, 0.0), axes=(0, 0))
              .astype(p[k].dtype) for k, v in per.items()}
      _set(total, leaf.path, g)
      continue
    if leaf.kind == "recurrent":  # sum_i s_i sum_t h_{i,t-1}^T delta_{i,t}
      h_prev, delta = (jnp.where(_rows(finite, v), v, 0.0) for v in recurrent[i])
      (name,) = tuple(p.keys())
      g = jnp.einsum("bth,btf->hf", h_prev * scale[:, None, None], delta)
      _set(total, leaf.path, {name: g.astype(p[name].dtype)})
      continue
    a = jnp.where(_rows(finite, a), a, 0)  # a non-finite row must not turn 0 * Inf into NaN
    e = jnp.where(_rows(finite, e), e, 0)
    s = scale.reshape((-1,) + (1,) * (e.ndim - 1)).astype(e.dtype)
    apply = _conv_leaf_apply if leaf.kind == "conv" else _leaf_apply
    _, vjp = jax.vjp(lambda q, m=leaf.module, a=a: apply(m, q, a), p)
    (g,) = vjp(e * s)
    _set(total, leaf.path, g)
  return ClippedSum(_like(params, total), losses, norms, finite)


def _rows(mask, v):
  """``mask [B]`` broadcast against ``v [B, ...]``."""
  return mask.reshape((-1,) + (1,) * (v.ndim - 1))


def _outputs(model, params, x):
  """The output of every leaf module (shapes for the zero perturbations)."""
  outs = []

  def interceptor(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if _is_leaf_module(context.module) and context.method_name == "__call__":
      outs.append(out)
    return out

  with nn.intercept_methods(interceptor):
    model.apply(params, x)
  return outs


def _unfreeze(tree):
  if hasattr(tree, "items"):
    return {k: _unfreeze(v) for k, v in tree.items()}
  return tree


def _set(tree, path, value):
  for p in path[:-1]:
    tree = tree[p]
  tree[path[-1]] = value


def _like(params, total):
  """``total`` (plain dicts) in the container type of ``params``."""
  return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params),
                                      jax.tree_util.tree_leaves(total))


def clipped_sum(fn: Callable, params: PyTree, batch: PyTree, weights, clip_norm) -> ClippedSum:
  """``sum_i w_i clip_C(v_i)`` for any per-example vector function (the vmap path).

  Serves first-order DP-SGD (``fn`` = one example's loss gradient) and second-order
  terms: e.g. RDP-PFL's per-example meta-gradient ``(I - eta H_x) grad l(theta~; x)``
  is a per-example Hessian-vector product written as ``fn``.

  Args:
    fn: ``fn(params, example) -> (vector, aux)``: ``example`` is one row of ``batch``
      (each leaf without its leading axis); ``vector`` a pytree of float arrays (any
      structure), ``aux`` a float32 scalar (e.g. the example's loss).
    params: pytree passed to ``fn`` unchanged (not batched).
    batch: pytree whose leaves are ``[B, ...]``.
    weights: float32 ``[B]``: 1 for a real row, 0 for padding (any real weight works).
    clip_norm: float32 scalar C >= 0.

  Returns:
    `ClippedSum` with ``total`` shaped like ``vector`` and ``loss`` the ``aux`` values.
  """
  vectors, aux = jax.vmap(fn, in_axes=(None, 0))(params, batch)
  clipped, norms, finite = clipping.clip_per_example(vectors, clip_norm)
  w = jnp.asarray(weights, jnp.float32)
  total = jax.tree_util.tree_map(lambda l: jnp.tensordot(w, l, axes=(0, 0)), clipped)
  return ClippedSum(total, aux, norms, finite)


def clipped_grad_sum(model, params: PyTree, x, y, weights, clip_norm,
                     method: str = "auto") -> ClippedSum:
  """``sum_i w_i clip_C(grad_params loss(x_i, y_i))`` (Abadi et al. 2016, Alg. 1, line 6
  and the sum of line 7, without the noise).

  Args:
    model: a `fedjax_dp.models.Model` (a flax ``module`` and ``per_example_loss``).
    params: its parameters (pytree of float32 arrays).
    x: float32 ``[B, *feature_shape]``.
    y: int32 ``[B]`` labels.
    weights: float32 ``[B]``: 1 for a sampled record, 0 for padding (rows with weight
      0 are zeroed before the forward pass).
    clip_norm: float32 scalar C >= 0 (L2, global over all parameters).
    method: ``"auto"`` (ghost when `ghost_support` says it is exact, else vmap),
      ``"ghost"`` (raises if unsupported) or ``"vmap"``. Static (a Python string).

  Returns:
    `ClippedSum`: ``total`` shaped like ``params``; per-example ``loss``, ``norms``,
    ``finite``, each ``[B]``.

  Raises:
    FedJaxDpError: unknown ``method``; ``method="ghost"`` on a model it cannot serve.
  """
  check_choice("method", method, METHODS)
  weights = jnp.asarray(weights, jnp.float32)
  x, y = _zero_padding(x, y, weights)
  if method != "vmap":
    ok, why = ghost_support(model, params, x)
    if not ok and method == "ghost":
      raise FedJaxDpError(f"method='ghost' cannot serve this model: {why}. "
                          "Use method='vmap' or 'auto'.")
    if ok:
      return _ghost(model, params, x, y, weights, clip_norm)

  def one(p, ex):
    xe, ye = ex
    loss, g = jax.value_and_grad(
        lambda q: model.per_example_loss(model.apply(q, xe[None]), ye[None])[0])(p)
    return g, loss

  return clipped_sum(one, params, (x, y), weights, clip_norm)


def resolve_method(model, params, x, method: str = "auto") -> str:
  """The method ``clipped_grad_sum`` will use: ``"ghost"`` or ``"vmap"`` (for logs)."""
  check_choice("method", method, METHODS)
  if method == "auto":
    return "ghost" if ghost_support(model, params, x)[0] else "vmap"
  return method
