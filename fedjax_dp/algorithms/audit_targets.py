"""Canary-audit targets of every shipped mechanism, and the deliberate breaks that re-
introduce the bugs the audit must catch (``fedjax-dp audit --algorithm NAME
[--break B]``).

Each `Target` builds a `fedjax_dp.auditing.Setup` from the algorithm's own builder
(its sampler, clipping, local training, noise, server step, reported noise multiplier
and `PrivacySpec`) on a tiny population with a canary, at a size where a 20,000-
repetition audit can prove an epsilon above the claim when the noise is half what is
claimed. The breaks:

* ``noise-half``: the round adds half the noise the run claims (every target);
* ``noise-off``, ``no-clip``: no noise / no clipping, claim unchanged (DP-FedAvg);
* ``fixed-size-z``: fixed-size cohorts accounted with ``std / C`` instead of the
  replace-one ``std / 2C`` (issue 13, 1a);
* ``min-over-sampled``: per-client noise multipliers reported as the smallest over the
  clients *sampled* in the round, and rounds without them composed as nothing (1b);
* ``paper-sensitivity``: papers 000/004 accounted with the paper's assumed sensitivity
  2C/|D_k|, which unclipped local training does not enforce (1c); paper 002 (DP-MOCHA)
  with Corollary 2's dual sensitivity s1 = (8 lam + beta) / (beta n_t), which one SDCA
  step does not enforce; paper 001 (LAPA) with eq. 18's 2C/|D_i|, which eq. 17's
  clipping of the minibatch mean does not enforce (2C);
* ``count-denominators``: local DP-SGD divided by the client's own ``q n_k`` and empty
  clients skipping their steps (1d).

A broken target's claim is what the broken code would report; the fixed target's claim
is its ledger's epsilon from the metrics its rounds report.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.algorithms import amplitude_varying as av
from fedjax_dp.algorithms import padpfl as pp
from fedjax_dp.algorithms.dp_fedavg import dp_fedavg, dp_fedavg_record_level
from fedjax_dp.auditing import Setup, ledger_claim, population, stored_update_client
from fedjax_dp.federated import server
from fedjax_dp.federated.client import DpSgdConfig, make_client_update
from fedjax_dp.federated.round import RoundConfig, make_round
from fedjax_dp.federated.sampling import PoissonSampler
from fedjax_dp.models import create_model
from fedjax_dp.privacy import accountants
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError

#: The delta of every audit claim (a larger delta lowers the claim, not the bound, so
#: audits of this size can catch smaller violations).
DELTA = 1e-3
_D, _CLASSES = 4, 2          # linear model: 4 features, 2 classes, P = 10 parameters
COMMON_BREAKS = {"none": "the shipped code",
                 "noise-half": "the round adds half the noise the run claims"}
#: Breaks that change only what the code claims, not what the round does: they share
#: the shipped code's simulation (`fedjax_dp.auditing.Setup.simulation_key`).
CLAIM_ONLY_BREAKS = ("none", "fixed-size-z", "min-over-sampled", "paper-sensitivity")


@dataclasses.dataclass(frozen=True)
class Target:
  """One audited mechanism (a row of the README's mechanism table).

  Attributes:
    name: ``algorithm/variant``.
    algorithm: the registry name.
    mechanism: unit, relation, sampler and sensitivity, in words.
    breaks: break name -> what it re-introduces (always ``"none"`` and ``"noise-half"``).
    build_setup: ``build_setup(break_name) -> Setup`` (use `build`).
  """
  name: str
  algorithm: str
  mechanism: str
  breaks: Dict[str, str]
  build_setup: Callable[[str], Setup]

  def build(self, brk: str = "none") -> Setup:
    """The `Setup` of the shipped code (``"none"``) or of one deliberate break.

    Raises:
      FedJaxDpError: a break this target does not offer.
    """
    if brk not in self.breaks:
      raise FedJaxDpError(f"break must be one of {sorted(self.breaks)} for {self.name}, "
                          f"got {brk!r}.")
    sim = "shipped" if brk in CLAIM_ONLY_BREAKS else brk
    return dataclasses.replace(self.build_setup(brk), simulation_key=f"{self.name}/{sim}")


def _model():
  return create_model("linear", (_D,), _CLASSES)


def _planned_claim(spec, noise_multiplier: float, rounds: int) -> Callable:
  """The claim the code makes for the configured noise (its `PrivacySpec`), for breaks
  that change the noise actually added."""
  event = dp_accounting.SelfComposedDpEvent(spec.round_event(noise_multiplier), rounds)
  eps = accountants.event_epsilon(event, DELTA, "pld" if spec.supports("pld") else "rdp")
  return lambda metrics: eps


def _canary_vector(clip: float) -> np.ndarray:
  u = np.zeros(_D * _CLASSES + _CLASSES, np.float32)
  u[0] = 10.0 * clip                       # 10x the clip norm: clipping must cut it
  return u


def _schedule(hp, rounds: int):
  return jax.tree_util.tree_map(
      lambda v: np.broadcast_to(np.asarray(v, np.float32),
                                (rounds,) + np.shape(v)).copy(), hp)


# ---------------------------------------------------------------------------
# DP-FedAvg (user level): crafted updates through the real round.
# ---------------------------------------------------------------------------

#: Each target's size (tuned so that a 20,000-repetition audit proves more than the claim
#: when the noise is halved, and less when it is not).
PARAMS = {
    "dp_fedavg/poisson": dict(rounds=3, q=0.8, z=2.6, others=3),
    "dp_fedavg/fixed_size": dict(rounds=1, n=10, m=9, z=3.0),
    "dp_fedavg/fixed_size_everyone": dict(rounds=2, n=3, m=3, z=3.0),
    "dp_fedavg/local_per_client": dict(rounds=4, q=0.5, z=2.0),
    "dp_fedavg/adaptive_clipping": dict(rounds=3, q=0.8, z=2.6, others=3, count_ratio=4.0),
    "dp_fedavg_record_level": dict(rounds=2, steps=1, z=2.2, record_rate=0.8),
    "amplitude_varying/paper": dict(epsilon=0.62, clients=1, k=1),
    "amplitude_varying/clipped_gradients": dict(epsilon=2.5, clients=1, k=1),
    "padpfl/paper": dict(epsilon=0.63),
    "padpfl/clipped_gradients": dict(epsilon=2.5),
    "rdp_pfl/support": dict(stage="support", rounds=1, z=2.2, q_query=0.01,
                            q_support=1.0, eta=1e-4, beta=1.0),
    "rdp_pfl/paper": dict(stage="paper_support", rounds=1, z=4.4, q_query=0.01,
                          q_support=1.0, eta=1e-4, beta=1.0),
    "rdp_pfl/query": dict(stage="query", rounds=1, z=2.2, q_query=1.0, q_support=0.01,
                          eta=1.0, beta=1e-4),
    "dp_mocha": dict(devices=32, lam=0.75, xi=1.0, sigma1=2.4, sigma2=6.0),
    "lapa/per_example": dict(clipping="per_example", rounds=2, epsilon_total=5.3,
                             channel_ratio=1.25),
    "lapa/aggregate": dict(clipping="aggregate", rounds=2, epsilon_total=1.77,
                           channel_ratio=1.25),
    "dp_ftrl/tree": dict(mechanism="tree", rounds=4, cycle=4, z=1.84),
    "dp_ftrl/banded": dict(mechanism="banded", rounds=4, cycle=2, bands=2, z=1.5),
}


def _dp_fedavg_setup(brk: str, sampler: str, placement: str, rounds: int, z: float,
                     q: float = 1.0, others: int = 0, n: int = 0, m: int = 0) -> Setup:
  model = _model()
  params = model.init(jax.random.key(0))
  client = stored_update_client(params)
  clip = 1.0
  u = _canary_vector(clip)
  size = u.size
  if sampler == "poisson" and placement == "central":    # add/remove the canary
    data_out = population(np.zeros((others, _D * 3), np.float32))
    rows_in = np.zeros((others + 1, _D * 3), np.float32)
    rows_in[-1, :size] = u
    data_in = population(rows_in)
    kw = dict(sampling_rate=q)
    inclusion = q
  elif sampler == "fixed_size":                          # replace -u by +u
    rows_out = np.zeros((n, _D * 3), np.float32)
    rows_out[-1, :size] = -u
    rows_in = rows_out.copy()
    rows_in[-1, :size] = u
    data_out, data_in = population(rows_out), population(rows_in)
    kw = dict(clients_per_round=m, sampler="fixed_size")
    q = inclusion = m / n
  else:                                                  # local, per-client: zero-out
    data_out = population(np.zeros((1, _D * 3), np.float32))
    rows_in = np.zeros((1, _D * 3), np.float32)
    rows_in[0, :size] = u
    data_in = population(rows_in)
    kw = dict(sampling_rate=q, noise_placement="local")
    inclusion = q
  z_hp = np.full(data_in.num_clients, z, np.float32) if placement == "local" else z

  def build(data, **extra):
    return dp_fedavg(model, data, clip_norm=clip, noise_multiplier=z_hp,
                     client_update=client, **kw, **extra)

  alg_in = build(data_in)
  # The same mechanism runs in both worlds: one compiled round where the populations
  # have the same size; under add/remove the other world's round keeps the public
  # constants (the fixed denominator q W).
  alg_out = (alg_in if data_out.num_clients == data_in.num_clients else
             build(data_out, population_weight=float(data_in.num_clients)))
  hp = alg_in.hparams
  claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA))
  if brk in ("noise-half", "noise-off"):
    factor = 0.5 if brk == "noise-half" else 0.0
    hp = hp._replace(noise_multiplier=np.asarray(z_hp, np.float32) * factor)
    claim = _planned_claim(alg_in.privacy, z, rounds)
  elif brk == "no-clip":  # the same noise std z C, but updates are not clipped
    hp = hp._replace(clip_norm=1e6, noise_stddev=np.float32(z * clip))
    claim = _planned_claim(alg_in.privacy, z, rounds)
  elif brk == "fixed-size-z":  # the old report: std / C, not std / (2C)
    claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA),
                         transform=lambda m: dict(m, noise_multiplier=2.0 * np.asarray(
                             m["noise_multiplier"], np.float64)))
  elif brk == "min-over-sampled":
    kwargs = dict(alg_in.privacy.ledger_kwargs(), relation="add_remove")
    claim = ledger_claim(lambda: PrivacyLedger(DELTA, **kwargs),
                         transform=lambda m: _min_over_sampled(m, q))
  state = alg_in.init(jax.random.key(1))
  return Setup(alg_out.round_fn, alg_in.round_fn, data_out, data_in, state,
               _schedule(hp, rounds), inclusion, claim, DELTA,
               description=f"dp_fedavg, {sampler} cohorts, {placement} noise")


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
  model = _model()
  params = model.init(jax.random.key(0))
  client = stored_update_client(params)
  u = _canary_vector(1.0)
  data_out = population(np.zeros((others, _D * 3), np.float32))
  rows_in = np.zeros((others + 1, _D * 3), np.float32)
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
  claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA))
  if brk == "noise-half":
    hp = hp._replace(noise_multiplier=np.float32(z * factor))
    claim = _planned_claim(alg_in.privacy, z, rounds)
  state = alg_in.init(jax.random.key(1))
  return Setup(alg_out.round_fn, alg_in.round_fn, data_out, data_in, state,
               _schedule(hp, rounds), q, claim, DELTA,
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

def _zero_params(state):
  """The audits start from a zero model: softmax outputs are uniform, so a canary
  example's gradient is large (clipped) and points the same way in every repetition."""
  return state._replace(params=jax.tree_util.tree_map(jnp.zeros_like, state.params))


def _record_level_setup(brk: str, rounds: int, steps: int, z: float,
                        record_rate: float = 1.0) -> Setup:
  model = _model()
  c = 1.0
  x = np.zeros((1, 1, _D), np.float32)
  x[0, 0, 0] = 5.0                         # per-example gradient 3.5 > C: clipped
  data_in = population(x, counts=np.array([1]))
  data_out = population(x, counts=np.array([0]))     # add/remove the canary record

  def build(data):
    return dp_fedavg_record_level(model, data, record_clip_norm=c, record_noise_multiplier=z,
                                  record_sampling_rate=record_rate, sampling_rate=1.0,
                                  local_steps=steps, batch_size=1, client_learning_rate=0.01)

  alg_in = build(data_in)  # both worlds: one client, the same constants and round
  hp = alg_in.hparams
  claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA))
  round_out = round_in = alg_in.round_fn
  if brk == "noise-half":
    hp = hp._replace(client=hp.client._replace(record_noise_multiplier=z / 2))
    claim = _planned_claim(alg_in.privacy, z, rounds)
  elif brk == "count-denominators":
    round_out = round_in = _count_denominator_round(model, data_in, z, c, steps)
  state = _zero_params(alg_in.init(jax.random.key(1)))
  return Setup(round_out, round_in, data_out, data_in, state, _schedule(hp, rounds),
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
# Papers 004 and 000: real local training, the canary is one example.
# ---------------------------------------------------------------------------

def _rescale(metrics, factor: float):
  """The reported noise multipliers times ``factor`` (the paper's sensitivity instead of
  the enforced one; or the configured noise when the round added half of it)."""
  z = np.asarray(metrics["noise_multiplier"], np.float64)
  return dict(metrics, noise_multiplier=z * factor)


def _paper_worlds(n_per_client: int, clients: int):
  """Replace-one worlds: the canary client's first example (huge features) has label 0
  ("in") or 1 ("out"): unclipped gradients push its model to opposite ends of the
  parameter ball; the other examples are zero."""
  x = np.zeros((clients, n_per_client, _D), np.float32)
  x[-1, 0, 0] = 1000.0
  y_in = np.zeros((clients, n_per_client), np.int32)
  y_out = y_in.copy()
  y_out[-1, 0] = 1
  return population(x, labels=y_out), population(x, labels=y_in)


def _amplitude_varying_setup(brk: str, mode: str, epsilon: float, clients: int,
                             k: int) -> Setup:
  model = _model()
  data_out, data_in = _paper_worlds(n_per_client=4, clients=clients)
  c, lr = 1.0, 1.0
  extra = dict(sensitivity_mode=mode)
  if mode == "clipped_gradients":
    extra["grad_clip_norm"] = 0.5

  def build(data):
    return av.amplitude_varying(model, data, epsilon=epsilon, delta=DELTA, rounds=1,
                                clients_per_round=k, local_steps=1, learning_rate=lr,
                                clip_norm=c, **extra)

  alg_in = build(data_in)  # replace-one: the same population size, constants and round
  cfg = alg_in.config
  stddevs = np.asarray(cfg["stddevs"])
  claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA))
  stddevs_sim = stddevs
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    stddevs_sim = stddevs / 2
    claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA),
                         transform=lambda m: _rescale(m, 2.0))
  elif brk == "paper-sensitivity":  # the old claim: z = sigma / Delta_s
    claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA),
                         transform=lambda m: _rescale(
                             m, cfg["sensitivity"] / cfg["sensitivity_paper"]))
  state = _zero_params(alg_in.init(jax.random.key(1)))
  return Setup(alg_in.round_fn, alg_in.round_fn, data_out, data_in, state,
               av.hparams_for(cfg, stddevs_sim), cfg["sampling_rate"], claim, DELTA,
               description=f"amplitude_varying ({mode}): one example replaced")


