"""The main job: one configured training run, end to end, with outputs on disk.

`RunConfig` holds every option of ``fedjax-dp run``; `run` loads the data, builds the
model and algorithm, runs the jitted rounds block by block, composes each round's
DpEvent in the privacy ledger, streams ``metrics.jsonl`` (one JSON object per round,
flushed as rounds finish), and writes ``summary.json`` and ``curves.png``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import os
import shutil
import time
import tomllib
import typing
from typing import Any, Dict, List, Mapping, Optional

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import algorithms as algos
from fedjax_dp.algorithms.amplitude_varying import schedules
from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.federated import sharding
from fedjax_dp.federated import (PopulationData, constant_schedule, make_block_fn,
                                 make_device_evaluator,
                                 run_rounds)
from fedjax_dp.interrupts import GracefulInterrupts, RunInterrupted
from fedjax_dp.models import create_model
from fedjax_dp.privacy import accountants, calibration, disclosure
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_delta, check_epsilon,
                                  check_int, check_non_negative, check_positive,
                                  check_probability)

_log = logging.getLogger(__name__)

CLIENT_OPTIMIZERS = ("sgd", "momentum", "adam")
SAMPLERS = ("poisson", "fixed_size")

#: Version of the records in metrics.jsonl and checkpoints. 2: ``noise_multiplier`` is
#: ``noise_stddev / sensitivity`` under the record's ``neighboring_relation`` (fixed-size
#: cohorts report half of what version 1 did); checkpoints of version 1 are refused.
METRICS_FORMAT = 2

DEFAULT_MODELS = {"adult": "linear", "har": "har_cnn", "fashion_mnist": "cnn", "mnist": "cnn", "emnist": "cnn",
                  "cifar10": "cnn", "synthetic": "mlp"}


@dataclasses.dataclass
class RunConfig:
  """Every option of ``fedjax-dp run`` (defaults: the README's main job).

  Privacy-relevant fields: ``noise_multiplier`` (z) or ``target_epsilon`` (then z is
  calibrated with the ledger's accountant for ``rounds`` rounds), ``delta`` and
  ``clip_norm``. For user-level algorithms z and the clip norm apply to each client's
  update; for ``dp_fedavg_record_level`` they apply to each example's gradient in local
  DP-SGD, whose example sampling rate is ``record_sampling_rate``.

  ``batch_size`` None means the algorithm's default (16; full batch for
  ``amplitude_varying``). ``hidden`` ("32" or "200,200") and ``activation`` shape the
  MLP. ``amplitude_varying`` (paper 004) reads ``target_epsilon`` as the epsilon of
  its eq. (8), ``vartheta``, ``clip_norm`` as the parameter clip C, ``local_steps`` as
  tau (default 5), ``clients_per_round`` as K (default q N), ``mechanism``
  (gaussian, laplace, none) with ``laplace_mode``, and online refinement
  ``alpha_d`` with ``refinement_mode`` (paper, exact_budget).

  ``noise_placement="local"`` makes every sampled client of dp_fedavg / dp_fedsgd add its
  own noise; ``client_noise_multipliers`` (a path to a ``.npy``, ``.json`` or text file
  with one z per client) gives each client its own noise multiplier (local placement
  only; every client is then accounted with its own, and the summary reports the worst
  client's epsilon and each client's). ``sensitivity_mode`` (``paper`` or
  ``clipped_gradients`` with ``grad_clip_norm``) selects how papers 000 and 004 bound
  an upload's sensitivity. ``dp_metrics_only`` writes only the metrics released under
  DP or public (`fedjax_dp.privacy.disclosure`).

  Outputs go to ``out``; a folder that holds an earlier run is never overwritten unless
  ``overwrite``: the run writes to ``<out>-2`` (``-3``, ...) instead and says so.
  ``resume`` continues the run in that folder from its newest checkpoint with its saved
  configuration; ``resume_rounds`` takes it to that many rounds in all (more than it
  has done: e.g. extending a finished run), keeping its noise multiplier.

  ``padpfl`` (paper 000) builds the heterogeneity ``scenario`` (1-4 of its Table I:
  60 clients in three parts, salt-and-pepper noise per part or unequal sizes) from
  ``dataset`` (an image dataset; default model: an MLP with ``hidden`` units, 64 by
  default), and reads ``impact_factors`` ("personalized": the scenario's own assignment;
  "equal", "data_size", a ratio such as "0-1-2", or "0-1-2>2-1-0" for the scenario-4
  switch after round 10), ``target_epsilon`` and ``delta`` as the calibration target
  of its eqs. (8) and (13), ``clip_norm`` as the weight bound B, ``exposures`` as R,
  ``prox_mu`` as FedProx's mu, ``local_steps`` as tau (default 10, full batch unless
  ``batch_size``) and ``mechanism`` (gaussian, or none: the non-private mode).
  """
  algorithm: str = "dp_fedavg"
  dataset: str = "har"
  partition: Optional[str] = None
  num_clients: Optional[int] = None
  data_dir: Optional[str] = None
  model: Optional[str] = None
  rounds: int = 50
  clients_per_round: Optional[int] = None
  sampling_rate: Optional[float] = 0.5
  sampler: str = "poisson"
  local_epochs: Optional[int] = 1
  local_steps: Optional[int] = None
  batch_size: Optional[int] = None
  client_optimizer: str = "sgd"
  client_learning_rate: float = 0.1
  server_optimizer: str = "fedavg"
  server_learning_rate: float = 1.0
  noise_multiplier: Optional[float] = 2.0
  target_epsilon: Optional[float] = None
  delta: float = 1e-3
  clip_norm: float = 0.5
  record_sampling_rate: Optional[float] = None
  accountant: str = "rdp"
  eval_every: int = 5
  seed: int = 0
  devices: Optional[int] = None
  chunk_size: Optional[int] = None
  resume: Optional[str] = None
  resume_rounds: Optional[int] = None
  out: Optional[str] = "runs/latest"
  overwrite: bool = False
  verify_checksums: bool = True
  hidden: Optional[str] = None
  activation: str = "relu"
  vartheta: float = 1.0
  mechanism: str = "gaussian"
  laplace_mode: str = "pure_dp_split"
  alpha_d: Optional[float] = None
  refinement_mode: str = "paper"
  scenario: int = 1
  impact_factors: str = "personalized"
  exposures: int = 1
  prox_mu: float = 0.01
  noise_placement: str = "central"
  client_noise_multipliers: Optional[str] = None
  sensitivity_mode: str = "paper"
  grad_clip_norm: Optional[float] = None
  dp_metrics_only: bool = False

  @classmethod
  def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "RunConfig":
    """A `RunConfig` from a mapping of option names to values (e.g. a config file).

    Keys are the field names above; dashes may stand for underscores, and the
    command-line spellings ``client_lr`` / ``server_lr`` are accepted. Fields not given
    keep their defaults. The result is not validated yet (call `validate`).

    Args:
      values: option name -> value (JSON/TOML types: int, float, str, bool or None).
      source: what the mapping came from, for error messages (e.g. a file name).

    Raises:
      FedJaxDpError: an unknown key (with the closest known one and the full list), or
        a value of the wrong type (naming the key, the type found and the one allowed).
    """
    if not isinstance(values, Mapping):
      raise FedJaxDpError(f"{source}: expected a table of options, got "
                          f"{type(values).__name__}.")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    out = {}
    for raw_key, value in values.items():
      key = _CONFIG_ALIASES.get(str(raw_key).replace("-", "_"),
                                str(raw_key).replace("-", "_"))
      if key not in fields:
        close = difflib.get_close_matches(key, fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise FedJaxDpError(
            f"{source}: unknown key {raw_key!r}{hint}. Allowed keys: {', '.join(fields)}.")
      if key in out:
        raise FedJaxDpError(f"{source}: option {key!r} is given twice.")
      _check_config_type(source, key, value, hints[key])
      out[key] = float(value) if hints[key] in (float, Optional[float]) and \
          value is not None else value
    return cls(**out)

  def validate(self) -> "RunConfig":
    """Checks every field (before any data is loaded or anything compiled).

    Raises:
      FedJaxDpError: naming the option, the value and what is allowed.
    """
    from fedjax_dp.data import partition as partition_lib
    from fedjax_dp.federated.server import SERVER_OPTIMIZERS
    from fedjax_dp.models import MODEL_NAMES
    check_choice("algorithm", self.algorithm, sorted(algos.ALGORITHMS))
    if not isinstance(self.dataset, str) or not self.dataset:
      raise FedJaxDpError(f"dataset must be a dataset name, got {self.dataset!r}.")
    if self.partition is not None:
      check_choice("partition", self.partition, partition_lib.METHODS)
    if self.model is not None:
      check_choice("model", self.model, MODEL_NAMES)
    check_choice("sampler", self.sampler, SAMPLERS)
    check_choice("client_optimizer", self.client_optimizer, CLIENT_OPTIMIZERS)
    check_choice("server_optimizer", self.server_optimizer, SERVER_OPTIMIZERS)
    check_choice("accountant", self.accountant, ("rdp", "pld"))
    if self.algorithm == "amplitude_varying":  # K of U without replacement: RDP
      accountants.check_accountant_supports(self.accountant, "fixed_size")
    check_choice("noise_placement", self.noise_placement, ("central", "local"))
    check_choice("sensitivity_mode", self.sensitivity_mode, ("paper", "clipped_gradients"))
    if self.grad_clip_norm is not None:
      check_positive("grad_clip_norm", self.grad_clip_norm)
    if (self.sensitivity_mode == "clipped_gradients") != (self.grad_clip_norm is not None):
      raise FedJaxDpError("sensitivity_mode='clipped_gradients' and grad_clip_norm go "
                          "together: give both (G, the per-example gradient clip norm) "
                          "or neither.")
    if self.client_noise_multipliers is not None:
      if self.noise_placement != "local":
        raise FedJaxDpError("client_noise_multipliers needs noise_placement='local' "
                            "(central noise is one draw for the whole cohort).")
      if not os.path.isfile(os.path.expanduser(self.client_noise_multipliers)):
        raise FedJaxDpError(f"client_noise_multipliers must be a file with one noise "
                            f"multiplier per client, got {self.client_noise_multipliers!r}"
                            " (not found).")
    if not isinstance(self.dp_metrics_only, bool):
      raise FedJaxDpError(f"dp_metrics_only must be True or False, got "
                          f"{self.dp_metrics_only!r}.")
    check_int("rounds", self.rounds, minimum=1)
    if self.batch_size is not None:
      check_int("batch_size", self.batch_size, minimum=1)
    if self.hidden is not None:
      _parse_hidden(self.hidden)
    check_choice("activation", self.activation, ("relu", "linear"))
    check_positive("vartheta", self.vartheta)
    check_choice("mechanism", self.mechanism, ("gaussian", "laplace", "none"))
    check_choice("laplace_mode", self.laplace_mode, ("pure_dp_split", "variance_matched"))
    check_choice("refinement_mode", self.refinement_mode, ("paper", "exact_budget"))
    if self.alpha_d is not None and not (
        isinstance(self.alpha_d, (int, float)) and 0.0 < self.alpha_d < 1.0):
      raise FedJaxDpError(f"alpha_d must be in (0, 1), got {self.alpha_d!r}.")
    if self.algorithm == "amplitude_varying":
      if self.mechanism != "none" and self.target_epsilon is None:
        raise FedJaxDpError("amplitude_varying needs target_epsilon (--epsilon), the "
                            "epsilon its eq. (8) calibrates the noise schedule for.")
      if self.resume is None and self.alpha_d is not None and self.mechanism != "gaussian":
        raise FedJaxDpError("alpha_d (online refinement) needs mechanism='gaussian'.")
    check_int("scenario", self.scenario, minimum=1, maximum=4)
    check_int("exposures", self.exposures, minimum=1)
    check_non_negative("prox_mu", self.prox_mu)
    _check_impact_spec(self.impact_factors)
    if self.algorithm == "padpfl":
      if self.mechanism == "laplace":
        raise FedJaxDpError("padpfl's mechanism must be 'gaussian' or 'none' (the "
                            "non-private mode), got 'laplace'.")
      if self.mechanism != "none" and self.target_epsilon is None:
        raise FedJaxDpError("padpfl needs target_epsilon (--epsilon), the epsilon its "
                            "eqs. (8) and (13) calibrate the noise for.")
      if self.exposures > self.rounds:
        raise FedJaxDpError(f"exposures (R) must be <= rounds (T) = {self.rounds}, got "
                            f"{self.exposures}.")
    check_int("eval_every", self.eval_every, minimum=1)
    if self.devices is not None:
      check_int("devices", self.devices, minimum=1)
    if self.chunk_size is not None:
      check_int("chunk_size", self.chunk_size, minimum=1)
    check_int("seed", self.seed, minimum=0, maximum=2**32 - 1)
    check_choice("accountant", self.accountant, ("rdp", "pld"))
    check_delta(self.delta)
    check_positive("clip_norm", self.clip_norm)
    check_positive("client_learning_rate", self.client_learning_rate)
    check_positive("server_learning_rate", self.server_learning_rate)
    if self.clients_per_round is not None and self.sampling_rate is not None:
      raise FedJaxDpError(
          "give either clients_per_round or sampling_rate, not both "
          f"(got {self.clients_per_round} and {self.sampling_rate}).")
    if self.clients_per_round is None and self.sampling_rate is None:
      raise FedJaxDpError("give one of clients_per_round or sampling_rate.")
    if self.sampling_rate is not None:
      check_probability("sampling_rate", self.sampling_rate)
    if self.clients_per_round is not None:
      check_int("clients_per_round", self.clients_per_round, minimum=1)
    if self.local_steps is not None:
      check_int("local_steps", self.local_steps, minimum=1)
    elif self.local_epochs is not None:
      check_int("local_epochs", self.local_epochs, minimum=1)
    else:
      raise FedJaxDpError("give local_epochs or local_steps.")
    if self.target_epsilon is not None:
      check_epsilon(self.target_epsilon, "target_epsilon")
    if self.noise_multiplier is not None:
      check_non_negative("noise_multiplier", self.noise_multiplier)
    elif self.target_epsilon is None and self.algorithm != "fedavg":
      raise FedJaxDpError("give noise_multiplier or target_epsilon.")
    if self.record_sampling_rate is not None:
      check_probability("record_sampling_rate", self.record_sampling_rate)
    if self.num_clients is not None:
      check_int("num_clients", self.num_clients, minimum=1)
    if self.data_dir is not None and not os.path.isdir(os.path.expanduser(self.data_dir)):
      raise FedJaxDpError(f"data_dir must be an existing directory, got {self.data_dir!r} "
                          "(it would silently be skipped in the search for the data).")
    if self.resume is not None and not os.path.isdir(
        os.path.join(os.path.expanduser(self.resume), "checkpoints")):
      raise FedJaxDpError(f"resume must be the output folder of an earlier run (one that "
                          f"holds checkpoints/), got {self.resume!r}.")
    if self.resume_rounds is not None:
      check_int("resume_rounds", self.resume_rounds, minimum=1)
      if self.resume is None:
        raise FedJaxDpError("resume_rounds (--rounds with --resume) needs resume: it "
                            "continues an earlier run to that many rounds in all.")
    if not isinstance(self.overwrite, bool):
      raise FedJaxDpError(f"overwrite must be True or False, got {self.overwrite!r}.")
    if not isinstance(self.verify_checksums, bool):
      raise FedJaxDpError(f"verify_checksums must be True or False, got "
                          f"{self.verify_checksums!r}.")
    return self


def _check_impact_spec(spec: Any) -> None:
  """Syntax of ``impact_factors``: "personalized" or an `impact_factors.check_spec`."""
  from fedjax_dp.algorithms.padpfl import impact_factors as impact
  if not (isinstance(spec, str) and spec.strip().lower() == "personalized"):
    impact.check_spec(spec)


def _parse_hidden(text: str) -> tuple:
  """``"32"`` or ``"200,200"`` -> (32,) / (200, 200)."""
  try:
    widths = tuple(int(w) for w in str(text).split(","))
  except ValueError:
    widths = ()
  if not widths or min(widths) < 1:
    raise FedJaxDpError(f"hidden must be comma-separated positive layer widths such as "
                        f"'32' or '200,200', got {text!r}.")
  return widths


_CONFIG_ALIASES = {"client_lr": "client_learning_rate", "server_lr": "server_learning_rate"}


def _check_config_type(source: str, key: str, value: Any, hint: Any) -> None:
  """Raises FedJaxDpError unless ``value`` has the type ``hint`` of field ``key``."""
  args = typing.get_args(hint)
  optional = type(None) in args
  base = next((a for a in args if a is not type(None)), hint) if args else hint
  if value is None:
    if optional:
      return
    ok = False
  elif base is bool:
    ok = isinstance(value, bool)
  elif base is int:
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif base is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  else:
    ok = isinstance(value, base)
  if not ok:
    allowed = base.__name__ + (" or null" if optional else "")
    raise FedJaxDpError(f"{source}: option {key!r} must be {allowed}, got "
                        f"{type(value).__name__} {value!r}.")


def _no_duplicate_keys(pairs):
  seen = {}
  for k, v in pairs:
    if k in seen:
      raise FedJaxDpError(f"option {k!r} is given twice.")
    seen[k] = v
  return seen


def load_config_file(path: str) -> Dict[str, Any]:
  """Reads the options of a run from a ``.json`` or ``.toml`` file.

  The file holds one table of `RunConfig` options (``{"rounds": 100, "clip_norm":
  0.5}``; TOML ``rounds = 100``). A ``summary.json`` written by an earlier run is
  accepted too: its ``"config"`` entry is used, so a run can be repeated exactly (but
  not its ``out`` and ``resume``: the repeat does not overwrite the original's files).

  Returns:
    the option table (keys not yet checked; `RunConfig.from_dict` does that).

  Raises:
    FedJaxDpError: the file is missing or unreadable, has another extension, is not
      valid JSON/TOML (with the line), or does not hold a table.
  """
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".json", ".toml"):
    raise FedJaxDpError(f"config file {path!r}: the name must end in .json or .toml.")
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise FedJaxDpError(f"config file {path!r} cannot be read: {e.strerror}.") from e
  try:
    if ext == ".toml":
      values = tomllib.loads(raw.decode("utf-8"))
    else:
      values = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
  except UnicodeDecodeError as e:
    raise FedJaxDpError(f"config file {path!r} is not UTF-8 text ({e.reason}).") from e
  except tomllib.TOMLDecodeError as e:
    raise FedJaxDpError(f"config file {path!r} is not valid TOML: {e}.") from e
  except json.JSONDecodeError as e:
    raise FedJaxDpError(f"config file {path!r} is not valid JSON: {e.msg} at line "
                        f"{e.lineno}, column {e.colno}.") from e
  except FedJaxDpError as e:
    raise FedJaxDpError(f"config file {path!r}: {e}") from e
  if not isinstance(values, dict):
    raise FedJaxDpError(f"config file {path!r} must hold a table of options, got "
                        f"{type(values).__name__}.")
  if isinstance(values.get("config"), dict) and "epsilon" in values:  # a summary.json
    # Its output folder is not reused: repeating a run must not overwrite the original.
    values = {k: v for k, v in values["config"].items()
              if k not in ("out", "resume", "resume_rounds", "overwrite")}
  return values


def json_safe(v):
  """``v`` with non-finite floats as None and numpy scalars as Python numbers (strict
  JSON has no inf/NaN)."""
  if isinstance(v, float) and not math.isfinite(v):
    return None
  if isinstance(v, dict):
    return {k: json_safe(x) for k, x in v.items()}
  if isinstance(v, (list, tuple)):
    return [json_safe(x) for x in v]
  if isinstance(v, (np.floating, np.integer)):
    return json_safe(v.item())
  return v


def run_mesh(cfg: RunConfig):
  """The client mesh over ``cfg.devices`` local devices (default all), or None for one.

  Raises:
    FedJaxDpError: more devices asked for than there are.
  """
  local = jax.local_devices()
  n = len(local) if cfg.devices is None else cfg.devices
  if n > len(local):
    raise FedJaxDpError(
        f"devices must be at most the {len(local)} local device(s), got {n} (on a CPU, "
        "start with XLA_FLAGS=--xla_force_host_platform_device_count=N).")
  return sharding.client_mesh(local[:n]) if n > 1 else None


def build_algorithm(cfg: RunConfig, model, data, noise_multiplier: float, mesh=None,
                    part_of_client=None):
  """The `Algorithm` for ``cfg`` on ``data`` (``noise_multiplier`` already resolved;
  ``part_of_client`` ``[N]``: padpfl's client parts, from `padpfl_scenario`)."""
  paper_sensitivity = dict(sensitivity_mode=cfg.sensitivity_mode,
                           grad_clip_norm=cfg.grad_clip_norm)
  if cfg.algorithm == "padpfl":
    return algos.padpfl.padpfl(
        model, data, impact_factors=padpfl_impact_factors(cfg, data, part_of_client),
        epsilon=cfg.target_epsilon or 1.0,
        delta=cfg.delta, rounds=cfg.rounds, exposures=cfg.exposures, clip_bound=cfg.clip_norm,
        learning_rate=cfg.client_learning_rate, local_steps=cfg.local_steps or 10,
        batch_size=cfg.batch_size, prox_mu=cfg.prox_mu, private=cfg.mechanism != "none",
        chunk_size=cfg.chunk_size, mesh=mesh, **paper_sensitivity)
  if cfg.algorithm == "amplitude_varying":
    k = cfg.clients_per_round or max(1, round(cfg.sampling_rate * data.num_clients))
    return algos.amplitude_varying.amplitude_varying(
        model, data, epsilon=cfg.target_epsilon or 1.0, delta=cfg.delta,
        vartheta=cfg.vartheta, rounds=cfg.rounds, clients_per_round=k,
        local_steps=cfg.local_steps or 5, learning_rate=cfg.client_learning_rate,
        clip_norm=cfg.clip_norm, mechanism=cfg.mechanism, laplace_mode=cfg.laplace_mode,
        batch_size=cfg.batch_size, chunk_size=cfg.chunk_size, mesh=mesh,
        **paper_sensitivity)
  common = dict(chunk_size=cfg.chunk_size, mesh=mesh,
                clients_per_round=cfg.clients_per_round, sampling_rate=cfg.sampling_rate,
                sampler=cfg.sampler, local_epochs=None if cfg.local_steps else cfg.local_epochs,
                local_steps=cfg.local_steps, batch_size=cfg.batch_size or 16,
                client_optimizer=cfg.client_optimizer,
                client_learning_rate=cfg.client_learning_rate,
                server_optimizer=cfg.server_optimizer,
                server_learning_rate=cfg.server_learning_rate)
  if cfg.algorithm in ("dp_fedavg", "dp_fedsgd"):
    return algos.ALGORITHMS[cfg.algorithm](model, data, clip_norm=cfg.clip_norm,
                                           noise_multiplier=noise_multiplier,
                                           noise_placement=cfg.noise_placement, **common)
  if cfg.algorithm == "dp_fedavg_record_level":
    return algos.dp_fedavg_record_level(
        model, data, record_clip_norm=cfg.clip_norm,
        record_noise_multiplier=noise_multiplier,
        record_sampling_rate=cfg.record_sampling_rate, **common)
  return algos.fedavg(model, data, **common)


def padpfl_scenario(cfg: RunConfig, base):
  """Paper 000's heterogeneity ``cfg.scenario`` built from ``base``'s training images
  (`fedjax_dp.algorithms.padpfl.scenarios.build_scenario`: random parts, Dirichlet(1) label
  skew with exact client sizes, salt-and-pepper per part; the test set stays clean).
  A subset dataset (the 5,000-image MNIST) gets the sizes scaled by 0.4 (note 000,
  section 6.4).

  Raises:
    FedJaxDpError: a dataset without images or too small for the scenario.
  """
  from fedjax_dp.algorithms.padpfl import scenarios
  if len(base.feature_shape) not in (2, 3):
    raise FedJaxDpError(f"padpfl scenarios need an image dataset (fashion_mnist, mnist), "
                        f"got {base.name!r} with features {base.feature_shape}.")
  x, y = base.x[base.example_mask], base.y[base.example_mask]
  return scenarios.build_scenario(
      cfg.scenario, x, y, seed=cfg.seed, size_scale=0.4 if base.is_subset else 1.0,
      num_classes=base.num_classes, test_x=base.test_x, test_y=base.test_y,
      name=f"{base.name} (PADPFL scenario {cfg.scenario})", source=base.source,
      is_subset=base.is_subset)


def padpfl_impact_factors(cfg: RunConfig, data, part_of_client) -> np.ndarray:
  """p (``[N]``) or the schedule p^(t) (``[T, N]``) named by ``cfg.impact_factors`` for
  the scenario ``data`` (a `FederatedData` from `padpfl_scenario`) with clients in
  parts ``part_of_client`` ``[N]``: "personalized" is the scenario's own assignment of
  the paper's private-mode figure (scenario 4: 0-1-2, then 2-1-0 after round 10)."""
  from fedjax_dp.algorithms.padpfl import scenarios
  from fedjax_dp.algorithms.padpfl import impact_factors as impact
  parts = np.asarray(part_of_client)
  sc = scenarios.SCENARIOS[cfg.scenario]
  spec = cfg.impact_factors.strip().lower()
  if spec == "personalized":
    phases = [(start, r) for start, r in sc.impact_phases if start <= cfg.rounds]
    if len(phases) == 1:
      return impact.from_part_ratios(phases[0][1], parts)
    return impact.piecewise_schedule(
        [(start, impact.from_part_ratios(r, parts)) for start, r in phases], cfg.rounds)
  return impact.from_spec(spec, parts, cfg.rounds, counts=data.counts)


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
                        f"{e}.") from e
  z = np.asarray(z, np.float64).reshape(-1)
  if z.shape != (num_clients,) or not np.all(np.isfinite(z)) or np.any(z < 0):
    raise FedJaxDpError(f"client_noise_multipliers must hold {num_clients} finite values "
                        f">= 0 (one per client), got {z.size} values in {path!r}.")
  return z.astype(np.float32)


def resolve_noise_multiplier(cfg: RunConfig, data, probe):
  """z (a float, or float32 ``[N]`` per client) from the config, or calibrated so that
  ``rounds`` rounds spend ``target_epsilon``.

  ``probe`` is an `Algorithm` built with a placeholder z; its `PrivacySpec` maps the
  noise-multiplier hyper-parameter to the DpEvent its rounds release
  (``round_event``), so calibration inverts the algorithm's own accounting. Returns
  None for algorithms that calibrate their noise themselves (papers 000 and 004) or
  add none.
  """
  if cfg.algorithm in ("fedavg", "amplitude_varying", "padpfl"):
    return None
  if cfg.client_noise_multipliers is not None:
    if cfg.noise_multiplier is None:
      raise FedJaxDpError("target_epsilon calibration is not available with "
                          "client_noise_multipliers (each client has its own); give the "
                          "noise multipliers, and target_epsilon only as a budget guard.")
    return load_client_noise_multipliers(cfg.client_noise_multipliers, data.num_clients)
  if cfg.noise_multiplier is not None:  # with target_epsilon too: the budget guard
    return float(cfg.noise_multiplier)
  spec = probe.privacy
  return calibration.calibrate(
      lambda z: dp_accounting.SelfComposedDpEvent(spec.round_event(z), cfg.rounds),
      cfg.target_epsilon, cfg.delta, cfg.accountant)


def budget_rounds(cfg: RunConfig, alg, z) -> int:
  """Budget guard: how many of ``cfg.rounds`` rounds fit in ``cfg.target_epsilon``.

  A fresh ledger like the run's (``alg.privacy.make_ledger``) records the planned
  rounds' events (the noise-multiplier hyper-parameter ``z``, a float or a per-client
  ``[N]`` vector, through the algorithm's `PrivacySpec`); training stops before the
  first round after which its epsilon (RDP, at ``cfg.delta``; the worst client's with
  per-client noise) would exceed the target. RDP is never below PLD, so the guard is
  conservative for either accountant.

  Raises:
    FedJaxDpError: even the first round would exceed the target.
  """
  spec = alg.privacy
  trial = spec.make_ledger(cfg.delta)
  z_event = np.asarray(z, np.float64) * spec.event_scale
  zs = np.broadcast_to(z_event, (cfg.rounds,) + z_event.shape)
  eps = trial.record_many(zs, np.full(cfg.rounds, spec.sampling_rate),
                          np.full(cfg.rounds, spec.steps))
  allowed = int(np.sum(eps <= cfg.target_epsilon))  # eps grows with every round
  if allowed == 0:
    raise FedJaxDpError(
        f"target_epsilon={cfg.target_epsilon} is below the epsilon of a single round "
        f"({eps[0]:.4g} at delta={cfg.delta:g} with noise_multiplier "
        f"{np.min(np.asarray(z)):g}); raise it or the noise multiplier.")
  return allowed


def _plot(records: List[Dict[str, Any]], path: str, title: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  ev = [r for r in records if "test_accuracy" in r]
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
  a1.plot([r["round"] + 1 for r in ev], [r["test_accuracy"] for r in ev], "o-")
  a1.set_xlabel("round")
  a1.set_ylabel("test accuracy")
  a1.grid(alpha=0.3)
  eps = [(r["round"] + 1, r["epsilon"]) for r in records
         if r.get("epsilon") is not None and math.isfinite(r["epsilon"])]
  if eps:
    a2.plot(*zip(*eps))
  else:
    a2.text(0.5, 0.5, "non-private (epsilon = inf)", ha="center", transform=a2.transAxes)
  a2.set_xlabel("round")
  a2.set_ylabel("epsilon (RDP)")
  a2.grid(alpha=0.3)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


@dataclasses.dataclass
class RunResult:
  """What `run` returns: final server state, per-round records, the summary, the ledger."""
  state: Any
  records: List[Dict[str, Any]]
  summary: Dict[str, Any]
  ledger: Optional[PrivacyLedger]


def run(cfg: RunConfig, progress: bool = True, data=None) -> RunResult:
  """Runs one training job and writes ``metrics.jsonl``, ``summary.json``, ``curves.png``
  into ``cfg.out`` (unless ``cfg.out`` is None).

  Args:
    cfg: a `RunConfig` (validated here, before any loading or compilation).
    progress: show a tqdm progress bar with loss, accuracy and epsilon.
    data: an already loaded `FederatedData` (skips loading ``cfg.dataset``).

  Ctrl-C (SIGINT) and SIGTERM stop training at a safe point (never inside a
  checkpoint write or a metrics line): the run goes back to its newest checkpoint,
  rewrites metrics.jsonl to its rounds and writes summary.json (``interrupted`` says
  so and how to resume) and curves.png for them. A fresh run checkpoints its initial
  state, so a run stopped at any time after its output folder exists can be resumed.

  Returns:
    A `RunResult`.

  Raises:
    FedJaxDpError: invalid configuration; `DatasetNotAvailableError` when the data
      is missing (its message says how to get it).
  """
  with GracefulInterrupts() as interrupts:
    return _run(cfg, progress, data, interrupts)


def _run(cfg: RunConfig, progress: bool, data, interrupts: GracefulInterrupts
         ) -> RunResult:
  """`run` with its signal handlers installed (``interrupts``)."""
  from fedjax_dp.data import load_dataset  # deferred: keeps `import fedjax_dp` light
  cfg.validate()
  t_start = time.perf_counter()
  checkpointer, saved = None, None
  if cfg.resume:
    # The configuration comes from the checkpoint: the run continues as it started.
    checkpointer = RunCheckpointer(os.path.join(cfg.resume, "checkpoints"))
    saved = checkpointer.restore_meta()
    if saved.get("metrics_format") != METRICS_FORMAT:
      raise FedJaxDpError(
          f"resume: the checkpoint in {cfg.resume!r} was written by an earlier fedjax_dp "
          f"(metrics format {saved.get('metrics_format', 1)}, this one reads "
          f"{METRICS_FORMAT}), whose noise multipliers for fixed-size cohorts were not "
          "relative to the replace-one sensitivity; start a new run.")
    extend_to = cfg.resume_rounds
    cfg = RunConfig.from_dict({**saved["config"], "out": cfg.resume, "resume": None,
                               "resume_rounds": None, "overwrite": False},
                              source=f"checkpoint in {cfg.resume}").validate()
    if extend_to is not None:
      if extend_to <= saved["rounds_done"]:
        raise FedJaxDpError(f"resume_rounds (--rounds with --resume) must be more than the "
                            f"{saved['rounds_done']} rounds the run in {cfg.out!r} has "
                            f"done, got {extend_to}.")
      if "noise_multiplier_hparam" not in saved:
        raise FedJaxDpError(f"resume_rounds: the checkpoint in {cfg.out!r} does not record "
                            "the run's noise multiplier (an older fedjax_dp wrote it); "
                            "resume it without --rounds, or start a new run.")
  padpfl = cfg.algorithm == "padpfl"
  if data is None:
    data = load_dataset(cfg.dataset, partition=cfg.partition, num_clients=cfg.num_clients,
                        seed=cfg.seed, data_dir=cfg.data_dir,
                        verify_checksums=cfg.verify_checksums)
  scenario = None
  if padpfl:  # the scenario's 60 clients replace the dataset's partition
    scenario = padpfl_scenario(cfg, data)
    data = scenario.fd
  model_name = cfg.model or ("mlp" if padpfl else DEFAULT_MODELS.get(cfg.dataset, "mlp"))
  model_kw = {}
  if model_name == "mlp":
    model_kw = dict(activation=cfg.activation)
    if cfg.hidden is not None:
      model_kw["hidden"] = _parse_hidden(cfg.hidden)
    elif padpfl:
      model_kw["hidden"] = (64,)
  model = create_model(model_name, data.feature_shape, data.num_classes, **model_kw)
  mesh = run_mesh(cfg)
  parts = scenario.part_of_client if scenario is not None else None
  probe = build_algorithm(cfg, model, data, 1.0, mesh, parts)
  if saved is not None and "noise_multiplier_hparam" in saved:  # as the run started
    z = saved["noise_multiplier_hparam"]
    z = None if z is None else np.asarray(z, np.float32) if np.ndim(z) else float(z)
  else:
    z = resolve_noise_multiplier(cfg, data, probe)
  alg = (build_algorithm(cfg, model, data, z, mesh, parts)
         if z is not None and not (np.ndim(z) == 0 and z == 1.0) else probe)
  if saved is not None and extend_to is not None:
    # Extending must not change the rounds already run: refused where the algorithm's
    # hyper-parameters depend on the number of rounds (a noise schedule calibrated for
    # them, say).
    before, rounds_before = alg, cfg.rounds
    cfg = dataclasses.replace(cfg, rounds=extend_to)
    alg = build_algorithm(cfg, model, data, z if z is not None else 1.0, mesh, parts)
    changed = _rounds_dependent(before.config, alg.config)
    if changed:
      raise FedJaxDpError(
          f"resume_rounds: {alg.name}'s configuration depends on the number of rounds "
          f"({', '.join(changed)} change from {rounds_before} to {extend_to} rounds), so "
          "the rounds already run could not be continued as they were; start a new run "
          "with the rounds you want.")

  ledger = None
  # What fixes the DpEvent besides each round's (z, q, dp_steps): with these in every
  # record of metrics.jsonl a reader can recompute epsilon from that file alone.
  accounting_fields: Dict[str, Any] = {}
  if alg.privacy is not None:
    spec = alg.privacy
    if not spec.supports(cfg.accountant):
      raise FedJaxDpError(
          f"accountant must be 'rdp' for this run, got {cfg.accountant!r}: dp-accounting's "
          "PLD has no event for a fixed-size cohort smaller than the population (sampling "
          "without replacement).")
    ledger = spec.make_ledger(cfg.delta)
    accounting_fields = {"delta": cfg.delta, "sampler": spec.sampler,
                         "neighboring_relation": spec.relation, "privacy_unit": spec.unit,
                         "population_size": spec.population_size,
                         "cohort_size": spec.cohort_size}
    if spec.truncation is not None:
      accounting_fields.update(
          truncation_population_size=spec.truncation.population_size,
          truncation_cap=spec.truncation.cap,
          truncation_draws_per_step=spec.truncation.draws_per_step)
  planned = cfg.rounds
  paper004 = cfg.algorithm == "amplitude_varying"
  guarded = (ledger is not None and cfg.target_epsilon is not None and
             cfg.noise_multiplier is not None and not paper004 and not padpfl)
  if guarded:  # decided before anything is compiled or written
    planned = budget_rounds(cfg, alg, z)
  root = jax.random.key(cfg.seed)
  state = alg.init(jax.random.fold_in(root, 1 << 20))
  done_before = 0
  saved_records: List[Dict[str, Any]] = []
  if saved is not None:
    state, meta = checkpointer.restore(state)
    saved_records = meta["records"]
    done_before = int(meta["rounds_done"])
  pop = sharding.replicate(
      PopulationData(jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts)), mesh)
  if ledger is not None and saved_records:
    ledger = _restored_ledger(alg.privacy, cfg.delta, saved_records,
                              meta.get("per_client_ledger"))
  test_x = data.test_x if data.test_x is not None else data.x[data.example_mask]
  test_y = data.test_y if data.test_y is not None else data.y[data.example_mask]
  # HAR's test windows are the clients' own held-out data; without a test set the
  # training data is evaluated: then test metrics are diagnostics, not DP releases.
  labels = disclosure.labels_for_run(data.test_x is None or data.client_test_x is not None)

  def published(rec):
    """What metrics.jsonl gets: every labelled field, or only the released ones."""
    return disclosure.released(rec, labels) if cfg.dp_metrics_only else (
        disclosure.table(rec, labels) and rec)
  # Evaluation runs inside the compiled rounds (no host round trip).
  device_eval = make_device_evaluator(model, test_x, test_y)
  eval_jit = jax.jit(device_eval.fn)

  def evaluate(params):
    loss, acc = eval_jit(params, device_eval.data)
    return {"loss": float(loss), "accuracy": float(acc)}

  out = cfg.out
  metrics_file = None
  if out and saved is None:  # only now, after every check has passed
    out = _fresh_out_dir(out, cfg.overwrite)
    cfg = dataclasses.replace(cfg, out=out)
  interrupted: Optional[RunInterrupted] = None
  if out:
    os.makedirs(out, exist_ok=True)
    if saved is None:
      checkpointer = RunCheckpointer(os.path.join(out, "checkpoints"))
    # Rewritten from the checkpoint on resume: rounds after it were lost with the run.
    metrics_file = open(os.path.join(out, "metrics.jsonl"), "w")
    for rec in saved_records:
      metrics_file.write(json.dumps(published(rec)) + "\n")
    metrics_file.flush()
  bar = None
  if progress:
    from tqdm.auto import tqdm
    bar = tqdm(total=cfg.rounds, desc=f"{alg.name} on {data.name}", unit="round")
  last = {"test_accuracy": float("nan")}
  written: List[Dict[str, Any]] = list(saved_records)
  if bar is not None:
    bar.update(done_before)

  def make_control(records):
    """Paper 004's host-side sigma_m per round (online refinement when alpha_d), with
    the rounds of ``records`` replayed."""
    c = algos.amplitude_varying.NoiseController(
        alg.config, algos.amplitude_varying.OnlineRefinement(
            cfg.alpha_d, cfg.refinement_mode) if cfg.alpha_d else None)
    c.restore(records)
    return c
  control = make_control(saved_records) if paper004 else None

  def on_round(r):
    rec = dict(r)
    rec["round"] = r["round"] + 1  # 1-based: the number of rounds completed
    rec.update(accounting_fields)
    if control is not None:
      rec["planned_rounds"] = control.planned  # the horizon this round ran under
      control.observe(r["noise_stddev"], r.get("test_loss"))
      rec["epsilon_paper"] = control.epsilon_paper()
      if alg.privacy is not None:  # z if the paper's Delta_s held (epsilon_conditional_rdp)
        rec["noise_multiplier_conditional"] = r["noise_stddev"] / alg.config[
            "sensitivity_paper"]
    if padpfl:  # paper 000's three noise SDs of this round (eqs. 8, 13, Theorem 1)
      rec["sigma_c"], rec["sigma_s"] = r["noise_stddev"], r["server_noise_stddev"]
      rec["sigma_a"] = alg.config["sigma_a"][r["round"]]
      rec["epsilon_paper"] = alg.config["epsilon"] if alg.config["private"] else None
      for suffix, conditional in (("", False), ("_conditional", True)):
        rec["noise_multiplier_downlink" + suffix] = algos.padpfl.downlink_noise_multiplier(
            alg.config, r["round"], r["noise_stddev"], r["server_noise_stddev"],
            conditional=conditional)
      if alg.privacy is not None:
        rec["noise_multiplier_conditional"] = r["noise_stddev"] / alg.config[
            "sensitivity_paper"]
    rec = json_safe(rec)
    with interrupts.critical():  # a metrics line is written whole or not at all
      written.append(rec)  # the checkpoint keeps every field (resuming needs them)
      if metrics_file is not None:
        metrics_file.write(json.dumps(published(rec)) + "\n")
        metrics_file.flush()
    if "test_accuracy" in r:
      last["test_accuracy"] = r["test_accuracy"]
    if bar is not None:
      bar.update(1)
      bar.set_postfix(loss=f"{r['train_loss']:.3f}", acc=f"{last['test_accuracy']:.3f}",
                      eps=f"{r.get('epsilon', float('inf')):.2f}")

  # The newest consistent (rounds, state, per-client ledger): what an interrupted run
  # keeps. Updated once a block's checkpoint is complete.
  per_client = alg.privacy is not None and alg.privacy.per_client
  kept = {"rounds": done_before, "state": state,
          "per_client": meta.get("per_client_ledger") if saved is not None else None}

  def on_block(s, done):
    ledger_dict = ledger.to_dict() if per_client else None
    # A checkpoint is written whole (orbax renames it when complete), and what the run
    # keeps moves to it in the same step.
    with interrupts.critical():
      if checkpointer is not None:
        meta = {"rounds_done": done_before + done, "config": dataclasses.asdict(cfg),
                "records": written[:done_before + done],
                "metrics_format": METRICS_FORMAT,
                "noise_multiplier_hparam": json_safe(
                    None if z is None else np.asarray(z).tolist())}
        if per_client:
          meta["per_client_ledger"] = ledger_dict
        checkpointer.save(done_before + done, s, meta)
      kept.update(rounds=done_before + done, state=s, per_client=ledger_dict)

  try:
    if saved is None and checkpointer is not None:
      on_block(state, 0)  # round 0: a run stopped before its first block can resume
    remaining = planned - done_before
    common = dict(ledger=ledger, device_evaluator=device_eval, on_round=on_round,
                  on_block=on_block)
    records = []
    if control is not None and control.refinement is not None:
      # Online refinement (paper 004, Theorem 2): the next sigma_m depends on the test
      # loss, so rounds run one at a time through one compiled block.
      block_fn = make_block_fn(alg.round_fn, device_eval)
      # on_round has already counted the round when the checkpoint is written.
      common["on_block"] = lambda s, _: on_block(s, len(control.used) - done_before)
      while (std := control.next_stddev()) is not None:
        state, recs = run_rounds(
            alg.round_fn, state, pop, _paper004_hparams(alg, [std]), root, rounds=1,
            block_size=1, eval_every=1, block_fn=block_fn, **common)
        records += recs
    elif padpfl and remaining > 0:  # scenario 4's data change at t = 11: one phase each
      phases = [(ph.start_round, sharding.replicate(PopulationData(
          jnp.asarray(ph.x), jnp.asarray(data.y), jnp.asarray(data.counts)), mesh))
          for ph in scenario.phases]
      state, records = algos.padpfl.train(
          alg, phases, root, state=state, start_round=done_before, stop_round=planned,
          block_size=cfg.eval_every, eval_every=cfg.eval_every, **common)
    elif remaining > 0:
      schedule = (_paper004_hparams(alg, control.config["stddevs"][done_before:planned])
                  if control is not None else constant_schedule(alg.hparams, remaining))
      state, records = run_rounds(
          alg.round_fn, state, pop, schedule, root, rounds=remaining,
          block_size=cfg.eval_every, eval_every=cfg.eval_every, **common)
    records = [dict(r, round=r["round"] - 1) for r in saved_records] + records
  except RunInterrupted as e:
    interrupted = e
  finally:
    if bar is not None:
      bar.close()
    if metrics_file is not None:
      metrics_file.close()
  if interrupted is not None:
    # Back to the newest checkpoint: its state, its rounds' records (metrics.jsonl
    # rewritten to match), its ledger; the summary below is of those rounds.
    state = kept["state"]
    del written[kept["rounds"]:]
    records = [dict(r, round=r["round"] - 1) for r in written]
    if out:
      _write_atomic(os.path.join(out, "metrics.jsonl"),
                    "".join(json.dumps(published(r)) + "\n" for r in written))
    if ledger is not None:
      ledger = _restored_ledger(alg.privacy, cfg.delta, written, kept["per_client"])
    if control is not None:
      control = make_control(written)

  final = evaluate(state.params)
  wall = time.perf_counter() - t_start
  eps_rdp = _ledger_epsilon(ledger, "rdp")
  eps_pld = _ledger_epsilon(ledger, "pld")
  eps = eps_pld if cfg.accountant == "pld" else eps_rdp
  privacy = privacy_summary(ledger, alg.privacy, cfg.accountant, cfg.delta)
  summary = {
      "algorithm": alg.name,
      "dataset": data.name + (" (subset)" if data.is_subset else ""),
      "dataset_description": data.describe(),
      "model": model_name,
      "rounds": len(records),
      "interrupted": (None if interrupted is None else {
          "signal": str(interrupted), "rounds_done": len(records),
          "rounds_planned": planned,
          "resume": f"fedjax-dp run --resume {out}" if out else None}),
      "budget_guard": ({"target_epsilon": cfg.target_epsilon, "rounds_planned": cfg.rounds,
                        "rounds_run": len(records),
                        "stopped_early": planned < cfg.rounds}
                       if guarded else None),
      "final_test_accuracy": final["accuracy"],
      "final_test_loss": final["loss"],
      "majority_class_accuracy": data.majority_class_accuracy(),
      "epsilon": eps,
      "epsilon_rdp": eps_rdp,
      "epsilon_pld": eps_pld,
      "epsilon_pld_note": ("" if eps_pld is not None else "dp-accounting's PLD has no "
                           "event for sampling without replacement; RDP is reported"),
      "delta": cfg.delta,
      **privacy,
      "accountant": cfg.accountant,
      "privacy_unit": alg.privacy.unit if alg.privacy else "none (non-private)",
      "neighboring_relation": alg.privacy.neighboring if alg.privacy else None,
      "privacy_note": alg.privacy.note if alg.privacy else "",
      "noise_multiplier": (None if z is None else
                           float(np.min(z)) if np.ndim(z) else float(z)),
      "clip_norm": cfg.clip_norm if alg.privacy else None,
      "sampling_rate": alg.config["sampling_rate"],
      "k_max": alg.k_max,
      "num_clients": data.num_clients,
      "devices": sharding.mesh_size(mesh),
      "wall_time_s": wall,
      "time_per_round_s": (records[-1]["wall_time_s"] / len(records)) if records else None,
      "steady_time_per_round_s": _steady_time_per_round(records),
      "metrics_dp_only": cfg.dp_metrics_only,
      "metrics_disclosure": disclosure.table(
          set().union(*(r.keys() for r in written)) if written else (), labels),
      "config": dataclasses.asdict(cfg),
      "algorithm_config": alg.config,
  }
  if control is not None:  # paper 004: its own epsilon beside the accountant's
    c = alg.config
    summary.update(
        epsilon_paper=control.epsilon_paper(),
        epsilon_paper_exact_moment_bound=(schedules.paper_epsilon_exact(
            control.used, c["sampling_rate"], c["calibration_sensitivity"], cfg.delta)
            if cfg.mechanism == "gaussian" and control.used else None),
        epsilon_paper_target=cfg.target_epsilon, vartheta=cfg.vartheta,
        sensitivity=c["sensitivity"], sensitivity_paper=c["sensitivity_paper"],
        sensitivity_mode=c["sensitivity_mode"], noise_stddevs=control.used,
        planned_rounds=control.planned)
    if ledger is not None:
      summary.update(_conditional_epsilon(alg, written, cfg.delta))
  if padpfl:  # paper 000: its own epsilon beside the accountant's, and the noise SDs
    c = alg.config
    summary.update(algos.padpfl.nominal_and_accountant_epsilons(c))
    if c["private"] and written:  # the broadcasts actually made, through a ledger
      down = PrivacyLedger(cfg.delta, **alg.privacy.ledger_kwargs())
      down.record_many([r["noise_multiplier_downlink"] for r in written],
                       [1.0] * len(written), [1] * len(written))
      summary["epsilon_rdp_downlink"] = down.epsilon()
      summary.update(_conditional_epsilon(alg, written, cfg.delta))
    summary.update(
        epsilon_paper_mechanism=("classical Gaussian mechanism per iteration, noise scaled "
                                 "linearly by R (uplink) and T (downlink)"),
        epsilon_rdp_note=("epsilon_rdp (the ledger, the guarantee) composes every round's "
                          "upload, i.e. all T uploads seen, with the sensitivity the code "
                          "enforces (summary 'sensitivity'); epsilon_rdp_downlink composes "
                          "the broadcasts made, z = the noise SD in the broadcast model over "
                          "max p times that sensitivity (eq. 10), per round from "
                          "metrics.jsonl. The *_conditional epsilons use the sensitivity "
                          "eqs. (8) and (13) were calibrated with (paper mode: 2B/m_min, "
                          "which unclipped local training does not guarantee); "
                          "epsilon_rdp_uplink_conditional assumes R uploads seen (the "
                          "paper's threat model)"),
        sensitivity=c["sensitivity"], sensitivity_paper=c["sensitivity_paper"],
        sensitivity_mode=c["sensitivity_mode"],
        scenario=cfg.scenario, impact_factors_spec=cfg.impact_factors,
        part_of_client=[int(v) for v in scenario.part_of_client],
        impact_factors_per_part=_per_part(c["impact_factors"], scenario.part_of_client),
        sigma_c=c["sigma_c"], sigma_s=c["sigma_s"], sigma_a=c["sigma_a"],
        clip_bound=c["clip_bound"], exposures=c["exposures"])
  if out:
    with open(os.path.join(out, "summary.json.tmp"), "w") as f:
      json.dump(json_safe(summary), f, indent=2)
    os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))
    _plot(records, os.path.join(out, "curves.png"),
          f"{alg.name} on {summary['dataset']}: eps={eps:.2f}, delta={cfg.delta:g}")
  return RunResult(state, records, summary, ledger)


