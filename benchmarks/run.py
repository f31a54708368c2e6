"""Runs every benchmark in one go and records the results.

  python -m benchmarks.run                  # peers + roofline + scale (about 15 min on 2 cores)
  python -m benchmarks.run --only peers     # or roofline, scale (comma-separated)
  python -m benchmarks.run --quick          # tiny sizes: checks the plumbing (a test runs it)

Peers run in their own virtual environments under ``benchmarks/.venvs/`` (created on
first use, from PyPI): FedJAX 0.0.17 (``fedjax``) and pfl-research 0.6.0 with PyTorch
2.13.0 on the CPU (``pfl``; pfl pins dp-accounting < 0.6, so it cannot share our
environment). Every measurement runs alone, one after the other, so the frameworks
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
    "fedjax": {"script": "peer_fedjax.py", "install": [["fedjax==0.0.17"]]},
    # torch first, pinned: an unpinned torch from pfl's requirements would pull a
    # multi-GB CUDA build.
    "pfl": {"script": "peer_pfl.py",
            "install": [["torch==2.13.0"], ["pfl[pytorch]==0.6.0", "torch==2.13.0"]]},
}
TARGETS = {"pfl-research": 10.0, "fedjax": 5.0}


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
      python = ensure_peer_venv(peer, venv_dir)
      print(f"[benchmarks] {wname}: {peer}", flush=True)
      records.append(_run([python, os.path.join(HERE, spec["script"]), "--workload", wname,
                           *extra]))
  return {"throughput": records}


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
  p.add_argument("--only", default="peers,roofline,scale",
                 help="comma-separated subset of peers,roofline,scale")
  p.add_argument("--quick", action="store_true", help="tiny sizes, no peers")
  p.add_argument("--skip-peers", action="store_true",
                 help="throughput of fedjax_dp only (no peer environments)")
  p.add_argument("--venv-dir", default=os.path.join(HERE, ".venvs"))
  p.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"))
  p.add_argument("--json-dir", default=os.path.join(HERE, "results"))
  a = p.parse_args(argv)
  parts = set(a.only.split(","))
  unknown = parts - {"peers", "roofline", "scale"}
  if unknown:
    p.error(f"--only: unknown part(s) {sorted(unknown)}; choose from peers, roofline, scale")
  now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  result = {"timestamp": now, "quick": a.quick, "machine": common.machine_info()}
  if "peers" in parts:
    result.update(throughput(a.quick, not (a.quick or a.skip_peers), a.venv_dir))
    result["ratios"] = ratios(result["throughput"])
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
