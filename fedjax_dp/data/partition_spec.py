"""Partition specifications: the text ``--partition`` takes, and what a dataset's own
fields add to it (`parse_partition_spec`, `resolve_partition`, `describe_partition`).
The partitioners themselves are in `fedjax_dp.data.partition`, which re-exports these."""

from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from fedjax_dp.validation import FedJaxDpError

METHODS = ("natural", "iid", "dirichlet", "shards", "quantity_skew")

# Keyword arguments each method accepts in `partition` (besides x, y, num_clients, seed).
METHOD_KWARGS = {
    "natural": ("group_ids",),
    "iid": (),
    "dirichlet": ("alpha", "min_size"),
    "shards": ("shards_per_client",),
    "quantity_skew": ("alpha", "sigma", "min_size"),
}

#: The partitioner's keyword a bare shorthand value sets (``dirichlet:0.1``, ``shards:2``).
SHORTHAND_PARAM = {"dirichlet": "alpha", "shards": "shards_per_client"}

#: The parameters of each method that a partition spec may set.
SPEC_PARAMS = {m: tuple(k for k in kw if k != "group_ids") for m, kw in METHOD_KWARGS.items()}

_INT_PARAMS = ("min_size", "shards_per_client")

#: The run's partition options (`fedjax_dp.runs.RunConfig` fields):
#: ``{field: (the methods that take it, the partitioner's keyword)}``.
FIELD_PARAMS = {
    "dirichlet_alpha": (("dirichlet",), "alpha"),
    "shards_per_client": (("shards",), "shards_per_client"),
    "quantity_skew_alpha": (("quantity_skew",), "alpha"),
    "quantity_skew_sigma": (("quantity_skew",), "sigma"),
    "min_client_size": (("dirichlet", "quantity_skew"), "min_size"),
}


def _param_value(method: str, key: str, value: Any, subject: str, option: str) -> Any:
  """A partition parameter checked: ``alpha`` finite > 0, ``sigma`` finite >= 0,
  ``min_size`` / ``shards_per_client`` integers >= 1; ``value`` may be a string (from a
  shorthand). ``subject`` names it in the message; ``option`` is the error's option."""
  is_int = key in _INT_PARAMS
  what = ("an integer >= 1" if is_int else
          "a finite number >= 0" if key == "sigma" else "a finite number > 0")
  bad = FedJaxDpError(f"{subject} must be {what}, got {value!r}.", option=option)
  if isinstance(value, bool):
    raise bad
  if isinstance(value, str):
    try:
      value = int(value.strip()) if is_int else float(value.strip())
    except ValueError:
      raise bad from None
  if is_int:
    if isinstance(value, float) and value.is_integer():
      value = int(value)
    if not isinstance(value, (numbers.Integral, np.integer)) or value < 1:
      raise bad
    return int(value)
  if not isinstance(value, (numbers.Real, np.number)):
    raise bad
  value = float(value)
  if not math.isfinite(value) or value < 0 or (value == 0 and key != "sigma"):
    raise bad
  return value


def _accepts(method: str) -> str:
  keys = SPEC_PARAMS[method]
  return ", ".join(keys) if keys else "no parameters"


def parse_partition_spec(text: str) -> Tuple[str, Dict[str, Any]]:
  """Parses a partition given as one string: ``method[:value]`` or
  ``method[:key=value,...]``.

  ``dirichlet:0.1`` (alpha), ``shards:2`` (shards_per_client), ``quantity_skew:sigma=1.5``,
  ``quantity_skew:alpha=0.3``, ``dirichlet:alpha=0.1,min_size=5`` (also
  ``dirichlet:0.1,min_size=5``); a plain method name (``iid``) has no parameters.
  The keys are the partitioner's keywords (`SPEC_PARAMS`): dirichlet ``alpha``,
  ``min_size``; shards ``shards_per_client``; quantity_skew ``alpha`` or ``sigma``,
  ``min_size``. Parameters not given keep the registry's defaults (`load_dataset`).

  Args:
    text: the spec, e.g. ``"dirichlet:0.1"``.

  Returns:
    ``(method, kwargs)``: a name of `METHODS` and ``{keyword: value}`` (alpha and
    sigma as float, min_size and shards_per_client as int).

  Raises:
    FedJaxDpError (option ``partition``): an unknown method, a parameter the method
      does not take (the message lists what it accepts), a key given twice, both
      alpha and sigma for quantity_skew, or a value out of range (alpha finite > 0,
      sigma finite >= 0, integers >= 1).
  """
  if not isinstance(text, str) or not text.strip():
    raise FedJaxDpError(f"partition must be a method ({', '.join(METHODS)}) with optional "
                        f"parameters such as 'dirichlet:0.1', got {text!r}.",
                        option="partition")
  method, colon, rest = (part.strip() for part in text.partition(":"))
  if method not in METHODS:
    where = f" in {text!r}" if colon else ""
    raise FedJaxDpError(f"partition must be one of {', '.join(map(repr, METHODS))} "
                        f"(optionally with parameters, e.g. 'dirichlet:0.1'); got "
                        f"{method!r}{where}.", option="partition")
  kwargs: Dict[str, Any] = {}
  if not colon:
    return method, kwargs
  if not rest:
    raise FedJaxDpError(f"partition {text!r}: nothing after ':'; give a value "
                        f"(e.g. 'dirichlet:0.1') or key=value pairs; {method} takes "
                        f"{_accepts(method)}.", option="partition")
  for i, item in enumerate(rest.split(",")):
    key, eq, value = (part.strip() for part in item.partition("="))
    if not eq:
      if i > 0 or method not in SHORTHAND_PARAM:
        hint = ("; it takes no parameters" if not SPEC_PARAMS[method] else
                f"; write key=value with key one of: {_accepts(method)}")
        raise FedJaxDpError(
            f"partition {text!r}: a bare value ({item.strip()!r}) is only allowed first, "
            f"for {', '.join(f'{m} ({k})' for m, k in SHORTHAND_PARAM.items())}"
            f"{hint if method not in SHORTHAND_PARAM else ''}.", option="partition")
      key, value = SHORTHAND_PARAM[method], key
    if key not in SPEC_PARAMS[method]:
      raise FedJaxDpError(f"partition {text!r}: {method} does not take {key!r}; it accepts:"
                          f" {_accepts(method)}.", option="partition")
    if key in kwargs:
      raise FedJaxDpError(f"partition {text!r}: {key} is given twice.", option="partition")
    kwargs[key] = _param_value(method, key, value, f"partition {text!r}: {key}",
                               "partition")
  if "alpha" in kwargs and "sigma" in kwargs:
    raise FedJaxDpError(f"partition {text!r}: quantity_skew takes exactly one of alpha "
                        "(Dirichlet sizes) or sigma (lognormal sizes), not both.",
                        option="partition")
  return method, kwargs


