"""Canary-audit targets of DP-FedAvg, DP-FedSGD and record-level DP-FedAvg: their worlds
and deliberate breaks (``fedjax-dp audit --algorithm dp_fedavg``), returned by the
plug-ins' `fedjax_dp.algorithms.interface.FederatedAlgorithm.audit_targets` and collected
by `fedjax_dp.algorithms.audit_targets`. The shared pieces (`Target`, the delta, the
common breaks) are `fedjax_dp.algorithms.audit_common`'s.

The breaks besides the common ones: ``noise-off``, ``no-clip`` (no noise / no clipping,
claim unchanged); ``fixed-size-z`` (fixed-size cohorts accounted with ``std / C``
instead of the replace-one ``std / 2C``); ``min-over-sampled`` (per-client
noise multipliers reported as the smallest over the clients sampled in the round, and
rounds without them composed as nothing); ``amplified-claim`` (uploads seen with
their senders accounted with amplification by sampling);
``count-denominators`` (record level: local DP-SGD divided by the client's own
``q n_k``, empty clients skipping their steps).
"""

from __future__ import annotations

from typing import Any, Dict, List

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.algorithms.audit_common import (AMPLIFIED_CLAIM, COMMON_BREAKS, DELTA,
                                               FEATURES, Target, amplified_claim,
                                               audit_model, canary_vector,
                                               declared_observation, planned_claim,
                                               schedule, spec_of, zero_params)
from fedjax_dp.algorithms.dp_fedavg.algorithm import dp_fedavg, dp_fedavg_record_level
from fedjax_dp.auditing import Setup, ledger_claim, population, stored_update_client
from fedjax_dp.federated import server
from fedjax_dp.federated.client import DpSgdConfig, make_client_update
from fedjax_dp.federated.round import RoundConfig, make_round
from fedjax_dp.federated.sampling import PoissonSampler
from fedjax_dp.privacy.ledger import PrivacyLedger

# ---------------------------------------------------------------------------
# User level: crafted updates through the real round.
# ---------------------------------------------------------------------------

#: Each target's size (tuned so that a 20,000-repetition audit proves more than the claim
#: when the noise is halved, and less when it is not).
PARAMS: Dict[str, Dict[str, Any]] = {
    "dp_fedavg/poisson": dict(rounds=3, q=0.8, z=2.6, others=3),
    "dp_fedavg/fixed_size": dict(rounds=1, n=10, m=9, z=3.0),
    "dp_fedavg/fixed_size_everyone": dict(rounds=2, n=3, m=3, z=3.0),
    "dp_fedavg/local_per_client": dict(rounds=4, q=0.5, z=2.0),
    "dp_fedavg/local_fixed_size": dict(rounds=1, n=4, m=1, z=2.0),
    "dp_fedavg/adaptive_clipping": dict(rounds=3, q=0.8, z=2.6, others=3, count_ratio=4.0),
    "dp_fedavg_record_level": dict(rounds=2, steps=1, z=2.2, record_rate=0.8),
}


