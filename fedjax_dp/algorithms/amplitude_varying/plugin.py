"""Amplitude-varying perturbation in ``fedjax-dp run``: its options, its host-side noise
controller (the geometric schedule, or online refinement that reacts to the test loss)
and its own epsilon beside the accountant's."""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Dict, List, Literal, Optional

import tyro

from fedjax_dp.algorithms.amplitude_varying import schedules
from fedjax_dp.algorithms.amplitude_varying.algorithm import (
    Mechanism, NoiseController, OnlineRefinement, amplitude_varying, hparams_for)
from fedjax_dp.algorithms.interface import TINY_SYNTHETIC_RUN
from fedjax_dp.algorithms.interface import (Block, Controller, FederatedAlgorithm,
                                            ModelSpec, SmokeConfig, check_choices)
from fedjax_dp.algorithms.sensitivity_modes import SensitivityOptions, conditional_epsilon
from fedjax_dp.privacy import accountants, disclosure
from fedjax_dp.validation import (FedJaxDpError, check_epsilon, check_int, check_positive)

__all__ = ["AmplitudeVaryingOptions", "ScheduleController", "AmplitudeVarying"]


@dataclasses.dataclass
class AmplitudeVaryingOptions(SensitivityOptions):
  """Yuan et al. (IEEE TIFS 2023): geometric noise variance on each sampled client's model."""
  epsilon: float = 10.0
  """the epsilon its eq. (8) calibrates the noise schedule for"""
  vartheta: float = 1.0
  """ratio of the geometric variance series Theta(m) = vartheta^(m-1) sigma^2, eq. (6);
  1 = persistent Gaussian noise"""
  param_clip_norm: float = 5.0
  """C: every client's parameters are projected to norm <= C after every local step"""
  clients_per_round: Optional[int] = None
  """K clients drawn without replacement per round (default: half the clients)"""
  local_steps: int = 5
  """tau local gradient steps per round, eq. (2)"""
  batch_size: Optional[int] = None
  """local minibatch size (default: the full local dataset, the paper's GD)"""
  client_learning_rate: Annotated[float, tyro.conf.arg(aliases=("--client-lr",))] = 0.1
  """eta, the local step size"""
  mechanism: Mechanism = "gaussian"
  """gaussian (the paper's), laplace (its constant 'Lap' baseline) or none (no noise,
  clipping kept)"""
  laplace_mode: schedules.LaplaceMode = "pure_dp_split"
  """calibration of the Laplace baseline"""
  alpha_d: Optional[float] = None
  """online refinement (Theorem 2): when the test loss stops decreasing,
  M' = ceil(alpha_d M) and sigma is recomputed"""
  refinement_mode: schedules.RefinementMode = "paper"
  """paper: eq. (9) as printed; exact_budget: never exceeds the budget"""


class ScheduleController(Controller):
  """sigma_m per round from the planned schedule (compiled blocks), or with online
  refinement one round at a time (the next sigma_m depends on this round's test loss;
  every round through the same compiled block)."""

  def __init__(self, alg, eval_every: int, refinement: Optional[OnlineRefinement]):
    super().__init__(alg, eval_every)
    self.noise = NoiseController(alg.config, refinement)

  def next_block(self, done: int, planned: int) -> Optional[Block]:
    if self.noise.refinement is None:
      return super().next_block(done, planned)
    std = self.noise.next_stddev()
    if std is None:
      return None
    return Block(hparams_for(self.alg.config, [std]), 1, 1, 1)

  def schedule(self, start: int, stop: int):
    return hparams_for(self.alg.config, self.alg.config["stddevs"][start:stop])

  def round_fields(self, record: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"planned_rounds": self.noise.planned}  # this round's horizon
    self.noise.observe(record["noise_stddev"], record.get("test_loss"))
    out["epsilon_paper"] = self.noise.epsilon_paper()
    if self.alg.privacy is not None:  # z if the paper's Delta_s held
      out["noise_multiplier_conditional"] = (record["noise_stddev"]
                                             / self.alg.config["sensitivity_paper"])
    return out

  def restore(self, records) -> None:
    self.noise.restore(records)


