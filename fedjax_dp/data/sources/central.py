"""`CentralData`: a dataset as central (not yet federated) train/test arrays."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

__all__ = [
    "CentralData", "scale_images",
]


@dataclasses.dataclass(frozen=True)
class CentralData:
  """Central train/test arrays as returned by the image sources.

  Attributes:
    name: dataset name, e.g. ``"fashion_mnist"``.
    train_x: float32 ``[n_train, *feature_shape]``; images in ``[0, 1]``, ``H x W x C``.
    train_y: int32 ``[n_train]`` labels in ``[0, num_classes)``.
    test_x: float32 ``[n_test, *feature_shape]``, or None.
    test_y: int32 ``[n_test]``, or None.
    num_classes: number of classes.
    source: where the arrays came from (path, package or TFDS name).
    is_subset: True when this is only a subset of the named dataset.
  """

  name: str
  train_x: np.ndarray
  train_y: np.ndarray
  test_x: Optional[np.ndarray]
  test_y: Optional[np.ndarray]
  num_classes: int
  source: str
  is_subset: bool = False


def scale_images(images: np.ndarray) -> np.ndarray:
  """uint8 ``[n, H, W]`` or ``[n, H, W, C]`` -> float32 ``[n, H, W, C]`` in ``[0, 1]``."""
  images = np.asarray(images)
  if images.ndim == 3:
    images = images[..., None]
  out = images.astype(np.float32)
  out /= np.float32(255.0)
  return out