def _dp_fedavg_setup(brk: str, sampler: str, placement: str, rounds: int, z: float,
                     q: float = 1.0, others: int = 0, n: int = 0, m: int = 0) -> Setup:
  model = audit_model()
  params = model.init(jax.random.key(0))
  client = stored_update_client(params)
  clip = 1.0
  u = canary_vector(clip)
  size = u.size
  if sampler == "poisson" and placement == "central":    # add/remove the canary
    data_out = population(np.zeros((others, FEATURES * 3), np.float32))
    rows_in = np.zeros((others + 1, FEATURES * 3), np.float32)
    rows_in[-1, :size] = u
    data_in = population(rows_in)
    kw = dict(sampling_rate=q)
    inclusion = q
  elif sampler == "fixed_size":                          # replace -u by +u
    rows_out = np.zeros((n, FEATURES * 3), np.float32)
    rows_out[-1, :size] = -u
    rows_in = rows_out.copy()
    rows_in[-1, :size] = u
    data_out, data_in = population(rows_out), population(rows_in)
    kw = dict(clients_per_round=m, sampler="fixed_size", noise_placement=placement)
    q = inclusion = m / n
  else:                                                  # local, per-client: zero-out
    data_out = population(np.zeros((1, FEATURES * 3), np.float32))
    rows_in = np.zeros((1, FEATURES * 3), np.float32)
    rows_in[0, :size] = u
    data_in = population(rows_in)
    kw = dict(sampling_rate=q, noise_placement="local")
    inclusion = q
  z_hp = np.full(data_in.num_clients, z, np.float32) if placement == "local" else z

  canary = data_in.num_clients - 1
  observed = dict(observed_client=canary) if placement == "local" else {}

  def build(data, **extra):
    return dp_fedavg(model, data, clip_norm=clip, noise_multiplier=z_hp,
                     client_update=client, **kw, **observed, **extra)

  alg_in = build(data_in)
  # The same mechanism runs in both worlds: one compiled round where the populations
  # have the same size; under add/remove the other world's round keeps the public
  # constants (the fixed denominator q W).
  alg_out = (alg_in if data_out.num_clients == data_in.num_clients else
             build(data_out, population_weight=float(data_in.num_clients)))
  hp = alg_in.hparams
  claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA))
  if brk in ("noise-half", "noise-off"):
    factor = 0.5 if brk == "noise-half" else 0.0
    hp = hp._replace(noise_multiplier=np.asarray(z_hp, np.float32) * factor)
    claim = planned_claim(spec_of(alg_in), z, rounds)
  elif brk == "no-clip":  # the same noise std z C, but updates are not clipped
    hp = hp._replace(clip_norm=1e6, noise_stddev=np.float32(z * clip))
    claim = planned_claim(spec_of(alg_in), z, rounds)
  elif brk == "fixed-size-z":  # the old report: std / C, not std / (2C)
    claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA),
                         transform=lambda m: dict(m, noise_multiplier=2.0 * np.asarray(
                             m["noise_multiplier"], np.float64)))
  elif brk == "min-over-sampled":
    kwargs = dict(spec_of(alg_in).ledger_kwargs(), relation="add_remove",
                  observation="aggregate")
    claim = ledger_claim(lambda: PrivacyLedger(DELTA, **kwargs),
                         transform=lambda m: _min_over_sampled(m, q))
  elif brk == "amplified-claim":
    claim = amplified_claim(spec_of(alg_in))
  state = alg_in.init(jax.random.key(1))
  return Setup(alg_out.round_fn, alg_in.round_fn, data_out, data_in, state,
               schedule(hp, rounds), inclusion, claim, DELTA,
               description=f"dp_fedavg, {sampler} cohorts, {placement} noise",
               **declared_observation(spec_of(alg_in)))


def _dp_fedavg_adaptive_setup(brk: str, rounds: int, z: float, q: float, others: int,
                              count_ratio: float) -> Setup:
  """DP-FedAvg with adaptive clipping (Andrew et al. 2021), Poisson cohorts, add/remove
  the canary user: its update is 10 C_0 (always clipped to the round's C_t, its bit
  "unclipped" 0), the others' are zero (never clipped). Each round releases the sum
  (z_Delta) and the count (z_b = ``count_ratio * z``); the claim is the combined z's
  (the ledger's, from the rounds' reported z), the audit sees the model, i.e. the sums,
  scaled by the C_t the earlier counts chose. The public constants (the denominator
  q W and the cohort size m of the count) are the "in" world's in both worlds.
  ``noise-half``: both releases get half their noise (the combined z halved), the claim
  is for the configured z."""
  from fedjax_dp.privacy.adaptive_clipping import AdaptiveClipping
  model = audit_model()
  params = model.init(jax.random.key(0))
  client = stored_update_client(params)
  u = canary_vector(1.0)
  data_out = population(np.zeros((others, FEATURES * 3), np.float32))
  rows_in = np.zeros((others + 1, FEATURES * 3), np.float32)
  rows_in[-1, :u.size] = u
  data_in = population(rows_in)
  factor = 0.5 if brk == "noise-half" else 1.0
  adaptive = AdaptiveClipping(initial_clip_norm=1.0,
                              count_stddev=factor * count_ratio * z * 0.5,  # Delta_b = 1/2
                              expected_cohort_size=q * data_in.num_clients)

  def build(data, **extra):
    return dp_fedavg(model, data, noise_multiplier=z, sampling_rate=q,
                     client_update=client, adaptive_clipping=adaptive, **extra)

  alg_in = build(data_in)
  alg_out = build(data_out, population_weight=float(data_in.num_clients))
  hp = alg_in.hparams
  claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA))
  if brk == "noise-half":
    hp = hp._replace(noise_multiplier=np.float32(z * factor))
    claim = planned_claim(spec_of(alg_in), z, rounds)
  state = alg_in.init(jax.random.key(1))
  return Setup(alg_out.round_fn, alg_in.round_fn, data_out, data_in, state,
               schedule(hp, rounds), q, claim, DELTA,
               description="dp_fedavg, adaptive clipping, Poisson cohorts, central noise")


