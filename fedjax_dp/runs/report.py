"""What ``fedjax-dp run`` prints at the end of a run: its time and accuracy, the
guarantee and what the server observes, the algorithm's own lines (its plug-in's
``describe``), notes, warnings, outputs and interruption, all read from summary.json."""

from __future__ import annotations

import math
import signal
from typing import Any, Dict

__all__ = ["print_summary", "print_result", "print_privacy", "privacy_line", "zcdp_line",
           "privacy_detail", "print_outputs", "output_files", "OUTPUT_FILES",
           "print_divergence", "eps_text"]


def print_summary(s: Dict[str, Any]) -> int:
  """Prints the end of a run from its summary.json ``s``; returns the exit status (0,
  128 + the signal number of an interrupted run, or 3 when it diverged and was stopped:
  `fedjax_dp.runs.divergence`)."""
  print_result(s)
  print_privacy(s)
  return print_outputs(s)


def eps_text(value: float) -> str:
  """An epsilon for the terminal: 3 decimals, or 3 significant digits when below 0.1
  (a target of 0.001 must not print as 0.000), or 4 when huge."""
  if 0 < value < 0.1:
    return f"{value:.3g}"
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


#: How the main privacy line names a relation (summary.json ``relation``), per unit.
_RELATION_WORDS = {"add_remove": "add/remove one", "replace_one": "replace one"}
_SAMPLER_WORDS = {"poisson": "Poisson sampling", "fixed_size": "fixed-size cohorts",
                  "balls_in_bins": "balls-in-bins participation",
                  "random_allocation": "random allocation",
                  "cyclic_poisson": "cyclic Poisson sampling"}


def _monte_carlo(s: Dict[str, Any]) -> bool:
  """Whether summary ``s``'s epsilon comes from the Monte Carlo accountant (both
  accountant names then report its number)."""
  return str(s.get("accounting_method") or "").startswith("monte_carlo")


def _g(value: float) -> str:
  """A delta or probability, short: ``1e-3``, ``2.5e-5``, ``0.05``."""
  if value == 0 or abs(value) >= 0.01:
    return f"{value:.3g}"
  mant, exp = f"{value:.2e}".split("e")
  return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


def privacy_line(s: Dict[str, Any]) -> str:
  """The main privacy line of a private run's summary.json ``s`` (at most about 110
  characters), e.g. ``(epsilon = 3.115, delta = 1e-3)-DP, user-level, add/remove one
  client, Poisson sampling; accountant: RDP``. Its delta is the guarantee's
  (``delta_total``: the accountant's plus any truncation probability, `privacy_detail`)."""
  eps = s["epsilon"]
  eps_txt = eps_text(eps) if eps is not None and math.isfinite(eps) else "inf"
  delta = s["delta_total"] if s.get("delta_total") is not None else s["delta"]
  unit = s["privacy_unit"]
  noun = "client" if unit == "user-level" else "record"
  relation = _RELATION_WORDS.get(s.get("relation") or "")
  parts = [f"(epsilon = {eps_txt}, delta = {_g(delta)})-DP", unit]
  if relation:
    parts.append(f"{relation} {noun}")
  if _SAMPLER_WORDS.get(s.get("sampler") or ""):
    parts.append(_SAMPLER_WORDS[s["sampler"]])
  if _monte_carlo(s):
    return (f"{', '.join(parts)}; accountant: Monte Carlo (holds with probability >= "
            f"{s.get('mc_confidence', float('nan')):g})")
  return f"{', '.join(parts)}; accountant: {str(s['accountant']).upper()}"