def _padpfl_setup(brk: str, mode: str, epsilon: float) -> Setup:
  model = _model()
  data_out, data_in = _paper_worlds(n_per_client=4, clients=1)
  extra = dict(sensitivity_mode=mode)
  if mode == "clipped_gradients":
    extra["grad_clip_norm"] = 0.5

  def build(data):
    return pp.padpfl(model, data, impact_factors=np.ones(1), epsilon=epsilon, delta=DELTA,
                     rounds=1, exposures=1, clip_bound=1.0, learning_rate=1.0,
                     local_steps=1, prox_mu=0.0, **extra)

  alg_in = build(data_in)  # replace-one: the same population size, constants and round
  cfg = dict(alg_in.config)
  claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA))
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    cfg = dict(cfg, sigma_c=[s / 2 for s in cfg["sigma_c"]],
               sigma_s=[s / 2 for s in cfg["sigma_s"]])
    claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA),
                         transform=lambda m: _rescale(m, 2.0))
  elif brk == "paper-sensitivity":
    claim = ledger_claim(lambda: alg_in.privacy.make_ledger(DELTA),
                         transform=lambda m: _rescale(
                             m, cfg["sensitivity"] / cfg["sensitivity_paper"]))
  state = _zero_params(alg_in.init(jax.random.key(1)))
  return Setup(alg_in.round_fn, alg_in.round_fn, data_out, data_in, state,
               pp.schedule_hparams(cfg), 1.0, claim, DELTA,
               description=f"padpfl ({mode}): one example replaced")


