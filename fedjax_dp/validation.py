"""Argument checks shared by the whole library.

Every public entry point validates its user-facing arguments on the host, before
anything is traced or compiled, so that a user's mistake surfaces as a clear
``ValueError`` naming the argument, the value received and what is allowed, never
as a traceback from deep inside JAX.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import numpy as np

__all__ = [
    "FedJaxDpError", "check_finite", "check_positive", "check_non_negative",
    "check_epsilon", "check_delta", "check_probability", "check_int", "check_choice",
    "check_weights",
]


_FLOAT32_TINY = float(np.finfo(np.float32).tiny)


class FedJaxDpError(ValueError):
  """Base class for fedjax_dp input errors (a ``ValueError``).

  Attributes:
    option: the name of the option (argument, config field) whose value was refused,
      when the check knows it (every ``check_*`` here sets it), else None. The command
      line uses it to say where the value came from (a flag or a config file key).
  """

  def __init__(self, message: str, option: Optional[str] = None):
    super().__init__(message)
    self.option = option


def _invalid(name: str, message: str) -> FedJaxDpError:
  return FedJaxDpError(message, option=name)


def _as_float(name: str, value: Any) -> float:
  if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.number)):
    if isinstance(value, np.ndarray) and value.ndim == 0:
      return float(value)
    raise _invalid(name, 
        f"{name} must be a real number, got {value!r} of type {type(value).__name__}.")
  return float(value)


def check_finite(name: str, value: Any, allowed: str = "") -> float:
  """Returns ``value`` as a float; raises if it is not a finite real number.

  ``allowed`` (e.g. ``"> 0"``) is added to the message, so that a NaN or infinite value
  is told what is allowed as well.
  """
  v = _as_float(name, value)
  if not math.isfinite(v):
    what = f"a finite number {allowed}" if allowed else "finite"
    raise _invalid(name, f"{name} must be {what}, got {value!r}.")
  return v


def check_positive(name: str, value: Any) -> float:
  """Returns ``value`` as a float; raises unless it is finite and > 0."""
  v = check_finite(name, value, "> 0")
  if v <= 0:
    raise _invalid(name, f"{name} must be > 0, got {value!r}.")
  return v


def check_non_negative(name: str, value: Any) -> float:
  """Returns ``value`` as a float; raises unless it is finite and >= 0."""
  v = check_finite(name, value, ">= 0")
  if v < 0:
    raise _invalid(name, f"{name} must be >= 0, got {value!r}.")
  return v


def check_epsilon(value: Any, name: str = "epsilon") -> float:
  """A privacy budget epsilon: finite and > 0."""
  return check_positive(name, value)


def check_delta(value: Any, name: str = "delta") -> float:
  """A privacy parameter delta: finite, in the open interval (0, 1)."""
  v = check_finite(name, value, "in the open interval (0, 1)")
  if not 0.0 < v < 1.0:
    raise _invalid(name, f"{name} must be in the open interval (0, 1), got {value!r}.")
  return v


def check_probability(name: str, value: Any, allow_zero: bool = False) -> float:
  """A sampling rate: in (0, 1] (or [0, 1] with ``allow_zero``)."""
  v = check_finite(name, value, "in [0, 1]" if allow_zero else "in (0, 1]")
  lo_ok = v >= 0.0 if allow_zero else v > 0.0
  if not (lo_ok and v <= 1.0):
    interval = "[0, 1]" if allow_zero else "(0, 1]"
    raise _invalid(name, f"{name} must be in {interval}, got {value!r}.")
  if 0.0 < v < _FLOAT32_TINY:
    # The compiled round carries rates in float32: this one would silently become 0.
    raise _invalid(name, f"{name} must be {'0 or ' if allow_zero else ''}at least "
                        f"{_FLOAT32_TINY:.3g} (the smallest "
                        f"normal float32, the precision rounds run in), got {value!r}.")
  return v


def check_int(name: str, value: Any, minimum: Optional[int] = None,
              maximum: Optional[int] = None) -> int:
  """An integer (bools refused) within [minimum, maximum]."""
  if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
    if isinstance(value, float) and value.is_integer():
      value = int(value)
    else:
      raise _invalid(name, f"{name} must be an integer, got {value!r}.")
  v = int(value)
  if minimum is not None and v < minimum:
    raise _invalid(name, f"{name} must be >= {minimum}, got {v}.")
  if maximum is not None and v > maximum:
    raise _invalid(name, f"{name} must be <= {maximum}, got {v}.")
  return v


def check_choice(name: str, value: Any, allowed) -> Any:
  """``value`` must be one of ``allowed``."""
  allowed = list(allowed)
  if value not in allowed:
    raise _invalid(name, 
        f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}.")
  return value


def check_weights(name: str, weights: Any, size: Optional[int] = None,
                  sum_to_one: bool = False, atol: float = 1e-6) -> np.ndarray:
  """A non-negative, finite weight vector (optionally of a given size, summing to 1).

  Returns:
    float64 ``[n]``.

  Raises:
    FedJaxDpError: naming ``name``: not 1-D, wrong length, non-finite or negative
      entries, or (with ``sum_to_one``) a sum farther than ``atol`` from 1.
  """
  w = np.asarray(weights, dtype=np.float64)
  if w.ndim != 1:
    raise _invalid(name, f"{name} must be a 1-D vector, got shape {w.shape}.")
  if size is not None and w.shape[0] != size:
    raise _invalid(name, f"{name} must have length {size}, got {w.shape[0]}.")
  if not np.all(np.isfinite(w)):
    raise _invalid(name, f"{name} must be finite; got non-finite entries.")
  if np.any(w < 0):
    raise _invalid(name, f"{name} must be non-negative; got min {w.min()!r}.")
  if sum_to_one and abs(w.sum() - 1.0) > atol:
    raise _invalid(name, f"{name} must sum to 1, got sum {w.sum()!r}.")
  return w
