"""Command line: ``fedjax-dp run`` (the main job) and ``fedjax-dp datasets``.

``fedjax-dp run`` with no arguments trains user-level DP-FedAvg on the UCI HAPT
smartphone recordings with their 30 natural clients (one per subject) and reports test
accuracy and the (epsilon, delta) spent. See ``fedjax-dp run --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from typing import List, Optional

from fedjax_dp.validation import FedJaxDpError

_D = None  # filled lazily with RunConfig defaults


def _defaults():
  global _D
  if _D is None:
    from fedjax_dp.runner import RunConfig
    _D = RunConfig()
  return _D


def _add_run_parser(sub) -> argparse.ArgumentParser:
  d = _defaults()
  from fedjax_dp.algorithms import ALGORITHMS
  p = sub.add_parser(
      "run", help="train a (DP) federated model and report accuracy and epsilon",
      formatter_class=argparse.ArgumentDefaultsHelpFormatter,
      description=("Train a federated model with differential privacy. Defaults: "
                   "user-level DP-FedAvg on HAR (UCI HAPT, 30 natural clients)."))
  g = p.add_argument_group("task")
  g.add_argument("--algorithm", default=d.algorithm, choices=sorted(ALGORITHMS),
                 help="dp_fedavg / dp_fedsgd: user-level DP (McMahan et al. 2018); "
                      "dp_fedavg_record_level: local DP-SGD in each client; fedavg: "
                      "non-private baseline")
  g.add_argument("--dataset", default=d.dataset,
                 help="har, fashion_mnist, mnist, emnist, cifar10 or synthetic "
                      "(`fedjax-dp datasets` shows what is available here)")
  g.add_argument("--partition", default=d.partition,
                 help="natural, iid, dirichlet, shards or quantity_skew (default: the "
                      "dataset's own: natural for har)")
  g.add_argument("--num-clients", type=int, default=d.num_clients,
                 help="number of clients for synthetic partitions")
  g.add_argument("--data-dir", default=d.data_dir,
                 help="directory with dataset files (IDX ...); also FEDJAX_DP_DATA_DIR")
  g.add_argument("--model", default=d.model,
                 help="mlp, cnn, lenet5, har_cnn or linear (default depends on the dataset)")
  g.add_argument("--hidden", default=d.hidden,
                 help="MLP hidden widths, e.g. 32 or 200,200 (default 200,200)")
  g.add_argument("--activation", default=d.activation, choices=("relu", "linear"),
                 help="MLP activation (paper 004's MLP is linear)")
  g = p.add_argument_group("federated training")
  g.add_argument("--rounds", type=int, default=d.rounds, help="communication rounds")
  c = g.add_mutually_exclusive_group()
  c.add_argument("--clients-per-round", type=int, default=None,
                 help="expected cohort size q*N (exclusive with --sampling-rate)")
  c.add_argument("--sampling-rate", type=float, default=None,
                 help=f"client sampling rate q in (0, 1] (default {d.sampling_rate})")
  g.add_argument("--sampler", default=d.sampler, choices=("poisson", "fixed_size"),
                 help="Poisson sampling (add/remove DP) or fixed-size without replacement "
                      "(replace-one DP)")
  g.add_argument("--local-epochs", type=int, default=d.local_epochs,
                 help="local epochs E per round")
  g.add_argument("--local-steps", type=int, default=d.local_steps,
                 help="local steps tau per round (overrides --local-epochs)")
  g.add_argument("--batch-size", type=int, default=d.batch_size, help="local minibatch size")
  g.add_argument("--client-optimizer", default=d.client_optimizer,
                 choices=("sgd", "momentum", "adam"))
  g.add_argument("--client-lr", type=float, default=d.client_learning_rate,
                 help="client learning rate")
  g.add_argument("--server-optimizer", default=d.server_optimizer,
                 choices=("fedavg", "fedavgm", "fedadam", "fedyogi"))
  g.add_argument("--server-lr", type=float, default=d.server_learning_rate,
                 help="server learning rate")
  g = p.add_argument_group("privacy")
  g.add_argument("--noise-multiplier", type=float, default=None,
                 help=f"noise multiplier z: noise std = z * clip norm (default "
                      f"{d.noise_multiplier})")
  g.add_argument("--target-epsilon", "--epsilon", type=float, default=None,
                 help="alone: calibrate z so that --rounds rounds spend this epsilon; "
                      "with --noise-multiplier: budget guard, stop before the round that "
                      "would take epsilon past it; amplitude_varying: the epsilon of its "
                      "eq. (8)")
  g.add_argument("--delta", type=float, default=d.delta, help="delta of (epsilon, delta)-DP")
  g.add_argument("--clip-norm", type=float, default=d.clip_norm,
                 help="L2 clip norm: of each client's update (user level) or of each "
                      "example's gradient (record level)")
  g.add_argument("--record-sampling-rate", type=float, default=d.record_sampling_rate,
                 help="record level: Poisson rate of examples per local DP-SGD step "
                      "(default batch size / mean client size)")
  g.add_argument("--accountant", default=d.accountant, choices=("rdp", "pld"),
                 help="accountant for the reported epsilon (both are in summary.json)")
  g = p.add_argument_group(
      "amplitude_varying (paper 004: Yuan et al., geometric noise variance)",
      "uses --epsilon (eq. 8), --clip-norm as the parameter clip C, --local-steps as "
      "tau (default 5), --clients-per-round as K, --client-lr as eta; full-batch local "
      "GD unless --batch-size")
  g.add_argument("--vartheta", type=float, default=d.vartheta,
                 help="ratio of the geometric variance series Theta(m) = vartheta^(m-1) "
                      "sigma^2, eq. (6); 1 = persistent Gaussian noise")
  g.add_argument("--mechanism", default=d.mechanism, choices=("gaussian", "laplace", "none"),
                 help="gaussian (the paper's), laplace (its constant 'Lap' baseline) or "
                      "none (no noise, clipping kept)")
  g.add_argument("--laplace-mode", default=d.laplace_mode,
                 choices=("pure_dp_split", "variance_matched"),
                 help="calibration of the Laplace baseline")
  g.add_argument("--alpha-d", type=float, default=d.alpha_d,
                 help="online refinement (Theorem 2): when the test loss stops "
                      "decreasing, M' = ceil(alpha_d M) and sigma is recomputed")
  g.add_argument("--refinement-mode", default=d.refinement_mode,
                 choices=("paper", "exact_budget"),
                 help="paper: eq. (9) as printed; exact_budget: never exceeds the budget")
  g = p.add_argument_group(
      "padpfl (paper 000: Talaei and Izadi, impact factors with client and server noise)",
      "uses --dataset (images; default model an MLP with --hidden 64), --epsilon and "
      "--delta (eqs. 8 and 13), --clip-norm as the weight bound B, --local-steps as tau "
      "(default 10, full batch unless --batch-size), --client-lr, --mechanism none for "
      "the non-private mode")
  g.add_argument("--scenario", type=int, default=d.scenario, choices=(1, 2, 3, 4),
                 help="heterogeneity scenario of the paper's Table I (60 clients in 3 parts)")
  g.add_argument("--impact-factors", default=d.impact_factors,
                 help="personalized (the scenario's own), equal, data_size, a per-part "
                      "ratio such as 0-1-2, or 0-1-2>2-1-0 (switch after round 10)")
  g.add_argument("--exposures", type=int, default=d.exposures,
                 help="R: uploads an adversary may see, 1 <= R <= rounds (eq. 8)")
  g.add_argument("--prox-mu", type=float, default=d.prox_mu,
                 help="FedProx mu of the local objective (eq. 4); 0 = FedAvg")
  g = p.add_argument_group("run")
  g.add_argument("--eval-every", type=int, default=d.eval_every,
                 help="evaluate on the test set every N rounds")
  g.add_argument("--seed", type=int, default=d.seed)
  g.add_argument("--devices", type=int, default=d.devices,
                 help="shard each cohort over this many local devices (default: all; on "
                      "a CPU, one device per core)")
  g.add_argument("--chunk-size", type=int, default=d.chunk_size,
                 help="clients trained at once per device (default: chosen from the "
                      "model size and free memory)")
  g.add_argument("--out", default=d.out,
                 help="output folder for metrics.jsonl, summary.json, curves.png")
  g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
  g.add_argument("--resume", default=None, metavar="DIR",
                 help="continue the run whose --out was DIR from its newest checkpoint "
                      "(written at every evaluation); its saved configuration is used")
  g.add_argument("--config", default=None, metavar="FILE",
                 help="read options from a .json or .toml file of RunConfig fields "
                      "(e.g. rounds = 100, clip_norm = 0.5), or from an earlier run's "
                      "summary.json; options given on the command line override it; "
                      "unknown keys are an error")
  g.add_argument("--no-verify-checksums", dest="verify_checksums", action="store_false",
                 help="load data files even when they fail their published checksums "
                      "(for knowingly modified files)")
  return p


# argparse destination -> RunConfig field, where the two differ (others are equal).
_FIELD_FOR_DEST = {"client_lr": "client_learning_rate", "server_lr": "server_learning_rate"}
_NOT_FIELDS = ("command", "config", "no_progress")


def _explicit_dests(run_parser: argparse.ArgumentParser, argv: List[str]) -> set:
  """The ``run`` options the user actually typed (argparse fills in the rest)."""
  saved = [(a, a.default) for a in run_parser._actions]
  try:
    for a, _ in saved:
      a.default = argparse.SUPPRESS
    ns = argparse.Namespace()
    run_parser.parse_known_args(argv[argv.index("run") + 1:], ns)
  finally:
    for a, default in saved:
      a.default = default
  return set(vars(ns))


def _config_from_args(args, explicit: Optional[set] = None):
  """The `RunConfig` of ``fedjax-dp run``: defaults < ``--config FILE`` < flags typed.

  ``explicit`` holds the argparse destinations given on the command line (None: all).
  Of the exclusive pairs (clients_per_round | sampling_rate) and (noise_multiplier |
  target_epsilon calibration) the defaults fill in only when neither is given.
  """
  from fedjax_dp.runner import RunConfig, load_config_file
  d = _defaults()
  values = {}
  if args.config:
    table = load_config_file(args.config)
    checked = RunConfig.from_dict(table, f"config file {args.config!r}")  # keys, types
    given = {_FIELD_FOR_DEST.get(k.replace("-", "_"), k.replace("-", "_")) for k in table}
    values = {k: v for k, v in vars(checked).items() if k in given}
  cli = {_FIELD_FOR_DEST.get(k, k): v for k, v in vars(args).items()
         if k not in _NOT_FIELDS and (explicit is None or k in explicit)}
  if explicit is None:  # no record of what was typed: treat argparse's None as unset
    cli = {k: v for k, v in cli.items() if v is not None or k not in (
        "clients_per_round", "sampling_rate", "noise_multiplier", "target_epsilon")}
  if "clients_per_round" in cli and "sampling_rate" not in cli:
    values.pop("sampling_rate", None)
  if "sampling_rate" in cli and "clients_per_round" not in cli:
    values.pop("clients_per_round", None)
  values.update(cli)
  if values.get("clients_per_round") is None and values.get("sampling_rate") is None:
    values["sampling_rate"] = d.sampling_rate
  if "clients_per_round" in values and "sampling_rate" not in values:
    values["sampling_rate"] = None
  if values.get("noise_multiplier") is None:
    values["noise_multiplier"] = (d.noise_multiplier if values.get("target_epsilon") is None
                                  else None)
  return RunConfig(**values)


def _cmd_run(args, explicit: Optional[set] = None) -> int:
  from fedjax_dp.runner import run
  cfg = _config_from_args(args, explicit).validate()
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(cfg.devices)  # one JAX CPU device per core (before JAX starts)
  result = run(cfg, progress=not args.no_progress)
  s = result.summary
  eps = s["epsilon"]
  eps_txt = f"{eps:.3f}" if math.isfinite(eps) else "inf (non-private)"
  steady = s.get("steady_time_per_round_s")
  steady_txt = f", {steady * 1e3:.0f} ms/round after compilation" if steady else ""
  print(f"\n{s['algorithm']} on {s['dataset']}: {s['rounds']} rounds in "
        f"{s['wall_time_s']:.1f} s ({s['time_per_round_s'] * 1e3:.0f} ms/round including "
        f"compilation{steady_txt})")
  print(f"  final test accuracy {s['final_test_accuracy']:.4f} (majority-class baseline "
        f"{s['majority_class_accuracy']:.4f}), test loss {s['final_test_loss']:.4f}")
  if s["neighboring_relation"] is None:
    print("  privacy: none (non-private baseline: no clipping, no noise; epsilon = inf)")
  else:
    pld = "n/a" if s["epsilon_pld"] is None else f"{s['epsilon_pld']:.3f}"
    print(f"  privacy: ({eps_txt}, {s['delta']:g})-DP, {s['privacy_unit']}, neighbouring "
          f"relation: {s['neighboring_relation']}; accountant {s['accountant']} "
          f"(RDP {s['epsilon_rdp']:.3f}, PLD {pld}); noise multiplier "
          f"{s['noise_multiplier']:.4g}, clip norm {s['clip_norm']}, sampling rate "
          f"{s['sampling_rate']:.4g}")
  if s.get("epsilon_rdp_downlink") is not None:
    print(f"  paper 000's own accounting: epsilon {s['epsilon_paper']:g} per its "
          f"classical Gaussian calibration; the accountant (RDP) on the noise added: "
          f"uplink {s['epsilon_rdp_uplink']:.3f} over R = {s['exposures']} upload(s), "
          f"{s['epsilon_rdp_uplink_all_uploads']:.3f} over all uploads, downlink "
          f"{s['epsilon_rdp_downlink']:.3f}; sigma_C {s['sigma_c'][0]:.4g}, sigma_S "
          f"{s['sigma_s'][-1]:.4g}, sigma_A {s['sigma_a'][-1]:.4g} (last round)")
  elif s.get("epsilon_paper") is not None:
    print(f"  paper 004's own accounting: epsilon {s['epsilon_paper']:.3f} (target "
          f"{s['epsilon_paper_target']:g}; its moment bound minimised exactly: "
          f"{s['epsilon_paper_exact_moment_bound']:.3f}); the accountant's RDP epsilon "
          f"above is the one to trust")
  guard = s.get("budget_guard")
  if guard and guard["stopped_early"]:
    print(f"  budget guard: stopped after {guard['rounds_run']} of {guard['rounds_planned']} "
          f"rounds: one more round would take epsilon (RDP) past the target "
          f"{guard['target_epsilon']:g}; a checkpoint of the last round is saved")
  if s.get("privacy_note"):
    print(f"  note: {s['privacy_note']}")
  out = s["config"]["out"]  # on --resume, the resumed run's folder
  if out:
    print(f"  outputs: {out}/metrics.jsonl, summary.json, curves.png, checkpoints/ "
          f"(resume a killed run with --resume {out})")
  return 0


BREAKS = ("none", "noise-off", "noise-small", "no-clip")


def _cmd_audit(args) -> int:
  """Audits the DP-FedAvg aggregation (optionally deliberately broken) with a canary."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from fedjax_dp.privacy import accounting, audit
  from fedjax_dp.validation import (check_delta, check_int, check_non_negative,
                                    check_positive)
  z = check_non_negative("noise_multiplier", args.noise_multiplier)
  c = check_positive("clip_norm", args.clip_norm)
  delta = check_delta(args.delta)
  reps = check_int("repetitions", args.repetitions, minimum=10)
  k = check_int("clients", args.clients, minimum=1)
  p = check_int("dim", args.dim, minimum=1)
  claimed = (accounting.compute_epsilon(z, 1.0, 1, delta, accountant="pld")
             if z > 0 else float("inf"))
  if args.break_mechanism == "noise-off":
    mechanism = audit.gaussian_sum_mechanism(c, 0.0)
  elif args.break_mechanism == "noise-small":
    mechanism = audit.gaussian_sum_mechanism(c, z / 10)
  elif args.break_mechanism == "no-clip":
    mechanism = lambda u, key: jnp.sum(u, 0) + z * c * jax.random.normal(key, u.shape[1:])
  else:
    mechanism = audit.gaussian_sum_mechanism(c, z)
  rng = np.random.default_rng(args.seed)
  others = jnp.asarray(rng.normal(size=(k, p)) * c / np.sqrt(p), jnp.float32)
  # The canary: a unit direction, 10x the clip norm long (clipping must cut it to C).
  canary = jnp.zeros(p, jnp.float32).at[0].set(10.0 * c)
  res = audit.audit_mechanism(mechanism, others, canary, delta=delta, repetitions=reps,
                              key=jax.random.key(args.seed))
  caught = res.epsilon_lower_bound > claimed
  print(f"mechanism: clip {c:g} -> sum of {k} clients + canary -> Gaussian noise "
        f"(z = {z:g}), broken: {args.break_mechanism}")
  print(f"accountant epsilon (PLD, one release, delta {delta:g}): {claimed:.3f}")
  print(f"audited lower bound ({reps} releases per world, 95% confidence): "
        f"{res.epsilon_lower_bound:.3f}")
  print("VIOLATION: the lower bound exceeds the accountant's epsilon." if caught else
        "consistent: the lower bound does not exceed the accountant's epsilon.")
  return 1 if caught else 0


