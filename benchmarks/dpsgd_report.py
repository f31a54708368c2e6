"""The Markdown of section "dpsgd" of `benchmarks.run` (record-level DP-SGD) and the
speed-up ratios behind its targets."""

from __future__ import annotations

from typing import Dict, List

from benchmarks import workloads

# Section "dpsgd": fedjax_dp's per-example gradients/s over the best correct variant of
# each peer (federated workloads and microbenchmark), and per-example local training
# against the same-run dense-matmul rate.
DPSGD_TARGETS = {"opacus": 5.0, "jax-privacy": 1.0}
DPSGD_MATMUL_TARGET = 0.40

def _best_rate(rows, ok_key):
  good = [r for r in rows if r.get(ok_key)]
  return max(good, key=lambda r: r["per_example_grads_per_s"]) if good else None


def dpsgd_ratios(section: dict) -> Dict[str, Dict[str, Dict[str, float]]]:
  """fedjax_dp's per-example gradients/s over each peer's best VALID variant.

  ``federated``: ``{workload: {peer: ratio}}``, over records whose loss check passed
  (`common.losses_ok`); ``micro``: ``{"<model> B=<B>": {peer: ratio}}``, fedjax_dp's
  ``auto`` method over each peer's fastest method whose clipped sum matched the
  reference (``correct``). A peer with no valid variant gets no ratio.
  """
  out = {"federated": {}, "micro": {}}
  fed = section.get("federated", [])
  for wname in dict.fromkeys(r["workload"] for r in fed):
    rows = [r for r in fed if r["workload"] == wname]
    ours = _best_rate([r for r in rows if r["framework"] == "fedjax_dp"], "loss_ok")
    if not ours:
      continue
    for peer in dict.fromkeys(r["framework"] for r in rows if r["framework"] != "fedjax_dp"):
      best = _best_rate([r for r in rows if r["framework"] == peer], "loss_ok")
      if best:
        out["federated"].setdefault(wname, {})[peer] = (
            ours["per_example_grads_per_s"] / best["per_example_grads_per_s"])
  lines = [dict(res, framework=rec["framework"]) for rec in section.get("micro", [])
           for res in rec["results"]]
  for key in dict.fromkeys((r["model"], r["batch_size"]) for r in lines):
    rows = [r for r in lines if (r["model"], r["batch_size"]) == key]
    ours = _best_rate([r for r in rows if r["framework"] == "fedjax_dp"
                       and r["method"].startswith("auto")], "correct")
    if not ours:
      continue
    for peer in dict.fromkeys(r["framework"] for r in rows if r["framework"] != "fedjax_dp"):
      best = _best_rate([r for r in rows if r["framework"] == peer], "correct")
      if best:
        out["micro"].setdefault(f"{key[0]} B={key[1]}", {})[peer] = (
            ours["per_example_grads_per_s"] / best["per_example_grads_per_s"])
  return out


def _target_line(label: str, value: float, goal: float, unit: str = "x") -> str:
  ok = value >= goal
  if unit == "%":
    return (f"- {label}: >= {100 * goal:.0f}% of the dense matmul: "
            f"{'MET' if ok else 'MISSED'} ({100 * value:.0f}%, ratio "
            f"{value / goal:.2f} of the target).")
  return (f"- {label}: >= {goal:g}x: {'MET' if ok else 'MISSED'} ({value:.2f}x, ratio "
          f"{value / goal:.2f} of the target).")


def _matmul_refs(fed, micro):
  """Same-process references: a fedjax_dp row uses its own process's matmul rate; peer
  rows (other processes) the best fedjax_dp process's rate of the same part."""
  mm = max([r["matmul_gflops"] for r in fed if r.get("matmul_gflops")] or [0.0]) or None
  mm_micro = max([r["matmul_gflops"] for r in micro if r.get("matmul_gflops")] or
                 [0.0]) or mm
  return mm, mm_micro


def _loss_txt(r) -> str:
  return (f"{r['first_round_loss']:.3f} -> {r['last_round_loss']:.3f}"
          + ("" if r["loss_ok"] else " (FAILED: not counted)"))


