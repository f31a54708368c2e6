"""Record-level DP-FedAvg: local DP-SGD inside every sampled client (Abadi et al., CCS
2016), uploads averaged uniformly (`fedjax_dp.algorithms.dp_fedavg.algorithm`'s module
docstring states the privacy)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from fedjax_dp.algorithms import fedavg_family as family
from fedjax_dp.algorithms.base import Algorithm, PrivacySpec, require_learning_rates
from fedjax_dp.federated import server, sharding
from fedjax_dp.federated.client import ClientHParams, DpSgdConfig, make_client_update
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, make_round,
                                       round_observation)
from fedjax_dp.validation import (FedJaxDpError, check_int, check_non_negative,
                                  check_positive, check_probability)

__all__ = ["dp_fedavg_record_level"]


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
    others: the other arguments are as in `dp_fedavg`.

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
  samp = family.cohort_sampler(data, sampler, sampling_rate, clients_per_round, k_max)
  local_epochs, local_steps = family.local_work(local_epochs, local_steps)
  dp_cfg = DpSgdConfig.create(data.max_examples, q_r, local_epochs=local_epochs,
                              local_steps=local_steps)
  client = make_client_update(
      model, family.client_optimizer(client_optimizer, client_learning_rate),
      batch_size=batch_size, max_examples=data.max_examples, dp_sgd=dp_cfg,
      per_example_method=per_example_method)
  config = RoundConfig(clip_updates=False, noise="none", weighting="uniform",
                       denominator="actual", record_level=True, dp_steps=dp_cfg.num_steps,
                       chunk_size=chunk_size)
  server_opt = family.server_optimizer(server_optimizer, server_learning_rate)
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
          steps=dp_cfg.num_steps, observation=round_observation(config),
          truncation=dp_cfg.truncation(data.max_examples, samp.k_max),
          clip_norm=record_clip_norm, clipped="each example's gradient (C_r)",
          note=("each round composes the local DP-SGD steps of Poisson-sampled examples; "
                "the server sees each client's upload with its sender, which hides the "
                "record sampling inside it (amplified) but not the client's "
                "participation: amplification by client sampling is not claimed. Steps "
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