def _min_over_sampled(metrics, q: float):
  """The old report of per-client noise: Poisson-amplified events (rate q) with the
  smallest z over the clients sampled in the round (here the population is the canary
  alone: its z when sampled, and nothing -- an infinite z, composed as no event -- when
  the cohort is empty; the old code raised on that)."""
  z = np.asarray(metrics.pop("client_noise_multipliers"), np.float64)
  sampled = np.asarray(metrics["num_clients"]) > 0
  metrics["noise_multiplier"] = np.where(sampled, np.min(z, axis=-1), np.inf)
  metrics["sampling_rate"] = np.full(sampled.shape, q)
  return metrics


# ---------------------------------------------------------------------------
# Record level: real local DP-SGD, the canary is one example.
# ---------------------------------------------------------------------------


def _record_level_setup(brk: str, rounds: int, steps: int, z: float,
                        record_rate: float = 1.0) -> Setup:
  model = audit_model()
  c = 1.0
  x = np.zeros((1, 1, FEATURES), np.float32)
  x[0, 0, 0] = 5.0                         # per-example gradient 3.5 > C: clipped
  data_in = population(x, counts=np.array([1]))
  data_out = population(x, counts=np.array([0]))     # add/remove the canary record

  def build(data):
    return dp_fedavg_record_level(model, data, record_clip_norm=c, record_noise_multiplier=z,
                                  record_sampling_rate=record_rate, sampling_rate=1.0,
                                  local_steps=steps, batch_size=1, client_learning_rate=0.01)

  alg_in = build(data_in)  # both worlds: one client, the same constants and round
  hp = alg_in.hparams
  claim = ledger_claim(lambda: spec_of(alg_in).make_ledger(DELTA))
  round_out = round_in = alg_in.round_fn
  if brk == "noise-half":
    hp = hp._replace(client=hp.client._replace(record_noise_multiplier=z / 2))
    claim = planned_claim(spec_of(alg_in), z, rounds)
  elif brk == "count-denominators":
    round_out = round_in = _count_denominator_round(model, data_in, z, c, steps)
  state = zero_params(alg_in.init(jax.random.key(1)))
  return Setup(round_out, round_in, data_out, data_in, state, schedule(hp, rounds),
               record_rate, claim, DELTA,
               description="dp_fedavg_record_level: one record added to an empty client")


def _count_denominator_round(model, data, z, c, steps):
  """The round of the old record-level code: each DP-SGD step divided by the client's own
  expected batch ``q_r n_k``, an empty client taking no step, uploads weighted by n_k."""
  cfg = DpSgdConfig.create(data.max_examples, 1.0, local_steps=steps)
  client = make_client_update(model, optax.sgd(1.0), batch_size=1,
                              max_examples=data.max_examples, dp_sgd=cfg)

  def old_client(params, x, y, count, key, hp):
    q = jnp.asarray(hp.record_sampling_rate, jnp.float32)
    denom = jnp.maximum(q * count.astype(jnp.float32), 1e-12)
    update, m = client(params, x, y, count, key, hp._replace(record_denominator=denom))
    return jax.tree_util.tree_map(lambda l: jnp.where(count > 0, l, 0.0), update), m

  config = RoundConfig(clip_updates=False, noise="none", weighting="data_size",
                       denominator="actual", record_level=True, dp_steps=cfg.num_steps)
  return make_round(old_client, PoissonSampler.create(data.num_clients, 1.0),
                    server.server_optimizer("fedavg", 1.0), config)


