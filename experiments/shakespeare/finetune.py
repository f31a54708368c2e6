"""User-level DP fine-tuning of a pre-trained character transformer: full vs LoRA vs
from scratch, at equal epsilon, on Shakespeare (the "pre-train on public text, fine-tune
privately" recipe of language models, at CPU scale).

Ideas reconstructed (not reproduced): Yu et al., "Differentially Private Fine-tuning of
Language Models", ICLR 2022 (arXiv:2110.06500): fine-tuning few parameters (LoRA) of a
publicly pre-trained model under DP beats full fine-tuning and training from scratch,
since the noise grows with the number of trained parameters; Xu et al., "Federated
Learning of Gboard Language Models with Differential Privacy", ACL 2023 Industry
(arXiv:2305.18465): pre-train on public data, then train with user-level DP-FedAvg.
LoRA: Hu et al., ICLR 2022 (`fedjax_dp.models.lora`).

Split: the 37 plays sorted by name; every third one (indices 0, 3, ..., 36: 13 plays)
is public, the other 24 private. The public clients' training windows, pooled, pre-train
``char_transformer`` (2 blocks of width 64) centrally, without privacy (Adam, batch 64,
learning rate 3e-3 with a cosine decay to a tenth). The private plays' clients are the
federated population; its test set is their per-client test windows, pooled and capped
at `settings`' ``test_cap`` (evenly spaced, deterministic). To fit the CPU budget every
window keeps its last ``context`` characters (40 of LEAF's 80; the target is the same).

On the private population, with the same rounds, cohort (fixed size, sampled without
replacement), local steps and batch size: user-level DP-FedAvg with the noise
multiplier calibrated by the library to ``target_epsilon`` (replace-one neighbours:
fixed-size sampling) for (a) the model from scratch, (b) full fine-tuning from the
pre-trained parameters (`fedjax_dp.models.pretrained`), (c) LoRA of rank r on every
dense kernel inside the blocks (`fedjax_dp.models.lora.lora`); FedAvg without privacy
for (b) and (c); and the pre-trained model's zero-shot accuracy. Seeds of one variant
run as one vmapped program (`fedjax_dp.runs.sweep.run_sweep` with ``model=``).

Usage:
  python experiments/shakespeare/finetune.py            # full: 30 rounds, 5 seeds
  python experiments/shakespeare/finetune.py --quick    # CI: tiny model, 3 rounds, 1 seed
  python experiments/shakespeare/finetune.py --resume   # only variants not yet saved
  python experiments/shakespeare/finetune.py --report-only
  python experiments/shakespeare/finetune.py --out DIR/finetune.json

Writes ``finetune.json`` (every run, the pre-training, the verdicts), ``finetune.md``
(the table) and ``finetune.pretrained.npz`` (the pre-trained parameters, reused by
``--resume``) into ``experiments/shakespeare/results/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from results_store import Results  # noqa: E402  (also enables the compile cache)
import scorecard  # noqa: E402  (experiments/scorecard.py)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import traverse_util  # noqa: E402

from fedjax_dp.data import FederatedData, load_dataset  # noqa: E402
from fedjax_dp.models import count_params, create_model, pretrained  # noqa: E402
from fedjax_dp.models.lora import lora  # noqa: E402
from fedjax_dp.runs import RunConfig  # noqa: E402
from fedjax_dp.runs.sweep import run_sweep  # noqa: E402

#: Non-inferiority margin of "LoRA >= full fine-tuning" (one accuracy point).
TOLERANCE = 0.01
CITATIONS = [
    "Hu, Shen, Wallis, Allen-Zhu, Li, Wang, Wang, Chen, \"LoRA: Low-Rank Adaptation of "
    "Large Language Models\", ICLR 2022, arXiv:2106.09685",
    "Yu, Naik, Backurs, Gopi, Inan, Kamath, Kulkarni, Lee, Manoel, Wutschitz, Yekhanin, "
    "Zhang, \"Differentially Private Fine-tuning of Language Models\", ICLR 2022, "
    "arXiv:2110.06500",
    "Xu, Zhang, Andrew, Choquette-Choo, Kairouz, McMahan, Rosenstock, Zhang, \"Federated "
    "Learning of Gboard Language Models with Differential Privacy\", ACL 2023 Industry "
    "Track, arXiv:2305.18465",
]


def settings(quick: bool) -> Dict[str, Any]:
  """The experiment's configuration. Clip norms and learning rates were chosen by a
  coarse pilot (finetune.md, "Tuning"); ``quick`` is a smoke test of the pipeline."""
  s = dict(context=40, hidden=[64, 64], public_every=3, pretrain_steps=1500,
           pretrain_batch=64, pretrain_lr=3e-3, test_cap=2000, rounds=30, cohort=30,
           local_steps=2, batch_size=16, eval_every=10, target_epsilon=8.0, delta=1e-4,
           seeds=[0, 1, 2, 3, 4], ranks=[4], lora_alpha=None,
           # FedAvg pilot (seed 0, 12 rounds): full {0.1, 0.3, 1}, LoRA {0.3, 1, 3}.
           client_lr={"scratch": 0.5, "full": 0.1, "lora": 1.0},
           # DP-FedAvg pilot (seed 0, 12 rounds): scratch {0.3, 1, 3}, full {0.03, 0.1,
           # 0.3}, LoRA {0.1, 0.3, 1}.
           clip_norm={"scratch": 0.3, "full": 0.03, "lora": 0.1},
           max_windows=None)
  if quick:
    s.update(context=8, hidden=[16], pretrain_steps=30, test_cap=200, rounds=3,
             cohort=8, eval_every=3, seeds=[0], max_windows=32)
  return s


def variants(s: Dict[str, Any]) -> List[Tuple[str, str, str, Optional[int]]]:
  """``(key, label, algorithm, lora rank or None)``; the kind is the key's prefix."""
  out = [("scratch_dp", "scratch, DP-FedAvg", "dp_fedavg", None),
         ("full_dp", "full fine-tuning, DP-FedAvg", "dp_fedavg", None)]
  out += [(f"lora{r}_dp", f"LoRA r={r}, DP-FedAvg", "dp_fedavg", r) for r in s["ranks"]]
  out += [("full_fedavg", "full fine-tuning, FedAvg (no DP)", "fedavg", None)]
  out += [(f"lora{r}_fedavg", f"LoRA r={r}, FedAvg (no DP)", "fedavg", r)
          for r in s["ranks"]]
  return out


