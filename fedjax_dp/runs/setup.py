"""Setting a run up: its mesh, data, model and algorithm, before anything is trained.

`make_setup` loads the data (`load_data`; a sweep loads it once for all its
configurations), lets the algorithm prepare it and builds the model and the mesh: the
`Setup` the algorithm is built from. `build` builds the algorithm and sets its noise
multiplier (given, calibrated, or a resumed run's). Used by the one driver of runs and
sweeps (`fedjax_dp.runs.session`) through `fedjax_dp.runs.run` and
`fedjax_dp.runs.sweep.run_sweep`. Nothing here names an algorithm.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.algorithms.base import Algorithm
from fedjax_dp.algorithms.interface import Setup
from fedjax_dp.federated import PopulationData, sharding
from fedjax_dp.runs import privacy as run_privacy
from fedjax_dp.runs.config import RunConfig, parse_hidden
from fedjax_dp.runs.summary import check_delta_bound, delta_bound
from fedjax_dp.validation import FedJaxDpError, check_epsilon

if TYPE_CHECKING:  # annotations only (no import at run time)
  import flax.linen as nn

  from fedjax_dp.data import FederatedData
  from fedjax_dp.models import Model

__all__ = [
    "NoiseMultiplier", "DEFAULT_MODELS", "TOKEN_DATASETS", "run_mesh", "with_default_noise_multiplier",
    "load_data", "make_setup", "device_population", "build", "rounds_dependent",
]

#: A run's noise-multiplier hyper-parameter z: a float, or float32 ``[N]`` (one per
#: client, for algorithms with per-client noise).
NoiseMultiplier = Union[float, np.ndarray]

#: The model of a dataset when neither ``--model`` nor the algorithm names one.
DEFAULT_MODELS = {"adult": "linear", "har": "har_cnn", "har_features": "linear",
                  "fashion_mnist": "cnn", "mnist": "cnn", "emnist": "cnn", "cifar10": "cnn",
                  "synthetic": "mlp", "shakespeare": "char_lstm"}

#: Datasets whose features are token ids (windows of characters), not real values.
TOKEN_DATASETS = ("shakespeare",)


def run_mesh(devices: Optional[int]) -> Optional[jax.sharding.Mesh]:
  """The client mesh over ``devices`` local devices (default all) of every process, or
  None for a single device in a single process.

  In a multi-process run (`jax.distributed`), the mesh spans the first ``devices``
  local devices of *every* process (`sharding.global_client_mesh`), so each process
  trains its share of the cohort.

  Raises:
    FedJaxDpError: more devices asked for than there are.
  """
  local = jax.local_devices()
  n = len(local) if devices is None else devices
  if n > len(local):
    raise FedJaxDpError(
        f"devices must be at most the {len(local)} local device(s), got {n} (on a CPU, "
        "start with XLA_FLAGS=--xla_force_host_platform_device_count=N).",
        option="devices")
  if jax.process_count() > 1:
    return sharding.global_client_mesh(n)
  return sharding.client_mesh(local[:n]) if n > 1 else None


def with_default_noise_multiplier(cfg: RunConfig) -> RunConfig:
  """``cfg`` with the algorithm's default noise multiplier filled in when neither it
  nor ``target_epsilon`` (which would calibrate it) is given; or, for an algorithm with
  a ``default_target_epsilon``, that target epsilon (z is then calibrated to it)."""
  plugin = cfg.plugin
  name = plugin.noise_multiplier_option
  if name is None or getattr(cfg.options, name) is not None or cfg.target_epsilon is not None:
    return cfg
  if plugin.default_target_epsilon is not None:
    if not plugin.calibrates(cfg.options):
      return cfg
    return dataclasses.replace(cfg, target_epsilon=plugin.default_target_epsilon)
  return dataclasses.replace(cfg, options=dataclasses.replace(
      cfg.options, **{name: plugin.default_noise_multiplier}))


def load_data(cfg: RunConfig) -> FederatedData:
  """The `fedjax_dp.data.FederatedData` that ``cfg`` names, as loaded: its dataset
  (default the algorithm's), partition (`RunConfig.partition_options`), number of
  clients and data seed (``data_seed``, default ``seed``).

  Raises:
    FedJaxDpError: a bad partition; `DatasetNotAvailableError` when the data is missing
      (its message says how to get it).
  """
  from fedjax_dp.data import load_dataset  # deferred: keeps `import fedjax_dp` light
  method, part_kw = cfg.partition_options()
  return load_dataset(cfg.dataset or cfg.plugin.default_dataset, partition=method,
                      num_clients=cfg.num_clients,
                      seed=cfg.partition_seed,
                      data_dir=cfg.data_dir, verify_checksums=cfg.verify_checksums,
                      **part_kw)


def make_setup(cfg: RunConfig, data: Optional[FederatedData] = None,
               model: Optional[Union[Model, nn.Module]] = None, *,
               loaded: Optional[FederatedData] = None) -> Setup:
  """Loads the data (unless given), lets the algorithm prepare it, builds the model
  (unless given) and the mesh: the `Setup` the algorithm is built from.

  Args:
    cfg: the run's configuration; its partition (``partition`` spec and fields,
      `RunConfig.partition_options`) goes to `fedjax_dp.data.load_dataset`.
    data: a `FederatedData` to use instead of loading ``cfg.dataset`` (the caller's
      own: the model defaults to its name's).
    model: a `fedjax_dp.models.Model` or a flax module (wrapped by
      `fedjax_dp.models.from_module`) to use instead of ``cfg.model``; a
      ``package.module:factory`` in ``cfg.model`` is imported and called here.
    loaded: the data ``cfg`` names, already loaded by `load_data` (a sweep loads it
      once for all its configurations); used exactly as if loaded here.

  Raises:
    FedJaxDpError: ``model`` given together with ``cfg.model``, or a model that does not
      fit the data (option ``model``).
  """
  from fedjax_dp.models import create_model
  from fedjax_dp.models import core as model_core
  plugin = cfg.plugin
  dataset = cfg.dataset or plugin.default_dataset
  if model is not None and cfg.model is not None:
    raise FedJaxDpError(f"model: give the model either as an argument or as the model "
                        f"option ({cfg.model!r}), not both.", option="model")
  if data is None:
    data = loaded if loaded is not None else load_data(cfg)
  else:  # the caller's data: its own name, not the algorithm's default dataset's
    dataset = cfg.dataset or data.name
  prepared = plugin.prepare(cfg.options, cfg, data)
  trained: FederatedData = prepared.data  # what the algorithm trains on
  if model is None and model_core.is_factory_spec(cfg.model):
    model = model_core.model_from_factory(cfg.model, trained.feature_shape,
                                          trained.num_classes)
  if model is not None:
    model = model_core.as_model(model, trained.feature_shape, trained.num_classes)
    name = model.name
  else:
    spec = plugin.model_spec(cfg.options, cfg)
    name = (cfg.model or spec.name or DEFAULT_MODELS.get(dataset)
            or model_core.default_model_name(trained.feature_shape))
    kwargs = {}
    if name in ("mlp", "cnn3") + model_core.SEQUENCE_MODELS:
      kwargs = dict(spec.kwargs) if cfg.model in (None, spec.name) else {}
      if cfg.activation is not None and name == "mlp":
        kwargs["activation"] = cfg.activation
      if cfg.hidden is not None:
        kwargs["hidden"] = parse_hidden(cfg.hidden)
    _check_model_fits_tokens(name, dataset)
    model = create_model(name, trained.feature_shape, trained.num_classes, **kwargs)
  mesh = run_mesh(cfg.devices)
  phases = None
  if prepared.phases:
    phases = [(first, device_population(fd, mesh)) for first, fd in prepared.phases]
  return Setup(cfg, cfg.options, trained, model, mesh, prepared.extras, phases,
               model_name=name)


def _check_model_fits_tokens(name: str, dataset: Optional[str]) -> None:
  """A character model needs token windows; token windows need a character model.

  Raises:
    FedJaxDpError: the two do not match (option ``model``).
  """
  from fedjax_dp.models.core import SEQUENCE_MODELS
  tokens = dataset in TOKEN_DATASETS
  if tokens and name not in SEQUENCE_MODELS:
    raise FedJaxDpError(f"model {name!r} cannot read {dataset}'s token windows (integer "
                        f"character ids); use {' or '.join(SEQUENCE_MODELS)}, or your own "
                        f"module (package.module:factory).", option="model")
  if name in SEQUENCE_MODELS and not tokens:
    raise FedJaxDpError(f"model {name!r} reads token windows; dataset {dataset!r} has "
                        f"real-valued features. Token datasets: "
                        f"{', '.join(TOKEN_DATASETS)}.", option="model")


def device_population(data: FederatedData, mesh: Optional[jax.sharding.Mesh]
                      ) -> PopulationData:
  """The clients' padded arrays of a `FederatedData` (``x [N, max_n, ...]``, ``y [N,
  max_n]``, ``counts [N]``) on the devices of ``mesh`` (replicated; None: the default
  device)."""
  return sharding.replicate(PopulationData(
      jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts)), mesh)


def build(setup: Setup, saved_z: Optional[Union[float, Sequence[float], np.ndarray]] = None
          ) -> Tuple[Algorithm, Optional[NoiseMultiplier]]:
  """The algorithm of ``setup`` with its noise multiplier set, and that multiplier.

  The noise-multiplier hyper-parameter z (the algorithm's
  ``noise_multiplier_option``) is, in this order: ``saved_z`` (a resumed run's), the
  option's value (per-client values where the algorithm takes them), or calibrated so
  that ``rounds`` rounds spend ``target_epsilon`` through the algorithm's own
  `PrivacySpec`. None for algorithms that set their noise themselves or add none.

  Returns:
    ``(alg, z)``: an `Algorithm` and z (a float, a float32 ``[N]`` vector, or None).

  Raises:
    FedJaxDpError: ``delta`` at or above 1/n for the privacy unit's population
      (`delta_bound`), before any calibration or compilation.
  """
  cfg: RunConfig = setup.run
  plugin = cfg.plugin
  alg = plugin.build(setup)
  if not cfg.allow_large_delta:
    check_delta_bound(cfg.delta, delta_bound(alg.privacy, setup))
  name = plugin.noise_multiplier_option
  if name is None or alg.privacy is None:
    return alg, None
  given = getattr(setup.options, name)
  if saved_z is not None:
    z = np.asarray(saved_z, np.float32) if np.ndim(saved_z) else float(np.asarray(saved_z))
    return plugin.with_noise_multiplier(alg, z), z
  if given is None:
    target = check_epsilon(cfg.target_epsilon, "target_epsilon")  # what calibrates z
    z = run_privacy.calibrate_noise_multiplier(alg.privacy, cfg.rounds, target, cfg.delta,
                                               cfg.accountant)
    return plugin.with_noise_multiplier(alg, z), z
  if alg.privacy.per_client:
    return alg, np.asarray(alg.config[name], np.float32)
  return alg, float(given)


def rounds_dependent(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
  """The keys of an algorithm's config (other than ``rounds``) that differ between
  ``before`` and ``after``, built for different numbers of rounds."""
  def plain(v):
    if isinstance(v, dict):
      return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
      return [plain(x) for x in v]
    return np.asarray(v).tolist() if hasattr(v, "__array__") else v
  a = {k: plain(v) for k, v in before.items()}
  b = {k: plain(v) for k, v in after.items()}
  return sorted(k for k in set(a) | set(b) if k != "rounds" and a.get(k) != b.get(k))
