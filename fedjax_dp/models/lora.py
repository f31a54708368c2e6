"""Fine-tuning a trained `Model`: all its parameters (`pretrained`) or low-rank adapters
of its dense kernels (`lora`), as `Model` objects the federated engine trains unchanged.

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022,
eq. 3) freezes a pre-trained weight ``W0`` and learns a low-rank change of it:
``h = W0 x + (alpha / r) B A x`` with ``B [d, r]`` initialised to 0 and ``A [r, k]``
Gaussian, so training starts exactly at the pre-trained model. Flax's ``nn.Dense``
computes ``h = x @ kernel`` with ``kernel [d_in, d_out]`` (the paper's ``W0``
transposed), so here the factors are stored in that orientation::

    kernel = W0 + (alpha / r) * lora_a @ lora_b
    lora_a: float32 [d_in, r]    (the paper's A transposed; N(0, 1 / d_in) at init)
    lora_b: float32 [r, d_out]   (the paper's B transposed; zeros at init)

A `lora` model's parameters (what ``init`` returns, what clients train, clip, noise and
upload) are only these factors, one ``{"lora_a", "lora_b"}`` pair at the path of each
adapted layer (``{"block_0": {"attn": {"qkv": {"lora_a": ..., "lora_b": ...}}}}``);
everything else (embeddings, biases, LayerNorms, unadapted kernels) is the frozen base,
closed over as constants. ``apply`` merges the factors into the base and runs the base
module, so an algorithm that only calls ``init``, ``apply`` and ``per_example_loss``
(user-level DP-FedAvg: clipping and noise act on the update of the trainable
parameters) needs no change. `fedjax_dp.models.count_params` of ``init``'s output is
the trainable count ``sum over adapted kernels of r (d_in + d_out)``; `merge` gives the
full merged parameters (to evaluate or export the fine-tuned model as a plain one).

Default targets (`DEFAULT_TARGETS`): every 2-D ``kernel`` inside a transformer block of
`fedjax_dp.models.sequence.CharTransformer` (attention ``qkv`` and ``out``, MLP
``mlp_in`` and ``mlp_out``); the output layer ``out`` is not adapted unless
`OUTPUT_TARGET` is added (``targets=DEFAULT_TARGETS + (OUTPUT_TARGET,)``).

Record-level DP (per-example clipping, `fedjax_dp.privacy.per_example`): its ``ghost``
path reads the flax module's own layers, whose parameters a `LoRAModel`'s are not, so
`ghost_support` declines a LoRA model and ``per_example_method="auto"`` takes the vmap
path (per-example gradients of the factors, 13.8x fewer than the model's at rank 4);
a `PretrainedModel` takes either path.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from fedjax_dp.models.core import Model, Params
from fedjax_dp.validation import FedJaxDpError, check_int, check_positive

__all__ = ["DEFAULT_TARGETS", "OUTPUT_TARGET", "PretrainedModel", "LoRAModel",
           "pretrained", "lora", "merge"]

#: Regular expressions (full match on the layer's path, e.g. ``block_0/attn/qkv``) of
#: the layers `lora` adapts by default: every dense layer inside a transformer block.
DEFAULT_TARGETS: Tuple[str, ...] = (r"block_\d+/.+",)
#: The output layer of the character models (add it to adapt the read-out too).
OUTPUT_TARGET = "out"


def _checked_params(model: Model, params: Params, what: str) -> Params:
  """``params`` as float32 jax arrays after checking they fit ``model.init``'s tree.

  Raises:
    FedJaxDpError (option ``what``): another tree structure or a leaf of another shape.
  """
  want = jax.eval_shape(model.init, jax.random.key(0))
  try:
    want_flat: Dict[str, Any] = dict(traverse_util.flatten_dict(want, sep="/"))
    got_flat: Dict[str, Any] = dict(traverse_util.flatten_dict(params, sep="/"))
  except (TypeError, AttributeError) as e:
    raise FedJaxDpError(f"{what} must be a nested dict of arrays like model.init's, got "
                        f"{type(params).__name__}.", option=what) from e
  if set(want_flat) != set(got_flat):
    extra, missing = sorted(set(got_flat) - set(want_flat)), sorted(set(want_flat) -
                                                                     set(got_flat))
    raise FedJaxDpError(f"{what} does not fit model {model.name!r}: missing "
                        f"{missing[:4]}, unexpected {extra[:4]}.", option=what)
  for k, w in want_flat.items():
    if tuple(np.shape(got_flat[k])) != tuple(w.shape):
      raise FedJaxDpError(f"{what}[{k!r}] has shape {tuple(np.shape(got_flat[k]))}, "
                          f"model {model.name!r} needs {tuple(w.shape)}.", option=what)
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), params)


@dataclasses.dataclass(frozen=True, eq=False)
class PretrainedModel(Model):
  """A `Model` whose ``init(key)`` returns given parameters (the key is ignored), so a
  run starts from them: full fine-tuning. Compared by identity.

  Attributes:
    initial_params: the parameters ``init`` returns (pytree of float32 arrays, the
      base model's structure).
  """
  initial_params: Params = dataclasses.field(default=None, kw_only=True)

  def __eq__(self, other: object) -> bool:  # arrays inside: identity, not field-wise
    return self is other

  def __hash__(self) -> int:
    return id(self)

  def init(self, key) -> Params:
    """The given parameters (``key`` is ignored)."""
    del key
    return self.initial_params


@dataclasses.dataclass(frozen=True, eq=False)
class LoRAModel(Model):
  """A `Model` whose parameters are the LoRA factors of some kernels of a frozen base
  (module docstring). Compared by identity.

  Attributes:
    base_params: the frozen base parameters (float32 arrays, the module's tree).
    rank: r, the factors' inner dimension.
    alpha: the scale numerator; the change of a kernel is ``(alpha / r) A B``.
    target_paths: the adapted layers' paths (``"block_0/attn/qkv"``), in tree order.
  """
  base_params: Params = dataclasses.field(default=None, kw_only=True)
  rank: int = dataclasses.field(default=1, kw_only=True)
  alpha: float = dataclasses.field(default=1.0, kw_only=True)
  target_paths: Tuple[str, ...] = dataclasses.field(default=(), kw_only=True)

  def __eq__(self, other: object) -> bool:  # arrays inside: identity, not field-wise
    return self is other

  def __hash__(self) -> int:
    return id(self)

  @property
  def scale(self) -> float:
    """``alpha / rank``."""
    return self.alpha / self.rank

  def init(self, key) -> Params:
    """The trainable factors: ``lora_a`` float32 ``[d_in, r]`` drawn N(0, 1/d_in)
    (one key per layer, folded in by its index) and ``lora_b`` float32 ``[r, d_out]``
    zeros, at each target's path."""
    flat = {}
    for i, path in enumerate(self.target_paths):
      d_in, d_out = _kernel(self.base_params, path).shape
      a = jax.random.normal(jax.random.fold_in(key, i), (d_in, self.rank), jnp.float32)
      flat[path + "/lora_a"] = a / math.sqrt(d_in)
      flat[path + "/lora_b"] = jnp.zeros((self.rank, d_out), jnp.float32)
    return traverse_util.unflatten_dict(flat, sep="/")

  def merged(self, params: Params) -> Params:
    """The base parameters with each target kernel replaced by
    ``W0 + (alpha / r) lora_a @ lora_b`` (float32, the base's tree)."""
    flat = dict(traverse_util.flatten_dict(self.base_params, sep="/"))
    for path in self.target_paths:
      a, b = _factors(params, path)
      flat[path + "/kernel"] = flat[path + "/kernel"] + self.scale * (a @ b)
    return traverse_util.unflatten_dict(flat, sep="/")

  def apply(self, params: Params, x) -> jax.Array:
    """Logits float32 ``[B, num_classes]`` for ``x`` float32 ``[B, *feature_shape]``:
    the base module with every target kernel merged, ``W0 + (alpha / r) A B`` (the
    merge costs ``d_in r d_out`` per kernel per call; the backward pass then forms the
    merged kernel's gradient ``[d_in, d_out]`` and projects it onto A and B)."""
    return super().apply(self.merged(params), x)


def _kernel(params: Params, path: str):
  node = params
  for p in path.split("/"):
    node = node[p]
  return node["kernel"]


def _factors(params: Params, path: str):
  node = params
  for p in path.split("/"):
    node = node[p]
  return node["lora_a"], node["lora_b"]


def pretrained(model: Model, params: Params) -> PretrainedModel:
  """``model`` starting from ``params``: full fine-tuning (every parameter trains).

  Args:
    model: a `Model`.
    params: parameters of ``model`` (its ``init``'s tree and shapes), e.g. from
      central pre-training.

  Returns:
    A `PretrainedModel` (same module, name ``<name>_pretrained``); its ``init(key)``
    returns ``params`` as float32 arrays whatever the key.

  Raises:
    FedJaxDpError: ``model`` is not a `Model` (option ``model``); ``params`` does not
      fit it (option ``params``).
  """
  if not isinstance(model, Model):
    raise FedJaxDpError(f"model must be a fedjax_dp.models.Model, got "
                        f"{type(model).__name__}.", option="model")
  params = _checked_params(model, params, "params")
  fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(Model)}
  fields["name"] = f"{model.name}_pretrained"
  return PretrainedModel(**fields, initial_params=params)


def lora(model: Model, base_params: Params, rank: int, alpha: Optional[float] = None,
         targets: Sequence[str] = DEFAULT_TARGETS) -> LoRAModel:
  """``model`` with frozen ``base_params`` and trainable rank-``rank`` adapters
  (Hu et al. 2022, eq. 3; module docstring).

  Args:
    model: a `Model` (not itself a LoRA model), e.g. ``create_model("char_transformer",
      (80,), 81, hidden=(64, 64))``.
    base_params: its pre-trained parameters (``model.init``'s tree and shapes).
    rank: r >= 1, at most ``min(d_in, d_out)`` of every adapted kernel.
    alpha: scale numerator (> 0); the change is ``(alpha / r) A B``. Default ``rank``
      (scale 1; Hu et al. set alpha to the first r they try and do not tune it).
    targets: regular expressions matched (in full) against each layer's path
      (``"block_0/attn/qkv"``, ``"out"``); every 2-D parameter named ``kernel`` of a
      matching layer is adapted. Default `DEFAULT_TARGETS`: every dense layer inside
      the transformer blocks (attention qkv/out, MLP in/out), not the output layer.

  Returns:
    A `LoRAModel` named ``<name>_lora<rank>``; ``count_params(m.init(key))`` is
    ``sum r (d_in + d_out)`` over the adapted kernels.

  Raises:
    FedJaxDpError: naming the argument: ``model`` not a `Model` or already a LoRA
      model; ``base_params`` not fitting it; ``rank`` not an integer >= 1 or above
      ``min(d_in, d_out)`` of an adapted kernel; ``alpha`` not > 0; ``targets`` empty,
      not strings, a bad regular expression, or matching no 2-D kernel.
  """
  if not isinstance(model, Model) or isinstance(model, LoRAModel):
    raise FedJaxDpError(f"model must be a fedjax_dp.models.Model that is not already a "
                        f"LoRA model, got {type(model).__name__}.", option="model")
  rank = check_int("rank", rank, minimum=1)
  alpha = float(rank) if alpha is None else check_positive("alpha", alpha)
  base = _checked_params(model, base_params, "base_params")
  if isinstance(targets, str) or not targets or not all(isinstance(t, str)
                                                        for t in targets):
    raise FedJaxDpError(f"targets must be a non-empty sequence of regular expressions "
                        f"(strings), got {targets!r}.", option="targets")
  try:
    patterns = [re.compile(t) for t in targets]
  except re.error as e:
    raise FedJaxDpError(f"targets holds a bad regular expression: {e}.",
                        option="targets") from e
  flat: Dict[str, Any] = dict(traverse_util.flatten_dict(base, sep="/"))
  kernels = {k[:-len("/kernel")]: v for k, v in flat.items()
             if k.endswith("/kernel") and np.ndim(v) == 2}
  paths = tuple(p for p in kernels if any(r.fullmatch(p) for r in patterns))
  if not paths:
    raise FedJaxDpError(f"targets {list(targets)} match no 2-D dense kernel of model "
                        f"{model.name!r}; its kernels: {sorted(kernels)}.",
                        option="targets")
  for p in paths:
    d_in, d_out = np.shape(kernels[p])
    if rank > min(d_in, d_out):
      raise FedJaxDpError(f"rank must be at most min(d_in, d_out) of every adapted "
                          f"kernel, but {p!r} is [{d_in}, {d_out}] and rank is {rank}.",
                          option="rank")
  fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(Model)}
  fields["name"] = f"{model.name}_lora{rank}"
  return LoRAModel(**fields, base_params=base, rank=rank, alpha=alpha, target_paths=paths)


def merge(model: Model, params: Params) -> Params:
  """The full parameters of ``model`` at ``params``: for a `LoRAModel`, the base with
  every adapted kernel ``W0 + (alpha / r) A B`` (the base module's tree, float32);
  for any other `Model`, ``params`` unchanged.

  Raises:
    FedJaxDpError (option ``params``): ``params`` lacks a LoRA factor of ``model``.
  """
  if not isinstance(model, LoRAModel):
    return params
  try:
    return model.merged(params)
  except (KeyError, TypeError) as e:
    raise FedJaxDpError(f"params must hold lora_a and lora_b for each of "
                        f"{list(model.target_paths)} (model.init's tree): {e!r}.",
                        option="params") from e
