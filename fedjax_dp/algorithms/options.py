"""Options shared by the FedAvg family (fedavg, dp_fedavg, dp_fedsgd,
dp_fedavg_record_level): cohort sampling, local work and the two optimisers.

Each field's attribute docstring is its ``--help`` text; ``Literal`` types are the
choices (checked by `fedjax_dp.algorithms.interface.check_choices`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal, Optional, Tuple, get_args

import tyro

from fedjax_dp.algorithms.interface import check_choices
from fedjax_dp.federated.server import SERVER_OPTIMIZERS
from fedjax_dp.validation import FedJaxDpError, check_int, check_positive, check_probability

__all__ = ["DEFAULT_SAMPLING_RATE", "ClientOptimizer", "CLIENT_OPTIMIZERS",
           "ServerOptimizer", "FederatedOptions", "check_local_work"]

#: The expected cohort's rate when neither sampling_rate nor clients_per_round is given.
DEFAULT_SAMPLING_RATE = 0.5
#: The client optimisers (`fedjax_dp.algorithms.fedavg_family.client_optimizer`; the
#: tuple: their names).
ClientOptimizer = Literal["sgd", "momentum", "adam"]
CLIENT_OPTIMIZERS: Tuple[str, ...] = get_args(ClientOptimizer)
#: The server optimisers, as a type for the options: `fedjax_dp.federated.server`'s
#: ``SERVER_OPTIMIZERS`` (checked at import, so the two cannot drift apart).
ServerOptimizer = Literal["fedavg", "fedavgm", "fedadam", "fedyogi"]
if get_args(ServerOptimizer) != tuple(SERVER_OPTIMIZERS):
  raise ImportError(f"options.ServerOptimizer {get_args(ServerOptimizer)} is not "
                    f"fedjax_dp.federated.server.SERVER_OPTIMIZERS {SERVER_OPTIMIZERS}.")


def check_local_work(local_epochs: Optional[int], local_steps: Optional[int]) -> None:
  """Refuses local epochs other than the default (None or 1) with local steps, with the
  functional builders' message (`fedjax_dp.algorithms.fedavg_family.local_work`).

  Raises:
    FedJaxDpError: naming local_epochs.
  """
  from fedjax_dp.algorithms.fedavg_family import local_work
  try:
    local_work(local_epochs, local_steps)
  except FedJaxDpError as e:
    raise FedJaxDpError(str(e), option="local_epochs") from e


@dataclasses.dataclass
class FederatedOptions:
  """Cohort sampling, local training and server optimisation."""
  clients_per_round: Optional[int] = None
  """expected cohort size q*N (exclusive with --sampling-rate)"""
  sampling_rate: Optional[float] = None
  """client sampling rate q in (0, 1] (default: 0.5 when neither this nor
  --clients-per-round is given)"""
  sampler: Literal["poisson", "fixed_size", "balls_in_bins", "random_allocation",
                   "cyclic_poisson"] = "poisson"
  """poisson (add/remove DP) or fixed_size: sampling without replacement
  (replace-one DP); DP-FedAvg also: balls_in_bins, random_allocation, cyclic_poisson
  (structured participation, docs/how-to/participation.md)"""
  local_epochs: Optional[int] = 1
  """local epochs E per round"""
  local_steps: Optional[int] = None
  """local steps per round, instead of --local-epochs (give only one of the two)"""
  batch_size: int = 16
  """local minibatch size"""
  client_optimizer: ClientOptimizer = "sgd"
  """local optimiser"""
  client_learning_rate: Annotated[float, tyro.conf.arg(aliases=("--client-lr",))] = 0.1
  """client learning rate"""
  server_optimizer: ServerOptimizer = "fedavg"
  """server optimiser (an optax transform of the averaged update)"""
  server_learning_rate: Annotated[float, tyro.conf.arg(aliases=("--server-lr",))] = 1.0
  """server learning rate"""

  #: Pairs of options that exclude each other: the command line refuses both typed, and
  #: one typed replaces the other's value from a config file.
  EXCLUSIVE = (("clients_per_round", "sampling_rate"), ("local_epochs", "local_steps"))

  def validate_federated(self) -> None:
    """Checks these fields.

    Raises:
      FedJaxDpError: naming the option.
    """
    check_choices(self)
    check_positive("client_learning_rate", self.client_learning_rate)
    check_positive("server_learning_rate", self.server_learning_rate)
    check_int("batch_size", self.batch_size, minimum=1)
    if self.clients_per_round is not None and self.sampling_rate is not None:
      raise FedJaxDpError(
          "give either clients_per_round or sampling_rate, not both "
          f"(got {self.clients_per_round} and {self.sampling_rate}).",
          option="clients_per_round")
    if self.sampling_rate is not None:
      check_probability("sampling_rate", self.sampling_rate)
    if self.clients_per_round is not None:
      check_int("clients_per_round", self.clients_per_round, minimum=1)
    check_local_work(self.local_epochs, self.local_steps)
    if self.local_steps is not None:
      check_int("local_steps", self.local_steps, minimum=1)
    elif self.local_epochs is not None:
      check_int("local_epochs", self.local_epochs, minimum=1)
    else:
      raise FedJaxDpError("give local_epochs or local_steps.", option="local_epochs")

  def federated_kwargs(self, setup) -> dict:
    """The keyword arguments of the functional builders (`dp_fedavg`, `fedavg`, ...)
    for these options, with the run's chunk size and mesh."""
    rate = self.sampling_rate
    if rate is None and self.clients_per_round is None:
      rate = DEFAULT_SAMPLING_RATE
    return dict(chunk_size=setup.run.chunk_size, mesh=setup.mesh,
                clients_per_round=self.clients_per_round, sampling_rate=rate,
                sampler=self.sampler,
                local_epochs=None if self.local_steps else self.local_epochs,
                local_steps=self.local_steps, batch_size=self.batch_size,
                client_optimizer=self.client_optimizer,
                client_learning_rate=self.client_learning_rate,
                server_optimizer=self.server_optimizer,
                server_learning_rate=self.server_learning_rate)
