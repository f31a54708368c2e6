"""RDP-PFL in ``fedjax-dp run``: its options, the paper's clients (built from an image
dataset), the target clients' personalised evaluation, and the paper's own epsilon and
budget split beside the accountant's.

What a run writes: metrics.jsonl's fields are labelled in
`RdpPfl.metric_labels` (the stages' losses, clip fractions and realised batch sizes are
diagnostics; the target clients' accuracies are post-processing of the model on data
outside the protected population) and every record carries the release groups its
epsilon is the maximum over (``release_groups``). In summary.json, what is computed from
the source clients' records without noise (their class sets, i.e. their records' label
sets, and the final meta training loss) is under ``diagnostics``, left out with
``--dp-metrics-only``; the data description states the configured sizes, not counted
ones."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Literal, Optional, Tuple, get_args

import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.interface import (Controller, FederatedAlgorithm, ModelSpec,
                                            Prepared, SmokeConfig, check_choices)
from fedjax_dp.algorithms.rdp_pfl import clients, paper_accounting
from fedjax_dp.algorithms.rdp_pfl.algorithm import Aggregation, rdp_pfl
from fedjax_dp.algorithms.rdp_pfl.meta import ClipMode
from fedjax_dp.algorithms.rdp_pfl.privacy import GroupedPrivacySpec
from fedjax_dp.federated.driver import POSITIVE, PROBABILITY, DeviceEvaluator
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.ledger_protocol import PrivacyReport
from fedjax_dp.validation import (FedJaxDpError, check_int, check_non_negative,
                                  check_positive, check_probability)

__all__ = ["RELEASES", "Mechanism", "MECHANISMS", "RdpPflOptions", "RdpPfl"]

RELEASES = ("query", "support")
Mechanism = Literal["gaussian", "clip_only", "none"]
MECHANISMS: Tuple[str, ...] = get_args(Mechanism)


@dataclasses.dataclass
class RdpPflOptions:
  """Wei et al. (IEEE TIFS 2023): federated MAML with a DP inner and a DP outer step."""
  noise_multiplier: Optional[float] = None
  """sigma, noise std over C in both stages (default: calibrated so that --rounds
  rounds spend --target-epsilon, 2 when not given, by the run's accountant)"""
  clip_norm: float = 2.4
  """C (the paper's Table II sweeps 0.8 .. 4.8; 2.4 had the lowest training loss)"""
  local_epochs: int = 1
  """tau0: local epochs per round, each one inner and one outer step (not stated in
  the paper; our default 1)"""
  inner_learning_rate: float = 0.01
  """eta: the inner step and the target clients' adaptation step (paper: 0.01 on
  MNIST, 0.05 on CIFAR-10)"""
  outer_learning_rate: float = 0.01
  """beta: the outer (meta) step"""
  query_sampling_rate: float = 0.1
  """q^Q: Poisson rate of the inner step's draw from the query set (not stated in the paper)"""
  support_sampling_rate: float = 0.1
  """q^S: Poisson rate of the outer step's draw from the support set"""
  clip_mode: ClipMode = "first_order"
  """first_order (default: per-example clipping in both stages, first-order MAML's
  outer step; Theorem 1's per-stage accounting holds exactly), paper (eqs. 6-11 as
  printed: batch clipping, factored sqrt(C) clipping, the query batch's Hessian;
  weaker guarantee than the paper states), per_example_hessian (the earlier
  default: the Hessian on each support example, not the paper's meta-gradient),
  dp_fedavg (two plain DP-SGD steps per epoch, no meta step: the DP-FedAvg baseline,
  personalised the same way), dp_fedavg_one_step (one DP-SGD step per epoch on the
  support set: DP-FedAvg at MAML's local work)"""
  mechanism: Mechanism = "gaussian"
  """gaussian (private), clip_only (sigma = 0: clipping bias alone) or none (no
  clipping, no noise: non-private federated MAML); the last two are baselines the
  paper lacks and report epsilon = inf"""
  clients: int = 50
  """clients in all (source + target)"""
  target_fraction: float = 0.4
  """share of target clients (never train; personalise and evaluate)"""
  classes_per_client: int = 3
  """classes per client (distinct class sets)"""
  samples_per_class: int = 200
  """training images per class per client (the paper's 200; the 5,000-image MNIST
  subset allows about 20)"""
  query_fraction: float = 0.5
  """share of a source client's images in its query set (the rest: support set)"""
  test_per_class: int = 100
  """test images per class per target client (from the test split)"""
  aggregation: Aggregation = "uniform"
  """uniform (default: every source client weighs 1/U, public weights, so the average
  is post-processing of the DP uploads) or data_size (the paper's eq. 3, p_i =
  |D_i^S| / |D^S| from the clients' record counts: adding or removing one record moves
  every weight, so no DP guarantee covers it; the noise is still added, but the run
  reports epsilon = inf and needs --noise-multiplier, no --target-epsilon). With equal
  client sizes, as in the paper's experiments, both are the same average"""
  micro_batch_size: Optional[int] = -1
  """rows per micro-batch of a Poisson draw (-1: half the expected batch; unset: the
  whole padded draw at once)"""
  per_example_method: Literal["auto", "ghost", "vmap"] = "auto"
  """per-example clipped gradients of the first-order terms"""
  power_iterations: int = 20
  """paper mode: power iterations estimating ||I - eta H_Q||_2 for eq. (9)'s c1 (not
  stated in the paper). The estimate is a lower bound; the product is
  clipped to C again whatever it is, so fewer iterations never weaken the guarantee"""


class RdpPfl(FederatedAlgorithm):
  """RDP-PFL (`fedjax_dp.algorithms.rdp_pfl.algorithm.rdp_pfl`)."""
  name = "rdp_pfl"
  description = ("RDP-PFL (Wei et al. 2023): federated MAML with DP inner and outer steps, "
                 "personalisation of target clients")
  Options = RdpPflOptions
  default_dataset = "fashion_mnist"
  noise_multiplier_option = "noise_multiplier"
  default_target_epsilon = 2.0
  function = staticmethod(rdp_pfl)
  metric_labels = {
      **disclosure.release_labels(RELEASES),
      "meta_train_loss": (disclosure.DIAGNOSTIC, "loss of the noisy adapted model on the "
                          "support draws (our reading of the paper's training loss); "
                          "computed from raw client data"),
      "query_train_loss": (disclosure.DIAGNOSTIC, "computed from raw client data"),
      "query_clip_fraction": (disclosure.DIAGNOSTIC, "computed from raw client data"),
      "support_clip_fraction": (disclosure.DIAGNOSTIC, "computed from raw client data"),
      "query_batch_size": (disclosure.DIAGNOSTIC, "realised Poisson draws"),
      "support_batch_size": (disclosure.DIAGNOSTIC, "realised Poisson draws"),
      "test_loss_no_adapt": (disclosure.DP, "the global model on the target clients' test "
                             "data (outside the protected population), no adaptation"),
      "test_accuracy_no_adapt": (disclosure.DP, "as test_loss_no_adapt"),
      "release_groups": (disclosure.PUBLIC, "accounting parameter (the releases one "
                         "record can influence, per role; epsilon is the largest "
                         "group's): no client data"),
  }
  summary_labels = {
      **{f: (disclosure.PUBLIC, disclosure.ACCOUNTING) for f in (
          "epsilon_paper", "epsilon_paper_alpha", "epsilon_paper_note",
          "budget_split_paper", "release_groups", "group_epsilons_rdp",
          "guarantee_groups", "guarantee_note")},
      **{f: (disclosure.PUBLIC, "configuration: no client data") for f in (
          "clip_mode", "mechanism", "aggregation", "evaluation")},
      "data_structure": (disclosure.PUBLIC, "the configured structure (clients, classes, "
                         "images per class, the query/support sizes it implies): no "
                         "client data"),
      "final_test_accuracy_no_adapt": (disclosure.DP, "the DP model on the target "
                                       "clients' test data (outside the protected "
                                       "population), no adaptation"),
      "diagnostics": (disclosure.DIAGNOSTIC, "computed from the source clients' raw data "
                      "without noise (their class sets, the meta training loss)"),
  }

  def audit_targets(self):
    from fedjax_dp.algorithms.rdp_pfl import audit
    return audit.targets()

  def schedule_bounds(self):
    """`RdpPflHParams`' own fields (its clip norm and noise multiplier are the
    engine's)."""
    return {"query_sampling_rate": PROBABILITY, "support_sampling_rate": PROBABILITY,
            "inner_learning_rate": POSITIVE, "outer_learning_rate": POSITIVE}

  def tiny_run_options(self):
    return dict(dataset="mnist", rounds=2, eval_every=2, clients=8, samples_per_class=10,
                test_per_class=5, hidden="8", local_epochs=1)

  def test_config(self, model, federated_data) -> SmokeConfig:
    # Small noise, every client's two DP steps per local epoch.
    return SmokeConfig(dict(noise_multiplier=0.05, clip_norm=5.0, inner_learning_rate=0.01,
                            outer_learning_rate=0.3, query_sampling_rate=0.5,
                            support_sampling_rate=0.5, local_epochs=2),
                       check=_smoke_check)

  def validate(self, options, run) -> None:
    check_choices(options)
    if options.noise_multiplier is not None:
      check_non_negative("noise_multiplier", options.noise_multiplier)
    check_positive("clip_norm", options.clip_norm)
    check_int("local_epochs", options.local_epochs, minimum=1)
    check_positive("inner_learning_rate", options.inner_learning_rate)
    check_positive("outer_learning_rate", options.outer_learning_rate)
    check_probability("query_sampling_rate", options.query_sampling_rate)
    check_probability("support_sampling_rate", options.support_sampling_rate)
    check_int("clients", options.clients, minimum=2)
    check_int("classes_per_client", options.classes_per_client, minimum=1)
    check_int("samples_per_class", options.samples_per_class, minimum=2)
    check_int("test_per_class", options.test_per_class, minimum=1)
    for name in ("target_fraction", "query_fraction"):
      v = check_probability(name, getattr(options, name))
      if v >= 1.0:
        raise FedJaxDpError(f"{name} must be in (0, 1), got {v}.", option=name)
    if options.mechanism != "gaussian" and options.noise_multiplier not in (None, 0.0):
      raise FedJaxDpError(f"noise_multiplier must be unset with mechanism="
                          f"{options.mechanism!r} (it adds no noise), got "
                          f"{options.noise_multiplier}.", option="noise_multiplier")
    if options.mechanism != "gaussian" and run.target_epsilon is not None:
      raise FedJaxDpError(f"target_epsilon needs mechanism='gaussian' (mechanism="
                          f"{options.mechanism!r} is not private).", option="target_epsilon")
    if options.aggregation == "data_size" and options.mechanism == "gaussian":
      if run.target_epsilon is not None:
        raise FedJaxDpError(
            "target_epsilon needs aggregation='uniform': aggregation='data_size' (the "
            "paper's eq. 3) weights by data size, which depends on the client's records, "
            "so no epsilon covers the run.", option="target_epsilon")
      if options.noise_multiplier is None:
        raise FedJaxDpError(
            "aggregation='data_size' (the paper's eq. 3, without a guarantee: its weights "
            "depend on the client's records) cannot be calibrated to an epsilon: give "
            "noise_multiplier, or use aggregation='uniform'.", option="noise_multiplier")

  def prepare(self, options, run, data) -> Prepared:
    """The paper's clients (`clients.make_meta_split`) replace the dataset's partition:
    the loaded dataset's training images are pooled and re-split; the target clients'
    test images come from its test split (or their own held-out images without one).

    Raises:
      FedJaxDpError: too few classes or images for the requested structure.
    """
    x, y = data.x[data.example_mask], data.y[data.example_mask]
    split = clients.make_meta_split(
        x, y, data.test_x, data.test_y, num_classes=data.num_classes,
        num_clients=options.clients, classes_per_client=options.classes_per_client,
        samples_per_class=options.samples_per_class,
        target_fraction=options.target_fraction, query_fraction=options.query_fraction,
        test_per_class=options.test_per_class, seed=run.partition_seed, name=data.name,
        source=data.source, is_subset=data.is_subset)
    return Prepared(split.source, None, {"split": split})

  def model_spec(self, options, run) -> ModelSpec:
    return ModelSpec("mlp", {"hidden": (200, 200)})  # 784-200-200-10 (widths: ours)

  def build(self, setup):
    o = setup.options
    noisy = o.mechanism == "gaussian"
    split = setup.extras.get("split")
    return rdp_pfl(
        setup.model, setup.data, local_epochs=o.local_epochs,
        query_fraction=o.query_fraction, inner_learning_rate=o.inner_learning_rate,
        outer_learning_rate=o.outer_learning_rate,
        clip_norm=float("inf") if o.mechanism == "none" else o.clip_norm,
        noise_multiplier=(o.noise_multiplier or 1.0) if noisy else 0.0,
        query_sampling_rate=o.query_sampling_rate,
        support_sampling_rate=o.support_sampling_rate, clip_mode=o.clip_mode,
        aggregation=o.aggregation, private=self.calibrates(o),
        micro_batch_size=o.micro_batch_size, per_example_method=o.per_example_method,
        power_iterations=o.power_iterations,
        chunk_size=setup.run.chunk_size, mesh=setup.mesh,
        query_rows=None if split is None else split.query_rows,
        nominal_sizes=None if split is None else split.nominal_sizes)

  def calibrates(self, options) -> bool:
    """Private (a `PrivacySpec`, an epsilon) only with noise and uniform weights."""
    return options.mechanism == "gaussian" and options.aggregation == "uniform"

  def controller(self, alg, setup, eval_every: int) -> Controller:
    return _GroupsController(alg, eval_every, setup.phases)

  def with_noise_multiplier(self, alg, z):
    return dataclasses.replace(alg, hparams=alg.hparams._replace(noise_multiplier=float(z)),
                               config={**alg.config, "noise_multiplier": float(z)})

  def evaluator(self, alg, setup) -> DeviceEvaluator:
    """The target clients' mean test loss and accuracy after one step of adaptation
    with eta (eq. 4), and without adaptation."""
    split = setup.extras["split"]
    model = setup.model
    eta = jnp.float32(alg.config["inner_learning_rate"])

    def fn(params, data):
      adapt, test = data
      return clients.personalised_metrics(model, params, adapt, test, eta)

    data = ((jnp.asarray(split.adapt_x), jnp.asarray(split.adapt_y),
             jnp.asarray(split.adapt_counts)),
            (jnp.asarray(split.test_x), jnp.asarray(split.test_y),
             jnp.asarray(split.test_counts)))
    return DeviceEvaluator(fn, data, ("loss", "accuracy", "loss_no_adapt",
                                      "accuracy_no_adapt"))

  def summary_fields(self, alg, setup, controller, records) -> Dict[str, Any]:
    c, run = alg.config, setup.run
    split = setup.extras["split"]
    out: Dict[str, Any] = {
        "data_structure": split.description,
        "evaluation": ("mean over target clients of the test accuracy after one plain "
                       "gradient step with eta on their own data (eq. 4); "
                       "*_no_adapt: the global model itself"),
        "final_test_accuracy_no_adapt": _last(records, "test_accuracy_no_adapt"),
        "clip_mode": c["clip_mode"], "mechanism": setup.options.mechanism,
        "aggregation": c["aggregation"],
    }
    if not run.dp_metrics_only:
      out["diagnostics"] = {
          "class_sets": split.class_sets.tolist(),
          "final_meta_train_loss": _last(records, "meta_train_loss"),
          "note": ("computed from the clients' raw data without noise (class_sets: each "
                   "client's label set, source clients first; final_meta_train_loss: the "
                   "paper's training loss on the support draws): simulation "
                   "diagnostics, not covered by epsilon; left out with "
                   "--dp-metrics-only")}
    if c["aggregation"] == "data_size" and setup.options.mechanism == "gaussian":
      out["guarantee_note"] = (
          "aggregation='data_size' (the paper's eq. 3): the noise is added, but the "
          "weights p_i = |D_i^S| / |D^S| depend on the clients' records (adding or "
          "removing one record moves every weight), so the average is not "
          "post-processing of the DP uploads: no (epsilon, delta) guarantee, epsilon "
          "inf. aggregation='uniform' has one.")
    spec = alg.privacy
    if spec is None or not records:
      return out
    assert isinstance(spec, GroupedPrivacySpec), spec  # `rdp_pfl`'s statement
    ledger = spec.make_ledger(run.delta)   # the run's, from its records
    ledger.record(PrivacyReport.from_records(records, spec.release_names))
    out.update(
        release_groups=[list(g) for g in ledger.groups],
        group_epsilons_rdp=list(ledger.group_epsilons(accountant="rdp")),
        guarantee_groups=(
            "each record is in its client's query set or its support set, for good, and "
            "influences only its role's releases (groups "
            + ", ".join("{" + ", ".join(g) + "}" for g in ledger.groups)
            + "): its guarantee is its group's releases composed, and epsilon is the "
            "largest group's (group_epsilons_rdp), not every release composed"))
    sigma, tau0 = c["noise_multiplier"], c["local_epochs"]
    rounds = len(records)
    # Theorem 1's epsilon and its split between the stages, from one computation.
    split_ = paper_accounting.budget_split(sigma, c["query_sampling_rate"],
                                           c["support_sampling_rate"], rounds, tau0,
                                           run.delta)
    out.update(
        epsilon_paper=split_["epsilon"], epsilon_paper_alpha=split_["alpha"],
        epsilon_paper_note=("the paper's Theorem 1: Opacus-style RDP of the two "
                            "Poisson-subsampled Gaussian stages at sensitivity 1, "
                            "composed over T tau0 epochs, converted with eq. (12) (Balle "
                            "et al. 2020) over the Opacus orders; it applies to "
                            "the per-example clip modes (every one but 'paper'), where it composes "
                            "both stages for every record though each record is in one "
                            "(so it is above this run's epsilon for the same sigma); for "
                            "'paper' the code's guarantee is epsilon_rdp, weaker"),
        budget_split_paper=split_)
    return out

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    s = summary
    lines = [s.get("data_structure", "")]
    acc = s.get("final_test_accuracy_no_adapt")
    if acc is not None:
      lines.append(f"target clients: accuracy {s['final_test_accuracy']:.4f} after one "
                   f"adaptation step, {acc:.4f} without")
    if s.get("epsilon_paper") is not None:
      share = s["budget_split_paper"]["inner_share"]
      lines.append(f"the paper's own accounting (Theorem 1): epsilon "
                   f"{s['epsilon_paper']:.3f} at alpha {s['epsilon_paper_alpha']:g}; "
                   f"inner stage's share of the RDP budget {share:.2f}")
    if s.get("group_epsilons_rdp"):
      lines.append("epsilon is the larger stage's (each record is in one stage): "
                   + ", ".join(f"{'+'.join(g)} {e:.3f}" for g, e in
                               zip(s["release_groups"], s["group_epsilons_rdp"])))
    if s.get("guarantee_note"):
      lines.append(s["guarantee_note"])
    return [line for line in lines if line]


class _GroupsController(Controller):
  """The default controller, adding the release groups to every private round's record
  (so that epsilon can be recomputed from metrics.jsonl alone)."""

  def round_fields(self, record: Dict[str, Any]) -> Dict[str, Any]:
    groups = self.alg.config.get("release_groups")
    return {} if groups is None else {"release_groups": groups}


def _last(records, key) -> Optional[float]:
  vals = [r[key] for r in records if r.get(key) is not None and np.isfinite(r[key])]
  return float(vals[-1]) if vals else None


def _smoke_check(alg, records, data) -> None:
  """`SmokeConfig.check`: record level, two releases per local epoch (query, support),
  each with the configured z = 0.05, q = 0.5 and noise std z C = 0.25."""
  assert alg.privacy.unit == "record-level", alg.privacy.unit
  assert alg.privacy.release_names == ("query", "support"), alg.privacy.release_names
  for r in records:
    assert r["dp_steps"] == 4 and r["num_clients"] == data.num_clients, r
    for stage in ("query", "support"):
      np.testing.assert_allclose(r[f"{stage}_noise_multiplier"], 0.05, rtol=1e-6)
      np.testing.assert_allclose(r[f"{stage}_sampling_rate"], 0.5, rtol=1e-6)
      assert r[f"{stage}_dp_steps"] == 2, r
      np.testing.assert_allclose(r[f"{stage}_noise_stddev"], 0.25, rtol=1e-6)