def privacy_detail(s: Dict[str, Any]) -> str:
  """The second privacy line: both accountants' epsilons, the delta split (when
  truncation adds to it), the noise multiplier, clip norm and sampling rate."""
  pld = "n/a" if s["epsilon_pld"] is None else eps_text(s["epsilon_pld"])
  rdp = "n/a" if s["epsilon_rdp"] is None else eps_text(s["epsilon_rdp"])
  out = ([f"Monte Carlo {rdp} (an upper confidence bound from {s.get('mc_samples')} "
          "draws per direction; no RDP or PLD curve exists for this sampler)"]
         if _monte_carlo(s) else [f"RDP {rdp}, PLD {pld}"])
  if s.get("delta_total") not in (None, s["delta"]):
    out.append(f"delta {_g(s['delta_total'])} = {_g(s['delta'])} (accountant) + "
               f"{_g(s['delta_total'] - s['delta'])} (cohort truncation)")
  if s["noise_multiplier"] is not None:
    out.append(f"noise multiplier {s['noise_multiplier']:.4g}")
  if s["clip_norm"] is not None:
    out.append(f"clip norm {s['clip_norm']:g}")
  out.append(f"sampling rate {s['sampling_rate']:.4g}")
  return ", ".join(out)


def zcdp_line(s: Dict[str, Any]) -> str:
  """The zCDP line of summary.json ``s`` (`fedjax_dp.privacy.zcdp`), e.g. ``zCDP: rho =
  0.05 (exact), i.e. epsilon <= 1.42 at delta 1e-3 from rho alone``; with sampling
  ``(upper bound: amplification by sampling ignored)``; ``""`` where no rho is stated
  (a summary without the fields, or an event without Gaussian structure)."""
  rho = s.get("rho_zcdp")
  if rho is None:
    return ""
  kind = ("exact" if s.get("rho_zcdp_exact") else
          "upper bound: amplification by sampling ignored")
  return (f"zCDP: rho = {rho:.4g} ({kind}), i.e. epsilon <= "
          f"{eps_text(s['epsilon_from_rho'])} at delta {_g(s['delta'])} from rho alone "
          "(Bun & Steinke 2016, Prop. 1.3)")


def print_privacy(s: Dict[str, Any]) -> None:
  """The guarantee (`privacy_line`, `privacy_detail`), what the server observes, and
  the algorithm's own lines; the full statement is summary.json's ``guarantee``."""
  if s["neighboring_relation"] is None:
    print("  privacy: no guarantee is claimed (non-private"
          + (" baseline, no noise" if s["noise_multiplier"] is None else "")
          + "; epsilon = inf)")
  else:
    print(f"  privacy: {privacy_line(s)}")
    print(f"    accounting: {privacy_detail(s)}")
    if zcdp_line(s):
      print(f"    {zcdp_line(s)}")
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
  from fedjax_dp.runs.canary_report import describe as canary_lines
  for line in canary_lines(s):
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
    print(f"  outputs: {output_files(out)}")
  stop = s.get("interrupted")
  if stop:
    print(f"  interrupted ({stop['signal']}) after {stop['rounds_done']} of "
          f"{stop['rounds_planned']} rounds: the summary is of the rounds in the newest "
          "checkpoint" + (f"; continue with: {stop['resume']}" if stop["resume"] else ""))
    return 128 + getattr(signal, stop["signal"])
  return print_divergence(s)


#: What a run may write into its folder, in the order `output_files` names them.
OUTPUT_FILES = ("metrics.jsonl", "summary.json", "curves.png", "partition.png", "canaries.png",
                "tensorboard/", "mlruns/", "checkpoints/")


def output_files(out: str) -> str:
  """The outputs line: the files of `OUTPUT_FILES` that the run in ``out`` actually
  wrote (e.g. no tensorboard/ with ``--logger none``), and how to resume it."""
  import os
  there = [f for f in OUTPUT_FILES if os.path.exists(os.path.join(out, f.rstrip("/")))]
  if not there:
    return f"{out} (nothing written)"
  text = f"{out}/{there[0]}" + "".join(f", {f}" for f in there[1:])
  if "checkpoints/" in there:
    text += f" (resume a killed run with --resume {out})"
  return text


def print_divergence(s: Dict[str, Any]) -> int:
  """The divergence line of summary.json ``s`` (`fedjax_dp.runs.divergence`); the exit
  status: `EXIT_DIVERGED` (3) when the run was stopped by it, else 0."""
  from fedjax_dp.runs.divergence import EXIT_DIVERGED
  div = s.get("diverged")
  if not div:
    return 0
  if div["stopped"]:
    print(f"  DIVERGED (exit status {EXIT_DIVERGED}): {div['message']}")
    return EXIT_DIVERGED
  print(f"  warning: {div['message']}")
  return 0
