"""PADPFL in ``fedjax-dp run``: its options, the scenario's clients (built from an
image dataset, with the data change of scenario 4), the per-round impact factors and
noise levels, and the paper's epsilons beside the accountant's."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Dict, List, Literal, Optional

import numpy as np
import tyro

from fedjax_dp.algorithms.interface import (Controller, FederatedAlgorithm, ModelSpec,
                                            Prepared, SmokeConfig, check_choices)
from fedjax_dp.algorithms.padpfl import impact_factors as impact
from fedjax_dp.algorithms.padpfl.algorithm import (downlink_noise_multiplier,
                                                   nominal_and_accountant_epsilons, padpfl,
                                                   schedule_hparams)
from fedjax_dp.algorithms.sensitivity_modes import SensitivityOptions, conditional_epsilon
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import PrivacyReport
from fedjax_dp.validation import (FedJaxDpError, check_epsilon, check_int,
                                  check_non_negative, check_positive)

__all__ = ["PadpflOptions", "PhaseController", "Padpfl"]


@dataclasses.dataclass
class PadpflOptions(SensitivityOptions):
  """Talaei and Izadi (arXiv 2024): impact factors with client and server noise."""
  epsilon: float = 20.0
  """the epsilon its eqs. (8) and (13) calibrate the noise for (the paper: 5 or 20)"""
  scenario: Literal[1, 2, 3, 4] = 1
  """heterogeneity scenario of the paper's Table I (60 clients in 3 parts)"""
  impact_factors: str = "personalized"
  """personalized (the scenario's own), equal, data_size, a per-part ratio such as
  0-1-2, or 0-1-2>2-1-0 (switch after round 10)"""
  exposures: int = 1
  """R: uploads an adversary may see, 1 <= R <= rounds (eq. 8)"""
  clip_bound: float = 9.0
  """B: every client's final weights are projected to norm <= B (unstated in the paper;
  9 is the median norm of non-private local models of the 784-64-10 MLP on
  Fashion-MNIST)"""
  prox_mu: float = 0.01
  """FedProx mu of the local objective (eq. 4); 0 = FedAvg"""
  local_steps: int = 10
  """tau local steps per round"""
  batch_size: Optional[int] = None
  """local minibatch size (default: the full local dataset)"""
  client_learning_rate: Annotated[float, tyro.conf.arg(aliases=("--client-lr",))] = 0.02
  """local learning rate"""
  mechanism: Literal["gaussian", "none"] = "gaussian"
  """gaussian (the paper's) or none (the non-private mode: no clipping, no noise)"""


class PhaseController(Controller):
  """The scenario's data phases with the per-round impact factors and noise levels, and
  the paper's per-round noise SDs and downlink noise multipliers in every record."""

  def schedule(self, start: int, stop: int):
    return schedule_hparams(self.alg.config, start, stop)

  def round_fields(self, record: Dict[str, Any]) -> Dict[str, Any]:
    c, t = self.alg.config, record["round"] - 1  # 0-based index of the 1-based round
    out = {"sigma_c": record["noise_stddev"], "sigma_s": record["server_noise_stddev"],
           "sigma_a": c["sigma_a"][t],                      # eqs. 8, 13, Theorem 1
           "epsilon_paper": c["epsilon"] if c["private"] else None}
    for suffix, conditional in (("", False), ("_conditional", True)):
      out["noise_multiplier_downlink" + suffix] = downlink_noise_multiplier(
          c, t, record["noise_stddev"], record["server_noise_stddev"],
          conditional=conditional)
    if self.alg.privacy is not None:
      out["noise_multiplier_conditional"] = record["noise_stddev"] / c["sensitivity_paper"]
    return out


