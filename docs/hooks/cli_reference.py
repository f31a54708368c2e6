"""MkDocs hook: the command-line reference (docs/how-to/configuration.md), generated
from the code when the site is built, so it cannot fall behind the options.

The page holds three markers, each replaced here:

* ``<!-- cli-reference:run-help -->``: ``fedjax-dp run --help`` for the default
  algorithm, exactly as `fedjax_dp.cli_help.run_help` prints it (100 columns);
* ``<!-- cli-reference:run-options -->``: every option of ``fedjax-dp run`` that is
  not an algorithm's, in the help's groups, with its default and its full attribute
  docstring (the help prints only the first clause);
* ``<!-- cli-reference:algorithm-options -->``: each registered algorithm's own
  options (``fedjax-dp run --algorithm NAME --help``), an option already listed for an
  earlier algorithm with the same text and default named only.

Why a build-time hook rather than a committed, generated page: rendering imports every
algorithm's plug-in (and so JAX), which takes about 3 s on a 2-core CPU machine, well
within a docs build; a committed copy would need a script and a test to keep it in
sync. A marker left unreplaced, or a generated text with an internal reference, is a
warning (an error under ``--strict``).
"""

import logging
import os
import re

log = logging.getLogger("mkdocs.hooks.cli_reference")

PAGE = "how-to/configuration.md"
MARKERS = ("run-help", "run-options", "algorithm-options")
_MARKER = "<!-- cli-reference:{} -->"
COLUMNS = "100"
# References a reader cannot follow (as tests/test_docs.py checks in the pages).
_INTERNAL_REF = re.compile(r"\b(issue|note) [A-Z]?\d+\b|\bpaper 00\d", re.IGNORECASE)


def _markdown_text(text):
  """A docstring as Markdown: RST double backticks become code spans; outside code
  spans, characters Markdown would read as markup (``<out>``, ``q*N``) are escaped."""
  text = " ".join(text.replace("``", "`").split())
  parts = text.split("`")
  for i in range(0, len(parts), 2):  # even parts lie outside code spans
    p = parts[i].replace("\\", "\\\\").replace("&", "&amp;")
    p = p.replace("<", "&lt;").replace(">", "&gt;")
    parts[i] = re.sub(r"([*_\[\]])", r"\\\1", p)
  if len(parts) % 2 == 0:  # an unmatched backtick: leave it literal
    parts[-2] += "\\`" + parts.pop()
  return "`".join(parts)


def _entries(cls, names=None):
  """``[(flags, default shown, full docstring)]`` of dataclass ``cls``'s options."""
  import dataclasses
  from fedjax_dp import cli_help
  docs = cli_help.field_docs(cls)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  wanted = [n for n in (names if names is not None else fields) if n in fields and
            n not in cli_help.HIDDEN]
  out = []
  for name, (left, _, shown) in zip(wanted, cli_help.option_entries(cls, wanted)):
    flag = "--algorithm NAME" if name == "algorithm" else left.strip()
    doc = docs.get(name, "")
    if fields[name].default is True:  # a switch on by default: --no-NAME turns it off
      flag = f"--{name.replace('_', '-')}, {flag}"
      shown = "on"
    out.append((flag, shown, doc))
  return out


def _definitions(entries, algorithm_names=None):
  lines = []
  for flag, shown, doc in entries:
    if algorithm_names is not None and flag.split()[0] == "--algorithm":
      doc = (doc + "; one of " if doc else "one of ") + ", ".join(
          f"`{n}`" for n in algorithm_names)
    # A value (0.5, runs/latest) as code; a default decided at run time in words.
    default = (f" (default: `{shown}`)" if shown and " " not in shown else
               f" (default: {_markdown_text(shown)})" if shown else "")
    lines += [f"`{flag}`{default}", f":   {_markdown_text(doc) or 'see --help'}", ""]
  return lines


def _run_help():
  from fedjax_dp import cli_help
  from fedjax_dp.algorithms import registry
  before = os.environ.get("COLUMNS")
  os.environ["COLUMNS"] = COLUMNS  # shutil.get_terminal_size reads it: a stable width
  try:
    text = cli_help.run_help(registry.get(registry.DEFAULT), registry.names())
  finally:
    if before is None:
      del os.environ["COLUMNS"]
    else:
      os.environ["COLUMNS"] = before
  return ["```text", "$ fedjax-dp run --help", *text.rstrip("\n").split("\n"), "```"]


def _run_options():
  import dataclasses
  from fedjax_dp import cli_help
  from fedjax_dp.algorithms import registry
  from fedjax_dp.cli import CommandLineOptions, DistributedOptions
  from fedjax_dp.runs.config import RunConfig
  classes = (RunConfig, CommandLineOptions, DistributedOptions)
  owner = {f.name: cls for cls in classes for f in dataclasses.fields(cls)}
  listed = set(cli_help.HIDDEN) | {"options"}
  lines = []
  groups = list(cli_help.GROUPS)
  groups.append(("other options", tuple(n for n in owner if n not in
                                         {m for _, g in groups for m in g} | listed)))
  for title, names in groups:
    entries = []
    for cls in classes:
      own = [n for n in names if owner.get(n) is cls]
      entries += _entries(cls, own) if own else []
    if entries:
      lines += [f"### {title[0].upper()}{title[1:]}", ""]
      lines += _definitions(entries, registry.names())
  return lines


def _algorithm_options():
  from fedjax_dp.algorithms import registry
  seen = {}  # (flag, default, doc) -> the algorithm that listed it first
  lines = []
  for name in registry.names():
    plugin = registry.get(name)
    entries = _entries(plugin.Options)
    new = [e for e in entries if e not in seen]
    again = {}
    for e in entries:
      if e in seen:
        again.setdefault(seen[e], []).append(e[0].split(",")[0].split()[0])
    lines += [f"### {name}", "", _markdown_text(plugin.description) + ".", "",
              f"`fedjax-dp run --algorithm {name} --help` lists these options.", ""]
    lines += _definitions(new)
    for first, flags in again.items():
      lines += [f"As for [{first}](#{first}): " + ", ".join(f"`{f}`" for f in flags)
                + ".", ""]
    for e in new:
      seen[e] = name
  return lines


_RENDER = {"run-help": _run_help, "run-options": _run_options,
           "algorithm-options": _algorithm_options}


def on_page_markdown(markdown, page, config, files):  # pylint: disable=unused-argument
  if page.file.src_path.replace(os.sep, "/") != PAGE:
    return markdown
  for key in MARKERS:
    marker = _MARKER.format(key)
    if marker not in markdown:
      log.warning("%s: marker %s is missing", PAGE, marker)
      continue
    text = "\n".join(_RENDER[key]())
    for m in _INTERNAL_REF.finditer(text):
      log.warning("%s: the generated %s holds an internal reference %r (fix the "
                  "docstring or description it comes from)", PAGE, key, m.group(0))
    markdown = markdown.replace(marker, text)
  return markdown
