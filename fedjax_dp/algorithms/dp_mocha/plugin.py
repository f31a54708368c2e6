"""DP-MOCHA (Hu et al. 2020) in ``fedjax-dp run``: its options, the binary per-device task
on unit-norm rows, personalised per-device evaluation, the paper's calibration
(Theorem 5) and its epsilon beside the per-device ledgers'."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Literal, Optional, Tuple, get_args

import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.dp_mocha import paper_calibration
from fedjax_dp.privacy import device_ledger
from fedjax_dp.algorithms.dp_mocha.algorithm import dp_mocha
from fedjax_dp.algorithms.dp_mocha import objective
from fedjax_dp.algorithms.dp_mocha.mechanism import S2Mode
from fedjax_dp.algorithms.interface import (FederatedAlgorithm, ModelSpec, Prepared,
                                            SmokeConfig, check_choices)
from fedjax_dp.data.federated_data import FederatedData
from fedjax_dp.federated.driver import DeviceEvaluator
from fedjax_dp.privacy import disclosure
from fedjax_dp.validation import (FedJaxDpError, check_delta, check_epsilon, check_int,
                                  check_positive, check_probability)

__all__ = ["Calibration", "Mechanism", "CalibrationRounds", "CALIBRATIONS", "MECHANISMS",
           "CALIBRATION_ROUNDS", "DpMochaOptions", "DpMocha", "accountant_sigma1",
           "inner_rounds", "outer_iterations"]

#: The choices of `DpMochaOptions`' fields of these types (the tuples: their values).
Calibration = Literal["paper", "accountant"]
Mechanism = Literal["gaussian", "none"]
CalibrationRounds = Literal["total", "per_outer"]
CALIBRATIONS: Tuple[str, ...] = get_args(Calibration)
MECHANISMS: Tuple[str, ...] = get_args(Mechanism)
CALIBRATION_ROUNDS: Tuple[str, ...] = get_args(CalibrationRounds)


@dataclasses.dataclass
class DpMochaOptions:
  """DP-MOCHA (Hu et al. 2020): federated multi-task SVMs (MOCHA) with Gaussian noise
  on the devices' dual steps and uploads."""
  epsilon: float = 8.0
  """the paper's target epsilon per device (Figs. 2-4: 8); sigma1, sigma2 are calibrated
  to it by --calibration (the run's delta is the paper's delta, default 1e-3)"""
  calibration: Calibration = "paper"
  """paper (Theorem 5 with our choice of Theorem 5's constants: sampling rate q and active
  probability p) or accountant (RDP of the releases with the paper's sensitivities s1,
  s2, no amplification, bisection on sigma)"""
  calibration_rounds: CalibrationRounds = "total"
  """the K of Theorem 5: total (every global round, H K) or per_outer (K)"""
  budget_ratio: float = 1.0
  """r = eps2 / eps1, the split between the dual step's and the upload's budgets"""
  lam: float = 0.001
  """lambda of eq. (1), sum-of-losses normalisation (the paper picks it by 5-fold CV;
  0.001 is the best of {1e-3, ..., 100} by 5-fold CV of non-private MOCHA on the rebuilt
  HAR features, experiments/dp_mocha/cv_lambda.py)"""
  xi: float = 0.5
  """aggregation parameter xi in (0, 1] (not given; 0.5 maximises (1 - xi) xi)"""
  outer_rounds: int = 10
  """H: Omega is updated every K = ceil(--rounds / H) global rounds (the paper: H = 10,
  K = 2000, i.e. --rounds 20000); when H does not divide --rounds the last outer
  iteration is shorter, and there are ceil(--rounds / K) of them"""
  tau: float = 0.0
  """device variability: local steps ~ U[(1 - tau) n_min, n_min]"""
  drop_probability: float = 0.0
  """P(theta = 1): each device drops each round with this probability"""
  s2_mode: S2Mode = "noisy_l2"
  """the upload's sensitivity: noisy_l2 (2 xi ||dalpha~||, the paper read literally),
  const (2 xi on dalpha~ clamped to [-1, 1]) or clean_l2 (2 xi ||dalpha||, NOT DP:
  test-only)"""
  resync: bool = True
  """W = Omega~ u / (2 lambda) after each Omega update (our addition; off: Algorithm 1 as
  printed)"""
  update_omega: bool = True
  """learn Omega (off: Omega = I / m, independent local SVMs)"""
  mechanism: Mechanism = "gaussian"
  """gaussian (private) or none (the paper's non-private baseline: no noise)"""
  positive_class: int = 3
  """the class that is +1 (HAR: 3 = SITTING, the paper's sitting-vs-rest task)"""


