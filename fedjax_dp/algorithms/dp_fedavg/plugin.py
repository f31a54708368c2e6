"""The `fedjax-dp run` plug-ins of DP-FedAvg, DP-FedSGD and record-level DP-FedAvg
(`fedjax_dp.algorithms.interface`): their typed options, the adaptive-clipping options
and defaults, per-client noise multipliers from a file, the summary fields and their
disclosure labels. The algorithms themselves are
`fedjax_dp.algorithms.dp_fedavg.algorithm`'s."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Dict, Literal, Optional, Union

import numpy as np

from fedjax_dp.algorithms import fedavg_family as family
from fedjax_dp.algorithms.base import Algorithm, PrivacySpec
from fedjax_dp.algorithms.canaries import CanaryPlan
from fedjax_dp.algorithms.dp_fedavg import distributed as distributed_lib, noise_cohort
from fedjax_dp.algorithms.dp_fedavg.algorithm import (adaptive_clipping_for,
                                                      check_adaptive_split, dp_fedavg,
                                                      dp_fedavg_record_level, dp_fedsgd)
from fedjax_dp.algorithms.interface import FederatedAlgorithm, SmokeConfig
from fedjax_dp.algorithms.interface import TINY_SYNTHETIC_RUN
from fedjax_dp.algorithms.options import FederatedOptions
from fedjax_dp.privacy import disclosure
from fedjax_dp.privacy.adaptive_clipping import AdaptiveClipping
from fedjax_dp.validation import (FedJaxDpError, check_non_negative, check_positive,
                                  check_probability)

__all__ = ["DpFedAvgOptions", "ADAPTIVE_OPTIONS", "ADAPTIVE_DEFAULTS",
           "DEFAULT_CLIP_UPDATE_RULE", "load_client_noise_multipliers", "DpFedAvg",
           "DpFedSgd", "user_level_check", "RecordLevelOptions", "DpFedAvgRecordLevel"]


@dataclasses.dataclass
class DpFedAvgOptions(FederatedOptions):
  """User-level DP: each client's update clipped to the clip norm C, Gaussian noise of
  std z C."""
  clip_norm: Union[float, Literal["adaptive"]] = 0.5
  """clip norm C: L2 bound of each client's update (parameter units), or adaptive: a
  clip norm that tracks the --target-quantile of the update norms, estimated privately
  (Andrew et al. 2021; the noise multiplier is then the combined release's)"""
  noise_multiplier: Optional[float] = None
  """noise multiplier z: noise std = z * C (default: 2.0; with --target-epsilon alone,
  z is calibrated so that --rounds rounds spend it)"""
  noise_placement: Literal["central", "local"] = "central"
  """central: one Gaussian draw on the aggregate; local: every sampled client noises its
  own clipped update (accounted under zero-out for Poisson cohorts)"""
  client_noise_multipliers: Optional[str] = None
  """with --noise-placement local: a .npy, .json or text file with one noise multiplier
  per client; every client is accounted with its own and summary.json reports the worst
  client's epsilon"""
  target_quantile: Optional[float] = None
  """with --clip-norm adaptive: gamma in (0, 1), the fraction of client updates left
  unclipped (default: 0.5, the median)"""
  clip_learning_rate: Optional[float] = None
  """with --clip-norm adaptive: eta_C > 0, the clip norm's learning rate (default: 0.05;
  the paper's 0.2 diverges on the default HAR job's 15-client cohorts)"""
  initial_clip_norm: Optional[float] = None
  """with --clip-norm adaptive: C_0 > 0, the clip norm of the first round (default: 0.1)"""
  clipped_count_stddev: Optional[float] = None
  """with --clip-norm adaptive: sigma_b, the noise std on the count of unclipped updates
  (default: expected cohort size / 20, the paper's, raised to 3 z_ev Delta_b where that
  is larger so that the noise can be split)"""
  clip_update_rule: Optional[Literal["geometric", "linear"]] = None
  """with --clip-norm adaptive: how the clip norm moves (default: geometric, the
  paper's)"""
  noise_cohort_size: Optional[int] = None
  """K' >= the expected cohort K: SIMULATION of a K'-client cohort's noise (central noise
  std (K/K') z C, pfl-research's noise_cohort_size); summary.json's epsilon stays this
  run's own, noise_cohort_simulation.deployment_epsilon is the K' deployment's"""
  participations_per_epoch: Optional[int] = None
  """with --sampler random_allocation: k, rounds per epoch of t = round(k/q) rounds each
  client takes part in (default 1)"""
  min_separation: Optional[int] = None
  """with --sampler cyclic_poisson: b, the number of client groups (round r serves group
  r mod b, each member joining with probability q*b)"""
  aggregation: Literal["central", "distributed_dgauss", "distributed_skellam"] = "central"
  """server-side noise, or each client's own integer noise under a secure sum; the
  distributed ones: discrete Gaussian or Skellam noise on each integer-encoded update,
  the server sees only the sum mod 2^bits and who took part (distributed DP: no
  amplification by sampling, RDP accounting)"""
  bits: Optional[int] = None
  """bits per coordinate of the secure sum, in [2, 32] (distributed aggregation; default
  16)"""
  dropout_rate: Optional[float] = None
  """probability that a sampled client drops out (distributed aggregation; default 0:
  a dropped client's noise is missing from the sum, and the round accounts for that)"""
  rounding_beta: Optional[float] = None
  """conditional rounding's beta in [0, 1) (distributed aggregation; default exp(-0.5),
  Kairouz et al. 2021)"""
  overflow_probability: Optional[float] = None
  """per-round probability that the secure sum wraps, in (0, 1) (distributed aggregation;
  the scale is chosen for it; default 1e-3)"""


#: The options of adaptive clipping (`DpFedAvgOptions`), refused without
#: ``--clip-norm adaptive``.
ADAPTIVE_OPTIONS = ("target_quantile", "clip_learning_rate", "initial_clip_norm",
                    "clipped_count_stddev", "clip_update_rule")
#: The paper's (Andrew et al. 2021, Sec. 4) except the clip norm's learning rate: with
#: 0.2 the default HAR job (15 clients a round) diverges (the noisy model's update norms
#: grow, the tracked median follows them: accuracy 0.28, clip norm 0.1 -> 3.7 in 50
#: rounds); 0.05 trains (0.795, 0.828, 0.788 over seeds 0-2; fixed clip 0.5: 0.820).
ADAPTIVE_DEFAULTS: Dict[str, float] = dict(target_quantile=0.5, clip_learning_rate=0.05,
                                           initial_clip_norm=0.1)
#: The clip norm's update rule when ``--clip-update-rule`` is not given (the paper's).
DEFAULT_CLIP_UPDATE_RULE = "geometric"


def load_client_noise_multipliers(path: str, num_clients: int) -> np.ndarray:
  """One noise multiplier per client from a ``.npy``, ``.json`` (a list) or text file
  (numbers separated by white space or commas), float32 ``[num_clients]``.

  Raises:
    FedJaxDpError: an unreadable file, or not ``num_clients`` finite values >= 0.
  """
  path = os.path.expanduser(path)
  try:
    if path.endswith(".npy"):
      z = np.load(path, allow_pickle=False)
    elif path.endswith(".json"):
      with open(path) as f:
        z = np.asarray(json.load(f), np.float64)
    else:
      with open(path) as f:
        z = np.asarray([float(v) for v in f.read().replace(",", " ").split()], np.float64)
  except (OSError, ValueError, TypeError) as e:
    raise FedJaxDpError(f"client_noise_multipliers {path!r} cannot be read as numbers: "
                        f"{e}.", option="client_noise_multipliers") from e
  z = np.asarray(z, np.float64).reshape(-1)
  if z.shape != (num_clients,) or not np.all(np.isfinite(z)) or np.any(z < 0):
    raise FedJaxDpError(f"client_noise_multipliers must hold {num_clients} finite values "
                        f">= 0 (one per client), got {z.size} values in {path!r}.",
                        option="client_noise_multipliers")
  return z.astype(np.float32)


class DpFedAvg(FederatedAlgorithm):
  """User-level DP-FedAvg (McMahan et al. 2018): `dp_fedavg`."""
  name = "dp_fedavg"
  description = "user-level DP-FedAvg (McMahan et al. 2018)"
  Options = DpFedAvgOptions
  noise_multiplier_option = "noise_multiplier"
  default_noise_multiplier = 2.0
  function = staticmethod(dp_fedavg)
  fedsgd = False
  canaries_refused = None  # `build` passes the run's canary plan on (`canary_kwargs`)
  metric_labels = {
      "adaptive_clip_norm": (disclosure.DP, "the round's adaptive clip norm C_t: "
                             "post-processing of the earlier rounds' noisy counts"),
      "unclipped_fraction_dp": (disclosure.DP, "the noisy fraction of unclipped updates "
                                "(the count release, covered by epsilon)"),
      "update_noise_multiplier": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      "count_noise_multiplier": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      **distributed_lib.METRIC_LABELS,
  }
  # The last round's values of the same fields (`summary_fields`).
  summary_labels = {
      "final_clip_norm": metric_labels["adaptive_clip_norm"],
      "final_unclipped_fraction_dp": metric_labels["unclipped_fraction_dp"],
      "update_noise_multiplier": metric_labels["update_noise_multiplier"],
      "count_noise_multiplier": metric_labels["count_noise_multiplier"],
      **distributed_lib.SUMMARY_LABELS,
      "noise_cohort_simulation": (disclosure.PUBLIC, "the simulated K'-client "
                                  "deployment's accounting: public configuration and "
                                  "the noise multipliers the rounds reported"),
  }

  def validate(self, options, run) -> None:
    clip = options.clip_norm
    adaptive = isinstance(clip, str)
    if adaptive and clip != "adaptive":
      raise FedJaxDpError(f"clip_norm must be a number > 0 or 'adaptive', got {clip!r}.",
                          option="clip_norm")
    options.validate_federated()
    if adaptive:
      if options.noise_placement != "central":
        raise FedJaxDpError("clip_norm='adaptive' needs noise_placement='central' (the "
                            "count of unclipped updates is one central release).",
                            option="noise_placement")
      if options.client_noise_multipliers is not None:
        raise FedJaxDpError("client_noise_multipliers cannot be combined with "
                            "clip_norm='adaptive' (one combined noise multiplier).",
                            option="client_noise_multipliers")
      a = {k: getattr(options, k) for k in ADAPTIVE_OPTIONS}
      AdaptiveClipping(  # checks every range, naming the option
          target_quantile=_or(a["target_quantile"], "target_quantile"),
          learning_rate=_or(a["clip_learning_rate"], "clip_learning_rate"),
          initial_clip_norm=_or(a["initial_clip_norm"], "initial_clip_norm"),
          count_stddev=1.0 if a["clipped_count_stddev"] is None
          else a["clipped_count_stddev"],
          update_rule=_rule_or(a["clip_update_rule"]))
    else:
      check_positive("clip_norm", clip)
      given = [k for k in ADAPTIVE_OPTIONS if getattr(options, k) is not None]
      if given:
        raise FedJaxDpError(f"{given[0]} is an option of adaptive clipping; give it with "
                            f"clip_norm='adaptive' (--clip-norm adaptive), got clip_norm="
                            f"{clip!r}.", option=given[0])
    if options.noise_multiplier is not None:
      check_non_negative("noise_multiplier", options.noise_multiplier)
    if options.noise_cohort_size is not None and (
        adaptive or options.noise_placement != "central" or options.sampler != "poisson"):
      raise FedJaxDpError("noise_cohort_size (a larger cohort's noise) needs Poisson "
                          "sampling, --noise-placement central and a numeric --clip-norm; "
                          f"got sampler={options.sampler!r}, noise_placement="
                          f"{options.noise_placement!r}, clip_norm={clip!r}.",
                          option="noise_cohort_size")
    _check_participation_options(options, adaptive)
    distributed_lib.check_options(options)
    path = options.client_noise_multipliers
    if path is not None:
      if options.noise_placement != "local":
        raise FedJaxDpError("client_noise_multipliers needs noise_placement='local' "
                            "(central noise is one draw for the whole cohort).",
                            option="client_noise_multipliers")
      if not os.path.isfile(os.path.expanduser(path)):
        raise FedJaxDpError(f"client_noise_multipliers must be a file with one noise "
                            f"multiplier per client, got {path!r} (not found).",
                            option="client_noise_multipliers")

  def audit_targets(self):
    from fedjax_dp.algorithms.dp_fedavg import audit
    return audit.targets()

  def tiny_run_options(self):
    return dict(TINY_SYNTHETIC_RUN, sampling_rate=0.5)

  def test_config(self, model, federated_data) -> SmokeConfig:
    return SmokeConfig(dict(clip_norm=1.0, noise_multiplier=0.1, clients_per_round=8,
                            batch_size=5, client_learning_rate=0.3),
                       check=user_level_check(0.1))

  def build(self, setup) -> Algorithm:
    o = setup.options
    kw = dict(o.federated_kwargs(setup), **canary_kwargs(setup))
    if o.clip_norm == "adaptive":
      # Placeholder z 0 until the run sets it (`with_noise_multiplier` checks the split).
      return self.builder(setup.model, setup.data,
                          noise_multiplier=0.0 if o.noise_multiplier is None
                          else o.noise_multiplier, noise_placement=o.noise_placement,
                          fedsgd=self.fedsgd, adaptive_clipping=self._adaptive(setup, kw),
                          **kw, **self.builder_kwargs(o))
    if o.aggregation != "central":
      return self._build_distributed(setup, kw)
    z = 1.0 if o.noise_multiplier is None else o.noise_multiplier  # set by the run
    if o.client_noise_multipliers is not None:
      z = load_client_noise_multipliers(o.client_noise_multipliers,
                                        setup.data.num_clients)
    extra = ({} if o.noise_cohort_size is None
             else dict(noise_cohort_size=o.noise_cohort_size))
    extra.update(participations_per_epoch=o.participations_per_epoch,
                 min_separation=o.min_separation)
    return self.builder(setup.model, setup.data, clip_norm=o.clip_norm, noise_multiplier=z,
                        noise_placement=o.noise_placement, fedsgd=self.fedsgd, **kw,
                        **extra, **self.builder_kwargs(o))

  #: The functional builder `build` calls with DP-FedAvg's keyword arguments: an
  #: algorithm that composes its own stages with DP-FedAvg's privacy pipeline (e.g.
  #: DP-FedProx) subclasses this plug-in and sets its builder and `builder_kwargs`.
  builder = staticmethod(dp_fedavg)

  def builder_kwargs(self, options) -> dict:
    """The builder's own keyword arguments from ``options`` (its extra options).
    Default: none."""
    return {}

  def _build_distributed(self, setup, kw) -> Algorithm:
    """The distributed-DP round (`fedjax_dp.algorithms.dp_fedavg.distributed`). With
    ``--target-epsilon`` alone the granularity is planned at the z that calibration
    finds for that granularity (a fixed point: more noise needs a coarser grid, whose
    rounding inflates the sensitivity; `distributed.calibrate_with_plan`), so that the
    run's own calibration of this build keeps the planned overflow probability."""
    o, run = setup.options, setup.run
    dist = distributed_lib.options_to_spec(o)

    def build(z):
      return self.builder(setup.model, setup.data, clip_norm=o.clip_norm,
                          noise_multiplier=z, noise_placement="distributed",
                          distributed=dist, fedsgd=self.fedsgd, **kw,
                          **self.builder_kwargs(o))
    z, z0 = o.noise_multiplier, float(self.default_noise_multiplier or 1.0)
    if z is None and run is not None and run.target_epsilon is not None:
      z = distributed_lib.calibrate_with_plan(
          lambda z_: build(z_).privacy, z0, run.rounds, run.target_epsilon, run.delta,
          run.accountant, dist.bits)
    return build(z0 if z is None else z)

  def _adaptive(self, setup, kw) -> AdaptiveClipping:
    """The run's `AdaptiveClipping` (`adaptive_clipping_for`). The default count noise
    depends on the planned z: the option's, else (``--target-epsilon``) the z that
    calibration will find, computed here from fixed-clip DP-FedAvg's events (the same
    events: the accounting does not depend on the clip norm)."""
    o, run = setup.options, setup.run
    z = o.noise_multiplier
    if z is None and o.clipped_count_stddev is None:
      if run is not None and run.target_epsilon is not None:
        from fedjax_dp.privacy import calibration
        fixed = dp_fedavg(setup.model, setup.data, clip_norm=1.0, noise_multiplier=1.0,
                          fedsgd=self.fedsgd, **kw).privacy
        assert fixed is not None  # dp_fedavg always states its privacy
        z = calibration.calibrate(lambda z_: fixed.events_of_run(z_, run.rounds),
                                  run.target_epsilon, run.delta, run.accountant)
      else:
        z = self.default_noise_multiplier
    plan = kw.get("canaries")  # the sampler's population then holds the canaries
    return adaptive_clipping_for(
        setup.data if plan is None else plan.view(setup.data), 0.0 if z is None else z,
        sampling_rate=kw["sampling_rate"],
        clients_per_round=kw["clients_per_round"], sampler=kw["sampler"],
        target_quantile=_or(o.target_quantile, "target_quantile"),
        learning_rate=_or(o.clip_learning_rate, "clip_learning_rate"),
        initial_clip_norm=_or(o.initial_clip_norm, "initial_clip_norm"),
        count_stddev=o.clipped_count_stddev,
        update_rule=_rule_or(o.clip_update_rule))

  def with_noise_multiplier(self, alg: Algorithm, z) -> Algorithm:
    """``RoundHParams.noise_multiplier`` set to ``z``; with adaptive clipping the
    combined z is checked against the count's z_b first.

    Raises:
      FedJaxDpError: adaptive clipping and ``z * event_scale >= z_b`` (option
        noise_multiplier).
    """
    if alg.config.get("clip_norm") == "adaptive":
      spec = alg.privacy
      assert isinstance(spec, PrivacySpec), spec  # adaptive clipping: central, one z
      check_adaptive_split(float(z) * spec.event_scale,
                           alg.config["count_noise_multiplier"])
    return super().with_noise_multiplier(alg, z)

  def summary_fields(self, alg, setup, controller, records) -> dict:
    """With adaptive clipping: the last round's clip norm (``final_clip_norm``) and
    noisy unclipped fraction, and the two noise multipliers the combined z splits into.
    """
    if alg.config.get("noise_cohort_size") is not None:
      run = setup.run
      return noise_cohort.deployment_fields(alg.config, records, run.delta, run.accountant)
    if alg.config.get("aggregation", "central") != "central":
      return distributed_lib.summary_fields(records)
    if alg.config.get("clip_norm") != "adaptive" or not records:
      return {}
    last = records[-1]
    return {"final_clip_norm": last.get("adaptive_clip_norm"),
            "final_unclipped_fraction_dp": last.get("unclipped_fraction_dp"),
            "update_noise_multiplier": last.get("update_noise_multiplier"),
            "count_noise_multiplier": last.get("count_noise_multiplier")}

  def describe(self, summary) -> list:
    if summary.get("noise_cohort_simulation"):
      return noise_cohort.describe(summary)
    if summary.get("secure_aggregation"):
      return distributed_lib.describe(summary)
    if summary.get("final_clip_norm") is None:
      return []
    cfg = summary.get("algorithm_config") or {}
    return [f"adaptive clipping: clip norm {cfg.get('initial_clip_norm', float('nan')):g} "
            f"-> {summary['final_clip_norm']:.4g} in the last round (target quantile "
            f"{cfg.get('target_quantile', float('nan')):g}; noisy unclipped fraction "
            f"{summary['final_unclipped_fraction_dp']:.3f}); the combined noise "
            f"multiplier splits into {summary['update_noise_multiplier']:.4g} on the "
            f"update sum and {summary['count_noise_multiplier']:.4g} on the count"]


def canary_kwargs(setup) -> dict:
  """``{"canaries": CanaryPlan}`` for a run with ``--canaries K`` (K canaries over the
  setup's real clients, `fedjax_dp.algorithms.canaries`), else ``{}``."""
  run = setup.run
  k = getattr(run, "canaries", 0) if run is not None else 0
  if run is None or not k:
    return {}
  return {"canaries": CanaryPlan(k, setup.data.num_clients, seed=run.canary_seed)}


def _check_participation_options(options, adaptive: bool) -> None:
  """The structured-participation options fit the sampler
  (`fedjax_dp.algorithms.fedavg_family.cohort_sampler` checks the values).

  Raises:
    FedJaxDpError: --participations-per-epoch without random_allocation,
      --min-separation without cyclic_poisson (or missing with it), adaptive clipping or
      per-client noise multipliers with a structured sampler.
  """
  s = options.sampler
  if options.participations_per_epoch is not None and s != "random_allocation":
    raise FedJaxDpError("participations_per_epoch needs --sampler random_allocation, got "
                        f"sampler={s!r}.", option="participations_per_epoch")
  if (options.min_separation is not None) != (s == "cyclic_poisson"):
    raise FedJaxDpError("--sampler cyclic_poisson needs --min-separation b (and "
                        f"--min-separation needs that sampler); got sampler={s!r}, "
                        f"min_separation={options.min_separation!r}.",
                        option="min_separation")
  family.check_structured(s, adaptive, options.client_noise_multipliers is not None)


def _or(value: Optional[float], option: str) -> float:
  """A numeric adaptive-clipping option's value, or its default (`ADAPTIVE_DEFAULTS`)."""
  return ADAPTIVE_DEFAULTS[option] if value is None else value


def _rule_or(value: Optional[str]) -> str:
  """The ``clip_update_rule`` option's value, or its default
  (`DEFAULT_CLIP_UPDATE_RULE`)."""
  return DEFAULT_CLIP_UPDATE_RULE if value is None else value


class DpFedSgd(DpFedAvg):
  """User-level DP-FedSGD: one full-batch local gradient step (`dp_fedsgd`)."""
  name = "dp_fedsgd"
  description = "user-level DP-FedSGD: one full-batch gradient step per client"
  function = staticmethod(dp_fedsgd)
  fedsgd = True

  def audit_targets(self):
    """DP-FedAvg's: DP-FedSGD runs the same round (one full-batch local step)."""
    return DpFedAvg.audit_targets(self)

  def test_config(self, model, federated_data) -> SmokeConfig:
    # k_max = N so that the same compiled round also runs with q = 1.
    return SmokeConfig(dict(clip_norm=1.0, noise_multiplier=0.1, sampling_rate=0.5,
                            k_max=federated_data.num_clients, client_learning_rate=0.5),
                       check=user_level_check(0.1))


def user_level_check(noise_multiplier: float) -> Callable:
  """`SmokeConfig.check` of a user-level algorithm: what the ledger will compose is
  what the rounds did (one DP step a round, the configured noise multiplier, the
  round's sampling rate)."""
  def check(alg, records, data) -> None:
    assert alg.privacy.unit == "user-level", alg.privacy.unit
    for r in records:
      assert r["dp_steps"] == 1, r
      np.testing.assert_allclose(r["noise_multiplier"], noise_multiplier, rtol=1e-6)
      np.testing.assert_allclose(r["sampling_rate"], alg.hparams.sampling_rate, rtol=1e-6)
  return check


def _record_level_check(alg, records, data) -> None:
  """`SmokeConfig.check` of `DpFedAvgRecordLevel.test_config`: the round's local DP-SGD
  steps, z_r = 0.3, q_r = 0.5 (C_r = 1: noise std 0.3) are what it reports."""
  assert alg.privacy.unit == "record-level", alg.privacy.unit
  for r in records:
    assert r["dp_steps"] == alg.config["local_dp_steps"] == 4, r
    np.testing.assert_allclose(r["noise_multiplier"], 0.3, rtol=1e-6)
    np.testing.assert_allclose(r["sampling_rate"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(r["noise_stddev"], 0.3, rtol=1e-6)
    assert 0.0 <= r["example_clip_fraction"] <= 1.0, r


@dataclasses.dataclass
class RecordLevelOptions(FederatedOptions):
  """Record-level DP: local DP-SGD in every client (per-example clipping and noise)."""
  record_clip_norm: float = 0.5
  """C_r: L2 bound of each example's gradient"""
  record_noise_multiplier: Optional[float] = None
  """z_r: noise std z_r * C_r on each local step's gradient sum (default: 2.0; with
  --target-epsilon alone, z_r is calibrated)"""
  record_sampling_rate: Optional[float] = None
  """Poisson rate of examples per local DP-SGD step (default: batch size / mean client
  size)"""
  per_example_method: Literal["auto", "ghost", "vmap"] = "auto"
  """how per-example clipped gradients are computed: ghost norms + book-keeping (fast;
  auto picks it when every parameter sits in a row-wise flax layer) or vmap(grad)
  (any model); the same numbers either way"""


class DpFedAvgRecordLevel(FederatedAlgorithm):
  """Record-level DP-FedAvg: local DP-SGD (`dp_fedavg_record_level`)."""
  name = "dp_fedavg_record_level"
  canaries_refused = ("its privacy unit is one example, while a canary is a whole client "
                      "(user level)")
  description = "record-level DP: local DP-SGD in each client (Abadi et al. 2016)"
  Options = RecordLevelOptions
  noise_multiplier_option = "record_noise_multiplier"
  default_noise_multiplier = 2.0
  function = staticmethod(dp_fedavg_record_level)

  def audit_targets(self):
    from fedjax_dp.algorithms.dp_fedavg import audit
    return audit.record_level_targets()

  def tiny_run_options(self):
    return dict(TINY_SYNTHETIC_RUN, sampling_rate=0.5, local_steps=2)

  def test_config(self, model, federated_data) -> SmokeConfig:
    return SmokeConfig(dict(record_clip_norm=1.0, record_noise_multiplier=0.3,
                            clients_per_round=8, local_steps=4, record_sampling_rate=0.5,
                            client_learning_rate=0.3), check=_record_level_check)

  def validate(self, options, run) -> None:
    options.validate_federated()
    check_positive("record_clip_norm", options.record_clip_norm)
    if options.record_noise_multiplier is not None:
      check_non_negative("record_noise_multiplier", options.record_noise_multiplier)
    if options.record_sampling_rate is not None:
      check_probability("record_sampling_rate", options.record_sampling_rate)

  def build(self, setup) -> Algorithm:
    o = setup.options
    z = 1.0 if o.record_noise_multiplier is None else o.record_noise_multiplier
    return dp_fedavg_record_level(
        setup.model, setup.data, record_clip_norm=o.record_clip_norm,
        record_noise_multiplier=z, record_sampling_rate=o.record_sampling_rate,
        per_example_method=o.per_example_method, **o.federated_kwargs(setup))

  def with_noise_multiplier(self, alg: Algorithm, z) -> Algorithm:
    hp = alg.hparams
    return dataclasses.replace(
        alg, hparams=hp._replace(client=hp.client._replace(record_noise_multiplier=float(z))),
        config={**alg.config, "record_noise_multiplier": float(z)})