def _even(n: int, k: int) -> np.ndarray:
  """``min(n, k)`` indices evenly spaced over ``range(n)``."""
  k = min(n, k)
  return (np.arange(k) * n) // k


def split(data: FederatedData, s: Dict[str, Any]):
  """``(public_plays, public train (x, y), public test (x, y), private FederatedData)``
  with windows cut to their last ``s["context"]`` characters (module docstring)."""
  t = s["context"]
  plays = sorted({c.split("/")[0] for c in data.client_ids})
  public = plays[::s["public_every"]]
  is_pub = np.array([c.split("/")[0] in public for c in data.client_ids])
  train_mask = data.example_mask
  assert data.client_test_x is not None and data.client_test_counts is not None
  test_mask = (np.arange(data.client_test_x.shape[1])[None]
               < data.client_test_counts[:, None])
  pub_train = (data.x[train_mask & is_pub[:, None]][:, -t:],
               data.y[train_mask & is_pub[:, None]])
  pt_x = data.client_test_x[test_mask & is_pub[:, None]][:, -t:]
  pt_y = data.client_test_y[test_mask & is_pub[:, None]]
  pick = _even(len(pt_y), s["test_cap"])
  pub_test = (pt_x[pick], pt_y[pick])
  qx = data.client_test_x[test_mask & ~is_pub[:, None]][:, -t:]
  qy = data.client_test_y[test_mask & ~is_pub[:, None]]
  pick = _even(len(qy), s["test_cap"])
  width = data.max_examples if s["max_windows"] is None else s["max_windows"]
  priv = FederatedData(
      name="shakespeare_private", x=np.ascontiguousarray(data.x[~is_pub, :width, -t:]),
      y=data.y[~is_pub, :width], counts=np.minimum(data.counts[~is_pub], width),
      num_classes=data.num_classes,
      client_ids=tuple(c for c, p in zip(data.client_ids, is_pub) if not p),
      test_x=qx[pick], test_y=qy[pick], source=data.source,
      partition=f"natural; the {len(plays) - len(public)} private plays")
  return public, pub_train, pub_test, priv


def accuracy(model, params, x, y, batch: int = 500) -> float:
  """Top-1 accuracy of ``model`` at ``params`` on ``x [n, T]``, ``y [n]``."""
  f = jax.jit(lambda p, xb: jnp.argmax(model.apply(p, xb), -1))
  hits = sum(int(np.sum(np.asarray(f(params, x[i:i + batch])) == y[i:i + batch]))
             for i in range(0, len(y), batch))
  return hits / len(y)


