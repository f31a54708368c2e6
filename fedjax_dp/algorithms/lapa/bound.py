"""Theorem 1 of LAPA (Sun, Liu, Ni, Wang, Geng, Lai, Jamalipour, "LAPA-based
Dynamic Privacy Optimization for Wireless Federated Learning in Heterogeneous
Environments", arXiv:2505.19823, 2025): the convergence bound Phi(p) of eq. (24) = (51)
as a function of the transmit powers, the switching round T_th(p) of eq. (23), and the
step-size condition eqs. (25)-(27).

The text of the paper we worked from lost its equations; the formulas below are our
reconstruction (tags as in `fedjax_dp.algorithms.lapa`: [T] stated, [R+]/[R?]
reconstructed, [D] our decision).

Model of the bound (Sec. IV-B, Appendix I, [R?] appendix chain eqs. 40-51): gradient sharing with
aggregation weights rho_i over the selected devices S, step size eta, and per-round
noise ``n[t] = sum_{i in S} rho_i (1{t < T_th} n_i[t] + z_i[t])`` where ``n_i[t] ~
N(0, sigma_i[t]^2 I_d)`` is the artificial DP noise and ``z_i[t] ~ N(0, sigma_c,i^2
I_d)`` the decoded channel noise (eq. 42). Under A1-A4 (L-smooth, mu-strongly convex,
B-local dissimilarity)::

  E[F(w[T]) - F*] <= A^T (F(w[0]) - F*)
      + (L eta^2 d / 2) sum_{tau < T_th} A^(T-1-tau) sum_{i in S} rho_i^2 sigma_i[tau]^2
      + (L eta^2 d / 2) sum_{i in S} rho_i^2 sigma_c,i(p_i)^2 (1 - A^T) / (1 - A)

with ``A = 1 - 2 mu eta + mu L eta^2 B^2`` (eq. 46). Rounds are 0-based here: round
tau in [0, T) uses artificial noise iff tau < T_th, so T_th is also the number of
rounds with artificial noise.

Channel quantities (Sec. II-B): SNR ``gamma_i = p_i g_i / sigma_z^2`` with
``g_i = ||h_i||^2`` (eq. 6 with an MRC receiver, [R?]) and decoded per-coordinate
channel-noise std ``sigma_c,i(p_i) = kappa / sqrt(gamma_i)`` in gradient units, kappa
the symbol scale ([D], `fedjax_dp.algorithms.lapa.channel.symbol_scale`). Power 0 on a
selected device means infinite channel noise, so Phi = inf there.

Everything that takes a power vector is pure ``jax.numpy``, vectorised over the leading
axes of ``powers`` (``[..., N]``) and jit-compatible; the hyper-parameters (eta, mu, L,
B, d, F0, T) are host-side scalars, checked by `convergence_bound` / `bound_terms` /
`make_objective`, which raise `FedJaxDpError` when the bound does not converge
(A >= 1). Only the argument checks are host-side: the returned values are jnp arrays
and the functions can be called on traced powers.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import jax
import jax.core  # explicit: `jax.core.Tracer` (value checks skip traced arrays)
import jax.numpy as jnp
import numpy as np

from fedjax_dp.validation import (FedJaxDpError, check_int, check_non_negative,
                                  check_positive)

__all__ = ["contraction", "step_size_ok", "dissimilarity_b2", "channel_noise_std",
           "switch_round", "bound_terms", "convergence_bound", "make_objective"]


# --------------------------------------------------------------------------------------
# Step size and dissimilarity (eqs. 25-27, 46, assumption A4).


def contraction(eta, mu, lipschitz, b):
  """Contraction factor ``A = 1 - 2 mu eta + mu L eta^2 B^2`` of Theorem 1 (LAPA,
  eq. 46 / 24, [R+]).

  Args:
    eta: learning rate (float or array; broadcasts with the others).
    mu: strong-convexity constant (assumption A2).
    lipschitz: smoothness constant L (assumption A1).
    b: local-dissimilarity constant B >= 1 (assumption A4); B, not B^2.

  Returns:
    jnp float array, the broadcast shape of the inputs. ``A < 1`` iff
    ``0 < eta < 2 / (L B^2)`` (eqs. 25-27); its minimum over eta is
    ``1 - mu / (L B^2)`` at ``eta = 1 / (L B^2)``.
  """
  eta = jnp.asarray(eta)
  return 1.0 - 2.0 * mu * eta + mu * lipschitz * eta ** 2 * jnp.asarray(b) ** 2


def step_size_ok(eta, lipschitz, b):
  """Step-size condition ``0 < eta < 2 / (L B^2)`` (LAPA, eq. 27, [R+]); for
  mu > 0 it is equivalent to ``A < 1`` (eqs. 25-26).

  Returns:
    jnp bool array, the broadcast shape of the inputs.
  """
  eta = jnp.asarray(eta)
  return (eta > 0) & (eta < 2.0 / (lipschitz * jnp.asarray(b) ** 2))


def dissimilarity_b2(local_grads, weights):
  """Estimate of B^2 of assumption A4 at one point w (LAPA, A4 after FedProx [35];
  [D]): ``sum_i rho_i ||g_i||^2 / ||sum_i rho_i g_i||^2``.

  Args:
    local_grads: float ``[N, d]`` local gradients ``grad F_i(w)`` (flatten pytrees
      first).
    weights: float ``[N]`` non-negative weights rho_i; they are renormalised to sum to
      1 (A4 is stated for weights summing to 1), so the estimate is >= 1 by Jensen.
      Zero-weight (excluded) devices do not count.

  Returns:
    jnp float scalar B^2 >= 1 (inf when the weighted mean gradient is 0 and some
    device gradient is not; nan when all gradients are 0).
  """
  g = jnp.asarray(local_grads)
  w = jnp.asarray(weights, dtype=g.dtype)
  w = w / jnp.sum(w)
  num = jnp.sum(w * jnp.sum(g * g, axis=-1))
  mean = jnp.sum(w[:, None] * g, axis=0)
  return num / jnp.sum(mean * mean)


# --------------------------------------------------------------------------------------
# Channel noise and the switching round (eq. 23).


def channel_noise_std(powers, gains, noise_power, kappa):
  """Decoded per-coordinate channel-noise std ``sigma_c,i = kappa / sqrt(gamma_i)`` with
  ``gamma_i = p_i g_i / sigma_z^2`` (LAPA, eq. 6 with MRC [R?]; kappa
  [D]).

  Args:
    powers: float ``[..., N]`` transmit powers p_i (watts).
    gains: float ``[N]`` channel gains ``g_i = ||h_i||^2`` (linear).
    noise_power: sigma_z^2 (watts).
    kappa: symbol scale (gradient units per transmitted symbol).

  Returns:
    jnp float ``[..., N]`` (gradient units); ``inf`` where ``p_i g_i == 0``; 0 where
    ``noise_power == 0`` or ``kappa == 0`` (ideal channel).
  """
  p = jnp.asarray(powers)
  snr = p * jnp.asarray(gains, dtype=p.dtype) / noise_power
  return kappa / jnp.sqrt(snr)


def _channel_var(powers, gains, noise_power, kappa):
  """``sigma_c,i^2 = kappa^2 sigma_z^2 / (p_i g_i)`` (inf at p_i g_i = 0, 0 if ideal)."""
  p = jnp.asarray(powers)
  num = (kappa ** 2) * noise_power
  g = jnp.asarray(gains, dtype=p.dtype)
  return jnp.where(num == 0, jnp.zeros_like(p), num / (p * g))


def switch_round(sigma_art, sigma_channel, selected):
  """Noise switching round T_th of eq. (23) (LAPA, [R?]; a global
  switch, all selected devices aligned [D]).

  ``T_th`` is the first 0-based round tau with ``sigma_art[tau, i] <= sigma_channel[...,
  i]`` for every selected i; it is also the number of rounds that use artificial noise.
  A device with zero channel noise (ideal channel) never counts as aligned (the channel
  gives it no privacy), so an ideal channel gives ``T_th = T`` (no switch). With no
  selected device the condition holds vacuously and ``T_th = 0``.

  Args:
    sigma_art: float ``[T, N]`` recorded artificial-noise stds sigma_i[tau] (eqs. 18-19,
      gradient units).
    sigma_channel: float ``[..., N]`` decoded channel-noise stds sigma_c,i (same units).
    selected: bool ``[N]`` selection mask S (eq. 22).

  Returns:
    jnp int32 ``[...]`` in ``[0, T]``; ``T`` when the schedule never drops below the
    channel noise.
  """
  sa = jnp.asarray(sigma_art)
  sc = jnp.asarray(sigma_channel)
  sel = jnp.asarray(selected, dtype=bool)
  num_rounds = sa.shape[0]
  sc_ = sc[..., None, :]                                            # [..., 1, N]
  aligned = (sc_ > 0) & (sa <= sc_)                                 # [..., T, N]
  ok = jnp.all(aligned | ~sel, axis=-1)                             # [..., T]
  first = jnp.argmax(ok, axis=-1)
  return jnp.where(jnp.any(ok, axis=-1), first, num_rounds).astype(jnp.int32)


# --------------------------------------------------------------------------------------
# Theorem 1 (eq. 24 = 51).


def _check_array(name: str, value: Any, shape: Optional[Tuple[int, ...]] = None,
                 ndim: Optional[int] = None, non_negative: bool = True):
  """Shape checks always; value checks when the array is concrete (not traced)."""
  arr = jnp.asarray(value) if not isinstance(value, jax.core.Tracer) else value
  if ndim is not None and arr.ndim != ndim:
    raise FedJaxDpError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}.",
                        option=name)
  if shape is not None and tuple(arr.shape) != tuple(shape):
    raise FedJaxDpError(f"{name} must have shape {tuple(shape)}, got {arr.shape}.",
                        option=name)
  if non_negative and not isinstance(arr, jax.core.Tracer):
    host = np.asarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(host)):
      raise FedJaxDpError(f"{name} must be finite; got non-finite entries.", option=name)
    if np.any(host < 0):
      raise FedJaxDpError(f"{name} must be non-negative; got min {host.min()!r}.",
                          option=name)
  return arr


def _prepare(sigma_art, gains, noise_power, kappa, rho, selected, eta, mu, lipschitz, b,
             dim, initial_gap, rounds) -> Dict[str, Any]:
  """Host-side checks of Theorem 1's constants; returns them normalised."""
  sa = _check_array("sigma_art", sigma_art, ndim=2)
  if sa.shape[0] < 1:
    raise FedJaxDpError("sigma_art must record at least one round, got shape "
                        f"{sa.shape}.", option="sigma_art")
  n = sa.shape[1]
  gains = _check_array("gains", gains, shape=(n,))
  rho = _check_array("rho", rho, shape=(n,))
  sel = jnp.asarray(selected)
  if sel.shape != (n,):
    raise FedJaxDpError(f"selected must have shape ({n},), got {sel.shape}.",
                        option="selected")
  sel = sel.astype(bool)
  noise_power = check_non_negative("noise_power", noise_power)
  kappa = check_non_negative("kappa", kappa)
  eta = check_positive("eta", eta)
  mu = check_positive("mu", mu)
  lipschitz = check_positive("lipschitz", lipschitz)
  if mu > lipschitz:
    raise FedJaxDpError(f"mu must be <= lipschitz (assumption A3: mu I <= Hessian <= L I),"
                        f" got mu={mu!r} > lipschitz={lipschitz!r}.", option="mu")
  b = check_positive("b", b)
  if b < 1.0:
    raise FedJaxDpError(f"b must be >= 1 (assumption A4, B-local dissimilarity), got "
                        f"{b!r}.", option="b")
  dim = check_int("dim", dim, minimum=1)
  initial_gap = check_non_negative("initial_gap", initial_gap)
  rounds = sa.shape[0] if rounds is None else check_int("rounds", rounds, minimum=1)
  # 1 - A = mu eta (2 - L eta B^2), kept in float64 (A is often within 1e-3 of 1).
  one_minus_a = mu * eta * (2.0 - lipschitz * eta * b * b)
  a = 1.0 - one_minus_a
  if one_minus_a <= 0.0:
    raise FedJaxDpError(
        f"eta={eta!r} gives contraction A={a!r} >= 1, so the bound of Theorem 1 does not "
        f"converge; eta must be in (0, 2 / (L B^2)) = (0, {2.0 / (lipschitz * b * b)!r}) "
        "(eq. 27).", option="eta")
  return dict(sigma_art=sa, gains=gains, noise_power=noise_power, kappa=kappa, rho=rho,
              selected=sel, a=a, one_minus_a=one_minus_a,
              log_a=math.log1p(-one_minus_a) if one_minus_a < 1.0 else -math.inf,
              prefactor=0.5 * lipschitz * eta ** 2 * dim,
              initial_gap=initial_gap, rounds=rounds)


