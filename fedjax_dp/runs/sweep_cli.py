"""``fedjax-dp sweep``: its command line (`parse_sweep_args`) and the command itself
(`command`). The run's parser (`fedjax_dp.cli.parse_run_args`) takes every run option;
the flag helpers are the run's (`fedjax_dp.runs.config`).
"""

from __future__ import annotations

import dataclasses
import re
import signal
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fedjax_dp.runs.config import (RunConfig, command_line_algorithm, flag_value,
                                   option_flags)
from fedjax_dp.runs.sweep_axes import check_axes, is_choice, is_flag, numeric_type, parse_seeds
from fedjax_dp.validation import FedJaxDpError, check_int

__all__ = [
    "SWEEP_USAGE", "parse_sweep_args", "command",
]

SWEEP_USAGE = """\
usage: fedjax-dp sweep [RUN OPTIONS] [--seeds SEEDS] [--OPTION V1,V2,...] [--sweep-chunk K]
       fedjax-dp sweep --resume DIR [the sweep's options again]

Runs every combination of the seeds and of each numeric option given as a comma list
(--noise-multiplier 1,2,3) as one vmapped compiled program; each configuration gets its
own run folder, <out> gets sweep.json/.md/.png. Details: docs/how-to/sweeps.md.

sweep options:
  --seeds SEEDS      root seeds: ranges and values separated by commas (0-7, 0,3,5)
  --sweep-chunk K    at most K configurations per vmapped program (default: all; the
                     results are the same, memory and compute grow with K)
  --data-seed N      seed of the data partition shared by all (default: the first seed)
  --resume DIR       continue the interrupted sweep whose --out was DIR
best-of selection (privately accounted tuning; docs/how-to/sweeps.md):
  --select best-of   run a random number K of trials, each a configuration drawn
                     uniformly from the grid, and publish only the best
  --repetitions-mean MU          E[K] (>= 1)
  --repetitions-distribution D   poisson (default), logarithmic, negative_binomial
  --repetitions-shape ETA        the negative binomial's shape (> 0; 1: geometric)
  --select-metric F  the score (default final_test_accuracy, on the central test set)
  --selection-seed N seed of the draws of K and of the configurations (default 0)
  --keep-trials      keep every trial's folder (then all K are published)
Every option of fedjax-dp run is taken (listed below).
"""


def _pull(argv: List[str], flag: str) -> Tuple[Optional[str], List[str]]:
  """``(value of the last flag, argv without any of them)``.

  Raises:
    FedJaxDpError: the flag without a value.
  """
  value, rest, i = None, [], 0
  while i < len(argv):
    tok = argv[i]
    if tok == flag:
      if i + 1 >= len(argv):
        raise FedJaxDpError(f"{flag} needs a value.", option=flag[2:].replace("-", "_"))
      value = argv[i + 1]
      i += 2
      continue
    if tok.startswith(flag + "="):
      value = tok.split("=", 1)[1]
    else:
      rest.append(tok)
    i += 1
  return value, rest