# ---------------------------------------------------------------------------
# Paper 003: the canary is one record of a source client's support (or query) set.
# ---------------------------------------------------------------------------

def _rdp_pfl_setup(brk: str, stage: str, rounds: int, z: float, q_query: float,
                   q_support: float, eta: float, beta: float) -> Setup:
  """One source client whose rows are zero-feature fillers (same gradient in both
  worlds) plus the canary, a record with a large feature (its clipped gradient or
  meta-gradient moves the model), added at the next row: a support row (``stage=
  "support"``: the meta-gradient release, audited through the upload of
  ``clip_mode="per_example"``) or a query row (``"query"``: the inner release, whose
  theta~ is the upload's base in ``clip_mode="dp_fedavg"``; in MAML modes the upload
  sees it only through theta~). Add/remove of that record. The other stage's step is
  made tiny (eta or beta), so that the upload is the audited release itself, and its
  sampling rate small, so that the claim (both releases composed) is mostly the
  audited release's. ``"paper_support"``: ``clip_mode="paper"``, whose support release
  is a clipped batch *mean*: the support filler's gradient is large and the canary's
  points the opposite way three times as hard, so adding it flips the clipped mean (a
  change of 2C, the sensitivity the code charges)."""
  from fedjax_dp.algorithms.rdp_pfl.algorithm import rdp_pfl
  from fedjax_dp.data.federated_data import FederatedData
  model = _model()
  n_in = 4 if stage == "query" else 3     # rows 0, 2 support; 1, 3 query
  x = np.zeros((1, n_in, _D), np.float32)
  x[0, -1, 0] = 5.0
  if stage == "paper_support":
    x[0, 0, 0], x[0, -1, 0] = 50.0, -150.0
  fd = FederatedData("audit", x, np.zeros((1, n_in), np.int32), np.array([n_in]), 2)
  mode = {"support": "per_example", "query": "dp_fedavg", "paper_support": "paper"}[stage]
  alg = rdp_pfl(model, fd, clip_norm=1.0, noise_multiplier=z, query_sampling_rate=q_query,
                support_sampling_rate=q_support, inner_learning_rate=eta,
                outer_learning_rate=beta, clip_mode=mode)
  data_in = population(x, counts=np.array([n_in]))
  data_out = population(x, counts=np.array([n_in - 1]))
  hp = alg.hparams
  claim = ledger_claim(lambda: alg.privacy.make_ledger(DELTA))
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(noise_multiplier=z / 2)
    claim = ledger_claim(lambda: alg.privacy.make_ledger(DELTA), transform=lambda m: {
        k: (np.asarray(v) * 2.0 if k.endswith("_noise_multiplier") else v)
        for k, v in m.items()})
  state = _zero_params(alg.init(jax.random.key(1)))
  return Setup(alg.round_fn, alg.round_fn, data_out, data_in, state, _schedule(hp, rounds),
               q_query if stage == "query" else q_support, claim, DELTA,
               description=f"rdp_pfl: one {stage} record added to a source client")


