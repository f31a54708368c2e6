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
    Any other parameterised layer (convolutions, normalisation, embeddings, a
    researcher's own) gets its per-example parameter gradients from its own VJP vmapped
    over the batch (exact for any stride/padding; materialises only that layer's
    per-example gradients, ``[B, *param_shape]``). With the norms known, the clipped sum
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
``per_example_rule = "dense"`` to get the closed form instead of the vmapped VJP.

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

from typing import Any, Callable, List, NamedTuple, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

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
  kind: str                  # "dense" (closed form) or "generic" (vmapped VJP)


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
    if not _is_leaf_module(mod):
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
    kind = ("dense" if type(mod) is nn.Dense
            or getattr(type(mod), "per_example_rule", None) == "dense" else "generic")
    leaves.append(_Leaf(path, mod.clone(parent=None), kind))
    inputs.append(args[0])
    if perturbations is not None:
      out = out + perturbations[i]
    return out

  with nn.intercept_methods(interceptor):
    variables = {"params": params}
    logits = model.module.apply(variables, x)
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
  covered = {l.path + (k,) for l in found["leaves"]
             for k in _get(params, l.path).keys()}
  missing = [p for p in _leaf_paths(params) if tuple(p) not in covered]
  if missing:
    return False, ("parameters outside a leaf module's __call__: "
                   + ", ".join("/".join(p) for p in missing[:5]))
  return True, ""


def _dense_sq_norms(mod: nn.Dense, a, e):
  """Per-example squared norms of a Dense layer's kernel (+ bias) gradients.

  ``a [B, ..., d_in]``, ``e [B, ..., d_out]`` -> float32 ``[B]`` (Goodfellow 2015 for
  2-D inputs; Li et al. 2022, eq. 4, ghost norm, for inputs with extra axes)."""
  a = a.astype(jnp.float32)
  e = e.astype(jnp.float32)
  b = a.shape[0]
  if a.ndim == 2:
    sq = jnp.sum(a * a, axis=1) * jnp.sum(e * e, axis=1)
    if mod.use_bias:
      sq = sq + jnp.sum(e * e, axis=1)
    return sq
  a3 = a.reshape((b, -1, a.shape[-1]))
  e3 = e.reshape((b, -1, e.shape[-1]))
  t, d_in, d_out = a3.shape[1], a3.shape[2], e3.shape[2]
  if 2 * t * t <= d_in * d_out:  # ghost norm: <a a^T, e e^T>_F, O(T^2 (d_in + d_out))
    sq = jnp.sum(jnp.einsum("btd,bsd->bts", a3, a3) * jnp.einsum("bte,bse->bts", e3, e3),
                 axis=(1, 2))
  else:  # direct: ||a^T e||_F^2, O(T d_in d_out)
    sq = jnp.sum(jnp.square(jnp.einsum("btd,bte->bde", a3, e3)), axis=(1, 2))
  if mod.use_bias:
    sq = sq + jnp.sum(jnp.square(jnp.sum(e3, axis=1)), axis=1)
  return sq


def _generic_sq_norms(mod: nn.Module, p, a, e):
  """Per-example squared norms of any row-wise layer's parameter gradients: its own
  VJP on one row, vmapped over the batch. ``[B]`` float32."""
  def one(ai, ei):
    _, vjp = jax.vjp(lambda q: mod.apply({"params": q}, ai[None]), p)
    (gp,) = vjp(ei[None].astype(jnp.result_type(ai)))
    return sum(jnp.sum(jnp.square(l.astype(jnp.float32))) for l in jax.tree_util.tree_leaves(gp))
  return jax.vmap(one)(a, e)


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
  for leaf, a, e in zip(leaves, inputs, outs_grads):
    p = _get(params, leaf.path)
    sq = sq + (_dense_sq_norms(leaf.module, a, e) if leaf.kind == "dense"
               else _generic_sq_norms(leaf.module, p, a, e))
  scale, norms, finite = _clip_scale(sq, weights, clip_norm)
  total = jax.tree_util.tree_map(jnp.zeros_like, params)
  total = _unfreeze(total)
  for leaf, a, e in zip(leaves, inputs, outs_grads):
    p = _get(params, leaf.path)
    rows = finite.reshape((-1,) + (1,) * (a.ndim - 1))
    a = jnp.where(rows, a, 0)  # a non-finite row must not turn 0 * Inf into NaN
    e = jnp.where(finite.reshape((-1,) + (1,) * (e.ndim - 1)), e, 0)
    s = scale.reshape((-1,) + (1,) * (e.ndim - 1)).astype(e.dtype)
    _, vjp = jax.vjp(lambda q, m=leaf.module, a=a: m.apply({"params": q}, a), p)
    (g,) = vjp(e * s)
    _set(total, leaf.path, g)
  return ClippedSum(_like(params, total), losses, norms, finite)


def _outputs(model, params, x):
  """The output of every leaf module (shapes for the zero perturbations)."""
  outs = []

  def interceptor(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if _is_leaf_module(context.module) and context.method_name == "__call__":
      outs.append(out)
    return out

  with nn.intercept_methods(interceptor):
    model.module.apply({"params": params}, x)
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
  terms: e.g. paper 003's per-example meta-gradient ``(I - eta H_x) grad l(theta~; x)``
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
