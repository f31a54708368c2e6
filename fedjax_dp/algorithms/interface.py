"""The algorithm interface: everything `fedjax-dp run` needs from an algorithm.

An algorithm plugs in by subclassing `FederatedAlgorithm` in its own module or package
(``fedjax_dp/algorithms/<name>/`` when it has paper-only primitives) and adding one line
to `fedjax_dp.algorithms.registry`. The run loop (`fedjax_dp.runs.loop`) and the command
line never name an algorithm; for every run they

  1. read the algorithm's typed options (`FederatedAlgorithm.Options`, a dataclass whose
     fields, defaults and docstrings become ``fedjax-dp run``'s flags and config keys)
     beside the run's own (`fedjax_dp.runs.config.RunConfig`);
  2. load the dataset (`default_dataset` unless ``--dataset``) and let the algorithm
     `prepare` it (a paper's engineered client heterogeneity, say);
  3. build the model (`model_spec`) and the `fedjax_dp.algorithms.base.Algorithm`
     (`build`): the compiled round, its initial state and hyper-parameters, and its
     `fedjax_dp.algorithms.base.PrivacySpec` (what each round releases, under which
     neighbouring relation and sampler);
  4. set the noise multiplier where the algorithm takes one (`noise_multiplier_option`):
     the option's value, or calibrated to ``--target-epsilon`` through the algorithm's
     own `PrivacySpec` (`with_noise_multiplier` puts it in the hyper-parameters);
  5. run the rounds in compiled blocks that the algorithm's host-side `Controller`
     chooses (a constant schedule, a noise schedule, a schedule that reacts to the test
     loss, a change of the clients' data), adding its per-round fields to
     ``metrics.jsonl``;
  6. write ``summary.json`` with the algorithm's `summary_fields` and print its
     `describe` lines.

Besides runs, three hooks keep everything about an algorithm in its package:
`FederatedAlgorithm.schedule_bounds` (the allowed values of its own per-round
hyper-parameter fields, checked with the engine's), `FederatedAlgorithm.audit_targets`
(its canary audits, ``fedjax-dp audit``) and `FederatedAlgorithm.test_config` (how the
shared tests run it, `SmokeConfig`).

Compared with FedJAX's ``FederatedAlgorithm(init, apply)`` the compiled part is the
`Algorithm` bundle (``init``, ``round_fn``); what is added here is what a DP research run
needs around it: typed options, the privacy statement, host-side control and reporting.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import (TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Mapping, Optional,
                    Sequence, Tuple)

import numpy as np

from fedjax_dp.algorithms.base import Algorithm, HParams
from fedjax_dp.federated.driver import DeviceEvaluator, ScheduleBound, constant_schedule
from fedjax_dp.validation import check_choice

if TYPE_CHECKING:  # these types import the auditing and data stacks: annotations only
  import jax

  from fedjax_dp.algorithms.audit_common import Target
  from fedjax_dp.data.federated_data import FederatedData
  from fedjax_dp.federated.population import PopulationData
  from fedjax_dp.models.core import Model

__all__ = ["choices", "check_choices", "Block", "Controller", "Prepared", "Setup",
           "SmokeConfig", "ModelSpec", "FederatedAlgorithm", "TINY_SYNTHETIC_RUN"]


def choices(options_cls: type, name: str) -> Tuple[Any, ...]:
  """The allowed values of option ``name`` of an options dataclass: the arguments of its
  ``Literal[...]`` type (the one place a choice list is written), or () if it has none.
  """
  hint = typing.get_type_hints(options_cls, include_extras=True)[name]
  for t in _unwrap(hint):
    if typing.get_origin(t) is typing.Literal:
      return typing.get_args(t)
  return ()


def _unwrap(hint) -> List[Any]:
  """``Annotated[Optional[Literal[...]], ...]`` -> its member types."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  if typing.get_origin(hint) is typing.Union:
    return [a for a in typing.get_args(hint) if a is not type(None)]
  return [hint]


def check_choices(options) -> None:
  """Checks every ``Literal``-typed field of the dataclass instance ``options``.

  Raises:
    FedJaxDpError: naming the field, the value and the allowed values.
  """
  for f in dataclasses.fields(options):
    allowed = choices(type(options), f.name)
    value = getattr(options, f.name)
    if not allowed or (value is None and _optional(type(options), f.name)):
      continue
    if _open_union(type(options), f.name) and not isinstance(value, str):
      continue  # e.g. Union[float, Literal["adaptive"]]: a number is the other member
    check_choice(f.name, value, allowed)


def _open_union(options_cls: type, name: str) -> bool:
  """Whether the field's type admits values besides its ``Literal`` words (a
  ``Union[float, Literal[...]]``): only string values are then checked as choices."""
  hint = typing.get_type_hints(options_cls, include_extras=True)[name]
  return any(typing.get_origin(t) is not typing.Literal for t in _unwrap(hint))