# ---------------------------------------------------------------------------
# Paper 002: DP-MOCHA, the canary is the single record of one device.
# ---------------------------------------------------------------------------

def _dp_mocha_observer(round_fn: Callable, canary: int, direction: np.ndarray) -> Callable:
  """DP-MOCHA's shipped round as an audited round whose model is the running sum of the
  canary device's two releases, whitened (the round's own state rides in
  ``opt_state``):

    o = ( dalpha~_c / std_b ,  sign(dalpha~_c) <e, du_c> / std_p )

  with ``std_b``, ``std_p`` the round's noise scales (lines 6, 7 of Algorithm 1) and
  ``e`` the unit ``direction`` in which the canary's features differ. For the worlds of
  `_dp_mocha_setup` (the canary's single record (x, +1) or (-x, -1), its dual step +1 or
  -1) o is Gaussian with identity covariance and mean +-(1 / z1, 1 / z2) / 2 (z1 = std_b
  / 2, z2 = std_p / (2 xi |dalpha~_c|)), and the log-likelihood ratio of the released
  (dalpha~_c, du_c) is linear in o: the audit's Gaussian score is the optimal test of
  exactly the mechanism the ledger composes. The round is built with
  ``expose_releases=True``, so its own dalpha~ and du come in ``extras["releases"]``
  (nothing is re-derived); they are removed before the metrics go on.
  """
  unit = jnp.asarray(direction / np.linalg.norm(direction), jnp.float32)

  def audited(state, data, hp, key):
    inner, metrics = round_fn(state.opt_state, data, hp, key)
    extras = dict(metrics.extras)
    noised = extras.pop("releases")
    metrics = metrics._replace(extras=extras)
    a = noised.dalpha_noisy[canary, 0]
    obs = jnp.stack([a / noised.dual_noise_std[canary],
                     jnp.sign(a) * jnp.dot(unit, noised.du[canary])
                     / noised.primal_noise_std[canary]])
    params = {"releases": state.params["releases"] + obs}
    return server.ServerState(params, inner, inner.round), metrics

  return audited


