"""Builder pieces shared by the algorithms that train clients like FedAvg (the
``dp_fedavg`` package's builders and ``dp_ftrl``): the client and server optimisers with
learning rate 1 (the rates ride in the hyper-parameters), the local work, the cohort
sampler and its truncation. One home, so that no algorithm package imports another's
private helpers; the options they read are `fedjax_dp.algorithms.options`'s.
"""

from __future__ import annotations

from typing import Optional, Tuple

import optax

from fedjax_dp.algorithms.options import CLIENT_OPTIMIZERS
from fedjax_dp.federated import server
from fedjax_dp.federated.participation import (AllocationSampler, CyclicSampler,
                                               allocation_epoch_length, cyclic_group_rate)
from fedjax_dp.federated.sampling import FixedSizeSampler, PoissonSampler
from fedjax_dp.privacy import events
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int, check_positive,
                                  check_probability)

__all__ = ["client_optimizer", "server_optimizer", "local_work", "cohort_sampler",
           "cohort_truncation", "check_structured", "BASIC_SAMPLERS",
           "STRUCTURED_SAMPLERS", "ALL_SAMPLERS"]


def client_optimizer(name: str, lr: float) -> optax.GradientTransformation:
  """The named client optimiser with learning rate 1: the rate ``lr`` (validated here)
  enters as ``ClientHParams.learning_rate``, an array, so sweeping it never recompiles.

  Args:
    name: ``"sgd"``, ``"momentum"`` (SGD with momentum 0.9) or ``"adam"``.
    lr: the client learning rate, > 0 (checked only).

  Raises:
    FedJaxDpError: an unknown name or a learning rate <= 0.
  """
  check_choice("client_optimizer", name, CLIENT_OPTIMIZERS)
  check_positive("client_learning_rate", lr)
  if name == "sgd":
    return optax.sgd(1.0)
  if name == "momentum":
    return optax.sgd(1.0, momentum=0.9)
  return optax.adam(1.0)


def server_optimizer(name: str, lr: float) -> optax.GradientTransformation:
  """The named server optimiser (`fedjax_dp.federated.server.server_optimizer`) with
  learning rate 1; ``lr`` is validated here and enters as
  ``RoundHParams.server_learning_rate``.

  Raises:
    FedJaxDpError: an unknown name or a learning rate <= 0.
  """
  check_positive("server_learning_rate", lr)
  return server.server_optimizer(name, 1.0)


def local_work(local_epochs: Optional[int], local_steps: Optional[int]
               ) -> Tuple[Optional[int], Optional[int]]:
  """``(local_epochs, local_steps)`` for `fedjax_dp.federated.client.make_client_update`:
  ``local_steps``, when given, replaces the default ``local_epochs=1``.

  Raises:
    FedJaxDpError: both given (``local_epochs`` other than None or 1).
  """
  if local_steps is not None:
    if local_epochs not in (None, 1):
      raise FedJaxDpError(
          f"give only one of local_epochs ({local_epochs!r}) and local_steps "
          f"({local_steps!r}).")
    return None, local_steps
  return local_epochs, local_steps


#: The samplers every FedAvg-family builder supports (the rest: `STRUCTURED_SAMPLERS`).
BASIC_SAMPLERS = ("poisson", "fixed_size")
#: Structured participation (`fedjax_dp.federated.participation`): DP-FedAvg only.
STRUCTURED_SAMPLERS = ("balls_in_bins", "random_allocation", "cyclic_poisson")
#: Every sampler (DP-FedAvg's choices).
ALL_SAMPLERS = BASIC_SAMPLERS + STRUCTURED_SAMPLERS


