"""Shakespeare character LSTM: user-level DP-FedAvg, fedjax_dp against pfl-research.

LEAF's Shakespeare model (``Embed(81, 8)`` -> LSTM(256) -> LSTM(256) -> ``Dense(81)``
on the last of 80 time steps) trained with user-level DP-FedAvg on the real
Shakespeare data (`fedjax_dp.data.load_dataset("shakespeare")`), in fedjax_dp and in
Apple's pfl-research 0.6.0 on its PyTorch backend (`benchmarks/peer_pfl_lm.py`, run in
the ``pfl`` environment of `benchmarks.run`). The workload is `WORKLOAD`: a cohort of
10 clients (fixed size), each one local epoch over its first 64 training windows in
batches of 16 (4 steps, client SGD lr 1), clip of each client's update to C, Gaussian
noise z C on the sum, FedAvg at server lr 1.

Both sides read one exported ``.npz`` (`export_clients`): the population (every role
with at least 64 training windows, its first 64 windows), the workload and two fixed
evaluation sets of 512 windows (training windows of the population; the central
test set). Every sampled client then runs exactly 4 local steps on either side, so a
round costs the same whichever clients the two samplers draw.

The driver (`interleaved`) starts both sides as serve-mode processes
(`benchmarks.common.serve`; `benchmarks.interleave.Server`), each built and warmed up
once (fedjax_dp: the compiling round; pfl: its first round, which evaluates), then
runs one timed round per side in an order rotated every round, so that a slow
stretch of the shared machine hits both. Only one process computes at a time.
Both start from the same parameters (fedjax_dp's initialisation, exported as
``init.*``; checked: equal initial losses). Evaluation (``eval``: the central model's
mean cross-entropy on both sets) happens before the first and after the last timed
round, and a ``profile`` round per side (fedjax_dp: a `jax.profiler` trace, each op
placed by its HLO ``op_name``; pfl: ``cProfile`` and ``torch.profiler``) follows the
timed rounds; none of these is timed. At z = 1 the noise on the average
(std z C / 10 = 0.1 per coordinate, norm about 90 over 818k parameters, against an
average update of norm <= 1) swamps the updates and the loss rises on both sides; a
second interleaved run at ``--loss-check-z`` (default 0.01; the noise draw costs the
same at any z) shows that both sides train, and is a second timing sample.

  python -m benchmarks.lm                       # export, serve both, write the record
  python -m benchmarks.lm --source random --rounds 2   # random tokens (plumbing)
  python -m benchmarks.lm --serve --data F.npz  # the fedjax_dp side alone (protocol)
  python -m benchmarks.lm --markdown F.json     # the RESULTS.md tables of a record
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import sys
import time
from typing import Dict, List, Optional

from benchmarks import common, interleave

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "2026-11-27_shakespeare_lstm_pfl_cpu.json")

WORKLOAD = dict(
    name="shakespeare_lstm",
    model="LEAF char LSTM: Embed(81, 8) - LSTM(256) - LSTM(256) - Dense(81), last step",
    seq_len=80,
    vocab_size=81,
    embed_dim=8,
    hidden=256,
    num_layers=2,
    examples_per_client=64,
    cohort_size=10,
    local_epochs=1,
    batch_size=16,
    client_learning_rate=1.0,
    server_learning_rate=1.0,
    clip_norm=1.0,
    noise_multiplier=1.0,
    warmup_rounds=1,
    timed_rounds=7,
    eval_windows=512,
)
OURS = "fedjax_dp"
PEER = "pfl-research"


# --- The shared data ---------------------------------------------------------------


def _even(n: int, k: int):
  """``min(n, k)`` indices evenly spaced over ``range(n)``."""
  import numpy as np
  k = min(n, k)
  return (np.arange(k, dtype=np.int64) * n) // max(k, 1)


def _population(source: str, w: dict, random_clients: int = 100):
  """``(x uint8 [C, n, 80], y uint8 [C, n], test_x, test_y, client_ids, description)``:
  the real Shakespeare roles with at least ``n`` training windows (their first ``n``)
  and the central test set, or uniformly random tokens of the same shapes."""
  import numpy as np
  n, t, v = w["examples_per_client"], w["seq_len"], w["vocab_size"]
  if source == "random":
    rng = np.random.default_rng(0)
    x = rng.integers(0, v, (random_clients, n, t), dtype=np.uint8)
    y = rng.integers(0, v, (random_clients, n), dtype=np.uint8)
    tx = rng.integers(0, v, (w["eval_windows"], t), dtype=np.uint8)
    ty = rng.integers(0, v, (w["eval_windows"],), dtype=np.uint8)
    ids = [f"random_{i}" for i in range(random_clients)]
    return x, y, tx, ty, ids, f"uniformly random tokens, {random_clients} clients"
  from fedjax_dp.data import load_dataset
  fd = load_dataset("shakespeare")
  keep = np.flatnonzero(np.asarray(fd.counts) >= n)
  x = np.rint(np.asarray(fd.x)[keep, :n]).astype(np.uint8)
  y = np.asarray(fd.y)[keep, :n].astype(np.uint8)
  tx = np.rint(np.asarray(fd.test_x)).astype(np.uint8)
  ty = np.asarray(fd.test_y).astype(np.uint8)
  ids = [fd.client_ids[i] for i in keep]
  desc = (f"fedjax_dp shakespeare ({fd.source}); the {len(keep)} of {fd.num_clients} "
          f"roles with >= {n} training windows, their first {n} (of the evenly spaced "
          f"kept windows)")
  return x, y, tx, ty, ids, desc


def export_clients(path: str, source: str = "shakespeare", w: Optional[dict] = None) -> dict:
  """Writes the population and evaluation sets both sides train and evaluate on.

  ``.npz`` fields: ``x`` uint8 ``[C, n, 80]`` token ids, ``y`` uint8 ``[C, n]``,
  ``counts`` int32 ``[C]`` (all ``n``), ``client_ids``, ``eval_train_x/y`` (512
  windows evenly spaced over the population's training windows), ``eval_test_x/y``
  (512 evenly spaced over the central test set), ``init.*`` (`initial_params`) and
  ``meta``: JSON of the workload, the source and the shapes. Returns the meta dict."""
  import numpy as np
  w = dict(w or WORKLOAD)
  x, y, tx, ty, ids, desc = _population(source, w)
  flat_x, flat_y = x.reshape(-1, x.shape[-1]), y.reshape(-1)
  tr = _even(len(flat_y), w["eval_windows"])
  te = _even(len(ty), w["eval_windows"])
  meta = {"workload": w, "source": source, "data": desc, "num_clients": int(x.shape[0]),
          "examples_per_client": int(x.shape[1]), "eval_train_windows": int(len(tr)),
          "eval_test_windows": int(len(te))}
  np.savez(path, x=x, y=y, counts=np.full(x.shape[0], x.shape[1], np.int32),
           client_ids=np.array(ids), eval_train_x=flat_x[tr], eval_train_y=flat_y[tr],
           eval_test_x=tx[te], eval_test_y=ty[te], meta=np.array(json.dumps(meta)),
           **initial_params(w))
  return meta


def initial_params(w: dict, seed: int = 0) -> dict:
  """fedjax_dp's initial LSTM parameters (``model.init(jax.random.key(seed))``, what
  `serve_fedjax`'s ``alg.init`` starts from) as ``{"init.<module>.<name>": array}``, so
  that the torch side starts from the same model."""
  import jax
  import numpy as np
  from fedjax_dp.models import create_model
  params = create_model("char_lstm", (w["seq_len"],), w["vocab_size"]).init(
      jax.random.key(seed))
  return {"init." + ".".join(str(k.key) for k in path): np.asarray(a)
          for path, a in jax.tree_util.tree_leaves_with_path(params)}


def load_export(path: str) -> dict:
  """The arrays of `export_clients`'s file, plus ``meta`` as a dict."""
  import numpy as np
  with np.load(path) as f:
    d = {k: f[k] for k in f.files}
  d["meta"] = json.loads(str(d["meta"]))
  return d


# --- The fedjax_dp side --------------------------------------------------------------


def build(d: dict, mesh=None):
  """``(algorithm, device population, model)``: DP-FedAvg on the exported clients, built
  with the arguments `benchmarks.throughput.build` gives `dp_fedavg`."""
  import jax.numpy as jnp
  import numpy as np
  from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
  from fedjax_dp.data.federated_data import from_client_lists
  from fedjax_dp.federated import PopulationData
  from fedjax_dp.models import create_model

  w = d["meta"]["workload"]
  xs = [c.astype(np.float32) for c in d["x"]]
  ys = [c.astype(np.int32) for c in d["y"]]
  fd = from_client_lists(w["name"], xs, ys, num_classes=w["vocab_size"])
  model = create_model("char_lstm", (w["seq_len"],), w["vocab_size"])
  alg = dp_fedavg(model, fd, clip_norm=w["clip_norm"],
                  noise_multiplier=w["noise_multiplier"], sampler="fixed_size",
                  clients_per_round=w["cohort_size"], local_epochs=w["local_epochs"],
                  batch_size=w["batch_size"], client_learning_rate=w["client_learning_rate"],
                  server_learning_rate=w["server_learning_rate"], mesh=mesh)
  data = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  return alg, data, model


def eval_fn(model, d: dict, batch: int = 128):
  """``fn(params) -> {"train": CE, "test": CE}``: mean cross-entropy of the central model
  on the two exported evaluation sets (jitted forward, batches of ``batch``)."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  @jax.jit
  def ce_sum(params, x, y):
    return jnp.sum(model.per_example_loss(model.apply(params, x), y))

  sets = {k: (d[f"eval_{k}_x"].astype(np.float32), d[f"eval_{k}_y"].astype(np.int32))
          for k in ("train", "test")}

  def fn(params):
    out = {}
    for k, (x, y) in sets.items():
      total = sum(float(ce_sum(params, x[i:i + batch], y[i:i + batch]))
                  for i in range(0, len(y), batch))
      out[k] = total / len(y)
    return out

  return fn


# Where the traced op time of a round goes, by the op's place in the program (its HLO
# ``op_name``: ``jvp(CharLSTM)`` is the forward pass of local training,
# ``transpose(jvp(CharLSTM))`` the backward pass; ``recurrence/while`` the scan over
# the 80 time steps; ``vmap()/while/body`` a client's loop of local steps). ``dims``:
# the op's result dimensions. Checked in this order; the
# first match wins.
PROFILE_CATEGORIES = (
    ("backward recurrence: W_h gradient, one [H, 4H] dot + accumulate per time step",
     lambda op, dims, h: "transpose(" in op and "recurrence/while" in op
     and sorted(dims[-2:]) == [h, 4 * h]),
    ("backward recurrence: other (dh = delta W_h^T, gates)",
     lambda op, dims, h: "transpose(" in op and "recurrence/while" in op),
    ("forward recurrence (h W_h, gates)",
     lambda op, dims, h: "recurrence/while" in op),
    ("rest of local training (input projections, embedding, output layer, loss, SGD)",
     lambda op, dims, h: "CharLSTM" in op or "vmap()/while/body" in op),
    ("rest of the round (sampling, gather, clip, noise, server step, loop copies)",
     lambda op, dims, h: True),
)


def _hlo_ops(hlo: str) -> Dict[str, tuple]:
  """``{instruction name: (result dims, op_name metadata)}`` of compiled HLO text. An
  instruction whose metadata lost its ``op_name`` (XLA keeps only a stack frame on
  some rewritten dots and fusions) takes that of a user, else of an operand, in the
  same computation."""
  import re
  inst = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]\S* (.*)$")
  ops, comp_of, refs = {}, {}, {}
  comp = 0
  for line in hlo.splitlines():
    if line.endswith("{") and not line.startswith(" "):
      comp += 1
    m = inst.match(line)
    if not m:
      continue
    name, rest = m.group(1), m.group(4)
    op = re.search(r'op_name="([^"]*)"', rest)
    dims = [int(v) for v in m.group(3).split(",") if v]
    ops[name] = (dims, op.group(1) if op else "")
    comp_of[name] = comp
    refs[name] = re.findall(r"(?<![=\w])%([\w.\-]+)", rest.split("calls=")[0])
  users: Dict[str, List[str]] = {}
  for name, operands in refs.items():
    for o in operands:
      users.setdefault(o, []).append(name)
  for name, (dims, op) in list(ops.items()):
    if op:
      continue
    near = [ops[n][1] for n in users.get(name, []) + refs[name]
            if comp_of.get(n) == comp_of[name] and ops.get(n, ((), ""))[1]]
    near.sort(key=lambda op: "CharLSTM" not in op)  # stable: model ops first
    if near:
      ops[name] = (dims, near[0])
  return ops


def profile_breakdown(run_round, hlo: str, hidden: int, top: int = 12) -> dict:
  """One more round under `benchmarks.dpsgd.profile_round` (``jax.profiler``); every
  traced XLA op is placed in a `PROFILE_CATEGORIES` group by its HLO metadata (``hlo``:
  the round's compiled text). Returns the round's seconds, each group's op time (ms
  and share of the summed op time over the CPU threads) and the ``top`` ops."""
  from benchmarks.dpsgd import profile_round
  prof = profile_round(run_round, top=10**6)
  ops = _hlo_ops(hlo)
  groups = {label: {"ms": 0.0, "calls": 0} for label, _ in PROFILE_CATEGORIES}
  for row in prof["top_ops"]:
    dims, op = ops.get(row["op"], ([], ""))
    row["op_name"] = op
    for label, match in PROFILE_CATEGORIES:
      if match(op, dims, hidden):
        groups[label]["ms"] += row["ms"]
        groups[label]["calls"] += row["calls"]
        row["group"] = label
        break
  for g in groups.values():
    g["share"] = g["ms"] / prof["op_ms_total"]
  prof["groups"] = groups
  prof["top_ops"] = prof["top_ops"][:top]
  return prof


def serve_fedjax(data_path: str, devices: int, seed: int = 0, warmup: Optional[int] = None):
  """The fedjax_dp side in serve mode (`benchmarks.common.serve`; extra commands
  ``eval`` and ``profile``): rounds as `benchmarks.throughput.time_rounds` runs them
  (one jitted call per round, ``block_until_ready`` on the new parameters)."""
  from fedjax_dp.federated.sharding import split_host_cpu
  split_host_cpu(devices)  # before JAX's first computation
  import jax
  from fedjax_dp.federated import make_block_fn
  from fedjax_dp.federated.driver import constant_schedule
  from fedjax_dp.federated.sharding import client_mesh, replicate

  d = load_export(data_path)
  w = d["meta"]["workload"]
  warmup = w["warmup_rounds"] if warmup is None else warmup
  mesh = client_mesh() if jax.device_count() > 1 else None
  alg, data, model = build(d, mesh)
  data = replicate(data, mesh)
  block = make_block_fn(alg.round_fn)
  sched = constant_schedule(alg.hparams, 1)
  key = jax.random.key(seed)
  box = {"state": replicate(alg.init(jax.random.key(seed)), mesh)}
  evaluate = eval_fn(model, d)
  initial = evaluate(box["state"].params)
  n_params = sum(int(a.size) for a in jax.tree_util.tree_leaves(box["state"].params))

  def run_round(r):
    box["state"], metrics = block(box["state"], data, sched, key)
    jax.block_until_ready(box["state"].params)
    return float(metrics.train_loss[0])

  def profile():
    hlo = block.lower(box["state"], data, sched, key).compile().as_text()
    return profile_breakdown(run_round, hlo, w["hidden"])

  def finish(seconds, losses):
    return _fedjax_record(w, alg, seconds, losses, initial, n_params)

  common.serve(run_round, warmup, finish,
               ready_info={"framework": OURS, "initial_eval": initial, "params": n_params,
                           "devices": jax.device_count()},
               extras={"eval": lambda: {"loss": evaluate(box["state"].params)},
                       "profile": profile})


def _fedjax_record(w, alg, seconds, losses, initial, n_params) -> dict:
  """fedjax_dp's `benchmarks.common.throughput_record` of the timed rounds."""
  import jax
  from fedjax_dp.federated import chunking
  versions = {p: md.version(p) for p in ("jax", "jaxlib", "flax", "optax", "numpy")}
  versions["fedjax_dp"] = md.version("fedjax_dp")
  return common.throughput_record(
      OURS, versions, w, seconds, backend=jax.default_backend(),
      device=str(jax.devices()[0].device_kind), devices=jax.device_count(),
      round_train_losses=losses, initial_eval=initial,
      sampler=alg.config["sampler"], k_max=alg.k_max,
      chunk_size=("auto: 1 client per device and chunk (CPU_PARAMS_PER_CHUNK // "
                  f"{n_params:,} parameters = {chunking.CPU_PARAMS_PER_CHUNK // n_params}, at "
                  "least 1)"),
      notes="dp_fedavg (fixed-size cohort, per-client l2 clip of the whole update, one "
            "central Gaussian draw on the sum, fixed denominator = cohort size, FedAvg "
            "server lr 1), one jitted call per round (make_block_fn, block size 1), cohort "
            "sharded over the host CPU devices; round_train_losses: the clients' mean "
            "local training loss of every round (warm-up included)")


# --- The driver: both sides interleaved ---------------------------------------------


def entries(data_path: str, pfl_python: str, devices: int, omp_passive: bool = False
            ) -> List[interleave.Entry]:
  """The two serve-mode processes: fedjax_dp in this Python, pfl in its environment
  (``OMP_WAIT_POLICY=PASSIVE`` for torch with ``omp_passive``)."""
  env = dict(os.environ)
  if omp_passive:
    env["OMP_WAIT_POLICY"] = "PASSIVE"
  return [
      interleave.Entry(OURS, [sys.executable, "-m", "benchmarks.lm", "--serve", "--data",
                              data_path, "--devices", str(devices)]),
      interleave.Entry(PEER, [pfl_python, os.path.join(HERE, "peer_pfl_lm.py"), "--serve",
                              "--data", data_path], env=env),
  ]


def _ask_all(servers, command: str, timeout: float) -> Dict[str, dict]:
  """Sends ``command`` to every server in turn; its answers by label."""
  return {s.label: s.ask(command, command, timeout) for s in servers}


def interleaved(ents: List[interleave.Entry], rounds: int, timeout: float = 1800.0,
                profile: bool = True, log=print) -> dict:
  """Serves ``ents`` (built and warmed up one after the other), evaluates both, runs
  ``rounds`` timed rounds per side in rotating order, evaluates again, then (with
  ``profile``) one profiled round each; returns the raw messages."""
  import tempfile
  log_dir = tempfile.mkdtemp(prefix="interleave_shakespeare_lstm_")
  servers: List[interleave.Server] = []
  out = {"ready": {}, "rounds": {e.label: [] for e in ents}, "order": [],
         "log_dir": log_dir}
  try:
    for e in ents:
      s = interleave.Server(e, log_dir)
      servers.append(s)
      out["ready"][e.label] = dict(s.ask(None, "ready", timeout),
                                   ready_s=time.perf_counter() - s.t0)
      log(f"[lm] {e.label} ready ({out['ready'][e.label]['ready_s']:.1f} s with warm-up)")
    out["eval_before"] = {k: m["loss"] for k, m in _ask_all(servers, "eval", timeout).items()}
    for r in range(rounds):
      k = r % len(servers)
      order = servers[k:] + servers[:k]
      out["order"].append([s.label for s in order])
      for s in order:
        out["rounds"][s.label].append(s.ask("round", "round", timeout))
      log(f"[lm] round {r}: " + ", ".join(
          f"{s.label} {out['rounds'][s.label][-1]['seconds']:.3f} s" for s in order))
    out["eval_after"] = {k: m["loss"] for k, m in _ask_all(servers, "eval", timeout).items()}
    if profile:
      out["profile"] = _ask_all(servers, "profile", timeout)
      log("[lm] profiled one more round per side")
    out["records"] = {s.label: s.ask("done", "record", timeout)["record"] for s in servers}
    return out
  finally:
    for s in servers:
      s.close()


def summarize(raw: dict) -> dict:
  """Per side: round seconds, median/min/max; the ratio pfl / fedjax_dp of the medians
  and the per-round ratios (round r of both) with their median."""
  med = common._median  # pylint: disable=protected-access
  per = {}
  for label, msgs in raw["rounds"].items():
    secs = [m["seconds"] for m in msgs]
    per[label] = {"round_seconds": secs, "median_s": med(secs), "min_s": min(secs),
                  "max_s": max(secs), "warmup_seconds": raw["ready"][label]["warmup_seconds"],
                  "ready_s": raw["ready"][label]["ready_s"],
                  "initial_eval": raw["ready"][label].get("initial_eval"),
                  "eval_before": raw["eval_before"][label],
                  "eval_after": raw["eval_after"][label]}
  ours, peer = per[OURS]["round_seconds"], per[PEER]["round_seconds"]
  pr = [p / o for p, o in zip(peer, ours)]
  a, b = per[OURS]["initial_eval"], per[PEER]["initial_eval"]
  same = bool(a and b and all(abs(a[k] - b[k]) < 1e-4 for k in a))
  return {"frameworks": per, "same_initial_model": same,
          "ratio_pfl_over_fedjax_dp": {"of_medians": per[PEER]["median_s"] /
                                       per[OURS]["median_s"],
                                       "per_round": pr, "median_of_round_ratios": med(pr)}}


def pfl_python(venv_dir: str) -> str:
  """pfl's Python (`benchmarks.run.ensure_peer_venv`: created on first use)."""
  from benchmarks import run
  return run.ensure_peer_venv("pfl", venv_dir)


def with_noise(path: str, z: float) -> str:
  """A copy of the export ``path`` whose workload has noise multiplier ``z``."""
  import numpy as np
  d = load_export(path)
  d["meta"]["workload"] = dict(d["meta"]["workload"], noise_multiplier=z)
  d["meta"] = np.array(json.dumps(d["meta"]))
  out = path[:-len(".npz")] + f"_z{z:g}.npz"
  np.savez(out, **d)
  return out


def _print_summary(tag: str, rec: dict) -> None:
  """Prints `summarize`'s medians, evaluations and ratio."""
  for label, per in rec["frameworks"].items():
    print(f"[lm] {tag} {label}: median {per['median_s']:.3f} s/round (min "
          f"{per['min_s']:.3f}, max {per['max_s']:.3f}); eval CE {per['eval_before']} -> "
          f"{per['eval_after']}", flush=True)
  r = rec["ratio_pfl_over_fedjax_dp"]
  print(f"[lm] {tag} pfl / fedjax_dp: {r['of_medians']:.2f}x (median of round ratios "
        f"{r['median_of_round_ratios']:.2f}x)", flush=True)


def run_benchmark(a) -> dict:
  """The timed interleaved run (the workload's z, profiles) and, with
  ``a.loss_check_z``, a second interleaved run at that noise multiplier (no
  profiles) whose evaluations show whether both sides train; returns the record."""
  import tempfile
  data = a.data
  if data is None:
    data = os.path.join(tempfile.mkdtemp(prefix="shakespeare_lstm_"), "clients.npz")
    export_clients(data, a.source)
  meta = load_export(data)["meta"]
  python = pfl_python(a.venv_dir)
  load = [os.getloadavg()]
  raw = interleaved(entries(data, python, a.devices, a.omp_passive), a.rounds,
                    profile=not a.no_profile)
  load.append(os.getloadavg())
  record = {"benchmark": "shakespeare_lstm_user_dp_fedavg", "date": "2026-11-27",
            "machine": common.machine_info(), "workload": meta["workload"],
            "data": {k: v for k, v in meta.items() if k != "workload"},
            "data_file": data, "timed_rounds": a.rounds, "order": raw["order"],
            "fedjax_dp_devices": a.devices, "pfl_omp_wait_policy_passive": a.omp_passive,
            **summarize(raw), "profile": raw.get("profile"), "records": raw["records"],
            "log_dir": raw["log_dir"]}
  _print_summary("timed", record)
  if a.loss_check_z is not None:
    check = interleaved(entries(with_noise(data, a.loss_check_z), python, a.devices,
                                a.omp_passive), a.rounds, profile=False)
    load.append(os.getloadavg())
    record["loss_check"] = dict(noise_multiplier=a.loss_check_z, order=check["order"],
                                **summarize(check))
    _print_summary(f"loss check (z={a.loss_check_z:g})", record["loss_check"])
  record["load_average_1_5_15min"] = load
  return record


def _eval_txt(per: dict, key: str = "train") -> str:
  return f"{per['eval_before'][key]:.3f} -> {per['eval_after'][key]:.3f}"


def markdown(rec: dict) -> str:
  """The tables of the RESULTS.md section from `run_benchmark`'s record."""
  w, m = rec["workload"], rec["machine"]
  fr, ratio = rec["frameworks"], rec["ratio_pfl_over_fedjax_dp"]
  check = rec.get("loss_check")
  lines = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, no GPU; "
           "load averages (1/5/15 min) before, after the timed run and after the check: "
           + "; ".join("/".join(f"{v:.1f}" for v in la)
                       for la in rec["load_average_1_5_15min"]) + ".", "",
           "| side | versions | median s/round | min | max | eval CE train (test) at z = "
           f"{w['noise_multiplier']:g}, before -> after |"
           + (f" s/round at z = {check['noise_multiplier']:g} (median) | eval CE train "
              f"(test) at z = {check['noise_multiplier']:g} |" if check else ""),
           "|---|---|---|---|---|---|" + ("---|---|" if check else "")]
  for label, per in fr.items():
    r = rec["records"][label]
    ver = ", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items()))
    row = (f"| {label} | {ver} | {per['median_s']:.2f} | {per['min_s']:.2f} | "
           f"{per['max_s']:.2f} | {_eval_txt(per)} ({_eval_txt(per, 'test')}) |")
    if check:
      c = check["frameworks"][label]
      row += f" {c['median_s']:.2f} | {_eval_txt(c)} ({_eval_txt(c, 'test')}) |"
    lines.append(row)
  lines += ["", f"pfl / fedjax_dp time per round: {ratio['of_medians']:.2f} (ratio of the "
            f"medians), {ratio['median_of_round_ratios']:.2f} (median of the per-round "
            "ratios: " + ", ".join(f"{x:.2f}" for x in ratio["per_round"]) + ")"
            + (f"; loss-check run {check['ratio_pfl_over_fedjax_dp']['of_medians']:.2f} "
               f"/ {check['ratio_pfl_over_fedjax_dp']['median_of_round_ratios']:.2f}"
               if check else "") + ". Below 1: fedjax_dp is slower.", ""]
  prof = rec.get("profile") or {}
  if prof:
    f, p = prof["fedjax_dp"], prof["pfl-research"]
    lines += [f"Profiled round, fedjax_dp (`jax.profiler`, {f['seconds']:.1f} s under the "
              f"tracer, {f['op_ms_total'] / 1e3:.1f} s of op time summed over the device "
              "threads):", "",
              "| where (HLO op_name) | op ms | share | op calls |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['ms']:.0f} | {100 * v['share']:.1f}% | {v['calls']:,} |"
              for k, v in f["groups"].items()]
    lines += ["", f"Profiled round, pfl-research (`cProfile` + `torch.profiler`, "
              f"{p['seconds']:.1f} s under both):", "",
              "| where (Python function, cumulative) | s | calls |", "|---|---|---|"]
    lines += [f"| {k.strip()} | {v['s']:.3f} | {v['calls']} |" for k, v in p["groups"].items()]
    lines += ["", "| torch operator (self CPU) | ms | share | calls |", "|---|---|---|---|"]
    lines += [f"| {o['op']} | {o['self_ms']:.0f} | {100 * o['self_share']:.1f}% | "
              f"{o['calls']} |" for o in p["torch_ops"][:4]]
  return "\n".join(lines) + "\n"