def _dp_mocha_setup(brk: str, devices: int, lam: float, xi: float, sigma1: float,
                    sigma2: float) -> Setup:
  """``devices`` devices of one record each, d = 1 (x = 1, label +1); the canary is
  device 0's record, (x, +1) ("in") or (-x, -1) ("out"): replace-one. One round, tau = 0
  and n_t = 1, so the one SDCA step (from alpha = 0, w = 0, Omega = I / m with c =
  xi / (2 lam) <= 1) lands on the box corner: dalpha = +1 or -1, the provable dual
  sensitivity 2 sqrt(min(steps, n_t)) = 2; and given dalpha~, the upload xi x dalpha~
  moves by 2 xi |dalpha~|, line 7's sensitivity. So both releases are at their worst
  case and the observation (`_dp_mocha_observer`) is the composed Gaussian mechanism
  the ledger claims, exactly. The other devices only make beta = xi m large, so that
  Corollary 2's s1 = (8 lam + beta) / (beta n_t) is below 2 (``paper-sensitivity``).
  The claim: the algorithm's `DeviceLedger` on the reported per-device multipliers."""
  from fedjax_dp.algorithms.dp_mocha import mechanism
  from fedjax_dp.algorithms.dp_mocha.algorithm import dp_mocha
  x_in = np.ones((devices, 1, 1), np.float32)
  x_out = x_in.copy()
  x_out[0, 0, 0] = -1.0
  y_in = np.ones((devices, 1), np.int32)
  y_out = y_in.copy()
  y_out[0, 0] = 0                                  # label 0 -> y = -1
  data_out, data_in = population(x_out, y_out), population(x_in, y_in)
  alg = dp_mocha(None, data_in, lam=lam, xi=xi, sigma1=sigma1, sigma2=sigma2,
                 update_omega=False,   # replace-one: one round function for both worlds
                 expose_releases=True)
  hp = alg.hparams
  make_ledger = lambda: alg.privacy.make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(sigma1=hp.sigma1 / 2, sigma2=hp.sigma2 / 2)
    claim = ledger_claim(make_ledger, transform=lambda m: dict(
        m, client_noise_multipliers=2.0 * np.asarray(m["client_noise_multipliers"],
                                                     np.float64)))
  elif brk == "paper-sensitivity":  # line 6 accounted as std_b / s1 = sigma1
    # Every device: n_t = 1, one step, so each reports z1 = s1 sigma1 / 2 for line 6.
    s1 = float(mechanism.dual_sensitivity_paper(lam, alg.config["beta"], 1))
    z1 = s1 * sigma1 / float(mechanism.dual_sensitivity_provable(1, 1))

    def paper(m):  # rho = z^-2 - z1^-2 + sigma1^-2 (inf: no release, rho = 0)
      z = np.asarray(m["client_noise_multipliers"], np.float64)
      with np.errstate(divide="ignore"):
        rho = np.where(np.isinf(z), 0.0, z ** -2.0 - z1 ** -2.0 + sigma1 ** -2.0)
        return dict(m, client_noise_multipliers=rho ** -0.5)

    claim = ledger_claim(make_ledger, transform=paper)
  audited = _dp_mocha_observer(alg.round_fn, canary=0, direction=np.ones(1))
  state = alg.init(jax.random.key(1))
  init = server.ServerState({"releases": jnp.zeros(2, jnp.float32)}, state, state.round)
  return Setup(audited, audited, data_out, data_in, init, _schedule(hp, 1), 1.0, claim,
               DELTA, description="dp_mocha: one device's single record (x, +1) replaced "
               "by (-x, -1)")


# ---------------------------------------------------------------------------
# Paper 001: LAPA, the canary is one record of the one device.
# ---------------------------------------------------------------------------

#: LAPA's audited device: the canary record (feature ``_LAPA_X`` on the first axis) and two
#: zero-feature fillers labelled 0 and 1; its minibatch is all of them (B = |D_i| = 3).
_LAPA_X, _LAPA_B = 10.0, 3


