"""LAPA in ``fedjax-dp run``: its options, the 15 devices (IID/non-IID
mixture with quantity skew) in two regions around the base station, the uplink, and the
run's guarantee (a privacy filter's bound on the artificial noise and the noisy label
histograms) beside the realised composition, the paper's channel-noise assumption and
the paper's basic-composition budget, each labelled as what it is."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Literal, Optional, Tuple, Union, get_args

import numpy as np

from fedjax_dp.algorithms.interface import (FederatedAlgorithm, ModelSpec, Prepared,
                                            SmokeConfig, check_choices)
from fedjax_dp.algorithms.lapa import allocators, channel
from fedjax_dp.algorithms.lapa import summary as lapa_summary
from fedjax_dp.algorithms.lapa.algorithm import lapa
from fedjax_dp.algorithms.lapa.privacy import (DEFAULT_LABEL_NOISE_MULTIPLIER, Clipping,
                                               FilterBudget, LabelStatistics)
from fedjax_dp.algorithms.lapa.round import Aggregator
from fedjax_dp.privacy import disclosure
from fedjax_dp.validation import (FedJaxDpError, check_epsilon, check_int,
                                  check_non_negative, check_positive, check_probability)

__all__ = ["Channel", "CHANNELS", "LapaOptions", "Lapa", "parse_powers"]

Channel = Literal["practical", "ideal"]
CHANNELS: Tuple[str, ...] = get_args(Channel)
_CHANNEL = "channel state and powers: no client data"
_NOISY = "from the noisy budgets (post-processing of the DP releases)"
_ACCT = "accounting of the noise added: no client data"


@dataclasses.dataclass
class LapaOptions:
  """Sun et al. (arXiv 2025): LAPA per-device adaptive budgets over a wireless uplink."""
  epsilon_total: float = 60.0
  """eps_T: each device's total budget under the paper's basic composition (the paper
  gives no value; Fig. 5 sweeps the initial noise level instead)"""
  allocator: allocators.Allocator = "lapa"
  """lapa (eqs. 10-16), uniform (Benchmark 3: eps_T / T every round), arb (Benchmark 4,
  our ARB-approx) or none (no artificial noise)"""
  aggregator: Aggregator = "wasserstein"
  """wasserstein (eqs. 20-21, Configuration 1), fedavg (Benchmark 1) or beda (FedAdp's
  angle weights, Benchmark 2)"""
  channel: Channel = "practical"
  """practical (decoded channel noise on every upload, eqs. 4-6) or ideal (none)"""
  ser_threshold: Optional[float] = None
  """schedule only devices whose symbol error rate is <= this (eq. 22 as an SER
  threshold) (default: every device)"""
  powers: str = "max"
  """transmit powers: max (P_max), half (P_max / 2), a comma list of watts, a JSON file
  holding a list of watts, or ddpg:PILOT/metrics.jsonl (DDPG on Theorem 1's bound with
  the artificial-noise schedule of that pilot lapa run, made with --no-switch)"""
  ddpg_episodes: int = 200
  """DDPG episodes of --powers ddpg:... (our default)"""
  ddpg_steps: int = 50
  """DDPG steps per episode"""
  p_max_dbm: float = 20.0
  """P_max (not stated in the paper; our default)"""
  noise_dbm: float = -110.0
  """sigma_z^2, the receiver noise power (not stated in the paper; our default)"""
  modulation: Literal["bpsk", "qpsk"] = "bpsk"
  """symbol mapping of the SER (not stated in the paper)"""
  switch: bool = True
  """the dynamic noise control (eq. 23, the paper's): no artificial noise once channel
  noise alone meets every scheduled device's next budget; the channel noise is no DP
  noise on a digital link, so from that round on the run has NO guarantee (epsilon inf):
  --no-switch keeps the artificial noise on"""
  label_statistics: LabelStatistics = "dp"
  """the Wasserstein weights' label statistics: dp (each device's label histogram
  released once with Gaussian noise, in the guarantee) or exact (the paper's; not
  covered: the run's epsilon is inf)"""
  label_noise_multiplier: float = DEFAULT_LABEL_NOISE_MULTIPLIER
  """z_h of the label-histogram release (noise SD sqrt(2) z_h per count: replace-one
  moves two counts by 1); its 1/z_h^2 = 0.25 is added to each device's rho"""
  filter_budget: Union[float, FilterBudget] = "uniform"
  """the privacy filter's budget on each device's sum of z^-2 over its uploads, fixed
  before training (the guarantee is its bound): uniform (what eps_T / T every round
  spends), cap (what any allocation within the paper's sum eps_i[t] <= eps_T can spend;
  never binds) or an epsilon (every device's guarantee at --delta)"""
  num_iid: int = 5
  """IID devices (placed first; the default composition 5 IID + 10 non-IID, one of the paper's)"""
  num_non_iid: int = 10
  """non-IID devices (two classes each)"""
  batch_size: int = 32
  """B: each device's minibatch per round (FedSGD: one gradient per round)"""
  learning_rate: float = 0.3
  """eta (eq. 3; unstated: tuned on no-DP FedAvg: 0.05, 0.2, 0.5 reach 22%, 51%,
  60% on Fashion-MNIST in 60 rounds; 0.3 keeps the DP runs stable)"""
  clip_norm: float = 1.0
  """C (eq. 17)"""
  clipping: Clipping = "per_example"
  """per_example (each example's gradient clipped to C, then the mean over B) or
  aggregate (eq. 17 on the minibatch mean, as the paper writes it)"""
  calibration_sensitivity: Literal["paper", "provable"] = "paper"
  """the Delta_s of sigma = c Delta_s / eps: paper (2C/|D_i|, eq. 18) or provable (what
  the clipping enforces: 2C/B per-example, 2C aggregate)"""
  split: Literal["mean", "sum", "equal"] = "mean"
  """eq. 16's device split: mean (the devices' budgets average eps[t]), sum (they add
  up to eps[t]) or equal (every device eps[t]: no personalisation; a control)"""
  round_budget: Literal["exp", "normalised", "flat"] = "exp"
  """eq. 12's round budget: exp (exp(-e) (eps_T - eps_c) / (T - t + 1)), normalised
  (exp(-e) over its running mean: spends the whole budget) or flat (no exp(-e) factor;
  a control)"""
  gompertz: Literal["increasing", "fedadp"] = "increasing"
  """eq. 15's map: increasing in the smoothed angle (the text) or FedAdp's decreasing one"""
  kp: float = 0.9
  """K_p of eq. 11"""
  ks: float = 0.1
  """K_s of eq. 11"""
  history_points: int = 5
  """m: history points sampled for the PID error (eq. 11)"""
  window: int = 10
  """W: the last W global gradients the history points are drawn from"""
  error_scale: Literal["direction", "first", "clip"] = "direction"
  """eq. 10's scalar E (our choice): direction (change of the global gradient's direction,
  scale-free), first (||dg|| / ||g~[1]||) or clip (||dg|| / C)"""
  alpha: float = 5.0
  """Gompertz decay factor of eq. 15"""
  arb_beta: float = 0.1
  """ARB-approx's step: next budget x (1 +- beta)"""
  min_share: float = 0.5
  """LAPA's floor: every scheduled device gets >= min_share x eps[t] (our clamp)"""
  ground_cost: Literal["index", "discrete"] = "index"
  """eq. 20's ground cost between labels: index (|a - b| on the label numbers, our
  default) or discrete (1{a != b}: W1 is the total variation, independent of how the
  labels are numbered)"""
  channel_seed: Optional[int] = None
  """seed of the device positions and Rayleigh channels (default: the run's seed)"""


class Lapa(FederatedAlgorithm):
  """LAPA (`fedjax_dp.algorithms.lapa.algorithm.lapa`)."""
  name = "lapa"
  description = ("LAPA (Sun et al. 2025): per-device adaptive privacy budgets over a "
                 "wireless uplink, Wasserstein aggregation and the noise switch-off")
  Options = LapaOptions
  default_dataset = "fashion_mnist"
  function = staticmethod(lapa)
  metric_labels = {
      "pid_error": (disclosure.DP, "from the stored noisy global gradients"),
      "epsilon_round": (disclosure.DP, "from the stored noisy global gradients"),
      "epsilon_devices": (disclosure.DP, "from the received noisy gradients"),
      "sigma_devices": (disclosure.DP, "c Delta_s / eps_i, from the noisy gradients"),
      "sigma_channel": (disclosure.PUBLIC, "channel state and powers"),
      "aggregation_weights": (disclosure.DP, "post-processing of the noisy label "
                              "histograms (Wasserstein), of the noisy uploads (BEDA) or "
                              "of the record counts, public under replace-one (FedAvg)"),
      "aggregation_weights_exact": (disclosure.DIAGNOSTIC, "from each device's exact label "
                                    "distribution (--label-statistics exact, the paper's); "
                                    "not covered by epsilon"),
      "label_distances": (disclosure.DP, "post-processing of the noisy label histograms "
                          "released in round 1"),
      "label_distances_exact": (disclosure.DIAGNOSTIC, "W1 of each device's exact label "
                                "distribution (--label-statistics exact, the paper's); not "
                                "covered by epsilon"),
      "device_uploaded": (disclosure.PUBLIC, "the BS sees who uploads"),
      "filter_capped": (disclosure.DP, "from the noisy budgets and the public filter "
                        "budget"),
      "switched": (disclosure.DP, "from the noisy budgets"),
      "switch_round": (disclosure.DP, "from the noisy budgets"),
      "switch_violations": (disclosure.DP, "from the noisy budgets"),
      "device_noise_multiplier": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      "device_noise_multiplier_conditional": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      "device_noise_multiplier_channel_assumption": (disclosure.PUBLIC,
                                                     disclosure.ACCOUNTING),
      "device_rho_budget": (disclosure.PUBLIC, disclosure.ACCOUNTING),
      "label_noise_multiplier": (disclosure.PUBLIC, disclosure.ACCOUNTING),
  }
  summary_labels = {
      **{f: (disclosure.PUBLIC, "configuration: no client data") for f in (
          "allocator", "aggregator", "channel", "partition", "label_statistics",
          "label_noise_multiplier", "filter_budget")},
      **{f: (disclosure.PUBLIC, _CHANNEL) for f in (
          "selected_devices", "snr_db", "ser", "powers_w", "channel_std")},
      "device_counts": (disclosure.PUBLIC, "each device's record count |D_i|: the same in "
                        "every replace-one neighbour (the paper's calibration uses it)"),
      "ddpg": (disclosure.DP, "DDPG on a pilot run's noise schedule and label weights "
               "(its DP releases) and the public channel"),
      "label_distances": (disclosure.DP, "post-processing of the noisy label histograms"),
      "label_weights": (disclosure.DP, "post-processing of the noisy label histograms"),
      "diagnostics": (disclosure.DIAGNOSTIC, "exact label statistics (--label-statistics "
                      "exact, the paper's): not covered by epsilon"),
      **{f: (disclosure.DP, _NOISY) for f in (
          "switch_round", "switch_violations", "epsilon_paper_per_device",
          "epsilon_paper", "classical_condition_holds")},
      **{f: (disclosure.PUBLIC, _ACCT) for f in (
          "delta_paper", "epsilon_paper_note", "guarantee_note", "privacy_filter",
          "epsilon_realised", "epsilon_realised_per_device", "epsilon_realised_note",
          "epsilon_conditional", "epsilon_conditional_per_device",
          "epsilon_conditional_note", "epsilon_with_channel_noise_assumption",
          "epsilon_with_channel_noise_assumption_per_device",
          "epsilon_with_channel_noise_assumption_note")},
  }

  def audit_targets(self):
    from fedjax_dp.algorithms.lapa import audit
    return audit.targets()

  def tiny_run_options(self):
    return dict(dataset="mnist", rounds=2, eval_every=2, model="mlp", hidden="8",
                delta=1e-5, num_iid=2, num_non_iid=2)

  def test_config(self, model, federated_data) -> SmokeConfig:
    # Every device every round, uniform budgets, a large eps_T.
    return SmokeConfig(dict(allocator=allocators.AllocatorConfig("uniform", 2000.0, 12),
                            batch_size=5, learning_rate=0.3, clip_norm=1.0),
                       check=_smoke_check)

  def validate(self, options, run) -> None:
    check_choices(options)
    check_epsilon(options.epsilon_total, "epsilon_total")
    if options.ser_threshold is not None:
      check_probability("ser_threshold", options.ser_threshold)
    check_int("num_iid", options.num_iid, minimum=0)
    check_int("num_non_iid", options.num_non_iid, minimum=0)
    if options.num_iid + options.num_non_iid < 1:
      raise FedJaxDpError("num_iid + num_non_iid must be >= 1 device.", option="num_iid")
    check_int("batch_size", options.batch_size, minimum=1)
    check_positive("learning_rate", options.learning_rate)
    check_positive("clip_norm", options.clip_norm)
    for name in ("kp", "ks", "arb_beta"):
      check_non_negative(name, getattr(options, name))
    check_positive("alpha", options.alpha)
    check_int("history_points", options.history_points, minimum=2)
    check_int("ddpg_episodes", options.ddpg_episodes, minimum=1)
    check_int("ddpg_steps", options.ddpg_steps, minimum=1)
    check_int("window", options.window, minimum=options.history_points)
    check_positive("label_noise_multiplier", options.label_noise_multiplier)
    if not isinstance(options.filter_budget, str):
      check_positive("filter_budget", options.filter_budget)
    for name in ("p_max_dbm", "noise_dbm"):
      if not math.isfinite(float(getattr(options, name))):
        raise FedJaxDpError(f"{name} must be finite.", option=name)
    if run.target_epsilon is not None:
      raise FedJaxDpError("lapa allocates its own budgets from --epsilon-total (the "
                          "paper's per-device total); --target-epsilon is not used by it "
                          "(--filter-budget EPSILON caps every device's guarantee).",
                          option="target_epsilon")
    parse_powers(options.powers, options.num_iid + options.num_non_iid,
                 channel.dbm_to_watts(options.p_max_dbm))

  def prepare(self, options, run, data) -> Prepared:
    """Our device mixture ([D]): ``num_iid`` IID devices, then
    ``num_non_iid`` devices with two classes each, log-normal sizes; the central test
    set is kept.

    Raises:
      FedJaxDpError: a dataset without a central test set or too small.
    """
    from fedjax_dp.algorithms.lapa import devices
    if data.test_x is None:
      raise FedJaxDpError(f"lapa evaluates on a central test set; {data.name!r} has none.",
                          option="dataset")
    x, y = data.x[data.example_mask], data.y[data.example_mask]
    fd = devices.mixture_federated_data(
        x, y, options.num_iid, options.num_non_iid, seed=run.partition_seed,
        num_classes=data.num_classes, test_x=data.test_x, test_y=data.test_y,
        name=data.name, source=data.source, is_subset=data.is_subset)
    return Prepared(fd)

  def model_spec(self, options, run) -> ModelSpec:
    return ModelSpec("cnn_fc50")

  def uplink(self, options, run, num_devices: int, dim: int,
             powers: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """The run's wireless uplink (our geometry and constants, [D]): device
    positions and Rayleigh channels fixed by ``channel_seed``, the powers, SNR (eq. 6),
    SER, the scheduled devices (eq. 22) and the decoded channel-noise SD per coordinate
    in gradient units (kappa = C / sqrt(d); zeros on the ideal channel).

    Returns:
      ``{"uplink": channel.Uplink, "powers_w", "snr", "ser", "selected",
      "channel_std", "kappa"}`` (numpy ``[N]`` arrays).
    """
    n1 = int(round(num_devices * 7 / 15))
    cfg = channel.ChannelConfig(p_max_dbm=options.p_max_dbm, noise_dbm=options.noise_dbm,
                                modulation=options.modulation,
                                devices_per_region=(n1, num_devices - n1))
    seed = run.seed if options.channel_seed is None else options.channel_seed
    up = channel.make_uplink(cfg, seed)
    p_max = channel.dbm_to_watts(options.p_max_dbm)
    if powers is None:
      powers = parse_powers(options.powers, num_devices, p_max)
    noise_w = channel.dbm_to_watts(options.noise_dbm)
    snr = np.asarray(channel.snr(powers, up.gains, noise_w), np.float64)
    ser = np.asarray(channel.symbol_error_rate(snr, options.modulation), np.float64)
    selected = np.asarray(channel.select_devices(ser, options.ser_threshold), bool)
    kappa = channel.symbol_scale(options.clip_norm, dim)
    std = (np.asarray(channel.decoded_noise_std(snr, kappa), np.float64)
           if options.channel == "practical" else np.zeros(num_devices))
    return {"uplink": up, "powers_w": powers, "snr": snr, "ser": ser,
            "selected": selected, "channel_std": std, "kappa": kappa}

  def build(self, setup):
    import jax
    from jax.flatten_util import ravel_pytree
    o, run = setup.options, setup.run
    n = setup.data.num_clients
    dim = int(ravel_pytree(setup.model.init(jax.random.PRNGKey(0)))[0].shape[0])
    link = self.uplink(o, run, n, dim)
    acfg = allocators.AllocatorConfig(
        kind=o.allocator, epsilon_total=float(o.epsilon_total), rounds=int(run.rounds),
        kp=float(o.kp), ks=float(o.ks), history_points=int(o.history_points),
        window=int(o.window), error_scale=1.0 if o.error_scale != "clip" else
        float(o.clip_norm), alpha=float(o.alpha),
        gompertz=o.gompertz, split=o.split, arb_beta=float(o.arb_beta),
        min_share=float(o.min_share), budget=o.round_budget)
    alg = lapa(setup.model, setup.data, allocator=acfg, aggregator=o.aggregator,
               clipping=o.clipping, batch_size=o.batch_size,
               learning_rate=o.learning_rate, clip_norm=o.clip_norm, delta=run.delta,
               channel_std=link["channel_std"], selected=link["selected"],
               calibration_sensitivity=o.calibration_sensitivity, switch=o.switch,
               error_scale=o.error_scale, label_statistics=o.label_statistics,
               label_noise_multiplier=o.label_noise_multiplier,
               filter_budget=o.filter_budget, ground_cost=o.ground_cost)
    from fedjax_dp.federated import sharding
    init = alg.init
    alg = dataclasses.replace(  # placed on the mesh like the population: one compilation
        alg, init=lambda key: sharding.replicate(init(key), setup.mesh))
    ddpg_out = None
    if str(o.powers).startswith("ddpg:"):   # Algorithm 3 on the pilot's schedule
      from fedjax_dp.algorithms.lapa import ddpg, power_control
      pilot = str(o.powers)[len("ddpg:"):]
      sched = power_control.schedule_from_metrics(pilot)
      if sched.shape[1] != n:
        raise FedJaxDpError(f"powers: the pilot run has {sched.shape[1]} devices, this "
                            f"run {n}.", option="powers")
      weights = power_control.weights_from_metrics(
          pilot, o.aggregator, np.asarray(setup.data.counts), link["selected"])
      ddpg_out = power_control.optimise_powers(
          sched, link["uplink"].gains, channel.dbm_to_watts(o.noise_dbm), link["kappa"],
          weights, link["selected"], o.learning_rate, dim,
          channel.dbm_to_watts(o.p_max_dbm),
          ddpg.DdpgConfig(reward="log", episodes=o.ddpg_episodes,
                          steps_per_episode=o.ddpg_steps, seed=run.seed))
      link = self.uplink(o, run, n, dim, np.asarray(ddpg_out["powers_w"]))
      alg = dataclasses.replace(alg, hparams=alg.hparams._replace(
          channel_std=np.asarray(link["channel_std"], np.float32)),
          config={**alg.config, "channel_std": link["channel_std"].tolist()})
      if not np.array_equal(link["selected"], np.asarray(alg.config["selected"])):
        raise FedJaxDpError("powers: DDPG's powers change which devices pass "
                            "--ser-threshold; run without a threshold.", option="powers")
    up = link["uplink"]
    alg = dataclasses.replace(alg, config={**alg.config, "ddpg": ddpg_out})
    return dataclasses.replace(alg, config={
        **alg.config, "channel": o.channel, "powers_w": link["powers_w"].tolist(),
        "snr_db": (10 * np.log10(np.maximum(link["snr"], 1e-300))).tolist(),
        "ser": link["ser"].tolist(), "kappa": link["kappa"],
        "distances_m": np.asarray(up.distances).tolist(),
        "positions_m": np.asarray(up.positions).tolist(),
        "ser_threshold": o.ser_threshold, "modulation": o.modulation})

  def calibrates(self, options) -> bool:
    return False

  def summary_fields(self, alg, setup, controller, records) -> Dict[str, Any]:
    """The guarantee beside the realised composition, the paper's assumptions and its
    own budget (`fedjax_dp.algorithms.lapa.summary.summary_fields`)."""
    return lapa_summary.summary_fields(alg, setup, records)

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    return lapa_summary.describe(summary)


def parse_powers(spec: str, num_devices: int, p_max_w: float) -> np.ndarray:
  """Transmit powers in watts ``[N]`` from the ``powers`` option: ``max``, ``half``, a
  comma list of N watts, or a JSON file with a list of N watts (or ``{"powers_w": [...]}``).

  Raises:
    FedJaxDpError: an unreadable spec, the wrong count, or a power outside [0, P_max].
  """
  text = str(spec).strip()
  if text.startswith("ddpg:"):
    if not os.path.isfile(text[len("ddpg:"):]):
      raise FedJaxDpError(f"powers: ddpg: needs a pilot run's metrics.jsonl, "
                          f"{text[len('ddpg:'):]!r} is not a file.", option="powers")
    return np.full(num_devices, p_max_w)   # placeholder until DDPG has run
  if text == "max":
    vals = np.full(num_devices, p_max_w)
  elif text == "half":
    vals = np.full(num_devices, p_max_w / 2)
  elif os.path.isfile(text):
    with open(text) as f:
      obj = json.load(f)
    vals = np.asarray(obj["powers_w"] if isinstance(obj, dict) else obj, np.float64)
  else:
    try:
      vals = np.array([float(v) for v in text.split(",")], np.float64)
    except ValueError:
      raise FedJaxDpError(f"powers must be max, half, a comma list of watts or a JSON "
                          f"file, got {spec!r}.", option="powers") from None
  vals = np.atleast_1d(vals).astype(np.float64)
  if vals.shape == (1,):
    vals = np.full(num_devices, vals[0])
  if vals.shape != (num_devices,):
    raise FedJaxDpError(f"powers must give {num_devices} values (one per device), got "
                        f"{vals.shape[0]}.", option="powers")
  if np.any(~np.isfinite(vals)) or np.any(vals < 0) or np.any(vals > p_max_w * (1 + 1e-9)):
    raise FedJaxDpError(f"powers must lie in [0, P_max = {p_max_w:.4g} W], got "
                        f"{vals.tolist()}.", option="powers")
  return vals


def _smoke_check(alg, records, data) -> None:
  """`SmokeConfig.check`: record level, per device, no sampling; every device spends
  eps_T / T = 2000 / 12 a round, so sigma = c Delta_s / eps_i[t] > 0."""
  assert alg.privacy.unit == "record-level", alg.privacy.unit
  for r in records:
    assert r["dp_steps"] == 1 and r["sampling_rate"] == 1.0, r
    assert r["num_clients"] == data.num_clients, r
    np.testing.assert_allclose(np.asarray(r["epsilon_devices"]), 2000.0 / 12, rtol=1e-5)
    assert 0.0 < r["noise_stddev"] and r["noise_multiplier"] > 0, r
