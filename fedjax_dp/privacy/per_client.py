"""Per-client privacy accounting: every client is accounted for every round that could
include it, with its own noise multiplier.

When clients add noise of different scales (a per-client noise multiplier ``z_i``,
local noise; per-client budgets), each client's guarantee is the composition of *its*
events over *all* rounds: with Poisson sampling a client that was not sampled in a round
was still exposed to that round's sampling (the amplified event accounts for it), so
composing only the rounds in which it was sampled, or the smallest ``z`` among the
sampled clients, under-reports. `PerClientLedger` keeps one `PrivacyLedger` per group of
clients whose noise multipliers were equal in every round so far (one group for a
scalar schedule, a handful for a few budget classes), and reports every client's
epsilon and the worst client's.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

import numpy as np

from fedjax_dp.privacy.accountants import ACCOUNTANTS
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import PrivacyReport, check_report
from fedjax_dp.validation import FedJaxDpError, check_choice, check_int

_FORMAT = "fedjax_dp.PerClientLedger"
_VERSION = 1


class PerClientLedger:
  """Per-client composition of per-round events (groups of identical trajectories).

  Implements `fedjax_dp.privacy.ledger_protocol.Ledger`: `record` composes reports with
  ``client_noise_multipliers`` ``[R, N]`` (or without: every client at the round's z),
  `epsilon` is the worst client's, `unit_epsilons` every client's.

  Example::

    ledger = PerClientLedger(num_clients=100, delta=1e-5)
    worst = ledger.record(PrivacyReport(z_min, q_block, steps_block,
                                        client_noise_multipliers=z_block))  # [L, 100]
    eps = ledger.unit_epsilons()                                # float64 [100]
  """

  def __init__(self, num_clients: int, delta: float, **ledger_kwargs: Any):
    """Creates one group holding every client.

    Args:
      num_clients: N >= 1.
      delta: target delta in (0, 1).
      **ledger_kwargs: passed to every group's `PrivacyLedger` (sampler, relation,
        population_size, cohort_size, privacy_unit, truncation, orders,
        pld_value_discretization_interval).

    Raises:
      FedJaxDpError: invalid arguments.
    """
    self._n = check_int("num_clients", num_clients, minimum=1)
    self._kwargs = dict(ledger_kwargs)
    self._group_of = np.zeros(self._n, np.int64)
    self._ledgers: List[PrivacyLedger] = [PrivacyLedger(delta, **ledger_kwargs)]

  @property
  def num_clients(self) -> int:
    return self._n

  @property
  def num_rounds(self) -> int:
    return self._ledgers[0].num_rounds

  @property
  def delta(self) -> float:
    return self._ledgers[0].delta

  @property
  def groups(self) -> List[np.ndarray]:
    """Client ids of each group (sorted int64 arrays), in group order."""
    return [np.flatnonzero(self._group_of == g) for g in range(len(self._ledgers))]

  def ledger_of(self, client: int) -> PrivacyLedger:
    """The `PrivacyLedger` that accounts for ``client``."""
    client = check_int("client", client, minimum=0, maximum=self._n - 1)
    return self._ledgers[int(self._group_of[client])]

  def record(self, report: PrivacyReport, /) -> np.ndarray:
    """The `Ledger` hook: `record_many` of the report's per-client noise multipliers
    (``[R, N]``; without them, the round's ``noise_multiplier`` for every client), rates
    and steps.

    Returns:
      float64 ``[R]``: the largest RDP epsilon over clients after each round.

    Raises:
      FedJaxDpError: a report with several releases per round (`check_report`), or
        what `record_many` raises (nothing is recorded).
    """
    report = check_report(report, "PerClientLedger", per_client="optional")
    z = (report.noise_multiplier if report.client_noise_multipliers is None
         else report.client_noise_multipliers)
    return self.record_many(z, report.sampling_rate, report.dp_steps)

  def record_many(self, noise_multipliers: Any, sampling_rates: Any,
                  dp_steps: Any = 1) -> np.ndarray:
    """Records L rounds for every client and returns the worst client's epsilon history.

    Args:
      noise_multipliers: float ``[L, N]`` (client i's noise multiplier in each round,
        relative to the ledgers' relation), or ``[L]`` (the same for every client).
      sampling_rates: float ``[L]`` or a scalar: each client's probability of taking part.
      dp_steps: int ``[L]`` or a scalar.

    Returns:
      float64 ``[L]``: the largest RDP epsilon over clients after each round.

    Raises:
      FedJaxDpError: wrong shapes or invalid entries (nothing is recorded).
    """
    z = np.asarray(noise_multipliers, np.float64)
    if z.ndim == 1:
      z = np.broadcast_to(z[:, None], (z.shape[0], self._n))
    if z.ndim != 2 or z.shape[1] != self._n:
      raise FedJaxDpError(f"noise_multipliers must be [rounds] or [rounds, "
                          f"num_clients={self._n}], got shape {np.shape(noise_multipliers)}.")
    length = z.shape[0]
    q = np.broadcast_to(np.asarray(sampling_rates, np.float64), (length,))
    steps = np.broadcast_to(np.asarray(dp_steps, np.float64), (length,))
    # Split the groups by their trajectories in this block: clients stay together only
    # if they were together and their columns are equal.
    keys = np.concatenate([self._group_of[None, :].astype(np.float64), z], axis=0).T
    uniq, first, new_group_of = np.unique(keys, axis=0, return_index=True,
                                          return_inverse=True)
    new_group_of = np.asarray(new_group_of).reshape(-1)
    ledgers = []
    for g in range(uniq.shape[0]):
      old = self._ledgers[int(self._group_of[first[g]])]
      trial = copy.deepcopy(old)
      trial.record(PrivacyReport(z[:, first[g]], q, steps))  # a copy: raises first
      ledgers.append(trial)
    self._ledgers, self._group_of = ledgers, new_group_of.astype(np.int64)
    hist = np.stack([l.epsilon_history(start=l.num_rounds - length) for l in ledgers])
    return hist.max(axis=0)

  def epsilons(self, delta: Optional[float] = None, accountant: str = "rdp") -> np.ndarray:
    """float64 ``[N]``: every client's epsilon."""
    check_choice("accountant", accountant, ACCOUNTANTS)
    per_group = np.array([l.epsilon(delta, accountant) for l in self._ledgers])
    return per_group[self._group_of]

  def unit_epsilons(self, accountant: str = "rdp") -> np.ndarray:
    """float64 ``[N]``: every client's epsilon at the ledger's delta (`epsilons`)."""
    return self.epsilons(accountant=accountant)

  def epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The run's guarantee: the worst client's epsilon (`worst_epsilon`)."""
    return self.worst_epsilon(delta, accountant)

  def supports(self, accountant: str) -> bool:
    """Whether ``epsilon(accountant=...)`` is available (every group's ledger must
    support it).

    Raises:
      FedJaxDpError: an unknown accountant.
    """
    check_choice("accountant", accountant, ACCOUNTANTS)
    return all(l.supports(accountant) for l in self._ledgers)

  def worst_client(self, delta: Optional[float] = None, accountant: str = "rdp") -> int:
    """The (smallest) id of a client with the largest epsilon."""
    return int(np.argmax(self.epsilons(delta, accountant)))

  def worst_epsilon(self, delta: Optional[float] = None, accountant: str = "rdp") -> float:
    """The largest epsilon over clients."""
    return float(np.max([l.epsilon(delta, accountant) for l in self._ledgers]))

  def worst_ledger(self, delta: Optional[float] = None,
                   accountant: str = "rdp") -> PrivacyLedger:
    """The `PrivacyLedger` of the worst client (`worst_client`)."""
    return self.ledger_of(self.worst_client(delta, accountant))

  def to_dict(self) -> Dict[str, Any]:
    """JSON-serialisable state (`from_dict` restores it)."""
    return {"format": _FORMAT, "version": _VERSION, "num_clients": self._n,
            "group_of": self._group_of.tolist(),
            "ledgers": [l.to_dict() for l in self._ledgers]}

  @classmethod
  def from_dict(cls, state: Dict[str, Any]) -> "PerClientLedger":
    """Inverse of `to_dict`.

    Raises:
      FedJaxDpError: not a per-client ledger dict, or inconsistent contents.
    """
    if not isinstance(state, dict) or state.get("format") != _FORMAT or \
        state.get("version") != _VERSION:
      raise FedJaxDpError(f"state must come from PerClientLedger.to_dict() (format "
                          f"{_FORMAT!r}, version {_VERSION}).")
    ledgers = [PrivacyLedger.from_dict(d) for d in state["ledgers"]]
    group_of = np.asarray(state["group_of"], np.int64)
    if group_of.shape != (state["num_clients"],) or not ledgers or \
        group_of.min() < 0 or group_of.max() >= len(ledgers):
      raise FedJaxDpError("state['group_of'] does not match the ledgers.")
    out = cls.__new__(cls)
    out._n, out._kwargs = int(state["num_clients"]), {}
    out._group_of, out._ledgers = group_of, ledgers
    return out

  def __repr__(self) -> str:
    return (f"PerClientLedger(num_clients={self._n}, groups={len(self._ledgers)}, "
            f"rounds={self.num_rounds})")