def _lapa_worlds():
  """Replace-one worlds of one device: the canary (x, 0) ("in") or (x, 1) ("out"). A
  linear softmax model's gradient on (x, y) is [x; 1] (x) (p - e_y): p_1 v for y = 0 and
  -p_0 v for y = 1, with v = [x; 1] (x) (-1, 1), whatever the parameters; both are longer
  than C (|v| p > C while the logits differ by less than about 2.6), so the clipped
  canary gradients are +-C v / |v| in every round, and the canary moves the per-example
  clipped mean by exactly the enforced 2C/B (or the clipped minibatch mean, eq. 17, by
  2C). The fillers' gradients are the same function of the model in both worlds."""
  x = np.zeros((1, _LAPA_B, _D), np.float32)
  x[0, 0, 0] = _LAPA_X
  y_in = np.array([[0, 0, 1]], np.int32)
  y_out = np.array([[1, 0, 1]], np.int32)
  return x, population(x, labels=y_out), population(x, labels=y_in)


def _lapa_setup(brk: str, clipping: str, rounds: int, epsilon_total: float,
                channel_ratio: float) -> Setup:
  """Paper 001 (LAPA, `fedjax_dp.algorithms.lapa.algorithm.lapa`) on one device holding
  the canary and two fillers (`_lapa_worlds`), its minibatch its whole data (the canary
  is in every upload: no sampling, as the ledger claims). The uniform allocator gives
  eps_T / T every round, so the artificial noise is sigma = c Delta_s T / eps_T (eqs.
  18-19); the decoded channel noise (eqs. 4, 6) is ``channel_ratio`` sigma >= sigma, so
  the switch (eq. 23) turns the artificial noise off after round 1: round 1 releases
  with SD sqrt(sigma^2 + sigma_c^2), the later rounds with sigma_c alone; both paths of
  the round and their reported noise multipliers are audited. With one device the
  model's change is -eta times the device's upload (the aggregation weight is 1): the
  audit observes exactly the release the ledger accounts. eta is small so that the
  model, and the fillers' gradients, barely move. The claim: the algorithm's own
  `DeviceLedger` on the reported per-device noise multipliers.
  ``paper-sensitivity`` (``clipping="aggregate"`` only: with per-example clipping and B =
  |D_i| the paper's 2C/|D_i| is the enforced 2C/B) accounts the same releases with the
  paper's Delta_s = 2C/|D_i| instead of the enforced 2C."""
  from fedjax_dp.algorithms.lapa import allocators, calibration
  from fedjax_dp.algorithms.lapa.algorithm import lapa
  from fedjax_dp.data.federated_data import FederatedData
  x, data_out, data_in = _lapa_worlds()
  clip = 1.0
  sigma = calibration.noise_std(calibration.gaussian_constant(DELTA),      # eqs. 18-19
                                calibration.paper_sensitivity(clip, _LAPA_B),
                                epsilon_total / rounds)
  acfg = allocators.AllocatorConfig(kind="uniform", epsilon_total=epsilon_total,
                                    rounds=rounds)
  fd = FederatedData("audit", x, np.asarray(data_in.y), np.array([_LAPA_B]), _CLASSES)
  alg = lapa(_model(), fd, allocator=acfg, clipping=clipping, batch_size=_LAPA_B,
             learning_rate=1e-4, clip_norm=clip, delta=DELTA,
             channel_std=np.array([channel_ratio * float(sigma)]))
  hp = alg.hparams
  make_ledger = lambda: alg.privacy.make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(paper_sensitivity=hp.paper_sensitivity / 2,
                     channel_std=hp.channel_std / 2)
    claim = ledger_claim(make_ledger, transform=lambda m: dict(
        m, client_noise_multipliers=2.0 * np.asarray(m["client_noise_multipliers"],
                                                     np.float64)))
  elif brk == "paper-sensitivity":  # z = SD / (2C/|D_i|), not SD / (2C)
    ratio = alg.config["sensitivity"] / alg.config["paper_sensitivity"][0]
    claim = ledger_claim(make_ledger, transform=lambda m: dict(
        m, client_noise_multipliers=ratio * np.asarray(m["client_noise_multipliers"],
                                                       np.float64)))
  state = _zero_params(alg.init(jax.random.key(1)))
  return Setup(alg.round_fn, alg.round_fn, data_out, data_in, state, _schedule(hp, rounds),
               1.0, claim, DELTA,
               description=f"lapa ({clipping} clipping): one record of the one device "
               "replaced")


# ---------------------------------------------------------------------------
# DP-FTRL (tree aggregation, banded MF): correlated noise across rounds.
# ---------------------------------------------------------------------------