class DpMocha(FederatedAlgorithm):
  """DP-MOCHA (Hu et al. 2020; `fedjax_dp.algorithms.dp_mocha.algorithm.dp_mocha`)."""
  name = "dp_mocha"
  description = ("DP-MOCHA (Hu et al. 2020): personalised federated multi-task SVMs "
                 "(MOCHA) with DP uploads, stragglers and dropped devices")
  Options = DpMochaOptions
  default_dataset = "har_features"
  function = staticmethod(dp_mocha)
  metric_labels = {
      "primal": (disclosure.DIAGNOSTIC, "P(W, Omega), eq. 1, on raw training data"),
      "dual": (disclosure.DIAGNOSTIC, "D(alpha), eq. 5, of the noise-free duals"),
      "duality_gap": (disclosure.DIAGNOSTIC, "P(W(alpha)) + D(alpha), raw training data"),
      "primal_of_dual": (disclosure.DIAGNOSTIC, "P(W(alpha)), raw training data"),
      "devices_active": (disclosure.PUBLIC, "the server sees who uploads"),
      "device_active": (disclosure.PUBLIC, "the server sees who uploads"),
      "mean_local_steps": (disclosure.PUBLIC, "drawn independently of the data"),
      "device_local_steps": (disclosure.PUBLIC, "drawn independently of the data"),
      "dual_noise_std": (disclosure.PUBLIC, "s1 sigma1, from public quantities"),
      "primal_noise_std": (disclosure.DIAGNOSTIC, "s2 sigma2 depends on ||dalpha||"),
      "omega_trace": (disclosure.DP, "post-processing of the uploads"),
      "device_dual_noise_multiplier": (disclosure.PUBLIC, "std over the provable "
                                       "sensitivity, from public quantities"),
      "device_primal_noise_multiplier": (disclosure.PUBLIC, "sigma2 (or 0: clean_l2)"),
      "test_error": (disclosure.DIAGNOSTIC, "every device's model on its own held-out "
                     "data"),
  }
  from_test_metrics = ("test_error",)
  summary_labels = {
      **{f: (disclosure.PUBLIC, "configuration and notes: no client data") for f in (
          "evaluation", "mechanism", "s2_mode", "features_note", "calibration",
          "inner_rounds", "outer_iterations",
          "calibration_rounds", "epsilon_target", "gaussian_condition_holds")},
      **{f: (disclosure.PUBLIC, disclosure.ACCOUNTING) for f in (
          "epsilon_paper", "epsilon_paper_per_device", "epsilon_paper_note",
          "epsilon_accountant_paper_sensitivity",
          "epsilon_accountant_paper_sensitivity_note", "epsilon_corollary4",
          "corollary4_conditions_hold", "sigma1", "sigma2")},
      "device_releases": (disclosure.PUBLIC, "the rounds each device uploaded in: the "
                          "server sees who uploads, and dropping is drawn independently "
                          "of the data"),
      "device_counts": (disclosure.PUBLIC, "each device's number of records: identical in "
                        "replace-one neighbours (the relation of the guarantee)"),
      "final_primal": (disclosure.DIAGNOSTIC, "P(W, Omega), eq. 1, on raw training data"),
      "final_duality_gap": (disclosure.DIAGNOSTIC, "on raw training data"),
      "final_test_error": (disclosure.DIAGNOSTIC, "every device's model on its own "
                           "held-out data"),
  }

  def audit_targets(self):
    from fedjax_dp.algorithms.dp_mocha import audit
    return audit.targets()

  def tiny_run_options(self):
    return dict(dataset="har", rounds=2, eval_every=2, outer_rounds=1, delta=1e-3)

  def test_config(self, model, federated_data) -> SmokeConfig:
    return SmokeConfig(learns=False, why=(
        "dp_mocha (DP-MOCHA) trains one model per device on a binary task and is "
        "evaluated per device: tests/algorithms/dp_mocha/test_dp_mocha_plugin.py "
        "checks that it learns"))

  def validate(self, options, run) -> None:
    check_choices(options)
    check_epsilon(options.epsilon)
    check_positive("budget_ratio", options.budget_ratio)
    check_positive("lam", options.lam)
    xi = check_positive("xi", options.xi)
    if xi > 1:
      raise FedJaxDpError(f"xi must be in (0, 1], got {xi}.", option="xi")
    check_int("outer_rounds", options.outer_rounds, minimum=1)  # any --rounds: K, below
    check_probability("tau", options.tau, allow_zero=True)
    p = float(options.drop_probability)
    if not 0.0 <= p < 1.0:
      raise FedJaxDpError(f"drop_probability must be in [0, 1), got {p}.",
                          option="drop_probability")
    check_int("positive_class", options.positive_class, minimum=0)
    if run.target_epsilon is not None:
      raise FedJaxDpError("dp_mocha calibrates its two noise multipliers to --epsilon (the "
                          "paper's per-device target) with --calibration; --target-epsilon "
                          "is not used by it.", option="target_epsilon")

  def prepare(self, options, run, data) -> Prepared:
    """The paper's task: label 1 for ``positive_class`` (sitting), 0 otherwise, every
    row scaled to unit L2 norm (Sec. VII-A "normalized locally by l2-normalization"),
    features flattened; per-device test split kept (required).

    Raises:
      FedJaxDpError: no per-client test split, or positive_class out of range.
    """
    if data.client_test_x is None:
      raise FedJaxDpError(f"dp_mocha evaluates every device on its own held-out data; "
                          f"dataset {data.name!r} has no per-client test split (use "
                          "har_features, or a partition with client_test_fraction).",
                          option="dataset")
    if options.positive_class >= data.num_classes:
      raise FedJaxDpError(f"positive_class must be < {data.num_classes} for {data.name}, "
                          f"got {options.positive_class}.", option="positive_class")

    def binary(x, y, counts):
      m, n = x.shape[:2]
      flat = np.asarray(x, np.float32).reshape(m, n, -1)
      norms = np.linalg.norm(flat, axis=-1, keepdims=True)
      flat = np.where(norms > 0, flat / np.maximum(norms, 1e-30), 0.0).astype(np.float32)
      mask = np.arange(n)[None, :] < np.asarray(counts)[:, None]
      lab = ((np.asarray(y) == options.positive_class) & mask).astype(np.int32)
      return flat * mask[..., None], lab

    x, y = binary(data.x, data.y, data.counts)
    cx, cy = binary(data.client_test_x, data.client_test_y, data.client_test_counts)
    tm = np.arange(cx.shape[1])[None, :] < np.asarray(data.client_test_counts)[:, None]
    out = FederatedData(
        name=data.name, x=x, y=y, counts=np.asarray(data.counts), num_classes=2,
        client_ids=data.client_ids, test_x=cx[tm], test_y=cy[tm], client_test_x=cx,
        client_test_y=cy, client_test_counts=np.asarray(data.client_test_counts),
        source=(f"{data.source}; binary task: class {options.positive_class} vs the rest, "
                "rows L2-normalised"), is_subset=data.is_subset, partition=data.partition)
    return Prepared(out)

  def model_spec(self, options, run) -> ModelSpec:
    return ModelSpec("linear")  # per-device linear SVMs live in the algorithm's state

  def noise_multipliers(self, options, run, counts) -> Dict[str, Any]:
    """Per-device sigma1, sigma2 by ``options.calibration`` for a run of ``run.rounds``
    rounds at ``run.delta`` (the experiments reuse it).

    Args:
      options: `DpMochaOptions`; run: the `RunConfig` (rounds, delta); counts: int ``[m]``
        the devices' training rows n_t.

    Returns:
      ``{"sigma1": float64 [m], "sigma2": [m], "q": [m] the paper's sampling rates
      (1 - tau / 2) n_min / n_t, "p": 1 - P, "k": the rounds calibrated for, "paper":
      [m] PaperSigmas of Theorem 5}``.
    """
    counts = np.asarray(counts, np.float64)
    n_min = counts.min()
    q = (1.0 - options.tau / 2.0) * n_min / counts
    p = 1.0 - options.drop_probability
    k = run.rounds if options.calibration_rounds == "total" else inner_rounds(
        run.rounds, options.outer_rounds)
    r = options.budget_ratio
    per = [paper_calibration.theorem5_sigmas(options.epsilon, run.delta, float(qt), p, k, r)
           for qt in q]
    if options.calibration == "paper":
      s1 = np.array([c.sigma1 for c in per])
      s2 = np.array([c.sigma2 for c in per])
    else:
      s1 = np.full(len(q), accountant_sigma1(options.epsilon, run.delta, k, r))
      s2 = s1 / r
    return {"sigma1": s1, "sigma2": s2, "q": q, "p": p, "k": k, "paper": per}

  def build(self, setup):
    o, run = setup.options, setup.run
    private = o.mechanism == "gaussian"
    cal = self.noise_multipliers(o, run, setup.data.counts) if private else None
    alg = dp_mocha(
        setup.model, setup.data, lam=o.lam, xi=o.xi,
        inner_rounds=inner_rounds(run.rounds, o.outer_rounds), s2_mode=o.s2_mode, resync=o.resync,
        update_omega=o.update_omega, tau=o.tau, drop_probability=o.drop_probability,
        sigma1=0.0 if cal is None else cal["sigma1"],
        sigma2=0.0 if cal is None else cal["sigma2"], private=private)
    if cal is not None:
      alg = dataclasses.replace(alg, config={
          **alg.config, "calibration": o.calibration, "epsilon_target": o.epsilon,
          "calibration_rounds": cal["k"], "sampling_rate_paper": cal["q"].tolist(),
          "active_probability_paper": cal["p"], "budget_ratio": o.budget_ratio,
          "gaussian_condition_holds": bool(all(c.gaussian_valid for c in cal["paper"]))})
    return alg

  def calibrates(self, options) -> bool:
    return False

  def evaluator(self, alg, setup) -> DeviceEvaluator:
    """Every device's own model on its own test split: the mean over devices of the
    mean hinge loss, of 1 - error, and of the 0/1 error (the paper's metric)."""
    d = setup.data
    x, labels, counts = d.client_test_x, d.client_test_y, d.client_test_counts
    # `prepare` gives every device its own test split
    assert x is not None and labels is not None and counts is not None, d.name
    m, n = x.shape[:2]
    mask = (np.arange(n)[None, :] < counts[:, None]).astype(np.float32)
    y = ((2.0 * labels - 1.0) * mask).astype(np.float32)
    data = (jnp.asarray(x.reshape(m, n, -1)), jnp.asarray(y), jnp.asarray(mask))

    def fn(params, data):
      x, y, mask = data
      err = objective.mean_device_error(params["w"], x, y, mask)
      return objective.mean_device_hinge(params["w"], x, y, mask), 1.0 - err, err

    return DeviceEvaluator(fn, data, ("loss", "accuracy", "error"))

  def summary_fields(self, alg, setup, controller, records) -> Dict[str, Any]:
    c, run = alg.config, setup.run
    out: Dict[str, Any] = {
        "evaluation": ("mean over devices of each device's 0/1 test error on its own "
                       "held-out data (MOCHA avg=1); test_accuracy = 1 - that"),
        "mechanism": setup.options.mechanism, "s2_mode": c["s2_mode"],
        "inner_rounds": int(c["inner_rounds"]),
        "outer_iterations": outer_iterations(run.rounds, setup.options.outer_rounds),
        "final_primal": _last(records, "primal"),
        "final_duality_gap": _last(records, "duality_gap"),
        "device_counts": np.asarray(setup.data.counts).astype(int).tolist(),
        "features_note": ("features rebuilt from the raw HAPT recordings by our "
                          "re-implementation of UCI HAR's pipeline, not UCI HAR's "
                          "published matrices" if setup.data.name == "har_features"
                          else f"dataset {setup.data.name}"),
    }
    if alg.privacy is None or not records:
      return out
    active = np.array([r["device_active"] for r in records], np.float64)
    releases = active.sum(axis=0)
    q = np.asarray(c["sampling_rate_paper"])
    p = c["active_probability_paper"]
    k = c["calibration_rounds"]
    s1, s2 = np.asarray(c["sigma1"]), np.asarray(c["sigma2"])
    r_ratio = c["budget_ratio"]
    eps_paper = [paper_calibration.theorem5_epsilon(float(a), run.delta, float(qt), p, k,
                                                    r_ratio) for a, qt in zip(s1, q)]
    rho_paper = releases * (1.0 / np.maximum(s1, 1e-30) ** 2 + 1.0 / np.maximum(s2, 1e-30)
                            ** 2)
    eps_acc_paper = [device_ledger.gaussian_epsilon(float(v), run.delta) for v in rho_paper]
    cor4 = [paper_calibration.corollary4_epsilon(float(a), float(b), float(qt), k,
                                                 run.delta) for a, b, qt in zip(s1, s2, q)]
    out.update(
        epsilon_paper=max(eps_paper), epsilon_paper_per_device=eps_paper,
        epsilon_paper_note=("the paper's Theorem 5 (our choice of its constants) at the "
                            "calibrated sigmas: it assumes SDCA's coordinate draws amplify "
                            "like sampling at q = n_iter / n_t, that dropping amplifies "
                            "by p, and Corollary 2's sensitivity s1"),
        epsilon_accountant_paper_sensitivity=max(eps_acc_paper),
        epsilon_accountant_paper_sensitivity_note=(
            "RDP of each device's releases with the paper's sensitivities s1, s2 (no "
            "amplification): what the noise would give if Corollary 2 bounded SDCA's "
            "steps; the run's epsilon uses the provable sensitivities instead"),
        epsilon_corollary4=max(x["epsilon"] for x in cor4),
        corollary4_conditions_hold=bool(all(x["conditions_hold"] for x in cor4)),
        gaussian_condition_holds=c["gaussian_condition_holds"],
        device_releases=releases.astype(int).tolist(),
        sigma1=s1.tolist(), sigma2=s2.tolist(), calibration=c["calibration"],
        calibration_rounds=k, epsilon_target=c["epsilon_target"])
    return out

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    s = summary
    lines = []
    err = s.get("final_test_error")
    if err is not None:
      where = ("rebuilt from raw recordings" if "har_features" in s["dataset"]
               else s["dataset"])
      lines.append(f"mean per-device test error {err:.4f} (features: {where})")
    if s.get("epsilon_paper") is not None:
      lines.append(f"the paper's own epsilon (Theorem 5): {s['epsilon_paper']:.3g}; "
                   f"with the paper's sensitivities and no amplification: "
                   f"{s['epsilon_accountant_paper_sensitivity']:.3g}; provable (the run's): "
                   f"{s['epsilon']:.3g}")
    return lines


