"""Runs every benchmark in one go and records the results.

  python -m benchmarks.run                  # peers + roofline + scale (about 15 min on 2 cores)
  python -m benchmarks.run --only peers     # or roofline, scale, dpsgd, rdp_pfl
                                            # (comma-separated)
  python -m benchmarks.run --quick          # tiny sizes: checks the plumbing (a test runs it)

Peers run in their own virtual environments under ``benchmarks/.venvs/`` (created on
first use by ``pip install``): FedJAX 0.0.17 (``fedjax``) and pfl-research 0.6.0 with
PyTorch 2.13.0 (``pfl``; pfl pins dp-accounting < 0.6, so it cannot share our
environment); for the record-level DP-SGD section (``dpsgd``), Opacus 1.6.0 on torch
2.13.0 (``opacus``) and jax-privacy 2.0.0 on our jax/flax/optax versions
(``jax_privacy``). Which torch build pip picks matters on a CPU: PyPI's Linux wheel of
torch 2.13.0 is the CUDA build; this machine's pip also sees a local CPU wheel
(``/opt/wheels/torch-2.13.0+cpu``, preferred as the higher local version), so the
environments here hold ``2.13.0+cpu``; every Opacus record says which
(``torch_build``: version, ``torch.version.cuda``, mkldnn, threads). Section ``rdp_pfl``
(`benchmarks.rdp_pfl`) times RDP-PFL's per-example second-order DP outer step against
first-order per-example clipping (fedjax_dp only). Measurements run alone, one after
the other, so the frameworks are compared side by side in one run on the same machine;
section ``dpsgd`` interleaves them round by round (`benchmarks.interleave`: every
framework and mode a serve-mode process, one round each in rotating order), so that a
slow stretch of a shared machine hits all of them.

  python -m benchmarks.run --only dpsgd --dpsgd-workloads dpsgd_user_cnn \
      --dpsgd-rounds 2 --dpsgd-clients 2 --dpsgd-no-micro    # tiny, with peers

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

from benchmarks import common, interleave, workloads
from benchmarks.dpsgd_report import (  # noqa: F401  (re-exported)
    DPSGD_MATMUL_TARGET, DPSGD_TARGETS, dpsgd_markdown, dpsgd_ratios)

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
               "section": "dpsgd", "framework": "opacus"},
    # jax-privacy 2.0.0 (the latest on PyPI) asks for jax >= 0.7.1; pinned to the jax,
    # flax and optax of our own environment so that only the library differs.
    "jax_privacy": {"script": "peer_jax_privacy.py",
                    "install": [["jax-privacy==2.0.0", "jax==0.10.2", "jaxlib==0.10.2",
                                 "flax==0.12.8", "optax==0.2.8"]],
                    "section": "dpsgd", "framework": "jax-privacy"},
}
# One-shot peer runs (the GPU kit, `benchmarks/gpu/run_kit.py`, uses these): 1 warm-up
# and 3 timed rounds each. Section "dpsgd" here interleaves (`dpsgd_entries`).
DPSGD_PEER_ROUNDS = ["--warmup-rounds", "1", "--timed-rounds", "3"]
# The parts of a run (``--only``); all run by default.
PARTS = ("peers", "roofline", "scale", "dpsgd", "rdp_pfl")
TARGETS = {"pfl-research": 10.0, "fedjax": 5.0}
# The variants each DP-SGD peer runs (`--mode` / `--variant` of its script).
DPSGD_PEER_VARIANTS = {"opacus": ("--mode", ("hooks", "ghost")),
                       "jax_privacy": ("--variant", ("vmap", "loop"))}


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


def dpsgd_entries(wname: str, quick: bool, peers: bool, venv_dir: str,
                  clients: Optional[int] = None) -> list:
  """The serve-mode processes of workload ``wname``: fedjax_dp (``--warmup-rounds`` of
  the workload) and, with ``peers``, every variant of each DP-SGD peer (1 warm-up
  round each), each peer in its own environment. ``clients``: override the
  workload's clients in every process (quick checks)."""
  cl = ["--cohort-size", str(clients)] if clients else []
  ours_extra = ["--warmup-rounds", "1", "--matmul-size", "1024"] if quick else []
  entries = [interleave.Entry("fedjax_dp", [sys.executable, "-m", "benchmarks.dpsgd",
                                            "--workload", wname, "--serve", *cl,
                                            *ours_extra])]
  if peers:
    for peer, (flag, variants) in DPSGD_PEER_VARIANTS.items():
      python = ensure_peer_venv(peer, venv_dir)
      for v in variants:
        entries.append(interleave.Entry(
            f"{PEERS[peer]['framework']} {v}",
            [python, os.path.join(HERE, PEERS[peer]["script"]), "--workload", wname,
             flag, v, "--warmup-rounds", "1", "--serve", *cl], env=peer_env(peer)))
  return entries