def pretrain(model, x, y, s: Dict[str, Any]):
  """Central non-private pre-training: Adam, cosine decay from ``pretrain_lr`` to a
  tenth, ``pretrain_steps`` steps of ``pretrain_batch`` windows drawn uniformly (seed
  0). Returns ``(params, final train loss, seconds)``."""
  steps = s["pretrain_steps"]
  opt = optax.adam(optax.cosine_decay_schedule(s["pretrain_lr"], steps, alpha=0.1))
  params = model.init(jax.random.key(0))
  state = opt.init(params)

  @jax.jit
  def step(p, st, xb, yb):
    loss, g = jax.value_and_grad(
        lambda q: jnp.mean(model.per_example_loss(model.apply(q, xb), yb)))(p)
    u, st = opt.update(g, st, p)
    return optax.apply_updates(p, u), st, loss

  rng = np.random.default_rng(0)
  t0, losses = time.perf_counter(), []
  for _ in range(steps):
    idx = rng.integers(0, len(y), s["pretrain_batch"])
    params, state, loss = step(params, state, x[idx], y[idx])
    losses.append(loss)
  jax.block_until_ready(params)
  final = float(np.mean([float(v) for v in losses[-50:]]))
  return params, final, time.perf_counter() - t0


def _save_params(path: str, params) -> None:
  flat = traverse_util.flatten_dict(jax.device_get(params), sep="/")
  np.savez(path, **{k: np.asarray(v) for k, v in flat.items()})


def _load_params(path: str):
  with np.load(path) as z:
    return traverse_util.unflatten_dict({k: z[k] for k in z.files}, sep="/")


def run_config(algorithm: str, kind: str, s: Dict[str, Any]) -> Dict[str, Any]:
  """`RunConfig.from_dict` table of one variant (its seeds are the sweep's)."""
  cfg = dict(algorithm=algorithm, rounds=s["rounds"], clients_per_round=s["cohort"],
             sampler="fixed_size", local_steps=s["local_steps"],
             batch_size=s["batch_size"], client_learning_rate=s["client_lr"][kind],
             eval_every=s["eval_every"], out=None, seed=s["seeds"][0])
  if algorithm == "dp_fedavg":
    cfg.update(clip_norm=s["clip_norm"][kind], target_epsilon=s["target_epsilon"],
               delta=s["delta"])
  return cfg


def _variant_model(key: str, rank: Optional[int], base, params, s):
  if key.startswith("scratch"):
    return base
  if rank is None:
    return pretrained(base, params)
  return lora(base, params, rank, alpha=s["lora_alpha"])


def run_variant(key: str, label: str, algorithm: str, rank: Optional[int], base, params,
                data: FederatedData, s: Dict[str, Any]) -> List[Dict[str, Any]]:
  """Every seed of one variant (one vmapped sweep); one record per seed."""
  kind = "lora" if rank is not None else key.split("_")[0]
  model = _variant_model(key, rank, base, params, s)
  trainable = count_params(model.init(jax.random.key(0)))
  cfg = RunConfig.from_dict(run_config(algorithm, kind, s))
  t0, c0 = time.perf_counter(), time.process_time()
  res = run_sweep(cfg, seeds=s["seeds"], data=data, model=model, progress=False)
  wall, cpu = time.perf_counter() - t0, time.process_time() - c0
  out = []
  for m in res.members:
    sm = m.summary
    out.append(dict(
        variant=key, label=label, algorithm=algorithm, seed=m.axes["seed"], rank=rank,
        final_accuracy=sm["final_test_accuracy"], final_loss=sm["final_test_loss"],
        epsilon=sm.get("epsilon") if algorithm == "dp_fedavg" else None,
        noise_multiplier=sm.get("noise_multiplier"),
        clip_norm=s["clip_norm"][kind] if algorithm == "dp_fedavg" else None,
        client_learning_rate=s["client_lr"][kind], trainable_params=trainable,
        upload_bytes_per_client=4 * trainable,
        upload_bytes_per_round=4 * trainable * s["cohort"],
        steady_s_per_round=sm.get("steady_time_per_round_s"),
        sweep_wall_s=wall, sweep_cpu_s=cpu, seeds_in_program=len(res.members),
        curve=[[r["round"], r["test_accuracy"]] for r in m.records
               if r.get("test_accuracy") is not None],
        mean_update_norm=[r.get("mean_update_norm") for r in m.records][-1],
        clip_fraction=[r.get("clip_fraction") for r in m.records][-1]))
  return out


