"""The paper's own noise calibration (LAPA, Sec. III-B and IV-A), labelled as
the paper's: the classical Gaussian mechanism sigma = c Delta_s / epsilon (eq. 19) with
the NbAFL-form sensitivity 2C / n (eq. 18) and the dynamic noise switch rule (eq. 23).

What these formulas are, and are not:

* c = sqrt(2 ln(1.25 / delta)) is the classical Gaussian mechanism of Dwork & Roth
  (Thm. A.1), proved only for epsilon in (0, 1) (`classical_valid`). LAPA's later rounds
  can exceed 1; `gaussian_epsilon_accountant` measures what dp_accounting says about one
  such release (its docstring tabulates where the classical formula stops being
  conservative).
* Delta_s = 2C / n assumes every per-sample gradient has norm <= C; with aggregate
  clipping (eq. 17) alone it is not a rigorous bound (the rigorous one is 2C).
* Rounds compose by basic composition in the paper (sum_t eps_i[t] <= eps_T), with no
  accountant; `fedjax_dp.algorithms.lapa.allocators` keeps that per-device sum.

Per-round functions (`noise_std`, `switch_ready`, `classical_valid`) are pure jnp and
never raise, so they run inside the jit-compiled round; host-side setup helpers
(`gaussian_constant`, `paper_sensitivity`, `gaussian_epsilon_accountant`) validate their
arguments and raise `FedJaxDpError`.
"""

from __future__ import annotations

import math
from typing import Any, Union

import dp_accounting
import jax.numpy as jnp
import numpy as np

from fedjax_dp.privacy.accountants import DEFAULT_RDP_ORDERS
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta,
                                  check_positive)

ACCOUNTANTS = ("rdp", "pld")

# Largest epsilon for which one release at sigma = c(delta) Delta / epsilon still has
# accountant epsilon <= epsilon (bisection, 40 steps; see `gaussian_epsilon_accountant`).
CLASSICAL_BREAKPOINTS = {
    # delta: (RDP accountant, PLD accountant)
    1e-5: (5.6669, 8.4198),
    1e-4: (5.3825, 7.9910),
    1e-3: (5.0296, 7.4635),
}


def gaussian_constant(delta: float) -> float:
  """c(delta) = sqrt(2 ln(1.25 / delta)), the classical Gaussian mechanism's constant
  (Dwork & Roth, Thm. A.1; LAPA eq. 19, [R+]).

  c = 4.8448 for delta = 1e-5, 4.3436 for 1e-4, 3.7765 for 1e-3.

  Args:
    delta: the per-release failure probability, in (0, 1).

  Returns:
    c as a Python float (dimensionless).

  Raises:
    FedJaxDpError: delta outside (0, 1) or not a finite number (option ``delta``).
  """
  return math.sqrt(2.0 * math.log(1.25 / check_delta(delta)))


def paper_sensitivity(clip_norm: float, num_samples: Any) -> Union[float, np.ndarray]:
  """Delta_s = 2 C / n, the paper's l2 sensitivity of one clipped, averaged local
  gradient (eq. 18, NbAFL form [R?]).

  Valid only if each per-sample gradient has norm <= C (per-example clipping); with the
  paper's aggregate clipping (eq. 17) it is the paper's choice, not a proof.

  Args:
    clip_norm: C (> 0), in gradient-norm units.
    num_samples: n (>= 1), the number of samples averaged (|D_i| or the batch size); a
      scalar or an array (e.g. ``[N]`` per-device counts).

  Returns:
    A Python float for scalar ``num_samples``, else float64 ``np.ndarray`` of its shape.

  Raises:
    FedJaxDpError: C not finite and > 0 (option ``clip_norm``), or an n that is not a
      finite number >= 1 (option ``num_samples``).
  """
  c = check_positive("clip_norm", clip_norm)
  try:
    n = np.asarray(num_samples, dtype=np.float64)
  except (TypeError, ValueError):
    raise FedJaxDpError(f"num_samples must be a number or array of numbers >= 1, got "
                        f"{num_samples!r}.", option="num_samples") from None
  if isinstance(num_samples, bool) or not np.all(np.isfinite(n)) or np.any(n < 1):
    raise FedJaxDpError(f"num_samples must be finite and >= 1, got {num_samples!r}.",
                        option="num_samples")
  out = 2.0 * c / n
  return float(out) if out.ndim == 0 else out


def noise_std(c: Any, sensitivity: Any, epsilon: Any) -> jnp.ndarray:
  """sigma = c Delta_s / epsilon, the paper's per-device noise calibration (eq. 19 [R+]).

  Pure jnp, broadcasting over its arguments (typically ``epsilon`` float32 ``[N]``);
  never raises. A budget epsilon <= 0 (or NaN) gives sigma = +inf: the budget is
  exhausted and the device must not release its gradient (the caller masks it out; an
  infinite std must never be multiplied into a noise draw).

  Args:
    c: the Gaussian constant (`gaussian_constant`), scalar or broadcastable.
    sensitivity: Delta_s (`paper_sensitivity`), scalar or broadcastable (e.g. ``[N]``).
    epsilon: per-device budgets eps_i[t], e.g. float32 ``[N]``.

  Returns:
    The noise std per coordinate in gradient units, the broadcast shape, float32 (or
    the inputs' wider float dtype under x64).
  """
  eps = jnp.asarray(epsilon)
  if not jnp.issubdtype(eps.dtype, jnp.floating):
    eps = eps.astype(jnp.float32)
  ok = eps > 0
  safe = jnp.where(ok, eps, jnp.ones_like(eps))
  sigma = jnp.asarray(c, eps.dtype) * jnp.asarray(sensitivity, eps.dtype) / safe
  return jnp.where(ok, sigma, jnp.inf)


