"""DP-FTRL: user-level DP federated learning with correlated noise across rounds.

Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and Private (Deep) Learning
without Sampling or Shuffling", ICML 2021 (arXiv 2103.00039), Algorithm 1 with the
server momentum of DP-FTRLM; and banded matrix factorisation, Choquette-Choo, Ganesh,
McKenna, McMahan, Rush, Thakurta, Xu, "Amplified Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023 (arXiv 2306.08153). Per round t:

  C^t  <- cyclic participation: the clients of group t mod R (each client's group g_i is
          drawn once from a public seed), each with probability group_rate   (sampler)
  for k in C^t:  Delta_k <- ClientUpdate(k, theta^t), clipped to S          (as DP-FedAvg)
  s_t  <- sum_k Delta_k + sigma w_t,   sigma = z S                          (the release)
  Delta <- s_t / (N group_rate / R)                                         (fixed denominator)
  theta^{t+1} <- ServerOpt(theta^t, Delta)                  (sgd with momentum 0.9: DP-FTRLM)

where w_t is the round's share of correlated Gaussian noise:

* ``"tree"``: binary-tree aggregation restarted every ``restart_every`` rounds
  (`fedjax_dp.algorithms.dp_ftrl.noise.TreeNoise`): the sum of w_0..w_t is the noise of
  the tree's noisy prefix sum, so the model is FTRL on the tree's prefix sums
  (Kairouz et al. 2021, Alg. 1; momentum is post-processing);
* ``"banded"``: w = C^-1 z for a column-normalised lower-triangular banded C with
  ``bands`` bands (`fedjax_dp.algorithms.dp_ftrl.noise.BandedNoise`), i.e. the
  mechanism releases C x + sigma z (Choquette-Choo et al. 2023);
* ``"blt"``: w = C^-1 z for a buffered-linear-Toeplitz C optimised by jax-privacy for the
  planned rounds at min-separation R (`fedjax_dp.algorithms.dp_ftrl.blt.BltNoise`;
  Dvijotham et al., FOCS 2024, arXiv 2404.16706; McMahan, Xu, Zhang, arXiv 2408.08868):
  the same release C x + sigma z with O(nbuf) buffers per parameter;
* ``"independent"``: w_t i.i.d. N(0, I): DP-FedAvg's noise under the same cyclic
  participation, without amplification by sampling (the baseline of the claim that
  correlated noise wins when amplification is not available).

Privacy (user level, add/remove one client; sensitivity S of the sum; the epsilon needs
the participation schedule to be enforced by the deployment):

* tree: a client is in at most one round of each tree (``restart_every <= R``):
  GaussianDpEvent(z / sqrt(sens^2)), sens^2 = the largest over the groups of the number
  of released tree nodes holding one of the group's rounds (Kairouz et al. 2021, Sec. 4
  and Appendix D; exact for the cyclic schedule, at most dp_accounting's
  ``SingleEpochTreeAggregationDpEvent`` composed over the trees, equal when
  ``restart_every == R``), no amplification claimed;
* banded / independent (banded with b = 1, C = I): with ``group_rate == 1``,
  GaussianDpEvent(z / sqrt(sens^2)), sens^2 = the largest over the groups of the sum of
  ||C[:, t]||^2 over the group's rounds (exact for min-separation R >= b, whose columns
  do not overlap; Choquette-Choo et al. 2023, Thm. 2 / multi-epoch MF); with
  ``group_rate < 1`` the amplified banded MF event (cyclic Poisson sampling,
  Choquette-Choo et al. 2023, Thm. 4): see `fedjax_dp.algorithms.dp_ftrl.accounting`;
* blt: ``group_rate == 1`` only, GaussianDpEvent(z / sqrt(sens^2)), sens^2 the min-sep
  sensitivity of the Toeplitz C (worst pattern 0, R, 2R, ...: group 0), see
  `fedjax_dp.algorithms.dp_ftrl.blt`.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Literal, Optional, Tuple, Union, get_args

import numpy as np

from fedjax_dp.algorithms import fedavg_family as family
from fedjax_dp.algorithms.base import Algorithm, CorrelatedNoiseSpec, require_learning_rates
from fedjax_dp.algorithms.dp_ftrl import accounting as ftrl_accounting
from fedjax_dp.algorithms.dp_ftrl.blt import (MAX_BUFFERS, BltNoise, blt_run_event,
                                              blt_sensitivity_history)
from fedjax_dp.algorithms.dp_ftrl.noise import (STRATEGIES, BandedNoise, Strategy,
                                                TreeNoise)
from fedjax_dp.algorithms.dp_ftrl.participation import CyclicSampler
from fedjax_dp.federated import server, sharding
from fedjax_dp.federated.client import ClientHParams, make_client_update
from fedjax_dp.federated.round import (RoundConfig, RoundHParams, init_mechanism_state,
                                       make_round)
from fedjax_dp.validation import (FedJaxDpError, check_choice, check_int, check_non_negative,
                                  check_positive, check_probability)

__all__ = ["Mechanism", "MECHANISMS", "DEFAULT_COHORT_FRACTION", "default_cycle_length",
           "participation_note", "dp_ftrl", "noise_generator", "banded_noise",
           "cyclic_sampler", "blt_noise", "run_sensitivity_squared"]

#: The correlated-noise mechanisms of `dp_ftrl` (the tuple: their names).
Mechanism = Literal["tree", "banded", "blt", "independent"]
MECHANISMS: Tuple[str, ...] = get_args(Mechanism)
#: The expected cohort, as a fraction of the clients, when neither ``cycle_length`` nor
#: ``clients_per_round`` is given.
DEFAULT_COHORT_FRACTION = 0.1


def default_cycle_length(num_clients: int, group_rate: float = 1.0,
                         clients_per_round: Optional[int] = None) -> int:
  """R such that the expected cohort ``N group_rate / R`` is about ``clients_per_round``
  (default: 10% of the N clients), at least 1 and at most N.

  Raises:
    FedJaxDpError: ``clients_per_round`` not an int in [1, N].
  """
  n = int(num_clients)
  if clients_per_round is None:
    target = max(1.0, DEFAULT_COHORT_FRACTION * n)
  else:
    target = check_int("clients_per_round", clients_per_round, minimum=1)
    if target > n:
      raise FedJaxDpError(f"clients_per_round must be <= the population size {n}, got "
                          f"{target}.", option="clients_per_round")
  return int(min(n, max(1, round(n * group_rate / target))))


def participation_note(mechanism: str, sampler: CyclicSampler, restart_every: Optional[int],
                       bands: Optional[int]) -> str:
  """The participation assumption the epsilon needs, in words (summary.json's
  ``privacy_note``)."""
  r, g = sampler.cycle_length, sampler.group_rate
  text = (f"cyclic participation: each client is assigned a group g_i in [0, {r}) from a "
          f"public seed (never from data) and takes part only in rounds t with "
          f"t mod {r} = g_i"
          + (f", each time with probability {g:g} (cyclic Poisson sampling)" if g < 1
             else " (every group member, every cycle)")
          + "; the deployment must enforce this schedule for the epsilon to hold. ")
  if mechanism == "tree":
    text += (f"Tree aggregation restarted every {restart_every} <= {r} rounds: each client "
             "is in each tree at most once; epsilon is one Gaussian release whose "
             "sensitivity^2 is the largest number, over the groups, of released tree "
             "nodes holding one of the group's rounds; no amplification by sampling is "
             "claimed.")
  elif mechanism == "banded":
    text += (f"Banded matrix factorisation with {bands} band(s), min-separation {r} >= "
             f"{bands}: " + ("amplified banded MF event (cyclic Poisson, Choquette-Choo et "
                             "al. 2023)." if g < 1 else
                             "Gaussian event with sensitivity^2 the largest sum of squared "
                             "column norms of C over a group's rounds; no amplification."))
  elif mechanism == "blt":
    text += (f"Buffered-linear-Toeplitz matrix factorisation, min-separation {r}: Gaussian "
             "event with sensitivity^2 ||C 1_P||^2 for the worst pattern P = 0, "
             f"{r}, {2 * r}, ... (Toeplitz coefficients non-negative and non-increasing); no "
             "amplification.")
  else:
    text += ("Independent Gaussian noise every round (banded with one band, C = I): "
             + ("amplified by the cyclic Poisson sampling (Choquette-Choo et al. 2023)."
                if g < 1 else "each participation is a Gaussian release; no amplification "
                "by sampling is claimed (DP-FedAvg without amplification)."))
  return text


def dp_ftrl(model, data, *, mechanism: str = "tree", clip_norm: float = 1.0,
            noise_multiplier: float = 1.0, rounds: Optional[int] = None,
            cycle_length: Optional[int] = None, clients_per_round: Optional[int] = None,
            group_rate: float = 1.0, restart_every: Optional[int] = None,
            bands: Optional[int] = None, strategy: str = "optimized",
            buffers: Optional[int] = None, local_epochs: Optional[int] = 1,
            local_steps: Optional[int] = None,
            batch_size: int = 32, client_optimizer: str = "sgd",
            client_learning_rate: float = 0.1, server_optimizer: str = "fedavgm",
            server_learning_rate: float = 1.0, seed: int = 0,
            population_weight: Optional[float] = None, client_update=None,
            chunk_size: Optional[int] = None, mesh=None) -> Algorithm:
  """User-level DP-FTRL (tree aggregation), banded matrix factorisation, or independent
  noise, all under cyclic participation (see the module docstring).

  Args:
    model: a `fedjax_dp.models.Model`.
    data: a `fedjax_dp.data.FederatedData` or `fedjax_dp.federated.PooledPopulation`
      (only ``num_clients``, ``max_examples`` and ``counts`` are read here).
    mechanism: ``"tree"``, ``"banded"`` or ``"independent"``.
    clip_norm: S > 0, L2 bound of each client's update (parameter units).
    noise_multiplier: z >= 0; the i.i.d. Gaussian draws behind the correlated noise have
      standard deviation ``z * S`` (per coordinate of the update sum).
    rounds: the run's planned rounds n: required for ``"banded"`` (the size of C; a run
      cannot go beyond it); recorded otherwise.
    cycle_length: R >= 1, the number of groups (a client's rounds are R apart); default
      `default_cycle_length` (expected cohort ``clients_per_round`` or 10% of clients).
    clients_per_round: the expected cohort ``N group_rate / R`` used for the default R.
    group_rate: in (0, 1]: the probability that a group member joins in its round (1:
      the fixed epoch schedule of DP-FTRL; < 1: cyclic Poisson sampling).
    restart_every: the tree's restart period (tree only; default R; must be <= R so that
      each client is in each tree at most once).
    bands: b >= 1 (banded only; default ``min(R, rounds)``; must be <= R:
      min-separation).
    strategy: ``"optimized"`` (jax-privacy's banded Toeplitz optimised for the
      prefix-sum workload) or ``"sqrt"`` (the truncated square-root Toeplitz) (banded).
    buffers: blt only: the most buffers jax-privacy's optimiser may use, int in [0, 15]
      (default `fedjax_dp.algorithms.dp_ftrl.blt.MAX_BUFFERS`); needs ``rounds`` and
      ``group_rate == 1``.
    local_epochs / local_steps / batch_size / client_optimizer / client_learning_rate:
      local training, as in `fedjax_dp.algorithms.dp_fedavg.dp_fedavg`.
    server_optimizer / server_learning_rate: default ``"fedavgm"`` (SGD with momentum
      0.9: DP-FTRLM, Kairouz et al. 2021) with rate ``server_learning_rate``.
    seed: the seed of the clients' group assignment (public).
    population_weight: W of the fixed denominator ``q W`` (default N); the canary audit
      holds it fixed.
    client_update: replaces local training (`dp_fedavg`'s argument), or None.
    chunk_size, mesh: as in `dp_fedavg`.

  Returns:
    An `Algorithm` whose ``privacy`` is a `CorrelatedNoiseSpec`: the run's event for
    calibration and its `fedjax_dp.privacy.correlated_ledger.CorrelatedNoiseLedger`
    (`CorrelatedNoiseSpec.run_event`).

  Raises:
    FedJaxDpError: on invalid arguments (before anything is compiled), e.g. a tree
      restarted less often than the cycle, more bands than the cycle length, or
      ``"banded"`` without ``rounds``.
  """
  check_choice("mechanism", mechanism, MECHANISMS)
  check_choice("strategy", strategy, STRATEGIES)
  clip_norm = check_positive("clip_norm", clip_norm)
  noise_multiplier = check_non_negative("noise_multiplier", noise_multiplier)
  group_rate = check_probability("group_rate", group_rate)
  n = int(data.num_clients)
  if rounds is not None:
    rounds = check_int("rounds", rounds, minimum=1)
  cycle_length = _check_cycle_length(n, cycle_length, clients_per_round, group_rate)
  seed = check_int("seed", seed, minimum=0)
  samp = cyclic_sampler(n, cycle_length, group_rate, seed)
  if mechanism == "blt" and group_rate < 1.0:
    raise FedJaxDpError(
        f"group_rate must be 1 for mechanism='blt', got {group_rate:g}: no amplification "
        "theorem covers a BLT (its C has every band; amplified banded MF needs "
        "cycle_length >= bands). Use group_rate=1, or mechanism='banded'.",
        option="group_rate")
  noise_gen, restart_every, bands = noise_generator(mechanism, cycle_length, rounds,
                                                    restart_every, bands, strategy,
                                                    buffers)

  local_epochs, local_steps = family.local_work(local_epochs, local_steps)
  client = client_update or make_client_update(
      model, family.client_optimizer(client_optimizer, client_learning_rate),
      batch_size=batch_size, max_examples=data.max_examples, local_epochs=local_epochs,
      local_steps=local_steps)
  config = RoundConfig(
      clip_updates=True, noise="central", weighting="uniform", denominator="expected",
      population_weight=(float(n) if population_weight is None else
                         check_positive("population_weight", population_weight)),
      chunk_size=chunk_size, central_noise=noise_gen)
  server_opt = family.server_optimizer(server_optimizer, server_learning_rate)
  round_fn = require_learning_rates(make_round(client, samp, server_opt, config, mesh=mesh))

  run_event = _run_event(mechanism, samp, noise_gen)
  description = f"dp_ftrl/{mechanism}"
  privacy = CorrelatedNoiseSpec(
      "user-level", "add_remove", "poisson", sampling_rate=samp.sampling_rate,
      clip_norm=clip_norm, clipped="each client's update (S)",
      note=participation_note(mechanism, samp, restart_every, bands),
      run_event=run_event, description=description)

  def init(key):
    params = model.init(key)
    return sharding.replicate(server.init_server_state(
        params, server_opt, mechanism=init_mechanism_state(config, params)), mesh)

  cfg: Dict[str, Any] = dict(mechanism=mechanism, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
             cycle_length=cycle_length, group_rate=group_rate, restart_every=restart_every,
             bands=bands, strategy=strategy if mechanism == "banded" else None,
             group_seed=seed, num_clients=n, sampler=samp.kind, sampling_rate=samp.sampling_rate,
             k_max=samp.k_max, expected_cohort_size=samp.expected_cohort_size,
             local_epochs=local_epochs, local_steps=local_steps, batch_size=batch_size,
             client_optimizer=client_optimizer, client_learning_rate=client_learning_rate,
             server_optimizer=server_optimizer, server_learning_rate=server_learning_rate)
  if mechanism == "banded":  # C is built for these rounds: a longer run needs another C
    cfg["banded_strategy_rounds"] = rounds
  if isinstance(noise_gen, BltNoise):  # optimised for these rounds: a resume keeps C
    cfg.update(blt_strategy_rounds=rounds, blt_max_buffers=_blt_max_buffers(buffers),
               blt_buf_decay=list(noise_gen.buf_decay),
               blt_output_scale=list(noise_gen.output_scale))
  return Algorithm(
      name="dp_ftrl", round_fn=round_fn, init=init,
      hparams=RoundHParams(clip_norm, noise_multiplier, samp.sampling_rate,
                           ClientHParams(learning_rate=client_learning_rate),
                           server_learning_rate),
      privacy=privacy, k_max=samp.k_max, sampling_rate=samp.sampling_rate, config=cfg)


def _check_cycle_length(n: int, cycle_length: Optional[int],
                        clients_per_round: Optional[int], group_rate: float) -> int:
  """R, given or `default_cycle_length` (from ``clients_per_round``), in [1, N].

  Raises:
    FedJaxDpError: both given, or R out of range.
  """
  if cycle_length is None:
    cycle_length = default_cycle_length(n, group_rate, clients_per_round)
  elif clients_per_round is not None:
    raise FedJaxDpError("give either cycle_length or clients_per_round (which sets the "
                        f"default cycle length), not both (got {cycle_length} and "
                        f"{clients_per_round}).", option="cycle_length")
  cycle_length = check_int("cycle_length", cycle_length, minimum=1)
  if cycle_length > n:
    raise FedJaxDpError(f"cycle_length must be <= the number of clients {n} (R groups of "
                        f"clients), got {cycle_length}.", option="cycle_length")
  return cycle_length


def _blt_max_buffers(buffers: Optional[int]) -> int:
  """The BLT's most buffers: ``buffers`` or `MAX_BUFFERS`, checked in [0, 15]."""
  return check_int("buffers", MAX_BUFFERS if buffers is None else buffers, minimum=0,
                   maximum=15)


def noise_generator(mechanism: str, cycle_length: int, rounds: Optional[int],
                    restart_every: Optional[int], bands: Optional[int],
                    strategy: str = "optimized", buffers: Optional[int] = None
                    ) -> Tuple[Optional[Union[TreeNoise, BandedNoise, BltNoise]],
                               Optional[int], Optional[int]]:
  """The mechanism's correlated-noise generator
  (`fedjax_dp.federated.round.RoundConfig.central_noise`) and its resolved options.

  Args:
    mechanism: ``"tree"``, ``"banded"`` or ``"independent"``.
    cycle_length: R (checked).
    rounds: the planned rounds n (checked; required for ``"banded"``).
    restart_every: the tree's restart period (tree only; default R, at most R).
    bands: b (banded only; default ``min(R, rounds)``, at most R and ``rounds``).
    strategy: the banded strategy (`banded_noise`).
    buffers: the BLT's most buffers (blt only; `blt_noise`).

  Returns:
    ``(noise_gen, restart_every, bands)``: a `TreeNoise`, a `BandedNoise`, a `BltNoise`
    or None
    (independent noise: the engine's own draw every round), and the resolved
    ``restart_every`` (tree) and ``bands`` (banded), None where they do not apply.

  Raises:
    FedJaxDpError: an option of another mechanism, or one out of range.
  """
  noise_gen = None
  if mechanism != "blt" and buffers is not None:
    raise FedJaxDpError("buffers applies to mechanism='blt' only.", option="buffers")
  if mechanism == "tree":
    if bands is not None:
      raise FedJaxDpError("bands applies to mechanism='banded' only.", option="bands")
    restart_every = cycle_length if restart_every is None else restart_every
    restart_every = check_int("restart_every", restart_every, minimum=1)
    if restart_every > cycle_length:
      raise FedJaxDpError(
          f"restart_every must be <= cycle_length={cycle_length} for the tree, got "
          f"{restart_every}: a client takes part every {cycle_length} rounds, and the "
          "tree's accounting needs each client in each tree at most once.",
          option="restart_every")
    noise_gen = TreeNoise(restart_every)
  else:
    if restart_every is not None:
      raise FedJaxDpError("restart_every applies to mechanism='tree' only.",
                          option="restart_every")
  if mechanism == "banded":
    if rounds is None:
      raise FedJaxDpError("mechanism='banded' needs rounds (the planned number of rounds, "
                          "the size of the strategy matrix C).", option="rounds")
    bands = min(cycle_length, rounds) if bands is None else bands
    bands = check_int("bands", bands, minimum=1)
    if bands > cycle_length or bands > rounds:
      raise FedJaxDpError(
          f"bands must be <= cycle_length={cycle_length} (min-separation: a client's "
          f"rounds are {cycle_length} apart, so its columns of C do not overlap) and <= "
          f"rounds={rounds}, got {bands}.", option="bands")
    noise_gen = banded_noise(rounds, bands, strategy)
  elif mechanism == "blt":
    if bands is not None:
      raise FedJaxDpError("bands applies to mechanism='banded' only (a BLT has every "
                          "band; see buffers).", option="bands")
    if rounds is None:
      raise FedJaxDpError("mechanism='blt' needs rounds (the planned number of rounds the "
                          "BLT is optimised for).", option="rounds")
    noise_gen = blt_noise(rounds, cycle_length, _blt_max_buffers(buffers))
  elif mechanism == "independent" and bands is not None:
    raise FedJaxDpError("bands applies to mechanism='banded' only (independent noise is "
                        "banded with one band).", option="bands")
  return noise_gen, restart_every, bands


def _run_event(mechanism: str, samp: CyclicSampler, noise_gen):
  """``run_event(z, rounds) -> DpEvent`` of the mechanism (`fedjax_dp.algorithms.dp_ftrl
  .accounting`); banded refuses more rounds than its C has."""
  if mechanism == "tree":
    return lambda z, rounds: ftrl_accounting.tree_run_event(
        z, rounds, noise_gen.restart_every, cycle_length=samp.cycle_length)
  if mechanism == "banded":
    def banded(z, rounds):
      if rounds > noise_gen.rounds:
        raise FedJaxDpError(
            f"rounds: the banded strategy C was built for {noise_gen.rounds} rounds; "
            f"{rounds} rounds cannot be accounted (or run) with it: start a new run with "
            "the rounds you want.", option="rounds")
      return ftrl_accounting.banded_run_event(z, rounds, noise_gen, samp)
    return banded
  if mechanism == "blt":
    return lambda z, rounds: blt_run_event(z, rounds, noise_gen, samp)
  # Independent noise: banded with one band (C = I), sized to the rounds accounted.
  return lambda z, rounds: ftrl_accounting.banded_run_event(z, rounds,
                                                            banded_noise(rounds, 1), samp)


@functools.lru_cache(maxsize=16)
def banded_noise(rounds: int, bands: int, strategy: str = "optimized") -> BandedNoise:
  """`BandedNoise.create` cached per ``(rounds, bands, strategy)`` in this process (the
  plugin and the audit read the same C again)."""
  return BandedNoise.create(rounds, bands, strategy)


@functools.lru_cache(maxsize=16)
def blt_noise(rounds: int, cycle_length: int, max_buffers: int = MAX_BUFFERS) -> BltNoise:
  """`BltNoise.create` cached per arguments in this process (the plugin and the audit
  read the same BLT again)."""
  return BltNoise.create(rounds, cycle_length, max_buffers)


@functools.lru_cache(maxsize=16)
def cyclic_sampler(population_size: int, cycle_length: int, group_rate: float,
                   seed: int) -> CyclicSampler:
  """`CyclicSampler.create` cached per arguments in this process."""
  return CyclicSampler.create(population_size, cycle_length, group_rate, seed=seed)


def run_sensitivity_squared(config, rounds: int) -> Optional[np.ndarray]:
  """float64 ``[rounds]``: entry t - 1 is the sensitivity^2 (units of S^2) behind the
  Gaussian event of the first t rounds of the `dp_ftrl` algorithm whose
  ``Algorithm.config`` is ``config`` (None under amplification, whose event is not one
  Gaussian: banded / independent with group_rate < 1):

  * tree: the largest over the groups of the number of released tree nodes holding one
    of the group's rounds (`fedjax_dp.algorithms.dp_ftrl.accounting
    .tree_sensitivity_squared` with the cycle length; ``k L(T) + L(rest)`` when
    ``restart_every == R``);
  * banded / independent (C = I): the largest over the groups of the sum of ``|C^T C|``
    over the group's rounds (`accounting.banded_sensitivity_squared`), with min-separation
    R >= b the sum of squared column norms (independent: ``ceil(t / R)``).

  * blt: the min-sep sensitivity of C's first t rows and columns
    (`fedjax_dp.algorithms.dp_ftrl.blt.blt_sensitivity_history`), from the BLT
    parameters the config records.

  ``rounds`` is capped at the banded C's size.
  """
  mech, r_cyc = config["mechanism"], config["cycle_length"]
  if mech == "blt":
    noise = BltNoise(tuple(config["blt_buf_decay"]), tuple(config["blt_output_scale"]))
    return blt_sensitivity_history(noise, r_cyc, rounds)
  if mech == "tree":
    return np.asarray([ftrl_accounting.tree_sensitivity_squared(t, config["restart_every"],
                                                                r_cyc)
                       for t in range(1, rounds + 1)], np.float64)
  if config["group_rate"] < 1:
    return None
  samp = cyclic_sampler(config["num_clients"], r_cyc, config["group_rate"],
                        config["group_seed"])
  if mech == "banded":
    n = config["banded_strategy_rounds"]
    noise, rounds = banded_noise(n, config["bands"], config["strategy"]), min(rounds, n)
  else:
    noise = banded_noise(rounds, 1)
  return np.asarray([ftrl_accounting.banded_sensitivity_squared(noise, samp, t)
                     for t in range(1, rounds + 1)], np.float64)
