"""RDP-PFL, Algorithm 1 of Wei et al. (IEEE TIFS 2023): federated MAML in
which every source client runs tau0 local epochs of (DP inner step, DP outer step) and
the server averages the local models; target clients personalise with one step.

```
for t = 0 .. T-1:                                         # round_fn, jitted, scanned
  for all source clients i in parallel:                   # vmapped, chunked
    w_i <- w^t                                            # line 5
    for tau = 0 .. tau0-1:                                # lax.scan
      theta~ <- w_i - eta (clipped query grads + n^Q)     # eqs. (6)-(7), meta.local_epoch
      w_i <- w_i - beta (clipped meta-grads + n^S)        # eqs. (8)-(11)
  w^{t+1} <- sum_i p_i w_i,  p_i = 1 / U                  # uniform; eq. (3)'s p_i below
target j: theta_j = w^t - eta grad F_j(w^t, D_j)          # eq. (4), clients.personalised_metrics
```

Privacy: record-level DP of each source client's data (add/remove of one record),
against anyone who sees the uploaded w_i. Each local epoch releases two
Poisson-subsampled Gaussian mechanisms (query stage: rate q^Q, support stage: q^S, noise
multiplier sigma times `meta.release_scales`): two `Release`s of the `PrivacySpec`, each
tau0 times a round. Every source client uploads every round, with its sender visible:
its participation is not hidden and no amplification by client sampling is claimed
(all its releases are accounted in every round). The record sampling inside a client's
DP-SGD steps is hidden: a record's releases are seen only through its client's upload,
an aggregate over the Poisson draw, so Poisson amplification applies
(``observation="aggregate"``, as `fedjax_dp.algorithms.dp_fedavg.dp_fedavg_record_level`).

Each record has one role, query or support, fixed when its client's data is prepared
(``query_rows``) and never changed by adding or removing other records, and it
influences only its role's release (`meta.release_groups`): its guarantee is that
release composed over the run, and the run's epsilon is the larger of the two
(`privacy.GroupedPrivacySpec`). The paper's Theorem 1 composes both
stages for every record; its calibration (with the Balle et al. conversion) is in
`paper_accounting`, reported beside.

Aggregation: ``"uniform"`` (default) weights every source client 1/U,
public, so the average is post-processing of the uploads. The paper's eq. (3) weights
by support-set sizes p_i = |D_i^S| / |D^S|, which change when a record is added or
removed: not post-processing of the DP releases (`dp_fedavg_record_level` refuses
data-size weights for the same reason). ``"data_size"`` is kept as the paper's mode,
only without a guarantee (``private=False``: the noise is added, no epsilon is
claimed). In the paper's experiments every client holds 300 support images, where
eq. (3) is the uniform average.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple, Optional, Sequence, Tuple, get_args

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from fedjax_dp.algorithms.base import Algorithm, Release
from fedjax_dp.algorithms.rdp_pfl import meta
from fedjax_dp.algorithms.rdp_pfl.clients import is_query_row
from fedjax_dp.algorithms.rdp_pfl.privacy import GroupedPrivacySpec
from fedjax_dp.federated import chunking, engine, keys as keylib, sharding
from fedjax_dp.federated.engine import default_metrics
from fedjax_dp.federated.server import ServerState
from fedjax_dp.privacy import clipping, events, per_example
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int,
                                  check_non_negative, check_positive, check_probability)

__all__ = ["Aggregation", "AGGREGATIONS", "RdpPflHParams", "stage_config", "rdp_pfl"]

Aggregation = Literal["uniform", "data_size"]
AGGREGATIONS: Tuple[str, ...] = get_args(Aggregation)


class RdpPflHParams(NamedTuple):
  """Per-round hyper-parameters (float32 arrays; ``[rounds]`` in a schedule: sweeping
  them never recompiles).

  Attributes:
    clip_norm: C (per-example modes: each example's vector; paper mode: the batch
      gradient and the product sqrt(C) x sqrt(C)).
    noise_multiplier: sigma; the noise per coordinate is N(0, (sigma C)^2) in both
      stages.
    query_sampling_rate: q^Q, Poisson rate of the inner step's draw from D^Q.
    support_sampling_rate: q^S, Poisson rate of the outer step's draw from D^S.
    inner_learning_rate: eta (also the target clients' adaptation step, eq. 4).
    outer_learning_rate: beta.
  """
  clip_norm: Any
  noise_multiplier: Any
  query_sampling_rate: Any
  support_sampling_rate: Any
  inner_learning_rate: Any
  outer_learning_rate: Any


def stage_config(nominal_size: int, q: float, overflow_prob: float,
                 micro_batch_size: Optional[int] = -1) -> meta.StageConfig:
  """The static cap of a stage's Poisson draws: the ``1 - overflow_prob`` quantile of
  Binomial(n + 1, q) (a neighbour holds one record more), and the micro-batch size
  (-1: half the expected batch, at least 8 rows; None: one pass)."""
  cap = max(1, min(nominal_size, int(stats.binom.isf(overflow_prob, nominal_size + 1, q))
                   + 1))
  if micro_batch_size == -1:
    micro_batch_size = max(8, math.ceil(q * nominal_size / 2))
  if micro_batch_size is not None and micro_batch_size >= cap:
    micro_batch_size = None
  return meta.StageConfig(cap, micro_batch_size)


def rdp_pfl(model, data, *, local_epochs: int = 1, query_fraction: float = 0.5,
            inner_learning_rate: float = 0.01, outer_learning_rate: float = 0.01,
            clip_norm: float = 2.4, noise_multiplier: float = 1.0,
            query_sampling_rate: float = 0.1, support_sampling_rate: float = 0.1,
            clip_mode: str = "first_order", aggregation: str = "uniform",
            private: bool = True, overflow_prob: float = 1e-12,
            micro_batch_size: Optional[int] = -1, per_example_method: str = "auto",
            power_iterations: int = 20, chunk_size: Optional[int] = None,
            query_rows: Optional[Any] = None,
            nominal_sizes: Optional[Tuple[int, int]] = None, mesh=None) -> Algorithm:
  """Builds RDP-PFL (module docstring) for the source clients ``data``.

  Args:
    model: a `fedjax_dp.models.Model`.
    data: `fedjax_dp.data.FederatedData` of the U source clients.
    local_epochs: tau0 >= 1 (each = one inner and one outer step).
    query_fraction: share of a client's rows in its query set, in (0, 1) (the default
      roles' rule, `clients.is_query_row`).
    inner_learning_rate, outer_learning_rate: eta, beta > 0.
    clip_norm: C > 0 (inf only with ``private=False``: no clipping).
    noise_multiplier: sigma >= 0 (0: no noise).
    query_sampling_rate, support_sampling_rate: q^Q, q^S in (0, 1].
    clip_mode: one of `meta.CLIP_MODES`.
    aggregation: ``"uniform"`` (p_i = 1/U: public weights, the default) or
      ``"data_size"`` (eq. 3: p_i = |D_i^S| / |D^S|, from the clients' record counts;
      only with ``private=False``: adding or removing a record moves every weight, so
      the average is not post-processing of the DP uploads).
    private: False builds the same round without a `PrivacySpec` (the baselines
      "non-private" and "clipping only": sigma = 0; and the paper's data-size weights,
      noised but without a guarantee).
    overflow_prob: probability that one Poisson draw overflows its static cap (added
      to delta through the releases' `Truncation`).
    micro_batch_size: see `stage_config`.
    per_example_method: `fedjax_dp.privacy.per_example.METHODS` for first-order
      per-example gradients.
    power_iterations: paper mode's power iterations.
    chunk_size: source clients trained at once (default: `chunking.auto_chunk_size`).
    mesh: a mesh with a ``"clients"`` axis to split the source clients over its
      devices (the engine's client loop, `fedjax_dp.federated.engine.sum_over_cohort`),
      or None for one device.
    query_rows: bool ``[U, max_examples]``: each row's role (True: query set, False:
      support set), fixed with the record when the client's data is prepared, so that
      adding or removing a record changes no other record's role (the neighbouring
      datasets of record-level DP then differ in one record of one role, the premise of
      `meta.release_groups`); None: `clients.is_query_row` of each row's position (the
      roles `clients.make_meta_split` gives its shuffled rows).
    nominal_sizes: ``(n^Q, n^S)``, the public sizes of a client's query and support
      sets (the DP-SGD divisors q n and the static draw caps): at least every client's;
      None: the largest client's (then the client sizes are treated as public).

  Returns:
    An `Algorithm` whose ``hparams`` is an `RdpPflHParams` and whose ``privacy`` has
    one `Release` per stage (``"query"``, ``"support"``), or None when not private.

  Raises:
    FedJaxDpError: invalid arguments (naming them), before anything is compiled;
      ``aggregation="data_size"`` with ``private=True``.
  """
  tau0 = check_int("local_epochs", local_epochs, minimum=1)
  qf = _check_query_fraction(query_fraction)
  _check_modes(clip_mode, aggregation, private, per_example_method)
  eta = check_positive("inner_learning_rate", inner_learning_rate)
  beta = check_positive("outer_learning_rate", outer_learning_rate)
  c = _check_clip_norm(clip_norm, private)
  sigma = check_non_negative("noise_multiplier", noise_multiplier)
  q_q = check_probability("query_sampling_rate", query_sampling_rate)
  q_s = check_probability("support_sampling_rate", support_sampling_rate)
  power_iterations = check_int("power_iterations", power_iterations, minimum=1)
  roles = _check_query_rows(query_rows, data, qf)
  n_s, nominal_q, nominal_s = _role_sizes(data, roles, qf, query_rows, nominal_sizes)
  roles_dev = jnp.asarray(roles)
  query_cfg = stage_config(nominal_q, q_q, overflow_prob, micro_batch_size)
  support_cfg = stage_config(nominal_s, q_s, overflow_prob, micro_batch_size)
  num_clients = data.num_clients
  max_n = data.max_examples
  weights = (n_s / n_s.sum()) if aggregation == "data_size" else (
      np.full((num_clients,), 1.0 / num_clients))
  weights = jnp.asarray(weights, jnp.float32)
  params0 = jax.eval_shape(model.init, jax.random.key(0))
  num_params = sum(math.prod(l.shape) for l in jax.tree_util.tree_leaves(params0))
  if chunk_size is None:
    chunk_size = chunking.auto_chunk_size(
        num_clients, num_params, int(max_n * (math.prod(data.feature_shape) + 1) * 4))
  layout = chunking.chunk_layout(num_clients, check_int("chunk_size", chunk_size,
                                                        minimum=1), sharding.mesh_size(mesh))
  scale_q, scale_s = meta.release_scales(clip_mode)

  def client_update(w0, x, y, count, is_query, key, hp):
    """tau0 local epochs of one source client -> (w_i, StageStats summed)."""
    real = jnp.arange(max_n) < count
    q_mask, s_mask = real & is_query, real & ~is_query
    denom_q = hp.query_sampling_rate * nominal_q   # public: expected batch sizes
    denom_s = hp.support_sampling_rate * nominal_s

    def epoch(w, tau):
      return meta.local_epoch(
          model, w, x, y, q_mask, s_mask, jax.random.fold_in(key, tau),
          eta=hp.inner_learning_rate, beta=hp.outer_learning_rate, clip_norm=hp.clip_norm,
          noise_multiplier=hp.noise_multiplier, q_query=hp.query_sampling_rate,
          q_support=hp.support_sampling_rate, denom_query=denom_q, denom_support=denom_s,
          query_cfg=query_cfg, support_cfg=support_cfg, clip_mode=clip_mode,
          per_example_method=per_example_method, power_iterations=power_iterations)

    w, st = jax.lax.scan(epoch, w0, jnp.arange(tau0))
    return w, jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), st)

  def chunk(w, pop, hp, train_key, ids_c, p_c, real_c):
    """One chunk of source clients: the weighted sum of their model deltas (a client
    whose model is non-finite contributes nothing), its counts, norms and DP-SGD
    statistics (sums), and the largest delta norm (max)."""
    x, y, cnt = pop.x[ids_c], pop.y[ids_c], pop.counts[ids_c]
    ck = keylib.client_keys(train_key, ids_c)
    w_i, st = jax.vmap(client_update, in_axes=(None, 0, 0, 0, 0, 0, None))(
        w, x, y, cnt, roles_dev[ids_c], ck, hp)
    delta = jax.tree_util.tree_map(lambda a, b: a - b, w_i, w)
    norms = jax.vmap(clipping.global_norm)(delta)
    finite = jnp.isfinite(norms)
    keep = real_c & finite
    total = jax.tree_util.tree_map(
        lambda d: jnp.tensordot(jnp.where(keep, p_c, 0.0), jnp.where(_bcast(keep, d), d, 0.0),
                                axes=1), delta)
    st = jax.tree_util.tree_map(lambda a: jnp.sum(jnp.where(_bcast(real_c, a), a, 0.0),
                                                  axis=0), st)
    sums = (total, jnp.sum(real_c & ~finite), jnp.sum(jnp.where(keep, norms, 0)), st)
    return sums, jnp.max(jnp.where(keep, norms, 0))

  def round_fn(state: ServerState, pop, hp: RdpPflHParams, root_key):
    w = state.params
    train_key = keylib.stream(keylib.round_key(root_key, state.round), keylib.TRAINING)
    ids = jnp.arange(layout.padded_size, dtype=jnp.int32)
    real = ids < num_clients
    safe = jnp.where(real, ids, 0)
    p = jnp.where(real, weights[safe], 0.0)
    # The engine's client loop: chunks on every device of the mesh, one reduction.
    (total, nonfinite, norm_sum, st), norm_max = engine.sum_over_cohort(
        chunk, (w, pop, hp, train_key), (safe, p, real), chunk_size=layout.chunk_size,
        mesh=mesh)
    # w^{t+1} = sum_i p_i w_i = w^t + sum_i p_i (w_i - w^t) (sum p_i = 1; a client
    # whose model is non-finite keeps w^t, counted in nonfinite_updates).
    new_w = jax.tree_util.tree_map(jnp.add, w, total)
    rows = jnp.maximum(st.rows, 1.0)
    sigma_c = jnp.where(hp.noise_multiplier > 0, hp.noise_multiplier * hp.clip_norm, 0.0)
    z_q, z_s = hp.noise_multiplier * scale_q, hp.noise_multiplier * scale_s
    steps = jnp.asarray(tau0, jnp.int32)
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    releases = {
        name: dict(noise_multiplier=f32(z), sampling_rate=f32(q), dp_steps=steps,
                   noise_stddev=f32(sigma_c), sensitivity=f32(hp.clip_norm / sc))
        for name, z, q, sc in (("query", z_q, hp.query_sampling_rate, scale_q),
                               ("support", z_s, hp.support_sampling_rate, scale_s))}
    extras = {
        "meta_train_loss": st.loss_sum[1] / rows[1],     # "training loss": F(theta~, B_S)
        "query_train_loss": st.loss_sum[0] / rows[0],
        "query_clip_fraction": st.clipped[0] / rows[0],
        "support_clip_fraction": st.clipped[1] / rows[1],
        "query_batch_size": st.rows[0] / (num_clients * tau0),
        "support_batch_size": st.rows[1] / (num_clients * tau0)}
    # Its own round (two record-level DP-SGD releases per local epoch); the engine's
    # metric defaults for what it does not do (cohort sampling, clipping of updates).
    metrics = default_metrics(
        state.round, train_loss=f32(extras["meta_train_loss"]),
        num_clients=jnp.asarray(num_clients, jnp.int32),
        num_sampled=jnp.asarray(num_clients, jnp.int32),
        mean_update_norm=f32(norm_sum / jnp.maximum(num_clients - nonfinite, 1)),
        max_update_norm=f32(norm_max), nonfinite_updates=nonfinite.astype(jnp.int32),
        noise_multiplier=f32(jnp.minimum(z_q, z_s)), noise_stddev=f32(sigma_c),
        sampling_rate=f32(jnp.maximum(hp.query_sampling_rate, hp.support_sampling_rate)),
        dp_steps=2 * steps,
        example_clip_fraction=f32(jnp.sum(st.clipped) / jnp.sum(rows)),
        batch_truncated=jnp.sum(st.truncated).astype(jnp.int32),
        aggregate_norm=f32(clipping.global_norm(total)),
        sensitivity=f32(hp.clip_norm / max(scale_q, scale_s)),
        releases=releases if private else None,
        extras=jax.tree_util.tree_map(f32, extras))
    return ServerState(new_w, state.opt_state, state.round + 1), metrics

  def init(key):
    return ServerState(model.init(key), (), jnp.zeros((), jnp.int32))

  hparams = RdpPflHParams(c, sigma, q_q, q_s, eta, beta)
  privacy = None
  groups = meta.release_groups(clip_mode)
  if private:
    privacy = _privacy_statement(
        clip_mode, c, groups, num_clients,
        (("query", q_q, scale_q, nominal_q, query_cfg),
         ("support", q_s, scale_s, nominal_s, support_cfg)), tau0)
  config = dict(algorithm="rdp_pfl", local_epochs=tau0, query_fraction=qf,
                inner_learning_rate=eta, outer_learning_rate=beta, clip_norm=c,
                noise_multiplier=sigma, query_sampling_rate=q_q,
                support_sampling_rate=q_s, clip_mode=clip_mode, aggregation=aggregation,
                private=private, nominal_query_size=nominal_q,
                nominal_support_size=nominal_s, query_max_batch=query_cfg.max_batch_size,
                support_max_batch=support_cfg.max_batch_size,
                query_micro_batch=query_cfg.micro_batch_size,
                support_micro_batch=support_cfg.micro_batch_size,
                release_scales=[scale_q, scale_s],
                release_groups=[list(g) for g in groups] if private else None,
                num_params=num_params,
                chunk_size=layout.chunk_size, power_iterations=power_iterations)
  return Algorithm(name="rdp_pfl", round_fn=round_fn, init=init, hparams=hparams,
                   privacy=privacy, k_max=num_clients, config=config, sampling_rate=1.0)


def _check_query_fraction(query_fraction: float) -> float:
  """The query set's share of a client's rows, in (0, 1).

  Raises:
    FedJaxDpError: out of range.
  """
  qf = check_probability("query_fraction", query_fraction)
  if qf >= 1.0:
    raise FedJaxDpError(f"query_fraction must be in (0, 1), got {qf}.",
                        option="query_fraction")
  return qf


def _check_modes(clip_mode: str, aggregation: str, private: bool,
                 per_example_method: str) -> None:
  """The clip mode, the aggregation (data-size weights only without a guarantee) and
  the per-example method.

  Raises:
    FedJaxDpError: an unknown choice, or ``aggregation="data_size"`` with ``private``.
  """
  if clip_mode == "per_example":
    raise FedJaxDpError(
        "clip_mode='per_example' was renamed 'per_example_hessian' (its outer "
        "step takes the Hessian on each support example, not the paper's meta-gradient) "
        "and is no longer the default; the default is 'first_order'. Allowed: "
        + ", ".join(meta.CLIP_MODES), option="clip_mode")
  check_choice("clip_mode", clip_mode, meta.CLIP_MODES)
  check_choice("aggregation", aggregation, AGGREGATIONS)
  if aggregation == "data_size" and private:
    raise FedJaxDpError(
        "aggregation='data_size' (the paper's eq. 3, p_i = |D_i^S| / |D^S|) weights by "
        "data size, and the weights by data size depend on the client's records: adding "
        "or removing one record changes every p_i, so the average is not post-processing "
        "of the DP uploads and no guarantee covers it. Use aggregation='uniform' (public "
        "weights 1/U; equal to eq. 3 when every client holds as many records, as in the "
        "paper), or private=False to run the paper's weights without a guarantee.",
        option="aggregation")
  check_choice("per_example_method", per_example_method, per_example.METHODS)


def _check_clip_norm(clip_norm: float, private: bool) -> float:
  """C > 0, finite for a private run (its noise is sigma x C).

  Raises:
    FedJaxDpError: C <= 0, or infinite with ``private``.
  """
  c = float(clip_norm)
  if not c > 0:
    raise FedJaxDpError(f"clip_norm must be > 0, got {clip_norm!r}.", option="clip_norm")
  if private and not math.isfinite(c):
    raise FedJaxDpError("clip_norm must be finite for a private run (the noise is "
                        f"sigma x C), got {clip_norm!r}.", option="clip_norm")
  return c


def _role_sizes(data, roles: np.ndarray, qf: float, query_rows,
                nominal_sizes: Optional[Tuple[int, int]]) -> Tuple[np.ndarray, int, int]:
  """Every client's support-set size ``n_s`` ``[U]`` and the public nominal sizes
  ``(n^Q, n^S)`` (given, or the largest client's).

  Raises:
    FedJaxDpError: a client with an empty query or support set, or nominal sizes
      below a client's.
  """
  real_rows = np.arange(data.max_examples)[None, :] < np.asarray(data.counts)[:, None]
  n_q = np.sum(roles & real_rows, axis=1)
  n_s = np.asarray(data.counts) - n_q
  if int(n_q.min()) < 1 or int(n_s.min()) < 1:
    raise FedJaxDpError(f"query_fraction={qf} (or query_rows) leaves a client with an "
                        f"empty query or support set (client sizes "
                        f"{int(data.counts.min())}..{int(data.counts.max())}).",
                        option="query_rows" if query_rows is not None else
                        "query_fraction")
  if nominal_sizes is None:
    return n_s, int(n_q.max()), int(n_s.max())
  nominal_q, nominal_s = (check_int("nominal_sizes", int(v), minimum=1)
                          for v in nominal_sizes)
  if nominal_q < int(n_q.max()) or nominal_s < int(n_s.max()):
    raise FedJaxDpError(f"nominal_sizes={tuple(nominal_sizes)} must be at least every "
                        f"client's query and support set sizes (largest "
                        f"{int(n_q.max())}, {int(n_s.max())}).", option="nominal_sizes")
  return n_s, nominal_q, nominal_s


def _privacy_statement(clip_mode: str, clip_norm: float, groups, num_clients: int,
                       stages: Sequence[Tuple[str, float, float, int, meta.StageConfig]],
                       tau0: int) -> GroupedPrivacySpec:
  """The record-level statement (module docstring): one `Release` per stage
  ``(name, sampling rate, noise scale, nominal size, StageConfig)``, tau0 a round,
  each truncated at its static draw cap."""
  return GroupedPrivacySpec(
      unit="record-level", relation="add_remove", sampler="poisson",
      observation="aggregate", release_groups=groups,
      releases=tuple(Release(name, q, tau0, scale,
                             events.Truncation(nominal, cfg.max_batch_size, num_clients))
                     for name, q, scale, nominal, cfg in stages),
      note=_privacy_note(clip_mode),
      clip_norm=clip_norm,
      clipped=("each query example's gradient and each support example's meta-gradient"
               if clip_mode != "paper" else
               "each batch's mean gradient and each clipped product"))


def _bcast(mask, arr):
  return mask.reshape(mask.shape + (1,) * (arr.ndim - 1))


def _check_query_rows(query_rows, data, qf: float) -> np.ndarray:
  """The rows' roles as bool ``[U, max_examples]`` (the default: `is_query_row`).

  Raises:
    FedJaxDpError: a shape other than ``[U, max_examples]``.
  """
  shape = (data.num_clients, data.max_examples)
  if query_rows is None:
    return np.broadcast_to(is_query_row(data.max_examples, qf), shape).copy()
  roles = np.asarray(query_rows)
  if roles.shape != shape:
    raise FedJaxDpError(f"query_rows must be a bool array of shape {shape} (clients, "
                        f"rows), got shape {roles.shape}.", option="query_rows")
  return roles.astype(bool)


def _privacy_note(clip_mode: str) -> str:
  base = ("record-level DP of each source client's local data; the server sees each "
          "source client's upload with its sender, and every source client uploads in "
          "every round (its participation is visible: no amplification by client "
          "sampling, every round accounted); the record sampling inside a client's "
          "DP-SGD steps is hidden (only the upload, an aggregate over the Poisson draw, "
          "is seen), so it amplifies; every local step is counted. Each record has one "
          "role fixed at preparation (query or support set) and influences only its "
          "role's release, so its guarantee is that stage's tau0 releases per round "
          "composed, and the run's epsilon the larger of the two stages' (the paper's "
          "Theorem 1 composes both stages for every record: epsilon_paper).")
  if clip_mode == "paper":
    return base + (" clip_mode='paper' clips batch means (sensitivity 2C under "
                   "add/remove) and its outer step reads the query draw: the query "
                   "release is the pair (inner, outer) a query record moves, charged at "
                   "sigma/(2 sqrt 2), the support release at sigma/2; a weaker guarantee "
                   "than the paper's Theorem 1 claims for the same sigma.")
  return base
