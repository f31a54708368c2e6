"""Per-device privacy ledgers: each device's guarantee is the composition of *its*
Gaussian releases over the rounds it released in (record-level DP on each device's own
data); the run's guarantee is the worst device's. Used by DP-MOCHA (IEEE IoT-J 2020; in our
reading: replace-one, dropped devices release nothing) and LAPA (arXiv 2505.19823: every
device's artificial noise differs per round and is chosen adaptively from earlier noisy
releases, so its ledger is a privacy filter, below; the wireless channel's noise is not
counted).

Every release of every round is a Gaussian mechanism without amplification (DP-MOCHA:
the SDCA coordinate draws are with replacement over a state that depends on every
sample, and the server sees who uploaded, so neither the paper's q nor its p is claimed;
LAPA: no sampling is claimed, and the base station sees each upload with its sender).
Gaussian mechanisms compose exactly into one Gaussian mechanism: k releases with noise
multipliers z_1..z_k are, for every (epsilon, delta), exactly as private as one with
z = (sum_j z_j^-2)^-1/2 (their privacy loss distributions are Gaussians whose means and
variances add; Dong, Roth, Su 2019, Cor. 3.3, mu-GDP composition). So a device's whole
history is one number, rho_t = sum over its releases of z^-2, and its epsilon is that of
``GaussianDpEvent(rho_t^-1/2)`` under dp-accounting's RDP or PLD accountant.

**Privacy filter** (``budgets``; LAPA, whose per-round noise is chosen adaptively from
earlier noisy releases): the realised rho_t of adaptively chosen Gaussian mechanisms is
not a guarantee (the noise of a later release depends on earlier outputs). If every
device's sum of z^-2 over its releases never exceeds a budget B_i fixed before the
run, the whole adaptive composition is mu-GDP with mu = sqrt(B_i) (fully adaptive
composition: Smith and Thakurta, "Fully adaptive composition for Gaussian differential
privacy", arXiv 2203.05481; Whitehouse, Ramdas, Rogers, Wu, ICML 2023; Feldman and Zrnic,
"Individual privacy accounting via a Renyi filter", NeurIPS 2021), i.e. exactly as private
as one Gaussian mechanism with z = B_i^-1/2. A ledger made with ``budgets`` reports that
bound: a device's epsilon is that of its budget (of its realised rho if larger, within
the float tolerance `FILTER_TOLERANCE`), and +inf if its realised rho exceeded the budget
(the filter was not enforced: no bound holds) -- e.g. an upload without noise. The
realised composition stays available (`realised_epsilons`, `realised_worst_epsilon`),
labelled as such by the caller: it is not a guarantee under adaptive budgets.

`DeviceLedger` implements `fedjax_dp.privacy.ledger_protocol.Ledger` (reports with
``client_noise_multipliers``, ``+inf`` as "released nothing this round", a dropped
device; `epsilon` is the worst device's, `unit_epsilons` every device's) and keeps
`fedjax_dp.privacy.per_client.PerClientLedger`'s extras (``epsilons``,
``worst_client``, ``worst_epsilon``, ``worst_ledger``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from fedjax_dp.privacy.accountants import ACCOUNTANTS, DEFAULT_RDP_ORDERS
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import PrivacyReport, check_report
from fedjax_dp.validation import FedJaxDpError, check_choice, check_delta, check_int

_FORMAT = "fedjax_dp.privacy.DeviceLedger"
_VERSION = 1
#: Relative float tolerance of the filter check: a realised rho up to budget (1 + this)
#: counts as within the budget (the rounds report float32 noise multipliers); the bound
#: reported is then that of the realised rho itself.
FILTER_TOLERANCE = 1e-5


def gaussian_epsilon(rho: float, delta: float, accountant: str = "rdp") -> float:
  """Epsilon at ``delta`` of one Gaussian mechanism with noise multiplier rho^-1/2 (the
  exact composition of releases whose z^-2 sum to ``rho``); 0 for rho = 0, inf for
  rho = inf.

  Raises:
    FedJaxDpError: rho < 0 or NaN, bad delta or accountant.
  """
  check_choice("accountant", accountant, ACCOUNTANTS)
  delta = check_delta(delta)
  if not rho >= 0:
    raise FedJaxDpError(f"rho must be >= 0, got {rho!r}.", option="rho")
  if rho == 0:
    return 0.0
  if math.isinf(rho):
    return math.inf
  event = dp_accounting.GaussianDpEvent(rho ** -0.5)
  if accountant == "rdp":
    acc = dp_accounting.rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
  else:
    interval = max(1e-4, 1e-6 * gaussian_epsilon(rho, delta, "rdp"))
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
  acc.compose(event)
  return float(acc.get_epsilon(delta))


def rho_for_epsilon(epsilon: float, delta: float, accountant: str = "rdp") -> float:
  """The largest rho (sum of z^-2) whose Gaussian mechanism has epsilon <= ``epsilon`` at
  ``delta`` under ``accountant`` (`gaussian_epsilon`, monotone in rho; bisection to a
  relative 1e-10, the result on the safe side).

  Raises:
    FedJaxDpError: epsilon not a finite number > 0, bad delta or accountant.
  """
  check_choice("accountant", accountant, ACCOUNTANTS)
  delta = check_delta(delta)
  if isinstance(epsilon, bool) or not (isinstance(epsilon, (int, float, np.floating))
                                       and math.isfinite(epsilon) and epsilon > 0):
    raise FedJaxDpError(f"epsilon must be a finite number > 0, got {epsilon!r}.",
                        option="epsilon")
  lo, hi = 0.0, 1.0
  while gaussian_epsilon(hi, delta, accountant) <= epsilon:
    lo, hi = hi, hi * 2.0
  while hi - lo > 1e-10 * hi:
    mid = 0.5 * (lo + hi)
    if gaussian_epsilon(mid, delta, accountant) <= epsilon:
      lo = mid
    else:
      hi = mid
  return lo


class DeviceLedger:
  """Per-device exact composition of unamplified Gaussian releases (module docstring).

  Example::

    ledger = DeviceLedger(num_clients=30, delta=1e-3)
    worst = ledger.record(PrivacyReport(z_min, 1.0, 1, client_noise_multipliers=z_block))
    eps = ledger.unit_epsilons()          # z_block float [L, 30], inf = no release
  """

  def __init__(self, num_clients: int, delta: float, population_size: int = 1,
               budgets: Any = None):
    """Args:
      num_clients: m >= 1 devices.
      delta: the delta of every epsilon, in (0, 1).
      population_size: only for `worst_ledger`'s plain-Gaussian event (any m = n).
      budgets: None (report the realised composition), or float ``[m]`` (or a scalar)
        B_i >= 0 (+inf allowed): the privacy filter's budget on each device's sum of
        z^-2, fixed before the run (module docstring); the ledger then reports the
        filter's bound.

    Raises:
      FedJaxDpError: invalid arguments.
    """
    self._n = check_int("num_clients", num_clients, minimum=1)
    self._delta = check_delta(delta)
    self._population = check_int("population_size", population_size, minimum=1)
    self._budgets = None
    if budgets is not None:
      b = np.broadcast_to(np.asarray(budgets, np.float64), (self._n,)).copy() \
          if np.ndim(budgets) == 0 else np.asarray(budgets, np.float64)
      if b.shape != (self._n,) or np.any(np.isnan(b)) or np.any(b < 0):
        raise FedJaxDpError(f"budgets must be {self._n} values >= 0 (inf allowed), got "
                            f"{budgets!r}.", option="budgets")
      self._budgets = b
    self._rho = np.zeros(self._n, np.float64)
    self._releases = np.zeros(self._n, np.int64)
    self._rounds = 0
    self._eps_cache: Dict[float, float] = {}

  @property
  def num_clients(self) -> int:
    return self._n

  @property
  def num_rounds(self) -> int:
    return self._rounds

  @property
  def delta(self) -> float:
    return self._delta

  @property
  def rho(self) -> np.ndarray:
    """float64 ``[m]``: every device's sum of z^-2 so far (a copy)."""
    return self._rho.copy()

  @property
  def budgets(self) -> Optional[np.ndarray]:
    """float64 ``[m]``: the filter's budgets (a copy), or None without a filter."""
    return None if self._budgets is None else self._budgets.copy()

  @property
  def filtered(self) -> bool:
    """Whether the ledger reports a privacy filter's bound (``budgets`` given)."""
    return self._budgets is not None

  def within_budget(self) -> np.ndarray:
    """bool ``[m]``: each device's realised rho is within its budget (all True without
    a filter)."""
    if self._budgets is None:
      return np.ones(self._n, bool)
    return self._rho <= self._budgets * (1.0 + FILTER_TOLERANCE)

  def guarantee_rho(self) -> np.ndarray:
    """float64 ``[m]``: the rho whose Gaussian mechanism each device's epsilon is: the
    realised rho without a filter; with one, the budget (or the realised rho, if larger
    within the tolerance), +inf for a device past its budget."""
    if self._budgets is None:
      return self._rho.copy()
    return np.where(self.within_budget(), np.maximum(self._budgets, self._rho), np.inf)

  @property
  def releases(self) -> np.ndarray:
    """int64 ``[m]``: the rounds each device released in (took part in)."""
    return self._releases.copy()

  def _eps(self, rho: float) -> float:
    if rho not in self._eps_cache:
      if rho == 0:
        self._eps_cache[rho] = 0.0
      elif math.isinf(rho):
        self._eps_cache[rho] = math.inf
      else:
        orders: Any = np.asarray(DEFAULT_RDP_ORDERS, np.float64)
        eps, _ = rdp_privacy_accountant.compute_epsilon(orders, orders * rho / 2.0,
                                                        self._delta)
        self._eps_cache[rho] = float(eps)
    return self._eps_cache[rho]

  def record(self, report: PrivacyReport, /) -> np.ndarray:
    """The `Ledger` hook: `record_many` of the report's per-device noise multipliers
    (``client_noise_multipliers`` ``[R, m]``, required), rates and steps (all 1).

    Returns:
      float64 ``[R]``: the worst device's RDP epsilon after each round.

    Raises:
      FedJaxDpError: a report without per-device noise multipliers or with several
        releases (`check_report`), or what `record_many` raises (nothing is recorded).
    """
    report = check_report(report, "DeviceLedger", per_client="required")
    return self.record_many(report.client_noise_multipliers, report.sampling_rate,
                            report.dp_steps)

  def record_many(self, noise_multipliers: Any, sampling_rates: Any = 1.0,
                  dp_steps: Any = 1) -> np.ndarray:
    """Records L rounds and returns the worst device's RDP epsilon after each.

    Args:
      noise_multipliers: float ``[L, m]``: device t's noise multiplier in each round (its
        releases composed), +inf where it released nothing; 0 means no noise (epsilon
        inf).
      sampling_rates: must be 1 (no amplification is claimed).
      dp_steps: must be 1.

    Returns:
      float64 ``[L]``.

    Raises:
      FedJaxDpError: wrong shape, NaN or negative entries, sampling rates or steps other
        than 1 (nothing is recorded).
    """
    z = np.asarray(noise_multipliers, np.float64)
    if z.ndim != 2 or z.shape[1] != self._n:
      raise FedJaxDpError(f"noise_multipliers must be [rounds, num_clients={self._n}], got "
                          f"shape {z.shape}.", option="noise_multipliers")
    if np.any(np.isnan(z)) or np.any(z < 0):
      raise FedJaxDpError("noise_multipliers must be >= 0 (inf: no release), got NaN or a "
                          "negative entry.", option="noise_multipliers")
    if np.any(np.asarray(sampling_rates) != 1) or np.any(np.asarray(dp_steps) != 1):
      raise FedJaxDpError("DeviceLedger claims no amplification: sampling_rates and "
                          "dp_steps must be 1.", option="sampling_rates")
    with np.errstate(divide="ignore"):
      inc = np.where(np.isinf(z), 0.0, np.where(z == 0, np.inf, 1.0 / z ** 2))
    cum = self._rho[None, :] + np.cumsum(inc, axis=0)
    self._rho = cum[-1].copy() if len(z) else self._rho
    self._releases += np.sum(~np.isinf(z), axis=0)
    self._rounds += len(z)
    if self._budgets is not None:   # the filter's bound after every round
      ok = cum <= self._budgets[None, :] * (1.0 + FILTER_TOLERANCE)
      cum = np.where(ok, np.maximum(self._budgets[None, :], cum), np.inf)
    return np.array([self._eps(float(r)) for r in cum.max(axis=1)], np.float64)

  def _epsilons_of(self, rhos: np.ndarray, delta: Optional[float],
                   accountant: str) -> np.ndarray:
    d = self._delta if delta is None else check_delta(delta)
    if accountant == "rdp" and d == self._delta:
      return np.array([self._eps(float(r)) for r in rhos])
    return np.array([gaussian_epsilon(float(r), d, accountant) for r in rhos])

  def epsilons(self, delta: Optional[float] = None, accountant: str = "rdp") -> np.ndarray:
    """float64 ``[m]``: every device's epsilon (with a filter: its bound)."""
    return self._epsilons_of(self.guarantee_rho(), delta, accountant)

  def realised_epsilons(self, delta: Optional[float] = None,
                        accountant: str = "rdp") -> np.ndarray:
    """float64 ``[m]``: the epsilon of every device's realised composition, as if its
    noise had been fixed in advance (the same as `epsilons` without a filter; with
    adaptively chosen noise it is not a guarantee)."""
    return self._epsilons_of(self._rho, delta, accountant)

  def realised_worst_epsilon(self, delta: Optional[float] = None,
                             accountant: str = "rdp") -> float:
    """The largest realised epsilon over devices (see `realised_epsilons`)."""
    d = self._delta if delta is None else check_delta(delta)
    return gaussian_epsilon(float(self._rho.max()), d, accountant)

  def unit_epsilons(self, accountant: str = "rdp") -> np.ndarray:
    """float64 ``[m]``: every device's epsilon at the ledger's delta (`epsilons`)."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    return self.epsilons(accountant=accountant)

  def epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The run's guarantee: the worst device's epsilon (`worst_epsilon`)."""
    return self.worst_epsilon(delta, accountant)

  def supports(self, accountant: str) -> bool:
    """Both accountants are available (`gaussian_epsilon`).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    check_choice("accountant", accountant, ACCOUNTANTS)
    return True

  def worst_client(self, delta: Optional[float] = None, accountant: str = "rdp") -> int:
    """The (smallest) id of a device with the largest epsilon (the largest rho; with a
    filter, the largest bound)."""
    return int(np.argmax(self.guarantee_rho()))

  def worst_epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The largest epsilon over devices (with a filter: the largest bound)."""
    d = self._delta if delta is None else check_delta(delta)
    return gaussian_epsilon(float(self.guarantee_rho().max()), d, accountant)

  def worst_ledger(self, delta: Optional[float] = None,
                   accountant: str = "rdp") -> PrivacyLedger:
    """A `PrivacyLedger` holding the worst device's composition (with a filter: its
    bound) as the one Gaussian release it equals (replace-one, no sampling)."""
    led = PrivacyLedger(self._delta, sampler="fixed_size", relation="replace_one",
                        population_size=self._population, cohort_size=self._population,
                        privacy_unit="record")
    rho = float(self.guarantee_rho().max())
    if rho > 0:
      led.record(0.0 if math.isinf(rho) else rho ** -0.5, 1.0, 1)
    return led

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state (`from_dict` restores it; rho may hold inf -> None)."""
    out = {"format": _FORMAT, "version": _VERSION, "num_clients": self._n,
           "delta": self._delta, "population_size": self._population,
           "rho": [None if math.isinf(r) else float(r) for r in self._rho],
           "releases": self._releases.tolist(), "rounds": self._rounds}
    if self._budgets is not None:
      out["budgets"] = [None if math.isinf(b) else float(b) for b in self._budgets]
    return out

  @classmethod
  def from_dict(cls, state: Dict[str, Any]) -> "DeviceLedger":
    """Inverse of `to_dict`.

    Raises:
      FedJaxDpError: not a DeviceLedger dict.
    """
    if not isinstance(state, dict) or state.get("format") != _FORMAT or \
        state.get("version") != _VERSION:
      raise FedJaxDpError(f"state must come from DeviceLedger.to_dict() (format "
                          f"{_FORMAT!r}, version {_VERSION}).")
    budgets = state.get("budgets")
    if budgets is not None:
      budgets = [math.inf if b is None else b for b in budgets]
    out = cls(state["num_clients"], state["delta"], state.get("population_size", 1),
              budgets=budgets)
    out._rho = np.array([math.inf if r is None else r for r in state["rho"]], np.float64)
    out._releases = np.asarray(state["releases"], np.int64)
    out._rounds = int(state["rounds"])
    return out

  def __repr__(self) -> str:
    filt = ("" if self._budgets is None else
            f", filter budgets up to {self._budgets.max():.4g}")
    return (f"DeviceLedger(num_clients={self._n}, rounds={self._rounds}, "
            f"worst_rho={self._rho.max():.4g}{filt})")
