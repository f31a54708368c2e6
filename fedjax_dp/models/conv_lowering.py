"""Any ``flax.linen.Conv`` computed as patches x kernel: one matmul, fast under vmap.

Why. A federated round vmaps every client's local training over the cohort, and
per-example DP-SGD vmaps each example's gradient over the batch. JAX lowers a
convolution whose kernel carries a vmapped axis to a grouped convolution, and XLA:CPU
runs grouped convolutions and per-example convolution gradients inside a ``lax.scan``
(the local-steps loop) about 10x slower than the same work written as a matrix product
(measured in `benchmarks/RESULTS.md`: a user's ``nn.Conv`` CNN trained with
record-level DP-SGD at 13.8 s per round against 3.05 s for the same network written
with `fedjax_dp.models.layers.Conv`). Unfolding the input into patches turns the
convolution into ``patches [N, K * C_in] @ kernel [K * C_in, C_out]``, which stays a
(batched) matmul under any vmap and whose per-example weight gradient is the outer
product that the ghost path of `fedjax_dp.privacy.per_example` already handles
(Goodfellow 2015; Li et al., ICLR 2022, eq. 4, with T = output positions).

What. `lowered_convs` is a flax method interceptor (``nn.intercept_methods``): while it
is active, every call of an ``nn.Conv`` whose configuration `conv_plan` supports reads
the module's own ``kernel`` and ``bias`` and returns `conv_apply` instead of
``lax.conv_general_dilated``. Same parameters, same output to float tolerance (tested
against flax for strides, dilations, every padding mode and feature groups); nothing is
interposed during ``init`` (the parameters are created by flax itself).
`fedjax_dp.models.Model.apply` runs the module under it (``conv_lowering="patches"``,
the default).

Supported ``nn.Conv`` configurations: any number of spatial axes, strides, kernel
dilation, padding ``"SAME"``, ``"VALID"``, ``"CIRCULAR"``, ``"REFLECT"``, ``"CAUSAL"``,
an int or explicit ``(low, high)`` pairs, ``feature_group_count``, ``mask``, ``use_bias``,
``dtype``/``precision``, any number of leading batch axes. Left to flax (computed
natively): ``input_dilation != 1``, a custom ``conv_general_dilated``, subclasses that
override ``__call__``, ``nn.ConvLocal`` and ``nn.ConvTranspose`` (`conv_plan` says why).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, NamedTuple, Optional, Tuple, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["ConvPlan", "conv_plan", "unsupported_reason", "conv_patches", "conv_apply",
           "lowered_convs", "CONV_LOWERINGS"]

#: ``Model.conv_lowering`` choices: ``"patches"`` (this module) or ``"native"`` (flax).
CONV_LOWERINGS = ("patches", "native")

_Pads = Tuple[Tuple[int, int], ...]


class ConvPlan(NamedTuple):
  """The static geometry of one convolution (hashable; derived by `conv_plan`).

  Attributes:
    kernel_size: window per spatial axis.
    strides: stride per spatial axis.
    dilation: kernel dilation per spatial axis.
    padding: ``"SAME"`` / ``"VALID"`` (resolved per input shape by ``lax``), or
      explicit ``((low, high), ...)`` pairs, or ``"CIRCULAR"`` / ``"REFLECT"`` /
      ``"CAUSAL"`` (padded as flax does, then VALID).
    groups: ``feature_group_count``.
    use_bias: whether a ``bias [C_out]`` is added.
  """
  kernel_size: Tuple[int, ...]
  strides: Tuple[int, ...]
  dilation: Tuple[int, ...]
  padding: Union[str, _Pads]
  groups: int
  use_bias: bool


def _tuple(v, n: int) -> Tuple[int, ...]:
  if v is None:
    return (1,) * n
  if isinstance(v, int):
    return (v,) * n
  return tuple(int(a) for a in v)


def _canonical_padding(padding, n: int) -> Union[str, _Pads]:
  if isinstance(padding, str):
    return padding.upper()
  if isinstance(padding, int):
    return ((padding, padding),) * n
  pads = []
  for p in padding:
    pads.append((int(p), int(p)) if isinstance(p, int) else (int(p[0]), int(p[1])))
  if len(pads) != n:
    raise ValueError(f"padding {padding!r} needs {n} entries, got {len(pads)}.")
  return tuple(pads)


def unsupported_reason(mod: nn.Module) -> str:
  """Why `conv_plan` leaves ``mod`` to flax ("" when it is lowered)."""
  if not isinstance(mod, nn.Conv):
    if getattr(type(mod), "per_example_rule", None) == "conv":
      return ""
    return f"{type(mod).__name__} is not a flax nn.Conv"
  if type(mod).__call__ is not nn.Conv.__call__:
    return f"{type(mod).__name__} overrides nn.Conv.__call__"
  if any(d != 1 for d in _tuple(mod.input_dilation, 1)):
    return "input_dilation != 1 (a transposed convolution)"
  if mod.conv_general_dilated is not None or mod.conv_general_dilated_cls is not None:
    return "a custom conv_general_dilated"
  return ""


def conv_plan(mod: nn.Module) -> Optional[ConvPlan]:
  """The `ConvPlan` of an ``nn.Conv`` (or of a layer declaring ``per_example_rule =
  "conv"`` with nn.Conv's field names), or None when `unsupported_reason` gives one."""
  if unsupported_reason(mod):
    return None
  ks = getattr(mod, "kernel_size")
  ks = (int(ks),) if isinstance(ks, int) else tuple(int(k) for k in ks)
  n = len(ks)
  return ConvPlan(kernel_size=ks, strides=_tuple(getattr(mod, "strides", 1), n),
                  dilation=_tuple(getattr(mod, "kernel_dilation", 1), n),
                  padding=_canonical_padding(getattr(mod, "padding", "SAME"), n),
                  groups=int(getattr(mod, "feature_group_count", 1)),
                  use_bias=bool(getattr(mod, "use_bias", True)))


def _pad(x, plan: ConvPlan) -> Tuple[jax.Array, _Pads]:
  """``x [N, *spatial, C]`` padded for the modes flax pads itself; returns the input
  and the zero padding still to apply per spatial axis."""
  n = len(plan.kernel_size)
  dilated = [(k - 1) * d + 1 for k, d in zip(plan.kernel_size, plan.dilation)]
  pad = plan.padding
  if pad in ("CIRCULAR", "REFLECT"):
    pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in dilated] + [(0, 0)]
    return jnp.pad(x, pads, mode="wrap" if pad == "CIRCULAR" else "reflect"), ((0, 0),) * n
  if pad == "CAUSAL":
    if n != 1:
      raise ValueError("CAUSAL padding is only defined for 1-D convolutions.")
    return x, ((dilated[0] - 1, 0),)
  if isinstance(pad, str):
    if pad not in ("SAME", "VALID"):
      raise ValueError(f"unknown padding {pad!r}.")
    return x, tuple(lax.padtype_to_pads(x.shape[1:-1], dilated, plan.strides, pad))
  return x, tuple(pad)