def _terms(powers, c) -> Dict[str, jnp.ndarray]:
  """The three terms of eq. (24) for prepared constants ``c`` (pure jnp). Powers of A
  with static exponents are computed on the host in float64."""
  p = jnp.asarray(powers)
  dtype = jnp.result_type(p.dtype, jnp.float32)
  p = p.astype(dtype)
  a, one_minus_a = c["a"], c["one_minus_a"]
  log_a = max(c["log_a"], -1e30)                 # A = 0: A^k = exp(k log A) still works
  rounds = c["rounds"]
  sel = c["selected"]
  rho2 = jnp.where(sel, jnp.asarray(c["rho"], dtype) ** 2, 0.0)
  sa = jnp.asarray(c["sigma_art"], dtype)[:rounds]                 # [R, N], R <= T
  rec = sa.shape[0]
  # Switching round over the recorded schedule; a schedule shorter than T is extended
  # by repeating its last row, which cannot align later if its last row did not.
  var_c = _channel_var(p, c["gains"], c["noise_power"], c["kappa"])  # [..., N]
  t_th = switch_round(sa, jnp.sqrt(var_c), sel)
  t_th = jnp.where(t_th >= rec, rounds, t_th).astype(jnp.int32)
  # Artificial term: prefix sums of A^(T-1-tau) s[tau], s[tau] = sum_S rho^2 sigma^2.
  s = jnp.sum(rho2 * sa ** 2, axis=-1)                               # [R]
  w = jnp.asarray(np.power(a, rounds - 1 - np.arange(rec, dtype=np.float64)), dtype) * s
  csum = jnp.concatenate([jnp.zeros((1,), dtype), jnp.cumsum(w)])   # [R + 1]
  art = csum[jnp.minimum(t_th, rec)]
  if rounds > rec:
    # Rounds tau in [rec, T_th) repeat s[rec - 1]:
    # sum_{k=T-T_th}^{T-1-rec} A^k = A^(T-T_th) (1 - A^(T_th-rec)) / (1 - A).
    k_hi = (rounds - t_th).astype(dtype)
    k_run = (t_th - rec).astype(dtype)
    tail = (s[rec - 1] * jnp.exp(k_hi * log_a) * -jnp.expm1(k_run * log_a)
            / one_minus_a)
    art = art + jnp.where(t_th > rec, tail, 0.0)
  # Channel term (all T rounds); 0 * inf is avoided by masking unselected devices.
  chan_sum = jnp.sum(jnp.where(rho2 > 0, rho2 * var_c, 0.0), axis=-1)
  geo = float(-np.expm1(rounds * log_a) / one_minus_a)             # (1 - A^T) / (1 - A)
  pref = c["prefactor"]
  initial = jnp.full(t_th.shape, float(np.power(a, rounds)) * c["initial_gap"], dtype)
  return {"initial": initial, "artificial": pref * art,
          "channel": pref * chan_sum * geo, "switch_round": t_th}


