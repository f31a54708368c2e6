"""What a ledger is fed, checked and run-length encoded: the per-round arrays of noise
multipliers, sampling rates and steps (`check_rounds`, `run_lengths`), the truncation
model of padded Poisson draws (`check_truncation`), and the runs of identical rounds a
`fedjax_dp.privacy.ledger.PrivacyLedger` keeps (`Run`).

Accounting is not done here: a ledger turns each run into its DpEvent
(`fedjax_dp.privacy.events.make_dp_event`) and composes it
(`fedjax_dp.privacy.accountants`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Tuple

import dp_accounting
import numpy as np

from fedjax_dp.privacy.events import Truncation
from fedjax_dp.validation import FedJaxDpError, check_int

__all__ = ["Run", "as_vector", "check_rounds", "check_truncation", "run_lengths",
           "split_self_composed"]


@dataclasses.dataclass
class Run:
  """``count`` consecutive identical rounds of a ledger.

  Attributes:
    event: the DpEvent of one of the rounds (its ``dp_steps`` releases composed).
    noise_multiplier: z >= 0 of each round (float64, as recorded).
    sampling_rate: q in (0, 1] of each round.
    dp_steps: noisy releases per round (int >= 1).
    count: rounds in the run (int >= 1).
  """
  event: dp_accounting.DpEvent
  noise_multiplier: float
  sampling_rate: float
  dp_steps: int
  count: int


def as_vector(name: str, values: Any, length: Optional[int], dtype) -> np.ndarray:
  """``values`` as a 1-D ``[length]`` array of ``dtype`` (a scalar is broadcast when
  ``length`` is given; float32 converts exactly to float64).

  Raises:
    FedJaxDpError: naming ``name``: not 1-D, not ``length`` entries, or not numeric.
  """
  arr = np.asarray(values)
  if arr.ndim == 0 and length is not None:
    arr = np.full(length, arr)
  if arr.ndim != 1:
    raise FedJaxDpError(f"{name} must be a 1-D array (one entry per round), got shape "
                        f"{arr.shape}.")
  if length is not None and arr.shape[0] != length:
    raise FedJaxDpError(f"{name} must have {length} entries (one per round), got "
                        f"{arr.shape[0]}.")
  if arr.dtype.kind not in "biuf":
    raise FedJaxDpError(f"{name} must be numeric, got dtype {arr.dtype}.")
  return arr.astype(dtype)


def check_rounds(noise_multipliers: Any, sampling_rates: Any, dp_steps: Any
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """L rounds' values checked: ``(z, q, steps)``, float64 ``[L]``, float64 ``[L]`` and
  int64 ``[L]``.

  Args:
    noise_multipliers: 1-D ``[L]`` of z >= 0, finite.
    sampling_rates: ``[L]`` or a scalar, each in (0, 1].
    dp_steps: ``[L]`` or a scalar, integers >= 1 (integer-valued floats accepted).

  Raises:
    FedJaxDpError: wrong shapes, or an entry out of range, NaN or inf (the message names
      the array and the index).
  """
  z = as_vector("noise_multipliers", noise_multipliers, None, np.float64)
  n = z.shape[0]
  q = as_vector("sampling_rates", sampling_rates, n, np.float64)
  steps_f = as_vector("dp_steps", dp_steps, n, np.float64)
  for name, arr, ok, allowed in (
      ("noise_multipliers", z, np.isfinite(z) & (z >= 0), "finite and >= 0"),
      ("sampling_rates", q, np.isfinite(q) & (q > 0) & (q <= 1), "in (0, 1]"),
      ("dp_steps", steps_f, np.isfinite(steps_f) & (steps_f >= 1)
       & (steps_f == np.round(steps_f)), "integers >= 1")):
    if not ok.all():
      i = int(np.argmin(ok))
      raise FedJaxDpError(f"{name}[{i}] must be {allowed}, got {arr[i]!r}.")
  return z, q, steps_f.astype(np.int64)


def run_lengths(z: np.ndarray, q: np.ndarray, steps: np.ndarray
                ) -> List[Tuple[float, float, int, int]]:
  """The maximal runs of identical consecutive rounds of checked ``[L]`` arrays
  (`check_rounds`): ``[(z, q, steps, count), ...]`` in order (empty for L = 0)."""
  n = z.shape[0]
  if not n:
    return []
  change = np.flatnonzero((z[1:] != z[:-1]) | (q[1:] != q[:-1])
                          | (steps[1:] != steps[:-1])) + 1
  bounds = np.concatenate([[0], change, [n]])
  return [(float(z[a]), float(q[a]), int(steps[a]), int(b - a))
          for a, b in zip(bounds[:-1], bounds[1:])]


def check_truncation(truncation: Any) -> Optional[Truncation]:
  """``truncation`` as a checked `fedjax_dp.privacy.events.Truncation` (a dict of its
  fields is accepted), or None.

  Raises:
    FedJaxDpError: not a Truncation, dict or None, or a field that is not an int >= 1.
  """
  if truncation is None:
    return None
  if isinstance(truncation, dict):
    truncation = Truncation(**truncation)
  if not isinstance(truncation, Truncation):
    raise FedJaxDpError(f"truncation must be a Truncation or None, got "
                        f"{type(truncation).__name__}.")
  return Truncation(check_int("truncation.population_size", truncation.population_size,
                              minimum=1),
                    check_int("truncation.cap", truncation.cap, minimum=1),
                    check_int("truncation.draws_per_step", truncation.draws_per_step,
                              minimum=1))


def split_self_composed(event: dp_accounting.DpEvent
                        ) -> Tuple[dp_accounting.DpEvent, int]:
  """``SelfComposed(base, k) -> (base, k)``; any other event -> ``(event, 1)``."""
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.event, event.count
  return event, 1