def accountant_sigma1(epsilon: float, delta: float, rounds: int, r: float = 1.0) -> float:
  """sigma1 (sigma2 = sigma1 / r) such that ``rounds`` rounds of the two Gaussian
  releases with the paper's sensitivities spend ``epsilon`` at ``delta`` under the RDP
  accountant (no amplification): rho = rounds (1 + r^2) / sigma1^2, bisection on the
  exact Gaussian composition (`device_ledger.gaussian_epsilon`).

  Raises:
    FedJaxDpError: invalid epsilon, delta, rounds or r.
  """
  check_epsilon(epsilon)
  check_delta(delta)
  check_int("rounds", rounds, minimum=1)
  check_positive("r", r)
  lo, hi = 0.0, 1.0  # rho bracket
  while device_ledger.gaussian_epsilon(hi, delta) < epsilon:
    lo, hi = hi, hi * 2.0
  for _ in range(80):
    mid = 0.5 * (lo + hi)
    if device_ledger.gaussian_epsilon(mid, delta) <= epsilon:
      lo = mid
    else:
      hi = mid
  return math.sqrt(rounds * (1.0 + r * r) / lo)


def inner_rounds(rounds: int, outer_rounds: int) -> int:
  """K, the global rounds per outer iteration of a run of ``rounds`` rounds with
  H = ``outer_rounds``: ``ceil(rounds / H)``, so that any ``rounds`` runs. H divides
  ``rounds``: K = rounds / H and H outer iterations, as in the paper; otherwise the
  last outer iteration has ``rounds - (ceil(rounds / K) - 1) K`` rounds (fewer than K),
  and there are ``ceil(rounds / K)`` outer iterations (at most H; ``rounds`` when
  ``rounds < H``). Only when Omega is updated changes: every round is the same two
  releases per active device, accounted as they run."""
  return -(-int(rounds) // int(outer_rounds))


def outer_iterations(rounds: int, outer_rounds: int) -> int:
  """The outer iterations a run of ``rounds`` rounds with H = ``outer_rounds`` has
  (`inner_rounds`): ``ceil(rounds / K)``."""
  return -(-int(rounds) // inner_rounds(rounds, outer_rounds))


def _last(records, key) -> Optional[float]:
  vals = [r[key] for r in records if r.get(key) is not None and np.isfinite(r[key])]
  return float(vals[-1]) if vals else None