def _optional(options_cls: type, name: str) -> bool:
  hint = typing.get_type_hints(options_cls, include_extras=True)[name]
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  return type(None) in typing.get_args(hint)


@dataclasses.dataclass
class Block:
  """Rounds to run through the compiled block function in one call.

  Attributes:
    hparams: the algorithm's hyper-parameters (`fedjax_dp.algorithms.base.HParams`)
      whose leaves have a leading ``[rounds]`` axis (entry ``t`` is the ``t``-th round
      of the block).
    rounds: how many rounds (>= 1).
    block_size: rounds per compiled call (evaluation can only happen inside one).
    eval_every: evaluate every this many rounds (counted from the block's start) and
      after its last round.
    population: a device `fedjax_dp.federated.PopulationData` for these rounds, or None
      for the run's (a paper's data change mid-run uses it; same shapes, no recompile).
  """
  hparams: HParams
  rounds: int
  block_size: int
  eval_every: int
  population: Any = None


class Controller:
  """Host-side control of a run: which rounds run next with which hyper-parameters.

  The default runs every remaining round with the algorithm's constant hyper-parameters.
  A subclass may follow a schedule, react to the records of the rounds run (e.g. the
  test loss), add fields to every round's record, and must be restartable from the
  records of a checkpoint (`restore`).
  """

  def __init__(self, alg: Algorithm, eval_every: int,
               phases: Optional[Sequence[Tuple[int, Any]]] = None):
    self.alg = alg
    self.eval_every = eval_every
    self.phases = list(phases) if phases else None

  def next_block(self, done: int, planned: int) -> Optional[Block]:
    """The next rounds to run after ``done`` of ``planned``, or None when training is
    over (a subclass may stop before ``planned``). Default: the rest of the current
    data phase (`Setup.phases`) with `schedule`'s hyper-parameters."""
    if done >= planned:
      return None
    stop, population = planned, None
    if self.phases:
      k = max(i for i, (first, _) in enumerate(self.phases) if first - 1 <= done)
      population = self.phases[k][1]
      if k + 1 < len(self.phases):
        stop = min(stop, self.phases[k + 1][0] - 1)
    return Block(self.schedule(done, stop), stop - done, self.eval_every,
                 self.eval_every, population)

  def schedule(self, start: int, stop: int) -> HParams:
    """Hyper-parameters ``[stop - start]`` of rounds ``start .. stop - 1`` (0-based).
    Default: the algorithm's constant ones."""
    return constant_schedule(self.alg.hparams, stop - start)

  def round_fields(self, record: Dict[str, Any]) -> Dict[str, Any]:
    """Extra fields of one round's record (``record``: what the round reported, with
    its 1-based ``round``, ``test_loss`` where evaluated); called once per round, in
    order. Every field must be labelled in `fedjax_dp.privacy.disclosure`."""
    return {}

  def restore(self, records: Sequence[Dict[str, Any]]) -> None:
    """Replays the records of a resumed run's rounds (``round_fields`` is not called
    again for them), so the next decisions are the uninterrupted run's."""


@dataclasses.dataclass
class Prepared:
  """What `FederatedAlgorithm.prepare` returns.

  Attributes:
    data: the `fedjax_dp.data.FederatedData` the run trains on.
    phases: ``[(first_round, FederatedData), ...]``: the clients' data from aggregation
      round ``first_round`` (1-based) on, when it changes during the run (same shapes
      as ``data``); None when it does not.
    extras: whatever else the algorithm's later hooks need (e.g. a scenario's client
      parts), in `Setup.extras`.
  """
  data: FederatedData
  phases: Optional[List[Tuple[int, FederatedData]]] = None
  extras: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Setup:
  """One run's inputs to an algorithm's hooks.

  Attributes:
    run: the run's `fedjax_dp.runs.config.RunConfig` (rounds, delta, seed, ...; typed
      `Any`: the algorithms may not import `fedjax_dp.runs`, which imports them).
    options: the algorithm's options (an instance of its own ``Options`` class).
    data: the `FederatedData` trained on (after `FederatedAlgorithm.prepare`).
    model: the `fedjax_dp.models.Model`.
    mesh: the client mesh, or None.
    extras: `Prepared.extras`.
    phases: ``[(first_round, device PopulationData), ...]`` when the clients' data
      changes during the run (`Prepared.phases`, placed on the devices), else None.
    model_name: the model's name (for summaries).
  """
  run: Any
  options: Any
  data: FederatedData
  model: Model
  mesh: Optional[jax.sharding.Mesh] = None
  extras: Dict[str, Any] = dataclasses.field(default_factory=dict)
  phases: Optional[List[Tuple[int, PopulationData]]] = None
  model_name: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SmokeConfig:
  """How the shared algorithm tests (``tests/algorithms/test_algorithms.py``) run an
  algorithm: 12 rounds of its builder on the shared test task (a linear model on the
  synthetic population of ``tests/conftest.py``), checking that it learns and that what
  its rounds report is what its ledger will compose.

  Attributes:
    kwargs: keyword arguments of the algorithm's builder: ``function(model, data,
      **kwargs)`` (`FederatedAlgorithm.function`) must return its `Algorithm`.
    learns: whether it must learn the shared task (False: the task does not fit the
      algorithm, e.g. one model per device on a binary task; ``why`` says where its own
      tests check that it learns).
    why: the reason when ``learns`` is False.
    check: ``check(alg, records, data) -> None``: the algorithm's own checks of its
      rounds' records (one dict per round, `fedjax_dp.federated.driver.run_rounds`) for
      the `Algorithm` ``alg`` on the `FederatedData` ``data``; raises AssertionError. None:
      none besides the shared ones.
  """
  kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
  learns: bool = True
  why: str = ""
  check: Optional[Callable[[Algorithm, List[Dict[str, Any]], Any], None]] = None


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The model an algorithm trains when ``--model`` is not given: ``name`` None means
  the dataset's default; ``kwargs`` go to `fedjax_dp.models.create_model` (MLP only)."""
  name: Optional[str] = None
  kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)


