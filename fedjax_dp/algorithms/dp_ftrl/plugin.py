"""DP-FTRL, banded and BLT matrix factorisation and independent noise under cyclic
participation
in ``fedjax-dp run --algorithm dp_ftrl`` (`fedjax_dp.algorithms.dp_ftrl.algorithm`).

Every round's record carries the mechanism's accounting parameters (``ftrl_*``: the
mechanism, the cycle length, the group rate, the tree's restart period, the bands, the
strategy and the rounds C was built for, the BLT's buffer decays and output scales (its
C, `fedjax_dp.algorithms.dp_ftrl.blt`), the sensitivity^2 the epsilon uses: for the
tree, the largest over the groups of the number of released tree nodes holding one of
the group's rounds, `accounting.tree_sensitivity_squared` with the cycle length), so
that epsilon can be recomputed from metrics.jsonl alone.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Dict, List, Optional

import numpy as np
import tyro

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.dp_ftrl.algorithm import (Mechanism, dp_ftrl,
                                                    run_sensitivity_squared)
from fedjax_dp.algorithms.dp_ftrl.noise import Strategy
from fedjax_dp.algorithms.interface import TINY_SYNTHETIC_RUN
from fedjax_dp.algorithms.interface import (Controller, FederatedAlgorithm, SmokeConfig,
                                            check_choices)
from fedjax_dp.algorithms.options import ClientOptimizer, ServerOptimizer, check_local_work
from fedjax_dp.privacy import disclosure
from fedjax_dp.validation import (FedJaxDpError, check_int, check_non_negative,
                                  check_positive, check_probability)

__all__ = ["ROUND_FIELDS", "DpFtrlOptions", "DpFtrlController", "DpFtrl"]

#: Fields every record gets (`DpFtrlController.round_fields`), all accounting parameters.
ROUND_FIELDS = ("ftrl_mechanism", "ftrl_cycle_length", "ftrl_group_rate",
                "ftrl_restart_every", "ftrl_bands", "ftrl_strategy", "ftrl_strategy_rounds",
                "ftrl_blt_buf_decay", "ftrl_blt_output_scale", "ftrl_sensitivity_squared")


@dataclasses.dataclass
class DpFtrlOptions:
  """Correlated noise across rounds (DP-FTRL's tree, banded MF) or independent noise,
  under cyclic participation."""
  mechanism: Mechanism = "tree"
  """tree (DP-FTRL, Kairouz et al. 2021), banded (banded matrix factorisation,
  Choquette-Choo et al. 2023), blt (buffered-linear-Toeplitz MF, Dvijotham et al. 2024 /
  McMahan, Xu, Zhang 2024: Gboard's; nbuf buffers of noise state per parameter; needs
  --group-rate 1) or independent (i.i.d. noise, the same participation)"""
  clip_norm: float = 0.5
  """clip norm C: L2 bound of each client's update (parameter units)"""
  noise_multiplier: Optional[float] = None
  """noise multiplier z: the i.i.d. Gaussian draws behind the correlated noise have
  std z * C (default: 2.0; with --target-epsilon alone, z is calibrated so that --rounds
  rounds spend it)"""
  clients_per_round: Optional[int] = None
  """expected cohort N * group_rate / R that sets the default cycle length R (default: a
  tenth of the clients; exclusive with --cycle-length)"""
  cycle_length: Optional[int] = None
  """R: clients are split into R groups (from --group-seed); group g takes part in
  rounds t with t mod R = g (default: N * group_rate / --clients-per-round, rounded)"""
  group_rate: float = 1.0
  """probability that a group member joins in its round (1: every member, no
  amplification; < 1: cyclic Poisson sampling, amplified for banded/independent;
  refused for blt, which has no amplification theorem)"""
  restart_every: Optional[int] = None
  """tree: restart period, at most R: each client once per tree (default: R)"""
  bands: Optional[int] = None
  """banded: bands b of C, at most R: min-separation (default: min(R, --rounds))"""
  strategy: Strategy = "optimized"
  """banded: optimized (jax-privacy's banded Toeplitz for prefix sums) or sqrt (the
  truncated square-root Toeplitz)"""
  buffers: Optional[int] = None
  """blt: the most buffers nbuf (in [0, 15]) jax-privacy's BLT optimiser may use for
  --rounds rounds at min-separation R (it adds buffers while the max error improves by
  > 1%; the noise state is nbuf copies of the model; default 10)"""
  group_seed: Optional[int] = None
  """seed of the group assignment, public (default: the run's --seed)"""
  local_epochs: Optional[int] = 1
  """local epochs E per round"""
  local_steps: Optional[int] = None
  """local steps per round, instead of --local-epochs (give only one of the two)"""
  batch_size: int = 16
  """local minibatch size"""
  client_optimizer: ClientOptimizer = "sgd"
  """local optimiser"""
  client_learning_rate: Annotated[float, tyro.conf.arg(aliases=("--client-lr",))] = 0.1
  """client learning rate"""
  server_optimizer: ServerOptimizer = "fedavgm"
  """server optimiser: fedavgm (SGD with momentum 0.9) is DP-FTRLM (Kairouz et al. 2021)"""
  server_learning_rate: Annotated[float, tyro.conf.arg(aliases=("--server-lr",))] = 0.05
  """server learning rate"""

  EXCLUSIVE = (("clients_per_round", "cycle_length"), ("local_epochs", "local_steps"))


class DpFtrlController(Controller):
  """The default schedule; every record gets the mechanism's accounting parameters and
  ``ftrl_sensitivity_squared``, the sensitivity^2 (units of S^2) behind the Gaussian
  event of the rounds up to it (None under amplification, whose event is not one
  Gaussian)."""

  def __init__(self, alg: Algorithm, eval_every: int, phases, fields: Dict[str, Any],
               sensitivity_squared: Optional[np.ndarray]):
    super().__init__(alg, eval_every, phases)
    self.fields = fields
    self.sensitivity_squared = sensitivity_squared

  def round_fields(self, record: Dict[str, Any]) -> Dict[str, Any]:
    s2 = self.sensitivity_squared
    t = int(record["round"]) - 1  # 0-based index of the 1-based round
    return dict(self.fields, ftrl_sensitivity_squared=(
        None if s2 is None or t >= s2.size else float(s2[t])))


class DpFtrl(FederatedAlgorithm):
  """DP-FTRL / banded MF / BLT MF / independent noise under cyclic participation
  (`dp_ftrl`)."""
  name = "dp_ftrl"
  description = ("user-level DP-FTRL (Kairouz et al. 2021): correlated noise by tree "
                 "aggregation, banded matrix factorisation (Choquette-Choo et al. 2023) or "
                 "buffered-linear-Toeplitz MF (BLT, Dvijotham et al. 2024), "
                 "cyclic participation")
  Options = DpFtrlOptions
  noise_multiplier_option = "noise_multiplier"
  default_noise_multiplier = 2.0
  function = staticmethod(dp_ftrl)
  metric_labels = {f: (disclosure.PUBLIC, disclosure.ACCOUNTING) for f in ROUND_FIELDS}
  summary_labels = {
      "mechanism": (disclosure.PUBLIC, "configuration: no client data"),
      "participation": (disclosure.PUBLIC, "the public participation schedule (groups from "
                        "a public seed)"),
      "sensitivity_squared": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      "effective_noise_multiplier": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      "sensitivity_note": (disclosure.PUBLIC, disclosure.ACCOUNTING),
  }

  def audit_targets(self):
    from fedjax_dp.algorithms.dp_ftrl import audit
    return audit.targets()

  def tiny_run_options(self):
    return dict(TINY_SYNTHETIC_RUN)

  def test_config(self, model, federated_data) -> SmokeConfig:
    # The tree, cyclic participation (half the clients a round).
    from fedjax_dp.algorithms.dp_fedavg.plugin import user_level_check
    return SmokeConfig(dict(mechanism="tree", clip_norm=1.0, noise_multiplier=0.1,
                            cycle_length=2, batch_size=5, client_learning_rate=0.3,
                            server_optimizer="fedavg", rounds=12),
                       check=user_level_check(0.1))

  def validate(self, options, run) -> None:
    check_choices(options)
    check_positive("clip_norm", options.clip_norm)
    if options.noise_multiplier is not None:
      check_non_negative("noise_multiplier", options.noise_multiplier)
    check_probability("group_rate", options.group_rate)
    check_positive("client_learning_rate", options.client_learning_rate)
    check_positive("server_learning_rate", options.server_learning_rate)
    check_int("batch_size", options.batch_size, minimum=1)
    if options.clients_per_round is not None and options.cycle_length is not None:
      raise FedJaxDpError(
          "give either clients_per_round or cycle_length, not both (got "
          f"{options.clients_per_round} and {options.cycle_length}).",
          option="clients_per_round")
    for name in ("clients_per_round", "cycle_length", "restart_every", "bands"):
      if getattr(options, name) is not None:
        check_int(name, getattr(options, name), minimum=1)
    if options.group_seed is not None:
      check_int("group_seed", options.group_seed, minimum=0)
    check_local_work(options.local_epochs, options.local_steps)
    if options.local_steps is not None:
      check_int("local_steps", options.local_steps, minimum=1)
    elif options.local_epochs is not None:
      check_int("local_epochs", options.local_epochs, minimum=1)
    else:
      raise FedJaxDpError("give local_epochs or local_steps.", option="local_epochs")
    if options.mechanism != "tree" and options.restart_every is not None:
      raise FedJaxDpError(f"restart_every applies to mechanism 'tree' only, got mechanism "
                          f"{options.mechanism!r}.", option="restart_every")
    if options.mechanism != "banded" and options.bands is not None:
      raise FedJaxDpError(f"bands applies to mechanism 'banded' only, got mechanism "
                          f"{options.mechanism!r}.", option="bands")
    if options.mechanism != "blt" and options.buffers is not None:
      raise FedJaxDpError(f"buffers applies to mechanism 'blt' only, got mechanism "
                          f"{options.mechanism!r}.", option="buffers")
    if options.buffers is not None:
      check_int("buffers", options.buffers, minimum=0, maximum=15)
    if options.mechanism == "blt" and options.group_rate < 1:
      raise FedJaxDpError(f"group_rate must be 1 for mechanism 'blt' (no amplification "
                          f"theorem covers a BLT), got {options.group_rate:g}.",
                          option="group_rate")
    if options.bands is not None and options.bands > run.rounds:
      raise FedJaxDpError(f"bands must be <= rounds={run.rounds} (C is rounds x rounds), "
                          f"got {options.bands}.", option="bands")

  def build(self, setup) -> Algorithm:
    o, run = setup.options, setup.run
    z = 1.0 if o.noise_multiplier is None else o.noise_multiplier  # set by the run
    return dp_ftrl(setup.model, setup.data, mechanism=o.mechanism, clip_norm=o.clip_norm,
                   noise_multiplier=z, rounds=run.rounds, cycle_length=o.cycle_length,
                   clients_per_round=o.clients_per_round, group_rate=o.group_rate,
                   restart_every=o.restart_every, bands=o.bands, strategy=o.strategy,
                   buffers=o.buffers,
                   local_epochs=None if o.local_steps else o.local_epochs,
                   local_steps=o.local_steps, batch_size=o.batch_size,
                   client_optimizer=o.client_optimizer,
                   client_learning_rate=o.client_learning_rate,
                   server_optimizer=o.server_optimizer,
                   server_learning_rate=o.server_learning_rate,
                   seed=run.seed if o.group_seed is None else o.group_seed,
                   chunk_size=run.chunk_size, mesh=setup.mesh)

  def controller(self, alg: Algorithm, setup, eval_every: int) -> Controller:
    c = alg.config
    fields = {"ftrl_mechanism": c["mechanism"], "ftrl_cycle_length": c["cycle_length"],
              "ftrl_group_rate": c["group_rate"], "ftrl_restart_every": c["restart_every"],
              "ftrl_bands": c["bands"], "ftrl_strategy": c["strategy"],
              "ftrl_strategy_rounds": c.get("banded_strategy_rounds",
                                             c.get("blt_strategy_rounds")),
              "ftrl_blt_buf_decay": c.get("blt_buf_decay"),
              "ftrl_blt_output_scale": c.get("blt_output_scale")}
    return DpFtrlController(alg, eval_every, setup.phases, fields,
                            run_sensitivity_squared(c, setup.run.rounds))

  def summary_fields(self, alg: Algorithm, setup, controller, records) -> Dict[str, Any]:
    assert isinstance(controller, DpFtrlController), controller  # `controller`'s
    c = alg.config
    rounds = len(records)
    s2 = controller.sensitivity_squared
    sens2 = float(s2[rounds - 1]) if s2 is not None and 0 < rounds <= s2.size else None
    z = alg.hparams.noise_multiplier
    return {
        "mechanism": c["mechanism"],
        "participation": {
            "kind": "cyclic", "cycle_length": c["cycle_length"],
            "group_rate": c["group_rate"], "group_seed": c["group_seed"],
            "expected_cohort_size": c["expected_cohort_size"],
            "max_participations_per_client": int(math.ceil(rounds / c["cycle_length"]))
            if rounds else 0,
            "restart_every": c["restart_every"], "bands": c["bands"],
            "blt_buffers": (len(c["blt_buf_decay"]) if c["mechanism"] == "blt"
                            else None)},
        "sensitivity_squared": sens2,
        "effective_noise_multiplier": (float(z) / math.sqrt(sens2)
                                       if sens2 and np.ndim(z) == 0 else None),
        "sensitivity_note": (
            "L2 sensitivity S of the clipped update sum per round; over the run, epsilon "
            "is that of one Gaussian release with sensitivity S * sqrt(sensitivity_squared)"
            " (effective_noise_multiplier = z / sqrt(sensitivity_squared))"
            + ("; tree: sensitivity_squared is the largest over the groups of the number "
               "of released tree nodes (completed dyadic sums) holding one of the group's "
               "rounds" if c["mechanism"] == "tree" else "")
            if sens2 else "amplified event (cyclic Poisson sampling): see privacy_note"),
    }

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    p = summary.get("participation") or {}
    line = (f"{summary.get('mechanism')} noise, cyclic participation: R = "
            f"{p.get('cycle_length')} groups, each client in at most "
            f"{p.get('max_participations_per_client')} round(s)")
    if summary.get("effective_noise_multiplier") is not None:
      line += (f"; epsilon = one Gaussian release at z / sqrt({summary['sensitivity_squared']:.4g})"
               f" = {summary['effective_noise_multiplier']:.4g}")
    return [line]
