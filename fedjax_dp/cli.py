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
import signal
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
  g.add_argument("--noise-placement", default=d.noise_placement,
                 choices=("central", "local"),
                 help="dp_fedavg / dp_fedsgd: one Gaussian draw on the aggregate (central) "
                      "or every sampled client noises its own clipped update (local; "
                      "accounted under zero-out for Poisson cohorts)")
  g.add_argument("--client-noise-multipliers", default=d.client_noise_multipliers,
                 metavar="FILE",
                 help="with --noise-placement local: a .npy, .json or text file with one "
                      "noise multiplier per client; every client is accounted with its own "
                      "and summary.json reports the worst client's epsilon")
  g.add_argument("--sensitivity-mode", default=d.sensitivity_mode,
                 choices=("paper", "clipped_gradients"),
                 help="papers 000 and 004: paper = the paper's noise calibration, with the "
                      "guarantee computed for the bound the code enforces (the weight "
                      "ball); clipped_gradients = per-example gradient clipping "
                      "(--grad-clip-norm) and the paper's formula with that provable "
                      "sensitivity")
  g.add_argument("--grad-clip-norm", type=float, default=d.grad_clip_norm,
                 help="per-example gradient clip norm G of --sensitivity-mode "
                      "clipped_gradients")
  g.add_argument("--dp-metrics-only", action="store_true", default=d.dp_metrics_only,
                 help="write only metrics released under DP or public to metrics.jsonl "
                      "(no train loss, update norms, clip fractions: those are computed "
                      "from raw client data)")
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
  g.add_argument("--overwrite", action="store_true", default=d.overwrite,
                 help="replace an earlier run in --out (without it the run writes to "
                      "<out>-2, <out>-3, ... and says so)")
  g.add_argument("--resume", default=None, metavar="DIR",
                 help="continue the run whose --out was DIR from its newest checkpoint "
                      "(written at every evaluation and at the start); its saved "
                      "configuration is used; with --rounds N it continues to N rounds "
                      "in all (extends a finished run)")
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
  if values.get("resume") and explicit is not None and "rounds" in explicit:
    values["resume_rounds"] = values["rounds"]  # continue the saved run to N rounds
  if values.get("clients_per_round") is None and values.get("sampling_rate") is None:
    values["sampling_rate"] = d.sampling_rate
  if "clients_per_round" in values and "sampling_rate" not in values:
    values["sampling_rate"] = None
  if values.get("noise_multiplier") is None:
    values["noise_multiplier"] = (d.noise_multiplier if values.get("target_epsilon") is None
                                  else None)
  return RunConfig(**values)


def _eps(value: float) -> str:
  """An epsilon for the terminal: 3 decimals, or 4 significant digits when huge."""
  return f"{value:.3f}" if value < 1e4 else f"{value:.4g}"


def _cmd_run(args, explicit: Optional[set] = None) -> int:
  from fedjax_dp.runner import run
  cfg = _config_from_args(args, explicit).validate()
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(cfg.devices)  # one JAX CPU device per core (before JAX starts)
  result = run(cfg, progress=not args.no_progress)
  s = result.summary
  eps = s["epsilon"]
  eps_txt = _eps(eps) if math.isfinite(eps) else "inf (non-private)"
  steady = s.get("steady_time_per_round_s")
  steady_txt = f", {steady * 1e3:.0f} ms/round after compilation" if steady else ""
  per_round = (f" ({s['time_per_round_s'] * 1e3:.0f} ms/round including compilation"
               f"{steady_txt})" if s["time_per_round_s"] else "")
  print(f"\n{s['algorithm']} on {s['dataset']}: {s['rounds']} rounds in "
        f"{s['wall_time_s']:.1f} s{per_round}")
  print(f"  final test accuracy {s['final_test_accuracy']:.4f} (majority-class baseline "
        f"{s['majority_class_accuracy']:.4f}), test loss {s['final_test_loss']:.4f}")
  if s["neighboring_relation"] is None:
    print("  privacy: none (non-private baseline: no clipping, no noise; epsilon = inf)")
  else:
    pld = "n/a" if s["epsilon_pld"] is None else _eps(s["epsilon_pld"])
    delta_txt = (f"{s['delta']:g}" if s["delta_total"] in (None, s["delta"]) else
                 f"{s['delta_total']:.4g} = {s['delta']:g} + truncation")
    z_txt = ("" if s["noise_multiplier"] is None else
             f"; noise multiplier {s['noise_multiplier']:.4g}")
    print(f"  privacy: ({eps_txt}, {delta_txt})-DP, {s['privacy_unit']}, neighbouring "
          f"relation: {s['neighboring_relation']}; accountant {s['accountant']} "
          f"(RDP {_eps(s['epsilon_rdp'])}, PLD {pld}){z_txt}, clip norm {s['clip_norm']}, "
          f"sampling rate {s['sampling_rate']:.4g}")
    if s.get("per_client_epsilon_rdp") is not None:
      print(f"  per-client accounting: the worst client is {s['worst_client']} (epsilon "
            f"above); every client's epsilon is in summary.json")
    if s.get("epsilon_conditional_rdp") is not None:
      print(f"  conditional (not a guarantee): epsilon {s['epsilon_conditional_rdp']:.3f} "
            f"if the paper's sensitivity {s['sensitivity_paper']:.4g} held; the guarantee "
            f"above uses {s['sensitivity']:.4g}, what the code enforces")
  if s.get("epsilon_rdp_downlink") is not None:
    print(f"  paper 000's own accounting: epsilon {s['epsilon_paper']:g} per its "
          f"classical Gaussian calibration; the accountant (RDP) on the noise added, with "
          f"the paper's sensitivity: uplink {s['epsilon_rdp_uplink_conditional']:.3f} over "
          f"R = {s['exposures']} upload(s), "
          f"{s['epsilon_rdp_uplink_all_uploads_conditional']:.3f} over all uploads, "
          f"downlink {s['epsilon_rdp_downlink_conditional']:.3f}; provable downlink "
          f"{_eps(s['epsilon_rdp_downlink'])}; sigma_C {s['sigma_c'][0]:.4g}, sigma_S "
          f"{s['sigma_s'][-1]:.4g}, sigma_A {s['sigma_a'][-1]:.4g} (last round)")
  elif s.get("epsilon_paper") is not None:
    print(f"  paper 004's own accounting: epsilon {s['epsilon_paper']:.3f} (target "
          f"{s['epsilon_paper_target']:g}; its moment bound minimised exactly: "
          f"{s['epsilon_paper_exact_moment_bound']:.3f}); the guarantee above is what the "
          f"code enforces")
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
  stop = s.get("interrupted")
  if stop:
    print(f"  interrupted ({stop['signal']}) after {stop['rounds_done']} of "
          f"{stop['rounds_planned']} rounds: the summary is of the rounds in the newest "
          "checkpoint" + (f"; continue with: {stop['resume']}" if stop["resume"] else ""))
    return 128 + getattr(signal, stop["signal"])
  return 0