# ---------------------------------------------------------------------------
# The targets (built once: `DpFedAvg` and `DpFedSgd` share the user-level ones).
# ---------------------------------------------------------------------------

def _user_level_targets() -> List[Target]:
  dpf = "user-level, {rel}, {samp}, sensitivity {sens}"
  return [
    Target("dp_fedavg/poisson", "dp_fedavg",
           dpf.format(rel="add/remove", samp="Poisson cohorts", sens="C"),
           {**COMMON_BREAKS, "noise-off": "no noise, claim unchanged",
            "no-clip": "updates not clipped, claim unchanged"},
           lambda b: _dp_fedavg_setup(b, "poisson", "central",
                                      **PARAMS["dp_fedavg/poisson"])),
    Target("dp_fedavg/fixed_size", "dp_fedavg",
           dpf.format(rel="replace-one", samp="fixed-size cohorts", sens="2C"),
           {**COMMON_BREAKS, "fixed-size-z": "z = std / C instead of std / 2C (1a)"},
           lambda b: _dp_fedavg_setup(b, "fixed_size", "central",
                                      **PARAMS["dp_fedavg/fixed_size"])),
    Target("dp_fedavg/fixed_size_everyone", "dp_fedavg",
           dpf.format(rel="replace-one", samp="a fixed-size cohort of the whole "
                      "population (plain Gaussian events)", sens="2C"),
           {**COMMON_BREAKS, "fixed-size-z": "z = std / C instead of std / 2C (1a)"},
           lambda b: _dp_fedavg_setup(b, "fixed_size", "central",
                                      **PARAMS["dp_fedavg/fixed_size_everyone"])),
    Target("dp_fedavg/local_per_client", "dp_fedavg",
           dpf.format(rel="zero-out", samp="Poisson cohorts, local noise, a noise "
                      "multiplier per client", sens="C per upload"),
           {**COMMON_BREAKS, "min-over-sampled": "each round reports the smallest z of "
            "the sampled clients (1b)"},
           lambda b: _dp_fedavg_setup(b, "poisson", "local",
                                      **PARAMS["dp_fedavg/local_per_client"])),
    Target("dp_fedavg/local_fixed_size", "dp_fedavg",
           dpf.format(rel="replace-one", samp="fixed-size cohorts, local noise: each "
                      "upload seen with its sender (visible participation)",
                      sens="2C per upload"),
           {**COMMON_BREAKS, "amplified-claim": AMPLIFIED_CLAIM},
           lambda b: _dp_fedavg_setup(b, "fixed_size", "local",
                                      **PARAMS["dp_fedavg/local_fixed_size"])),
    Target("dp_fedavg/adaptive_clipping", "dp_fedavg",
           dpf.format(rel="add/remove", samp="Poisson cohorts, adaptive clip norm C_t "
                      "(Andrew et al. 2021): the sum and the count of unclipped updates "
                      "(sensitivity 1/2) as one Gaussian of the combined z",
                      sens="C_t"),
           dict(COMMON_BREAKS),
           lambda b: _dp_fedavg_adaptive_setup(b, **PARAMS["dp_fedavg/adaptive_clipping"])),
  ]


_USER_LEVEL: List[Target] = _user_level_targets()
_RECORD_LEVEL: List[Target] = [
    Target("dp_fedavg_record_level", "dp_fedavg_record_level",
           "record-level, add/remove one record, Poisson examples, sensitivity C_r",
           {**COMMON_BREAKS, "count-denominators": "steps divided by q n_k, empty "
            "clients skip their steps, uploads weighted by n_k (1d)"},
           lambda b: _record_level_setup(b, **PARAMS["dp_fedavg_record_level"]))
]


def targets() -> List[Target]:
  """User-level DP-FedAvg's audit targets (DP-FedSGD runs the same round: the same),
  with distributed DP's (`fedjax_dp.algorithms.dp_fedavg.audit_distributed`)."""
  from fedjax_dp.algorithms.dp_fedavg import audit_distributed
  return list(_USER_LEVEL) + audit_distributed.targets()


def record_level_targets() -> List[Target]:
  """Record-level DP-FedAvg's audit target."""
  return list(_RECORD_LEVEL)