class Padpfl(FederatedAlgorithm):
  """PADPFL (`padpfl`)."""
  name = "padpfl"
  description = ("PADPFL (Talaei and Izadi 2024): priority-based aggregation with client "
                 "and server noise")
  Options = PadpflOptions
  default_dataset = "fashion_mnist"
  function = staticmethod(padpfl)
  metric_labels = {f: (disclosure.PUBLIC, disclosure.ACCOUNTING) for f in (
      "sigma_c", "sigma_s", "sigma_a", "noise_multiplier_downlink",
      "noise_multiplier_downlink_conditional")}
  summary_labels = {
      **{f: (disclosure.PUBLIC, disclosure.ACCOUNTING) for f in (
          "epsilon_paper", "epsilon_rdp_uplink_conditional",
          "epsilon_rdp_uplink_all_uploads_conditional", "epsilon_rdp_downlink_conditional",
          "z_uplink_conditional", "epsilon_rdp_downlink", "epsilon_conditional_rdp",
          "epsilon_guarantee_note", "epsilon_paper_mechanism", "epsilon_rdp_note",
          "sigma_c", "sigma_s", "sigma_a")},
      **{f: (disclosure.PUBLIC, "configuration: no client data") for f in (
          "sensitivity_mode", "scenario", "impact_factors_spec", "part_of_client",
          "impact_factors_per_part", "clip_bound", "exposures")},
      # Replace-one of a record keeps every client's size: sizes are the same in both
      # neighbouring datasets, so what depends only on them is not protected (public).
      "sensitivity": (disclosure.PUBLIC, "the sensitivity the code enforces (2B or the "
                      "clipped-gradient bound, with the smallest client size: identical "
                      "in replace-one neighbours)"),
      "sensitivity_paper": (disclosure.PUBLIC, "2B / min client size: identical in "
                            "replace-one neighbours"),
  }

  def audit_targets(self):
    from fedjax_dp.algorithms.padpfl import audit
    return audit.targets()

  def tiny_run_options(self):
    return dict(dataset="mnist", rounds=2, eval_every=2, epsilon=20.0, delta=0.01,
                allow_large_delta=True, clip_bound=5.0, hidden="8", local_steps=1)

  def test_config(self, model, federated_data) -> SmokeConfig:
    # Every client, equal impact factors, a large epsilon.
    return SmokeConfig(dict(impact_factors=impact.uniform(federated_data.num_clients),
                            epsilon=200.0, rounds=12, clip_bound=10.0, local_steps=4,
                            learning_rate=0.3, batch_size=5), check=_smoke_check)

  def validate(self, options, run) -> None:
    check_choices(options)
    options.validate_sensitivity()
    check_epsilon(options.epsilon)
    check_int("exposures", options.exposures, minimum=1)
    if options.exposures > run.rounds:
      raise FedJaxDpError(f"exposures (R) must be <= rounds (T) = {run.rounds}, got "
                          f"{options.exposures}.", option="exposures")
    check_positive("clip_bound", options.clip_bound)
    check_non_negative("prox_mu", options.prox_mu)
    check_int("local_steps", options.local_steps, minimum=1)
    check_positive("client_learning_rate", options.client_learning_rate)
    if options.batch_size is not None:
      check_int("batch_size", options.batch_size, minimum=1)
    spec = options.impact_factors
    if not (isinstance(spec, str) and spec.strip().lower() == "personalized"):
      try:
        impact.check_spec(spec)
      except FedJaxDpError as e:
        raise FedJaxDpError(str(e), option="impact_factors") from e

  def prepare(self, options, run, data) -> Prepared:
    """The scenario's 60 clients replace the dataset's partition (random parts,
    Dirichlet(1) label skew with exact client sizes, salt-and-pepper noise per part;
    the test set stays clean). A subset dataset (the 5,000-image MNIST) gets the sizes
    scaled by 0.4 (our choice, which keeps the scenarios' proportions).

    Raises:
      FedJaxDpError: a dataset without images or too small for the scenario.
    """
    from fedjax_dp.algorithms.padpfl import scenarios
    if len(data.feature_shape) not in (2, 3):
      raise FedJaxDpError(f"padpfl scenarios need an image dataset (fashion_mnist, "
                          f"mnist), got {data.name!r} with features {data.feature_shape}.",
                          option="dataset")
    x, y = data.x[data.example_mask], data.y[data.example_mask]
    sc = scenarios.build_scenario(
        options.scenario, x, y, seed=run.partition_seed,
        size_scale=0.4 if data.is_subset else 1.0,
        num_classes=data.num_classes, test_x=data.test_x, test_y=data.test_y,
        name=f"{data.name} (PADPFL scenario {options.scenario})", source=data.source,
        is_subset=data.is_subset)
    phases = [(ph.start_round, dataclasses.replace(sc.fd, x=ph.x)) for ph in sc.phases]
    return Prepared(sc.fd, phases, {"part_of_client": sc.part_of_client})

  def model_spec(self, options, run) -> ModelSpec:
    return ModelSpec("mlp", {"hidden": (64,)})

  def impact_factor_schedule(self, options, run, data, part_of_client) -> np.ndarray:
    """p (``[N]``) or the schedule p^(t) (``[T, N]``) named by ``impact_factors``:
    "personalized" is the scenario's own assignment of the paper's private-mode figure
    (scenario 4: 0-1-2, then 2-1-0 after round 10)."""
    from fedjax_dp.algorithms.padpfl import scenarios
    parts = np.asarray(part_of_client)
    spec = options.impact_factors.strip().lower()
    if spec == "personalized":
      sc = scenarios.SCENARIOS[options.scenario]
      phases = [(start, r) for start, r in sc.impact_phases if start <= run.rounds]
      if len(phases) == 1:
        return impact.from_part_ratios(phases[0][1], parts)
      return impact.piecewise_schedule(
          [(start, impact.from_part_ratios(r, parts)) for start, r in phases], run.rounds)
    try:
      return impact.from_spec(spec, parts, run.rounds, counts=data.counts)
    except FedJaxDpError as e:
      raise FedJaxDpError(str(e), option="impact_factors") from e

  def build(self, setup):
    o, run = setup.options, setup.run
    p = self.impact_factor_schedule(o, run, setup.data, setup.extras["part_of_client"])
    return padpfl(
        setup.model, setup.data, impact_factors=p, epsilon=o.epsilon, delta=run.delta,
        rounds=run.rounds, exposures=o.exposures, clip_bound=o.clip_bound,
        learning_rate=o.client_learning_rate, local_steps=o.local_steps,
        batch_size=o.batch_size, prox_mu=o.prox_mu, private=o.mechanism != "none",
        sensitivity_mode=o.sensitivity_mode, grad_clip_norm=o.grad_clip_norm,
        chunk_size=run.chunk_size, mesh=setup.mesh)

  def controller(self, alg, setup, eval_every: int) -> Controller:
    return PhaseController(alg, eval_every, setup.phases)

  def summary_fields(self, alg, setup, controller, records) -> Dict[str, Any]:
    c, o = alg.config, setup.options
    out = dict(nominal_and_accountant_epsilons(c))
    if alg.privacy is not None and records:  # private: the broadcasts made, via a ledger
      down = PrivacyLedger(c["delta"], **alg.privacy.ledger_kwargs())
      down.record(PrivacyReport([r["noise_multiplier_downlink"] for r in records], 1.0, 1))
      out["epsilon_rdp_downlink"] = down.epsilon()
      out.update(conditional_epsilon(alg, records, c["delta"]))
    parts = setup.extras["part_of_client"]
    out.update(
        epsilon_paper_mechanism=("classical Gaussian mechanism per iteration, noise scaled "
                                 "linearly by R (uplink) and T (downlink)"),
        epsilon_rdp_note=("epsilon_rdp (the ledger, the guarantee) composes every round's "
                          "upload, i.e. all T uploads seen, with the sensitivity the code "
                          "enforces (summary 'sensitivity'); epsilon_rdp_downlink composes "
                          "the broadcasts made, z = the noise SD in the broadcast model over "
                          "max p times that sensitivity (eq. 10), per round from "
                          "metrics.jsonl. The *_conditional epsilons use the sensitivity "
                          "eqs. (8) and (13) were calibrated with (paper mode: 2B/m_min, "
                          "which unclipped local training does not guarantee); "
                          "epsilon_rdp_uplink_conditional assumes R uploads seen (the "
                          "paper's threat model)"),
        sensitivity=c["sensitivity"], sensitivity_paper=c["sensitivity_paper"],
        sensitivity_mode=c["sensitivity_mode"],
        scenario=o.scenario, impact_factors_spec=o.impact_factors,
        part_of_client=[int(v) for v in parts],
        impact_factors_per_part=_per_part(c["impact_factors"], parts),
        sigma_c=c["sigma_c"], sigma_s=c["sigma_s"], sigma_a=c["sigma_a"],
        clip_bound=c["clip_bound"], exposures=c["exposures"])
    return out

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    s = summary
    if s.get("epsilon_rdp_downlink") is None:
      return []
    big = lambda v: f"{v:.3f}" if v < 1e4 else f"{v:.4g}"
    return [f"the paper's own accounting: epsilon {s['epsilon_paper']:g} per its "
            f"classical Gaussian calibration; the accountant (RDP) on the noise added, "
            f"with the paper's sensitivity: uplink {s['epsilon_rdp_uplink_conditional']:.3f}"
            f" over R = {s['exposures']} upload(s), "
            f"{s['epsilon_rdp_uplink_all_uploads_conditional']:.3f} over all uploads, "
            f"downlink {s['epsilon_rdp_downlink_conditional']:.3f}; provable downlink "
            f"{big(s['epsilon_rdp_downlink'])}; sigma_C {s['sigma_c'][0]:.4g}, sigma_S "
            f"{s['sigma_s'][-1]:.4g}, sigma_A {s['sigma_a'][-1]:.4g} (last round)"]


def _per_part(p_schedule, part_of_client) -> List[List[float]]:
  """Each round's impact factor of one client of every part, ``[T][parts]``."""
  p = np.asarray(p_schedule)
  parts = np.asarray(part_of_client)
  first = [int(np.flatnonzero(parts == k)[0]) for k in range(int(parts.max()) + 1)]
  return p[:, first].tolist()


def _smoke_check(alg, records, data) -> None:
  """`SmokeConfig.check`: record level, every client every round (no sampling); each
  round's sigma_C on the uploads and sigma_S > 0 on top are the configured ones."""
  assert alg.privacy.unit == "record-level", alg.privacy.unit
  for r, sc, ss in zip(records, alg.config["sigma_c"], alg.config["sigma_s"]):
    assert r["num_clients"] == data.num_clients and r["sampling_rate"] == 1.0, r
    np.testing.assert_allclose(r["noise_stddev"], sc, rtol=1e-5)
    np.testing.assert_allclose(r["server_noise_stddev"], ss, rtol=1e-5)
    assert ss > 0, ss