def resolve_partition(spec: Optional[str], fields: Mapping[str, Any],
                      default: Optional[str] = None) -> Tuple[Optional[str], Dict[str, Any]]:
  """Combines a partition spec and the run's partition fields into one partition.

  Args:
    spec: the ``partition`` option (`parse_partition_spec`), or None for the dataset's
      default.
    fields: ``{field: value or None}`` of the run's partition options (keys of
      `FIELD_PARAMS`: ``dirichlet_alpha``, ``shards_per_client``,
      ``quantity_skew_alpha``, ``quantity_skew_sigma``, ``min_client_size``).
    default: the dataset's default method (used when ``spec`` is None; then a field
      that only one method takes, e.g. ``dirichlet_alpha``, selects that method).

  Returns:
    ``(method, kwargs)``: the method (None: the dataset's default, with the
    registry's default parameters) and the partitioner's keywords to pass to
    `fedjax_dp.data.load_dataset`.

  Raises:
    FedJaxDpError: naming the option (``partition`` or the field): an invalid spec or
      value, a field the method does not take (the message lists what it accepts), a
      field whose value differs from the spec's, fields of different methods, or both
      an alpha and a sigma for quantity_skew.
  """
  unknown = sorted(set(fields) - set(FIELD_PARAMS))
  if unknown:
    raise FedJaxDpError(f"unknown partition option(s) {', '.join(unknown)}; the partition "
                        f"options are {', '.join(FIELD_PARAMS)}.")
  given = {}
  for name, value in fields.items():
    if value is not None:
      methods, key = FIELD_PARAMS[name]
      given[name] = _param_value(methods[0], key, value, name, name)
  if spec is not None:
    method, kwargs = parse_partition_spec(spec)
  elif not given:
    return None, {}
  else:
    kwargs = {}
    common = set(METHODS)
    for name in given:
      common &= set(FIELD_PARAMS[name][0])
    if default in common:
      method = default
    elif len(common) == 1:
      method = common.pop()
    elif common:
      name = next(iter(given))
      raise FedJaxDpError(
          f"{name} applies to the {' and '.join(sorted(common))} partition"
          f"{'s' * (len(common) > 1)}, but the "
          f"dataset's default partition is {default!r}; choose the partition with "
          "partition (e.g. 'dirichlet:0.1').", option=name)
    else:
      owners = "; ".join(f"{n}: {' or '.join(FIELD_PARAMS[n][0])}" for n in given)
      raise FedJaxDpError(f"{', '.join(given)} belong to different partitions ({owners}); "
                          "give the options of one partition.", option=next(iter(given)))
  for name, value in given.items():
    methods, key = FIELD_PARAMS[name]
    if method not in methods:
      takes = [f for f, (ms, _) in FIELD_PARAMS.items() if method in ms]
      raise FedJaxDpError(
          f"{name} applies to the {' and '.join(methods)} partition"
          f"{'s' * (len(methods) > 1)}, not to partition {method!r}, which accepts: "
          f"{', '.join(takes) or 'no parameters'}.", option=name)
    if key in kwargs and kwargs[key] != value:
      raise FedJaxDpError(f"{name}={value!r} conflicts with partition {spec!r}, which sets "
                          f"{key}={kwargs[key]!r}; give the value once.", option=name)
    kwargs[key] = value
  if "alpha" in kwargs and "sigma" in kwargs:
    raise FedJaxDpError("quantity_skew takes exactly one of alpha (quantity_skew_alpha, "
                        "Dirichlet sizes) or sigma (quantity_skew_sigma, lognormal sizes); "
                        f"got alpha={kwargs['alpha']!r} and sigma={kwargs['sigma']!r}"
                        + (f" (partition {spec!r} and the fields)." if spec else "."),
                        option=("quantity_skew_sigma" if "quantity_skew_sigma" in given else
                                "quantity_skew_alpha"))
  return method, kwargs


def describe_partition(method: str, **kwargs) -> str:
  """A partition in words, with every parameter it uses (its defaults included):
  ``dirichlet(alpha=0.1, min_size=1)``, ``shards(shards_per_client=2)``, ``iid``."""
  defaults = {"dirichlet": {"min_size": 1}, "shards": {"shards_per_client": 2},
              "quantity_skew": {"min_size": 1}}.get(method, {})
  params = {**defaults, **{k: v for k, v in kwargs.items()
                           if k != "group_ids" and v is not None}}
  if not params:
    return method
  order = [k for k in SPEC_PARAMS.get(method, ()) if k in params]
  return f"{method}({', '.join(f'{k}={params[k]:g}' for k in order)})"
