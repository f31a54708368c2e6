"""A sweep's configurations: its seeds (`parse_seeds`, `check_seeds`), its axes (numeric
options of the run and the algorithm, `check_axes`), the folder name of each
configuration (`member_name`) and the configurations themselves (`configurations`: the
Cartesian product of the axes and the seeds, each a validated `RunConfig`).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int

__all__ = [
    "NOT_AXES", "parse_seeds", "check_seeds", "numeric_type", "axis_fields", "not_axes",
    "check_axes", "format_value", "member_name", "configurations", "is_flag",
    "is_choice",
]

#: Options that cannot be axes: they fix the data every configuration shares (it is
#: loaded once), the device layout, or they are the seeds (``seeds``). The partition
#: fields (``dirichlet_alpha``, ...) are added from `fedjax_dp.data.partition`.
NOT_AXES = {
    "seed": "give the seeds with --seeds (seeds=[...] in Python)",
    "data_seed": "the data is loaded once for all configurations (give one --data-seed)",
    "num_clients": "the data is loaded once for all configurations",
    "devices": "the device layout is one for the whole sweep",
    "chunk_size": "it changes the compiled program (the chunk layout of the cohort)",
    "resume_rounds": "a sweep is continued with --resume alone; it cannot be extended",
}


def parse_seeds(text: str) -> List[int]:
  """``"0-7"`` (inclusive), ``"0,3,5"`` or a mix (``"0-3,8"``) -> the list of seeds.

  Raises:
    FedJaxDpError (option ``seeds``): empty items, non-integers, a range whose end is
      below its start, seeds out of [0, 2**32 - 1], or a seed given twice.
  """
  seeds: List[int] = []
  for item in str(text).split(","):
    item = item.strip()
    m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", item)
    if m:
      lo, hi = int(m.group(1)), int(m.group(2))
      if hi < lo:
        raise FedJaxDpError(f"seeds: the range {item!r} ends below its start; write "
                            f"LO-HI with LO <= HI, e.g. 0-7.", option="seeds")
      seeds.extend(range(lo, hi + 1))
    elif re.fullmatch(r"\d+", item):
      seeds.append(int(item))
    else:
      raise FedJaxDpError(f"seeds must be non-negative integers and ranges separated by "
                          f"commas, e.g. 0-7 or 0,3,5; got {text!r} (the item {item!r}).",
                          option="seeds")
  return check_seeds(seeds)


def check_seeds(seeds: Sequence[int]) -> List[int]:
  """The seeds as a list of ints.

  Raises:
    FedJaxDpError (option ``seeds``): not a non-empty sequence of distinct integers
      in [0, 2**32 - 1].
  """
  if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
    raise FedJaxDpError(f"seeds must be a non-empty list of integers, got {seeds!r}.",
                        option="seeds")
  out = []
  for s in seeds:
    try:
      out.append(check_int("seeds", s, minimum=0, maximum=2**32 - 1))
    except FedJaxDpError as e:
      raise FedJaxDpError(f"seeds: {e}", option="seeds") from None
  dup = sorted({s for s in out if out.count(s) > 1})
  if dup:
    raise FedJaxDpError(f"seeds must be distinct, got {dup[0]} more than once in {out}.",
                        option="seeds")
  return out


def numeric_type(hint) -> Optional[type]:
  """``int`` or ``float`` for a field typed (Optional) int / float, or a number or a
  word (``Union[float, Literal["adaptive"]]``: its numbers are the axis), else None
  (bools, strings, choices)."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  args = [a for a in typing.get_args(hint) if a is not type(None)
          and typing.get_origin(a) is not typing.Literal]
  if typing.get_origin(hint) is typing.Union and len(args) == 1:
    hint = args[0]
  return hint if hint in (int, float) else None


def axis_fields(algorithm: str) -> Dict[str, type]:
  """``{option: int or float}``: the numeric options of the run and of ``algorithm``
  that a sweep may take as axes (every numeric field of `RunConfig` and of the
  algorithm's ``Options``, except those in ``NOT_AXES`` and the partition fields)."""
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import RunConfig
  hints = {**typing.get_type_hints(RunConfig, include_extras=True),
           **typing.get_type_hints(registry.get(algorithm).Options, include_extras=True)}
  names = RunConfig.option_names(algorithm)
  out = {}
  for name in names:
    t = numeric_type(hints.get(name))
    if t is not None and name not in not_axes():
      out[name] = t
  return out


def not_axes() -> Dict[str, str]:
  """``{option: why}`` of the options that cannot be sweep axes: `NOT_AXES` and the
  partition fields."""
  from fedjax_dp.data import partition as partition_lib
  extra = {f: "the data is loaded once for all configurations"
           for f in getattr(partition_lib, "FIELD_PARAMS", {})}
  return {**NOT_AXES, **extra}