def _dp_ftrl_observer(round_fn: Callable, mechanism: str, matrix) -> Callable:
  """DP-FTRL's shipped round as an audited round whose per-round "change" is a fixed
  public transform of the released models, in which the correlated noise is
  (nearly) independent across rounds, so that the audit's per-round scores
  (`fedjax_dp.auditing.canary`, which treat rounds as independent) test the mechanism
  the ledger accounts:

  * tree: the change of round t is ``theta_{t+1} - theta_0``, the noisy prefix sum of
    rounds 0..t divided by the public denominator (FedAvg server, learning rate 1, from a
    zero model). At t + 1 = 1, 2, 4, ... these are the tree nodes [0, t + 1), which hold
    every node a leaf-0 canary is in, each with its own independent noise: the
    observation of the leaf's worst case (the other prefix sums add correlated copies);
  * banded: the change of round t is ``y_t = sum_s C[t, s] Delta_s``: C times the
    released round updates is ``(C x + sigma z) / denominator``, independent noise of
    one standard deviation in every round, and the canary's signal is its columns of C.

  The inner `ServerState` and the released updates so far ride in ``opt_state``.
  """
  from jax.flatten_util import ravel_pytree
  c = None if matrix is None else jnp.asarray(matrix, jnp.float32)

  def audited(state, data, hp, key):
    inner, history = state.opt_state
    new, metrics = round_fn(inner, data, hp, key)
    before, _ = ravel_pytree(inner.params)
    after, _ = ravel_pytree(new.params)
    if mechanism == "tree":
      obs = after                                     # theta_0 = 0: the prefix sum
    else:
      history = history.at[inner.round].set(after - before)
      obs = c[inner.round] @ history                  # y_t = (C Delta)_t
    params = {"observed": state.params["observed"] + obs}
    return server.ServerState(params, (new, history), new.round), metrics

  return audited


def _dp_ftrl_setup(brk: str, mechanism: str, rounds: int, cycle: int, z: float,
                   bands: int = 0) -> Setup:
  """A population of ``cycle`` clients with zero updates, except the canary, whose update
  is 10x the clip norm ("in") or zero ("out": under add/remove an absent client adds
  nothing to the sum; the population, its groups and the public denominator are the
  same in both worlds). The group seed puts the canary in group 0, so it takes part in
  rounds 0, R, 2R, ... (cyclic participation, every member every cycle): tree with
  ``rounds = R = restart_every`` (one tree, the canary its first leaf); banded over n =
  ``rounds`` rounds with R >= b (the canary in ``rounds / R`` rounds, min-separation R).
  The claim: the algorithm's own `CorrelatedNoiseLedger` on the reported noise
  multipliers. The audited change of each round is `_dp_ftrl_observer`'s."""
  from fedjax_dp.algorithms.dp_ftrl.algorithm import banded_noise, dp_ftrl
  from fedjax_dp.algorithms.dp_ftrl.participation import assign_groups
  model = _model()
  params = model.init(jax.random.key(0))
  clip = 1.0
  u = _canary_vector(clip)
  seed = next(s for s in range(1000) if assign_groups(cycle, cycle, s)[-1] == 0)
  rows_in = np.zeros((cycle, _D * 3), np.float32)
  rows_in[-1, :u.size] = u
  counts_out = np.full(cycle, 1, np.int32)
  counts_out[-1] = 0
  data_in = population(rows_in)
  data_out = population(rows_in, counts=counts_out)   # the canary's update is absent
  extra = dict(bands=bands) if mechanism == "banded" else {}
  alg = dp_ftrl(model, data_in, mechanism=mechanism, clip_norm=clip, noise_multiplier=z,
                rounds=rounds, cycle_length=cycle, seed=seed, server_optimizer="fedavg",
                server_learning_rate=1.0, client_update=stored_update_client(params),
                **extra)
  hp = alg.hparams
  make_ledger = lambda: alg.privacy.make_ledger(DELTA)
  claim = ledger_claim(make_ledger)
  if brk == "noise-half":  # half the noise; the claim is for the configured noise
    hp = hp._replace(noise_multiplier=z / 2)
    claim = ledger_claim(make_ledger, transform=lambda m: _rescale(m, 2.0))
  matrix = banded_noise(rounds, bands).matrix() if mechanism == "banded" else None
  audited = _dp_ftrl_observer(alg.round_fn, mechanism, matrix)
  inner = _zero_params(alg.init(jax.random.key(1)))
  size = u.size
  init = server.ServerState({"observed": jnp.zeros(size, jnp.float32)},
                            (inner, jnp.zeros((rounds, size), jnp.float32)), inner.round)
  return Setup(audited, audited, data_out, data_in, init, _schedule(hp, rounds), 1.0, claim,
               DELTA, description=f"dp_ftrl ({mechanism}): one client of {cycle} (group 0 of "
               f"cyclic participation, {rounds} rounds) added")


# ---------------------------------------------------------------------------
# The registry.
# ---------------------------------------------------------------------------

