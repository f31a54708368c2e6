"""DP-MOCHA (Hu et al. 2020): Algorithm 1, with its garbled lines 11-14 as we
reconstruct them: personalised federated multi-task linear SVMs, one model
per device, a learned task covariance Omega, SDCA local solvers and Gaussian noise on
the devices' dual steps and uploads.

One global round (``round_fn``; state: ``ServerState(params={"w": W [m, d]},
opt_state=MochaState(alpha, omega, u), round)``):

  (start of outer iteration h > 1)  Omega <- (W^T W)^{1/2} / tr(.)          line 13, eq. 3
                                    W <- Omega~ u / (2 lam)  (resync, our addition)
  every device t in parallel:
    n_iter_t ~ U[(1 - tau) n_min, n_min];  active_t ~ Bernoulli(1 - P)      Sec. VII-A
    dalpha_t <- SDCA on G_t^beta(. ; w_t, alpha_t), n_iter_t steps          line 4, eq. 7
    alpha_t <- alpha_t + xi dalpha_t            (active devices; noise-free) line 5
    dalpha~_t <- dalpha_t + b_t,  b_t ~ N(0, (s1 sigma1)^2 I)                line 6
    du_t <- xi X_t dalpha~_t + p_t,  p_t ~ N(0, (s2 sigma2)^2 I)  (0 if dropped) line 7
  server: W <- W + Omega~ du / (2 lam);  u <- u + du                        line 10
  (H outer iterations of K inner rounds: Omega changes every K rounds.)

beta = xi m (Sec. V). Non-private mode: sigma1 = sigma2 = 0 (no noise).
Privacy: `fedjax_dp.algorithms.dp_mocha.mechanism` (what each line bounds) and
`fedjax_dp.privacy.device_ledger` (per-device composition).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.dp_mocha import heterogeneity, mechanism, objective, sdca, server
from fedjax_dp.federated.engine import default_metrics
from fedjax_dp.federated.server import ServerState
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int, check_positive


class MochaState(NamedTuple):
  """The state besides W (kept in ``ServerState.opt_state``).

  Attributes:
    alpha: float32 ``[m, n_max]`` the devices' dual variables (device-side, never
      uploaded; noise-free, line 5).
    omega: float32 ``[m, m]`` the task covariance (server).
    u: float32 ``[m, d]`` the server's running sum of every upload du (for the resync).
  """
  alpha: jax.Array
  omega: jax.Array
  u: jax.Array


class DpMochaHParams(NamedTuple):
  """Per-round inputs (arrays: sweeps never recompile).

  Attributes:
    tau: float32 device variability in [0, 1].
    drop_probability: float32 P(theta = 1) in [0, 1).
    sigma1: float32 ``[m]`` noise multiplier of line 6 (std / s1); 0: no noise.
    sigma2: float32 ``[m]`` noise multiplier of line 7 (std / s2); 0: no noise.
  """
  tau: Any
  drop_probability: Any
  sigma1: Any
  sigma2: Any


@dataclasses.dataclass(frozen=True)
class DpMochaConfig:
  """Static configuration of a DP-MOCHA problem.

  Attributes:
    lam: regularisation lambda > 0 of eq. (1) (sum-of-losses normalisation).
    xi: aggregation parameter in (0, 1] (not given by the paper; our choice 0.5
      maximises (1 - xi) xi).
    inner_rounds: K, global rounds per outer iteration (Omega is updated every K).
    s2_mode: one of `mechanism.S2_MODES`.
    resync: re-synchronise W = Omega~ u / (2 lam) after every Omega update (our
      addition; False: Algorithm 1 literally, W keeps its increments).
    update_omega: learn Omega (False: Omega stays I / m; the devices' problems are then
      independent: local SVMs).
  """
  lam: float = 0.001
  xi: float = 0.5
  inner_rounds: int = 2000
  s2_mode: str = "noisy_l2"
  resync: bool = True
  update_omega: bool = True

  def __post_init__(self):
    check_positive("lam", self.lam)
    server.correction_parameter(self.xi, 1)  # checks xi in (0, 1]
    check_int("inner_rounds", self.inner_rounds, minimum=1)
    check_choice("s2_mode", self.s2_mode, mechanism.S2_MODES)


class Problem(NamedTuple):
  """A binary multi-task problem on the device (see `make_problem`).

  Attributes:
    x: float32 ``[m, n_max, d]`` rows with ||x|| <= 1 (zero padding).
    y: float32 ``[m, n_max]`` labels in {-1, +1} (0 on padding).
    mask: float32 ``[m, n_max]``.
    counts: int32 ``[m]`` n_t.
  """
  x: jax.Array
  y: jax.Array
  mask: jax.Array
  counts: jax.Array


def make_problem(x, labels, counts, positive_class: Optional[int] = None) -> Problem:
  """A `Problem` from padded arrays.

  Args:
    x: float ``[m, n_max, d]``; every real row must have L2 norm <= 1 (+ 1e-5), which
      the sensitivities need (Sec. III).
    labels: int ``[m, n_max]``: with ``positive_class`` given, y = +1 where labels ==
      positive_class, else -1; otherwise labels must already be in {-1, +1} or {0, 1}
      (1 -> +1, 0 -> -1).
    counts: int ``[m]``, 1 <= n_t <= n_max.

  Raises:
    FedJaxDpError: a row with norm above 1, labels outside the allowed sets, bad counts.
  """
  x = np.asarray(x, np.float32)
  labels = np.asarray(labels)
  counts = np.asarray(counts, np.int32)
  m, n_max = x.shape[:2]
  if counts.shape != (m,) or counts.min() < 1 or counts.max() > n_max:
    raise FedJaxDpError(f"counts must be [m={m}] in [1, {n_max}], got {counts!r}.",
                        option="counts")
  mask = (np.arange(n_max)[None, :] < counts[:, None]).astype(np.float32)
  norms = np.linalg.norm(x, axis=-1) * mask
  if norms.max() > 1 + 1e-5:
    raise FedJaxDpError(f"x: every row must have L2 norm <= 1 (DP-MOCHA's sensitivities "
                        f"assume it, Sec. III); the largest is {norms.max():.4g}. Normalise "
                        "the rows (e.g. dataset option row_l2).", option="x")
  if positive_class is not None:
    y = np.where(labels == positive_class, 1.0, -1.0)
  else:
    real = labels[mask > 0]
    if set(np.unique(real).tolist()) <= {0, 1}:
      y = np.where(labels == 1, 1.0, -1.0)
    elif set(np.unique(real).tolist()) <= {-1, 1}:
      y = labels.astype(np.float64)
    else:
      raise FedJaxDpError("labels must be in {-1, +1} or {0, 1} (or give positive_class), "
                          f"got {sorted(set(np.unique(real).tolist()))[:10]}.",
                          option="labels")
  y = (y * mask).astype(np.float32)
  return Problem(jnp.asarray(x * mask[..., None]), jnp.asarray(y), jnp.asarray(mask),
                 jnp.asarray(counts))


def init_state(problem: Problem) -> ServerState:
  """alpha = 0, w = 0, Omega = I / m (Algorithm 1, Initialize), u = 0."""
  return initial_state(*problem.x.shape)


def initial_state(m: int, n_max: int, d: int) -> ServerState:
  """`init_state` from the shapes: m devices, n_max padded rows, d features."""
  aux = MochaState(jnp.zeros((m, n_max), jnp.float32), jnp.eye(m, dtype=jnp.float32) / m,
                   jnp.zeros((m, d), jnp.float32))
  return ServerState({"w": jnp.zeros((m, d), jnp.float32)}, aux, jnp.zeros((), jnp.int32))


def make_round(config: DpMochaConfig, num_devices: int, n_min: int,
               expose_releases: bool = False):
  """The compiled-round function of Algorithm 1 (module docstring).

  Args:
    config: a `DpMochaConfig`.
    num_devices: m (beta = xi m).
    n_min: min_t n_t, the static maximum of local steps.
    expose_releases: also put the round's `mechanism.Noised` (dalpha~, du and their
      noise scales, which stay on the devices in a real deployment) in
      ``extras["releases"]``, for canary audits that observe what the ledger accounts
      as released (`fedjax_dp.algorithms.audit_targets`); never for runs.

  Returns:
    ``round_fn(state, problem, hp, root_key) -> (state, RoundMetrics)`` with
    ``problem`` a `Problem` (or ``PopulationData`` with 0/1 labels, converted inside),
    ``hp`` a `DpMochaHParams`; pure and jittable. RoundMetrics.client_noise_multipliers
    is every device's noise multiplier of the round's two releases composed,
    (z1^-2 + z2^-2)^-1/2 with the provable sensitivities (`mechanism.ledger_multipliers`;
    +inf for a device that released nothing), and ``extras`` holds the objective, the
    noise scales and per-device ``device_active`` / ``device_local_steps`` /
    ``device_dual_noise_multiplier`` / ``device_primal_noise_multiplier`` ``[m]``.
  """
  lam, xi, k_inner = float(config.lam), float(config.xi), int(config.inner_rounds)
  beta = server.correction_parameter(xi, num_devices)
  m = int(num_devices)
  n_min = int(n_min)

  def round_fn(state: ServerState, problem, hp: DpMochaHParams, root_key):
    problem = as_problem(problem)
    x, y, mask, counts = problem
    w, (alpha, omega, u), r = state.params["w"], state.opt_state, state.round

    def new_outer(args):
      w, omega = args
      if not config.update_omega:
        return w, omega
      omega = server.omega_update(w)
      return (server.resync(u, omega, lam) if config.resync else w), omega
    w, omega = jax.lax.cond((r > 0) & (r % k_inner == 0), new_outer, lambda a: a,
                            (w, omega))

    key = jax.random.fold_in(root_key, r)
    dev_keys = jax.vmap(lambda t: jax.random.split(jax.random.fold_in(key, t), 5))(
        jnp.arange(m))
    k_steps, k_drop, k_sdca, k_b, k_p = (dev_keys[:, i] for i in range(5))
    u_steps = jax.vmap(lambda k: jax.random.uniform(k))(k_steps)
    steps = heterogeneity.steps_from_uniform(u_steps, n_min, hp.tau)
    active = jax.vmap(lambda k: jax.random.uniform(k))(k_drop) >= hp.drop_probability

    c = beta * jnp.diagonal(omega) / (2.0 * lam)
    dalpha, _ = sdca.local_sdca(k_sdca, w, alpha, x, y, counts, c, steps, n_min)
    alpha = alpha + xi * dalpha * active[:, None]                      # line 5
    s1 = mechanism.dual_sensitivity_paper(lam, beta, counts)
    noised = mechanism.perturb(k_b, k_p, dalpha, x, mask, active, xi, s1,
                               hp.sigma1, hp.sigma2, config.s2_mode)   # lines 6-7
    w = server.w_update(w, omega, noised.du, lam)                      # line 10
    u = u + noised.du
    z1, z2 = mechanism.ledger_multipliers(noised, steps, counts, config.s2_mode)
    z = _composed(z1, z2)
    z_devices = jnp.where(active, z, jnp.inf)

    state = ServerState({"w": w}, MochaState(alpha, omega, u), r + 1)
    n = jnp.sum(mask)
    p_val = objective.primal(w, omega, x, y, mask, lam)
    w_alpha = objective.primal_dual_map(alpha, omega, x, mask, lam)
    d_val = objective.dual(alpha, omega, x, y, mask, lam)
    gap = objective.primal(w_alpha, omega, x, y, mask, lam) + d_val
    train_hinge = jnp.sum(objective.hinge_loss(jnp.einsum("tnd,td->tn", x, w), y)
                          * mask) / n
    n_active = jnp.sum(active)
    act = active.astype(jnp.float32)
    du_norm = jnp.linalg.norm(noised.du, axis=1)
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    extras = {
        "primal": f32(p_val), "dual": f32(d_val), "duality_gap": f32(gap),
        "primal_of_dual": f32(gap - d_val),
        "devices_active": n_active.astype(jnp.int32),
        "mean_local_steps": f32(jnp.mean(steps)),
        "dual_noise_std": f32(jnp.mean(noised.dual_noise_std)),
        "primal_noise_std": f32(jnp.sum(noised.primal_noise_std * act)
                                / jnp.maximum(n_active, 1)),
        "omega_trace": f32(jnp.trace(omega)),
        "device_active": active.astype(jnp.int32),
        "device_local_steps": steps,
        "device_dual_noise_multiplier": f32(z1),
        "device_primal_noise_multiplier": f32(z2),
    }
    if expose_releases:
      extras["releases"] = noised
    finite_z = jnp.where(active, z, jnp.inf)
    # Its own round (one model per device, the dual update of MOCHA), the engine's
    # metric defaults for what it does not do (cohort truncation, clipping of updates).
    metrics = default_metrics(
        r, train_loss=f32(train_hinge), num_clients=n_active.astype(jnp.int32),
        num_sampled=n_active.astype(jnp.int32),
        mean_update_norm=f32(jnp.sum(du_norm * act) / jnp.maximum(n_active, 1)),
        max_update_norm=f32(jnp.max(du_norm * act)),
        nonfinite_updates=jnp.sum(~jnp.isfinite(du_norm)).astype(jnp.int32),
        noise_multiplier=f32(jnp.min(finite_z)),
        noise_stddev=f32(jnp.max(noised.primal_noise_std * act)),
        sampling_rate=f32(1.0), dp_steps=jnp.int32(1),
        aggregate_norm=f32(jnp.linalg.norm(jnp.sum(noised.du, axis=0))),
        sensitivity=f32(jnp.max(mechanism.dual_sensitivity_provable(steps, counts))),
        client_noise_multipliers=f32(z_devices), extras=extras)
    return state, metrics

  return round_fn


def _composed(z1, z2):
  """The noise multiplier of two Gaussian releases composed: (z1^-2 + z2^-2)^-1/2 (exact
  for Gaussians: their privacy loss distributions compose to a Gaussian's; 0 if either
  is 0)."""
  safe1, safe2 = jnp.maximum(z1, 1e-30), jnp.maximum(z2, 1e-30)
  z = jax.lax.rsqrt(1.0 / safe1 ** 2 + 1.0 / safe2 ** 2)
  return jnp.where((z1 > 0) & (z2 > 0), z, 0.0)


def as_problem(data) -> Problem:
  """A `Problem` from a `Problem` or a ``PopulationData`` whose labels are 0/1 (the
  dp_mocha plug-in's binary data): y = 2 label - 1 on real rows."""
  if isinstance(data, Problem):
    return data
  x, labels, counts = data.x, data.y, data.counts
  mask = (jnp.arange(x.shape[1])[None, :] < counts[:, None]).astype(jnp.float32)
  y = (2.0 * labels.astype(jnp.float32) - 1.0) * mask
  return Problem(x, y, mask, counts)


@functools.lru_cache(maxsize=64)
def _outer_fn(config: DpMochaConfig, m: int, n_min: int):
  """One outer iteration (K rounds) compiled once per (config, m, n_min) and reused for
  every problem of the same shapes and every hyper-parameter value."""
  round_fn = make_round(config, m, n_min)

  @jax.jit
  def outer(state, problem, hp, root):
    def body(s, _):
      s, met = round_fn(s, problem, hp, root)
      e = met.extras
      return s, (e["primal"], e["dual"], e["duality_gap"], e["devices_active"],
                 e["device_active"], met.client_noise_multipliers)
    return jax.lax.scan(body, state, None, length=int(config.inner_rounds))

  return outer


def simulate(problem: Problem, config: DpMochaConfig, hparams: DpMochaHParams,
             outer_rounds: int, seed: int = 0, test: Optional[Problem] = None,
             record_every: Optional[int] = None) -> Dict[str, Any]:
  """Runs H = ``outer_rounds`` outer iterations of K = ``config.inner_rounds`` rounds
  (one compiled scan per outer iteration; hyper-parameters are arrays, so sweeps reuse
  the compilation) and returns the trajectory. For experiments and notebooks; `fedjax-dp
  run --algorithm dp_mocha` adds checkpoints, metrics.jsonl and the ledger.

  Args:
    problem: the training `Problem`; test: an optional held-out `Problem` (same devices)
      for the per-device test error.
    config, hparams: as in `make_round` (``hparams`` scalars / ``[m]`` vectors).
    outer_rounds: H >= 1.
    seed: the root key's seed.
    record_every: keep the metrics of every this many rounds (default: K / 10).

  Returns:
    dict of numpy arrays: ``round`` (1-based), ``primal``, ``dual``, ``duality_gap``,
    ``devices_active``, ``test_error`` (after every outer iteration, ``[H]``),
    ``device_active`` ``[rounds, m]`` (every round, for the ledger), the final ``w``,
    ``omega`` and ``alpha``.
  """
  m, _, _ = problem.x.shape
  n_min = int(np.min(np.asarray(problem.counts)))
  k = int(config.inner_rounds)
  every = record_every or max(1, k // 10)
  hp = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), hparams)
  outer = _outer_fn(config, m, n_min)

  state = init_state(problem)
  root = jax.random.key(seed)
  cols = {n: [] for n in ("primal", "dual", "duality_gap", "devices_active",
                          "device_active", "device_noise_multiplier")}
  errors = []
  for _ in range(check_int("outer_rounds", outer_rounds, minimum=1)):
    state, out = outer(state, problem, hp, root)
    for name, v in zip(cols, out):
      cols[name].append(np.asarray(v))
    if test is not None:
      errors.append(float(objective.mean_device_error(state.params["w"], test.x, test.y,
                                                      test.mask)))
  res = {n: np.concatenate(v) for n, v in cols.items()}
  rounds = np.arange(1, k * outer_rounds + 1)
  keep = (rounds % every == 0)
  out = {n: (v if n in ("device_active", "device_noise_multiplier") else v[keep])
         for n, v in res.items()}
  out["round"] = rounds[keep]
  out["test_error"] = np.asarray(errors)
  out["w"] = np.asarray(state.params["w"])
  out["omega"] = np.asarray(state.opt_state.omega)
  out["alpha"] = np.asarray(state.opt_state.alpha)
  return out