def check_axes(algorithm: str, axes: Optional[Mapping[str, Sequence[Any]]]
               ) -> Dict[str, List[Any]]:
  """The sweep's axes ``{option: [values]}`` with names normalised (dashes to
  underscores, flag aliases such as ``client_lr`` to their field) and values typed
  (floats for float options, ints for int options).

  Raises:
    FedJaxDpError (option: the axis): an unknown option, one that is not numeric (a
      choice, a string, a flag) or cannot be an axis (`NOT_AXES`), an empty list, a
      value of the wrong type, or a value given twice.
  """
  from fedjax_dp.algorithms import registry
  from fedjax_dp.runs.config import RunConfig, flag_aliases
  if axes is None:
    return {}
  if not isinstance(axes, Mapping):
    raise FedJaxDpError(f"axes must be a dict {{option: [values]}}, got "
                        f"{type(axes).__name__}.", option="axes")
  aliases = {**flag_aliases(RunConfig), **flag_aliases(registry.get(algorithm).Options)}
  numeric = axis_fields(algorithm)
  known = RunConfig.option_names(algorithm)
  out: Dict[str, List[Any]] = {}
  for raw, values in axes.items():
    name = aliases.get(str(raw).replace("-", "_"), str(raw).replace("-", "_"))
    if name in not_axes():
      raise FedJaxDpError(f"{name} cannot be a sweep axis: {not_axes()[name]}.",
                          option=name)
    if name not in known:
      raise FedJaxDpError(f"axes: unknown option {raw!r} of {algorithm}; a sweep axis is "
                          f"one of its numeric options: {', '.join(sorted(numeric))}.",
                          option=name)
    if name not in numeric:
      raise FedJaxDpError(f"{name} is not a numeric option, so it cannot be a sweep axis "
                          f"(axes are numeric options given as comma lists, e.g. "
                          f"--noise-multiplier 1,2,3; numeric options of {algorithm}: "
                          f"{', '.join(sorted(numeric))}).", option=name)
    if name in out:
      raise FedJaxDpError(f"axes: {name} is given twice.", option=name)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
      raise FedJaxDpError(f"{name}: a sweep axis needs a non-empty list of values, got "
                          f"{values!r}.", option=name)
    typed = []
    for v in values:
      if numeric[name] is int:
        ok = (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or (
            isinstance(v, float) and v.is_integer())
      else:
        ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
      if not ok:
        raise FedJaxDpError(f"{name}: every value of a sweep axis must be "
                            f"{'an integer' if numeric[name] is int else 'a number'}, "
                            f"got {v!r} in {list(values)!r}.", option=name)
      typed.append(int(v) if numeric[name] is int else float(v))
    dup = [v for v in typed if typed.count(v) > 1]
    if dup:
      raise FedJaxDpError(f"{name}: the values of a sweep axis must be distinct, got "
                          f"{dup[0]!r} twice in {typed}.", option=name)
    out[name] = typed
  return out


def format_value(v: Any) -> str:
  """An axis value in a folder name: ints as written, floats by ``repr``."""
  return str(v) if isinstance(v, int) else repr(float(v))


def member_name(axes: Mapping[str, Any]) -> str:
  """The folder name of a configuration: ``option=value`` pairs joined by commas (the
  non-seed axes in the order given, then ``seed``); letters, digits, ``_ . - + = ,``
  only, so it is a valid file name on every common file system."""
  return ",".join(f"{k}={format_value(v)}" for k, v in axes.items())


def configurations(base, axes: Mapping[str, List[Any]], seeds: Sequence[int],
                   data_seed: int) -> List[Tuple[Dict[str, Any], Any]]:
  """``[(axis values, RunConfig)]``: the Cartesian product of ``axes`` (in the order
  given) and ``seeds`` (innermost), each a copy of ``base`` with those values and
  ``data_seed``, validated (`RunConfig.validate`).

  Raises:
    FedJaxDpError: a configuration that does not validate (naming the option).
  """
  from fedjax_dp.runs.config import RunConfig
  run_fields = set(RunConfig.run_fields())
  names = list(axes)
  out = []
  for values in itertools.product(*(axes[n] for n in names), seeds):
    point = dict(zip(names + ["seed"], values))
    run_kw = {k: v for k, v in point.items() if k in run_fields}
    alg_kw = {k: v for k, v in point.items() if k not in run_fields}
    # A value typed on the command line replaces the other of an EXCLUSIVE pair.
    for a, b in getattr(type(base.options), "EXCLUSIVE", ()):
      for one, other in ((a, b), (b, a)):
        if one in alg_kw and other not in alg_kw:
          alg_kw[other] = None
    cfg = dataclasses.replace(base, data_seed=data_seed,
                              options=dataclasses.replace(base.options, **alg_kw),
                              **run_kw)
    out.append((point, cfg.validate()))
  return out


def is_flag(hint) -> bool:
  """A bool option (``--X`` / ``--no-X``: it takes no value)."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  return hint is bool


def is_choice(hint) -> bool:
  """A ``Literal`` or bool option (a comma list is never one of its values)."""
  if typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  if typing.get_origin(hint) is typing.Union and len(args) == 1:
    hint = args[0]
  return hint is bool or typing.get_origin(hint) is typing.Literal
