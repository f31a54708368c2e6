"""Transmit-power control of LAPA (Sec. IV-B/C; Algorithm 3 of
`fedjax_dp.algorithms.lapa.ddpg` with its surrogate environment, [D]): the
artificial-noise schedule sigma_i[t] of a pilot run (recorded without the switch) fixes
Theorem 1's bound Phi(p) (eq. 24) as a function of the powers alone; DDPG
(`fedjax_dp.algorithms.lapa.ddpg`) minimises it over [0, P_max]^N; a uniform grid over a
common power is the sanity baseline.

Theorem 1's constants are not the CNN's (it is not strongly convex); we take nominal
ones ([D]): L = 2 and mu = 0.01 here (with eta = 0.3, eq. 27 needs
eta < 2 / (L B^2), i.e. B^2 < 3.3), B = 1.2, F(w0) - F* = ln 10 (ten classes), d the
model size. The bound is a heuristic objective for the power optimiser.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, Optional

import numpy as np

from fedjax_dp.algorithms.lapa import bound, ddpg
from fedjax_dp.validation import FedJaxDpError

#: Nominal constants of Theorem 1 for the power optimiser ([D]).
NOMINAL = dict(mu=0.01, lipschitz=2.0, b=1.2, initial_gap=math.log(10.0))


def schedule_from_metrics(path: str) -> np.ndarray:
  """The artificial-noise schedule sigma_i[t], float64 ``[T, N]``, of a pilot run's
  metrics.jsonl (field ``sigma_devices``; a run with ``--no-switch`` so that every round
  has its artificial noise).

  Raises:
    FedJaxDpError: an unreadable file or one without ``sigma_devices``.
  """
  rows = []
  try:
    with open(path) as f:
      for line in f:
        rec = json.loads(line)
        if "sigma_devices" in rec:
          rows.append([0.0 if v is None else float(v) for v in rec["sigma_devices"]])
  except (OSError, ValueError) as e:
    raise FedJaxDpError(f"powers: cannot read the pilot run's metrics {path!r}: {e}",
                        option="powers") from None
  if not rows:
    raise FedJaxDpError(f"powers: {path!r} has no sigma_devices records (a lapa run's "
                        "metrics.jsonl is needed).", option="powers")
  return np.asarray(rows, np.float64)


def weights_from_metrics(path: str, aggregator: str, counts, selected) -> np.ndarray:
  """The aggregation weights rho ``[N]`` of Theorem 1's bound for DDPG: FedAvg's from the
  record counts (public under replace-one), BEDA's uniform over the scheduled devices
  (they change every round), the Wasserstein softmax of the pilot run's label distances
  (its round-1 ``label_distances``, post-processing of its noisy label release; or its
  ``label_distances_exact`` with exact label statistics). The run itself computes its
  own from its own label release.

  Raises:
    FedJaxDpError: a Wasserstein pilot without label distances in its metrics.jsonl.
  """
  from fedjax_dp.algorithms.lapa import aggregation
  sel = np.asarray(selected, bool)
  if aggregator == "fedavg":
    return np.asarray(aggregation.fedavg_weights(np.asarray(counts, np.float64), sel))
  if aggregator != "wasserstein":
    return sel / max(sel.sum(), 1)
  try:
    with open(path) as f:
      for line in f:
        rec = json.loads(line)
        for key in ("label_distances", "label_distances_exact"):
          if rec.get(key) is not None:
            dist = np.asarray(rec[key], np.float64)
            return np.asarray(aggregation.wasserstein_weights(dist, sel))
  except (OSError, ValueError) as e:
    raise FedJaxDpError(f"powers: cannot read the pilot run's metrics {path!r}: {e}",
                        option="powers") from None
  raise FedJaxDpError(f"powers: {path!r} has no label_distances (a Wasserstein lapa "
                      "run's metrics.jsonl is needed).", option="powers")


def objective(sigma_art, gains, noise_power: float, kappa: float, rho, selected,
              eta: float, dim: int, rounds: Optional[int] = None, **constants):
  """``(objective_fn, switch_fn)`` of `bound.make_objective` with the `NOMINAL`
  constants (overridable by keyword)."""
  c = {**NOMINAL, **constants}
  return bound.make_objective(
      sigma_art=np.asarray(sigma_art, np.float64), gains=np.asarray(gains, np.float64),
      noise_power=float(noise_power), kappa=float(kappa),
      rho=np.asarray(rho, np.float64), selected=np.asarray(selected, bool),
      eta=float(eta), dim=int(dim), rounds=rounds, **c)


def optimise_powers(sigma_art, gains, noise_power: float, kappa: float, rho, selected,
                    eta: float, dim: int, p_max: float,
                    config: Optional[ddpg.DdpgConfig] = None) -> Dict[str, Any]:
  """DDPG over the surrogate Phi(p) (Algorithm 3), with the grid baseline.

  Args:
    sigma_art: float ``[T, N]`` the pilot's artificial-noise SDs per coordinate.
    gains: ``[N]`` ||h_i||^2; noise_power: sigma_z^2 in watts; kappa: the symbol scale
      C / sqrt(d); rho: ``[N]`` aggregation weights; selected: bool ``[N]``;
      eta: the learning rate; dim: d; p_max: P_max in watts.
    config: a `ddpg.DdpgConfig` (default: its defaults with ``reward="log"``, the better
      conditioned reward).

  Returns:
    ``{"powers_w": [N] DDPG's best, "phi": Phi of it, "switch_round": T_th of it,
    "average_w": mean power, "phi_average": Phi(mean power for every device),
    "grid_powers_w", "phi_grid": the best common power and its Phi, "phi_max":
    Phi(P_max), "phi_half": Phi(P_max / 2), DDPG's starting point, "episode_rewards":
    [E], "seconds"}``.
  """
  obj, sw = objective(sigma_art, gains, noise_power, kappa, rho, selected, eta, dim)
  cfg = config or ddpg.DdpgConfig(reward="log")
  res = ddpg.train_ddpg(obj, sw, len(np.asarray(gains)), float(p_max), cfg)
  p = np.asarray(res.best_powers, np.float64)
  avg = np.full_like(p, p.mean())
  grid_p, grid_phi = ddpg.uniform_grid(obj, len(p), float(p_max), 64)
  f = lambda v: float(np.asarray(obj(np.asarray(v, np.float32))))
  return {"powers_w": p.tolist(), "phi": float(res.best_phi),
          "switch_round": int(np.asarray(sw(np.asarray(p, np.float32)))),
          "average_w": float(p.mean()), "phi_average": f(avg),
          "switch_round_average": int(np.asarray(sw(np.asarray(avg, np.float32)))),
          "grid_powers_w": np.asarray(grid_p, np.float64).tolist(),
          "phi_grid": float(grid_phi), "phi_max": f(np.full_like(p, p_max)),
          "phi_half": float(res.phi_ref),
          "episode_rewards": np.asarray(res.episode_rewards).tolist(),
          "seconds": float(res.wall_time_s), "constants": dict(NOMINAL)}