def _by(runs, key):
  rs = sorted((r for r in runs if r["variant"] == key), key=lambda r: r["seed"])
  return [r["final_accuracy"] for r in rs], [r["seed"] for r in rs]


def verdicts(runs: List[Dict[str, Any]], s: Dict[str, Any],
             zero_shot: Optional[float]) -> List[Dict[str, str]]:
  """The claims judged by `scorecard`'s rules (seed-paired 95% CIs)."""
  rows = []
  full, seeds_f = _by(runs, "full_dp")
  scratch, seeds_s = _by(runs, "scratch_dp")
  for r in s["ranks"]:
    lo, seeds_l = _by(runs, f"lora{r}_dp")
    if lo and full:
      v = scorecard.not_worse(lo, full, TOLERANCE, seeds_a=seeds_l, seeds_b=seeds_f)
      rows.append(dict(claim=f"LoRA r={r} >= full fine-tuning at equal epsilon "
                       f"(not worse by more than {TOLERANCE:g})", verdict=v.verdict,
                       detail=v.detail))
    if lo and scratch:
      v = scorecard.greater(lo, scratch, seeds_a=seeds_l, seeds_b=seeds_s)
      rows.append(dict(claim=f"fine-tuning (LoRA r={r}) > scratch at equal epsilon",
                       verdict=v.verdict, detail=v.detail))
  if full and scratch:
    v = scorecard.greater(full, scratch, seeds_a=seeds_f, seeds_b=seeds_s)
    rows.append(dict(claim="fine-tuning (full) > scratch at equal epsilon",
                     verdict=v.verdict, detail=v.detail))
  if zero_shot is not None:
    for key in ["full_dp"] + [f"lora{r}_dp" for r in s["ranks"]]:
      vals, seeds = _by(runs, key)
      if vals:
        v = scorecard.greater(vals, [zero_shot] * len(vals), seeds_a=seeds, seeds_b=seeds)
        rows.append(dict(claim=f"{key}: DP fine-tuning > the pre-trained model "
                         "(zero-shot)", verdict=v.verdict, detail=v.detail))
  return rows


def _fmt_bytes(b: float) -> str:
  return f"{b / 1024:,.1f} KiB" if b < 1024 ** 2 else f"{b / 1024 ** 2:,.2f} MiB"