def _federated_table(fed, ratios_, mm) -> List[str]:
  """The one-shot federated table (runs before interleaving: one record per process)."""
  lines = ["| workload | framework | method | versions | clients x steps x E[batch] | "
           "padded batch | median s/round | per-example grads/s | GFLOP/s | % of matmul | "
           "loss first -> last | fedjax_dp speed-up |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in fed:
    ver = ", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items()))
    w = workloads.DPSGD_WORKLOADS[r["workload"]]
    best_peer = _best_rate([q for q in fed if q["workload"] == r["workload"]
                            and q["framework"] == r["framework"]], "loss_ok")
    sp = ratios_["federated"].get(r["workload"], {}).get(r["framework"])
    sp_txt = f"{sp:.1f}x" if sp is not None and best_peer is r else ""
    ref = r.get("matmul_gflops") or mm
    pct = f"{100 * r['gflops'] / ref:.0f}%" if ref else ""
    lines.append(
        f"| {r['workload']} | {r['framework']} | {r.get('method', '')} | {ver} | "
        f"{r['cohort_size']} x "
        f"{w['local_steps']} x {w['expected_batch_size']} | {r.get('padded_batch', '')} | "
        f"{r['median_round_s']:.3f} | {r['per_example_grads_per_s']:,.0f} | "
        f"{r['gflops']:.1f} | {pct} | {_loss_txt(r)} | {sp_txt} |")
  return lines


def _micro_table(micro, ratios_, mm_micro) -> List[str]:
  lines = ["Microbenchmark: the sum of per-example clipped gradients of one batch of "
           "B real examples (no noise, no update), best and median of the repeated calls "
           "(10 in a full run; rates use the best); each "
           "method's sum is checked against an independent per-example gradient, clip "
           "and sum (relative L2 error; above 1e-4 the method is marked WRONG and never "
           "counts). The speed-up is fedjax_dp's `auto` over the fastest correct method "
           "of that peer.", "",
           "| model | B | framework | method | best ms | median ms | per-example grads/s | "
           "GFLOP/s | % of matmul | rel. error | fedjax_dp speed-up |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  rows = [dict(res, framework=rec["framework"]) for rec in micro for res in rec["results"]]
  rows.sort(key=lambda r: (r["model"], r["batch_size"]))
  for r in rows:
    key = f"{r['model']} B={r['batch_size']}"
    same = [q for q in rows if (q["model"], q["batch_size"], q["framework"]) ==
            (r["model"], r["batch_size"], r["framework"])]
    best = _best_rate(same, "correct")
    sp = ratios_["micro"].get(key, {}).get(r["framework"])
    sp_txt = f"{sp:.1f}x" if sp is not None and best is r else ""
    pct = f"{100 * r['gflops'] / mm_micro:.0f}%" if mm_micro else ""
    lines.append(
        f"| {r['model']} | {r['batch_size']} | {r['framework']} | {r['method']} | "
        f"{1e3 * r['best_s']:.2f} | {1e3 * r['median_s']:.2f} | "
        f"{r['per_example_grads_per_s']:,.0f} | {r['gflops']:.1f} | {pct} | "
        f"{r['rel_err_vs_reference']:.1e}{'' if r['correct'] else ' WRONG'} | {sp_txt} |")
  return lines


def _matmul_line(fed, micro, mm) -> str:
  size = max([r.get("matmul_size", 2048) for r in fed + micro] or [2048])
  if not mm:
    return "No same-run matmul rate."
  return (f"Dense {size}x{size} float32 matmul (best of before/after, in the "
          "fedjax_dp process of each part): "
          + ", ".join(f"{r.get('workload', 'micro')} {r['matmul_gflops']:.1f}"
                      for r in fed + micro if r.get("matmul_gflops"))
          + " GFLOP/s. '% of matmul' divides by the rate of the same part "
          "(3 x forward FLOPs can exceed 100%: ghost clipping skips work that "
          "count includes, e.g. the first layer's input gradient).")


def _target_bullets(fed, ratios_, mm, kinds=("federated", "micro")) -> List[str]:
  lines = []
  for kind in kinds:
    for key, per in ratios_[kind].items():
      for peer, x in per.items():
        goal = DPSGD_TARGETS.get(peer)
        if goal:
          lines.append(_target_line(f"{kind} {key}: fedjax_dp vs {peer} "
                                    "(per-example grads/s)", x, goal))
  for r in fed:
    ref = r.get("matmul_gflops") or mm
    if r["framework"] == "fedjax_dp" and ref:
      lines.append(_target_line(f"per-example local training {r['workload']} "
                                f"(fedjax_dp round, {r['gflops']:.1f} GFLOP/s)",
                                r["gflops"] / ref, DPSGD_MATMUL_TARGET, unit="%"))
  return lines


def dpsgd_markdown(section: dict, ratios_: dict) -> List[str]:
  """The Markdown lines of section "dpsgd": interleaved (`interleaved_markdown`) when
  the section has interleaved summaries, else the one-shot tables of earlier runs."""
  if section.get("interleaved"):
    return interleaved_markdown(section, ratios_)
  fed, micro = section.get("federated", []), section.get("micro", [])
  mm, mm_micro = _matmul_refs(fed, micro)
  lines = ["### Record-level DP-SGD (per-example clipping, same run)", "",
           "Federated record-level DP-SGD (`benchmarks.workloads.DPSGD_WORKLOADS`): every "
           "client runs 5 local DP-SGD steps (Poisson rate 0.2 of its 100 examples, "
           "expected batch 20, per-example clip 1, noise multiplier 1, SGD lr 0.1), the "
           "server averages the deltas. Per-example gradients/s = clients x 5 x 20 "
           "expected examples / median round time; GFLOP/s counts 3 x forward FLOPs of "
           "those examples (MLP 1,192,800 and CNN 71,994,624 per example; padded slots, "
           "norms and clipping not counted). Peers: 1 warm-up + 3 timed rounds each. "
           "'loss' is the mean training loss of the first and last round; a run whose "
           "loss is not finite or does not decrease is marked and never counts.", ""]
  lines += _federated_table(fed, ratios_, mm)
  lines += [""] + _micro_table(micro, ratios_, mm_micro)
  lines += ["", _matmul_line(fed, micro, mm), "", "Targets:", ""]
  lines += _target_bullets(fed, ratios_, mm)
  lines.append("")
  return lines


# --- Interleaved runs (`benchmarks.interleave`) ---------------------------------------

# Issue 32's targets per workload: fedjax_dp's speed-up over each peer's best mode
# (median of the per-round ratios); workloads not listed use `DPSGD_TARGETS`.
INTERLEAVED_TARGETS = {"dpsgd_mlp": {"opacus": 5.0, "jax-privacy": 1.0},
                       "dpsgd_user_cnn": {"opacus": 3.0, "jax-privacy": 1.0}}


def _record_of(section, workload, framework, method):
  for r in section.get("federated", []):
    if (r["workload"], r["framework"], r.get("method", "")) == (workload, framework,
                                                                 method):
      return r
  return None


def interleaved_targets(section: dict) -> List[dict]:
  """Every target of an interleaved section: ``{target, workload, value, goal, unit,
  met, detail}``. Speed-ups: over each peer's best mode (lower median round), the
  median of the per-round ratios; matmul: fedjax_dp's GFLOP/s over its own process's
  dense-matmul rate. A peer whose loss check failed never counts (no row)."""
  out = []
  for s in section.get("interleaved", []):
    wname = s["workload"]
    goals = INTERLEAVED_TARGETS.get(wname, DPSGD_TARGETS)
    for fw, label in s["best_mode"].items():
      p = s["frameworks"][label]
      rec = _record_of(section, wname, fw, p["method"])
      if fw not in goals or (rec is not None and not rec["loss_ok"]):
        continue
      sp = s["speedups"][label]
      modes = [k for k, q in s["frameworks"].items() if q["framework"] == fw]
      out.append({"target": f"fedjax_dp vs {fw} best mode", "workload": wname,
                  "value": sp["median_of_round_ratios"], "goal": goals[fw], "unit": "x",
                  "met": sp["median_of_round_ratios"] >= goals[fw],
                  "detail": f"best of {', '.join(modes)}: {label}; ratio of medians "
                            f"{sp['ratio_of_medians']:.2f}x"})
    ours = _record_of(section, wname, "fedjax_dp", "dp_fedavg_record_level")
    if ours and ours.get("matmul_gflops"):
      frac = ours["gflops"] / ours["matmul_gflops"]
      out.append({"target": f"per-example local training {wname} (fedjax_dp round "
                            "vs same-run dense matmul)",
                  "workload": wname, "value": frac, "goal": DPSGD_MATMUL_TARGET,
                  "unit": "%", "met": frac >= DPSGD_MATMUL_TARGET,
                  "detail": f"{ours['gflops']:.1f} of {ours['matmul_gflops']:.1f} GFLOP/s"})
  return out


def _workload_table(section: dict, s: dict) -> List[str]:
  """One interleaved workload: a row per framework/mode."""
  w = workloads.DPSGD_WORKLOADS[s["workload"]]
  ours_rec = _record_of(section, s["workload"], "fedjax_dp", "dp_fedavg_record_level")
  mm = (ours_rec or {}).get("matmul_gflops")
  clients = (ours_rec or {}).get("cohort_size", w["cohort_size"])
  lines = [f"#### {s['workload']}: {w['model']}", "",
           f"{clients} clients x {w['local_steps']} local steps x E[batch] "
           f"{w['expected_batch_size']} (q {w['record_sampling_rate']:g} of "
           f"{w['examples_per_client']} examples), {s['examples_per_round']:,} expected "
           f"per-example gradients per round; {s['rounds']} interleaved rounds.", "",
           "| framework | method | versions | padded batch | ready s (build + warm-up) | "
           "median s/round | min | max | per-example grads/s | GFLOP/s | % of matmul | "
           "loss first -> last | fedjax_dp speed-up: median of per-round ratios "
           "(ratio of medians) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for label, p in s["frameworks"].items():
    rec = _record_of(section, s["workload"], p["framework"], p["method"]) or {}
    ver = ", ".join(f"{k} {v}" for k, v in sorted(rec.get("versions", {}).items()))
    sp = s["speedups"].get(label)
    sp_txt = (f"{sp['median_of_round_ratios']:.2f}x ({sp['ratio_of_medians']:.2f}x)"
              + (" best" if s["best_mode"].get(p["framework"]) == label else "")
              if sp else "")
    loss = _loss_txt(rec) if rec else ""
    pct = f"{100 * p['gflops'] / mm:.0f}%" if mm else ""
    ready = f"{p['ready_s']:.1f}" if p.get("ready_s") is not None else ""
    lines.append(
        f"| {p['framework']} | {p['method']} | {ver} | {rec.get('padded_batch', '')} | "
        f"{ready} | {p['median_s']:.3f} | {p['min_s']:.3f} | {p['max_s']:.3f} | "
        f"{p['per_example_grads_per_s']:,.0f} | {p['gflops']:.1f} | {pct} | {loss} | "
        f"{sp_txt} |")
  builds = {torch_build_words(r["torch_build"]) for r in section.get("federated", [])
            if r["workload"] == s["workload"] and r.get("torch_build")}
  for b in sorted(builds):
    lines += ["", f"Torch build of the Opacus processes: {b}."]
  return lines + [""]


def torch_build_words(b: dict) -> str:
  """A torch build (`peer_opacus.torch_build`) in words."""
  kind = "CPU wheel" if b.get("cuda") is None else f"CUDA {b['cuda']} wheel"
  return (f"torch {b.get('torch')} ({kind}; torch.version.cuda = {b.get('cuda')}), "
          f"mkldnn {b.get('mkldnn')}, {b.get('num_threads')} threads, opacus "
          f"{b.get('opacus')}, device {b.get('device')}")


def _profile_lines(s: dict, top: int = 8) -> List[str]:
  prof = s.get("profile")
  if not prof:
    return []
  lines = [f"Profile of one more fedjax_dp round of {s['workload']} under "
           f"`jax.profiler.trace` ({prof['seconds']:.2f} s traced; trace in "
           f"`{prof['trace_dir']}`): top XLA operations by time summed over the CPU "
           "client's threads (shares of the summed op time):", "",
           "| op | ms | share | calls |", "|---|---|---|---|"]
  for o in prof["top_ops"][:top]:
    lines.append(f"| `{o['op']}` | {o['ms']:.1f} | {100 * o['share']:.0f}% | "
                 f"{o['calls']} |")
  return lines + [""]


def _targets_table(targets: List[dict]) -> List[str]:
  lines = ["| target | workload | measured | goal | verdict | detail |",
           "|---|---|---|---|---|---|"]
  for t in targets:
    if t["unit"] == "%":
      val, goal = f"{100 * t['value']:.0f}%", f">= {100 * t['goal']:.0f}%"
    else:
      val, goal = f"{t['value']:.2f}x", f">= {t['goal']:g}x"
    lines.append(f"| {t['target']} | {t['workload']} | {val} | {goal} | "
                 f"{'met' if t['met'] else 'MISSED'} | {t['detail']} |")
  return lines


def interleaved_markdown(section: dict, ratios_: dict) -> List[str]:
  """Section "dpsgd" of an interleaved run: a table per workload (every framework and
  mode), the microbenchmark, the targets table, and for each workload with a missed
  target the profile of a fedjax_dp round."""
  fed, micro = section.get("federated", []), section.get("micro", [])
  mm, mm_micro = _matmul_refs(fed, micro)
  lines = ["### Record-level DP-SGD (per-example clipping, interleaved round by round)",
           "", "Federated record-level DP-SGD (`benchmarks.workloads.DPSGD_WORKLOADS`): "
           "every client runs local DP-SGD steps (Poisson sampling, per-example clip 1, "
           "noise multiplier 1, SGD lr 0.1), the server averages the deltas. Every "
           "framework and mode runs as its own long-lived process (`benchmarks.interleave`"
           "), built and warmed up once (fedjax_dp: the workload's warm-up rounds; peers: "
           "1), then each round r runs one timed round of every process in an order "
           "rotated each round, one process computing at a time, so a slow stretch of a "
           "shared machine hits every framework. The fedjax_dp speed-up (per-example "
           "gradients/s) is the median over rounds of (peer s / fedjax_dp s of the same "
           "round), in brackets the ratio of the medians; 'best' marks each peer's "
           "faster mode (lower median). GFLOP/s counts 3 x forward FLOPs of the expected "
           "examples (`workloads.DPSGD_FLOPS_PER_EXAMPLE`: MLP 1,192,800, CNN "
           "71,994,624, user CNN 9,854,976; padded slots, norms and clipping not "
           "counted). 'loss' is the mean training loss of the first (warm-up) and last "
           "round; a run whose loss is not finite or does not decrease never counts.", ""]
  for s in section["interleaved"]:
    lines += _workload_table(section, s)
  if micro:
    lines += _micro_table(micro, ratios_, mm_micro) + [""]
  lines += [_matmul_line(fed, micro, mm), "", "Targets (issue 32: record-level MLP "
            ">= 5x Opacus's best mode, the flax `nn.Conv` user CNN >= 3x, per-example local "
            "training >= 40% of the same-run dense matmul; jax-privacy >= 1x):", ""]
  targets = interleaved_targets(section)
  lines += _targets_table(targets) + [""]
  micro_bullets = _target_bullets([], ratios_, mm, kinds=("micro",))
  if micro_bullets:
    lines += ["Microbenchmark targets:", ""] + micro_bullets + [""]
  missed = {t["workload"] for t in targets if not t["met"]}
  for s in section["interleaved"]:
    if s["workload"] in missed:
      lines += _profile_lines(s)
  return lines