def _targets() -> List[Target]:
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
      Target("dp_fedavg/adaptive_clipping", "dp_fedavg",
             dpf.format(rel="add/remove", samp="Poisson cohorts, adaptive clip norm C_t "
                        "(Andrew et al. 2021): the sum and the count of unclipped updates "
                        "(sensitivity 1/2) as one Gaussian of the combined z",
                        sens="C_t"),
             dict(COMMON_BREAKS),
             lambda b: _dp_fedavg_adaptive_setup(b, **PARAMS["dp_fedavg/adaptive_clipping"])),
      Target("dp_fedavg_record_level", "dp_fedavg_record_level",
             "record-level, add/remove one record, Poisson examples, sensitivity C_r",
             {**COMMON_BREAKS, "count-denominators": "steps divided by q n_k, empty "
              "clients skip their steps, uploads weighted by n_k (1d)"},
             lambda b: _record_level_setup(b, **PARAMS["dp_fedavg_record_level"])),
      Target("amplitude_varying/paper", "amplitude_varying",
             "record-level, replace-one, K of U without replacement, sensitivity 2C",
             {**COMMON_BREAKS, "paper-sensitivity": "accounted with Delta_s = 2C/|D_k| "
              "(1c)"},
             lambda b: _amplitude_varying_setup(b, "paper",
                                                **PARAMS["amplitude_varying/paper"])),
      Target("amplitude_varying/clipped_gradients", "amplitude_varying",
             "record-level, replace-one, K of U without replacement, sensitivity "
             "clipped_gd_sensitivity", dict(COMMON_BREAKS),
             lambda b: _amplitude_varying_setup(
                 b, "clipped_gradients", **PARAMS["amplitude_varying/clipped_gradients"])),
      Target("padpfl/paper", "padpfl",
             "record-level, replace-one, every client, sensitivity 2B",
             {**COMMON_BREAKS, "paper-sensitivity": "accounted with 2B/m_min (1c)"},
             lambda b: _padpfl_setup(b, "paper", **PARAMS["padpfl/paper"])),
      Target("padpfl/clipped_gradients", "padpfl",
             "record-level, replace-one, every client, sensitivity "
             "clipped_gd_sensitivity", dict(COMMON_BREAKS),
             lambda b: _padpfl_setup(b, "clipped_gradients",
                                     **PARAMS["padpfl/clipped_gradients"])),
      Target("rdp_pfl/support", "rdp_pfl",
             "record-level, add/remove one record, Poisson records, two releases per "
             "epoch (query, support), sensitivity C; canary in the support set "
             "(per-example meta-gradient)", dict(COMMON_BREAKS),
             lambda b: _rdp_pfl_setup(b, **PARAMS["rdp_pfl/support"])),
      Target("rdp_pfl/paper", "rdp_pfl",
             "record-level, add/remove one record, clip_mode=paper: clipped batch means "
             "(sensitivity 2C; the query release 2 sqrt 2 C); canary in the support set",
             dict(COMMON_BREAKS), lambda b: _rdp_pfl_setup(b, **PARAMS["rdp_pfl/paper"])),
      Target("rdp_pfl/query", "rdp_pfl",
             "record-level, add/remove one record, Poisson records, two releases per "
             "epoch, sensitivity C; canary in the query set (inner step)",
             dict(COMMON_BREAKS), lambda b: _rdp_pfl_setup(b, **PARAMS["rdp_pfl/query"])),
      Target("dp_mocha", "dp_mocha",
             "record-level, replace-one record of one device, every device every round, "
             "two Gaussian releases: dalpha~ (sensitivity 2 sqrt(min(steps, n_t))) and "
             "du given dalpha~ (2 xi ||dalpha~||)",
             {**COMMON_BREAKS, "paper-sensitivity": "dalpha~ accounted with Corollary "
              "2's s1 = (8 lam + beta) / (beta n_t)"},
             lambda b: _dp_mocha_setup(b, **PARAMS["dp_mocha"])),
      Target("lapa/per_example", "lapa",
             "record-level, replace-one record of one device, every upload Gaussian (the "
             "artificial plus the channel noise), no sampling, per-example clipping: "
             "sensitivity 2C/B", dict(COMMON_BREAKS),
             lambda b: _lapa_setup(b, **PARAMS["lapa/per_example"])),
      Target("lapa/aggregate", "lapa",
             "record-level, replace-one record of one device, every upload Gaussian (the "
             "artificial plus the channel noise), no sampling, eq. 17's clipping of the "
             "minibatch mean: sensitivity 2C",
             {**COMMON_BREAKS, "paper-sensitivity": "accounted with the paper's Delta_s = "
              "2C/|D_i| (eq. 18)"},
             lambda b: _lapa_setup(b, **PARAMS["lapa/aggregate"])),
      Target("dp_ftrl/tree", "dp_ftrl",
             "user-level, add/remove one client, cyclic participation (one tree of R = 4 "
             "rounds, the canary its first leaf), tree aggregation: sensitivity sqrt(3) C "
             "over the tree's nodes; observed through the prefix sums", dict(COMMON_BREAKS),
             lambda b: _dp_ftrl_setup(b, **PARAMS["dp_ftrl/tree"])),
      Target("dp_ftrl/banded", "dp_ftrl",
             "user-level, add/remove one client, cyclic participation (R = 2, the canary in "
             "rounds 0 and 2 of 4), banded MF with b = 2 bands: sensitivity sqrt(2) C (its "
             "two unit columns of C); observed through C times the round updates",
             dict(COMMON_BREAKS), lambda b: _dp_ftrl_setup(b, **PARAMS["dp_ftrl/banded"])),
  ]


TARGETS: List[Target] = _targets()


def targets_for(algorithm: str) -> List[Target]:
  """The audit targets of a registered algorithm (dp_fedsgd shares DP-FedAvg's round).

  Raises:
    FedJaxDpError: an algorithm without targets (e.g. non-private fedavg).
  """
  name = "dp_fedavg" if algorithm == "dp_fedsgd" else algorithm
  found = [t for t in TARGETS if t.algorithm == name]
  if not found:
    raise FedJaxDpError(f"algorithm {algorithm!r} has no audit targets (it is "
                        f"non-private or unknown); audited: "
                        f"{sorted({t.algorithm for t in TARGETS} | {'dp_fedsgd'})}.")
  return found