def dpsgd(quick: bool, peers: bool, venv_dir: str, names: Optional[List[str]] = None,
          rounds: Optional[int] = None, clients: Optional[int] = None,
          micro: bool = True) -> Dict[str, dict]:
  """Section "dpsgd": record-level DP-SGD, federated workloads interleaved round by
  round (`benchmarks.interleave`: fedjax_dp and every peer variant as serve-mode
  processes, one round each in rotating order), then the one-batch microbenchmark,
  on fedjax_dp and (optionally) Opacus and jax-privacy. ``names``: the workloads
  (default all; quick: dpsgd_mlp); ``rounds``: timed rounds (default the workload's;
  quick 2). Each process's record lands in ``federated``, the interleaved summaries
  (per-round ratios, profile of fedjax_dp's round) in ``interleaved``. ``clients``:
  clients of every workload (default the workload's; quick 10); ``micro``: run the
  microbenchmark."""
  fed, micros, inter = [], [], []
  clients = clients or (10 if quick else None)
  names = names or (["dpsgd_mlp"] if quick else list(workloads.DPSGD_WORKLOADS))
  micro_extra = (["--models", "mlp", "--batch-sizes", "20", "--repeat", "3",
                  "--matmul-size", "1024"]
                 if quick else ["--models", "mlp,cnn,user_cnn"])
  for wname in names:
    w = workloads.DPSGD_WORKLOADS[wname]
    if clients:
      w = dict(w, cohort_size=clients, num_clients=clients)
    n = rounds or (2 if quick else w["timed_rounds"])
    print(f"[benchmarks] {wname}: interleaved, {n} rounds", flush=True)
    summary = interleave.run(dpsgd_entries(wname, quick, peers, venv_dir, clients), w, n,
                             profile=not quick)
    fed += summary.pop("records")
    inter.append(summary)
  if micro:
    print("[benchmarks] dpsgd micro: fedjax_dp", flush=True)
    micros.append(_run([sys.executable, "-m", "benchmarks.dpsgd", "--micro",
                        *micro_extra]))
  if micro and peers:
    for peer in DPSGD_PEER_VARIANTS:
      print(f"[benchmarks] dpsgd micro: {peer}", flush=True)
      micros.append(_run([ensure_peer_venv(peer, venv_dir),
                          os.path.join(HERE, PEERS[peer]["script"]), "--micro",
                          "--models", "mlp,cnn,user_cnn"], env=peer_env(peer)))
  return {"dpsgd": {"federated": fed, "micro": micros, "interleaved": inter}}


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
  p.add_argument("--dpsgd-workloads", default=None,
                 help="section dpsgd: comma-separated workloads (default all: "
                      f"{','.join(workloads.DPSGD_WORKLOADS)})")
  p.add_argument("--dpsgd-rounds", type=int, default=None,
                 help="section dpsgd: interleaved timed rounds (default the workload's)")
  p.add_argument("--dpsgd-clients", type=int, default=None,
                 help="section dpsgd: clients per workload (default the workload's)")
  p.add_argument("--dpsgd-no-micro", action="store_true",
                 help="section dpsgd: skip the one-batch microbenchmark")
  p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
  p.add_argument("--json-dir", default=os.path.join(HERE, "results"))
  a = p.parse_args(argv)
  parts = set(a.only.split(","))
  unknown = parts - set(PARTS)
  if unknown:
    p.error(f"--only: unknown part(s) {sorted(unknown)}; choose from {', '.join(PARTS)}")
  bad = set((a.dpsgd_workloads or "").split(",")) - set(workloads.DPSGD_WORKLOADS) - {""}
  if bad:
    p.error(f"--dpsgd-workloads: unknown {sorted(bad)}; choose from "
            f"{', '.join(workloads.DPSGD_WORKLOADS)}")
  now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  result = {"timestamp": now, "quick": a.quick, "machine": common.machine_info()}
  if "peers" in parts:
    result.update(throughput(a.quick, not (a.quick or a.skip_peers), a.venv_dir))
    result["ratios"] = ratios(result["throughput"])
  if "dpsgd" in parts:
    result.update(dpsgd(a.quick, not (a.quick or a.skip_peers), a.venv_dir,
                        a.dpsgd_workloads.split(",") if a.dpsgd_workloads else None,
                        a.dpsgd_rounds, a.dpsgd_clients, not a.dpsgd_no_micro))
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
