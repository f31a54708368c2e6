"""Divergence: a run whose training has broken down is stopped, not finished silently.

A session (`fedjax_dp.runs.session`) checks every member after each compiled block,
on the records it has written (``metrics.jsonl``'s, 1-based ``round``), with this rule:

* **non-finite updates**: in ``NONFINITE_ROUNDS`` (3) consecutive rounds, at least
  ``NONFINITE_SHARE`` (half) of the round's participating clients sent a non-finite
  update (``nonfinite_updates >= num_clients / 2``, ``num_clients > 0``; the engine
  zeroes such updates, so the model then moves by noise alone). Rounds without
  participants neither extend nor break the streak.
* **exploding test loss**: an evaluated ``test_loss`` that is non-finite, or greater
  than both ``EXPLOSION_FLOOR`` (10) and ``EXPLOSION_FACTOR`` (100) times the
  reference loss: the first finite ``train_loss`` of the run (round 1's mean local
  training loss, close to the initial model's loss).

A member that diverges stops at the end of that block (`fedjax_dp.runs.session`): its
records, metrics.jsonl, checkpoint, curves.png and summary.json (``diverged``: the
round, the reason, the message) are kept, and ``fedjax-dp run`` / ``sweep`` exit with
`EXIT_DIVERGED` (3). With ``allow_divergence`` (``--allow-divergence``) it continues
and the summary and a warning say what was detected. In a sweep, a diverged member
stops (its later rounds are computed with the others but not recorded) while the
others continue.

The decision to stop reads diagnostic metrics (non-finite counts, losses: not covered
by epsilon); the privacy guarantee reported is that of the rounds run.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Sequence

__all__ = ["EXIT_DIVERGED", "NONFINITE_SHARE", "NONFINITE_ROUNDS", "EXPLOSION_FACTOR",
           "EXPLOSION_FLOOR", "RULE", "detect", "message"]

#: The exit status of ``fedjax-dp run`` and ``fedjax-dp sweep`` when a run diverged and
#: was stopped (2: a bad input; 128 + n: signal n).
EXIT_DIVERGED = 3
NONFINITE_SHARE = 0.5
NONFINITE_ROUNDS = 3
EXPLOSION_FACTOR = 100.0
EXPLOSION_FLOOR = 10.0

#: The rule, in words (summary.json's ``diverged["rule"]``).
RULE = (f"diverged: in {NONFINITE_ROUNDS} consecutive rounds at least "
        f"{NONFINITE_SHARE:.0%} of the participating clients' updates were non-finite, "
        f"or an evaluated test loss was non-finite or above both {EXPLOSION_FLOOR:g} and "
        f"{EXPLOSION_FACTOR:g} x the run's first finite train loss")


def _finite(v: Any) -> Optional[float]:
  """``v`` as a float when it is a finite number (None and NaN/inf in metrics.jsonl:
  non-finite)."""
  try:
    x = float(v)
  except (TypeError, ValueError):
    return None
  return x if math.isfinite(x) else None


def _bad_round(r: Mapping[str, Any]) -> Optional[bool]:
  """Whether record ``r`` has at least half of its participants' updates non-finite
  (None: no participants, or the record has no such counts)."""
  n, bad = r.get("num_clients"), r.get("nonfinite_updates")
  if n is None or bad is None or not n > 0:
    return None
  return bad >= NONFINITE_SHARE * n


def detect(written: Sequence[Mapping[str, Any]], start: int) -> Optional[Dict[str, Any]]:
  """The first divergence (the rule above) among the records ``written[start:]`` (the
  block just written; the earlier ones give the streak and the reference loss).

  Args:
    written: a member's records in order (1-based ``round``, as in metrics.jsonl).
    start: index of the block's first record.

  Returns:
    None, or ``{"round": the round it was detected at, "reason": "nonfinite_updates"
    or "test_loss", "detail": what was seen, in words}``.
  """
  streak, first_bad = 0, None
  for r in reversed(written[:start]):  # the streak the block continues
    bad = _bad_round(r)
    if bad is False:
      break
    if bad:
      streak, first_bad = streak + 1, r["round"]
  ref = next((x for x in (_finite(r.get("train_loss")) for r in written) if x is not None),
             None)
  limit = max(EXPLOSION_FLOOR, EXPLOSION_FACTOR * ref) if ref is not None else None
  for r in written[start:]:
    bad = _bad_round(r)
    if bad is False:
      streak, first_bad = 0, None
    elif bad:
      streak += 1
      first_bad = r["round"] if first_bad is None else first_bad
      if streak >= NONFINITE_ROUNDS:
        return {"round": r["round"], "reason": "nonfinite_updates",
                "detail": (f"from round {first_bad} to round {r['round']}, at least half "
                           f"of each round's clients sent a non-finite update (round "
                           f"{r['round']}: {r['nonfinite_updates']} of "
                           f"{r['num_clients']})")}
    if "test_loss" in r:  # an evaluated round (None in metrics.jsonl: non-finite)
      loss = _finite(r["test_loss"])
      if loss is None:
        return {"round": r["round"], "reason": "test_loss",
                "detail": f"the test loss after round {r['round']} is not finite"}
      if limit is not None and loss > limit:
        return {"round": r["round"], "reason": "test_loss",
                "detail": (f"the test loss after round {r['round']} is {loss:.4g}, "
                           f"over {EXPLOSION_FACTOR:g} x the first train loss {ref:.4g}")}
  return None


def message(found: Mapping[str, Any], rounds_done: int, noise_multiplier: Optional[float],
            clip_norm: Optional[float], target_epsilon: Optional[float],
            stopped: bool) -> str:
  """The one paragraph ``fedjax-dp`` prints (and summary.json keeps): what was
  detected, at which round, the likely cause and what to try."""
  z = noise_multiplier
  noisy = z is not None and z > 10.0
  if noisy:
    given = (f" (calibrated for --target-epsilon {target_epsilon:g})"
             if target_epsilon is not None else "")
    clip = f" (clip norm {clip_norm:g})" if clip_norm is not None else ""
    cause = (f"likely cause: the noise multiplier {z:.4g}{given} adds noise far larger "
             f"than the clipped updates{clip}, so the model's parameters blow up; try a "
             + ("larger --target-epsilon or fewer --rounds" if target_epsilon is not None
                else "smaller --noise-multiplier")
             + ", or a smaller server learning rate")
  else:
    cause = ("likely cause: the learning rates are too large for this model and data "
             "(or the data has extreme values); try smaller client and server learning "
             "rates, or a smaller clip norm")
  what = (f"it stopped after round {rounds_done} (the end of that compiled block), "
          "keeping metrics.jsonl, the checkpoint, curves.png and summary.json "
          "(\"diverged\")" if stopped else
          "training continued (--allow-divergence): results after it are unreliable")
  tail = ("; --allow-divergence continues such a run with a warning" if stopped else "")
  return (f"the run diverged at round {found['round']}: {found['detail']}; {what}; "
          f"{cause}{tail}.")