def main(argv=None):
  """Command line: the driver, or (``--serve``) the fedjax_dp side."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--serve", action="store_true", help="serve the fedjax_dp side (protocol)")
  p.add_argument("--data", default=None, help="exported .npz (default: export a new one)")
  p.add_argument("--source", choices=("shakespeare", "random"), default="shakespeare")
  p.add_argument("--devices", type=int, default=os.cpu_count() or 1,
                 help="JAX CPU devices of the fedjax_dp side (one per core by default)")
  p.add_argument("--rounds", type=int, default=WORKLOAD["timed_rounds"],
                 help="interleaved timed rounds per side")
  p.add_argument("--loss-check-z", type=float, default=0.01,
                 help="noise multiplier of a second interleaved run that checks that "
                      "both sides train (negative: skip it)")
  p.add_argument("--no-profile", action="store_true")
  p.add_argument("--omp-passive", action="store_true",
                 help="OMP_WAIT_POLICY=PASSIVE for the pfl (torch) process")
  p.add_argument("--venv-dir", default=os.path.join(HERE, ".venvs"))
  p.add_argument("--out", default=DEFAULT_OUT)
  p.add_argument("--markdown", default=None, metavar="JSON",
                 help="print the RESULTS.md tables of a written record and exit")
  a = p.parse_args(argv)
  if a.markdown:
    with open(a.markdown) as f:
      print(markdown(json.load(f)), end="")
    return
  if a.serve:
    if not a.data:
      p.error("--serve needs --data")
    serve_fedjax(a.data, a.devices)
    return
  if a.loss_check_z is not None and a.loss_check_z < 0:
    a.loss_check_z = None
  record = run_benchmark(a)
  os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
  with open(a.out, "w") as f:
    json.dump(record, f, indent=1)
  print(f"[lm] wrote {a.out}")


if __name__ == "__main__":
  main()
