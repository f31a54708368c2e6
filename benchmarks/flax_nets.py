"""Flax linen modules shared by fedjax_dp's benchmark and the jax-privacy peer (flax
only: the jax-privacy environment imports this file, without fedjax_dp)."""

from typing import Any

import flax.linen as nn


class UserCNN(nn.Module):
  """The CIFAR-shaped CNN of workload ``dpsgd_user_cnn``, written as a flax user writes
  it: NHWC input ``[B, 32, 32, 3]``, ``nn.Conv`` (SAME padding, flax's default),
  ``nn.avg_pool``, ``nn.Dense``; logits ``[B, num_classes]``."""
  num_classes: int = 10
  #: The convolution class (None: ``nn.Conv``); `benchmarks.conv` passes
  #: `fedjax_dp.models.layers.Conv` to compare the same network on our patch layer.
  conv_cls: Any = None

  @nn.compact
  def __call__(self, x):
    conv = self.conv_cls or nn.Conv
    x = nn.relu(conv(16, (3, 3))(x))
    x = nn.avg_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(conv(32, (3, 3))(x))
    x = nn.avg_pool(x, (2, 2), strides=(2, 2))
    return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))


class CNN(nn.Module):
  """FedJAX's EMNIST CNN without dropout (conv32-conv64-maxpool-dense128), NHWC input
  (``[B, 28, 28, 1]``; also pfl-research's CIFAR-10 ``simple_cnn`` on ``[B, 32, 32, 3]``,
  `benchmarks.gpu.cifar10`)."""
  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(32, (3, 3), padding="VALID")(x))
    x = nn.relu(nn.Conv(64, (3, 3), padding="VALID")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Dense(128)(x.reshape((x.shape[0], -1))))
    return nn.Dense(self.num_classes)(x)