def _take_axes(argv: List[str], algorithm: str
               ) -> Tuple[List[str], Dict[str, List[Any]], Dict[str, str]]:
  """``(argv with each axis replaced by its first value, {option: [values]}, {option:
  where})``: every numeric option of ``algorithm`` whose value holds commas is an axis.

  Raises:
    FedJaxDpError: a comma list on ``--seed``, on a choice or flag, or with a value
      that is not a number of the option's type.
  """
  from fedjax_dp.algorithms import registry
  options_cls = registry.get(algorithm).Options
  hints = {**typing.get_type_hints(RunConfig, include_extras=True),
           **typing.get_type_hints(options_cls, include_extras=True)}
  by_flag = {flag: name for cls in (RunConfig, options_cls)  # not their --no-X
             for name, fl in option_flags(cls).items() for flag in [fl[0]] + fl[2:]}
  out, axes, where, i = [], {}, {}, 0
  while i < len(argv):
    tok = argv[i]
    flag, eq, value = tok.partition("=")
    name = by_flag.get(flag) if flag.startswith("--") else None
    if name is None or (not eq and (i + 1 >= len(argv) or is_flag(hints.get(name))
                                    or argv[i + 1].startswith("--"))):
      out.append(tok)  # not an option that takes a value here
      i += 1
      continue
    if not eq:
      value = argv[i + 1]
    if "," in value and name != "options":
      kind = numeric_type(hints.get(name))
      if name == "seed":
        raise FedJaxDpError(f"--seed {value}: give several seeds with --seeds {value}.",
                            option="seed")
      if kind is None and is_choice(hints.get(name)):
        raise FedJaxDpError(f"{flag} is not a numeric option, so it cannot be a sweep "
                            f"axis (got {value!r}); sweep choices with separate runs.",
                            option=name)
      if kind is not None:
        items = [v.strip() for v in value.split(",")]
        try:
          axes[name] = [kind(v) for v in items]
        except ValueError:
          bad = next(v for v in items if not _parses(kind, v))
          raise FedJaxDpError(
              f"{flag} {value}: {bad!r} is not "
              f"{'an integer' if kind is int else 'a number'} (a sweep axis is a comma "
              "list of values).", option=name) from None
        where[name] = f"option {flag}"
        value = items[0]
    out.extend([f"{flag}={value}"] if eq else [flag, value])
    i += 1 if eq else 2
  return out, axes, where


def _parses(kind: type, text: str) -> bool:
  try:
    kind(text)
    return True
  except ValueError:
    return False


def parse_sweep_args(argv: Sequence[str], parse_run_args):
  """``fedjax-dp sweep``'s arguments -> ``(base RunConfig, axes, seeds, sweep_chunk,
  CommandLineOptions, where)``.

  The sweep's own flags (``--seeds``, ``--sweep-chunk``) are taken out; every numeric
  option whose value holds commas becomes an axis and is replaced by its first value;
  the rest goes to ``parse_run_args`` (`fedjax_dp.cli.parse_run_args`, so every run
  option, config file and check is a run's). Options that are not numeric keep their
  commas (``--hidden 200,200``), except choices and flags, which cannot hold a list.
  With ``--resume DIR`` and neither ``--algorithm`` nor ``--config``, the algorithm is
  the saved sweep's. ``where`` maps each option given to where it came from.

  Raises:
    FedJaxDpError: bad seeds, chunk, axis values, an axis on an option that cannot be
      one, or --distributed (a sweep runs in one process).
    Exception: whatever ``parse_run_args`` raises for the run options.
  """
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs import sweep_resume
  argv = list(argv)
  seeds_text, argv = _pull(argv, "--seeds")
  chunk_text, argv = _pull(argv, "--sweep-chunk")
  resume = flag_value(argv, "--resume")
  if resume and not (flag_value(argv, "--algorithm") or flag_value(argv, "--config")):
    argv = ["--algorithm", sweep_resume.saved_algorithm(resume)] + argv
  algorithm, _ = command_line_algorithm(argv)
  axes, flag_where = {}, {}
  if algorithm in registry.REGISTRY:  # else the run's parser names the choices
    argv, axes_raw, flag_where = _take_axes(argv, algorithm)
    axes = check_axes(algorithm, axes_raw)
  base, cli_opts, where, dist = parse_run_args(argv)
  if dist.joins:
    raise FedJaxDpError("distributed: a sweep runs in one process (its configurations "
                        "share the devices of this one); drop --distributed.",
                        option="distributed")
  where = {**where, **flag_where}
  seeds = None
  if seeds_text is not None:
    seeds = parse_seeds(seeds_text)
    where["seeds"] = "option --seeds"
  chunk = None
  if chunk_text is not None:
    if not re.fullmatch(r"\d+", chunk_text.strip()):
      raise FedJaxDpError(f"sweep_chunk (--sweep-chunk) must be a positive integer, got "
                          f"{chunk_text!r}.", option="sweep_chunk")
    chunk = check_int("sweep_chunk", int(chunk_text), minimum=1)
    where["sweep_chunk"] = "option --sweep-chunk"
  if "out" not in where:  # not the single run's default folder
    base = dataclasses.replace(base, out="runs/sweep")
  return base, axes, seeds, chunk, cli_opts, where


