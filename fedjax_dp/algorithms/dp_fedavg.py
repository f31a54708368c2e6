"""DP-FedAvg and DP-FedSGD at user level, and the record-level (local DP-SGD) variant.

User level (McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018, Algorithm 1), per round t:

  C^t  <- Poisson sample, each user independently with probability q   (sampler)
  for k in C^t:  Delta_k <- ClientUpdate(k, theta^t)                    (local SGD, E epochs)
                 Delta_k <- Delta_k * min(1, S / ||Delta_k||)            (ClipFn, flat clipping)
  Delta  <- (sum_k w_k Delta_k + N(0, (z S)^2 I)) / (q W)              (fixed denominator f~_f)
  theta^{t+1} <- ServerOpt(theta^t, Delta)                            (sgd(1.0) = FedAvg)

with w_k = 1 (uniform) or min(n_k / cap, 1), and W = sum_k w_k over the population.
DP-FedSGD is the same round with one full-batch local gradient step per client.
Privacy (the round states it, `fedjax_dp.federated.round.round_relation`):

* Poisson cohorts: add/remove one user, sensitivity S, each round
  PoissonSampledDpEvent(q, GaussianDpEvent(z));
* fixed-size cohorts of m < N: replace-one, sensitivity 2S, each round
  SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z / 2)); m = N: GaussianDpEvent(z / 2);
* ``noise_placement="local"`` (each client adds N(0, (z_k S)^2) to its clipped update,
  z_k may differ by client): zero-out of one user under Poisson sampling, where each
  round is a plain GaussianDpEvent(z_k) (participation is visible, no amplification),
  replace-one for fixed-size cohorts; every client accounted with its own z_k in every
  round.

Record level (Abadi et al., CCS 2016, run inside each client): each sampled client
runs local DP-SGD (Poisson-sampled examples at rate q_r, per-example clipping to C_r,
noise N(0, (z_r C_r)^2), divided by the public expected batch size b); the server
averages the uploads with uniform weights over the cohort (post-processing: neither
depends on any client's records). Each round composes ``local_steps``
PoissonSampledDpEvent(q_r, GaussianDpEvent(z_r)) per example, add/remove one record;
amplification by client sampling is conservatively NOT claimed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Literal, Optional

import numpy as np
import optax

from fedjax_dp.algorithms.base import Algorithm, PrivacySpec, require_learning_rates
from fedjax_dp.algorithms.interface import FederatedAlgorithm
from fedjax_dp.algorithms.options import FederatedOptions
from fedjax_dp.federated import aggregation, server, sharding
from fedjax_dp.federated.client import ClientHParams, DpSgdConfig, make_client_update
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, amplified, make_round,
                                       round_relation)
from fedjax_dp.federated.sampling import FixedSizeSampler, PoissonSampler
from fedjax_dp.privacy import events, sensitivity
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_positive, check_probability)


def _client_optimizer(name: str, lr: float) -> optax.GradientTransformation:
  """The named client optimiser with learning rate 1: the rate ``lr`` (validated here)
  enters as ``ClientHParams.learning_rate``, an array, so sweeping it never recompiles."""
  check_choice("client_optimizer", name, ("sgd", "momentum", "adam"))
  check_positive("client_learning_rate", lr)
  if name == "sgd":
    return optax.sgd(1.0)
  if name == "momentum":
    return optax.sgd(1.0, momentum=0.9)
  return optax.adam(1.0)


def _server_optimizer(name: str, lr: float) -> optax.GradientTransformation:
  """The named server optimiser with learning rate 1 (``lr`` is validated here and
  enters as ``RoundHParams.server_learning_rate``)."""
  check_positive("server_learning_rate", lr)
  return server.server_optimizer(name, 1.0)


def _local_work(local_epochs, local_steps):
  """``local_steps``, when given, replaces the default ``local_epochs=1``."""
  if local_steps is not None:
    if local_epochs not in (None, 1):
      raise FedJaxDpError(
          f"give only one of local_epochs ({local_epochs!r}) and local_steps "
          f"({local_steps!r}).")
    return None, local_steps
  return local_epochs, local_steps


def _sampler(data, sampler: str, sampling_rate, clients_per_round, k_max):
  n = data.num_clients
  check_choice("sampler", sampler, ("poisson", "fixed_size"))
  if (sampling_rate is None) == (clients_per_round is None):
    raise FedJaxDpError("give exactly one of sampling_rate and clients_per_round.")
  if clients_per_round is not None:
    m = check_int("clients_per_round", clients_per_round, minimum=1)
    if m > n:
      raise FedJaxDpError(
          f"clients_per_round must be <= the population size {n}, got {m}.")
    sampling_rate = m / n
  q = check_probability("sampling_rate", sampling_rate)
  if sampler == "poisson":
    return PoissonSampler.create(n, q, k_max=k_max)
  m = clients_per_round if clients_per_round is not None else max(1, round(q * n))
  return FixedSizeSampler.create(n, m)


def _cohort_truncation(samp) -> Optional[events.Truncation]:
  """A Poisson cohort padded to ``k_max`` can overflow (user-level delta term)."""
  if samp.kind != "poisson":
    return None
  return events.Truncation(samp.population_size, samp.k_max, 1)


def _check_noise_multipliers(noise_multiplier, noise_placement: str, num_clients: int):
  """A scalar z >= 0, or (local noise only) a ``[num_clients]`` vector of them."""
  check_choice("noise_placement", noise_placement, ("central", "local"))
  z = np.asarray(noise_multiplier, np.float64)
  if z.ndim == 0:
    return check_non_negative("noise_multiplier", float(z))
  if noise_placement != "local":
    raise FedJaxDpError("a per-client noise_multiplier (one per client) needs "
                        "noise_placement='local': central noise is one draw per round.")
  if z.shape != (num_clients,) or not np.all(np.isfinite(z)) or np.any(z < 0):
    raise FedJaxDpError(f"noise_multiplier must be a scalar or a [num_clients={num_clients}] "
                        f"vector of finite values >= 0, got shape {z.shape} "
                        f"(min {np.nanmin(z) if z.size else None!r}).")
  return z.astype(np.float32)


def dp_fedavg(model, data, *, clip_norm: float = 1.0, noise_multiplier: float = 1.0,
              sampling_rate: Optional[float] = None,
              clients_per_round: Optional[int] = None, sampler: str = "poisson",
              local_epochs: Optional[int] = 1, local_steps: Optional[int] = None,
              batch_size: int = 32, client_optimizer: str = "sgd",
              client_learning_rate: float = 0.1, server_optimizer: str = "fedavg",
              server_learning_rate: float = 1.0, weighting: str = "uniform",
              data_size_cap: Optional[float] = None, k_max: Optional[int] = None,
              fedsgd: bool = False, noise_placement: str = "central",
              population_weight: Optional[float] = None, client_update=None,
              chunk_size: Optional[int] = None, mesh=None) -> Algorithm:
  """User-level DP-FedAvg (or DP-FedSGD with ``fedsgd=True``), McMahan et al. 2018.

  Args:
    model: a `fedjax_dp.models.Model`.
    data: a `fedjax_dp.data.FederatedData` or a
      `fedjax_dp.federated.PooledPopulation` (its shape fixes the static cohort layout;
      only ``num_clients``, ``max_examples`` and ``counts`` are read here).
    clip_norm: S > 0, L2 bound on each client's update (same units as the parameters).
    noise_multiplier: z >= 0; central noise std ``z * S`` on the weighted sum. With
      ``noise_placement="local"`` each client adds std ``z * S`` to its own clipped
      update, and z may be a float ``[num_clients]`` vector (one per client, by
      population id; each client is then accounted with its own).
    sampling_rate / clients_per_round: q, or the expected cohort size ``q N``.
    sampler: ``"poisson"`` (the paper's) or ``"fixed_size"`` (without replacement).
    local_epochs / local_steps: local work (ignored for DP-FedSGD); giving
      ``local_steps`` replaces the default ``local_epochs=1``.
    batch_size: local minibatch size.
    client_optimizer / client_learning_rate: ``sgd`` | ``momentum`` | ``adam`` and its lr.
    server_optimizer / server_learning_rate: see `fedjax_dp.federated.server`.
    weighting: ``"uniform"`` (w_k = 1) or ``"data_size"`` (w_k = min(n_k / cap, 1),
      ``data_size_cap`` required).
    k_max: override the padded cohort size (default: overflow probability < 1e-9).
    fedsgd: DP-FedSGD: one full-batch gradient step per client.
    noise_placement: ``"central"`` (the paper's: one draw on the weighted sum) or
      ``"local"`` (every sampled client noises its own clipped update; accounted under
      zero-out for Poisson cohorts, `fedjax_dp.federated.round.round_relation`).
    population_weight: W of the fixed denominator ``q W``, a public constant; default
      ``sum_k w_k`` over this population (N for uniform weights). Like ``k_max`` it is a
      hyper-parameter computed from the population size, which is treated as public
      (as Opacus treats N): the guarantee is for the mechanism with these constants
      fixed, and a neighbouring population (one user more or fewer) runs with the same
      ones. Pass it to hold it fixed across populations (the canary audit does).
    client_update: replaces local training: any
      ``client_update(params, x, y, count, key, hparams) -> (update, ClientMetrics)``
      (`fedjax_dp.federated.client.make_client_update`'s signature), e.g. a client whose
      update is crafted (the canary audits); None: local SGD as configured.
    chunk_size: clients trained at once per device (None: automatic; see
      `fedjax_dp.federated.round.RoundConfig`).
    mesh: a `jax.sharding.Mesh` with a ``"clients"`` axis to shard the cohort over
      devices (`fedjax_dp.federated.sharding.client_mesh`), or None.

  Returns:
    An `Algorithm`.

  Raises:
    FedJaxDpError: on invalid arguments (before anything is compiled).
  """
  clip_norm = check_positive("clip_norm", clip_norm)
  noise_multiplier = _check_noise_multipliers(noise_multiplier, noise_placement,
                                              data.num_clients)
  per_client = np.ndim(noise_multiplier) == 1
  check_choice("weighting", weighting, ("uniform", "data_size"))
  if weighting == "data_size" and data_size_cap is None:
    raise FedJaxDpError(
        "weighting='data_size' under DP needs data_size_cap (weights min(n_k/cap, 1) <= 1 "
        "bound each client's influence).")
  samp = _sampler(data, sampler, sampling_rate, clients_per_round, k_max)
  local_epochs, local_steps = _local_work(local_epochs, local_steps)
  if fedsgd:
    local_epochs, local_steps, batch_size = None, 1, data.max_examples
  client = client_update or make_client_update(
      model, _client_optimizer(client_optimizer, client_learning_rate),
      batch_size=batch_size, max_examples=data.max_examples, local_epochs=local_epochs,
      local_steps=local_steps)
  config = RoundConfig(
      clip_updates=True, noise=noise_placement, weighting=weighting, denominator="expected",
      data_size_cap=data_size_cap,
      population_weight=(aggregation.population_weight_total(data.counts, weighting,
                                                             data_size_cap)
                         if population_weight is None else
                         check_positive("population_weight", population_weight)),
      chunk_size=chunk_size)
  server_opt = _server_optimizer(server_optimizer, server_learning_rate)
  round_fn = require_learning_rates(make_round(client, samp, server_opt, config, mesh=mesh))
  name = "dp_fedsgd" if fedsgd else "dp_fedavg"
  relation = round_relation(samp, config)
  privacy = PrivacySpec(
      "user-level", relation, samp.kind,
      sampling_rate=samp.sampling_rate if amplified(samp, config) else 1.0,
      population_size=samp.population_size if samp.kind == "fixed_size" else None,
      cohort_size=samp.k_max if samp.kind == "fixed_size" else None,
      truncation=_cohort_truncation(samp),
      event_scale=clip_norm / sensitivity.sum_sensitivity(clip_norm, relation),
      per_client=per_client, num_clients=data.num_clients if per_client else None,
      clip_norm=clip_norm, clipped="each client's update (S)",
      note=("every client adds its own noise (local placement): accounted per client, "
            "under zero-out for Poisson cohorts, where a client's participation is "
            "visible (its noise comes with its update), so amplification by sampling is "
            "not claimed" if noise_placement == "local" else ""))
  return Algorithm(
      name=name, round_fn=round_fn,
      init=lambda key: sharding.replicate(
          server.init_server_state(model.init(key), server_opt), mesh),
      hparams=RoundHParams(clip_norm, noise_multiplier, samp.sampling_rate,
                           ClientHParams(learning_rate=client_learning_rate),
                           server_learning_rate),
      privacy=privacy, k_max=samp.k_max, sampling_rate=samp.sampling_rate,
      config=dict(clip_norm=clip_norm, noise_multiplier=(
                      noise_multiplier.tolist() if per_client else noise_multiplier),
                  noise_placement=noise_placement,
                  sampling_rate=samp.sampling_rate, sampler=samp.kind, k_max=samp.k_max,
                  expected_cohort_size=samp.expected_cohort_size,
                  local_epochs=local_epochs, local_steps=local_steps,
                  batch_size=batch_size, client_optimizer=client_optimizer,
                  client_learning_rate=client_learning_rate,
                  server_optimizer=server_optimizer,
                  server_learning_rate=server_learning_rate, weighting=weighting,
                  data_size_cap=data_size_cap))


def dp_fedsgd(model, data, **kwargs) -> Algorithm:
  """User-level DP-FedSGD (McMahan et al. 2018): `dp_fedavg` with ``fedsgd=True``."""
  return dp_fedavg(model, data, fedsgd=True, **kwargs)


def dp_fedavg_record_level(model, data, *, record_clip_norm: float = 1.0,
                           record_noise_multiplier: float = 1.0,
                           record_sampling_rate: Optional[float] = None,
                           sampling_rate: Optional[float] = None,
                           clients_per_round: Optional[int] = None,
                           sampler: str = "poisson", local_epochs: Optional[int] = 1,
                           local_steps: Optional[int] = None, batch_size: int = 32,
                           client_optimizer: str = "sgd",
                           client_learning_rate: float = 0.1,
                           server_optimizer: str = "fedavg",
                           server_learning_rate: float = 1.0,
                           weighting: str = "uniform",
                           k_max: Optional[int] = None, chunk_size: Optional[int] = None,
                           mesh=None, per_example_method: str = "auto") -> Algorithm:
  """Record-level DP: local DP-SGD in every client, uploads averaged (see module doc).

  Args:
    record_clip_norm: C_r > 0, per-example gradient clip norm.
    record_noise_multiplier: z_r >= 0; noise std ``z_r * C_r`` on each step's sum.
    record_sampling_rate: q_r in (0, 1], Poisson rate of examples per local step;
      default ``min(1, batch_size / mean client size)`` (a hyper-parameter choice that
      treats the population's mean client size as public, as Opacus treats N).
    batch_size: b, the expected batch size: every noisy gradient sum is divided by this
      public constant (not by the client's own ``q_r n_k``).
    local_epochs / local_steps: ``local_steps`` DP-SGD steps, or ``E * ceil(1 / q_r)``.
    weighting: server averaging of uploads; only ``"uniform"`` over the cohort (whose
      membership does not depend on any record): weights by data size n_k would depend
      on the client's records and are refused.
    per_example_method: ``"auto"`` (default), ``"ghost"`` or ``"vmap"``: how the
      per-example clipped gradients are computed
      (`fedjax_dp.privacy.per_example.clipped_grad_sum`; the same numbers either way).
    Other arguments as in `dp_fedavg`.

  Returns:
    An `Algorithm` whose rounds report ``dp_steps = local DP-SGD steps``.
  """
  if weighting != "uniform":
    raise FedJaxDpError(
        f"weighting must be 'uniform' for record-level DP, got {weighting!r}: weights by "
        "data size depend on the client's records (add/remove one record changes n_k), "
        "so averaging by them is not post-processing of the DP uploads.")
  record_clip_norm = check_positive("record_clip_norm", record_clip_norm)
  record_noise_multiplier = check_non_negative("record_noise_multiplier",
                                               record_noise_multiplier)
  check_int("batch_size", batch_size, minimum=1)
  if record_sampling_rate is None:
    record_sampling_rate = min(1.0, batch_size / float(np.mean(data.counts)))
  q_r = check_probability("record_sampling_rate", record_sampling_rate)
  samp = _sampler(data, sampler, sampling_rate, clients_per_round, k_max)
  local_epochs, local_steps = _local_work(local_epochs, local_steps)
  dp_cfg = DpSgdConfig.create(data.max_examples, q_r, local_epochs=local_epochs,
                              local_steps=local_steps)
  client = make_client_update(
      model, _client_optimizer(client_optimizer, client_learning_rate),
      batch_size=batch_size, max_examples=data.max_examples, dp_sgd=dp_cfg,
      per_example_method=per_example_method)
  config = RoundConfig(clip_updates=False, noise="none", weighting="uniform",
                       denominator="actual", record_level=True, dp_steps=dp_cfg.num_steps,
                       chunk_size=chunk_size)
  server_opt = _server_optimizer(server_optimizer, server_learning_rate)
  return Algorithm(
      name="dp_fedavg_record_level",
      round_fn=require_learning_rates(make_round(client, samp, server_opt, config, mesh=mesh)),
      init=lambda key: sharding.replicate(
          server.init_server_state(model.init(key), server_opt), mesh),
      hparams=RoundHParams(np.inf, 0.0, samp.sampling_rate,
                           ClientHParams(record_clip_norm, record_noise_multiplier, q_r,
                                         client_learning_rate,
                                         record_denominator=float(batch_size)),
                           server_learning_rate),
      privacy=PrivacySpec(
          "record-level", "add_remove", "poisson", sampling_rate=q_r,
          steps=dp_cfg.num_steps,
          truncation=dp_cfg.truncation(data.max_examples, samp.k_max),
          clip_norm=record_clip_norm, clipped="each example's gradient (C_r)",
          note=("each round composes the local DP-SGD steps of Poisson-sampled examples; "
                "amplification by client sampling is not claimed (conservative). Steps "
                "are divided by the public expected batch size and uploads averaged "
                "uniformly, so no client's data size enters the release.")),
      k_max=samp.k_max, sampling_rate=samp.sampling_rate,
      config=dict(record_clip_norm=record_clip_norm,
                  record_noise_multiplier=record_noise_multiplier,
                  record_sampling_rate=q_r, local_dp_steps=dp_cfg.num_steps,
                  max_batch_size=dp_cfg.max_batch_size, record_denominator=float(batch_size),
                  sampling_rate=samp.sampling_rate,
                  sampler=samp.kind, k_max=samp.k_max, batch_size=batch_size,
                  client_optimizer=client_optimizer,
                  client_learning_rate=client_learning_rate,
                  server_optimizer=server_optimizer,
                  server_learning_rate=server_learning_rate, weighting=weighting))


# --- plug-ins for `fedjax-dp run` (fedjax_dp.algorithms.interface) -------------------


@dataclasses.dataclass
class DpFedAvgOptions(FederatedOptions):
  """User-level DP: each client's update clipped to S, Gaussian noise z S."""
  clip_norm: float = 0.5
  """S: L2 bound of each client's update (parameter units)"""
  noise_multiplier: Optional[float] = None
  """z: noise std = z * S (default: 2.0; with --target-epsilon alone, z is calibrated so
  that --rounds rounds spend it)"""
  noise_placement: Literal["central", "local"] = "central"
  """central: one Gaussian draw on the aggregate; local: every sampled client noises its
  own clipped update (accounted under zero-out for Poisson cohorts)"""
  client_noise_multipliers: Optional[str] = None
  """with --noise-placement local: a .npy, .json or text file with one noise multiplier
  per client; every client is accounted with its own and summary.json reports the worst
  client's epsilon"""


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

  def validate(self, options, run) -> None:
    options.validate_federated()
    check_positive("clip_norm", options.clip_norm)
    if options.noise_multiplier is not None:
      check_non_negative("noise_multiplier", options.noise_multiplier)
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

  def build(self, setup) -> Algorithm:
    o = setup.options
    z = 1.0 if o.noise_multiplier is None else o.noise_multiplier  # set by the run
    if o.client_noise_multipliers is not None:
      z = load_client_noise_multipliers(o.client_noise_multipliers,
                                        setup.data.num_clients)
    return dp_fedavg(setup.model, setup.data, clip_norm=o.clip_norm, noise_multiplier=z,
                     noise_placement=o.noise_placement, fedsgd=self.fedsgd,
                     **o.federated_kwargs(setup))


class DpFedSgd(DpFedAvg):
  """User-level DP-FedSGD: one full-batch local gradient step (`dp_fedsgd`)."""
  name = "dp_fedsgd"
  description = "user-level DP-FedSGD: one full-batch gradient step per client"
  function = staticmethod(dp_fedsgd)
  fedsgd = True


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
  description = "record-level DP: local DP-SGD in each client (Abadi et al. 2016)"
  Options = RecordLevelOptions
  noise_multiplier_option = "record_noise_multiplier"
  default_noise_multiplier = 2.0
  function = staticmethod(dp_fedavg_record_level)

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