def _cmd_datasets(args) -> int:
  from fedjax_dp.data import list_datasets
  infos = list_datasets()
  if args.json:
    print(json.dumps([dataclasses.asdict(i) for i in infos], indent=2, default=str))
    return 0
  for i in infos:
    mark = "available" if i.available else "missing"
    print(f"{i.name:15s} [{mark:9s}] {i.description}")
    print(f"{'':15s}  source: {i.source}")
    if not i.available:
      print(f"{'':15s}  get it: {i.how_to_get}")
  return 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="fedjax-dp",
      description="fedjax_dp: fast simulation of differentially private federated learning")
  sub = parser.add_subparsers(dest="command", required=True)
  parser.run_parser = _add_run_parser(sub)
  au = sub.add_parser(
      "audit", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
      help="empirical privacy audit of the DP-FedAvg aggregation with a canary client",
      description=("Runs clip -> sum -> Gaussian noise many times with and without a "
                   "canary client and compares the empirical lower bound on epsilon with "
                   "the accountant's epsilon. Exit status 1 if the bound exceeds it."))
  au.add_argument("--noise-multiplier", type=float, default=1.0)
  au.add_argument("--clip-norm", type=float, default=1.0)
  au.add_argument("--delta", type=float, default=1e-5)
  au.add_argument("--repetitions", type=int, default=2000, help="releases per world")
  au.add_argument("--clients", type=int, default=10, help="other clients in the cohort")
  au.add_argument("--dim", type=int, default=100, help="update dimension")
  au.add_argument("--break", dest="break_mechanism", default="none", choices=BREAKS,
                  help="audit a deliberately broken mechanism")
  au.add_argument("--seed", type=int, default=0)
  ds = sub.add_parser("datasets", help="list datasets, their source and availability")
  ds.add_argument("--json", action="store_true", help="machine-readable output")
  return parser