def cohort_sampler(data, sampler: str, sampling_rate: Optional[float],
                   clients_per_round: Optional[int], k_max: Optional[int],
                   participations_per_epoch: Optional[int] = None,
                   min_separation: Optional[int] = None,
                   allowed: Tuple[str, ...] = BASIC_SAMPLERS):
  """The cohort sampler of a run on ``data`` (anything with ``num_clients``).

  Every sampler reads q, the expected fraction of the population per round (given as
  ``sampling_rate`` or ``clients_per_round / N``):

  * ``"poisson"``: each client independently with probability q;
  * ``"fixed_size"``: m = round(q N) clients without replacement;
  * ``"balls_in_bins"``: epochs of ``t = round(1 / q)`` rounds, every client in exactly
    one round of each epoch (`AllocationSampler`, k = 1);
  * ``"random_allocation"``: epochs of ``t = round(k / q)`` rounds, every client in k
    of them (k = ``participations_per_epoch``);
  * ``"cyclic_poisson"``: b = ``min_separation`` groups, round r serves group r mod b,
    each member joins with probability ``q b`` (`CyclicSampler`, kind
    ``"cyclic_poisson"``; groups from public seed 0).

  Args:
    data: the population (``num_clients`` is read).
    sampler: one of ``allowed``.
    sampling_rate: q in (0, 1]; exactly one of it and ``clients_per_round``.
    clients_per_round: m in [1, N] (q = m / N).
    k_max: the padded cohort size of a Poisson or allocation cohort (None: overflow
      probability < 1e-12); unused otherwise.
    participations_per_epoch: k >= 1 (``"random_allocation"`` only; default 1).
    min_separation: b >= 1 (``"cyclic_poisson"`` only, required).
    allowed: the samplers the calling algorithm supports.

  Raises:
    FedJaxDpError: a sampler the algorithm does not support, both or neither of the two
      rates, an option given with a sampler that does not read it, or a value out of
      range.
  """
  n = data.num_clients
  if sampler not in allowed and sampler in ALL_SAMPLERS:
    raise FedJaxDpError(
        f"sampler={sampler!r} is not supported by this algorithm (it supports "
        f"{', '.join(allowed)}); structured participation ({', '.join(STRUCTURED_SAMPLERS)}"
        ") needs an algorithm built on DP-FedAvg's central-noise round.", option="sampler")
  check_choice("sampler", sampler, allowed)
  if participations_per_epoch is not None and sampler != "random_allocation":
    raise FedJaxDpError("participations_per_epoch is read only by "
                        f"sampler='random_allocation', got sampler={sampler!r}.",
                        option="participations_per_epoch")
  if min_separation is not None and sampler != "cyclic_poisson":
    raise FedJaxDpError("min_separation is read only by sampler='cyclic_poisson', got "
                        f"sampler={sampler!r}.", option="min_separation")
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
  if sampler in ("balls_in_bins", "random_allocation"):
    k = 1 if participations_per_epoch is None else participations_per_epoch
    t = allocation_epoch_length(q, k)
    return AllocationSampler.create(n, t, k, k_max=k_max, kind=sampler)
  if sampler == "cyclic_poisson":
    if min_separation is None:
      raise FedJaxDpError("sampler='cyclic_poisson' needs min_separation (b, the number "
                          "of groups; round r serves group r mod b).",
                          option="min_separation")
    b = check_int("min_separation", min_separation, minimum=1, maximum=n)
    return CyclicSampler.create(n, b, cyclic_group_rate(q, b), seed=0,
                                kind="cyclic_poisson")
  m = clients_per_round if clients_per_round is not None else max(1, round(q * n))
  return FixedSizeSampler.create(n, m)


def check_structured(kind: str, adaptive: bool, per_client: bool) -> None:
  """Structured participation (`STRUCTURED_SAMPLERS`) needs one noise multiplier for
  all clients and a fixed clip norm (its ledger has neither per-client nor
  adaptive-clipping accounting).

  Raises:
    FedJaxDpError: adaptive clipping or per-client noise multipliers with such a sampler.
  """
  if kind in STRUCTURED_SAMPLERS and (adaptive or per_client):
    raise FedJaxDpError(
        f"sampler={kind!r} supports neither adaptive clipping nor per-client noise "
        "multipliers; use sampler='poisson' for those.", option="sampler")


def cohort_truncation(samp) -> Optional[events.Truncation]:
  """The truncation of a Poisson or allocation cohort padded to ``k_max``, which can
  overflow (the user-level delta term; in one round of a random allocation each client
  is in the cohort independently with probability k / t, so the tail is the same
  Binomial's); None for fixed-size and cyclic cohorts (never truncated)."""
  if samp.kind not in ("poisson", "balls_in_bins", "random_allocation"):
    return None
  return events.Truncation(samp.population_size, samp.k_max, 1)
