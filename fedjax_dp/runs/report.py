"""What ``fedjax-dp run`` prints at the end of a run: its time and accuracy, the
guarantee and what the server observes, the algorithm's own lines (its plug-in's
``describe``), notes, warnings, outputs and interruption, all read from summary.json."""

from __future__ import annotations

import math
import signal
from typing import Any, Dict

__all__ = ["print_summary", "print_result", "print_privacy", "print_outputs", "eps_text"]


def print_summary(s: Dict[str, Any]) -> int:
  """Prints the end of a run from its summary.json ``s``; returns the exit status (0,
  or 128 + the signal number of an interrupted run)."""
  print_result(s)
  print_privacy(s)
  return print_outputs(s)


def eps_text(value: float) -> str:
  """An epsilon for the terminal: 3 decimals, or 4 significant digits when huge."""
  return f"{value:.3f}" if value < 1e4 else f"{value:.4g}"


def print_result(s: Dict[str, Any]) -> None:
  """The run's time and final accuracy (summary.json ``s``)."""
  steady = s.get("steady_time_per_round_s")
  steady_txt = f", {steady * 1e3:.0f} ms/round after compilation" if steady else ""
  per_round = (f" ({s['time_per_round_s'] * 1e3:.0f} ms/round including compilation"
               f"{steady_txt})" if s["time_per_round_s"] else "")
  print(f"\n{s['algorithm']} on {s['dataset']}: {s['rounds']} rounds in "
        f"{s['wall_time_s']:.1f} s{per_round}")
  print(f"  final test accuracy {s['final_test_accuracy']:.4f} (majority-class baseline "
        f"{s['majority_class_accuracy']:.4f}), test loss {s['final_test_loss']:.4f}")


def print_privacy(s: Dict[str, Any]) -> None:
  """The guarantee, what the server observes, and the algorithm's own lines."""
  eps = s["epsilon"]
  eps_txt = (eps_text(eps) if math.isfinite(eps) else "inf (non-private)"
             if s["neighboring_relation"] is None else "inf (no finite guarantee)")
  if s["neighboring_relation"] is None:
    print("  privacy: no guarantee is claimed (epsilon = inf)"
          + (" : non-private baseline, no noise" if s["noise_multiplier"] is None
             else ""))
  else:
    pld = "n/a" if s["epsilon_pld"] is None else eps_text(s["epsilon_pld"])
    delta_txt = (f"{s['delta']:g}" if s["delta_total"] in (None, s["delta"]) else
                 f"{s['delta_total']:.4g} = {s['delta']:g} + truncation")
    z_txt = ("" if s["noise_multiplier"] is None else
             f"; noise multiplier {s['noise_multiplier']:.4g}")
    clip_txt = ("" if s["clip_norm"] is None else
                f", clip norm {s['clip_norm']:g} on {s['clipped']}")
    print(f"  privacy: ({eps_txt}, {delta_txt})-DP, {s['privacy_unit']}, neighbouring "
          f"relation: {s['neighboring_relation']}; accountant {s['accountant']} "
          f"(RDP {eps_text(s['epsilon_rdp'])}, PLD {pld}){z_txt}{clip_txt}, sampling rate "
          f"{s['sampling_rate']:.4g}")
    if s.get("observed_by_server"):
      print(f"  the server observes {s['observed_by_server']}")
    if s.get("per_client_epsilon_rdp") is not None:
      print(f"  per-client accounting: the worst client is {s['worst_client']} (epsilon "
            f"above); every client's epsilon is in summary.json")
    if s.get("epsilon_conditional_rdp") is not None:
      print(f"  conditional (not a guarantee): epsilon {s['epsilon_conditional_rdp']:.3f} "
            f"if the paper's sensitivity {s['sensitivity_paper']:.4g} held; the guarantee "
            f"above uses {s['sensitivity']:.4g}, what the code enforces")
  from fedjax_dp.algorithms import registry
  for line in registry.get(s["algorithm"]).describe(s):
    print(f"  {line}")


def print_outputs(s: Dict[str, Any]) -> int:
  """The budget guard, notes, warnings, outputs and interruption; the exit status."""
  guard = s.get("budget_guard")
  if guard and guard["stopped_early"]:
    print(f"  budget guard: stopped after {guard['rounds_run']} of {guard['rounds_planned']} "
          f"rounds: one more round would take epsilon (RDP) past the target "
          f"{guard['target_epsilon']:g}; a checkpoint of the last round is saved")
  if s.get("privacy_note"):
    print(f"  note: {s['privacy_note']}")
  for warning in s.get("accounting_warnings") or ():  # said once, only when it matters
    print(f"  accounting: {warning}")
  out = s["config"]["out"]  # on --resume, the resumed run's folder
  if out:
    print(f"  outputs: {out}/metrics.jsonl, summary.json, curves.png, partition.png, "
          f"tensorboard/ (with --logger tensorboard), checkpoints/ (resume a killed run "
          f"with --resume {out})")
  stop = s.get("interrupted")
  if stop:
    print(f"  interrupted ({stop['signal']}) after {stop['rounds_done']} of "
          f"{stop['rounds_planned']} rounds: the summary is of the rounds in the newest "
          "checkpoint" + (f"; continue with: {stop['resume']}" if stop["resume"] else ""))
    return 128 + getattr(signal, stop["signal"])
  return 0
