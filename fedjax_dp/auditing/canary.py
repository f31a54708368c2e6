"""Two-world canary audits of the real round: an empirical lower bound on epsilon.

An audit runs an algorithm's own round function (its sampler, clipping, local training,
noise, aggregation, server step, and the noise multiplier it reports) for ``T`` rounds
on two neighbouring populations, many times each with fresh randomness, ``jax.vmap``-ed
over repetitions. "out" and "in" differ by one canary under the mechanism's relation:
the canary user is absent / present (add/remove), holds a zero / a large update
(zero-out), or holds -u / +u (replace-one); at record level the canary is one example.

Distinguisher (fixed before the scored repetitions are seen): a first batch of
repetitions of each world (the calibration split) estimates, for every round t, the
mean model change of each world; their difference ``d_t`` is the canary's direction.
Each scored repetition's round-t change is projected on ``d_t`` (``x_t``) and scored
four ways: the Gaussian log-likelihood ratio ``sum_t x_t |d_t| / s_t^2``; the same for
a canary that takes part with probability ``pi`` (``sum_t log(1 - pi + pi exp((x_t m_t -
m_t^2 / 2) / s_t^2))``, ``m_t = |d_t| / pi``: the optimal test of a sampled Gaussian);
``sum_t |change_t - mean_out_t|^2`` (a mechanism whose noise scale depends on the
canary); and, for attributable uploads, the Gaussian log-likelihood ratio summed over
the rounds in which the canary was seen uploading, with its direction and spread fitted
on those rounds only (the optimal test of visible participation). `fedjax_dp.privacy.audit`
turns the scores into a lower bound holding with confidence ``1 - alpha``
(Clopper-Pearson; no Bonferroni correction is needed over the scores; Kairouz, Oh, Viswanath 2015; Jagielski, Ullman, Oprea 2020; Nasr et al.
2021), with the score, its direction and the threshold chosen on the calibration split
too, so that the bound is a valid confidence bound.

The claimed epsilon is what the code's own ledger reports for the "in" runs (their
median, when the reported noise depends on the sampling). A sound mechanism has
``lower bound <= claimed``; a lower bound above the claim proves the implementation, its
calibration or its accounting wrong.

What is observed. The audit observes what the mechanism's threat model says the server
sees (`Setup.observation`, the release's declared
`fedjax_dp.privacy.events.OBSERVATIONS`): for ``"aggregate"`` the model change of each
round (the noisy aggregate, post-processed); for ``"attributable"`` the canary client's
own upload as the server receives it, and zeros in the rounds it did not take part in
(`upload_observer`; the round must be built with ``RoundConfig(observed_client=...)``).
A claim that is too small for the declared observation is caught; an audit that
observed less than the server sees could not catch it.

What it can and cannot catch. The bound is a Clopper-Pearson confidence bound over
``repetitions`` scored runs per world, so the largest epsilon it can prove is about
``log(repetitions / 4)`` (`max_provable`: 8.5 for 20,000 repetitions at confidence 95%):
claims above that are never contradicted, however wrong. It proves a claim too small for
the simulated canary, never that a claim is right; it sees only the rounds and the
canary it simulates (a bug that needs a particular dataset, many rounds or a weak signal
below the noise goes unseen), and its distinguishers are fixed in advance (the linear
Gaussian test, the sampled-Gaussian test, and the energy of the change).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.flatten_util
import numpy as np

from fedjax_dp.federated.population import PopulationData
from fedjax_dp.privacy import audit as stats
from fedjax_dp.privacy.ledger_protocol import Ledger, PrivacyReport
from fedjax_dp.validation import check_int, check_probability

__all__ = [
    "CLAIM_FIELDS", "RELEASE_FIELDS", "Setup", "AuditReport", "params_change",
    "upload_observer", "SCORES", "Simulated", "SimulationCache", "run", "ledger_claim",
    "describe", "max_provable",
]

#: Metrics every audited round reports that the claims read.
CLAIM_FIELDS = ("noise_multiplier", "sampling_rate", "dp_steps", "num_clients",
                "noise_stddev", "sensitivity")
#: What a round with several releases (`RoundMetrics.releases`) reports per release,
#: as ``{release}_{field}``.
RELEASE_FIELDS = ("noise_multiplier", "sampling_rate", "dp_steps")


@dataclasses.dataclass(frozen=True)
class Setup:
  """One audit experiment: a neighbouring pair of worlds run through a real round.

  Attributes:
    round_out, round_in: ``round_fn(state, data, hp, key) -> (state, RoundMetrics)`` of
      each world (they differ when the population size does, under add/remove).
    data_out, data_in: each world's population (`PopulationData`).
    init: the initial `ServerState` (the same model in both worlds).
    hparams: `RoundHParams` with a leading ``[rounds]`` axis (the noise the simulation
      actually adds).
    inclusion_prob: pi, the probability that the canary takes part in a round (for the
      sampled-Gaussian score; 1 without sampling).
    claim: ``claim(metrics) -> epsilon``: what the code claims, from the "in" world's
      reported metrics (``{field: [reps, rounds]}``, plus
      ``client_noise_multipliers [reps, rounds, N]`` when reported).
    delta: the delta of the claim and of the lower bound.
    description: the mechanism and the canary, in words.
    simulation_key: setups with the same key simulate the same thing (they differ in
      their claim only), so `run` with a ``cache`` simulates them once; None: never
      shared.
    observation: what the server observes of the audited release (one of
      `fedjax_dp.privacy.events.OBSERVATIONS`): the claim's ledger accounts for it and
      ``observe`` must produce it (targets set both from the mechanism's `PrivacySpec`).
    observe: ``observe(state_before, state_after, metrics) -> float vector [P]``: what
      the adversary sees of one round; None: the change of ``state.params`` (the
      aggregate). `upload_observer` gives the canary's attributable upload.
  """
  round_out: Callable
  round_in: Callable
  data_out: PopulationData
  data_in: PopulationData
  init: Any
  hparams: Any
  inclusion_prob: float
  claim: Callable[[Dict[str, np.ndarray]], float]
  delta: float
  description: str = ""
  simulation_key: Optional[str] = None
  observation: str = "aggregate"
  observe: Optional[Callable] = None

  @property
  def rounds(self) -> int:
    """T: the leading axis of the schedule's leaves (0-d leaves are constants)."""
    return max(int(np.shape(l)[0]) for l in jax.tree_util.tree_leaves(self.hparams)
               if np.ndim(l) > 0)

  def schedule(self):
    """The hyper-parameters with every 0-d leaf broadcast to ``[rounds]``."""
    t = self.rounds
    return jax.tree_util.tree_map(
        lambda l: np.full((t,), l, np.float32) if np.ndim(l) == 0 else l, self.hparams)


@dataclasses.dataclass(frozen=True)
class AuditReport:
  """Outcome of `run`.

  Attributes:
    claimed_epsilon: the code's epsilon for the audited run.
    lower_bound: the `fedjax_dp.privacy.audit.AuditResult` (empirical lower bound).
    violated: ``lower_bound.epsilon_lower_bound > claimed_epsilon``.
    repetitions: scored repetitions per world.
    calibration: repetitions per world used to fix the distinguisher.
    rounds: rounds composed in each repetition.
    seconds: wall time (simulation and statistics).
    score: which score gave the bound.
  """
  claimed_epsilon: float
  lower_bound: stats.AuditResult
  violated: bool
  repetitions: int
  calibration: int
  rounds: int
  seconds: float
  score: str


def params_change(state_before, state_after, metrics) -> jax.Array:
  """The default observation: the flat change of the model (the released aggregate)."""
  del metrics
  before, _ = jax.flatten_util.ravel_pytree(state_before.params)
  after, _ = jax.flatten_util.ravel_pytree(state_after.params)
  return after - before


def upload_observer(state_before, state_after, metrics) -> jax.Array:
  """The observation of an attributable release: the canary client's upload as the
  server receives it (zeros in rounds it did not take part in), from a round built with
  ``RoundConfig(observed_client=canary)`` (`fedjax_dp.federated.round.RoundConfig`)."""
  del state_before, state_after
  return metrics.extras["observed_upload"]


def _simulator(round_fn: Callable, rounds: int,
               observe: Optional[Callable] = None) -> Callable:
  """``sim(data, init, hp, keys) -> (changes [R, T, P], metrics {f: [R, T, ...]})``."""
  observe = params_change if observe is None else observe

  def one(data, init, hp, key):
    def body(state, hp_t):
      new, m = round_fn(state, data, hp_t, key)
      out = {f: getattr(m, f) for f in CLAIM_FIELDS}
      if m.client_noise_multipliers is not None:
        out["client_noise_multipliers"] = m.client_noise_multipliers
      for name, fields in (m.releases or {}).items():  # several releases per round
        out.update({f"{name}_{f}": fields[f] for f in RELEASE_FIELDS})
      return new, (observe(state, new, m), out)

    _, (changes, metrics) = jax.lax.scan(body, init, hp)
    return changes, metrics

  return jax.jit(jax.vmap(one, in_axes=(None, None, None, 0)))


def _run_world(sim: Callable, data, init, hp, key, reps: int, batch: int):
  changes, metrics = [], []
  keys = jax.random.split(key, reps)
  for start in range(0, reps, batch):
    c, m = sim(data, init, hp, keys[start:start + batch])
    changes.append(np.asarray(c, np.float64))
    metrics.append(jax.device_get(m))
  return (np.concatenate(changes), {k: np.concatenate([m[k] for m in metrics])
                                    for k in metrics[0]})


class _Visible(NamedTuple):
  """The canary's direction and spread fitted on the rounds it took part in (an
  attributable observation is exactly zero in the others)."""
  mean_out: np.ndarray   # [T, P]
  direction: np.ndarray  # [T, P]
  spread: np.ndarray     # [T]


def _took_part(changes: np.ndarray) -> np.ndarray:
  """``[R, T]``: whether the observation is non-zero (an upload was seen)."""
  return np.any(changes != 0, axis=2)


def _fit_visible(fit_out: np.ndarray, fit_in: np.ndarray) -> _Visible:
  def cond_mean(c):
    part = _took_part(c)[:, :, None]
    return np.sum(c * part, axis=0) / np.maximum(np.sum(part, axis=0), 1)
  mean_out = cond_mean(fit_out)
  direction = cond_mean(fit_in) - mean_out
  unit = direction / np.maximum(np.linalg.norm(direction, axis=1), 1e-30)[:, None]
  x = np.einsum("rtp,tp->rt", fit_out - mean_out[None], unit)
  part = _took_part(fit_out)
  var = np.sum(part * x * x, axis=0) / np.maximum(np.sum(part, axis=0) - 1, 1)
  return _Visible(mean_out, direction, np.sqrt(var))


def _scores(changes: np.ndarray, mean_out: np.ndarray, direction: np.ndarray,
            spread: np.ndarray, pi: float, visible: _Visible) -> np.ndarray:
  """``[R, 4]`` scores of changes ``[R, T, P]`` (module docstring)."""
  norm = np.linalg.norm(direction, axis=1)                   # |d_t|, [T]
  unit = direction / np.maximum(norm, 1e-30)[:, None]
  centred = changes - mean_out[None]
  x = np.einsum("rtp,tp->rt", centred, unit)                 # projections, [R, T]
  s2 = np.maximum(spread, 1e-30) ** 2
  linear = np.sum(x * norm / s2, axis=1)
  m = norm / pi
  with np.errstate(over="ignore"):
    sampled = np.sum(np.logaddexp(np.log1p(-min(pi, 1 - 1e-12)),
                                  np.log(pi) + (x * m - m * m / 2) / s2), axis=1)
  energy = np.sum(centred ** 2, axis=(1, 2))
  # Visible participation: the Gaussian log-likelihood ratio summed over the rounds in
  # which the canary was seen uploading (the optimal test of an attributable release).
  vnorm = np.linalg.norm(visible.direction, axis=1)
  vunit = visible.direction / np.maximum(vnorm, 1e-30)[:, None]
  vx = np.einsum("rtp,tp->rt", changes - visible.mean_out[None], vunit)
  vs2 = np.maximum(visible.spread, 1e-30) ** 2
  seen = _took_part(changes)
  visible_llr = np.sum(seen * (vx * vnorm - vnorm * vnorm / 2) / vs2, axis=1)
  return np.stack([linear, sampled, energy, visible_llr], axis=1)


SCORES = ("gaussian_llr", "sampled_gaussian_llr", "energy", "visible_gaussian_llr")

#: One simulation's outcome: its lower bound, the index of the score (in `SCORES`) that
#: gave it, and the "in" world's metrics ``{field: [reps, rounds, ...]}``.
Simulated = Tuple[stats.AuditResult, int, Dict[str, np.ndarray]]
#: `run`'s ``cache``: ``(Setup.simulation_key, repetitions, calibration, alpha, the key's
#: data)`` -> what that simulation gave.
SimulationCache = Dict[Tuple[str, int, int, float, Tuple[int, ...]], Simulated]


def run(setup: Setup, repetitions: int = 20000, calibration: int = 10000,
        key: Optional[jax.Array] = None, alpha: float = 0.05, batch: int = 5000,
        cache: Optional[SimulationCache] = None) -> AuditReport:
  """Runs the two worlds, fixes the distinguisher on a calibration split, scores fresh
  repetitions and compares the lower bound with the claimed epsilon.

  Args:
    setup: a `Setup`.
    repetitions: scored repetitions per world (>= 100; the largest provable bound is
      about ``log(repetitions / 4)``).
    calibration: repetitions per world that fix the distinguisher (>= 100): half
      estimate the canary's direction, half choose the score and threshold (the finest
      false-positive rate a threshold can target is about ``2 / calibration``).
    key: PRNG key (default ``jax.random.key(0)``).
    alpha: one minus the confidence level of the bound, in (0, 1).
    batch: repetitions simulated at once (memory).
    cache: a dict shared between calls: setups with the same ``simulation_key`` (and
      the same sizes and key) reuse one simulation and differ only in their claim.

  Returns:
    An `AuditReport`.

  Raises:
    FedJaxDpError: invalid counts or alpha.
  """
  repetitions = check_int("repetitions", repetitions, minimum=100)
  calibration = check_int("calibration", calibration, minimum=100)
  batch = check_int("batch", batch, minimum=1)
  check_probability("alpha", alpha)
  key = jax.random.key(0) if key is None else key
  t0 = time.perf_counter()
  ck = None
  if cache is not None and setup.simulation_key is not None:
    ck = (setup.simulation_key, repetitions, calibration, alpha,
          tuple(np.asarray(jax.random.key_data(key)).ravel().tolist()))
  if cache is not None and ck is not None and ck in cache:
    bound, which, met_in = cache[ck]
  else:
    bound, which, met_in = _simulate_and_bound(setup, repetitions, calibration, key, alpha,
                                               batch)
    if cache is not None and ck is not None:
      cache[ck] = (bound, which, met_in)
  claimed = float(setup.claim({k: v[calibration:] for k, v in met_in.items()}))
  return AuditReport(claimed, bound, bound.epsilon_lower_bound > claimed, repetitions,
                     calibration, setup.rounds, time.perf_counter() - t0, SCORES[which])


def _simulate_and_bound(setup: Setup, repetitions: int, calibration: int, key: jax.Array,
                        alpha: float, batch: int) -> Simulated:
  """Simulates both worlds and returns (bound, score index, the "in" world's metrics)."""
  rounds = setup.rounds
  total = repetitions + calibration
  k_out, k_in = jax.random.split(key)
  sim_out = _simulator(setup.round_out, rounds, setup.observe)
  sim_in = sim_out if setup.round_in is setup.round_out else _simulator(
      setup.round_in, rounds, setup.observe)
  hp = setup.schedule()
  ch_out, _ = _run_world(sim_out, setup.data_out, setup.init, hp, k_out, total, batch)
  ch_in, met_in = _run_world(sim_in, setup.data_in, setup.init, hp, k_in, total, batch)
  # The calibration split fixes everything about the test: the canary's direction and
  # spread (from its first half) and the score, direction and threshold (its second).
  half = calibration // 2
  fit_out, sel_out, test_out = ch_out[:half], ch_out[half:calibration], ch_out[calibration:]
  fit_in, sel_in, test_in = ch_in[:half], ch_in[half:calibration], ch_in[calibration:]
  mean_out = fit_out.mean(axis=0)                            # [T, P]
  direction = fit_in.mean(axis=0) - mean_out
  unit = direction / np.maximum(np.linalg.norm(direction, axis=1), 1e-30)[:, None]
  spread = np.einsum("rtp,tp->rt", fit_out - mean_out[None], unit).std(axis=0)
  pi = float(setup.inclusion_prob)
  visible = _fit_visible(fit_out, fit_in)
  score = lambda c: _scores(c, mean_out, direction, spread, pi, visible)
  test = stats.choose_test(score(sel_out), score(sel_in), repetitions, setup.delta, alpha)
  bound = stats.epsilon_lower_bound_at(score(test_out), score(test_in), test, setup.delta,
                                       alpha)
  return bound, test.score, met_in


def _claim_report(metrics: Dict[str, np.ndarray], r: int) -> PrivacyReport:
  """Repetition ``r``'s `PrivacyReport` of ``metrics`` (`Setup.claim`'s argument): the
  per-client noise multipliers and the releases (``{name}_{field}``) where reported;
  otherwise only the rounds with a finite noise multiplier (an infinite one composes
  nothing)."""
  names = [k[:-len("_noise_multiplier")] for k in metrics
           if k.endswith("_noise_multiplier") and k != "noise_multiplier"]
  z, q, steps = (np.asarray(metrics[f], np.float64)[r] for f in RELEASE_FIELDS)
  if names:  # several releases per round
    return PrivacyReport(z, q, steps, releases={
        n: {f: np.asarray(metrics[f"{n}_{f}"], np.float64)[r] for f in RELEASE_FIELDS}
        for n in names})
  if "client_noise_multipliers" in metrics:
    return PrivacyReport(z, q, steps, client_noise_multipliers=np.asarray(
        metrics["client_noise_multipliers"], np.float64)[r])
  return PrivacyReport(z, q, steps).rows(np.isfinite(z))


def ledger_claim(make_ledger: Callable[[], Ledger],
                 transform: Optional[Callable[[Dict[str, np.ndarray]],
                                              Dict[str, np.ndarray]]] = None,
                 client: Optional[int] = None) -> Callable[[Dict[str, np.ndarray]], float]:
  """A `Setup.claim` that composes what each "in" repetition reported in a fresh ledger
  (``make_ledger()``, any `fedjax_dp.privacy.ledger_protocol.Ledger`: it refuses a
  report it cannot compose) and returns the median epsilon over repetitions (identical
  reports are composed once). The epsilon is the smallest the code reports: PLD where
  the ledger supports it, else RDP; with per-client noise multipliers the worst
  client's (`Ledger.epsilon`).

  Args:
    make_ledger: the mechanism's ledger factory (``spec.make_ledger(delta)``).
    transform: optional ``metrics -> metrics`` applied first (how a deliberately broken
      accountant read the reports). An infinite noise multiplier composes nothing.
    client: with per-client noise multipliers, the client whose epsilon is claimed
      (`Ledger.unit_epsilons`; None: the worst client's).
  """

  def claim(metrics: Dict[str, np.ndarray]) -> float:
    if transform is not None:
      metrics = transform(dict(metrics))
    per_client = "client_noise_multipliers" in metrics
    z = np.asarray(metrics["client_noise_multipliers"] if per_client
                   else metrics["noise_multiplier"], np.float64)
    q = np.asarray(metrics["sampling_rate"], np.float64)
    steps = np.asarray(metrics["dp_steps"], np.float64)
    extra = [np.asarray(metrics[k], np.float64) for k in sorted(metrics)
             if k.endswith(tuple(f"_{f}" for f in RELEASE_FIELDS))]
    rows = np.concatenate([z.reshape(z.shape[0], -1), q, steps] + extra, axis=1)
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    eps_of = np.empty(first.shape[0])
    for i, r in enumerate(first):
      ledger = make_ledger()
      report = _claim_report(metrics, r)
      if report.num_rounds:
        ledger.record(report)
      acc = "pld" if ledger.supports("pld") else "rdp"
      units = ledger.unit_epsilons(acc) if client is not None else None
      eps_of[i] = (float(units[client]) if units is not None
                   else ledger.epsilon(accountant=acc))
    return float(np.median(eps_of[np.asarray(inverse).reshape(-1)]))

  return claim


def describe(report: AuditReport) -> str:
  """One line: claimed epsilon, lower bound, verdict."""
  lb = report.lower_bound
  verdict = "VIOLATION" if report.violated else "consistent"
  return (f"claimed epsilon {report.claimed_epsilon:.3f}, audited lower bound "
          f"{lb.epsilon_lower_bound:.3f} ({report.score}; {report.repetitions} "
          f"repetitions per world, {report.rounds} round(s), {1 - lb.alpha:.0%} "
          f"confidence, {report.seconds:.1f} s): {verdict}")


def max_provable(repetitions: int, delta: float, alpha: float = 0.05) -> float:
  """The largest lower bound ``repetitions`` scored releases can prove (both error
  counts 0): claims above it cannot be caught by an audit of that size."""
  ub = 1.0 - (alpha / 2) ** (1.0 / repetitions)
  return math.log((1.0 - delta - ub) / ub)