def conv_patches(x, plan: ConvPlan):
  """Unfolds ``x [N, *spatial, C]`` into ``[N, *out_spatial, K, C]``, K = prod(kernel).

  Patch element ``j`` (row-major over the kernel window, the order of a flax kernel
  ``[*kernel_size, C_in/G, C_out]`` reshaped to ``[K, C_in/G, C_out]``) at output
  position ``o`` is ``x_padded[o * stride + j * dilation]`` per spatial axis; strided
  static slices only (no gather, no convolution).

  Raises:
    ValueError: a kernel (dilated) larger than the padded input.
  """
  x, pads = _pad(x, plan)
  x = jnp.pad(x, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)])
  spatial = x.shape[1:-1]
  out = []
  for s, k, st, d in zip(spatial, plan.kernel_size, plan.strides, plan.dilation):
    span = (k - 1) * d + 1
    if s < span:
      raise ValueError(f"kernel {plan.kernel_size} (dilation {plan.dilation}) is larger "
                       f"than the padded input {spatial}.")
    out.append((s - span) // st + 1)
  offsets = [()]
  for k in plan.kernel_size:
    offsets = [o + (i,) for o in offsets for i in range(k)]
  slices = []
  for off in offsets:
    start = [0] + [i * d for i, d in zip(off, plan.dilation)] + [0]
    limit = ([x.shape[0]] + [b + (o - 1) * st + 1 for b, o, st in
                             zip(start[1:-1], out, plan.strides)] + [x.shape[-1]])
    slices.append(lax.slice(x, start, limit, [1] + list(plan.strides) + [1]))
  return jnp.stack(slices, axis=-2)


def conv_apply(plan: ConvPlan, x, kernel, bias=None, precision=None):
  """The convolution of flax's ``nn.Conv`` as ``patches @ kernel`` (+ bias).

  Args:
    plan: the layer's `ConvPlan`.
    x: ``[*batch, *spatial, C_in]`` (zero or more leading batch axes, as nn.Conv).
    kernel: ``[*kernel_size, C_in / G, C_out]`` (G = ``plan.groups``).
    bias: ``[C_out]`` or None.
    precision: passed to the contraction (``nn.Conv.precision``).

  Returns:
    ``[*batch, *out_spatial, C_out]`` in the promoted dtype of ``x`` and ``kernel``.
  """
  n = len(plan.kernel_size)
  batch = x.shape[:x.ndim - n - 1]
  flat = x.reshape((-1,) + x.shape[x.ndim - n - 1:])
  p = conv_patches(flat, plan)                               # [N, *out, K, C_in]
  g, c_out = plan.groups, kernel.shape[-1]
  k = kernel.reshape((-1, kernel.shape[-2], c_out))          # [K, C_in/G, C_out]
  if g == 1:  # one contracting axis in the patches' own (k, c) order: no transpose
    y = jnp.matmul(p.reshape(p.shape[:-2] + (-1,)), k.reshape((-1, c_out)),
                   precision=precision)
  else:
    p = p.reshape(p.shape[:-1] + (g, p.shape[-1] // g))      # [..., K, G, C_in/G]
    k = k.reshape(k.shape[:2] + (g, c_out // g))             # [K, C_in/G, G, C_out/G]
    y = jnp.einsum("...kgc,kcgf->...gf", p, k, precision=precision)
    y = y.reshape(y.shape[:-2] + (c_out,))
  if bias is not None:
    y = y + bias
  return y.reshape(batch + y.shape[1:]) if len(batch) != 1 else y


def _params_of(mod: nn.Module):
  names = ("kernel", "bias") if getattr(mod, "use_bias", True) else ("kernel",)
  return kernel_bias(mod, {k: mod.get_variable("params", k) for k in names})


def _interceptor(next_fun, args, kwargs, context):
  mod = context.module
  if (context.method_name != "__call__" or not isinstance(mod, nn.Conv) or kwargs
      or len(args) != 1 or not mod.has_variable("params", "kernel")):
    return next_fun(*args, **kwargs)
  plan = conv_plan(mod)
  if plan is None:
    return next_fun(*args, **kwargs)
  x = args[0]
  kernel, bias = _params_of(mod)
  x, kernel, bias = mod.promote_dtype(x, kernel, bias, dtype=mod.dtype)
  return conv_apply(plan, x, kernel, bias, mod.precision)


@contextlib.contextmanager
def lowered_convs(enabled: bool = True) -> Iterator[None]:
  """While active (and ``enabled``), supported ``nn.Conv`` calls run as `conv_apply`.

  Works at trace time (inside ``jit``/``vmap``/``grad``); nests with other interceptors
  (one registered earlier, e.g. the ghost path's recorder, sees the call first).
  """
  if not enabled:
    yield
    return
  with nn.intercept_methods(_interceptor):
    yield


def kernel_bias(mod: nn.Module, params) -> Tuple[jax.Array, Optional[jax.Array]]:
  """``(kernel, bias)`` of a conv leaf from its own ``params`` dict (mask applied)."""
  kernel = params["kernel"]
  mask = getattr(mod, "mask", None)
  if mask is not None:
    kernel = kernel * mask
  return kernel, (params["bias"] if getattr(mod, "use_bias", True) else None)


def check_lowering(name: str, value: str) -> str:
  """``value`` if it is one of `CONV_LOWERINGS`, else a FedJaxDpError naming ``name``."""
  from fedjax_dp.validation import check_choice
  check_choice(name, value, CONV_LOWERINGS)
  return value

