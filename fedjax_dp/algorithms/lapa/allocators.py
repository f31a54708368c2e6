"""Per-round, per-device privacy-budget allocators of LAPA (Sec. III-B) and
its benchmarks (Sec. V-C): LAPA (eqs. 10-16), uniform DP (Benchmark 3), ARB-approx
(Benchmark 4) and no DP (Configuration 4).

Every per-round function is pure jnp with static shapes, so `step` runs inside the
jit-compiled round and under ``jax.lax.scan``; the configuration `AllocatorConfig` is a
hashable NamedTuple passed as a static argument. Host-side `init_state` validates it.

The round t+1 budgets come from what the server saw in round t (Sec. III-B;
Algorithm 1, lines 14-19):

* LAPA: the global perturbed gradients g~[t] go into a ring buffer of the last W rounds;
  m sorted history points, the newest last, are drawn at random from it and give the
  PID-like error e (eqs. 10-11, `pid_error`); the round budget is
  eps[t+1] = exp(-e) (eps_T - eps_c[t]) / (T - t) (eq. 12 [R?], `round_budget`); each
  selected device's received gradient makes an angle with the global one (eq. 13),
  smoothed over rounds (eq. 14), mapped by a Gompertz curve (eq. 15 [R?]/[D]) and the
  round budget is split in proportion (eq. 16 [R?], `split_budget`).
* uniform: eps_T / T for every round and every selected device (Benchmark 3 [D]).
* ARB-approx: one budget for all devices, raised by (1 + beta) when the global gradient
  norm fell, else lowered by (1 - beta) (Benchmark 4 [D]; the ARB paper [27]
  is not accessible, so this is our approximation, not ARB).
* none: zero budgets (the caller adds no artificial noise).

Accounting is the paper's basic composition: every device's sum of released budgets
stays <= eps_T whatever the kind and split (a per-device clamp, step 4 of `step`), up to
float32 rounding (a relative 1e-6). With ``split="mean"`` a device may get more than the
round budget eps[t], so the clamp can bind and leave it with 0 (no release, sigma = inf
in `fedjax_dp.algorithms.lapa.calibration.noise_std`) in later rounds.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple, Tuple, get_args

import jax
import jax.numpy as jnp

# eqs. 13-14 live with the aggregators (BEDA uses them too); re-exported here.
from fedjax_dp.algorithms.lapa.aggregation import deviation_angles, smoothed_angles
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_positive)

__all__ = ["Allocator", "ALLOCATORS", "GOMPERTZ_MAPS", "SPLITS", "BUDGETS",
           "AllocatorConfig",
           "AllocatorState", "validate_config", "sample_history_ages", "pid_error",
           "round_budget", "gompertz", "split_budget", "init_state", "step"]

Allocator = Literal["lapa", "uniform", "arb", "none"]
ALLOCATORS: Tuple[str, ...] = get_args(Allocator)
GOMPERTZ_MAPS = ("increasing", "fedadp")
SPLITS = ("mean", "sum", "equal")
#: Eq. 12's round-budget variants (`round_budget`).
BUDGETS = ("exp", "normalised", "flat")


class AllocatorConfig(NamedTuple):
  """Static (hashable) allocator configuration.

  Attributes:
    kind: one of `ALLOCATORS`.
    epsilon_total: eps_T, each device's total budget under basic composition (> 0).
    rounds: T, the number of rounds (>= 1).
    kp: K_p, proportional coefficient of the PID-like error (eq. 11; our default 0.9).
    ks: K_s, integral coefficient (eq. 11; our default 0.1).
    history_points: m >= 2 sampled history points ([D]: 5).
    window: W >= m, the ring buffer length: the last W global gradients ([D]: 10).
    error_scale: Z > 0, the normaliser of E = ||Delta g||_2 / Z ([D]: the clip
      norm C).
    initial_error: e_0 >= 0, the error used while fewer than 2 history points exist.
    alpha: the Gompertz "decay factor" alpha > 0 (eq. 15; FedAdp's 5).
    gompertz: ``"increasing"`` ([D], text-consistent: non-decreasing in the
      smoothed angle) or ``"fedadp"`` (FedAdp's original, decreasing map).
    split: ``"mean"`` (the mean over the selected devices equals eps[t], our
      alternative [D]), ``"sum"`` (device budgets sum to eps[t], eq. 16 literal) or
      ``"equal"`` (every selected device gets eps[t]: no personalisation, eqs. 13-16
      switched off; a control of the sensitivity study, not the paper's).
    budget: eq. 12's round budget (`round_budget`): ``"exp"`` (our
      reconstruction, default), ``"normalised"`` (exp(-e) over its running mean: the
      whole budget is spent) or ``"flat"`` (no exp(-e) factor: the remaining budget
      spread evenly; a control).
    arb_beta: ARB-approx step beta in [0, 1) (Benchmark 4 [D]).
    min_share: LAPA's floor: every selected device gets at least min_share times its
      even share (eps[t+1] with the mean split, eps[t+1] / |S| with the sum split; a
      clamp "so no device gets near-zero budget", [D]; 0 = the split alone; with
      the sum split a binding floor makes the budgets add up to a little more than
      eps[t+1]; each device's total stays capped at eps_T). Without it the split feeds back on itself: a device whose upload is
      noisiest dominates the global gradient, so its angle to it shrinks (eq. 13), its
      Gompertz contribution and budget shrink (eqs. 15-16) and its noise grows again.
  """
  kind: str
  epsilon_total: float
  rounds: int
  kp: float = 0.9
  ks: float = 0.1
  history_points: int = 5
  window: int = 10
  error_scale: float = 1.0
  initial_error: float = 1.0
  alpha: float = 5.0
  gompertz: str = "increasing"
  split: str = "mean"
  arb_beta: float = 0.1
  min_share: float = 0.5
  budget: str = "exp"


class AllocatorState(NamedTuple):
  """Allocator state carried from round to round (all jnp, static shapes).

  Attributes:
    history: float32 ``[W, d]`` ring buffer of global gradients g~[t]; the gradient of
      the k-th push (0-based) sits in row k mod W.
    filled: int32 scalar, the number of gradients pushed so far.
    theta_smooth: float32 ``[N]`` smoothed angles (eq. 14), radians (LAPA only; zeros
      otherwise).
    epsilon_round: float32 scalar eps[t] of the round about to run.
    epsilon_devices: float32 ``[N]`` eps_i[t] of the round about to run (0 for
      unselected devices).
    consumed: float32 scalar eps_c, the sum of the round budgets spent (eq. 12).
    consumed_devices: float32 ``[N]`` sum over rounds run of eps_i[t] per device.
    error: float32 scalar e used for the current eps[t] (LAPA; 0 for other kinds).
    prev_grad_norm: float32 scalar ||g~[t-1]|| of the last pushed gradient (ARB).
    multiplier_sum: float32 scalar, the sum of exp(-e) over the rounds budgeted so far
      (round 1's e_0 included; LAPA's ``budget="normalised"``).
  """
  history: jax.Array
  filled: jax.Array
  theta_smooth: jax.Array
  epsilon_round: jax.Array
  epsilon_devices: jax.Array
  consumed: jax.Array
  consumed_devices: jax.Array
  error: jax.Array
  prev_grad_norm: jax.Array
  multiplier_sum: jax.Array


def validate_config(config: AllocatorConfig) -> AllocatorConfig:
  """Host-side check of every field of ``config``; returns it unchanged.

  Raises:
    FedJaxDpError: naming the first offending field (``kind``, ``epsilon_total``, ...),
      its value and what is allowed; also when ``config`` is not an `AllocatorConfig`.
  """
  if not isinstance(config, AllocatorConfig):
    raise FedJaxDpError(f"config must be an AllocatorConfig, got {type(config).__name__}.",
                        option="config")
  check_choice("kind", config.kind, ALLOCATORS)
  check_positive("epsilon_total", config.epsilon_total)
  check_int("rounds", config.rounds, minimum=1)
  check_non_negative("kp", config.kp)
  check_non_negative("ks", config.ks)
  m = check_int("history_points", config.history_points, minimum=2)
  w = check_int("window", config.window, minimum=2)
  if w < m:
    raise FedJaxDpError(f"window must be >= history_points ({m}), got {w}.",
                        option="window")
  check_positive("error_scale", config.error_scale)
  check_non_negative("initial_error", config.initial_error)
  check_positive("alpha", config.alpha)
  check_choice("gompertz", config.gompertz, GOMPERTZ_MAPS)
  check_choice("split", config.split, SPLITS)
  check_choice("budget", config.budget, BUDGETS)
  share = check_non_negative("min_share", config.min_share)
  if share > 1:
    raise FedJaxDpError(f"min_share must be in [0, 1], got {config.min_share!r}.",
                        option="min_share")
  beta = check_non_negative("arb_beta", config.arb_beta)
  if beta >= 1:
    raise FedJaxDpError(f"arb_beta must be in [0, 1), got {config.arb_beta!r}.",
                        option="arb_beta")
  return config


def _f32(x: Any) -> jax.Array:
  return jnp.asarray(x).astype(jnp.float32)


def _norm(x: jax.Array, axis: int = -1) -> jax.Array:
  """l2 norm along ``axis`` scaled by the largest entry first, so squares of huge
  gradients (sigma ~ 1e19 when a budget is nearly exhausted) do not overflow float32;
  a non-finite entry (inf or NaN) gives +inf."""
  top = jnp.max(jnp.abs(x), axis=axis, keepdims=True)
  fine = jnp.isfinite(top) & (top > 0)
  scale = jnp.where(fine, top, 1.0)
  n = jnp.squeeze(scale, axis) * jnp.sqrt(jnp.sum(jnp.square(x / scale), axis=axis))
  return jnp.where(jnp.squeeze(jnp.isfinite(top), axis), n, jnp.inf)


# ---------------------------------------------------------------------------
# LAPA building blocks.
# ---------------------------------------------------------------------------

def sample_history_ages(key: jax.Array, filled: Any, window: int,
                        history_points: int) -> Tuple[jax.Array, jax.Array]:
  """The m history points of the PID-like error (eqs. 10-11; [D]), as ages.

  Age a is the gradient pushed a rounds before the newest (age 0 = g~[t]). Of the
  n = min(filled, W) stored gradients, the newest is always taken and m - 1 of the n - 1
  older ones are drawn uniformly without replacement (all of them when n - 1 < m - 1);
  the result is sorted oldest first, so that ages[s] > ages[s + 1] and ages[-1] = 0.
  Slots left empty (n - 1 < m - 1) come first and are masked.

  Args:
    key: a JAX PRNG key.
    filled: int scalar (may be traced), the number of gradients pushed so far.
    window: W (static), the ring buffer length.
    history_points: m (static), 2 <= m <= W.

  Returns:
    ``(ages, valid)``: int32 ``[m]`` ages (masked slots hold 0) and bool ``[m]``.
  """
  m, w = int(history_points), int(window)
  n = jnp.minimum(jnp.asarray(filled, jnp.int32), w)
  older = jnp.arange(1, w, dtype=jnp.int32)                      # [W - 1]
  ok = older < n
  score = jnp.where(ok, jax.random.uniform(key, (w - 1,)), 2.0)  # invalid sort last
  pick = jnp.argsort(score)[:m - 1]
  ages, valid = older[pick], ok[pick]
  ages = -jnp.sort(-jnp.where(valid, ages, w))                   # descending, masked first
  valid = ages < w
  ages = jnp.where(valid, ages, 0)
  ages = jnp.concatenate([ages, jnp.zeros((1,), jnp.int32)])
  valid = jnp.concatenate([valid, (n >= 1)[None]])
  return ages.astype(jnp.int32), valid


def pid_error(history: Any, filled: Any, key: jax.Array, history_points: int = 5,
              kp: float = 0.9, ks: float = 0.1, error_scale: float = 1.0,
              initial_error: float = 1.0) -> jax.Array:
  """e = K_p E_m + K_s mean(E_2, ..., E_m), the PID-like error (eqs. 10-11 [X, R+];
  [D] for the norm and the sampling).

  With the sampled history points i_1 < ... < i_m (`sample_history_ages`, i_m the
  newest), E_s = ||g~[i_s] - g~[i_{s-1}]||_2 / Z (eq. 10 with a norm) for s = 2..m; the
  mean runs over the differences available (m - 1 once the buffer holds m gradients).
  With fewer than 2 stored gradients the error is e_0.

  Args:
    history: float ``[W, d]`` ring buffer (`AllocatorState.history`).
    filled: int scalar (may be traced), the number of gradients pushed so far.
    key: a JAX PRNG key for the sampling.
    history_points: m (static, 2 <= m <= W).
    kp, ks: K_p, K_s (eq. 11).
    error_scale: Z > 0, in gradient-norm units.
    initial_error: e_0.

  Returns:
    float32 scalar e >= 0 (dimensionless); +inf when a difference is not finite
    (overflowing or NaN gradients), which `round_budget` turns into a zero budget.
  """
  h = jnp.asarray(history).astype(jnp.float32)
  w = h.shape[0]
  filled = jnp.asarray(filled, jnp.int32)
  ages, valid = sample_history_ages(key, filled, w, history_points)
  pos = jnp.mod(filled - 1 - ages, w)
  rows = h[pos]                                                   # [m, d]
  diffs = _norm(rows[1:] - rows[:-1], axis=1) / error_scale
  pair = valid[1:] & valid[:-1]
  mean = jnp.sum(jnp.where(pair, diffs, 0.0)) / jnp.maximum(jnp.sum(pair), 1)
  e = jnp.float32(0.0)                      # a zero coefficient never meets an inf E
  if kp:
    e = e + kp * diffs[-1]
  if ks:
    e = e + ks * mean
  return _f32(jnp.where(jnp.minimum(filled, w) >= 2, e, initial_error))


def round_budget(error: Any, epsilon_total: Any, consumed: Any, rounds: Any,
                 t: Any, mode: str = "exp", multiplier_mean: Any = 1.0) -> jax.Array:
  """eps[t] = exp(-e[t]) (eps_T - eps_c[t-1]) / (T - t + 1), LAPA's round budget
  (eq. 12 [R?]; Adp-PPFL-style).

  ``mode`` (static) picks eq. 12's variant: ``"exp"`` the formula above (default);
  ``"normalised"`` exp(-e[t]) / ``multiplier_mean`` in place of exp(-e[t]), the
  mean taken over exp(-e) of the rounds budgeted so far, this one included (the review
  page's "eps[t] proportional to exp(-e[t])" [X] with the constant chosen so that the
  factors average 1: the budget is spent, up to the last round's factor); ``"flat"``
  no factor (the remaining budget spread evenly: with an equal split, uniform DP).
  Every variant is capped at the remaining budget.

  Since exp(-e) <= 1 (e is clamped at 0 from below; a NaN e counts as +inf, i.e. 0
  budget), sum_t eps[t] <= eps_T for any error sequence; eps[t] is non-decreasing
  whenever e[t] is non-increasing (a property of eq. 12 as reconstructed). Rounds outside
  1..T get 0, as does
  an exhausted budget.

  Args:
    error: e[t] (float scalar or array).
    epsilon_total: eps_T.
    consumed: eps_c[t-1], the budget spent in rounds 1..t-1.
    rounds: T.
    t: the 1-based round to budget (int, may be traced).
    mode: one of `BUDGETS` (static).
    multiplier_mean: the mean of exp(-e) over the rounds budgeted so far
      (``"normalised"`` only; > 0).

  Returns:
    float32 eps[t], the broadcast shape of the arguments.
  """
  check_choice("budget", mode, BUDGETS)
  t = jnp.asarray(t, jnp.int32)
  remaining = jnp.maximum(_f32(epsilon_total) - _f32(consumed), 0.0)
  left = jnp.maximum(jnp.asarray(rounds, jnp.int32) - t + 1, 1).astype(jnp.float32)
  e = _f32(error)
  e = jnp.where(jnp.isnan(e), jnp.inf, jnp.maximum(e, 0.0))     # NaN: no budget
  factor = jnp.exp(-e)
  if mode == "normalised":
    mm = _f32(multiplier_mean)
    factor = jnp.where(mm > 0, factor / jnp.where(mm > 0, mm, 1.0), 1.0)
  elif mode == "flat":
    factor = jnp.ones_like(e)
  eps = jnp.minimum(factor * remaining / left, remaining)
  return _f32(jnp.where((t >= 1) & (t <= rounds), eps, 0.0))


def gompertz(theta: Any, alpha: float = 5.0, kind: str = "increasing") -> jax.Array:
  """The contribution map of the smoothed angle (eq. 15 [R?]).

  ``"increasing"`` ([D], default): f = alpha (1 - exp(-exp(alpha (theta - 1)))),
  non-decreasing in theta, as the paper's text requires (small angle = large
  contribution = smaller budget, stronger protection); alpha = 5 gives f(0) = 0.0336,
  f(0.5) = 0.394, f(1) = 3.161, f(1.5) = 5.000 (4.99997).
  ``"fedadp"``: FedAdp's original f = alpha (1 - exp(-exp(-alpha (theta - 1)))), the
  mirror image about theta = 1, non-increasing.
  Values lie in [0, alpha]; no overflow to NaN for large alpha.

  Args:
    theta: float array of angles (radians).
    alpha: the decay factor (> 0; not checked here).
    kind: one of `GOMPERTZ_MAPS` (static).

  Returns:
    float32, ``theta``'s shape.

  Raises:
    FedJaxDpError: unknown ``kind`` (option ``gompertz``), at trace time.
  """
  check_choice("gompertz", kind, GOMPERTZ_MAPS)
  th = _f32(theta)
  sign = 1.0 if kind == "increasing" else -1.0
  return _f32(alpha * (1.0 - jnp.exp(-jnp.exp(sign * alpha * (th - 1.0)))))


def split_budget(epsilon_round: Any, contributions: Any, selected: Any,
                 mode: str = "mean") -> jax.Array:
  """Device budgets from the round budget in proportion to the contributions (eq. 16).

  ``"sum"`` (eq. 16 literal [R?]): eps_i = eps[t] f_i / sum_{j in S} f_j, so the device
  budgets sum to eps[t]. ``"mean"`` (our alternative [D]): eps_i =
  |S| eps[t] f_i / sum_{j in S} f_j, so their mean over S is eps[t]. ``"equal"``
  (a control, not the paper's): eps_i = eps[t], the contributions ignored. Unselected devices
  get 0. If every selected contribution is 0 (or the sum is not finite and positive),
  the split is equal.

  Args:
    epsilon_round: float scalar eps[t].
    contributions: float ``[N]`` f_i >= 0 (`gompertz`).
    selected: bool ``[N]`` S.
    mode: one of `SPLITS` (static).

  Returns:
    float32 ``[N]``.

  Raises:
    FedJaxDpError: unknown ``mode`` (option ``split``), at trace time.
  """
  check_choice("split", mode, SPLITS)
  sel = jnp.asarray(selected, bool)
  f = jnp.where(sel, jnp.maximum(_f32(contributions), 0.0), 0.0)
  if mode == "equal":
    f = sel.astype(jnp.float32)
  total = jnp.sum(f)
  count = jnp.sum(sel).astype(jnp.float32)
  good = (total > 0) & jnp.isfinite(total)
  share = jnp.where(good, f / jnp.where(good, total, 1.0),
                    sel.astype(jnp.float32) / jnp.maximum(count, 1.0))
  if mode in ("mean", "equal"):
    share = share * count
  return _f32(jnp.where(sel, _f32(epsilon_round) * share, 0.0))


# ---------------------------------------------------------------------------
# The allocator.
# ---------------------------------------------------------------------------

def _device_clamp(config: AllocatorConfig, eps_dev: jax.Array, consumed_dev: jax.Array,
                  sel: jax.Array) -> jax.Array:
  """Step 4 of `step`: eps_i <= eps_T - consumed_i, >= 0, 0 outside S (basic
  composition per device, the paper's sum_t eps_i[t] <= eps_T)."""
  room = jnp.float32(config.epsilon_total) - consumed_dev
  return _f32(jnp.where(sel, jnp.maximum(jnp.minimum(eps_dev, room), 0.0), 0.0))


def init_state(config: AllocatorConfig, num_devices: int, dim: int,
               selected: Any) -> AllocatorState:
  """The allocator state holding round 1's budgets.

  Round 1: LAPA eps[1] = exp(-e_0) eps_T / T (eq. 12 at t = 1) split equally over S
  ([D]: no angles yet; equal f in `split_budget`); uniform and ARB-approx
  eps_T / T for every selected device; none 0. Unselected devices get 0.

  Args:
    config: an `AllocatorConfig` (validated here).
    num_devices: N >= 1.
    dim: d >= 1, the flattened gradient size.
    selected: bool ``[N]``, the selected set S (eq. 22); may be a jnp array.

  Returns:
    An `AllocatorState` (float32 / int32 jnp arrays).

  Raises:
    FedJaxDpError: a bad config field, N or d < 1 (``num_devices``, ``dim``) or
      ``selected`` not of shape ``[N]`` (``selected``).
  """
  validate_config(config)
  n = check_int("num_devices", num_devices, minimum=1)
  d = check_int("dim", dim, minimum=1)
  sel = jnp.asarray(selected)
  if sel.shape != (n,):
    raise FedJaxDpError(f"selected must have shape ({n},), got {tuple(sel.shape)}.",
                        option="selected")
  sel = sel.astype(bool)
  base = config.epsilon_total / config.rounds
  if config.kind == "lapa":
    eps1 = (math.exp(-config.initial_error) if config.budget == "exp" else 1.0) * base
    eps_dev = split_budget(eps1, jnp.ones((n,), jnp.float32), sel, config.split)
    error = config.initial_error
  elif config.kind in ("uniform", "arb"):
    eps1 = base
    eps_dev = jnp.where(sel, jnp.float32(eps1), 0.0)
    error = 0.0
  else:
    eps1, eps_dev, error = 0.0, jnp.zeros((n,), jnp.float32), 0.0
  zeros_n = jnp.zeros((n,), jnp.float32)
  eps_dev = _device_clamp(config, _f32(eps_dev), zeros_n, sel)
  return AllocatorState(
      history=jnp.zeros((config.window, d), jnp.float32),
      filled=jnp.zeros((), jnp.int32),
      theta_smooth=zeros_n,
      epsilon_round=_f32(eps1),
      epsilon_devices=eps_dev,
      consumed=jnp.zeros((), jnp.float32),
      consumed_devices=zeros_n,
      error=_f32(error),
      prev_grad_norm=jnp.zeros((), jnp.float32),
      multiplier_sum=_f32(math.exp(-float(error)) if config.kind == "lapa" else 0.0))


def step(config: AllocatorConfig, state: AllocatorState, t: Any, global_grad: Any,
         received: Any, selected: Any, key: jax.Array) -> AllocatorState:
  """Spends round t's budgets and computes round t+1's (Algorithm 1, lines 14-19).

  Pure jnp with static shapes; ``config`` must be static under ``jax.jit`` (e.g.
  ``jax.jit(step, static_argnums=0)``); ``t`` may be traced. Not validated here (use
  `init_state` / `validate_config` on the host).

  1. Spend: eps_c += eps[t]; consumed_i += eps_i[t] (the budgets released in round t).
  2. Push g~[t] into the ring buffer.
  3. Next budgets, by kind:
     * ``"lapa"``: e[t+1] = `pid_error` (eqs. 10-11); eps[t+1] = `round_budget` (eq. 12)
       = exp(-e) (eps_T - eps_c) / (T - t); angles of the received gradients against
       g~[t] (eq. 13, `deviation_angles`), smoothed (eq. 14, `smoothed_angles`; devices
       outside ``selected`` or whose received gradient is all zero -- no upload, e.g. an
       exhausted budget -- keep their smoothed angle [D]), `gompertz` (eq. 15) and
       `split_budget` (eq. 16).
     * ``"uniform"``: eps_T / T for every selected device (Benchmark 3 [D]).
     * ``"arb"`` (ARB-approx, [D]; not the ARB paper [27], which is not
       accessible): eps[t+1] = min(eps[t] (1 + beta), remaining) if ||g~[t]|| <
       ||g~[t-1]||, else eps[t] (1 - beta) (also capped by the remaining budget); the
       first step keeps eps[t]; the same budget for every selected device.
     * ``"none"``: zeros.
     Every kind gives 0 once t >= T, and eps[t+1] is capped at eps_T - eps_c.
  4. Per-device clamp: eps_i[t+1] = max(min(eps_i[t+1], eps_T - consumed_i), 0), 0 for
     unselected devices, so that each device's basic-composition sum stays <= eps_T.

  Args:
    config: the static `AllocatorConfig`.
    state: the state holding round t's budgets.
    t: the 1-based round just run (int32 scalar, may be traced).
    global_grad: float ``[d]`` g~[t], the aggregated (perturbed) global gradient.
    received: float ``[N, d]`` the decoded gradients of round t (LAPA's angles; other
      kinds ignore it).
    selected: bool ``[N]`` the devices to budget for round t+1 (and whose angles count):
      the selected set S of eq. 22, NOT the devices that uploaded in round t. A device
      left out gets 0, so passing the uploaders would keep a device whose budget once
      rounded to 0 (exp(-e) underflows for e > ~88) silent for the rest of the run.
    key: a JAX PRNG key (LAPA's history sampling).

  Returns:
    The `AllocatorState` holding round t+1's budgets.
  """
  sel = jnp.asarray(selected, bool)
  t = jnp.asarray(t, jnp.int32)
  g = _f32(global_grad)
  eps_t = jnp.float32(config.epsilon_total)

  # 1. spend
  consumed = _f32(state.consumed + state.epsilon_round)
  consumed_dev = _f32(state.consumed_devices + state.epsilon_devices)
  # 2. push
  w = state.history.shape[0]
  history = state.history.at[jnp.mod(state.filled, w)].set(g)
  filled = (state.filled + 1).astype(jnp.int32)
  gnorm = _norm(g)
  remaining = jnp.maximum(eps_t - consumed, 0.0)
  in_range = t < config.rounds

  # 3. next budgets
  theta_smooth, error = state.theta_smooth, state.error
  mult_sum = state.multiplier_sum
  if config.kind == "lapa":
    error = pid_error(history, filled, key, config.history_points, config.kp, config.ks,
                      config.error_scale, config.initial_error)
    e = jnp.where(jnp.isnan(error), jnp.inf, jnp.maximum(error, 0.0))
    mult_sum = _f32(mult_sum + jnp.exp(-e))
    eps_next = round_budget(error, eps_t, consumed, config.rounds, t + 1, config.budget,
                            mult_sum / (filled + 1).astype(jnp.float32))
    rec = _f32(received)
    theta = deviation_angles(rec, g)
    counted = sel & jnp.any(rec != 0, axis=1)       # no upload: no angle ([D])
    theta_smooth = jnp.where(counted, smoothed_angles(state.theta_smooth, theta, t),
                             state.theta_smooth)
    f = gompertz(theta_smooth, config.alpha, config.gompertz)
    eps_next = jnp.minimum(eps_next, remaining)
    eps_dev = split_budget(eps_next, f, sel, config.split)
    share = (eps_next if config.split != "sum"
             else eps_next / jnp.maximum(jnp.sum(sel), 1))
    eps_dev = jnp.where(sel, jnp.maximum(eps_dev, config.min_share * share), 0.0)
  elif config.kind == "uniform":
    eps_next = jnp.where(in_range, eps_t / config.rounds, 0.0)
    eps_next = jnp.minimum(eps_next, remaining)
    eps_dev = jnp.where(sel, eps_next, 0.0)
  elif config.kind == "arb":
    prev = state.epsilon_round
    up = gnorm < state.prev_grad_norm
    cand = jnp.where(up, prev * (1.0 + config.arb_beta), prev * (1.0 - config.arb_beta))
    cand = jnp.where(state.filled == 0, prev, cand)
    eps_next = jnp.where(in_range, jnp.minimum(cand, remaining), 0.0)
    eps_dev = jnp.where(sel, eps_next, 0.0)
  else:
    eps_next = jnp.zeros((), jnp.float32)
    eps_dev = jnp.zeros(sel.shape, jnp.float32)

  # 4. per-device clamp
  eps_dev = _device_clamp(config, _f32(eps_dev), consumed_dev, sel)
  return AllocatorState(
      history=_f32(history), filled=filled, theta_smooth=_f32(theta_smooth),
      epsilon_round=_f32(eps_next), epsilon_devices=eps_dev, consumed=consumed,
      consumed_devices=consumed_dev, error=_f32(error), prev_grad_norm=_f32(gnorm),
      multiplier_sum=_f32(mult_sum))
