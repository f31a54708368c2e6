"""Runs every benchmark in one go and records the results.

  python -m benchmarks.run                  # peers + roofline + scale (about 15 min on 2 cores)
  python -m benchmarks.run --only peers     # or roofline, scale, dpsgd, rdp_pfl
                                            # (comma-separated)
  python -m benchmarks.run --quick          # tiny sizes: checks the plumbing (a test runs it)

Peers run in their own virtual environments under ``benchmarks/.venvs/`` (created on
first use, from PyPI): FedJAX 0.0.17 (``fedjax``) and pfl-research 0.6.0 with PyTorch
2.13.0 on the CPU (``pfl``; pfl pins dp-accounting < 0.6, so it cannot share our
environment); for the record-level DP-SGD section (``dpsgd``), Opacus 1.6.0 on the same
CPU torch (``opacus``) and jax-privacy 2.0.0 on our jax/flax/optax versions
(``jax_privacy``). Section ``rdp_pfl`` (`benchmarks.rdp_pfl`) times RDP-PFL's
per-example second-order DP outer step against first-order per-example clipping
(fedjax_dp only). Every measurement runs alone, one after the other, so the frameworks
are compared side by side in one run on the same machine.

Writes ``benchmarks/results/<UTC time>.json`` (every figure, machine, versions) and
appends a Markdown section to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional

from benchmarks import common, workloads

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = {
    "fedjax": {"script": "peer_fedjax.py", "install": [["fedjax==0.0.17"]],
               "section": "peers"},
    # torch first, pinned: an unpinned torch from pfl's requirements would pull a
    # multi-GB CUDA build.
    "pfl": {"script": "peer_pfl.py",
            "install": [["torch==2.13.0"], ["pfl[pytorch]==0.6.0", "torch==2.13.0"]],
            "section": "peers"},
    # Record-level DP-SGD peers (section "dpsgd"). Opacus on the same CPU torch as pfl.
    "opacus": {"script": "peer_opacus.py",
               "install": [["torch==2.13.0"], ["opacus==1.6.0", "torch==2.13.0"]],
               "section": "dpsgd"},
    # jax-privacy 2.0.0 (the latest on PyPI) asks for jax >= 0.7.1; pinned to the jax,
    # flax and optax of our own environment so that only the library differs.
    "jax_privacy": {"script": "peer_jax_privacy.py",
                    "install": [["jax-privacy==2.0.0", "jax==0.10.2", "jaxlib==0.10.2",
                                 "flax==0.12.8", "optax==0.2.8"]],
                    "section": "dpsgd"},
}
# The parts of a run (``--only``); all run by default.
PARTS = ("peers", "roofline", "scale", "dpsgd", "rdp_pfl")
TARGETS = {"pfl-research": 10.0, "fedjax": 5.0}
# Section "dpsgd": fedjax_dp's per-example gradients/s over the best correct variant of
# each peer (federated workloads and microbenchmark), and per-example local training
# against the same-run dense-matmul rate.
DPSGD_TARGETS = {"opacus": 5.0, "jax-privacy": 1.0}
DPSGD_MATMUL_TARGET = 0.40
# The variants each DP-SGD peer runs (`--mode` / `--variant` of its script).
DPSGD_PEER_VARIANTS = {"opacus": ("--mode", ("hooks", "ghost")),
                       "jax_privacy": ("--variant", ("vmap", "loop"))}
# Peer rounds take seconds to minutes on 2 cores: 1 warm-up and 3 timed rounds each.
DPSGD_PEER_ROUNDS = ["--warmup-rounds", "1", "--timed-rounds", "3"]


def _run(cmd: List[str], env: Optional[dict] = None, timeout: int = 3600) -> dict:
  """Runs a benchmark command; returns the JSON record on its last stdout line."""
  out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
  if out.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-4000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def ensure_peer_venv(name: str, venv_dir: str) -> str:
  """The peer's Python, creating and installing its virtual environment if needed."""
  path = os.path.join(venv_dir, name)
  python = os.path.join(path, "bin", "python")
  marker = os.path.join(path, ".installed")
  if os.path.exists(marker):
    return python
  print(f"[benchmarks] creating the {name} environment in {path} ...", flush=True)
  subprocess.run([sys.executable, "-m", "venv", path], check=True)
  for pkgs in PEERS[name]["install"]:
    subprocess.run([python, "-m", "pip", "install", "-q", *pkgs], check=True)
  with open(marker, "w") as f:
    f.write("ok\n")
  return python


