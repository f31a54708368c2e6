"""Impact factors: the aggregation weights ``p`` of PADPFL, as host data.

PADPFL (Talaei & Izadi, arXiv:2406.18491) aggregates ``x = sum_i p_i x~_i``
(Eq. 3/11) with weights ("impact factors") that satisfy Eq. (2),
``sum_i p_i = 1, 0 <= p_i <= 1``, and may change over time as
``p^(t+1) = p^(t) + alpha^(t)`` with ``sum_i alpha_i^(t) = 0``, ``|alpha_i^(t)| <= 1``
(Eq. 51). This module builds and checks such weights:

* `uniform`, `data_size`: the two classical choices ``1/N`` and ``m_i / m``.
* `parse_ratio`, `from_part_ratios`: the paper's "a-b-c" notation, one ratio per
  *part* (group of clients), normalised so that ``sum p = 1``:
  ``p_i = r_{part(i)} / sum_k n_k r_k`` with ``n_k`` clients in part ``k``.
  "0-1-2" over parts of 20/20/20 clients gives (0, 1/60, 1/30), the values of the
  paper's Fig. 3 caption.
* `constant_impact_factors`, `piecewise_schedule`, `schedule_from_callable`,
  `switch_schedule`: time-varying weights as a float64 array ``[T, N]`` whose row
  ``t - 1`` is ``p^(t)``, the weights used by aggregation round ``t`` (the proofs
  aggregate ``x~^(t+1)`` with ``p^(t+1)``).
* `check_impact_factor_schedule`: validates a schedule, including Eq. (51).
* `redistribute_dropped`: a client that cannot synchronise gives its weight to the
  others for that round (Sec. V).

All functions return float64 NumPy arrays. They run on the host; the round engine
receives the result as data (no recompilation when it changes).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int, check_positive, check_weights

__all__ = [
    "SUM_ATOL", "SCENARIO4_SWITCH_AFTER", "uniform", "data_size", "parse_ratio",
    "from_part_ratios", "resolve", "constant_impact_factors", "piecewise_schedule",
    "schedule_from_callable", "switch_schedule", "check_impact_factor_schedule", "increments",
    "redistribute_dropped", "SPEC_KEYWORDS", "check_spec", "from_spec",
]

#: Tolerance on ``|sum p - 1|``.
SUM_ATOL = 1e-6
#: Scenario 4 of PADPFL: data quality (and p) change after the 10-th aggregation.
SCENARIO4_SWITCH_AFTER = 10

Ratios = Union[str, Sequence[float], np.ndarray]


def uniform(num_clients: int) -> np.ndarray:
  """Equal impact factors ``p_i = 1 / N`` ("identical p_i" in the paper).

  Args:
    num_clients: N >= 1 (int).

  Returns:
    float64 ``[N]``.

  Raises:
    FedJaxDpError: ``num_clients`` not an integer >= 1.
  """
  n = check_int("num_clients", num_clients, minimum=1)
  return np.full(n, 1.0 / n)


def data_size(counts: Any) -> np.ndarray:
  """Data-size weights ``p_i = m_i / sum_j m_j`` (FedAvg's choice; PADPFL, Sec. I).

  Args:
    counts: ``[N]`` non-negative example counts (ints or floats), not all zero.

  Returns:
    float64 ``[N]``.

  Raises:
    FedJaxDpError: ``counts`` not 1-D, non-finite, negative or all zero.
  """
  m = check_weights("counts", counts)
  if m.size == 0 or m.sum() <= 0:
    raise FedJaxDpError(f"counts must contain at least one positive count, got {counts!r}.")
  return m / m.sum()


def parse_ratio(spec: str, name: str = "ratio") -> np.ndarray:
  """Parses the paper's ratio notation, e.g. ``"0-1-2"`` or ``"1-3-5"``.

  The entries are non-negative decimal numbers (``"0.5-1-2"`` is allowed)
  separated by ``'-'``; surrounding whitespace is ignored. There is no sign, so a
  negative entry is seen as an empty one (``"1--2"``).

  Args:
    spec: the ratio string, one entry per part.
    name: the argument name used in error messages.

  Returns:
    float64 ``[K]``, the (unnormalised) per-part ratios.

  Raises:
    FedJaxDpError: naming ``name``: not a string, empty, an empty or non-numeric
      or non-finite entry, or all entries zero.
  """
  if not isinstance(spec, str):
    raise FedJaxDpError(
        f"{name} must be a string of non-negative numbers separated by '-' (e.g. "
        f"'0-1-2'), got {spec!r} of type {type(spec).__name__}.")
  text = spec.strip()
  if not text:
    raise FedJaxDpError(
        f"{name} must be non-negative numbers separated by '-' (e.g. '0-1-2'), got an "
        f"empty string {spec!r}.")
  values = []
  for k, piece in enumerate(text.split("-")):
    piece = piece.strip()
    if not piece:
      raise FedJaxDpError(
          f"{name}={spec!r} has an empty entry at position {k}; entries must be "
          "non-negative numbers separated by single '-' (negative ratios are not "
          "allowed).")
    try:
      v = float(piece)
    except ValueError:
      raise FedJaxDpError(
          f"{name}={spec!r} has a non-numeric entry {piece!r} at position {k}; entries "
          "must be non-negative numbers separated by '-' (e.g. '0-1-2').") from None
    if not math.isfinite(v) or v < 0:
      raise FedJaxDpError(
          f"{name}={spec!r} has entry {piece!r} at position {k}; entries must be finite "
          "and >= 0.")
    values.append(v)
  arr = np.asarray(values, dtype=np.float64)
  if arr.sum() <= 0:
    raise FedJaxDpError(f"{name}={spec!r} is all zeros; at least one ratio must be > 0.")
  return arr


def _check_ratios(ratios: Ratios, name: str = "ratios") -> np.ndarray:
  if isinstance(ratios, str):
    return parse_ratio(ratios, name)
  r = check_weights(name, ratios)
  if r.size == 0 or r.sum() <= 0:
    raise FedJaxDpError(f"{name} must have at least one positive entry, got {ratios!r}.")
  return r


def _check_parts(part_of_client: Any, num_parts: Optional[int],
                 name: str = "part_of_client") -> np.ndarray:
  a = np.asarray(part_of_client)
  if a.ndim != 1 or a.size == 0:
    raise FedJaxDpError(f"{name} must be a non-empty 1-D array [num_clients], got shape "
                        f"{a.shape}.")
  if not np.issubdtype(a.dtype, np.integer):
    raise FedJaxDpError(f"{name} must hold integer part indices, got dtype {a.dtype}.")
  if a.min() < 0 or (num_parts is not None and a.max() >= num_parts):
    hi = "" if num_parts is None else f", {num_parts - 1}"
    raise FedJaxDpError(
        f"{name} must hold part indices in [0{hi}], got min {a.min()} max {a.max()}.")
  return a.astype(np.int64)


def from_part_ratios(ratios: Ratios, part_of_client: Any) -> np.ndarray:
  """Per-client impact factors from per-part ratios (the paper's "a-b-c" notation).

  ``p_i = r_{part(i)} / sum_k n_k r_k``, where ``n_k`` is the number of clients in
  part ``k`` (our reading of Sec. VI, checked against the captions of Figs. 3, 5,
  7 and 9). With 20/20/20 clients, "0-1-2" gives (0, 1/60, 1/30) and "1-3-5"
  gives (1/180, 1/60, 1/36); with 20/35/5, "0-2-1" gives (0, 2/75, 1/75).

  Args:
    ratios: a ratio string (see `parse_ratio`) or non-negative floats ``[K]``.
    part_of_client: int ``[N]``, the part (``0 .. K-1``) of each client.

  Returns:
    float64 ``[N]`` satisfying Eq. (2): ``sum p = 1``, ``0 <= p <= 1``.

  Raises:
    FedJaxDpError: invalid ``ratios`` or ``part_of_client`` (out of range), or every
      client sits in a part of ratio 0.
  """
  r = _check_ratios(ratios)
  parts = _check_parts(part_of_client, len(r))
  raw = r[parts]
  total = raw.sum()
  if total <= 0:
    raise FedJaxDpError(
        f"ratios={ratios!r} give weight 0 to every client: the parts with a positive "
        f"ratio ({np.flatnonzero(r > 0).tolist()}) have no clients in part_of_client.")
  return raw / total


def resolve(spec: Union[str, Sequence[float], np.ndarray], *,
            part_of_client: Any = None, counts: Any = None,
            num_clients: Optional[int] = None) -> np.ndarray:
  """Impact factors from a user-facing spec.

  * ``"equal"`` / ``"uniform"``: `uniform` (needs ``num_clients``, or the length of
    ``part_of_client`` / ``counts``);
  * ``"data_size"``: `data_size` of ``counts``;
  * any other string: a ratio (`from_part_ratios` with ``part_of_client``);
  * an array ``[N]``: used as is, after checking Eq. (2).

  Args:
    spec: see above.
    part_of_client: int ``[N]`` part indices (for ratio strings).
    counts: ``[N]`` example counts (for ``"data_size"``).
    num_clients: N (for ``"equal"`` when neither array is given).

  Returns:
    float64 ``[N]`` summing to 1.

  Raises:
    FedJaxDpError: a missing companion argument or any invalid input.
  """
  if isinstance(spec, str):
    key = spec.strip().lower()
    if key in ("equal", "uniform"):
      for n in (num_clients,
                None if part_of_client is None else len(np.asarray(part_of_client)),
                None if counts is None else len(np.asarray(counts))):
        if n is not None:
          return uniform(n)
      raise FedJaxDpError(
          f"impact spec {spec!r} needs num_clients (or part_of_client / counts).")
    if key == "data_size":
      if counts is None:
        raise FedJaxDpError("impact spec 'data_size' needs counts=[num_clients].")
      return data_size(counts)
    if part_of_client is None:
      raise FedJaxDpError(
          f"impact spec {spec!r} is a ratio string and needs part_of_client=[num_clients]; "
          "other allowed specs: 'equal', 'uniform', 'data_size' or an explicit vector.")
    return from_part_ratios(spec, part_of_client)
  p = check_weights("impact factors", spec, size=num_clients, sum_to_one=True, atol=SUM_ATOL)
  return p


# ---------------------------------------------------------------------------
# Schedules [T, N].
# ---------------------------------------------------------------------------

def check_impact_factor_schedule(p_schedule: Any, name: str = "p_schedule",
                                 atol: float = SUM_ATOL) -> np.ndarray:
  """Validates impact factors over rounds: Eq. (2) in every round, hence Eq. (51).

  Row ``t - 1`` is ``p^(t)``, the weights of aggregation round ``t`` (1-based in
  messages). Checks: 2-D and non-empty, finite, every entry in ``[0, 1]``, every
  row summing to 1 within ``atol``. These imply Eq. (51) for the increments
  ``alpha^(t) = p^(t+1) - p^(t)``: ``|alpha_i^(t)| <= 1`` (both entries lie in
  [0, 1]) and ``|sum_i alpha_i^(t)| <= 2 atol`` (both rows sum to 1 within
  ``atol``), so any sequence of valid weights is an admissible Eq. (51) path.

  Args:
    p_schedule: float ``[T, N]``.
    name: the argument name used in error messages.
    atol: tolerance on the row sums (> 0).

  Returns:
    The schedule as float64 ``[T, N]``.

  Raises:
    FedJaxDpError: naming ``name`` and the round (and client) at fault.
  """
  atol = check_positive("atol", atol)
  try:
    ps = np.asarray(p_schedule, dtype=np.float64)
  except (TypeError, ValueError):
    raise FedJaxDpError(
        f"{name} must be a numeric array [rounds, num_clients], got {p_schedule!r}.") from None
  if ps.ndim != 2 or ps.shape[0] < 1 or ps.shape[1] < 1:
    raise FedJaxDpError(
        f"{name} must be a non-empty 2-D array [rounds, num_clients], got shape {ps.shape}.")
  bad = np.argwhere(~np.isfinite(ps))
  if bad.size:
    t, i = bad[0]
    raise FedJaxDpError(
        f"{name} must be finite; round {t + 1} (row {t}), client {i} is {ps[t, i]!r}.")
  bad = np.argwhere((ps < 0) | (ps > 1))
  if bad.size:
    t, i = bad[0]
    raise FedJaxDpError(
        f"{name} entries must be in [0, 1] (Eq. 2); round {t + 1} (row {t}), client {i} "
        f"is {ps[t, i]!r}.")
  sums = ps.sum(axis=1)
  bad = np.flatnonzero(np.abs(sums - 1.0) > atol)
  if bad.size:
    t = bad[0]
    raise FedJaxDpError(
        f"{name} rows must sum to 1 (Eq. 2, tolerance {atol:g}); round {t + 1} (row {t}) "
        f"sums to {sums[t]!r}.")
  return ps


def increments(p_schedule: Any) -> np.ndarray:
  """The Eq. (51) increments ``alpha^(t) = p^(t+1) - p^(t)``.

  Args:
    p_schedule: float ``[T, N]`` (validated with `check_impact_factor_schedule`).

  Returns:
    float64 ``[T - 1, N]``; row ``t - 1`` is the change from round ``t`` to ``t + 1``.

  Raises:
    FedJaxDpError: an invalid schedule.
  """
  return np.diff(check_impact_factor_schedule(p_schedule), axis=0)


def constant_impact_factors(p: Any, rounds: int) -> np.ndarray:
  """The fixed-p schedule: ``p`` repeated for ``rounds`` aggregation rounds.

  Args:
    p: float ``[N]`` summing to 1.
    rounds: T >= 1 (int).

  Returns:
    float64 ``[T, N]``.

  Raises:
    FedJaxDpError: invalid ``p`` or ``rounds``.
  """
  w = check_weights("p", p, sum_to_one=True, atol=SUM_ATOL)
  t = check_int("rounds", rounds, minimum=1)
  return np.tile(w, (t, 1))


def piecewise_schedule(phases: Sequence[Tuple[int, Any]], rounds: int) -> np.ndarray:
  """A piecewise-constant schedule from ``(start_round, p)`` phases.

  Phase ``k`` applies from aggregation round ``start_round_k`` (1-based) up to the
  round before the next phase's start; the first phase must start at round 1.

  Args:
    phases: ``[(start_round, p), ...]`` with strictly increasing ``start_round`` in
      ``[1, rounds]`` and every ``p`` a float ``[N]`` summing to 1 (same N).
    rounds: T >= 1 (int).

  Returns:
    float64 ``[T, N]``, validated with `check_impact_factor_schedule`.

  Raises:
    FedJaxDpError: empty phases, a first phase not starting at round 1, starts not
      strictly increasing or beyond ``rounds``, or invalid or mismatched ``p``.
  """
  t = check_int("rounds", rounds, minimum=1)
  phases = list(phases)
  if not phases:
    raise FedJaxDpError("phases must contain at least one (start_round, p) pair.")
  starts = [check_int(f"phases[{k}] start_round", s, minimum=1, maximum=t)
            for k, (s, _) in enumerate(phases)]
  if starts[0] != 1:
    raise FedJaxDpError(f"phases must start at round 1, got first start_round={starts[0]}.")
  if any(b <= a for a, b in zip(starts, starts[1:])):
    raise FedJaxDpError(f"phases start rounds must be strictly increasing, got {starts}.")
  ps = [check_weights(f"phases[{k}] p", p, sum_to_one=True, atol=SUM_ATOL)
        for k, (_, p) in enumerate(phases)]
  if any(len(p) != len(ps[0]) for p in ps):
    raise FedJaxDpError(
        f"all phases must have the same number of clients, got {[len(p) for p in ps]}.")
  out = np.empty((t, len(ps[0])))
  ends = starts[1:] + [t + 1]
  for s, e, p in zip(starts, ends, ps):
    out[s - 1:e - 1] = p
  return check_impact_factor_schedule(out, "phases")


def schedule_from_callable(fn: Callable[[int], Any], rounds: int) -> np.ndarray:
  """Evaluates ``fn(t)`` for aggregation rounds ``t = 1 .. T`` into a schedule.

  Args:
    fn: maps the 1-based round ``t`` to ``p^(t)``, float ``[N]``.
    rounds: T >= 1 (int).

  Returns:
    float64 ``[T, N]``, validated with `check_impact_factor_schedule` (Eqs. 2 and 51).

  Raises:
    FedJaxDpError: ``fn`` returns arrays of different lengths or an invalid schedule.
  """
  t = check_int("rounds", rounds, minimum=1)
  rows = [np.asarray(fn(k), dtype=np.float64) for k in range(1, t + 1)]
  shapes = {r.shape for r in rows}
  if len(shapes) != 1 or rows[0].ndim != 1:
    raise FedJaxDpError(
        f"fn must return 1-D arrays [num_clients] of one length for every round, got "
        f"shapes {sorted(shapes)}.")
  return check_impact_factor_schedule(np.stack(rows), "schedule returned by fn")


def switch_schedule(part_of_client: Any, before: Ratios = "0-1-2", after: Ratios = "2-1-0",
                    switch_after: int = SCENARIO4_SWITCH_AFTER,
                    rounds: int = 30) -> np.ndarray:
  """PADPFL's scenario-4 adaptive weights: one ratio, then another.

  Aggregations ``t = 1 .. switch_after`` use ``before`` and ``t = switch_after + 1
  .. rounds`` use ``after`` (0-1-2 for t <= 10,
  2-1-0 for 10 < t <= 30, Fig. 9 caption). As Eq. (51): ``alpha = 0`` except at
  the switch, where it is ``p_after - p_before``.

  Args:
    part_of_client: int ``[N]`` part index of every client.
    before: the ratio (string or floats ``[K]``) of the first phase.
    after: the ratio of the second phase.
    switch_after: the last round using ``before`` (int, ``1 <= switch_after <
      rounds``).
    rounds: T (int >= 2).

  Returns:
    float64 ``[T, N]``.

  Raises:
    FedJaxDpError: invalid ratios, parts or rounds.
  """
  t = check_int("rounds", rounds, minimum=2)
  s = check_int("switch_after", switch_after, minimum=1, maximum=t - 1)
  p0 = from_part_ratios(before, part_of_client)
  p1 = from_part_ratios(after, part_of_client)
  return piecewise_schedule([(1, p0), (s + 1, p1)], t)


SPEC_KEYWORDS = ("equal", "uniform", "data_size")


def check_spec(spec: Any, name: str = "impact_factors") -> str:
  """Syntax of a user-facing impact-factor spec (no clients needed): a keyword of
  `SPEC_KEYWORDS`, a ratio ``"a-b-c"`` or a switch ``"a-b-c>d-e-f"``.

  Returns:
    The spec, stripped and lower-cased.

  Raises:
    FedJaxDpError: naming ``name``: not a non-empty string, more than one ``'>'``, or a
      ratio that `parse_ratio` refuses.
  """
  if not isinstance(spec, str) or not spec.strip():
    raise FedJaxDpError(f"{name} must be one of {', '.join(SPEC_KEYWORDS)}, a ratio such "
                        f"as '0-1-2' or a switch such as '0-1-2>2-1-0', got {spec!r}.")
  key = spec.strip().lower()
  if key in SPEC_KEYWORDS:
    return key
  sides = key.split(">")
  if len(sides) > 2:
    raise FedJaxDpError(f"{name} allows one switch 'before>after', got {spec!r}.")
  for side in sides:
    parse_ratio(side, name=name)
  return key


def from_spec(spec: str, part_of_client: Any, rounds: int, counts: Any = None,
              switch_after: Optional[int] = None) -> np.ndarray:
  """The ``[T, N]`` schedule named by a spec (see `check_spec`): a keyword or a ratio
  gives fixed weights (`resolve`); ``"before>after"`` is `switch_schedule`, switching
  after ``switch_after`` rounds (default ``min(SCENARIO4_SWITCH_AFTER, T - 1)``).

  Raises:
    FedJaxDpError: an invalid spec, parts, counts or rounds.
  """
  key = check_spec(spec)
  t = check_int("rounds", rounds, minimum=1)
  if ">" in key:
    before, after = key.split(">")
    s = min(SCENARIO4_SWITCH_AFTER, t - 1) if switch_after is None else switch_after
    return switch_schedule(part_of_client, before, after, switch_after=s, rounds=t)
  return constant_impact_factors(resolve(key, part_of_client=part_of_client, counts=counts), t)


# ---------------------------------------------------------------------------
# Dropped clients.
# ---------------------------------------------------------------------------

def redistribute_dropped(p: Any, dropped_mask: Any) -> np.ndarray:
  """Gives the weight of clients that drop out of a round to the remaining clients.

  PADPFL, Sec. V: if client k cannot synchronise, "the server can distribute
  p_k among counterpart clients for that iteration". The dropped weight is spread
  proportionally to the remaining clients' own weights, so the result is
  ``p_i / sum_{j kept} p_j`` for kept clients and 0 for dropped ones; if every
  kept client has weight 0, it is spread uniformly over the kept clients.

  Args:
    p: float ``[N]`` summing to 1 (within 1e-6).
    dropped_mask: bool ``[N]``, True for clients that dropped out.

  Returns:
    float64 ``[N]`` summing to 1, exactly 0 at dropped clients.

  Raises:
    FedJaxDpError: invalid ``p``, a mask of the wrong shape or dtype, or every
      client dropped.
  """
  w = check_weights("p", p, sum_to_one=True, atol=SUM_ATOL)
  mask = np.asarray(dropped_mask)
  if mask.shape != w.shape:
    raise FedJaxDpError(f"dropped_mask must have shape {w.shape} (one entry per client), "
                        f"got {mask.shape}.")
  if mask.dtype != np.bool_:
    if not (np.issubdtype(mask.dtype, np.integer) and np.all((mask == 0) | (mask == 1))):
      raise FedJaxDpError(
          f"dropped_mask must be boolean (or 0/1), got dtype {mask.dtype}.")
    mask = mask.astype(bool)
  kept = ~mask
  if not kept.any():
    raise FedJaxDpError(
        f"dropped_mask drops all {w.size} clients; at least one client must remain to "
        "receive the weight.")
  out = np.where(kept, w, 0.0)
  total = out.sum()
  if total > 0:
    return out / total
  return kept / kept.sum()