class FederatedAlgorithm:
  """Base class of every algorithm `fedjax-dp run` can run (see the module docstring).

  Class attributes a subclass sets:
    name: the registry name (``--algorithm``).
    description: one line for ``--help`` and the README.
    Options: a dataclass of the algorithm's options, every field with a default and an
      attribute docstring (the ``--help`` text). ``Literal[...]`` types state choices.
      ``Options.EXCLUSIVE`` (a plain class attribute, optional) lists pairs of option
      names of which at most one may be given: a flag typed replaces the other's value
      read from a config file.
    default_dataset: the dataset when ``--dataset`` is not given.
    noise_multiplier_option: the option holding the noise multiplier z that the run
      may calibrate to ``--target-epsilon`` (None: the algorithm sets its noise itself,
      or adds none).
    default_noise_multiplier: z when that option and ``--target-epsilon`` are not
      given.
    default_target_epsilon: instead of a default z, the epsilon z is calibrated to
      when neither the option nor ``--target-epsilon`` is given (None: use
      ``default_noise_multiplier``).
    function: the plain functional builder (``fn(model, data, **kwargs) ->
      Algorithm``) for researchers' own code.
    metric_labels: ``{field: (kind, why)}``: the disclosure label
      (`fedjax_dp.privacy.disclosure`: ``"public"``, ``"dp"`` or ``"diagnostic"``) of
      every field the algorithm's controller adds to metrics.jsonl.
    summary_labels: ``{field: (kind, why)}``: the disclosure label of every field its
      `summary_fields` adds to summary.json (``--dp-metrics-only`` drops the
      diagnostic ones; an unlabelled field is treated as a diagnostic, with a
      warning).
    from_test_metrics: those of its fields computed from the test metrics (they are
      diagnostics when the test set is the clients' own data).
  """
  name: ClassVar[str]
  description: ClassVar[str] = ""
  Options: ClassVar[type]
  default_dataset: ClassVar[str] = "har"
  noise_multiplier_option: ClassVar[Optional[str]] = None
  default_noise_multiplier: ClassVar[Optional[float]] = None
  default_target_epsilon: ClassVar[Optional[float]] = None
  function: ClassVar[Any] = None
  metric_labels: ClassVar[Dict[str, Tuple[str, str]]] = {}
  summary_labels: ClassVar[Dict[str, Tuple[str, str]]] = {}
  from_test_metrics: ClassVar[Tuple[str, ...]] = ()
  #: Why ``--canaries`` is refused for this algorithm (None: its `build` passes the
  #: run's `fedjax_dp.auditing.one_run.CanaryPlan` on; `canary_plan`).
  canaries_refused: ClassVar[Optional[str]] = (
      "its round is not wired for canary clients (fedjax_dp.algorithms.canaries hosts "
      "them in DP-FedAvg, DP-FedSGD and DP-FedProx)")

  def validate(self, options, run) -> None:
    """Checks ``options`` (and their fit with the `RunConfig` ``run``) before any data
    is loaded. The default checks every ``Literal`` choice.

    Raises:
      FedJaxDpError: naming the option (its ``option`` attribute set).
    """
    check_choices(options)

  def prepare(self, options, run, data) -> Prepared:
    """The data the run trains on, from the loaded dataset ``data`` (default: itself)."""
    return Prepared(data)

  def model_spec(self, options, run) -> ModelSpec:
    """The default model (`ModelSpec`) when ``--model`` is not given."""
    return ModelSpec()

  def build(self, setup: Setup) -> Algorithm:
    """The algorithm for ``setup``; with a ``noise_multiplier_option`` whose value is
    None it is built with a placeholder and the run sets z by `with_noise_multiplier`.

    Raises:
      FedJaxDpError: invalid options, before anything is compiled.
    """
    raise NotImplementedError

  def with_noise_multiplier(self, alg: Algorithm, z) -> Algorithm:
    """``alg`` with the noise-multiplier hyper-parameter ``z`` (a float, calibrated or
    resumed). Default: ``RoundHParams.noise_multiplier`` (user-level algorithms)."""
    return dataclasses.replace(
        alg, hparams=alg.hparams._replace(noise_multiplier=z),
        config={**alg.config, "noise_multiplier": _plain(z)})

  def calibrates(self, options) -> bool:
    """Whether a run with ``options`` adds noise whose multiplier may be calibrated
    (`default_target_epsilon` applies only then). Default: True."""
    return True

  def evaluator(self, alg: Algorithm, setup: Setup) -> Optional[DeviceEvaluator]:
    """The run's evaluation inside the compiled rounds: a
    `fedjax_dp.federated.driver.DeviceEvaluator` whose ``names`` start with ``"loss"``
    and ``"accuracy"`` (records get ``test_<name>``; the first two are the run's test
    loss and accuracy), e.g. personalised accuracy of clients after adaptation; None
    (default): the dataset's central test set (or the clients' data without one)."""
    return None

  def controller(self, alg: Algorithm, setup: Setup, eval_every: int) -> Controller:
    """The run's host-side `Controller` (default: constant hyper-parameters, over the
    data phases if any)."""
    return Controller(alg, eval_every, setup.phases)

  def summary_fields(self, alg: Algorithm, setup: Setup, controller: Controller,
                     records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Fields the algorithm adds to summary.json, from the records of the rounds
    run (every field of each record, 1-based ``round``)."""
    return {}

  def describe(self, summary: Dict[str, Any]) -> List[str]:
    """Extra lines the command line prints under the result (from summary.json)."""
    return []

  def schedule_bounds(self) -> Mapping[str, ScheduleBound]:
    """The allowed values of the algorithm's own per-round hyper-parameter fields
    (those of its ``hparams`` that are not `fedjax_dp.federated.round.RoundHParams` or
    `fedjax_dp.federated.client.ClientHParams` fields, which the engine bounds), by
    field name: ``{field: fedjax_dp.federated.driver.ScheduleBound}`` (e.g.
    ``driver.PROBABILITY`` for a sampling rate). The run checks every round's schedule
    against them with the engine's (`fedjax_dp.federated.driver.check_schedule`), before
    anything is compiled; a field named nowhere need only be finite. Naming an engine
    field raises FedJaxDpError there. Default: none."""
    return {}

  def audit_targets(self) -> Sequence["Target"]:
    """Its canary-audit targets (`fedjax_dp.algorithms.audit_common.Target`: the
    mechanism, the deliberate breaks that re-introduce known bugs, the two-world
    `fedjax_dp.auditing.Setup` of each), which ``fedjax-dp audit --algorithm NAME`` and
    the audit tests run (`fedjax_dp.algorithms.audit_targets` collects them from the
    registry). A private algorithm has at least one, each with the breaks ``"none"``
    and ``"noise-half"``; targets are built only when audited, so import the
    algorithm's ``audit`` module inside this method. Default: none (non-private)."""
    return ()

  def test_config(self, model, federated_data) -> Optional[SmokeConfig]:
    """The configuration of the shared algorithm tests (`SmokeConfig`) for the
    `fedjax_dp.models.Model` ``model`` on the `fedjax_dp.data.FederatedData`
    ``federated_data`` (the tests' small synthetic population), or None (default): a
    registered algorithm without one fails those tests, which ask every algorithm."""
    return None

  def tiny_run_options(self) -> Optional[Dict[str, Any]]:
    """A 2-round ``fedjax-dp run`` of this algorithm on the smallest data it takes, as
    `fedjax_dp.runs.RunConfig` keys (without ``algorithm`` and ``out``; start from
    `TINY_SYNTHETIC_RUN` where the synthetic data fits): the shared run-level tests
    (every summary field labelled, ``--dp-metrics-only``) run it. None (default): a
    registered algorithm without one fails those tests."""
    return None


#: The options of a 2-round run on 12 synthetic clients with a small MLP
#: (`FederatedAlgorithm.tiny_run_options` starts from it).
TINY_SYNTHETIC_RUN: Dict[str, Any] = dict(
    dataset="synthetic", num_clients=12, model="mlp", hidden="8", rounds=2, eval_every=2,
    delta=1e-3)


def _plain(z):
  return np.asarray(z).tolist() if np.ndim(z) else float(z)