def bound_terms(powers, *, sigma_art, gains, noise_power, kappa, rho, selected, eta, mu,
                lipschitz, b, dim, initial_gap, rounds=None) -> Dict[str, jnp.ndarray]:
  """The terms of Theorem 1, eq. (24) = (51) (LAPA, [R?]), separately, for plots.

  Arguments as in `convergence_bound`.

  Returns:
    dict of jnp arrays of shape ``powers.shape[:-1]``:
    ``"initial"`` = ``A^T (F(w0) - F*)``;
    ``"artificial"`` = ``(L eta^2 d/2) sum_{tau<T_th} A^(T-1-tau) sum_S rho_i^2
    sigma_i[tau]^2``;
    ``"channel"`` = ``(L eta^2 d/2) sum_S rho_i^2 sigma_c,i(p_i)^2 (1-A^T)/(1-A)``
    (inf where a selected device has power 0);
    ``"switch_round"`` = int32 T_th(p) of eq. (23).

  Raises:
    FedJaxDpError: as `convergence_bound`.
  """
  c = _prepare(sigma_art, gains, noise_power, kappa, rho, selected, eta, mu, lipschitz, b,
               dim, initial_gap, rounds)
  return _terms(powers, c)


def convergence_bound(powers, *, sigma_art, gains, noise_power, kappa, rho, selected, eta,
                      mu, lipschitz, b, dim, initial_gap, rounds=None):
  """Phi(p): the right-hand side of Theorem 1, eq. (24) = (51) (LAPA, [R?]; Sec.
  IV-B), the objective of the power problem (28)::

    Phi(p) = A^T F0 + (L eta^2 d / 2) sum_{tau < T_th(p)} A^(T-1-tau) sum_S rho_i^2
             sigma_i[tau]^2 + (L eta^2 d / 2) sum_S rho_i^2 sigma_c,i(p_i)^2 (1-A^T)/(1-A)

  with ``A`` of eq. (46), ``sigma_c,i(p_i) = kappa sigma_z / sqrt(p_i g_i)`` and
  ``T_th(p) = switch_round(sigma_art, sigma_c(p), selected)`` (eq. 23).

  Args:
    powers: float ``[..., N]`` transmit powers (watts), >= 0 (not checked: they may be
      traced).
    sigma_art: float ``[T_rec, N]`` recorded artificial-noise stds sigma_i[tau] (gradient
      units), e.g. from a pilot LAPA run ([D]). Rows past ``rounds`` are
      ignored; if ``rounds > T_rec`` the last row is repeated.
    gains: float ``[N]`` channel gains ``||h_i||^2`` (linear).
    noise_power: sigma_z^2 (watts), >= 0 (0: ideal channel, no channel noise, no
      switch).
    kappa: the symbol scale (`fedjax_dp.algorithms.lapa.channel.symbol_scale`), >= 0.
    rho: float ``[N]`` aggregation weights (eq. 21/22).
    selected: bool ``[N]`` selection mask S (eq. 22); unselected devices add nothing.
    eta, mu, lipschitz, b: learning rate and constants of assumptions A1-A4
      (``mu <= lipschitz``, ``b >= 1``; b is B, not B^2).
    dim: model dimension d.
    initial_gap: ``F(w[0]) - F*`` (our nominal value: ln 10).
    rounds: total number of rounds T (default ``T_rec``).

  Returns:
    jnp float ``[...]`` (``powers.shape[:-1]``): Phi(p) in loss units; ``inf`` when a
    selected device has power 0 (infinite channel noise).

  Raises:
    FedJaxDpError: bad shapes, negative or non-finite constants, ``mu > lipschitz``,
      ``b < 1``, or ``eta`` giving ``A >= 1`` (the bound does not converge, eq. 25-27).
  """
  terms = bound_terms(powers, sigma_art=sigma_art, gains=gains, noise_power=noise_power,
                      kappa=kappa, rho=rho, selected=selected, eta=eta, mu=mu,
                      lipschitz=lipschitz, b=b, dim=dim, initial_gap=initial_gap,
                      rounds=rounds)
  return terms["initial"] + terms["artificial"] + terms["channel"]


def make_objective(*, sigma_art, gains, noise_power, kappa, rho, selected, eta, mu,
                   lipschitz, b, dim, initial_gap, rounds=None
                   ) -> Tuple[Callable[[Any], jnp.ndarray], Callable[[Any], jnp.ndarray]]:
  """Checks Theorem 1's constants once and returns ``(objective_fn, switch_fn)`` for the
  power optimiser (`fedjax_dp.algorithms.lapa.ddpg.train_ddpg`, Algorithm 3):
  ``objective_fn(powers [..., N]) -> Phi [...]`` (eq. 24) and ``switch_fn(powers) ->
  int32 T_th [...]`` (eq. 23), both pure jnp and jit-compatible.

  Arguments and errors as in `convergence_bound`.
  """
  c = _prepare(sigma_art, gains, noise_power, kappa, rho, selected, eta, mu, lipschitz, b,
               dim, initial_gap, rounds)

  def objective_fn(powers):
    t = _terms(powers, c)
    return t["initial"] + t["artificial"] + t["channel"]

  def switch_fn(powers):
    return _terms(powers, c)["switch_round"]

  return objective_fn, switch_fn
