"""The concise ``fedjax-dp run --help`` (and the option list of ``fedjax-dp sweep
--help``): one line per option, in named groups, the default in brackets.

The text of each option is the first clause of its attribute docstring (the full one is
in the documentation's command-line reference and in the Python API's docs), with
parentheses and backticks left out; the default is the field's, or what the docstring's
``(default: ...)`` says. Nothing here imports JAX beyond the chosen algorithm's module.

It also checks each typed option's value against its field's type before tyro parses
the command line (`checked_values`), so that a bad value gets one line naming the flag.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import re
import shutil
import textwrap
import typing
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["field_docs", "metavar", "expected", "summary", "option_entries", "option_lines",
           "run_help", "GROUPS", "CommandLineError",
           "checked_values"]

#: The groups of `fedjax_dp.runs.config.RunConfig`'s and the command line's options, in
#: order; the algorithm's options come after the first two. A field in none of them is
#: listed under "other options" (so that a new one is never hidden).
GROUPS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("algorithm and data", ("algorithm", "dataset", "data_dir", "verify_checksums",
                            "partition", "dirichlet_alpha", "shards_per_client",
                            "quantity_skew_alpha", "quantity_skew_sigma",
                            "min_client_size", "num_clients", "data_seed")),
    ("model", ("model", "hidden", "activation")),
    ("training and privacy", ("rounds", "seed", "eval_every", "target_epsilon", "delta",
                              "accountant", "allow_large_delta", "allow_divergence",
                              "canaries", "canary_seed")),
    ("outputs", ("out", "overwrite", "resume", "logger", "dp_metrics_only", "config",
                 "no_progress")),
    ("devices and processes", ("devices", "chunk_size", "distributed",
                               "coordinator_address", "num_processes", "process_id")),
)
#: Fields never listed (set by other flags: ``--resume DIR --rounds N``).
HIDDEN = ("options", "resume_rounds")
#: Metavars that say more than the type.
METAVARS = {"dataset": "NAME", "model": "NAME", "partition": "SPEC", "data_dir": "DIR",
            "out": "DIR", "resume": "DIR", "config": "FILE", "hidden": "WIDTHS",
            "logger": "LIST", "coordinator_address": "HOST:PORT",
            "client_noise_multipliers": "FILE"}
#: Options whose text (a list of choices) is wrapped rather than cut to one line.
WRAPPED = ("--algorithm", "--dataset", "--partition", "--model")
_GAP = 2  # spaces between the flag column and the text


def field_docs(cls: type) -> Dict[str, str]:
  """``{field: attribute docstring}`` of a dataclass and its bases (the string literal
  after each annotated field)."""
  out: Dict[str, str] = {}
  for klass in reversed(cls.__mro__):
    if klass is object or not dataclasses.is_dataclass(klass):
      continue
    try:
      tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):
      continue
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) \
        else []
    for stmt, nxt in zip(body, body[1:]):
      if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
          and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
          and isinstance(nxt.value.value, str)):
        out[stmt.target.id] = " ".join(nxt.value.value.split())
  return out


def _unwrap(hint: Any) -> Any:
  while typing.get_origin(hint) is typing.Annotated:
    hint = typing.get_args(hint)[0]
  return hint


def _parts(hint: Any) -> Tuple[Optional[type], Tuple[Any, ...], bool]:
  """``(base type or None, literal choices, optional)`` of a field's type:
  ``Optional[float]`` -> (float, (), True); ``Union[float, Literal['adaptive']]`` ->
  (float, ('adaptive',), False); ``Literal['a', 'b']`` -> (None, ('a', 'b'), False)."""
  hint = _unwrap(hint)
  members = typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)
  optional = type(None) in members
  base, words = None, ()
  for m in members:
    m = _unwrap(m)
    if m is type(None):
      continue
    if typing.get_origin(m) is typing.Literal:
      words += typing.get_args(m)
    elif isinstance(m, type):
      base = m
  return base, words, optional


def metavar(name: str, hint: Any) -> str:
  """The placeholder after an option's flag: ``INT``, ``FLOAT``, ``{a,b}``,
  ``FLOAT|adaptive``, or a word of `METAVARS`."""
  if name in METAVARS:
    return METAVARS[name]
  base, words, _ = _parts(hint)
  choice = ("{" + ",".join(map(str, words)) + "}" if len(words) > 1 else
            str(words[0]) if words else "")
  typ = {int: "INT", float: "FLOAT", str: "TEXT"}.get(base, "") if base else ""
  return "|".join(p for p in (typ, choice) if p) or "VALUE"


def expected(hint: Any) -> str:
  """What a value of type ``hint`` must be, for an error message: ``an integer``, ``a
  number or 'adaptive'``, ``one of 'a', 'b'``; ``or 'none'`` for an optional one."""
  base, words, optional = _parts(hint)
  parts = []
  if base is not None:
    parts.append({int: "an integer", float: "a number", str: "text",
                  bool: "true or false"}.get(base, base.__name__))
  if words:
    listed = ", ".join(repr(w) for w in words)
    parts.append(listed if base is not None or len(words) == 1 else f"one of {listed}")
  if optional:
    parts.append("'none'")
  return " or ".join(parts)


_INTERVAL = re.compile(r"[(\[]\s*[-+\w.]+\s*,\s*[-+\w.]+\s*[)\]]")


def _outside_parentheses(text: str) -> Tuple[str, List[str]]:
  """``(text without its top-level parenthetical remarks, [their contents])``: a remark
  is a parenthesis after a space and before a space, a punctuation mark or the end;
  intervals (``(0, 1]``) and attached ones (``Dirichlet(alpha)``, ``(epsilon,
  delta)-DP``) stay."""
  text = _INTERVAL.sub(lambda m: m.group(0).replace("(", "\x00").replace(")", "\x01"),
                       text)
  out, inner, depth, buf, start = [], [], 0, [], 0
  for i, ch in enumerate(text):
    if ch == "(":
      depth += 1
      if depth == 1:
        buf, start = [], len(out)
        out.append(ch)
        continue
    elif ch == ")" and depth:
      depth -= 1
      if depth == 0:
        nxt = text[i + 1:i + 2]
        before = "".join(out[start - 1:start]) if start else " "
        if before.isspace() and (not nxt or not (nxt.isalnum() or nxt == "-")):
          inner.append("".join(buf))
          del out[start:]
        else:
          out.append(ch)
        continue
    if depth:
      buf.append(ch)
    out.append(ch)
  text = re.sub(r"\s{2,}", " ", "".join(out))
  text = re.sub(r"\s+([,;:.])(?=\s|$)", r"\1", text)
  restore = lambda t: t.replace("\x00", "(").replace("\x01", ")")
  return restore(text).strip(), [restore(part) for part in inner]


def summary(doc: str) -> Tuple[str, Optional[str]]:
  """``(first clause, default stated)`` of an attribute docstring: the text before its
  first top-level ``;``, without parenthetical remarks or backticks, and the
  ``(default: X; ...)`` it states (X up to the first ``;``), if any."""
  doc = doc.replace("``", "").replace("`", "")
  text, inner = _outside_parentheses(doc)
  default = None
  for part in inner:
    m = re.search(r"\bdefault:\s*([^;]*)", part)
    if m:
      default = m.group(1).strip().rstrip(",")
      break
  text = text.split("; ")[0].rstrip(" ,:;.")
  return text, default


def _fit(text: str, default: str, room: int) -> str:
  """``text [default: X]`` in at most ``room`` characters: a long default and then the
  text are cut at their last clause boundary that fits (``, `` ``: `` `` or ``), else at
  a word, with an ellipsis."""
  def cut(t: str, n: int) -> str:
    if len(t) <= n:
      return t
    depth = [0]
    for ch in t:
      depth.append(depth[-1] + (ch in "([") - (ch in ")]"))
    stops = [m.start() for m in re.finditer(r", |: | or | e\.g\. ", t)
             if 0 < m.start() <= n and depth[m.start()] == 0]
    if stops and stops[-1] >= n // 3:
      return t[:stops[-1]]
    return t[:max(n - 1, 0)].rsplit(" ", 1)[0] + "…"
  if len(default) > 24:
    default = cut(default, 24)
  tail = f" [default: {default}]" if default else ""
  return cut(text, room - len(tail)) + tail


def _default_text(default: Any, value: Any, stated: Optional[str]) -> str:
  """The default shown: ``value`` where it is not the field's ``default`` (a config
  file's), else what the docstring states, else the field's default (none for None)."""
  if value is not None and value != default:
    return str(value)
  if stated:
    return stated
  return "" if default is dataclasses.MISSING or default is None else str(default)


def option_entries(cls: type, names: Optional[List[str]] = None, *,
                   defaults: Optional[object] = None) -> List[Tuple[str, str, str]]:
  """``[(flags and metavar, text, default shown)]`` of the fields ``names`` of dataclass
  ``cls`` (all by default); ``defaults``: an instance whose values are shown as the
  defaults (a config file's)."""
  hints = typing.get_type_hints(cls, include_extras=True)
  docs = field_docs(cls)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  entries = []
  for name in names if names is not None else list(fields):
    if name in HIDDEN or name not in fields:
      continue
    f, hint = fields[name], hints[name]
    flag = "--" + name.replace("_", "-")
    aliases = [a for m in typing.get_args(hint)[1:] if typing.get_origin(hint) is
               typing.Annotated for a in (getattr(m, "aliases", None) or ())]
    text, stated = summary(docs.get(name, ""))
    value = getattr(defaults, name, f.default) if defaults is not None else f.default
    shown = ""
    if _parts(hint)[0] is bool:
      if value and not name.startswith("no_"):
        flag = f"--no-{name.replace('_', '-')}"
        text = "do not " + text if text else text
      left = f"  {flag}"
    else:
      left = f"  {', '.join(aliases + [flag])} {metavar(name, hint)}"
      shown = _default_text(f.default, value, stated)
    entries.append((left, text, shown))
  return entries


def option_lines(entries: List[Tuple[str, str, str]], col: int, width: int,
                 wrap: Tuple[str, ...] = ()) -> List[str]:
  """The help lines of `option_entries`: the flags, the text from column ``col`` (on
  the next line for long flags), one line each (``wrap``: flags whose text may wrap)."""
  lines = []
  for left, text, shown in entries:
    room = max(width - col, 30)
    if left.split()[0].rstrip(",") in wrap:
      body = textwrap.wrap(text + (f" [default: {shown}]" if shown else ""), room) or [""]
    else:
      body = [_fit(text, shown, room)]
    if len(left) + _GAP > col:
      lines.append(left)
      lines.extend(" " * col + b for b in body)
    else:
      lines.append(left.ljust(col) + body[0])
      lines.extend(" " * col + b for b in body[1:])
  return lines


def run_help(plugin, algorithm_names, *, sweep: bool = False,
             defaults: Optional[object] = None) -> str:
  """``fedjax-dp run --help`` for ``plugin`` (a `FederatedAlgorithm`); ``sweep``: the
  option groups only (``fedjax-dp sweep --help`` puts its own header first);
  ``defaults``: the `RunConfig` whose values are shown (a config file's)."""
  from fedjax_dp.cli import CommandLineOptions, DistributedOptions
  from fedjax_dp.runs.config import RunConfig
  width = min(shutil.get_terminal_size((100, 24)).columns, 120)
  out: List[str] = []
  if not sweep:
    out += [
        "usage: fedjax-dp run [OPTIONS]",
        "",
        *textwrap.wrap(
            "Train a federated model with differential privacy and report its test "
            "accuracy and the (epsilon, delta) spent; with no options, user-level "
            "DP-FedAvg on HAR (30 natural clients). The documentation's command-line "
            "reference (docs/how-to/configuration.md) describes every option in full.",
            width),
        "",
        "  -h, --help  this help; with --algorithm NAME, that algorithm's options",
    ]
  classes = {name: cls for cls in (RunConfig, CommandLineOptions, DistributedOptions)
             for name in (f.name for f in dataclasses.fields(cls))}
  inst: Dict[type, Optional[object]] = {RunConfig: defaults}
  groups: List[Tuple[str, List[Tuple[str, str, str]]]] = []
  listed: set = set(HIDDEN)

  def group(title: str, names: List[str]) -> None:
    entries = []
    for cls in (RunConfig, CommandLineOptions, DistributedOptions):
      own = [n for n in names if classes.get(n) is cls]
      entries += option_entries(cls, own, defaults=inst.get(cls)) if own else []
    listed.update(names)
    if entries:
      groups.append((title, entries))

  for i, (title, names) in enumerate(GROUPS):
    group(title, list(names))
    if i == 1:  # the algorithm's own options after the data and the model
      opts = option_entries(plugin.Options, defaults=getattr(defaults, "options", None))
      if opts:
        groups.append((f"{plugin.name} options", opts))
  group("other options", [n for n in classes if n not in listed])
  for title, entries in groups:  # the algorithm: its choices
    for j, (left, text, shown) in enumerate(entries):
      if left.split()[0] == "--algorithm":
        entries[j] = ("  --algorithm NAME", ", ".join(algorithm_names), shown)
  col = min(max(len(left) for _, entries in groups for left, _, _ in entries) + _GAP, 30)
  for title, entries in groups:
    out.extend(["", f"{title}:",
                *option_lines(entries, col, width, wrap=WRAPPED)])
  return "\n".join(out) + "\n"


class CommandLineError(Exception):
  """A command line tyro refused (the message is one line)."""


def checked_values(argv: List[str], flags: Dict[str, List[str]],
                   hints: Dict[str, object]) -> List[str]:
  """``argv`` with each typed option's value checked against its field's type (before
  tyro, whose type-union messages are not for users); ``none``/``null`` of an optional
  option become tyro's ``None``.

  Raises:
    CommandLineError: one line naming the flag, what it takes and the value given.
  """
  by_flag = {f: name for name, fl in flags.items() for f in fl}
  out, i = list(argv), 0
  while i < len(out):
    flag, eq, value = out[i].partition("=")
    name = by_flag.get(flag) if flag.startswith("--") else None
    if name is None or name not in hints:
      i += 1
      continue
    base, words, optional = _parts(hints[name])
    if base is bool or (flag == "--no-" + name.replace("_", "-")):
      i += 1  # a switch (tyro refuses a value, and --no-X of a non-switch)
      continue
    at = i if eq else i + 1
    if not eq and at >= len(out):
      raise CommandLineError(f"argument {flag}: expected {expected(hints[name])}, got "
                              "nothing")
    if not eq:
      value = out[at]
    ok = False
    if optional and value.lower() in ("none", "null"):
      value, ok = "None", True
    elif value in [str(w) for w in words]:
      ok = True
    elif base is int:
      try:
        int(value)
        ok = True
      except ValueError:
        pass
    elif base is float:
      try:
        float(value)
        ok = True
      except ValueError:
        pass
    elif base is str:
      ok = True
    if not ok:
      if base is None:  # choices only
        close = difflib.get_close_matches(value, [str(w) for w in words], n=1)
        raise CommandLineError(
            f"argument {flag}: invalid choice {value!r}; expected one of "
            f"{', '.join(str(w) for w in words)}" + (" or none" if optional else "")
            + (f" (did you mean {close[0]}?)" if close else ""))
      raise CommandLineError(f"argument {flag}: expected {expected(hints[name])}, got "
                              f"{value!r}")
    out[at] = f"{flag}={value}" if eq else value
    i = at + 1
  return out
