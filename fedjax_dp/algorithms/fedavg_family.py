"""Builder pieces shared by the algorithms that train clients like FedAvg (the
``dp_fedavg`` package's builders and ``dp_ftrl``): the client and server optimisers with
learning rate 1 (the rates ride in the hyper-parameters), the local work, the cohort
sampler and its truncation. One home, so that no algorithm package imports another's
private helpers; the options they read are `fedjax_dp.algorithms.options`'s.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import optax

from fedjax_dp.algorithms.options import CLIENT_OPTIMIZERS
from fedjax_dp.federated import server
from fedjax_dp.federated.sampling import FixedSizeSampler, PoissonSampler
from fedjax_dp.privacy import events
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int, check_positive,
                                  check_probability)

__all__ = ["client_optimizer", "server_optimizer", "local_work", "cohort_sampler",
           "cohort_truncation"]


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


def cohort_sampler(data, sampler: str, sampling_rate: Optional[float],
                   clients_per_round: Optional[int], k_max: Optional[int]
                   ) -> Union[PoissonSampler, FixedSizeSampler]:
  """The cohort sampler of a run on ``data`` (anything with ``num_clients``).

  Args:
    data: the population (``num_clients`` is read).
    sampler: ``"poisson"`` (each client independently with probability q) or
      ``"fixed_size"`` (m clients without replacement).
    sampling_rate: q in (0, 1]; exactly one of it and ``clients_per_round``.
    clients_per_round: m in [1, N] (q = m / N).
    k_max: the Poisson cohort's static padded size (None: overflow probability
      < 1e-9); unused for fixed-size cohorts.

  Raises:
    FedJaxDpError: both or neither of the two rates, or a value out of range.
  """
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


def cohort_truncation(samp: Union[PoissonSampler, FixedSizeSampler]
                      ) -> Optional[events.Truncation]:
  """The truncation of a Poisson cohort padded to ``k_max``, which can overflow (the
  user-level delta term); None for a fixed-size cohort."""
  if samp.kind != "poisson":
    return None
  return events.Truncation(samp.population_size, samp.k_max, 1)