def switch_ready(sigma_next: Any, sigma_channel: Any, selected: Any) -> jnp.ndarray:
  """The dynamic noise switch-off rule (eq. 23 [R?]): True iff at least one device is
  selected and every selected device i has sigma_channel_i > 0 and
  sigma_next_i <= sigma_channel_i, i.e. the artificial noise LAPA would add next round is
  no larger than the decoded channel noise, which the paper then takes to provide the DP
  (Sec. IV-A; T_th is the first round where this holds). That is the paper's
  assumption, not ours: on its digital (BPSK/QPSK) link the channel adds bit errors, not
  Gaussian noise, so the run's guarantee ends at the switch
  (`fedjax_dp.algorithms.lapa.algorithm`).

  Pure jnp, never raises; NaN entries of selected devices count as not ready.

  Args:
    sigma_next: float ``[N]``, next round's artificial noise std c Delta_s / eps_i[t+1].
    sigma_channel: float ``[N]``, the decoded channel-noise std sigma_{c,i} in the same
      (gradient) units.
    selected: bool ``[N]``, the selected set S (eq. 22).

  Returns:
    A bool scalar jnp array.
  """
  sel = jnp.asarray(selected, bool)
  sn = jnp.asarray(sigma_next)
  sc = jnp.asarray(sigma_channel)
  ok = (sc > 0) & (sn <= sc)
  return jnp.any(sel) & jnp.all(jnp.where(sel, ok, True))


def classical_valid(epsilon: Any) -> jnp.ndarray:
  """Whether each epsilon lies in (0, 1), the range where the classical Gaussian
  mechanism's c(delta) = sqrt(2 ln(1.25/delta)) is proved (Dwork & Roth, Thm. A.1).
  Pure jnp, elementwise; bool array of ``epsilon``'s shape."""
  eps = jnp.asarray(epsilon)
  return (eps > 0) & (eps < 1)


def gaussian_epsilon_accountant(noise_multiplier: float, delta: float,
                                accountant: str = "rdp") -> float:
  """Epsilon at ``delta`` of ONE Gaussian release with noise multiplier
  z = sigma / Delta_s, according to dp_accounting (host-side, float).

  ``"rdp"``: `dp_accounting.rdp.RdpAccountant` over
  `fedjax_dp.privacy.accountants.DEFAULT_RDP_ORDERS`; ``"pld"``: the (near-exact)
  privacy-loss-distribution accountant, discretisation 1e-4.

  Used to check the paper's calibration: with z = c(delta) / eps, the
  accountant's epsilon is <= eps for every eps in (0, 1) (the classical theorem's
  range). The classical formula stays conservative beyond 1 and first breaks (accountant
  epsilon > eps) above (bisection; `CLASSICAL_BREAKPOINTS`):

    ========  ============  ============
    delta     RDP           PLD
    ========  ============  ============
    1e-5      eps > 5.667   eps > 8.420
    1e-4      eps > 5.383   eps > 7.991
    1e-3      eps > 5.030   eps > 7.464
    ========  ============  ============

  E.g. at delta = 1e-5, eps = 10 gives z = 0.4845 and RDP epsilon 11.15 (PLD 10.39);
  eps = 20 gives 27.0 (PLD 25.4). The classical theorem itself promises nothing for
  eps >= 1; these figures are what the accountant measures, per release (a run composes
  T of them, and basic composition of the eps_i[t] is the paper's only accounting).

  Args:
    noise_multiplier: z >= 0 (0 gives inf, inf gives 0).
    delta: in (0, 1).
    accountant: ``"rdp"`` (default) or ``"pld"``.

  Returns:
    epsilon as a Python float.

  Raises:
    FedJaxDpError: z negative or NaN (option ``noise_multiplier``), delta outside (0, 1)
      (``delta``), an unknown accountant (``accountant``).
  """
  check_choice("accountant", accountant, ACCOUNTANTS)
  delta = check_delta(delta)
  if isinstance(noise_multiplier, bool):
    raise FedJaxDpError(f"noise_multiplier must be a number >= 0, got "
                        f"{noise_multiplier!r}.", option="noise_multiplier")
  try:
    z = float(noise_multiplier)
  except (TypeError, ValueError):
    raise FedJaxDpError(f"noise_multiplier must be a number >= 0, got "
                        f"{noise_multiplier!r}.", option="noise_multiplier") from None
  if not z >= 0:
    raise FedJaxDpError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}.",
                        option="noise_multiplier")
  if z == 0:
    return math.inf
  if math.isinf(z):
    return 0.0
  if accountant == "rdp":
    acc = dp_accounting.rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
  else:
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dp_accounting.GaussianDpEvent(z))
  return float(acc.get_epsilon(delta))