class AmplitudeVarying(FederatedAlgorithm):
  """Amplitude-varying perturbation (`amplitude_varying`)."""
  name = "amplitude_varying"
  description = ("amplitude-varying perturbation (Yuan et al. 2023): geometric noise "
                 "variance on each sampled client's model")
  Options = AmplitudeVaryingOptions
  default_dataset = "fashion_mnist"
  function = staticmethod(amplitude_varying)
  metric_labels = {"planned_rounds": (disclosure.DP, "the horizon M of the noise schedule, "
                                      "decided from the test loss (see test_loss)")}
  from_test_metrics = ("planned_rounds",)
  summary_labels = {
      **{f: (disclosure.PUBLIC, disclosure.ACCOUNTING) for f in (
          "epsilon_paper", "epsilon_paper_exact_moment_bound", "epsilon_paper_target",
          "epsilon_conditional_rdp", "epsilon_guarantee_note", "noise_stddevs")},
      **{f: (disclosure.PUBLIC, "configuration: no client data") for f in (
          "vartheta", "sensitivity_mode")},
      "sensitivity": (disclosure.PUBLIC, "the sensitivity the code enforces (2C, or the "
                      "clipped-gradient bound with the smallest client size: identical in "
                      "replace-one neighbours)"),
      "sensitivity_paper": (disclosure.PUBLIC, "2C / min client size: identical in "
                            "replace-one neighbours"),
      "planned_rounds": (disclosure.DP, "the horizon M of the noise schedule, decided "
                         "from the test loss (see test_loss)"),
      "mechanism_note": (disclosure.PUBLIC, "configuration: no client data"),
  }

  def audit_targets(self):
    from fedjax_dp.algorithms.amplitude_varying import audit
    return audit.targets()

  def tiny_run_options(self):
    return dict(TINY_SYNTHETIC_RUN, clients_per_round=4, epsilon=10.0, activation="linear")

  def test_config(self, model, federated_data) -> SmokeConfig:
    # A large epsilon keeps the noise small.
    return SmokeConfig(dict(epsilon=200.0, vartheta=1.0, rounds=12, clients_per_round=8,
                            local_steps=4, learning_rate=0.3, clip_norm=10.0),
                       check=_smoke_check)

  def validate(self, options, run) -> None:
    check_choices(options)
    options.validate_sensitivity()
    check_epsilon(options.epsilon)
    check_positive("vartheta", options.vartheta)
    check_positive("param_clip_norm", options.param_clip_norm)
    check_positive("client_learning_rate", options.client_learning_rate)
    check_int("local_steps", options.local_steps, minimum=1)
    if options.batch_size is not None:
      check_int("batch_size", options.batch_size, minimum=1)
    if options.clients_per_round is not None:
      check_int("clients_per_round", options.clients_per_round, minimum=1)
    if options.alpha_d is not None:
      if not (isinstance(options.alpha_d, (int, float)) and 0.0 < options.alpha_d < 1.0):
        raise FedJaxDpError(f"alpha_d must be in (0, 1), got {options.alpha_d!r}.",
                            option="alpha_d")
      if options.mechanism != "gaussian":
        raise FedJaxDpError("alpha_d (online refinement) needs mechanism='gaussian'.",
                            option="alpha_d")
    accountants.check_accountant_supports(run.accountant, "fixed_size")

  def model_spec(self, options, run) -> ModelSpec:
    return ModelSpec("mlp", {"hidden": (32,), "activation": "linear"})  # 784-32-10

  def build(self, setup):
    o = setup.options
    n = setup.data.num_clients
    k = o.clients_per_round or max(1, round(0.5 * n))
    return amplitude_varying(
        setup.model, setup.data, epsilon=o.epsilon, delta=setup.run.delta,
        vartheta=o.vartheta, rounds=setup.run.rounds, clients_per_round=k,
        local_steps=o.local_steps, learning_rate=o.client_learning_rate,
        clip_norm=o.param_clip_norm, mechanism=o.mechanism, laplace_mode=o.laplace_mode,
        batch_size=o.batch_size, sensitivity_mode=o.sensitivity_mode,
        grad_clip_norm=o.grad_clip_norm, chunk_size=setup.run.chunk_size, mesh=setup.mesh)

  def controller(self, alg, setup, eval_every: int) -> Controller:
    o = setup.options
    refinement = OnlineRefinement(o.alpha_d, o.refinement_mode) if o.alpha_d else None
    return ScheduleController(alg, eval_every, refinement)

  def summary_fields(self, alg, setup, controller, records) -> Dict[str, Any]:
    assert isinstance(controller, ScheduleController), controller  # `controller`'s
    c, noise = alg.config, controller.noise
    out: Dict[str, Any] = dict(
        epsilon_paper=noise.epsilon_paper(),
        epsilon_paper_exact_moment_bound=(schedules.paper_epsilon_exact(
            noise.used, c["sampling_rate"], c["calibration_sensitivity"], c["delta"])
            if c["mechanism"] == "gaussian" and noise.used else None),
        epsilon_paper_target=c["epsilon"], vartheta=c["vartheta"],
        sensitivity=c["sensitivity"], sensitivity_paper=c["sensitivity_paper"],
        sensitivity_mode=c["sensitivity_mode"], noise_stddevs=noise.used,
        planned_rounds=noise.planned)
    if c["mechanism"] != "gaussian":
      out["mechanism_note"] = (
          "Laplace baseline ('Lap'): every client's parameters were clipped to C and "
          "Laplace noise of the constant std noise_stddevs added to every upload; its "
          f"calibration ({c['laplace_mode']}) is our reconstruction, with the L1 "
          "sensitivity sqrt(P) Delta_s for pure_dp_split; the ledger accounts Gaussian "
          "noise only, so no guarantee is claimed" if c["mechanism"] == "laplace" else
          "no noise (the paper's 'no DP'): parameters clipped to C, no guarantee")
    if alg.privacy is not None:
      out.update(conditional_epsilon(alg, records, c["delta"]))
    return out

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    s = summary
    if s.get("mechanism_note"):
      return [s["mechanism_note"]]
    if s.get("epsilon_paper") is None:
      return []
    exact = s["epsilon_paper_exact_moment_bound"]
    return [f"the paper's own accounting: epsilon {s['epsilon_paper']:.3f} (target "
            f"{s['epsilon_paper_target']:g}; its moment bound minimised exactly: "
            f"{exact:.3f}); the guarantee above is what the code enforces"
            if exact is not None and math.isfinite(exact) else
            f"the paper's own accounting: epsilon {s['epsilon_paper']:.3f} (target "
            f"{s['epsilon_paper_target']:g}); the guarantee above is what the code "
            "enforces"]


def _smoke_check(alg, records, data) -> None:
  """`SmokeConfig.check`: record level, K = 8 of the U clients without replacement; each
  round reports its sigma_m and z_m = sigma_m / Delta_s."""
  import numpy as np
  assert alg.privacy.unit == "record-level", alg.privacy.unit
  assert alg.privacy.sampler == "fixed_size", alg.privacy.sampler
  sigma = alg.config["stddevs"][0]
  for r in records:
    assert r["dp_steps"] == 1, r
    np.testing.assert_allclose(r["sampling_rate"], 8 / data.num_clients, rtol=1e-6)
    np.testing.assert_allclose(r["noise_stddev"], sigma, rtol=1e-5)
    np.testing.assert_allclose(r["noise_multiplier"], sigma / alg.config["sensitivity"],
                               rtol=1e-5)