def throughput(quick: bool, peers: bool, venv_dir: str) -> Dict[str, list]:
  """Workload (a) and the CNN workload on fedjax_dp and (optionally) the peers."""
  records = []
  extra = ["--timed-rounds", "2", "--warmup-rounds", "1"] if quick else []
  names = ["mlp"] if quick else list(workloads.WORKLOADS)
  for wname in names:
    print(f"[benchmarks] {wname}: fedjax_dp", flush=True)
    records.append(_run([sys.executable, "-m", "benchmarks.throughput", "--workload", wname,
                         *extra]))
    if not peers:
      continue
    for peer, spec in PEERS.items():
      if spec["section"] != "peers":
        continue
      python = ensure_peer_venv(peer, venv_dir)
      print(f"[benchmarks] {wname}: {peer}", flush=True)
      records.append(_run([python, os.path.join(HERE, spec["script"]), "--workload", wname,
                           *extra]))
  return {"throughput": records}


def peer_env(name: str) -> dict:
  """The environment a peer runs in. Torch peers get ``OMP_WAIT_POLICY=PASSIVE``: with
  torch's default (OpenMP threads spin-waiting) Opacus ran 10-100x slower whenever other
  jobs shared the 2 cores (a 20-example MLP step took 0.5 s instead of 5 ms), which
  would measure the machine's load, not Opacus."""
  env = dict(os.environ)
  if name == "opacus":
    env["OMP_WAIT_POLICY"] = "PASSIVE"
  return env


def dpsgd(quick: bool, peers: bool, venv_dir: str) -> Dict[str, dict]:
  """Section "dpsgd": record-level DP-SGD, federated workloads and the one-batch
  microbenchmark, on fedjax_dp and (optionally) Opacus and jax-privacy."""
  fed, micro = [], []
  names = ["dpsgd_mlp"] if quick else list(workloads.DPSGD_WORKLOADS)
  ours_extra = (["--cohort-size", "10", "--warmup-rounds", "1", "--timed-rounds", "2",
                 "--matmul-size", "1024"] if quick else [])
  micro_extra = (["--models", "mlp", "--batch-sizes", "20", "--repeat", "3",
                  "--matmul-size", "1024"]
                 if quick else [])
  for wname in names:
    print(f"[benchmarks] {wname}: fedjax_dp", flush=True)
    fed.append(_run([sys.executable, "-m", "benchmarks.dpsgd", "--workload", wname,
                     *ours_extra]))
    if not peers:
      continue
    for peer, (flag, variants) in DPSGD_PEER_VARIANTS.items():
      python = ensure_peer_venv(peer, venv_dir)
      for v in variants:
        print(f"[benchmarks] {wname}: {peer} {v}", flush=True)
        fed.append(_run([python, os.path.join(HERE, PEERS[peer]["script"]), "--workload",
                         wname, flag, v, *DPSGD_PEER_ROUNDS], env=peer_env(peer)))
  print("[benchmarks] dpsgd micro: fedjax_dp", flush=True)
  micro.append(_run([sys.executable, "-m", "benchmarks.dpsgd", "--micro", *micro_extra]))
  if peers:
    for peer in DPSGD_PEER_VARIANTS:
      print(f"[benchmarks] dpsgd micro: {peer}", flush=True)
      micro.append(_run([ensure_peer_venv(peer, venv_dir),
                         os.path.join(HERE, PEERS[peer]["script"]), "--micro"],
                        env=peer_env(peer)))
  return {"dpsgd": {"federated": fed, "micro": micro}}


