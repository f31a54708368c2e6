"""The host side of ``fedjax-dp sweep --select best-of`` (`fedjax_dp.runs.sweep_select`
states the mechanism and its accounting): the refusals, the trials drawn from the grid,
the privacy of every grid configuration, the score's check before training, and what is
published at the end (the chosen trial only, unless ``--keep-trials``).
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from fedjax_dp.runs.config import RunConfig
from fedjax_dp.runs.sweep_axes import configurations, member_name
from fedjax_dp.runs.sweep_select import (Selection, check_metric, draw_trials,
                                         member_curve, planned_privacy, selection_summary)
from fedjax_dp.validation import FedJaxDpError

__all__ = ["check_best_of", "draw", "grid_privacy", "check_score", "finish",
           "remove_unchosen", "nothing_selected"]

#: Trackers that publish every trial's metrics outside the sweep's folder.
_REMOTE_TRACKERS = ("wandb", "mlflow")


def check_best_of(base: RunConfig, axes: Optional[Mapping[str, Sequence[Any]]],
                  seeds: Optional[Sequence[int]]) -> None:
  """Refuses what contradicts a best-of selection, before anything is loaded.

  Raises:
    FedJaxDpError: ``resume`` (a selection is one mechanism: an interrupted one is run
      again), several ``seeds`` (each trial gets ``seed + i``), a ``delta`` axis (the
      selection is stated at one delta), or a remote tracker (W&B, MLflow publish every
      trial); naming the option.
  """
  from fedjax_dp.runs.writers import parse_logger_spec
  if base.resume is not None:
    raise FedJaxDpError("resume: a best-of selection cannot be resumed (its trials and "
                        "their number are one mechanism); run it again.", option="resume")
  if seeds is not None and len(list(seeds)) > 1:
    raise FedJaxDpError("seeds: --select best-of gives trial i the root seed --seed + i; "
                        "give one --seed, not --seeds.", option="seeds")
  if axes and any(str(a).replace("-", "_") == "delta" for a in axes):
    raise FedJaxDpError("delta cannot be an axis of --select best-of: the selection's "
                        "epsilon is stated at one delta.", option="delta")
  remote = [n for n in parse_logger_spec(base.logger) if n in _REMOTE_TRACKERS]
  if remote:
    raise FedJaxDpError(f"logger {remote[0]} would publish every trial's metrics, which "
                        "the selection's epsilon does not cover; use --logger none or "
                        "tensorboard with --select best-of.", option="logger")


def draw(plan: Any, sel: Selection) -> Dict[str, Any]:
  """The trials: ``{"grid": [names], "grid_configs": [RunConfig], "k", "indices",
  "trials": [(name, axes, RunConfig)]}``; trial i is grid configuration
  ``indices[i]`` with root seed ``plan.base.seed + i`` (folder ``trial=i,<axes>``).

  Raises:
    FedJaxDpError: a seed past 2**32 - 1, or a configuration that does not validate.
  """
  grid = configurations(plan.base, plan.axes, [plan.base.seed], plan.data_seed)
  names = [member_name({a: p[a] for a in plan.axes}) or "base" for p, _ in grid]
  k, indices = draw_trials(sel, len(grid))
  if plan.base.seed + k - 1 > 2**32 - 1:
    raise FedJaxDpError(f"seed: trial {k - 1} would have root seed "
                        f"{plan.base.seed + k - 1} > 2**32 - 1; lower --seed.",
                        option="seed")
  trials = []
  for i, j in enumerate(indices):
    one = {a: [grid[j][0][a]] for a in plan.axes}
    p, cfg = configurations(plan.base, one, [plan.base.seed + i], plan.data_seed)[0]
    trials.append((f"trial={i}," + member_name(p), p, cfg))
  return {"grid": names, "grid_configs": [c for _, c in grid], "k": k,
          "indices": indices, "trials": trials}


def grid_privacy(plan: Any, drawn: Dict[str, Any], members: Sequence[Any],
                 build_grid) -> List[Any]:
  """Per grid configuration ``(orders, RDP [A], event)`` of its planned rounds (the
  trials' own built algorithm where drawn, else ``build_grid(cfg) -> (alg, z)``); None
  for a non-private one.

  Raises:
    FedJaxDpError: grid configurations accounted at different RDP orders.
  """
  out: List[Any] = []
  for j, cfg in enumerate(drawn["grid_configs"]):
    mine = [m for m, i in zip(members, drawn["indices"]) if i == j]
    alg, z = (mine[0].alg, mine[0].z) if mine else build_grid(cfg)
    out.append(planned_privacy(alg, z, int(mine[0].planned if mine else cfg.rounds),
                               plan.base.delta))
  orders = {g[0] for g in out if g is not None}
  if len(orders) > 1:
    raise FedJaxDpError("the grid's configurations are accounted at different RDP "
                        "orders; a selection needs one set.", option="select")
  drawn["trial_specs"] = [m.alg.privacy for m in members]
  return out


def _with_realised(drawn: Dict[str, Any], infos: Sequence[Any]) -> List[Any]:
  """The grid's planned privacy raised, per order, to every finished trial's own
  ledger's RDP (a trial never composes more than planned, so this changes nothing
  unless a ledger disagrees with its plan; then that configuration's event is dropped
  and the selection uses the per-order maximum)."""
  grid = list(drawn["privacy"])
  for info, j, spec in zip(infos, drawn["indices"], drawn["trial_specs"]):
    got = member_curve(info.ledger, spec)
    if got is None or grid[j] is None or got[0] != grid[j][0]:
      continue
    orders, planned, event = grid[j]
    if np.any(got[1] > planned):
      grid[j] = (orders, np.maximum(planned, got[1]), None)
  return grid


def check_score(sel: Selection, member: Any) -> None:
  """Checks the score before training, from the first member's data and evaluation:
  the fields ``final_test_<name>`` the run will have, labelled as its summary will be
  (`fedjax_dp.privacy.disclosure.summary_labels_for_run`).

  Raises:
    FedJaxDpError: as `fedjax_dp.runs.sweep_select.check_metric`.
  """
  from fedjax_dp.privacy import disclosure
  data = member.setup.data
  client_test = data.test_x is None or data.client_test_x is not None
  finals = [f"final_test_{k}" for k in member.device_evaluator.names]
  labels = disclosure.summary_labels_for_run(
      client_test, member.cfg.plugin.summary_labels,
      [f for f in finals if f not in ("final_test_loss", "final_test_accuracy")])
  check_metric(sel.metric, labels, finals)


def _trial_rows(sel: Selection, infos: Sequence[Any]) -> List[Dict[str, Any]]:
  rows = []
  for m in infos:
    table = m.summary.get("summary_disclosure") or {}
    kind = table.get(sel.metric, {}).get("kind", "diagnostic")
    score = m.summary.get(sel.metric)
    rows.append({"name": m.name, "epsilon": m.summary.get("epsilon"),
                 "epsilon_rdp": m.summary.get("epsilon_rdp"), "kind": kind,
                 "why": table.get(sel.metric, {}).get("why", "unlabelled"),
                 "score": None if kind == "diagnostic" or score is None
                 or not math.isfinite(float(score)) else float(score)})
  return rows


def finish(result: Any, sel: Selection, drawn: Dict[str, Any], delta: float
           ) -> Dict[str, Any]:
  """The selection (`fedjax_dp.runs.sweep_select.selection_summary`) of the finished
  trials in ``result`` (a `fedjax_dp.runs.sweep.SweepResult`); unless ``keep_trials``,
  ``result.members`` and ``result.rows`` are then the chosen trial's only and the
  others' scores are dropped from the selection (they are outputs of those trials;
  `remove_unchosen` removes their folders once their files are closed). An
  interrupted sweep selects nothing and keeps every trial."""
  from fedjax_dp.runs.sweep_report import comparison_rows
  if result.interrupted is not None:
    return {**sel.to_dict(), "repetitions": drawn["k"], "chosen": None, "trials": [],
            "note": "interrupted: nothing was selected; the trials' folders are K "
                    "separate releases, not covered by a selection's epsilon"}
  trials = _trial_rows(sel, result.members)
  summary = selection_summary(sel, drawn["k"], drawn["indices"], drawn["grid"],
                              _with_realised(drawn, result.members), trials, delta)
  if sel.keep_trials or summary["chosen"] is None:
    return summary
  for t in summary["trials"]:
    if t["name"] != summary["chosen"]:
      t["score"] = None
  summary["note"] = ("only the chosen trial is published: the others' folders are "
                     "removed and their scores are not shown (they are outputs of those "
                     "trials)")
  result.members = [m for m in result.members if m.name == summary["chosen"]]
  result.rows = comparison_rows(result.members, list(result.axes))
  return summary


def remove_unchosen(result: Any) -> Any:
  """Removes the folders of the trials a selection did not choose (nothing without a
  selection, with ``keep_trials``, when interrupted or when nothing was written);
  returns ``result``."""
  sel = result.selection
  if not sel or sel.get("keep_trials") or sel.get("chosen") is None or not result.out:
    return result
  for t in sel.get("trials", ()):
    folder = os.path.join(result.out, t["name"])
    if t["name"] != sel["chosen"] and os.path.isdir(folder):
      shutil.rmtree(folder)
  return result


def nothing_selected(sel: Selection, drawn: Dict[str, Any]) -> Dict[str, Any]:
  """The selection when K = 0: nothing is trained or output."""
  return {**sel.to_dict(), "dp_accounting_shape": sel.dp_shape, "repetitions": 0,
          "grid": drawn["grid"], "drawn": [], "trials": [], "chosen": None,
          "epsilon_selection_rdp": None,
          "note": "K = 0 trials were drawn: the selection outputs nothing (no "
                  "configuration, no model)"}
