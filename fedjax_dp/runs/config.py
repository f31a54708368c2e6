"""The configuration of one run: the run's own options (`RunConfig`) and the chosen
algorithm's (its ``Options`` dataclass, `fedjax_dp.algorithms.interface`).

Both are plain dataclasses with defaults and attribute docstrings; ``fedjax-dp run``
turns them into flags (`fedjax_dp.cli`, through tyro), and a config file or an earlier
run's ``summary.json`` is one flat table of their fields (`RunConfig.from_dict`,
`load_config_file`). Nothing here names an algorithm.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import tomllib
import typing
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Tuple

import tyro

from fedjax_dp.algorithms import registry
from fedjax_dp.validation import (FedJaxDpError, check_delta, check_epsilon, check_int)

__all__ = [
    "AccountantName", "ACCOUNTANTS", "RunConfig", "flag_aliases", "flag_value",
    "option_flags", "command_line_algorithm", "parse_hidden", "check_option_type",
    "load_config_file",
]

#: The accountants of the reported epsilon (`RunConfig.accountant`).
AccountantName = Literal["rdp", "pld"]
ACCOUNTANTS: Tuple[str, ...] = typing.get_args(AccountantName)


@dataclasses.dataclass
class RunConfig:
  """The options of ``fedjax-dp run`` that every algorithm shares (defaults: the
  README's main job), and the algorithm's own ``options``.

  ``target_epsilon`` with an algorithm that takes a noise multiplier: alone, z is
  calibrated so that ``rounds`` rounds spend it (with the run's accountant); with z
  given, it is a budget guard (training stops before the round that would exceed it).
  ``delta`` is the delta of every epsilon the run reports.

  Outputs go to ``out``; a folder that holds an earlier run is never overwritten unless
  ``overwrite``: the run writes to ``<out>-2`` (``-3``, ...) instead and says so.
  ``resume`` continues the run in that folder from its newest checkpoint with its saved
  configuration; ``resume_rounds`` takes it to that many rounds in all (more than it
  has done: e.g. extending a finished run), keeping its noise multiplier.
  ``dp_metrics_only`` writes only the metrics and summary fields released under DP or
  public (`fedjax_dp.privacy.disclosure`), and no partition.png.
  """
  algorithm: str = registry.DEFAULT
  """the algorithm (`fedjax_dp.algorithms.registry`; its options are listed below)"""
  dataset: Optional[str] = None
  """har, har_features, fashion_mnist, mnist, emnist, cifar10, adult, synthetic or
  shakespeare (default: the algorithm's; `fedjax-dp datasets` shows what is available here), or
  npz:PATH: your
  own data in one .npz file (x [N, ...], y [N], client_id [N]; optional test_x, test_y,
  num_classes, name; see fedjax_dp.data.sources.npz)"""
  partition: Optional[str] = None
  """natural, iid, dirichlet, shards or quantity_skew, with optional parameters:
  METHOD:VALUE or METHOD:KEY=VALUE,... e.g. dirichlet:0.1, shards:2,
  quantity_skew:sigma=1.5, dirichlet:alpha=0.1,min_size=5 (default: the dataset's own:
  dirichlet:0.5 for images, natural for har, synthetic and npz)"""
  dirichlet_alpha: Optional[float] = None
  """label-skew Dirichlet concentration of the dirichlet partition, > 0; smaller is more
  skewed, 100 is near IID; alone it selects the dirichlet partition (default: 0.5)"""
  shards_per_client: Optional[int] = None
  """label-sorted shards per client of the shards partition, >= 1 (default: 2)"""
  quantity_skew_alpha: Optional[float] = None
  """client sizes ~ Dirichlet(alpha) in the quantity_skew partition, > 0 (give this or
  --quantity-skew-sigma)"""
  quantity_skew_sigma: Optional[float] = None
  """client sizes ~ LogNormal(0, sigma) in the quantity_skew partition, >= 0 (default:
  1.0 when --quantity-skew-alpha is not given)"""
  min_client_size: Optional[int] = None
  """fewest examples per client of the dirichlet and quantity_skew partitions, >= 1
  (default: 1)"""
  num_clients: Optional[int] = None
  """number of clients of every non-natural partition, and of synthetic's own clients
  (default: 100 for image datasets, 30 for har and har_features, 10 for synthetic, the
  file's clients for npz:PATH)"""
  data_dir: Optional[str] = None
  """the folder holding fashion_mnist's, mnist's (IDX files) or emnist's and cifar10's
  (a prepared TFDS) files: when given, the only place searched, and files missing there
  are an error (default: $FEDJAX_DP_DATA_DIR, then system packages and TFDS's folders;
  the copy used is named in summary.json)"""
  model: Optional[str] = None
  """mlp, cnn, cnn3, lenet5, cnn_fc50, har_cnn, linear, char_lstm or char_transformer
  (the last two for token windows such as shakespeare's) (default: the algorithm's, else
  the dataset's; for npz data cnn for images, else mlp), or your own:
  package.module:factory, a function (feature_shape, num_classes) -> flax module (the
  current directory is importable)"""
  hidden: Optional[str] = None
  """hidden dense widths of mlp and cnn3, e.g. 32 or 200,200 (default: the algorithm's,
  else 200,200); the LSTM widths of char_lstm (default 256,256) or the block widths of
  char_transformer (default 128,128)"""
  activation: Optional[Literal["relu", "linear"]] = None
  """MLP activation (default: the algorithm's, else relu)"""
  rounds: int = 50
  """communication rounds"""
  target_epsilon: Optional[float] = None
  """alone: calibrate the noise multiplier so that --rounds rounds spend this epsilon;
  with a noise multiplier: budget guard, stop before the round that would take epsilon
  past it"""
  delta: float = 1e-3
  """delta of (epsilon, delta)-DP: the probability bound of the guarantee for one
  privacy unit; must be below 1/n for the unit's population n (the clients at user
  level, the fewest records of a client at record level)"""
  accountant: AccountantName = "rdp"
  """accountant of the reported epsilon (both are in summary.json)"""
  eval_every: int = 5
  """evaluate on the test set every N rounds"""
  seed: int = 0
  """root seed of the run"""
  data_seed: Optional[int] = None
  """seed of the data partition and of synthetic data (default: --seed); `fedjax-dp
  sweep` gives all its runs the same one"""
  devices: Optional[int] = None
  """shard each cohort over this many local devices (default: all; on a CPU, one
  device per core); in a multi-process run (--distributed), this many in every
  process"""
  chunk_size: Optional[int] = None
  """clients trained at once per device (default: chosen from the model size and free
  memory)"""
  resume: Optional[str] = None
  """continue the run whose --out was DIR from its newest checkpoint (written at every
  evaluation and at the start), with its saved configuration; with --rounds N it
  continues to N rounds in all (extends a finished run)"""
  resume_rounds: Optional[int] = None
  """with resume: the rounds in all to continue to (--rounds with --resume)"""
  out: Optional[str] = "runs/latest"
  """output folder for metrics.jsonl, summary.json, curves.png, checkpoints/"""
  overwrite: bool = False
  """replace an earlier run in --out (otherwise the run writes to <out>-2, <out>-3, ...
  and says so)"""
  verify_checksums: bool = True
  """refuse data files that fail their published checksums"""
  dp_metrics_only: bool = False
  """write only metrics released under DP or public to metrics.jsonl and summary.json (no
  train loss, update norms, clip fractions, data sizes, partition.png: those are computed
  from raw client data)"""
  allow_large_delta: bool = False
  """accept delta >= 1/n for the privacy unit's population n (refused otherwise: such a
  delta allows publishing a unit's data outright); for reproducing a paper that used one;
  summary.json's delta_meaning then says the guarantee is weak in that sense"""
  allow_divergence: bool = False
  """keep training a run that diverged (fedjax_dp.runs.divergence: most client updates
  non-finite, or the test loss exploding) with a warning; by default it stops there,
  keeping its outputs, and fedjax-dp exits with status 3"""
  canaries: int = 0
  """K >= 4: one-run empirical privacy estimation (Andrew et al. 2024): each canary
  client joins the population with probability 1/2 (from --canary-seed; it uploads clip
  norm x its own random unit direction when sampled), the rest are held out;
  summary.json gets the estimated epsilon and a 95% one-run lower bound, simulation
  diagnostics (docs: how-to/empirical-privacy)"""
  canary_seed: int = 0
  """the public seed of the canaries' directions and of which canaries are inserted"""
  logger: str = "tensorboard"
  """experiment trackers: a comma list of tensorboard, wandb, mlflow, or none;
  tensorboard writes event files to <out>/tensorboard (view them with the tensorboard
  command; it, wandb and mlflow come with pip install "fedjax_dp[trackers]"; mlflow's
  default store is <out>/mlruns); they get what metrics.jsonl gets"""
  options: Annotated[Any, tyro.conf.Suppress] = None
  """the algorithm's options (an instance of its ``Options``; None: its defaults)"""

  def __post_init__(self):
    if self.options is None and self.algorithm in registry.REGISTRY:
      self.options = registry.get(self.algorithm).Options()

  @property
  def partition_seed(self) -> int:
    """The seed of the data partition and of the client structures an algorithm
    prepares from the data: ``data_seed``, else ``seed``."""
    return self.seed if self.data_seed is None else self.data_seed

  @property
  def plugin(self):
    """The algorithm's `FederatedAlgorithm` (from the registry)."""
    return registry.get(self.algorithm)

  def partition_options(self):
    """``(method, kwargs)`` of the run's partition: ``partition``'s spec
    (``dirichlet:0.1``) with the partition fields (``dirichlet_alpha``, ...), by
    `fedjax_dp.data.partition.resolve_partition`; method None: the dataset's default.

    Raises:
      FedJaxDpError: naming the option (``partition`` or the field).
    """
    from fedjax_dp.data import partition as partition_lib
    from fedjax_dp.data import registry as data_registry
    dataset = self.dataset or self.plugin.default_dataset
    return partition_lib.resolve_partition(
        self.partition, {f: getattr(self, f) for f in partition_lib.FIELD_PARAMS},
        data_registry.default_partition(dataset))

  @classmethod
  def run_fields(cls) -> List[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "options"]

  @classmethod
  def option_names(cls, algorithm: str) -> List[str]:
    """Every key a config file may hold for ``algorithm``: the run's and the
    algorithm's options."""
    return cls.run_fields() + [f.name for f in dataclasses.fields(
        registry.get(algorithm).Options)]

  def to_dict(self) -> Dict[str, Any]:
    """One flat table of the run's and the algorithm's options (what summary.json's
    ``config`` and a config file hold; `from_dict` reads it back)."""
    out = {k: getattr(self, k) for k in self.run_fields()}
    out.update(dataclasses.asdict(self.options))
    return out

  @classmethod
  def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "RunConfig":
    """A `RunConfig` from one flat table of option names to values (a config file, a
    summary.json's ``config``, or keyword arguments in Python).

    Keys are the field names of `RunConfig` and of the algorithm's ``Options``
    (``values["algorithm"]``, default dp_fedavg); dashes may stand for underscores, and
    a flag's alias (``client_lr``) names its field. Fields not given keep their
    defaults. The result is not validated yet (call `validate`).

    Raises:
      FedJaxDpError: an unknown key (with the closest known one and the full list), a
        key given twice, or a value of the wrong type (naming the key, the type found
        and the one allowed).
    """
    if not isinstance(values, Mapping):
      raise FedJaxDpError(f"{source}: expected a table of options, got "
                          f"{type(values).__name__}.")
    algorithm = values.get("algorithm", registry.DEFAULT)
    if algorithm not in registry.REGISTRY:
      raise FedJaxDpError(f"{source}: algorithm must be one of {', '.join(registry.names())};"
                          f" got {algorithm!r}.", option="algorithm")
    options_cls = registry.get(algorithm).Options
    hints = {**typing.get_type_hints(cls, include_extras=True),
             **typing.get_type_hints(options_cls, include_extras=True)}
    fields = cls.option_names(algorithm)
    aliases = {**flag_aliases(cls), **flag_aliases(options_cls)}
    run_values, alg_values = {}, {}
    for raw_key, value in values.items():
      key = str(raw_key).replace("-", "_")
      key = aliases.get(key, key)
      if key not in fields or key == "options":
        close = difflib.get_close_matches(key, fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise FedJaxDpError(
            f"{source}: unknown key {raw_key!r}{hint}. Allowed keys: {', '.join(fields)}.",
            option=None)
      if key in run_values or key in alg_values:
        raise FedJaxDpError(f"{source}: option {key!r} is given twice.")
      value = check_option_type(source, key, value, hints[key])
      (run_values if key in cls.run_fields() else alg_values)[key] = value
    return cls(**run_values, options=options_cls(**alg_values))

  def validate(self) -> "RunConfig":
    """Checks every option (before any data is loaded or anything compiled).

    Raises:
      FedJaxDpError: naming the option (its ``option`` attribute), the value and what
        is allowed.
    """
    from fedjax_dp.data import registry as data_registry
    from fedjax_dp.data.sources import npz
    from fedjax_dp.models import MODEL_NAMES
    from fedjax_dp.models.core import check_factory_spec, is_factory_spec
    from fedjax_dp.algorithms.interface import check_choices
    from fedjax_dp.validation import check_choice
    check_choices(self)
    plugin = self.plugin  # raises for an unknown algorithm
    if not isinstance(self.options, plugin.Options):
      raise FedJaxDpError(f"options must be {plugin.Options.__name__} for algorithm "
                          f"{self.algorithm!r}, got {type(self.options).__name__}.",
                          option="options")
    if self.dataset is not None and (not isinstance(self.dataset, str) or not self.dataset):
      raise FedJaxDpError(f"dataset must be a dataset name, got {self.dataset!r}.",
                          option="dataset")
    if data_registry.is_npz(self.dataset) and not os.path.isfile(npz.path_of(self.dataset)):
      raise FedJaxDpError(f"dataset {self.dataset!r}: no such file "
                          f"({os.path.abspath(npz.path_of(self.dataset))!r}).",
                          option="dataset")
    if self.partition is not None and not isinstance(self.partition, str):
      raise FedJaxDpError(f"partition must be a string such as 'dirichlet:0.1', got "
                          f"{self.partition!r}.", option="partition")
    self.partition_options()  # the spec, its fields and their fit
    if is_factory_spec(self.model):
      check_factory_spec(self.model)  # imported when the run is set up
    elif self.model is not None:
      check_choice("model", self.model, MODEL_NAMES)
    if self.hidden is not None:
      parse_hidden(self.hidden)
    check_int("rounds", self.rounds, minimum=1)
    check_int("eval_every", self.eval_every, minimum=1)
    if self.devices is not None:
      check_int("devices", self.devices, minimum=1)
    if self.chunk_size is not None:
      check_int("chunk_size", self.chunk_size, minimum=1)
    if self.num_clients is not None:
      check_int("num_clients", self.num_clients, minimum=1)
    check_int("seed", self.seed, minimum=0, maximum=2**32 - 1)
    if self.data_seed is not None:
      check_int("data_seed", self.data_seed, minimum=0, maximum=2**32 - 1)
    check_delta(self.delta)
    check_int("canary_seed", self.canary_seed, minimum=0, maximum=2**32 - 1)
    if self.canaries:
      check_int("canaries", self.canaries, minimum=4)
      if plugin.canaries_refused is not None:
        raise FedJaxDpError(f"algorithm {self.algorithm} cannot host --canaries: "
                            f"{plugin.canaries_refused}.", option="canaries")
    if self.target_epsilon is not None:
      check_epsilon(self.target_epsilon, "target_epsilon")
    for name in ("overwrite", "verify_checksums", "dp_metrics_only", "allow_large_delta",
                 "allow_divergence"):
      if not isinstance(getattr(self, name), bool):
        raise FedJaxDpError(f"{name} must be True or False, got {getattr(self, name)!r}.",
                            option=name)
    from fedjax_dp.runs.writers import parse_logger_spec
    parse_logger_spec(self.logger)  # names only: installation is checked when a run starts
    plugin.validate(self.options, self)
    if self.target_epsilon is not None and plugin.noise_multiplier_option is None:
      raise FedJaxDpError(
          f"target_epsilon calibrates or guards a noise multiplier, which "
          f"{self.algorithm} does not take (it sets its noise itself, or adds none); see "
          f"its options (fedjax-dp run --algorithm {self.algorithm} --help).",
          option="target_epsilon")
    if self.data_dir is not None and not os.path.isdir(os.path.expanduser(self.data_dir)):
      raise FedJaxDpError(f"data_dir must be an existing directory, got {self.data_dir!r} "
                          "(a given data_dir is the only place the data is looked for).",
                          option="data_dir")
    if self.resume is not None and not os.path.isdir(
        os.path.join(os.path.expanduser(self.resume), "checkpoints")):
      raise FedJaxDpError(f"resume must be the output folder of an earlier run (one that "
                          f"holds checkpoints/), got {self.resume!r}.", option="resume")
    if self.resume_rounds is not None:
      check_int("resume_rounds", self.resume_rounds, minimum=1)
      if self.resume is None:
        raise FedJaxDpError("resume_rounds (--rounds with --resume) needs resume: it "
                            "continues an earlier run to that many rounds in all.",
                            option="resume_rounds")
    return self


def flag_aliases(options_cls: type) -> Dict[str, str]:
  """``{alias: field}`` of the flag aliases declared on a dataclass's fields
  (``Annotated[float, tyro.conf.arg(aliases=("--client-lr",))]`` gives
  ``{"client_lr": "client_learning_rate"}``)."""
  out = {}
  for name, hint in typing.get_type_hints(options_cls, include_extras=True).items():
    if typing.get_origin(hint) is typing.Annotated:
      for meta in typing.get_args(hint)[1:]:
        for alias in getattr(meta, "aliases", None) or ():
          out[alias.lstrip("-").replace("-", "_")] = name
  return out


def flag_value(argv: List[str], flag: str) -> Optional[str]:
  """The value of the last ``flag`` in a command line ``argv`` (``--flag V`` or
  ``--flag=V``), or None when it is not there (read before tyro parses the line: the
  config file and the algorithm decide which flags exist)."""
  value = None
  for i, tok in enumerate(argv):
    if tok == flag and i + 1 < len(argv):
      value = argv[i + 1]
    elif tok.startswith(flag + "="):
      value = tok.split("=", 1)[1]
  return value


def option_flags(cls: type) -> Dict[str, List[str]]:
  """``{field: [its flags]}`` of a dataclass's fields as tyro spells them (``--X`` and
  ``--no-X`` with dashes for underscores, declared aliases such as ``--client-lr``)."""
  out: Dict[str, List[str]] = {}
  for f in dataclasses.fields(cls):
    flag = "--" + f.name.replace("_", "-")
    out[f.name] = [flag, "--no-" + f.name.replace("_", "-")]
  for alias, name in flag_aliases(cls).items():
    out[name].append("--" + alias.replace("_", "-"))
  return out


def command_line_algorithm(argv: List[str]) -> Tuple[str, Dict[str, Any]]:
  """``(algorithm, config file table)`` of a command line of ``fedjax-dp run`` or
  ``sweep``: ``--algorithm``, else the ``--config`` file's, else the registry's default
  (the name is not checked here); the table is ``{}`` without ``--config``.

  Raises:
    FedJaxDpError: a bad config file (`load_config_file`).
  """
  path = flag_value(argv, "--config")
  table = load_config_file(path) if path else {}
  return flag_value(argv, "--algorithm") or table.get("algorithm", registry.DEFAULT), table


def parse_hidden(text: str) -> tuple:
  """``"32"`` or ``"200,200"`` -> (32,) / (200, 200).

  Raises:
    FedJaxDpError: not comma-separated positive integers.
  """
  try:
    widths = tuple(int(w) for w in str(text).split(","))
  except ValueError:
    widths = ()
  if not widths or min(widths) < 1:
    raise FedJaxDpError(f"hidden must be comma-separated positive layer widths such as "
                        f"'32' or '200,200', got {text!r}.", option="hidden")
  return widths


def check_option_type(source: str, key: str, value: Any, hint: Any) -> Any:
  """``value`` if it has the type ``hint`` of option ``key`` (ints are accepted for
  floats and returned as floats; a ``Literal`` takes its members' type, the choice is
  checked by validation).

  Raises:
    FedJaxDpError: naming the key, the type found and the one allowed.
  """
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  if typing.get_origin(hint) is typing.Literal:
    hint = type(typing.get_args(hint)[0])
  args = typing.get_args(hint)
  optional = type(None) in args
  base = next((a for a in args if a is not type(None)), hint) if args else hint
  # A number or a word (``Union[float, Literal["adaptive"]]``): the words as they are.
  words = tuple(w for a in args if a is not base and typing.get_origin(a) is typing.Literal
                for w in typing.get_args(a))
  if typing.get_origin(base) is typing.Literal:
    base = type(typing.get_args(base)[0])
  if words and isinstance(value, str) and value in words:
    return value
  if value is None:
    ok = optional
  elif base is bool:
    ok = isinstance(value, bool)
  elif base is int:
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif base is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  elif base is Any:
    ok = True
  else:
    ok = isinstance(value, base)
  if not ok:
    allowed = base.__name__ + "".join(f" or {w!r}" for w in words) + (
        " or null" if optional else "")
    raise FedJaxDpError(f"{source}: option {key!r} must be {allowed}, got "
                        f"{type(value).__name__} {value!r}.", option=key)
  return float(value) if base is float and value is not None else value


def _no_duplicate_keys(pairs):
  seen = {}
  for k, v in pairs:
    if k in seen:
      raise FedJaxDpError(f"option {k!r} is given twice.")
    seen[k] = v
  return seen


def load_config_file(path: str) -> Dict[str, Any]:
  """Reads the options of a run from a ``.json`` or ``.toml`` file.

  The file holds one flat table of options (`RunConfig.from_dict`'s keys:
  ``{"rounds": 100, "clip_norm": 0.5}``; TOML ``rounds = 100``). A ``summary.json``
  written by an earlier run is accepted too: its ``"config"`` entry is used, so a run can
  be repeated exactly (but not its ``out`` and ``resume``: the repeat does not overwrite
  the original's files).

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
