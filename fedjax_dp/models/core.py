"""`Model`: a flax module seen as pure functions ``init``, ``apply`` and a loss.

The federated engine only needs

* ``init(key) -> params`` (a pytree of float32 arrays),
* ``apply(params, x) -> logits``: ``x float32 [B, *feature_shape]`` to ``float32
  [B, num_classes]``,
* ``per_example_loss(logits, labels) -> float32 [B]`` with ``labels int32 [B]``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.models import modules
from fedjax_dp.validation import FedJaxDpError, check_choice

Params = Any

MODEL_NAMES = ("mlp", "cnn", "cnn3", "lenet5", "cnn_fc50", "har_cnn", "linear")
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
  """
  name: str
  module: nn.Module
  feature_shape: tuple
  num_classes: int
  loss_name: str = "cross_entropy"

  def init(self, key) -> Params:
    """Initial parameters (pytree of float32 arrays) from a PRNG key."""
    dummy = jnp.zeros((1,) + tuple(self.feature_shape), jnp.float32)
    return self.module.init(key, dummy)["params"]

  def apply(self, params: Params, x) -> jax.Array:
    """Logits float32 ``[B, num_classes]`` for ``x`` float32 ``[B, *feature_shape]``."""
    return self.module.apply({"params": params}, x)

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
                 hidden: Sequence[int] = (200, 200), activation: str = "relu",
                 loss: str = "cross_entropy") -> Model:
  """Builds a named model.

  Args:
    name: one of ``MODEL_NAMES``: ``"mlp"`` (hidden widths ``hidden``), ``"cnn"``
      (2-conv MNIST-style CNN, needs an image ``[H, W]`` or ``[H, W, C]``), ``"lenet5"``
      (LeNet-5, paper 004's CNN), ``"cnn_fc50"`` (two 5x5 convolutions, a per-example
      norm and a 50-unit dense layer: paper 001's CNN, 21,880 parameters), ``"cnn3"`` (paper 003's 3-conv CIFAR CNN; its
      dense widths are ``hidden``, default (200, 200) -> give (128, 256) for the
      paper's),
      ``"har_cnn"`` (1-D CNN, needs ``[T, channels]``), ``"linear"``.
    feature_shape: shape of one example.
    num_classes: number of classes (>= 2).
    hidden: hidden dense widths of ``"mlp"`` and ``"cnn3"``.
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