def dp_mocha(model, data, *, lam: float = 0.001, xi: float = 0.5, inner_rounds: int = 2000,
             s2_mode: str = "noisy_l2", resync: bool = True, update_omega: bool = True,
             tau: float = 0.0, drop_probability: float = 0.0, sigma1=0.0, sigma2=0.0,
             private: bool = True, expose_releases: bool = False):
  """DP-MOCHA as an `fedjax_dp.algorithms.base.Algorithm` for the run loop.

  Args:
    model: unused (DP-MOCHA's models are its per-device linear SVMs, ``params["w"]``);
      accepted for the plug-in protocol.
    data: a `fedjax_dp.data.FederatedData` with binary labels (1: positive class) and
      rows of L2 norm <= 1 (the plug-in's ``prepare`` makes both).
    lam, xi, inner_rounds, s2_mode, resync, update_omega: `DpMochaConfig`.
    tau, drop_probability: heterogeneity (Sec. VII-A).
    sigma1, sigma2: noise multipliers, scalars or float ``[m]`` per device.
    private: False for the non-private baseline (sigma1 = sigma2 = 0, no ledger).
    expose_releases: `make_round`'s (canary audits only).

  Returns:
    An `Algorithm` whose ``privacy`` (when private) is record-level, replace-one,
    per device (`device_ledger.DeviceLedger`), and whose ``hparams`` is a
    `DpMochaHParams`.

  Raises:
    FedJaxDpError: invalid options (named) or data (`make_problem`).
  """
  from fedjax_dp.algorithms.base import Algorithm, PerClientPrivacySpec
  from fedjax_dp.privacy.device_ledger import DeviceLedger
  from fedjax_dp.validation import check_probability
  config = DpMochaConfig(lam, xi, inner_rounds, s2_mode, resync, update_omega)
  m = data.num_clients
  x = np.asarray(data.x, np.float32).reshape(m, data.max_examples, -1)
  make_problem(x, data.y, data.counts)  # validates norms and labels
  counts = np.asarray(data.counts)
  n_min = int(counts.min())
  tau = check_probability("tau", tau, allow_zero=True) if tau else 0.0
  p_drop = float(drop_probability)
  if not 0.0 <= p_drop < 1.0:
    raise FedJaxDpError(f"drop_probability must be in [0, 1), got {p_drop}.",
                        option="drop_probability")
  s1v = np.broadcast_to(np.asarray(sigma1 if private else 0.0, np.float32), (m,)).copy()
  s2v = np.broadcast_to(np.asarray(sigma2 if private else 0.0, np.float32), (m,)).copy()
  if np.any(s1v < 0) or np.any(s2v < 0) or not (np.all(np.isfinite(s1v))
                                                and np.all(np.isfinite(s2v))):
    raise FedJaxDpError("sigma1 and sigma2 must be finite and >= 0.", option="sigma1")
  round_fn = make_round(config, m, n_min, expose_releases)

  def init(key):
    del key
    return initial_state(m, data.max_examples, x.shape[-1])

  spec = None
  if private:
    spec = PerClientPrivacySpec(
        unit="record-level", relation="replace_one", sampler="fixed_size",
        population_size=n_min, cohort_size=n_min, num_clients=m,
        ledger_factory=lambda delta: DeviceLedger(m, delta, n_min),
        observation="attributable",  # each device's releases with its sender
        note=("record-level DP of each device's own data (replace one sample, ||x|| <= 1), "
              "every device accounted separately over the rounds it took part in, the "
              "worst device's epsilon reported; each round's two Gaussian releases are "
              "accounted with sensitivities the code provably enforces: the dual step's "
              "2 sqrt(min(steps, n_t)) (the paper's Corollary 2 value s1 bounds only the "
              "exact minimiser of eq. 7 at a fixed state) and the upload's 2 xi "
              "||dalpha~||; no amplification from the SDCA coordinate draws or from "
              "dropping (the paper's Theorem 5 claims both: epsilon_paper); the server "
              "sees each device's releases with its sender, and a dropped device's "
              "visible absence reveals nothing of its data"))
  return Algorithm(
      name="dp_mocha", round_fn=round_fn, init=init,
      hparams=DpMochaHParams(np.float32(tau), np.float32(p_drop), s1v, s2v),
      privacy=spec, k_max=m,
      config={"lam": config.lam, "xi": config.xi, "beta": config.xi * m,
              "inner_rounds": config.inner_rounds, "s2_mode": config.s2_mode,
              "resync": config.resync, "update_omega": config.update_omega,
              "tau": tau, "drop_probability": p_drop, "n_min": n_min,
              "sigma1": s1v.tolist(), "sigma2": s2v.tolist(), "private": private},
      sampling_rate=1.0)
