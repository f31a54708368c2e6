"""Flax (linen) modules used by the library's tasks.

All modules map a batch of features ``x: float32 [B, *feature_shape]`` to logits
``float32 [B, num_classes]`` (``[B, 1]`` for the binary linear model with hinge loss is
not used: the linear model always outputs ``num_classes`` scores).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from fedjax_dp.models.layers import Conv, max_pool

__all__ = [
    "MLP", "CNN", "LeNet5", "CNNFC50", "CNN3", "HARConv1D", "Linear",
]


class MLP(nn.Module):
  """Multi-layer perceptron: flatten, ``hidden`` dense layers, dense output.

  Attributes:
    hidden: widths of the hidden layers, e.g. ``(200, 200)`` for the classic
      784-200-200-10 MLP of McMahan et al. (2017).
    num_classes: number of outputs.
    activation: ``"relu"`` or ``"linear"`` (identity; some papers use linear MLPs).
  """
  hidden: Sequence[int]
  num_classes: int
  activation: str = "relu"

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1))
    act = nn.relu if self.activation == "relu" else (lambda v: v)
    for width in self.hidden:
      x = act(nn.Dense(width)(x))
    return nn.Dense(self.num_classes)(x)


class CNN(nn.Module):
  """Small MNIST-style CNN (after the FedAvg / Reddi et al. EMNIST model).

  conv(32, 3x3) -> relu -> conv(64, 3x3) -> relu -> maxpool 2x2 -> dense(hidden) ->
  relu -> dense(num_classes). Input ``[B, H, W, C]`` (a ``[B, H, W]`` input gets C=1).
  Convolutions are `fedjax_dp.models.layers.Conv` (fast under vmap over clients).
  """
  num_classes: int
  features: Sequence[int] = (32, 64)
  hidden: int = 128

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    for f in self.features:
      x = nn.relu(Conv(f, (3, 3), padding="VALID")(x))
    x = max_pool(x, (2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(self.hidden)(x))
    return nn.Dense(self.num_classes)(x)


class LeNet5(nn.Module):
  """LeNet-5 layout: conv(6, 5x5) -> relu -> maxpool 2 -> conv(16, 5x5) -> relu ->
  maxpool 2 -> dense 120 -> relu -> dense 84 -> relu -> dense(num_classes); VALID
  convolutions. The "2 conv (kernel 5) + 3 FC" CNN of Yuan et al. (amplitude-varying perturbation,
  IEEE TIFS 2023, Sec. V-C; the layer layout is our reading of the paper): 44,426
  parameters on 28x28x1.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    for f in (6, 16):
      x = max_pool(nn.relu(Conv(f, (5, 5), padding="VALID")(x)), (2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(120)(x))
    x = nn.relu(nn.Dense(84)(x))
    return nn.Dense(self.num_classes)(x)


class CNNFC50(nn.Module):
  """The CNN of Sun et al. (LAPA, arXiv 2505.19823, Sec. V-A): two convolutional layers each
  followed by max pooling, a normalisation layer, a 50-unit dense layer with ReLU and
  the output layer. The paper omits kernel sizes and widths; we take the classic
  PyTorch MNIST net (our choice): conv(10, 5x5, VALID) -> maxpool 2
  -> relu -> conv(20, 5x5, VALID) -> maxpool 2 -> relu -> norm -> dense 50 -> relu ->
  dense(num_classes): 21,880 parameters on 28x28x1.

  The paper's BatchNorm is replaced by GroupNorm with one group (per-example
  normalisation over H, W and the 20 channels, with a per-channel scale and bias: the
  same 40 parameters): BatchNorm's batch coupling and running statistics break
  per-example clipping and leak batch statistics outside the noise.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    for f in (10, 20):
      x = nn.relu(max_pool(Conv(f, (5, 5), padding="VALID")(x), (2, 2)))
    x = nn.GroupNorm(num_groups=1)(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(50)(x))
    return nn.Dense(self.num_classes)(x)


class CNN3(nn.Module):
  """The CIFAR-10 CNN of Wei et al. (RDP-PFL, IEEE TIFS 2023, Sec. V-A): three blocks
  conv(3x3, SAME, stride 1) -> maxpool 2x2 -> relu with 64, 128, 256 filters, then
  dense ``hidden`` widths with relu (the paper's 128 then 256; the last one is the
  "last FC layer" whose width the paper's Fig. 6(b) varies), dense(num_classes).
  Padding is not stated in the paper; SAME (our choice) gives
  930,826 parameters on 32x32x3. Input ``[B, H, W, C]`` (``[B, H, W]`` gets C=1).
  """
  num_classes: int
  features: Sequence[int] = (64, 128, 256)
  hidden: Sequence[int] = (128, 256)

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    for f in self.features:
      x = nn.relu(max_pool(Conv(f, (3, 3), padding="SAME")(x), (2, 2)))
    x = x.reshape((x.shape[0], -1))
    for width in self.hidden:
      x = nn.relu(nn.Dense(width)(x))
    return nn.Dense(self.num_classes)(x)


class HARConv1D(nn.Module):
  """1-D CNN for inertial windows ``[B, T, channels]`` (e.g. HAR 128 x 6).

  Two conv(kernel 5) + relu + maxpool(2) blocks, global average pooling over time,
  dense(hidden) + relu, dense(num_classes). The defaults (16 and 32 filters, 32 hidden
  units: 4,342 parameters for 6 channels and 6 classes) are kept small on purpose: under
  user-level DP the noise norm grows with sqrt(#parameters) while the clipped signal does
  not, and with HAR's 30 clients a 15k-parameter variant (32, 64, 64) learned markedly
  worse at the same epsilon (0.76 vs 0.84 test accuracy after 50 rounds at z = 2). Convolutions are
  `fedjax_dp.models.layers.Conv` (fast under vmap over clients).
  """
  num_classes: int
  features: Sequence[int] = (16, 32)
  hidden: int = 32

  @nn.compact
  def __call__(self, x):
    for f in self.features:
      x = nn.relu(Conv(f, (5,), padding="SAME")(x))
      x = max_pool(x, (2,))
    x = jnp.mean(x, axis=1)
    x = nn.relu(nn.Dense(self.hidden)(x))
    return nn.Dense(self.num_classes)(x)


class Linear(nn.Module):
  """Linear model on flattened features: logits = W x + b (logistic or hinge loss)."""
  num_classes: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))
