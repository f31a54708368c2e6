"""Resuming a sweep: its saved configuration (``sweep_config.json`` in the sweep's
folder, written before training), the check that what a resumed sweep is given is the
saved sweep (`check_unchanged`), and the round every member continues from
(`resume_points`: the newest round of which every member has a complete checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from fedjax_dp.checkpoint import RunCheckpointer
from fedjax_dp.runs import outputs, session
from fedjax_dp.runs.config import RunConfig
from fedjax_dp.runs.sweep_axes import check_axes, check_seeds
from fedjax_dp.validation import FedJaxDpError

__all__ = [
    "SPEC_FILE", "SPEC_FORMAT", "SweepPlan", "write_spec", "read_spec",
    "saved_algorithm", "resumed_plan", "given_options", "check_unchanged",
    "resume_points", "check_member",
]

#: The sweep's configuration, in its folder (what `--resume` continues).
SPEC_FILE = "sweep_config.json"
#: Version of `SPEC_FILE`'s layout.
SPEC_FORMAT = 1

#: Options a resumed sweep does not compare with the saved ones: where it is, and how.
_NOT_COMPARED = ("resume", "resume_rounds", "out", "overwrite")


@dataclasses.dataclass
class SweepPlan:
  """A sweep's configuration, checked.

  Attributes:
    base: the `RunConfig` every configuration starts from (validated).
    axes: ``{option: [values]}`` (`fedjax_dp.runs.sweep_axes.check_axes`).
    seeds: the root seeds.
    data_seed: the seed of the data shared by all configurations.
    sweep_chunk: at most this many configurations per vmapped program (None: all).
    resume: the folder of the sweep being continued, or None for a fresh sweep.
  """
  base: RunConfig
  axes: Dict[str, List[Any]]
  seeds: List[int]
  data_seed: int
  sweep_chunk: Optional[int]
  resume: Optional[str] = None


def write_spec(out: str, plan: SweepPlan, names: Sequence[str]) -> None:
  """Writes `SPEC_FILE` into the sweep's folder ``out`` (atomically): the base
  configuration (with ``out``), axes, seeds, data seed, chunk and member folders."""
  cfg = dataclasses.replace(plan.base, out=out, resume=None, resume_rounds=None,
                            overwrite=False)
  doc = {"format": SPEC_FORMAT, "config": cfg.to_dict(), "axes": plan.axes,
         "seeds": plan.seeds, "data_seed": plan.data_seed,
         "sweep_chunk": plan.sweep_chunk, "members": list(names)}
  outputs.write_atomic(os.path.join(out, SPEC_FILE),
                       json.dumps(outputs.json_safe(doc), indent=2))


def read_spec(folder: str) -> Dict[str, Any]:
  """The `SPEC_FILE` of the sweep in ``folder``.

  Raises:
    FedJaxDpError (option ``resume``): ``folder`` holds no sweep, a run, a sweep of an
      earlier fedjax_dp (without checkpoints), or an unreadable file.
  """
  path = os.path.join(folder, SPEC_FILE)
  if not os.path.isfile(path):
    if os.path.isdir(os.path.join(folder, "checkpoints")):
      why = (f"it holds a run, not a sweep; a run's folder cannot be resumed as a sweep: "
             f"continue it with fedjax-dp run --resume {folder}")
    elif os.path.isfile(os.path.join(folder, "sweep.json")):
      why = ("its sweep was run by an earlier fedjax_dp, which wrote no checkpoints, so "
             "it cannot be resumed; run it again")
    else:
      why = f"it holds no {SPEC_FILE}"
    raise FedJaxDpError(f"resume must be the folder (--out) of an earlier sweep, got "
                        f"{folder!r}: {why}.", option="resume")
  try:
    with open(path) as f:
      doc = json.load(f)
  except (OSError, ValueError) as e:
    raise FedJaxDpError(f"resume: {path!r} cannot be read ({e}).", option="resume") from e
  if not isinstance(doc, dict) or doc.get("format") != SPEC_FORMAT:
    raise FedJaxDpError(f"resume: {path!r} is not a sweep configuration this fedjax_dp "
                        f"reads (format {SPEC_FORMAT}).", option="resume")
  return doc


def saved_algorithm(folder: str) -> str:
  """The algorithm of the sweep in ``folder`` (`read_spec`)."""
  return read_spec(folder)["config"].get("algorithm")


def resumed_plan(base: RunConfig, axes: Optional[Mapping[str, Sequence[Any]]],
                 seeds: Optional[Sequence[int]], data_seed: Optional[int],
                 sweep_chunk: Optional[int], given: Optional[Sequence[str]]) -> SweepPlan:
  """The saved plan of the sweep in ``base.resume``, after checking that what the
  caller gives is that sweep (`check_unchanged`).

  Raises:
    FedJaxDpError: ``base`` invalid; no sweep to resume (option ``resume``); an option
      given that differs from the saved sweep's (naming it).
    ValueError: ``base.resume`` is None (the caller's error).
  """
  folder = base.resume
  if folder is None:
    raise ValueError("resumed_plan needs base.resume (the folder of the sweep).")
  dataclasses.replace(base, resume=None, resume_rounds=None).validate()
  spec = read_spec(folder)
  saved = RunConfig.from_dict(
      {**spec["config"], "out": folder, "resume": None, "resume_rounds": None,
       "overwrite": False}, source=f"{SPEC_FILE} in {folder}").validate()
  plan = SweepPlan(saved, check_axes(saved.algorithm, spec["axes"]),
                   check_seeds(spec["seeds"]), int(spec["data_seed"]),
                   spec.get("sweep_chunk"), folder)
  check_unchanged(plan, base, axes, seeds, data_seed, sweep_chunk, given)
  return plan


def _plain(v: Any) -> Any:
  """``v`` as JSON reads it back (tuples as lists, numpy numbers as Python's)."""
  return json.loads(json.dumps(outputs.json_safe(v)))


def _options(base: RunConfig, axes: Mapping[str, List[Any]], seeds: Optional[Sequence[int]],
             data_seed: Optional[int], sweep_chunk: Optional[int]) -> Dict[str, Any]:
  """One flat table of a sweep's options: the base configuration's, each axis's list
  of values, ``seeds`` (and ``seed``), the resolved ``data_seed`` and
  ``sweep_chunk``."""
  seeds = [base.seed] if seeds is None else list(seeds)
  out = {**base.to_dict(), **{k: list(v) for k, v in axes.items()}}
  out.update(seed=seeds, seeds=seeds, sweep_chunk=sweep_chunk,
             data_seed=(data_seed if data_seed is not None else
                        base.data_seed if base.data_seed is not None else seeds[0]))
  return out


def given_options(base, axes: Mapping[str, Any], seeds, data_seed, sweep_chunk
                  ) -> List[str]:
  """The options a Python caller gave: those of ``base`` that differ from their
  defaults (``algorithm`` from the registry's default, the algorithm's options from
  its ``Options()``), the axes, and ``seeds``, ``data_seed``, ``sweep_chunk`` when not
  None."""
  defaults = RunConfig(algorithm=base.algorithm).to_dict()
  defaults["algorithm"] = RunConfig().algorithm
  names = [k for k, v in base.to_dict().items() if _plain(v) != _plain(defaults.get(k))]
  names += list(axes)
  names += [n for n, v in (("seeds", seeds), ("data_seed", data_seed),
                           ("sweep_chunk", sweep_chunk)) if v is not None]
  return names


def check_unchanged(plan: SweepPlan, base, axes, seeds, data_seed, sweep_chunk,
                    given: Optional[Sequence[str]] = None) -> None:
  """Refuses to resume the sweep of ``plan`` with options that differ from its saved
  ones.

  Args:
    plan: the saved sweep's (`resumed_plan`).
    base, axes, seeds, data_seed, sweep_chunk: what the caller gives.
    given: the names of the options the caller set (the command line's typed ones);
      None: `given_options`. ``resume``, ``out`` and ``overwrite`` are not compared.

  Raises:
    FedJaxDpError: naming the first option (``algorithm`` first) that differs.
  """
  axes = check_axes(base.algorithm, axes) if axes else {}
  if given is None:
    given = given_options(base, axes, seeds, data_seed, sweep_chunk)
  mine = _options(base, axes, seeds, data_seed, sweep_chunk)
  saved = _options(plan.base, plan.axes, plan.seeds, plan.data_seed, plan.sweep_chunk)
  for name in sorted(given, key=lambda n: n != "algorithm"):
    if name in _NOT_COMPARED or (name not in mine and name not in saved):
      continue  # not an option of the sweep (--no-progress, --config)
    a, b = _plain(mine.get(name)), _plain(saved.get(name))
    if a != b:
      extra = (" (a sweep cannot be extended: it continues to its saved rounds)"
               if name == "rounds" else "")
      raise FedJaxDpError(
          f"resume: {name} of the sweep in {plan.resume!r} is {b!r}, not {a!r}{extra}; a "
          f"resumed sweep continues with its saved configuration: give --resume alone "
          f"(or with the sweep's own options), or start a new sweep to change {name}.",
          option=name)


def resume_points(folder: str, names: Sequence[str]
                  ) -> Tuple[int, Dict[str, session.Resumed]]:
  """``(round, {member: checkpoint})``: the newest round of which every member of the
  sweep in ``folder`` has a complete checkpoint, and each member's checkpoint of it.

  Raises:
    FedJaxDpError (option ``resume``): a member without checkpoints, members without a
      common round, or a checkpoint of an earlier fedjax_dp.
  """
  checkpointers = {}
  for name in names:
    ckpt = os.path.join(folder, name, "checkpoints")
    if not os.path.isdir(ckpt):
      raise FedJaxDpError(f"resume: the configuration {name} of the sweep in {folder!r} "
                          "has no checkpoints/; start the sweep again.", option="resume")
    checkpointers[name] = RunCheckpointer(ckpt)
  steps = [set(c.steps()) for c in checkpointers.values()]
  common = set.intersection(*steps) if steps else set()
  if not common:
    raise FedJaxDpError(f"resume: the configurations of the sweep in {folder!r} have no "
                        "checkpoint of the same round; start the sweep again.",
                        option="resume")
  step = max(common)
  return step, {n: session.read_checkpoint(os.path.join(folder, n), step, c)
                for n, c in checkpointers.items()}


def check_member(folder: str, name: str, resumed: session.Resumed, cfg: RunConfig) -> None:
  """The checkpoint of member ``name`` must hold the configuration ``cfg`` that the
  saved sweep gives it (apart from where it is written).

  Raises:
    FedJaxDpError: naming the first option in which they differ.
  """
  saved, now = resumed.meta["config"], cfg.to_dict()
  diff = sorted(k for k in set(saved) | set(now)
                if k not in _NOT_COMPARED and _plain(saved.get(k)) != _plain(now.get(k)))
  if diff:
    k = diff[0]
    raise FedJaxDpError(
        f"resume: the checkpoint of {name} in {folder!r} holds {k}={saved.get(k)!r}, but "
        f"the sweep's {SPEC_FILE} gives it {now.get(k)!r}; they were not written by one "
        "sweep: start the sweep again.", option=k)
