"""`Model`: a flax module seen as pure functions ``init``, ``apply`` and a loss.

The federated engine only needs

* ``init(key) -> params`` (a pytree of float32 arrays),
* ``apply(params, x) -> logits``: ``x float32 [B, *feature_shape]`` to ``float32
  [B, num_classes]``,
* ``per_example_loss(logits, labels) -> float32 [B]`` with ``labels int32 [B]``.

Your own model: any flax linen module that maps ``[B, *feature_shape]`` to logits
``[B, num_classes]``, wrapped by `from_module`; on the command line ``--model
package.module:factory`` names a function ``factory(feature_shape, num_classes)`` that
returns such a module (or a `Model`), imported by `model_from_factory`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable, Optional, Sequence, TypeGuard, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.models import modules
from fedjax_dp.models.conv_lowering import CONV_LOWERINGS, lowered_convs
from fedjax_dp.validation import FedJaxDpError, check_choice

__all__ = [
    "Params", "MODEL_NAMES", "SEQUENCE_MODELS", "SEQUENCE_DEFAULT_WIDTHS", "LOSSES", "cross_entropy_loss", "multiclass_hinge_loss",
    "Model", "count_params", "create_model", "default_model_name", "from_module",
    "as_model", "is_factory_spec", "check_factory_spec", "load_model_factory",
    "model_from_factory",
]

Params = Any

MODEL_NAMES = ("mlp", "cnn", "cnn3", "lenet5", "cnn_fc50", "har_cnn", "linear",
               "char_lstm", "char_transformer")
#: Models of token windows ``[T]`` whose input vocabulary is the output classes.
SEQUENCE_MODELS = ("char_lstm", "char_transformer")
#: Default widths of the sequence models (``hidden`` of `create_model`): LEAF's
#: 2 x 256 LSTM; 2 transformer blocks of width 128.
SEQUENCE_DEFAULT_WIDTHS = {"char_lstm": (256, 256), "char_transformer": (128, 128)}

#: ``package.module:factory`` (`model_from_factory`).
_FACTORY_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
LOSSES = ("cross_entropy", "hinge")


def cross_entropy_loss(logits, labels):
  """Softmax cross-entropy, float32 ``[B]`` from logits ``[B, C]`` and int labels ``[B]``."""
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def multiclass_hinge_loss(logits, labels):
  """Crammer-Singer multi-class hinge loss ``max(0, 1 + max_{j!=y} s_j - s_y)``, ``[B]``.

  For two classes this is the binary SVM hinge loss on the score margin.
  """
  num_classes = logits.shape[-1]
  onehot = jax.nn.one_hot(labels, num_classes, dtype=logits.dtype)
  true_score = jnp.sum(logits * onehot, axis=-1)
  other = jnp.max(jnp.where(onehot > 0, -jnp.inf, logits), axis=-1)
  return jnp.maximum(0.0, 1.0 + other - true_score)


@dataclasses.dataclass(frozen=True)
class Model:
  """A classifier as pure functions (see module docstring).

  Attributes:
    name: model name.
    module: the flax module.
    feature_shape: shape of one example, e.g. ``(128, 6)``.
    num_classes: number of classes.
    loss_name: ``"cross_entropy"`` or ``"hinge"``.
    conv_lowering: ``"patches"`` (default): every supported ``flax.linen.Conv`` runs
      as patches x kernel, a matmul that stays fast when vmapped over clients and
      examples (`fedjax_dp.models.conv_lowering`); ``"native"``: flax's own
      ``lax.conv_general_dilated``. Same parameters, outputs equal to float tolerance.
  """
  name: str
  module: nn.Module
  feature_shape: tuple
  num_classes: int
  loss_name: str = "cross_entropy"
  conv_lowering: str = "patches"

  def init(self, key) -> Params:
    """Initial parameters (pytree of float32 arrays) from a PRNG key."""
    dummy = jnp.zeros((1,) + tuple(self.feature_shape), jnp.float32)
    return self.module.init(key, dummy)["params"]

  def apply(self, params: Params, x) -> jax.Array:
    """Logits float32 ``[B, num_classes]`` for ``x`` float32 ``[B, *feature_shape]``."""
    # flax 0.12 annotates Module.apply as `Any | tuple[Any, variables]` whatever
    # ``mutable``; with mutable=False (the default) it returns the module's output alone.
    with lowered_convs(self.conv_lowering == "patches"):
      return cast(jax.Array, self.module.apply({"params": params}, x))

  def per_example_loss(self, logits, labels) -> jax.Array:
    """Loss float32 ``[B]`` (cross-entropy or multi-class hinge)."""
    if self.loss_name == "hinge":
      return multiclass_hinge_loss(logits, labels)
    return cross_entropy_loss(logits, labels)

  def loss_and_logits(self, params, x, y):
    logits = self.apply(params, x)
    return self.per_example_loss(logits, y), logits


def count_params(params: Params) -> int:
  """Total number of scalar parameters in a pytree."""
  return int(sum(np.prod(np.shape(l)) for l in jax.tree_util.tree_leaves(params)))


def create_model(name: str, feature_shape: Sequence[int], num_classes: int,
                 hidden: Optional[Sequence[int]] = None, activation: str = "relu",
                 loss: str = "cross_entropy") -> Model:
  """Builds a named model.

  Args:
    name: one of ``MODEL_NAMES``: ``"mlp"`` (hidden widths ``hidden``), ``"cnn"``
      (2-conv MNIST-style CNN, needs an image ``[H, W]`` or ``[H, W, C]``), ``"lenet5"``
      (LeNet-5, the amplitude-varying paper's CNN), ``"cnn_fc50"`` (two 5x5 convolutions,
      a per-example norm and a 50-unit dense layer: LAPA's CNN, 21,880 parameters),
      ``"cnn3"`` (RDP-PFL's 3-conv CIFAR CNN; its
      dense widths are ``hidden``, default (200, 200) -> give (128, 256) for the
      paper's),
      ``"har_cnn"`` (1-D CNN, needs ``[T, channels]``), ``"linear"``,
      ``"char_lstm"`` (LEAF's character LSTM, `fedjax_dp.models.sequence.CharLSTM`) and
      ``"char_transformer"`` (a small causal transformer); the two character models
      need token windows ``[T]`` whose ids are the classes (``num_classes`` is the
      vocabulary size).
    feature_shape: shape of one example.
    num_classes: number of classes (>= 2).
    hidden: hidden dense widths of ``"mlp"`` and ``"cnn3"`` (default ``(200, 200)``);
      the LSTM layers' widths of ``"char_lstm"`` (default ``(256, 256)``, LEAF's); the
      width of each block of ``"char_transformer"`` (all equal; default ``(128,
      128)``: two blocks of width 128, 4 heads).
    activation: MLP activation, ``"relu"`` or ``"linear"``.
    loss: ``"cross_entropy"`` or ``"hinge"``.

  Raises:
    FedJaxDpError: unknown name/loss/activation, or a feature shape the model cannot take.
  """
  check_choice("model", name, MODEL_NAMES)
  check_choice("loss", loss, LOSSES)
  check_choice("activation", activation, ("relu", "linear"))
  feature_shape = tuple(int(d) for d in feature_shape)
  if num_classes < 2:
    raise FedJaxDpError(f"num_classes must be >= 2, got {num_classes}.")
  if name in SEQUENCE_MODELS:
    return _sequence_model(name, feature_shape, num_classes, hidden, loss)
  hidden = (200, 200) if hidden is None else hidden
  if name == "mlp":
    module = modules.MLP(hidden=tuple(hidden), num_classes=num_classes, activation=activation)
  elif name == "cnn":
    if len(feature_shape) not in (2, 3):
      raise FedJaxDpError(
          f"model 'cnn' needs image features [H, W] or [H, W, C], got {feature_shape}.")
    module = modules.CNN(num_classes=num_classes)
  elif name == "cnn3":
    if len(feature_shape) not in (2, 3) or min(feature_shape[:2]) < 8:
      raise FedJaxDpError(f"model 'cnn3' needs images of at least 8x8 ([H, W] or "
                          f"[H, W, C]), got {feature_shape}.")
    module = modules.CNN3(num_classes=num_classes, hidden=tuple(hidden))
  elif name == "lenet5":
    if len(feature_shape) not in (2, 3) or min(feature_shape[:2]) < 16:
      raise FedJaxDpError(f"model 'lenet5' needs images of at least 16x16 ([H, W] or "
                          f"[H, W, C]), got {feature_shape}.")
    module = modules.LeNet5(num_classes=num_classes)
  elif name == "cnn_fc50":
    if len(feature_shape) not in (2, 3) or min(feature_shape[:2]) < 16:
      raise FedJaxDpError(f"model 'cnn_fc50' needs images of at least 16x16 ([H, W] or "
                          f"[H, W, C]), got {feature_shape}.")
    module = modules.CNNFC50(num_classes=num_classes)
  elif name == "har_cnn":
    if len(feature_shape) != 2:
      raise FedJaxDpError(
          f"model 'har_cnn' needs [time, channels] features, got {feature_shape}.")
    module = modules.HARConv1D(num_classes=num_classes)
  else:
    module = modules.Linear(num_classes=num_classes)
  return Model(name=name, module=module, feature_shape=feature_shape,
               num_classes=num_classes, loss_name=loss)


def _sequence_model(name: str, feature_shape: tuple, num_classes: int,
                    hidden: Optional[Sequence[int]], loss: str) -> Model:
  """``char_lstm`` / ``char_transformer`` (see `create_model`)."""
  from fedjax_dp.models import sequence
  if len(feature_shape) != 1 or feature_shape[0] < 1:
    raise FedJaxDpError(f"model {name!r} needs token windows [T] (one integer id per "
                        f"position), got feature shape {feature_shape}.", option="model")
  widths = tuple(int(w) for w in (SEQUENCE_DEFAULT_WIDTHS[name] if hidden is None
                                   else hidden))
  if not widths or min(widths) < 1:
    raise FedJaxDpError(f"hidden must hold positive widths for {name!r}, got {widths}.",
                        option="hidden")
  if name == "char_lstm":
    module: nn.Module = sequence.CharLSTM(vocab_size=num_classes, hidden=widths)
  else:
    if len(set(widths)) != 1 or widths[0] % 4:
      raise FedJaxDpError(f"hidden for 'char_transformer' gives one width per block, all "
                          f"equal and a multiple of its 4 heads (e.g. 128,128), got "
                          f"{widths}.", option="hidden")
    module = sequence.CharTransformer(vocab_size=num_classes, max_len=feature_shape[0],
                                      widths=widths)
  return Model(name=name, module=module, feature_shape=feature_shape,
               num_classes=num_classes, loss_name=loss)


def default_model_name(feature_shape: Sequence[int]) -> str:
  """The model for data without a registered default (a user's npz file or arrays):
  ``"cnn"`` for images (``[H, W]`` or ``[H, W, C]`` with H, W >= 8), else ``"mlp"``
  (flat features, or anything else: the MLP flattens its input)."""
  shape = tuple(feature_shape)
  if len(shape) in (2, 3) and min(shape[:2]) >= 8:
    return "cnn"
  return "mlp"


def from_module(module: nn.Module, feature_shape: Sequence[int], num_classes: int,
                name: Optional[str] = None, loss: str = "cross_entropy",
                conv_lowering: str = "patches") -> Model:
  """Wraps any flax linen module as a `Model` (your own architecture, no fork needed).

  The module is checked on a dummy batch ``float32 [2, *feature_shape]`` with
  ``jax.eval_shape`` (shapes only, nothing is computed): ``module.init(key, x)`` must
  create only ``params`` (no mutable collections such as BatchNorm's ``batch_stats``:
  use LayerNorm or GroupNorm, which also suit per-example clipping) and
  ``module.apply({"params": params}, x)`` must return floating logits
  ``[2, num_classes]`` without needing random numbers (no active dropout).

  Example::

    class Net(nn.Module):
      @nn.compact
      def __call__(self, x):                      # x: float32 [B, 16]
        return nn.Dense(4)(nn.relu(nn.Dense(32)(x)))  # logits [B, 4]

    model = from_module(Net(), feature_shape=(16,), num_classes=4)
    fedjax_dp.runs.run(cfg, data=fd, model=model)   # or model=Net()

  Args:
    module: a flax ``nn.Module`` instance.
    feature_shape: shape of one example, e.g. ``(16,)`` or ``(28, 28, 1)``.
    num_classes: number of classes (>= 2).
    name: the model's name in summaries (default: the module's class name).
    loss: ``"cross_entropy"`` or ``"hinge"``.
    conv_lowering: ``"patches"`` (default: each supported ``nn.Conv`` computed as
      patches x kernel, `fedjax_dp.models.conv_lowering`) or ``"native"`` (flax's
      convolution).

  Returns:
    A `Model`.

  Raises:
    FedJaxDpError (option ``model``): not a module instance, ``init`` or ``apply``
      fails on the dummy batch (the error's message), other variable collections than
      ``params``, or logits of another shape or dtype.
  """
  check_choice("loss", loss, LOSSES)
  check_choice("conv_lowering", conv_lowering, CONV_LOWERINGS)
  if isinstance(module, type) and issubclass(module, nn.Module):
    raise FedJaxDpError(f"model must be a flax module instance, got the class "
                        f"{module.__name__} (write {module.__name__}(...)).", option="model")
  if not isinstance(module, nn.Module):
    raise FedJaxDpError(f"model must be a flax linen nn.Module (or a fedjax_dp.models.Model)"
                        f", got {type(module).__name__}.", option="model")
  if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or (
      num_classes < 2):
    raise FedJaxDpError(f"num_classes must be an integer >= 2, got {num_classes!r}.",
                        option="num_classes")
  feature_shape = tuple(int(d) for d in feature_shape)
  name = name or type(module).__name__
  dummy = jax.ShapeDtypeStruct((2,) + feature_shape, jnp.float32)
  try:
    variables = jax.eval_shape(module.init, jax.random.key(0), dummy)
  except Exception as e:  # the user's module: report its error, whatever it is
    raise FedJaxDpError(f"model {name!r}: init on a dummy batch float32 [2, "
                        f"*{feature_shape}] failed: {type(e).__name__}: {e}",
                        option="model") from e
  extra = sorted(set(variables) - {"params"})
  if extra or "params" not in variables:
    raise FedJaxDpError(
        f"model {name!r}: init must create only 'params', got collections "
        f"{sorted(variables)} (mutable state such as BatchNorm's batch_stats is not "
        "supported in DP federated training; use LayerNorm or GroupNorm).", option="model")
  try:
    logits = jax.eval_shape(lambda p, x: module.apply({"params": p}, x),
                            variables["params"], dummy)
  except Exception as e:
    raise FedJaxDpError(f"model {name!r}: apply on a dummy batch float32 [2, "
                        f"*{feature_shape}] failed: {type(e).__name__}: {e} (a model must"
                        " be deterministic: no dropout that needs an rng)",
                        option="model") from e
  if not (hasattr(logits, "shape") and tuple(logits.shape) == (2, num_classes)
          and jnp.issubdtype(logits.dtype, jnp.floating)):
    got = (f"{getattr(logits, 'dtype', '')} {tuple(logits.shape)}" if hasattr(logits, "shape")
           else type(logits).__name__)
    raise FedJaxDpError(f"model {name!r} must return logits [batch, num_classes] = [2, "
                        f"{num_classes}] (floating) for a batch of 2 examples of shape "
                        f"{feature_shape}, got {got}.", option="model")
  return Model(name=name, module=module, feature_shape=feature_shape,
               num_classes=int(num_classes), loss_name=loss, conv_lowering=conv_lowering)


def as_model(model: Any, feature_shape: Sequence[int], num_classes: int,
             name: Optional[str] = None) -> Model:
  """``model`` (a `Model` or a flax module) as a `Model` for data with
  ``feature_shape`` and ``num_classes``.

  Raises:
    FedJaxDpError (option ``model``): a `Model` built for another feature shape or
      number of classes, or what `from_module` raises.
  """
  feature_shape = tuple(int(d) for d in feature_shape)
  if isinstance(model, Model):
    if (tuple(model.feature_shape), model.num_classes) != (feature_shape, num_classes):
      raise FedJaxDpError(
          f"model {model.name!r} was built for features {tuple(model.feature_shape)} and "
          f"{model.num_classes} classes, but the data has {feature_shape} and "
          f"{num_classes}.", option="model")
    return model
  return from_module(model, feature_shape, num_classes, name=name)


def is_factory_spec(text: object) -> TypeGuard[str]:
  """Whether ``text`` names a model factory (``package.module:factory``) rather than one
  of `MODEL_NAMES` (a str with a colon; narrowed to a str)."""
  return isinstance(text, str) and ":" in text


def check_factory_spec(text: str) -> str:
  """``text`` if it is ``package.module:factory`` (dotted module, one attribute name);
  nothing is imported.

  Raises:
    FedJaxDpError (option ``model``): another syntax.
  """
  if not isinstance(text, str) or not _FACTORY_SPEC.fullmatch(text.strip()):
    raise FedJaxDpError(f"model must be one of {', '.join(map(repr, MODEL_NAMES))} or "
                        f"package.module:factory (a function (feature_shape, num_classes)"
                        f" -> flax module), got {text!r}.", option="model")
  return text.strip()


def load_model_factory(spec: str) -> Callable[..., Any]:
  """Imports the factory named by ``spec`` (``package.module:factory``).

  The current directory is importable, as with ``python -m``: it is put on
  ``sys.path`` when it is not there already.

  Raises:
    FedJaxDpError (option ``model``): bad syntax, the module cannot be imported (with
      the ImportError's message), no such attribute (listing the module's public
      callables), or the attribute is not callable.
  """
  spec = check_factory_spec(spec)
  module_name, attr = spec.split(":")
  cwd = os.getcwd()
  if "" not in sys.path and cwd not in sys.path:
    sys.path.insert(0, cwd)
  try:
    mod = importlib.import_module(module_name)
  except (ImportError, SyntaxError) as e:
    raise FedJaxDpError(f"model {spec!r}: cannot import {module_name!r}: "
                        f"{type(e).__name__}: {e} (the module must be importable from the "
                        f"current directory {cwd!r} or the Python path).",
                        option="model") from e
  if not hasattr(mod, attr):
    public = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_"))
    raise FedJaxDpError(f"model {spec!r}: module {module_name!r} ({mod.__file__}) has no "
                        f"attribute {attr!r}; its callables: {', '.join(public) or 'none'}.",
                        option="model")
  factory = getattr(mod, attr)
  if not callable(factory):
    raise FedJaxDpError(f"model {spec!r}: {attr} is a {type(factory).__name__}, not a "
                        "function (feature_shape, num_classes) -> flax module.",
                        option="model")
  return factory


def model_from_factory(spec: str, feature_shape: Sequence[int], num_classes: int) -> Model:
  """The `Model` that the factory ``spec`` (``package.module:factory``) builds for this
  data: ``factory(feature_shape, num_classes)`` returns a flax module (wrapped by
  `from_module`, named ``spec``) or a `Model`.

  Args:
    spec: ``package.module:factory``, e.g. ``my_models:small_cnn``.
    feature_shape: shape of one example (a tuple of ints).
    num_classes: number of classes.

  Raises:
    FedJaxDpError (option ``model``): what `load_model_factory` raises; a factory that
      does not take ``(feature_shape, num_classes)``; one that returns something else
      than a flax module or a `Model`; what `as_model` raises.
  """
  factory = load_model_factory(spec)
  feature_shape = tuple(int(d) for d in feature_shape)
  try:
    inspect.signature(factory).bind(feature_shape, num_classes)
  except TypeError as e:
    raise FedJaxDpError(f"model {spec!r}: the factory must take (feature_shape, "
                        f"num_classes), but its signature is "
                        f"{inspect.signature(factory)} ({e}).", option="model") from e
  except ValueError:  # no signature (a builtin): let the call decide
    pass
  built = factory(feature_shape, num_classes)
  if not isinstance(built, (Model, nn.Module)):
    raise FedJaxDpError(f"model {spec!r}: the factory returned {type(built).__name__}, "
                        "expected a flax nn.Module instance or a fedjax_dp.models.Model.",
                        option="model")
  return as_model(built, feature_shape, num_classes, name=spec.strip())