def rdp_pfl(quick: bool) -> Dict[str, dict]:
  """Section "rdp_pfl": `benchmarks.rdp_pfl` in its own process (``--quick`` passed on);
  prints the second-order / first-order time ratios and each row's share of the
  same-process dense matmul rate."""
  print("[benchmarks] rdp_pfl", flush=True)
  rec = _run([sys.executable, "-m", "benchmarks.rdp_pfl"] + (["--quick"] if quick else []))
  for key, per in rec["ratios"].items():
    for name, x in per.items():
      print(f"[benchmarks] rdp_pfl {key}: time {name} = {x:.2f}", flush=True)
  for r in rec["rows"]:
    print(f"[benchmarks] rdp_pfl {r['name']} B={r['batch_size']}: "
          f"{r['per_example_grads_per_s']:,.0f} per-example grads/s, {r['gflops']:.1f} "
          f"GFLOP/s = {100 * r['fraction_of_matmul']:.1f}% of matmul"
          f"{'' if r['ok'] else ' (CHECK FAILED)'}", flush=True)
  return {"rdp_pfl": rec}


def rdp_pfl_markdown(rec: dict) -> List[str]:
  """The Markdown lines of section "rdp_pfl" (`benchmarks.rdp_pfl`'s record)."""
  fl = rec["flops_per_example"]
  draw = max([r.get("expected_support_draw", 0) for r in rec["rows"]] or [0])
  lines = ["### RDP-PFL: second-order DP outer step (per-example meta-gradients)", "",
           f"`benchmarks.rdp_pfl` on the {rec['model']} ({rec['num_params']:,} "
           f"parameters), eta {rec['eta']:g}, C {rec['clip_norm']:g}; per-batch rows: one "
           "batch of B synthetic examples (weights 1, no noise), best and median of "
           f"{rec['repeat']} jitted calls (rates use the best). first_order_*: per-example "
           "gradients at theta~ clipped and summed (`meta.grad_clipped_sum`, vmap or auto); "
           "second_order: per-example meta-gradients (I - eta H_x) grad l(theta~; x) "
           "(gradient + forward-over-reverse HVP, `meta.meta_clipped_sum`); "
           "nonprivate_second_order: the exact batch meta-gradient (`meta.meta_gradient`, "
           "plain MAML). local_epoch_<mode>: one `meta.local_epoch` of a 600-row client "
           "(300 query / 300 support, q 0.1, sigma 1), rates per expected support draw "
           f"({draw:g}). Matmul FLOPs per example: gradient "
           f"{fl['gradient']:,}, HVP {fl['hvp']:,} (exact forward-over-reverse count), "
           f"meta-gradient {fl['meta_gradient']:,}, batch meta-gradient "
           f"{fl['nonprivate_meta_gradient']:,} (derivation: `benchmarks/rdp_pfl.py`). Each "
           "sum is checked against an independent per-example computation (relative L2 "
           "error; above 1e-4 the row is marked WRONG and enters no ratio).", "",
           "| row | B | method | best ms | median ms | per-example grads/s | GFLOP/s | "
           "% of matmul | rel. error | time / first_order_vmap |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  ratios_ = rec.get("ratios", {})
  for r in rec["rows"]:
    b = r["batch_size"]
    if b is None:
      ratio = ratios_.get("local_epoch", {}).get(
          f"{r['name']}/local_epoch_first_order")
      ratio_txt = f"{ratio:.2f} (vs local_epoch_first_order)" if ratio else ""
      b_txt = f"epoch (E[draw] {r['expected_support_draw']:g})"
    else:
      ratio = ratios_.get(f"B={b}", {}).get(f"{r['name']}/first_order_vmap")
      ratio_txt = f"{ratio:.2f}" if ratio else ""
      b_txt = str(b)
    err = r.get("rel_err_vs_reference")
    err_txt = ("-" if err is None else f"{err:.1e}") + ("" if r["ok"] else " WRONG")
    lines.append(
        f"| {r['name']} | {b_txt} | {r.get('method', '')} | {1e3 * r['best_s']:.2f} | "
        f"{1e3 * r['median_s']:.2f} | {r['per_example_grads_per_s']:,.0f} | "
        f"{r['gflops']:.1f} | {100 * r['fraction_of_matmul']:.1f}% | {err_txt} | "
        f"{ratio_txt} |")
  lines += ["", f"Dense {rec['matmul_size']}x{rec['matmul_size']} float32 matmul (best of "
            f"before/after, same process): {rec['matmul_gflops']:.1f} GFLOP/s.", ""]
  for key, per in ratios_.items():
    for name, x in per.items():
      lines.append(f"- {key}: time {name} = {x:.2f}")
  lines.append("")
  return lines


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


def dpsgd_markdown(section: dict, ratios_: dict) -> List[str]:
  """The Markdown lines of section "dpsgd"."""
  fed, micro = section.get("federated", []), section.get("micro", [])
  # Same-process references: a fedjax_dp row uses its own process's matmul rate; peer
  # rows (other processes) the best fedjax_dp process's rate of the same part.
  mm = max([r["matmul_gflops"] for r in fed if r.get("matmul_gflops")] or [0.0]) or None
  mm_micro = max([r["matmul_gflops"] for r in micro if r.get("matmul_gflops")] or
                 [0.0]) or mm
  lines = ["### Record-level DP-SGD (per-example clipping, same run)", "",
           "Federated record-level DP-SGD (`benchmarks.workloads.DPSGD_WORKLOADS`): every "
           "client runs 5 local DP-SGD steps (Poisson rate 0.2 of its 100 examples, "
           "expected batch 20, per-example clip 1, noise multiplier 1, SGD lr 0.1), the "
           "server averages the deltas. Per-example gradients/s = clients x 5 x 20 "
           "expected examples / median round time; GFLOP/s counts 3 x forward FLOPs of "
           "those examples (MLP 1,192,800 and CNN 71,994,624 per example; padded slots, "
           "norms and clipping not counted). Peers: 1 warm-up + 3 timed rounds each. "
           "'loss' is the mean training loss of the first and last round; a run whose "
           "loss is not finite or does not decrease is marked and never counts.", "",
           "| workload | framework | method | versions | clients x steps x E[batch] | "
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
    loss = (f"{r['first_round_loss']:.3f} -> {r['last_round_loss']:.3f}"
            + ("" if r["loss_ok"] else " (FAILED: not counted)"))
    ref = r.get("matmul_gflops") or mm
    pct = f"{100 * r['gflops'] / ref:.0f}%" if ref else ""
    lines.append(
        f"| {r['workload']} | {r['framework']} | {r.get('method', '')} | {ver} | "
        f"{r['cohort_size']} x "
        f"{w['local_steps']} x {w['expected_batch_size']} | {r.get('padded_batch', '')} | "
        f"{r['median_round_s']:.3f} | {r['per_example_grads_per_s']:,.0f} | "
        f"{r['gflops']:.1f} | {pct} | {loss} | {sp_txt} |")
  lines += ["", "Microbenchmark: the sum of per-example clipped gradients of one batch of "
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
  size = max([r.get("matmul_size", 2048) for r in fed + micro] or [2048])
  lines += ["", (f"Dense {size}x{size} float32 matmul (best of before/after, in the "
                 "fedjax_dp process of each part): "
                 + ", ".join(f"{r.get('workload', 'micro')} {r['matmul_gflops']:.1f}"
                             for r in fed + micro if r.get("matmul_gflops"))
                 + " GFLOP/s. '% of matmul' divides by the rate of the same part "
                 "(3 x forward FLOPs can exceed 100%: ghost clipping skips work that "
                 "count includes, e.g. the first layer's input gradient).")
            if mm else "No same-run matmul rate.", "", "Targets:", ""]
  for kind, label in (("federated", "federated"), ("micro", "micro")):
    for key, per in ratios_[kind].items():
      for peer, x in per.items():
        goal = DPSGD_TARGETS.get(peer)
        if goal:
          lines.append(_target_line(f"{label} {key}: fedjax_dp vs {peer} "
                                    "(per-example grads/s)", x, goal))
  for r in fed:
    ref = r.get("matmul_gflops") or mm
    if r["framework"] == "fedjax_dp" and ref:
      lines.append(_target_line(f"per-example local training {r['workload']} "
                                f"(fedjax_dp round, {r['gflops']:.1f} GFLOP/s)",
                                r["gflops"] / ref, DPSGD_MATMUL_TARGET, unit="%"))
  lines.append("")
  return lines


def ratios(records: list) -> Dict[str, Dict[str, float]]:
  """fedjax_dp's client-updates/s divided by each peer's, per workload."""
  out: Dict[str, Dict[str, float]] = {}
  for wname in {r["workload"] for r in records}:
    ours = [r for r in records if r["workload"] == wname and r["framework"] == "fedjax_dp"]
    if not ours:
      continue
    for r in records:
      if r["workload"] == wname and r["framework"] != "fedjax_dp":
        out.setdefault(wname, {})[r["framework"]] = (
            ours[0]["client_updates_per_s"] / r["client_updates_per_s"])
  return out


def markdown(result: dict) -> str:
  """The Markdown section appended to RESULTS.md."""
  m = result["machine"]
  lines = [f"## {result['timestamp']} — {m['cpu']}, {m['cores']} cores, "
           f"{m['memory_gib']} GiB{' (quick)' if result['quick'] else ''}", ""]
  if "throughput" in result:
    mm = result.get("roofline", {}).get("matmul_gflops")
    lines += ["### Throughput (same workload, same run)", "",
              "GFLOP/s counts the matmul FLOPs of local training "
              "(`benchmarks.workloads.flops_per_round`) over the whole round time; the "
              "ceiling is the speed-up a framework would have over this peer if its "
              "rounds ran at the dense-matmul rate measured in the same run.", "",
              "| workload | framework | versions | cohort | median s/round | "
              "client-updates/s | GFLOP/s | fedjax_dp speed-up | ceiling |",
              "|---|---|---|---|---|---|---|---|---|"]
    rat = result.get("ratios", {})
    for r in result["throughput"]:
      ver = ", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items()))
      sp = rat.get(r["workload"], {}).get(r["framework"])
      w = workloads.WORKLOADS[r["workload"]]
      gf = workloads.flops_per_round(w) / r["median_round_s"] / 1e9
      ceil = (f"{r['median_round_s'] / (workloads.flops_per_round(w) / (mm * 1e9)):.1f}x"
              if mm and r["framework"] != "fedjax_dp" else "")
      lines.append(f"| {r['workload']} | {r['framework']} | {ver} | {r['cohort_size']} | "
                   f"{r['median_round_s']:.3f} | {r['client_updates_per_s']:.1f} | "
                   f"{gf:.1f} | {'' if sp is None else f'{sp:.1f}x'} | {ceil} |")
    for wname, per in sorted(rat.items()):
      for peer, x in sorted(per.items()):
        goal = TARGETS.get(peer) if wname == "mlp" else None
        if goal:
          lines.append(f"\nTarget ({wname}): >= {goal:.0f}x {peer}: "
                       f"{'met' if x >= goal else 'MISSED'} ({x:.1f}x).")
    lines.append("")
  if "dpsgd" in result:
    lines += dpsgd_markdown(result["dpsgd"], result.get("dpsgd_ratios") or
                            dpsgd_ratios(result["dpsgd"]))
  if "rdp_pfl" in result:
    lines += rdp_pfl_markdown(result["rdp_pfl"])
  if "roofline" in result:
    rf = result["roofline"]
    lt = rf["local_training"]
    lines += ["### Roofline", "",
              f"Dense 2048x2048 float32 matmul: {rf['matmul_gflops']:.1f} GFLOP/s. MLP local "
              f"training ({lt['clients']} clients x {lt['steps_per_client']} steps, "
              f"{lt['devices']} device(s), chunk {lt['chunk_size']}): {lt['gflops']:.1f} "
              f"GFLOP/s = {100 * rf['local_training_fraction_of_matmul']:.0f}% of the matmul "
              "(target >= 50%).", "",
              "| local-training variant | devices | chunk | s | GFLOP/s | % of matmul |",
              "|---|---|---|---|---|---|"]
    for v in rf.get("local_training_ablation", []):
      lines.append(f"| {v['label']} | {v['devices']} | {v['chunk_size']} | "
                   f"{v['seconds']:.3f} | {v['gflops']:.1f} | "
                   f"{100 * v['gflops'] / rf['matmul_gflops']:.0f}% |")
    lines += ["",
              "| K | P | stream GB/s | clip+sum GB/s (ratio) | clip+sum+noise GB/s (ratio) |"
              " noise draw ms |", "|---|---|---|---|---|---|"]
    for h in rf["hot_path"]:
      lines.append(f"| {h['K']} | {h['P']:.0e} | {h['stream_gbps']:.1f} | "
                   f"{h['clip_sum_gbps']:.1f} ({h['clip_sum_ratio']:.2f}) | "
                   f"{h['hot_path_gbps']:.1f} ({h['ratio']:.2f}) | {1e3 * h['noise_s']:.1f} |")
    lines.append("")
  if "scale" in result:
    sc = result["scale"]
    lines += ["### Scale", "", f"Population {sc['population']:,} clients (pooled, "
              f"{sc['pool_examples']:,} shared examples).", "",
              "| cohort K | s/round | client-updates/s | peak RSS MiB | RSS before rounds MiB |",
              "|---|---|---|---|---|"]
    for r in sc["results"]:
      lines.append(f"| {r['cohort_size']:,} | {r['seconds_per_round']:.2f} | "
                   f"{r['client_updates_per_s']:.0f} | {r['peak_rss_mib']:.0f} | "
                   f"{r['rss_before_rounds_mib']:.0f} |")
    lines.append(f"\nPeak memory growth from the smallest to the largest cohort: "
                 f"{100 * sc['peak_rss_growth_first_to_last']:.1f}% (target < 10%).")
    lines.append("")
  return "\n".join(lines) + "\n"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--only", default=",".join(PARTS),
                 help=f"comma-separated subset of {','.join(PARTS)}")
  p.add_argument("--quick", action="store_true", help="tiny sizes, no peers")
  p.add_argument("--skip-peers", action="store_true",
                 help="throughput of fedjax_dp only (no peer environments)")
  p.add_argument("--venv-dir", default=os.path.join(HERE, ".venvs"))
  p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
  p.add_argument("--json-dir", default=os.path.join(HERE, "results"))
  a = p.parse_args(argv)
  parts = set(a.only.split(","))
  unknown = parts - set(PARTS)
  if unknown:
    p.error(f"--only: unknown part(s) {sorted(unknown)}; choose from {', '.join(PARTS)}")
  now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  result = {"timestamp": now, "quick": a.quick, "machine": common.machine_info()}
  if "peers" in parts:
    result.update(throughput(a.quick, not (a.quick or a.skip_peers), a.venv_dir))
    result["ratios"] = ratios(result["throughput"])
  if "dpsgd" in parts:
    result.update(dpsgd(a.quick, not (a.quick or a.skip_peers), a.venv_dir))
    result["dpsgd_ratios"] = dpsgd_ratios(result["dpsgd"])
  if "rdp_pfl" in parts:
    result.update(rdp_pfl(a.quick))
  if "roofline" in parts:
    print("[benchmarks] roofline", flush=True)
    result["roofline"] = _run([sys.executable, "-m", "benchmarks.roofline"] +
                              (["--quick"] if a.quick else []))
  if "scale" in parts:
    print("[benchmarks] scale", flush=True)
    result["scale"] = _run([sys.executable, "-m", "benchmarks.scale"] + (
        ["--cohorts", "50,100", "--rounds", "1", "--population", "20000"]
        if a.quick else []))
  os.makedirs(a.json_dir, exist_ok=True)
  stamp = now.replace(" ", "_").replace(":", "")
  path = os.path.join(a.json_dir, f"{stamp}{'-quick' if a.quick else ''}.json")
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
  md = markdown(result)
  new = not os.path.exists(a.results_md)
  with open(a.results_md, "a") as f:
    if new:
      f.write("# fedjax_dp benchmark results\n\nAppended by `python -m benchmarks.run`; "
              "each section is one run, all figures measured side by side in that run.\n\n")
    f.write(md)
  print(md)
  print(f"[benchmarks] wrote {path} and appended to {a.results_md}")


if __name__ == "__main__":
  main()