def command(argv: Sequence[str], parse_run_args) -> int:
  """``fedjax-dp sweep``: parse (`parse_sweep_args` with the run parser
  ``parse_run_args``), run or resume the sweep, print the comparison table; returns
  the exit status (0, 128 + the signal's number when a signal stopped it, or 3 when
  a configuration diverged and was stopped: `fedjax_dp.runs.divergence`; as
  ``fedjax-dp run``).

  Raises:
    FedJaxDpError: as `parse_sweep_args` and `fedjax_dp.runs.sweep.run_sweep`, with
      where the value came from (the command line prints it as one line).
    Exception: whatever ``parse_run_args`` raises for the run options.
  """
  from fedjax_dp.runs.sweep import run_sweep
  from fedjax_dp.runs.sweep_report import comparison_table
  argv = list(argv)
  if any(t in ("-h", "--help") for t in argv):
    from fedjax_dp.algorithms import registry
    from fedjax_dp.cli_help import run_help
    print(SWEEP_USAGE, end="")
    plugin = registry.get(flag_value(argv, "--algorithm") or registry.DEFAULT)
    print(run_help(plugin, registry.names(), sweep=True), end="")
    return 0
  from fedjax_dp.runs.sweep_select import parse_select_args
  select, argv, select_where = parse_select_args(argv)
  base, axes, seeds, chunk, cli_opts, where = parse_sweep_args(argv, parse_run_args)
  where = {**where, **select_where}
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(base.devices)  # one JAX CPU device per core (before JAX starts)
  try:
    result = run_sweep(base, axes, seeds, sweep_chunk=chunk,
                       progress=not cli_opts.no_progress,
                       given=[w for w in where if w not in select_where], select=select)
  except FedJaxDpError as e:
    hint = f" ({where[e.option]})" if getattr(e, "option", None) in where else ""
    raise FedJaxDpError(f"{e}{hint}", option=getattr(e, "option", None)) from e
  if select is not None and not result.members:  # K = 0: nothing to show
    from fedjax_dp.runs.sweep_report import selection_lines
    print("\n" + "\n".join(selection_lines(result.selection)))
    return 0
  m0 = result.members[0].summary
  count = (f"{result.selection['repetitions']} best-of trials (1 published)"
           if result.selection and select is not None and not select.keep_trials
           else f"{len(result.members)} configurations")
  print(f"\nsweep: {count} of {m0['algorithm']} on "
        f"{m0['dataset']} in {result.wall_time_s:.1f} s ({result.programs} vmapped "
        f"program(s) per block)")
  if result.selection:
    from fedjax_dp.runs.sweep_report import selection_lines
    print("\n".join("  " + line if line else "" for line in
                    selection_lines(result.selection)))
  print(comparison_table(result.rows, list(result.axes)))
  print("  std: sample standard deviation over the seeds (ddof = 1)")
  if result.out:
    print(f"  outputs: {result.out}/sweep.md, sweep.json, sweep.png and one run folder "
          f"per configuration ({result.out}/{result.members[0].name}/summary.json, ...)")
  stop = result.interrupted
  if stop:
    print(f"  interrupted ({stop['signal']}) after {stop['rounds_done']} of "
          f"{stop['rounds_planned']} rounds: every configuration is summarised at its "
          "newest checkpoint" + (f"; continue with: {stop['resume']}" if stop["resume"]
                                 else ""))
    return 128 + getattr(signal, stop["signal"])
  from fedjax_dp.runs.divergence import EXIT_DIVERGED
  diverged = [(m.name, m.summary["diverged"]) for m in result.members
              if m.summary.get("diverged")]
  for name, div in diverged:
    print(f"  {name}: {'DIVERGED' if div['stopped'] else 'warning'}: {div['message']}")
  if any(div["stopped"] for _, div in diverged):
    print(f"  exit status {EXIT_DIVERGED}: {sum(d['stopped'] for _, d in diverged)} of "
          f"{len(result.members)} configurations diverged and were stopped; the others "
          "ran to the end")
    return EXIT_DIVERGED
  return 0