def _cmd_audit(args) -> int:
  """Canary audits of the shipped algorithms through their real rounds (optionally with
  deliberately re-introduced bugs). Exit status 1 if anything is unexpected: the shipped
  code's lower bound exceeds its claim, or a deliberate break is not caught."""
  from fedjax_dp import auditing
  from fedjax_dp.algorithms import audit_targets
  from fedjax_dp.validation import check_int
  import jax
  reps = check_int("repetitions", args.repetitions, minimum=100)
  cal = check_int("calibration", args.calibration, minimum=100)
  if args.list:
    for t in audit_targets.TARGETS:
      print(f"{t.name:40s} {t.mechanism}")
      for b, what in t.breaks.items():
        print(f"{'':42s}--break {b}: {what}")
    return 0
  if args.algorithm == "all":
    targets = list(audit_targets.TARGETS)
  else:
    targets = audit_targets.targets_for(args.algorithm)
  if args.target:
    targets = [t for t in targets if t.name == args.target]
    if not targets:
      raise FedJaxDpError(f"target must be one of "
                          f"{[t.name for t in audit_targets.TARGETS]}, got {args.target!r}.")
  cache, unexpected = {}, 0
  print(f"canary audits: {reps} scored repetitions per world (+{cal} to fix the test), "
        f"delta {audit_targets.DELTA:g}, 95% confidence; claimed = the code's epsilon (PLD "
        f"where supported), lower bound = what the releases prove")
  for t in targets:
    breaks = (list(t.breaks) if args.break_mechanism == "all" else [args.break_mechanism])
    for b in breaks:
      if b not in t.breaks:
        if args.break_mechanism != "all" and len(targets) == 1:
          raise FedJaxDpError(f"break must be one of {sorted(t.breaks)} for {t.name}, got "
                              f"{b!r}.")
        continue
      rep = auditing.run(t.build(b), repetitions=reps, calibration=cal,
                         key=jax.random.key(args.seed), cache=cache)
      ok = rep.violated == (b != "none")  # a break must be caught, the shipped code not
      unexpected += not ok
      print(f"{t.name:38s} break={b:20s} {auditing.describe(rep)}"
            + ("" if ok else "  <- UNEXPECTED"))
  if unexpected:
    print(f"UNEXPECTED: {unexpected} audit(s) did not behave as expected (the shipped code "
          "must stay below its claim, and a deliberate break must be caught).")
  else:
    print("as expected: the shipped code stays below its claim"
          + (" and every deliberate break is caught." if args.break_mechanism != "none"
             else "."))
  return 1 if unexpected else 0


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
  from fedjax_dp.algorithms import ALGORITHMS
  au = sub.add_parser(
      "audit", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
      help="empirical privacy audit of the shipped algorithms with canaries",
      description=("Runs each algorithm's real round many times on two neighbouring "
                   "populations (with and without a canary user or record), fixes a "
                   "distinguishing test on part of the runs and turns its error rates on "
                   "the rest into a lower bound on epsilon, compared with the epsilon the "
                   "code claims. --break re-introduces a known bug deliberately; the audit "
                   "must catch it. Exit status 1 if the shipped code's bound exceeds its "
                   "claim or a break is not caught."))
  au.add_argument("--algorithm", default="all", choices=["all"] + sorted(ALGORITHMS),
                  help="the algorithm whose mechanisms to audit")
  au.add_argument("--target", default=None,
                  help="one target, e.g. dp_fedavg/fixed_size (see --list)")
  au.add_argument("--break", dest="break_mechanism", default="none",
                  help="a deliberate bug to re-introduce (see --list), or 'all' for every "
                       "break of each target")
  au.add_argument("--repetitions", type=int, default=20000,
                  help="scored repetitions per world")
  au.add_argument("--calibration", type=int, default=10000,
                  help="repetitions per world that fix the distinguishing test")
  au.add_argument("--seed", type=int, default=0)
  au.add_argument("--list", action="store_true", help="list the targets and their breaks")
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
  except KeyboardInterrupt as e:  # before training started: nothing was written
    print("\nfedjax-dp: interrupted; no summary was written (an output folder that "
          "holds checkpoints/ can be continued with --resume).", file=sys.stderr)
    return 128 + getattr(e, "signum", signal.SIGINT)
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