#: What marks a folder as holding a run (never overwritten without ``overwrite``).
RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoints", "curves.png")


def _holds_run(folder: str) -> bool:
  return any(os.path.exists(os.path.join(folder, f)) for f in RUN_FILES)


def _fresh_out_dir(out: str, overwrite: bool) -> str:
  """The folder a fresh run writes to: ``out`` if it holds no earlier run; with
  ``overwrite`` the earlier run's files are removed first; otherwise the first of
  ``<out>-2``, ``<out>-3``, ... that holds none (logged as a warning)."""
  if not _holds_run(out):
    return out
  if overwrite:
    for f in RUN_FILES:
      path = os.path.join(out, f)
      if os.path.isdir(path):
        shutil.rmtree(path)
      elif os.path.exists(path):
        os.remove(path)
    return out
  base = out.rstrip(os.sep) or out
  k = 2
  while _holds_run(f"{base}-{k}"):
    k += 1
  new = f"{base}-{k}"
  _log.warning("%s holds an earlier run; this run writes to %s (overwrite / --overwrite "
               "replaces the earlier run instead, --resume continues it).", out, new)
  return new


def _write_atomic(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` through a temporary file and a rename."""
  with open(path + ".tmp", "w") as f:
    f.write(text)
  os.replace(path + ".tmp", path)


def _restored_ledger(spec, delta: float, records: List[Dict[str, Any]],
                     per_client: Optional[Dict[str, Any]]):
  """A fresh ledger holding the events of ``records`` (the rounds of a checkpoint), so
  that epsilon continues exactly: from the records (what metrics.jsonl holds), or for
  per-client accounting the saved per-client ledger ``per_client`` (its ``to_dict``)."""
  if spec.per_client:
    from fedjax_dp.privacy.per_client import PerClientLedger
    return PerClientLedger.from_dict(per_client)
  ledger = spec.make_ledger(delta)
  if records:
    ledger.record_many([r["noise_multiplier"] for r in records],
                       [r["sampling_rate"] for r in records],
                       [r["dp_steps"] for r in records])
  return ledger


def _rounds_dependent(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
  """The keys of an algorithm's config (other than ``rounds``) that differ between
  ``before`` and ``after``, built for different numbers of rounds."""
  def plain(v):
    if isinstance(v, dict):
      return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
      return [plain(x) for x in v]
    return np.asarray(v).tolist() if hasattr(v, "__array__") else v
  a, b = plain(before), plain(after)
  return sorted(k for k in set(a) | set(b) if k != "rounds" and a.get(k) != b.get(k))


def _per_part(p_schedule, part_of_client) -> List[List[float]]:
  """Each round's impact factor of one client of every part, ``[T][parts]``."""
  p = np.asarray(p_schedule)
  parts = np.asarray(part_of_client)
  first = [int(np.flatnonzero(parts == k)[0]) for k in range(int(parts.max()) + 1)]
  return p[:, first].tolist()


def _ledger_epsilon(ledger, accountant: str) -> Optional[float]:
  """The run's epsilon (the worst client's with per-client accounting); inf without a
  ledger (non-private), None where dp-accounting has no PLD for the events."""
  if ledger is None:
    return float("inf")
  try:
    if hasattr(ledger, "worst_epsilon"):
      return ledger.worst_epsilon(accountant=accountant)
    return ledger.epsilon(accountant=accountant)
  except accountants.UnsupportedAccountingError:
    return None


def privacy_summary(ledger, spec, accountant: str, delta: float) -> Dict[str, Any]:
  """The guarantee's fields of summary.json: the relation, the truncation probability
  and the delta it adds (``delta_total``), and with per-client accounting the worst
  client and every client's epsilon (when they differ)."""
  if ledger is None:
    return {"relation": None, "truncation_probability": 0.0, "delta_total": None,
            "guarantee": "none (non-private)"}
  acc = accountant if spec.supports(accountant) else "rdp"
  single = ledger.worst_ledger(accountant=acc) if spec.per_client else ledger
  eps = single.epsilon(accountant=acc)
  p = single.truncation_probability()
  delta_total = single.delta_total(accountant=acc)
  out = {"relation": spec.relation, "truncation_probability": p,
         "delta_total": delta_total,
         "guarantee": (f"({eps:.4g}, {delta_total:.4g})-DP, {spec.unit}, "
                       f"{spec.neighboring}; {acc.upper()} accountant"
                       + (f"; delta includes {delta_total - delta:.3g} for the "
                          f"probability {p:.3g} that a padded Poisson draw was truncated"
                          if p > 0 else ""))}
  if spec.per_client:
    eps_clients = ledger.epsilons(accountant="rdp")
    out["worst_client"] = ledger.worst_client()
    out["per_client_epsilon_rdp"] = (eps_clients.tolist()
                                     if np.unique(eps_clients).size > 1 else None)
  return out


def _conditional_epsilon(alg, records: List[Dict[str, Any]], delta: float
                         ) -> Dict[str, Any]:
  """Papers 000 and 004: the accountant's epsilon *if* the paper's sensitivity held
  (each record's ``noise_multiplier_conditional``), beside the provable one."""
  led = PrivacyLedger(delta, **alg.privacy.ledger_kwargs())
  led.record_many([r["noise_multiplier_conditional"] for r in records],
                  [r["sampling_rate"] for r in records], [r["dp_steps"] for r in records])
  provable = alg.config["sensitivity_mode"] != "paper"
  return {"epsilon_conditional_rdp": led.epsilon(),
          "epsilon_guarantee_note": (
              "epsilon (epsilon_rdp / epsilon_pld) is the guarantee the code enforces, "
              f"with sensitivity {alg.config['sensitivity']:.4g} ("
              + ("clipped per-example gradients" if provable else
                 "the diameter of the parameter ball every upload lies in")
              + "). epsilon_conditional_rdp is what the accountant gives for the same "
              f"noise IF the paper's sensitivity {alg.config['sensitivity_paper']:.4g} "
              "held, which the code does not enforce (local gradients are "
              + ("clipped, but the paper's bound is still not implied)" if provable else
                 "not clipped); it is not a guarantee."))}


def _paper004_hparams(alg, stddevs):
  """Per-round hyper-parameters ``[len(stddevs)]`` of an amplitude_varying run."""
  return algos.amplitude_varying.hparams_for(alg.config, stddevs)


def _steady_time_per_round(records: List[Dict[str, Any]]) -> Optional[float]:
  """Seconds per round after the first compiled block (which includes compilation),
  or None when the run had a single block."""
  walls = [r["wall_time_s"] for r in records]
  first_block = walls.count(walls[0]) if walls else 0
  if first_block == 0 or first_block == len(walls):
    return None
  return (walls[-1] - walls[0]) / (len(walls) - first_block)