def main(argv: Optional[List[str]] = None) -> int:
  parser = build_parser()
  argv = sys.argv[1:] if argv is None else list(argv)
  args = parser.parse_args(argv)
  explicit = _explicit_dests(parser.run_parser, argv) if args.command == "run" else set()
  try:
    if args.command == "run":
      return _cmd_run(args, explicit)
    if args.command == "audit":
      return _cmd_audit(args)
    return _cmd_datasets(args)
  except FedJaxDpError as e:  # a user's mistake: one clear line, no traceback
    print(f"fedjax-dp: error: {e}{_flag_hint(parser, args, str(e), explicit)}",
          file=sys.stderr)
    return 2


def _flag_hint(parser: argparse.ArgumentParser, args, message: str, explicit: set) -> str:
  """Where the value came from, when ``message`` is a check of one RunConfig field
  (``"<field> must ..."``, ``"<field>='...' has ..."`` or ``"unknown <field> ..."``): `` (option --client-lr)`` if
  it was typed, `` (key 'client_learning_rate' of config file 'run.toml')`` if it came
  from ``--config``, nothing for a default."""
  if args.command != "run":
    return ""
  for action in parser.run_parser._actions:
    field = _FIELD_FOR_DEST.get(action.dest, action.dest)
    flags = [o for o in action.option_strings if o.startswith("--")]
    if flags and field not in _NOT_FIELDS and (
        re.match(re.escape(field) + r"\b(?!_)", message) or
        message.startswith(f"unknown {field} ")):
      if action.dest in explicit:
        return f" (option {flags[0]})"
      if args.config:
        return f" (key {field!r} of config file {args.config!r})"
  return ""


if __name__ == "__main__":
  sys.exit(main())