def report(runs: List[Dict[str, Any]], meta: Dict[str, Any], rows) -> str:
  """The markdown table and verdicts."""
  s, pre = meta["settings"], meta.get("pretraining", {})
  lines = [
      f"Shakespeare, private population: {meta.get('private_clients')} clients of the "
      f"{meta.get('private_plays')} private plays; windows cut to the last "
      f"{s['context']} characters; char_transformer {tuple(s['hidden'])} pre-trained on "
      f"the {meta.get('public_plays_count')} public plays. {s['rounds']} rounds, "
      f"{s['cohort']} clients a round (fixed size, without replacement), "
      f"{s['local_steps']} local SGD steps of {s['batch_size']}; DP: target epsilon "
      f"{s['target_epsilon']:g}, delta {s['delta']:g} (replace-one, user level). Test: "
      f"{meta.get('private_test')} private test windows. Accuracy: mean [95% Student-t "
      f"CI] over seeds {s['seeds']}.", "",
      f"Pre-training: {pre.get('steps')} steps in {pre.get('seconds', math.nan):.0f} s; "
      f"accuracy on public test windows {pre.get('public_accuracy', math.nan):.3f}, "
      f"zero-shot on the private test set {pre.get('zero_shot_accuracy', math.nan):.3f}.",
      "",
      "| variant | final test accuracy | epsilon spent | noise mult. z | clip C | "
      "client lr | trainable params | upload / client / round | upload / round | "
      "s / round (all seeds, one program) |",
      "|---|---|---|---|---|---|---|---|---|---|"]
  if "zero_shot_accuracy" in pre:
    lines.append(f"| pre-trained, zero-shot | {pre['zero_shot_accuracy']:.3f} | - | - | - "
                 f"| - | 0 | 0 | 0 | - |")
  for key, label, alg, _ in variants(s):
    rs = [r for r in runs if r["variant"] == key]
    if not rs:
      continue
    acc = scorecard.fmt(scorecard.summarize([r["final_accuracy"] for r in rs]))
    eps = [r["epsilon"] for r in rs if r["epsilon"] is not None]
    r0 = rs[0]
    steady = r0.get("steady_s_per_round")
    lines.append(
        f"| {label} | {acc} | {max(eps):.3f} | " if eps else f"| {label} | {acc} | - | ")
    lines[-1] += (f"{r0['noise_multiplier']:.3f} | {r0['clip_norm']:g} | "
                  if r0["noise_multiplier"] is not None and r0["clip_norm"] is not None
                  else "- | - | ")
    lines[-1] += (f"{r0['client_learning_rate']:g} | {r0['trainable_params']:,} | "
                  f"{_fmt_bytes(r0['upload_bytes_per_client'])} | "
                  f"{_fmt_bytes(r0['upload_bytes_per_round'])} | "
                  + (f"{steady:.2f} |" if steady is not None else "- |"))
  lines += ["", "| claim | verdict | rule and interval |", "|---|---|---|"]
  lines += [f"| {r['claim']} | **{r['verdict']}** | {r['detail']} |" for r in rows]
  return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="CI size: tiny model, 3 rounds")
  p.add_argument("--out", default=os.path.join(HERE, "results", "finetune.json"))
  p.add_argument("--resume", action="store_true", help="skip variants already in --out")
  p.add_argument("--report-only", action="store_true",
                 help="no training: rewrite the markdown from --out's runs")
  args = p.parse_args(argv)
  logging.getLogger("fedjax_dp.privacy.accountants").setLevel(logging.ERROR)
  t_start, c_start = time.perf_counter(), time.process_time()
  s = settings(args.quick)
  base_path = os.path.splitext(args.out)[0]
  data = load_dataset("shakespeare")
  public, (px, py), (ptx, pty), priv = split(data, s)
  meta: Dict[str, Any] = dict(
      settings=s, quick=args.quick, citations=CITATIONS, public_plays=public,
      public_plays_count=len(public), private_plays=len({c.split("/")[0]
                                                         for c in priv.client_ids}),
      private_clients=priv.num_clients, private_test=len(priv.test_y),
      public_train_windows=len(py), public_test=len(pty),
      private_majority_class_accuracy=priv.majority_class_accuracy())
  resume = args.resume or args.report_only
  if resume and os.path.exists(args.out):
    with open(args.out) as f:
      old = json.load(f)["meta"]
    if old.get("settings") == s:
      meta = {**old, **meta}
  res = Results(args.out, meta, resume=resume)
  base = create_model("char_transformer", (s["context"],), priv.num_classes,
                      hidden=tuple(s["hidden"]))
  params_path = base_path + ".pretrained.npz"
  if not args.report_only:
    if resume and os.path.exists(params_path) and "pretraining" in meta:
      params = jax.tree_util.tree_map(jnp.asarray, _load_params(params_path))
    else:
      params, loss, secs = pretrain(base, px, py, s)
      _save_params(params_path, params)
      meta["pretraining"] = dict(
          steps=s["pretrain_steps"], seconds=secs, final_train_loss=loss,
          public_accuracy=accuracy(base, params, ptx, pty),
          zero_shot_accuracy=accuracy(base, params, priv.test_x, priv.test_y),
          params=count_params(params))
      print(f"pre-training: {secs:.1f} s, loss {loss:.3f}, public acc "
            f"{meta['pretraining']['public_accuracy']:.3f}, zero-shot private acc "
            f"{meta['pretraining']['zero_shot_accuracy']:.3f}", flush=True)
    res.meta = meta
    for key, label, alg, rank in variants(s):
      if all(res.has(variant=key, seed=sd) for sd in s["seeds"]):
        continue
      recs = run_variant(key, label, alg, rank, base, params, priv, s)
      for r in recs:
        res.add(r)
      accs = [r["final_accuracy"] for r in recs]
      print(f"{key:14s} acc {np.mean(accs):.3f} ({', '.join(f'{a:.3f}' for a in accs)}) "
            f"z {recs[0]['noise_multiplier']} eps {recs[0]['epsilon']} "
            f"trainable {recs[0]['trainable_params']:,} "
            f"{recs[0]['sweep_wall_s']:.0f} s", flush=True)
  rows = verdicts(res.runs, s, meta.get("pretraining", {}).get("zero_shot_accuracy"))
  meta["verdicts"] = rows
  if not args.report_only:
    meta["total_wall_s"] = time.perf_counter() - t_start
    meta["total_cpu_s"] = time.process_time() - c_start
  res.meta = meta
  res.save()
  md = report(res.runs, meta, rows)
  with open(base_path + ".md", "w") as f:
    f.write(md)
  print(md)
  return res


if __name__ == "__main__":
  main()
