"""Per-example clipping of the character models: the ghost path against vmap(grad).

For LEAF's character LSTM (8-d embedding, 2 x 256 LSTM, 818,137 parameters) and the
small causal transformer (2 blocks of width 128), on windows of T = 80 tokens, this
times one jitted ``clipped_grad_sum`` (the clipped sum of a batch's per-example
gradients, `fedjax_dp.privacy.per_example`) with ``method="ghost"`` and with
``method="vmap"``, interleaved call by call so that machine noise hits both alike, and
checks that the two sums agree (relative error of the largest entry).

  python -m benchmarks.sequence_clipping [--batch-sizes 16 64] [--repeats 7]
      [--out benchmarks/results/sequence_clipping.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import common  # noqa: E402
from fedjax_dp.models import count_params, create_model  # noqa: E402
from fedjax_dp.privacy import per_example  # noqa: E402

SEQ_LEN, VOCAB = 80, 81
MODELS = {"char_lstm": (256, 256), "char_transformer": (128, 128)}


def _timed(fn, *args) -> float:
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - t0


def measure(name: str, widths, batch: int, repeats: int) -> dict:
  """Median seconds per call of each method, their ratio and the sums' agreement."""
  model = create_model(name, (SEQ_LEN,), VOCAB, hidden=widths)
  params = model.init(jax.random.PRNGKey(0))
  kx, ky = jax.random.split(jax.random.PRNGKey(1))
  x = jax.random.randint(kx, (batch, SEQ_LEN), 0, VOCAB).astype(jnp.float32)
  y = jax.random.randint(ky, (batch,), 0, VOCAB)
  w = jnp.ones((batch,), jnp.float32)
  fns = {m: jax.jit(lambda p, x, y, w, m=m: per_example.clipped_grad_sum(
      model, p, x, y, w, 1.0, method=m).total) for m in ("ghost", "vmap")}
  out = {m: jax.block_until_ready(f(params, x, y, w)) for m, f in fns.items()}  # compile
  err = max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
            for a, b in zip(jax.tree_util.tree_leaves(out["ghost"]),
                            jax.tree_util.tree_leaves(out["vmap"])))
  times = {m: [] for m in fns}
  for _ in range(repeats):
    for m, f in fns.items():
      times[m].append(_timed(f, params, x, y, w))
  med = {m: statistics.median(t) for m, t in times.items()}
  return {"model": name, "widths": list(widths), "params": count_params(params),
          "batch_size": batch, "seq_len": SEQ_LEN,
          "ghost_s": med["ghost"], "vmap_s": med["vmap"],
          "ghost_min_s": min(times["ghost"]), "vmap_min_s": min(times["vmap"]),
          "speedup": med["vmap"] / med["ghost"], "max_rel_err": err}


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64])
  ap.add_argument("--repeats", type=int, default=7)
  ap.add_argument("--out", default=None, help="JSON file to write (default: stdout only)")
  args = ap.parse_args(argv)
  rows = []
  for name, widths in MODELS.items():
    for b in args.batch_sizes:
      row = measure(name, widths, b, args.repeats)
      rows.append(row)
      print(f"{name:17s} B={b:4d}  ghost {row['ghost_s'] * 1e3:8.1f} ms  vmap "
            f"{row['vmap_s'] * 1e3:8.1f} ms  speedup {row['speedup']:5.2f}x  "
            f"rel err {row['max_rel_err']:.1e}", flush=True)
  common.emit({"benchmark": "sequence_clipping", "machine": common.machine_info(),
               "jax": jax.__version__, "backend": jax.default_backend(), "rows": rows},
              args.out)


if __name__ == "__main__":
  main()
