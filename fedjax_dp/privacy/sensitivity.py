"""L2 sensitivities of the releases fedjax_dp makes, each under a stated neighbouring
relation. The code that defines a release calls one of these and reports
``noise_multiplier = noise_stddev / sensitivity``; the privacy ledger never rescales it.

Neighbouring relations (`RELATIONS`; the privacy unit is a user's whole data at user
level, one example at record level):

* ``"add_remove"``: the datasets differ by adding or removing one unit;
* ``"zero_out"``: one unit's data is replaced by a null dataset whose contribution is
  zero (the unit still takes part, e.g. still adds its own local noise; Kairouz et al.,
  "Practical and private (deep) learning without sampling or shuffling", ICML 2021,
  Sec. 2.1); dp_accounting composes it exactly like add/remove
  (``NeighboringRelation.REPLACE_SPECIAL``);
* ``"replace_one"``: same size, one unit replaced by any other (the relation that
  sampling without replacement and fixed-size cohorts need).

The sensitivity is the largest L2 distance between the two outputs of neighbouring
datasets. For a sum of contributions clipped to C it is C (add/remove, zero-out) and
2C (replace-one): the factor 2 that fixed-size cohorts need lives here and only here.

All functions accept Python floats or (traced) JAX arrays unless stated otherwise.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_positive)

RELATIONS = ("add_remove", "zero_out", "replace_one")

#: How an algorithm that uploads noisy *models* (PADPFL and amplitude-varying
#: perturbation) bounds an upload's
#: sensitivity: ``"paper"`` (the paper's calibration, the guarantee from the parameter
#: ball) or ``"clipped_gradients"`` (per-example gradient clipping, provable).
SENSITIVITY_MODES = ("paper", "clipped_gradients")

#: Words for summaries and metrics.jsonl.
RELATION_TEXT = {
    "add_remove": "add/remove-one: neighbouring datasets differ by adding or removing {unit}",
    "zero_out": ("zero-out: neighbouring datasets differ in {unit} being replaced by a null "
                 "dataset that contributes nothing (the unit still takes part)"),
    "replace_one": ("replace-one: neighbouring datasets have the same size and differ in "
                    "{unit}"),
}


def check_relation(relation: Any) -> str:
  """Returns ``relation`` if it is one of `RELATIONS`; raises `FedJaxDpError` otherwise."""
  return check_choice("neighboring_relation", relation, RELATIONS)


def replace_factor(relation: str) -> float:
  """2 for ``"replace_one"`` (a contribution bounded by C is swapped for another one,
  so the output moves by up to 2C), 1 for ``"add_remove"`` and ``"zero_out"``."""
  return 2.0 if check_relation(relation) == "replace_one" else 1.0


def sum_sensitivity(clip_norm: Any, relation: str, max_weight: Any = 1.0) -> Any:
  """Sensitivity of ``sum_k w_k clip(u_k, C)`` (central noise on a weighted sum).

  ``C * max_k w_k`` under add/remove and zero-out, ``2 C max_k w_k`` under replace-one
  (McMahan, Ramage, Talwar, Zhang, ICLR 2018, Sec. 2, bounded weights; Wang, Balle,
  Kasiviswanathan, AISTATS 2019, Thm. 27, replace-one). Weights are public and >= 0
  (any size: above 1 the sensitivity grows with them); one unit contributes to exactly
  one term.

  Args:
    clip_norm: C >= 0 (units of the updates), float or array.
    relation: one of `RELATIONS`.
    max_weight: the largest aggregation weight any unit can have (1 for uniform and
      capped data-size weights).

  Returns:
    The sensitivity, same type as ``clip_norm``.

  Raises:
    FedJaxDpError: an unknown relation.
  """
  return replace_factor(relation) * clip_norm * max_weight


def ball_sensitivity(radius: float) -> float:
  """``2 R``: any two outputs that both lie in an L2 ball of radius R (e.g. models whose
  parameters are projected onto ``||w|| <= R``) differ by at most its diameter; valid
  under every relation, whatever the training did.

  Raises:
    FedJaxDpError: ``radius`` not finite and > 0.
  """
  return 2.0 * check_positive("radius", radius)


def clipped_gd_sensitivity(learning_rate: float, grad_clip_norm: float, local_steps: int,
                           min_batch_size: int, prox_mu: float = 0.0,
                           ball_radius: Optional[float] = None) -> float:
  """Replace-one sensitivity of a client's model after noise-free local training with
  per-example gradient clipping (host-side, float64).

  The client runs ``tau`` steps ``w <- P(w - eta (g(w) + mu (w - w_0)))`` from the
  received model ``w_0``, where ``g`` is the mean of the per-example gradients of a
  minibatch, each clipped to L2 norm G, the batches are drawn independently of the
  examples' values, and ``P`` is the identity or a projection onto a convex set (an L2
  ball), which is non-expansive. Replacing one example of the client's dataset: let
  ``d_t`` be the distance between the two runs after t steps. At step 1 both start
  from ``w_0`` and only the replaced example's term differs, by at most ``2G / b``
  (b the size of the batch holding it); afterwards every term may differ, but each
  mean has norm at most G, and the proximal term contracts by ``|1 - eta mu|``:

      d_1 <= 2 eta G / b_min,     d_{t+1} <= rho d_t + 2 eta G,   rho = max(1, |1 - eta mu|)

  so ``d_tau`` is this recursion's value (it needs no smoothness or convexity; for
  ``tau = 1`` it is the familiar ``2 eta G / b``). With a projection onto a ball of radius
  R the result is also at most ``2 R`` (`ball_sensitivity`), and the minimum is
  returned. This is ours (derived for fedjax_dp's provable modes of PADPFL and
  amplitude-varying perturbation), not a paper's formula; it replaces their assumed
  ``2C / |D_k|`` (NbAFL, Wei et al. 2020), which holds only for a client whose training
  is a contraction.

  Args:
    learning_rate: eta > 0 (plain SGD steps; no momentum or adaptivity).
    grad_clip_norm: G > 0, the per-example gradient clip norm.
    local_steps: tau >= 1.
    min_batch_size: the smallest number of examples averaged in a step that can hold
      the replaced example, over all clients (full batch: the smallest client size).
    prox_mu: FedProx mu >= 0.
    ball_radius: R > 0 if the trained model is projected onto ``||w|| <= R`` (after
      every step or at the end), else None.

  Returns:
    The sensitivity (parameter units).

  Raises:
    FedJaxDpError: an argument out of range.
  """
  eta = check_positive("learning_rate", learning_rate)
  g = check_positive("grad_clip_norm", grad_clip_norm)
  tau = check_int("local_steps", local_steps, minimum=1)
  b = check_int("min_batch_size", min_batch_size, minimum=1)
  mu = check_non_negative("prox_mu", prox_mu)
  rho = max(1.0, abs(1.0 - eta * mu))
  d = 2.0 * eta * g / b
  for _ in range(tau - 1):
    d = rho * d + 2.0 * eta * g
  if ball_radius is not None:
    d = min(d, ball_sensitivity(ball_radius))
  if not math.isfinite(d):
    raise FedJaxDpError(f"the sensitivity bound overflowed (eta={eta}, G={g}, "
                        f"tau={tau}, mu={mu}).")
  return d


class ModelUploadSensitivity(NamedTuple):
  """The sensitivities of a noisy model upload (`model_upload_sensitivity`).

  Attributes:
    guarantee: the sensitivity the code enforces (what the run's guarantee uses).
    calibration: the sensitivity the paper's noise formula is evaluated with.
    paper: the paper's own (NbAFL) sensitivity, for the conditional epsilon.
    grad_clip_norm: G in ``"clipped_gradients"`` mode, else None.
    mode: one of `SENSITIVITY_MODES`.
  """
  guarantee: float
  calibration: float
  paper: float
  grad_clip_norm: Optional[float]
  mode: str


def model_upload_sensitivity(mode: str, paper: float, ball_radius: float,
                             learning_rate: float, local_steps: int, min_batch_size: int,
                             grad_clip_norm: Optional[float] = None,
                             prox_mu: float = 0.0) -> ModelUploadSensitivity:
  """Sensitivities of a client's noisy *model* upload trained by noise-free local GD
  whose result is projected onto ``||w|| <= R`` (PADPFL and amplitude-varying perturbation).

  * ``"paper"``: the noise follows the paper's formula with ``paper`` (its NbAFL
    sensitivity ``2R / |D_k|``, which only holds if local training moves a model by at
    most that much when one example is replaced: unclipped gradients do not ensure it);
    the guarantee uses `ball_sensitivity` ``2R``, which holds whatever the training.
  * ``"clipped_gradients"``: local training clips per-example gradients to
    ``grad_clip_norm``; both the formula and the guarantee use
    `clipped_gd_sensitivity` (at most ``2R``).

  Args:
    mode: one of `SENSITIVITY_MODES`.
    paper: the paper's sensitivity (> 0).
    ball_radius: R > 0, the projection radius (C of amplitude-varying perturbation, B of PADPFL).
    learning_rate, local_steps, min_batch_size, prox_mu: as in `clipped_gd_sensitivity`.
    grad_clip_norm: G > 0, required with ``"clipped_gradients"`` and refused otherwise.

  Raises:
    FedJaxDpError: an unknown mode, or a clip norm missing / given where it is not used.
  """
  check_choice("sensitivity_mode", mode, SENSITIVITY_MODES)
  paper = check_positive("paper sensitivity", paper)
  if mode == "clipped_gradients":
    if grad_clip_norm is None:
      raise FedJaxDpError("sensitivity_mode='clipped_gradients' needs grad_clip_norm, "
                          "the per-example gradient clip norm G.")
    g = check_positive("grad_clip_norm", grad_clip_norm)
    bound = clipped_gd_sensitivity(learning_rate, g, local_steps, min_batch_size,
                                   prox_mu=prox_mu, ball_radius=ball_radius)
    return ModelUploadSensitivity(bound, bound, paper, g, mode)
  if grad_clip_norm is not None:
    raise FedJaxDpError("grad_clip_norm is used with sensitivity_mode='clipped_gradients' "
                        "only.")
  return ModelUploadSensitivity(ball_sensitivity(ball_radius), paper, paper, None, mode)
