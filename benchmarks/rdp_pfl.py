"""RDP-PFL's second-order DP outer step against first-order per-example clipping (issue 16).

Paper 003 (Wei et al., IEEE TIFS 2023, Sec. III-A, eqs. 6-11) clips, per support example
x, the meta-gradient ``m_x = (I - eta grad^2 l(w; x)) grad l(theta~; x)`` (eq. 2 per
example, implementation note G1/G2; `fedjax_dp.algorithms.rdp_pfl.meta`). This measures
what that costs next to first-order per-example clipping, on the paper's MLP 784-200-200-10
(``--quick``: 784-32-10), eta = 0.01, C = 2.4, synthetic float32 inputs
(`benchmarks.workloads.synthetic_client_data`, fixed seed) and int32 labels, the meta model
``w = model.init(key(seed))`` and ``theta~ = w - eta * grad F(w; batch)``.

Rows per batch size B (one batch, all weights 1, each call jitted, timed until
``block_until_ready``; best and median of ``--repeat`` calls after 3 warm-up calls; rates
use the best):

* ``first_order_vmap``: ``meta.grad_clipped_sum(model, "vmap", at=theta~)``: per-example
  gradients at theta~ (first-order MAML), clipped to C, summed.
* ``first_order_auto``: the same with ``method="auto"`` (ghost clipping, Bu et al. 2023,
  where the model allows: it does for the MLP).
* ``second_order``: ``meta.meta_clipped_sum(model, theta~, eta)``: per-example
  meta-gradients (gradient at theta~ plus a forward-over-reverse Hessian-vector product at
  w), clipped to C, summed: the outer step of ``clip_mode="per_example_hessian"``.
* ``nonprivate_second_order``: ``meta.meta_gradient(model, w, xb, yb, xb, yb, eta)``: the
  exact batch meta-gradient (query = support = the batch), no per-example work: the cost
  of plain MAML.

Rows per local epoch (``local_epoch_<mode>``, mode per_example_hessian, first_order, paper): one
full `meta.local_epoch` (inner DP step on the query draw, outer DP step on the support
draw, noise sigma = 1, q^Q = q^S = 0.1, beta = 0.01) of one client of n = 600 rows, split
by position like rdp_pfl's clients (`clients.is_query_row`, query fraction 1/2: 300 query
and 300 support rows), with the `algorithm.stage_config` caps and micro-batches that
rdp_pfl builds (overflow probability 1e-12: cap 73 rows, micro-batches of 15). Each
call gets a fresh PRNG key (new Poisson draws, sizes recorded); rates use the expected
support draw q^S n^S = 30 meta-gradients per epoch and the best time. The per-example
modes run ceil(draw / 15) micro-batches, so every draw of at most 30 rows (about half of
them) costs what the expected draw costs; paper mode always runs the padded cap.

Correctness (as ``benchmarks.dpsgd --micro``: `common.check_sum`, relative L2 error <=
1e-4, finite, norm <= B C): ``second_order`` against an independent per-example
computation (`per_example_terms`: ``vmap`` over the examples of ``grad l(theta~)`` and
``jax.jvp(jax.grad(l), (w,), (g,))``; ``m = g - eta h`` clipped to C and summed in float64
NumPy, `clipped_sum_np`); the first-order rows against the same ``g`` clipped and
summed; ``nonprivate_second_order`` against the mean of per-example gradients and HVPs
(`reference_meta_gradient`, no norm bound). A local epoch is checked for a finite model
and no non-finite or truncated rows (it is noisy: no exact reference). A row whose check
fails has ``ok = False`` and enters no ratio.

FLOP model (`flop_model`; matmul FLOPs only, a multiply-add = 2 FLOPs; biases,
activations, the loss, norms, clipping, noise and padded slots not counted). An MLP with
widths ``d_0 .. d_L`` has per example the layer matmuls ``f_l = 2 d_{l-1} d_l`` and the
forward ``F = sum_l f_l``.

* Gradient (reverse mode): forward ``F``, weight gradients ``a_{l-1}^T delta_l``: ``F``,
  input gradients ``delta_l W_l^T`` for l >= 2 only (the input needs none): ``F - f_1``:
  ``G = 3F - f_1`` = `workloads.FLOPS_PER_EXAMPLE_STEP` ["mlp"] = 879,200 for
  784-200-200-10.
* Hessian-vector product, forward-over-reverse (``jax.jvp(jax.grad(l), (w,), (v,))``),
  derived exactly from its matmuls (not the "2 gradients + a forward" rule of thumb):
  jvp returns the primal gradient too, but it is discarded, and XLA removes every primal
  product that feeds only it. With V_l the tangent of W_l:
  forward: primal ``a_{l-1} W_l`` (F) and tangent ``da_{l-1} W_l + a_{l-1} V_l`` (two
  matmuls; one for l = 1, whose input x has no tangent): ``3F - f_1``;
  input gradients: tangent ``ddelta_l W_l^T + delta_l V_l^T`` for l >= 2 (``2(F - f_1)``)
  and the primal ``delta_l W_l^T`` only for l >= 3 (delta_1 feeds only the discarded
  primal weight gradient): ``3(F - f_1) - f_2``;
  weight gradients: tangent only, ``da_{l-1}^T delta_l + a_{l-1}^T ddelta_l`` (one for
  l = 1): ``2F - f_1``.
  Total ``H = 8F - 5 f_1 - f_2`` (``f_2 = 0`` for one layer) = 1,532,800 for
  784-200-200-10 (the rule of thumb ``2G + F`` would say 2,156,000). XLA's own count
  (``cost_analysis``) of the batch-form gradient and HVP agrees within 1%
  (tests/test_benchmarks.py).
* Per-example meta-gradient: the gradient at theta~ plus the HVP at w: ``M = G + H`` =
  2,412,000 (2.74 G).
* ``nonprivate_second_order``, per row: the query gradient at w (to form theta~), the
  support gradient at theta~ and the HVP: ``2G + H``.
* Local epochs, per expected row (q n^Q = 30 query, q n^S = 30 support rows): per_example
  ``30 G + 30 M``; first_order ``30 G + 30 G``; paper ``30 G + 30 G`` plus
  ``power_iterations + 3`` = 23 batch HVPs over the query draw (one power-iteration
  start, 20 iterations, the final norm, then ``H_Q g2``): ``23 x 30 H``. Paper mode runs
  its batches padded to the static cap (`algorithm.stage_config`; the record gives it):
  its padded work is larger than this count.

A vmapped per-example weight gradient is an outer product (``d_{l-1} d_l`` multiplies, no
adds); the model counts it as 2 FLOPs per entry, like a batch weight gradient, so that
rows compare with the same count of useful work. GFLOP/s = the row's FLOPs / best time;
'% of matmul' divides by the dense float32 ``--matmul-size`` square matmul rate measured
in this process before and after the rows (the best; `benchmarks.roofline.matmul_gflops`).

  python -m benchmarks.rdp_pfl [--quick] [--batch-sizes 30,128] [--repeat N] [--out f.json]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from benchmarks import common, workloads

FEATURE_SHAPE = (784,)
NUM_CLASSES = 10
PAPER_HIDDEN = (200, 200)
QUICK_HIDDEN = (32,)
DEFAULT_BATCH_SIZES = (30, 128)
QUICK_BATCH_SIZES = (8,)
ETA = 0.01             # inner learning rate eta (paper 003, Sec. V-A)
BETA = 0.01            # outer learning rate beta (rdp_pfl's default)
CLIP_NORM = 2.4        # C (paper 003, Sec. V-A)
NOISE_MULTIPLIER = 1.0
SAMPLING_RATE = 0.1    # q^Q = q^S
CLIENT_ROWS = 600      # n: 300 query + 300 support rows
QUERY_FRACTION = 0.5
OVERFLOW_PROB = 1e-12  # rdp_pfl's default
POWER_ITERATIONS = 20  # rdp_pfl's default
EPOCH_MODES = ("per_example_hessian", "first_order", "paper")
RTOL = 1e-4


def layer_widths(hidden: Sequence[int], input_dim: int = FEATURE_SHAPE[0],
                 num_classes: int = NUM_CLASSES) -> List[int]:
  """``[d_0, ..., d_L]`` of the MLP ``input_dim - hidden... - num_classes``."""
  return [int(input_dim), *(int(h) for h in hidden), int(num_classes)]


def flop_model(widths: Sequence[int]) -> Dict[str, int]:
  """Matmul FLOPs per example of the MLP with layer widths ``widths`` (module docstring).

  Args:
    widths: ``[d_0, ..., d_L]``, L >= 1 dense layers (ints >= 1).

  Returns:
    dict of ints: ``forward`` F; ``gradient`` G = 3F - f_1; ``hvp`` H = 8F - 5 f_1 - f_2
    (forward-over-reverse, exact matmul count); ``meta_gradient`` M = G + H (per-example
    meta-gradient, paper 003 eq. 2 per example); ``nonprivate_meta_gradient`` 2G + H
    (per row of the batch meta-gradient, theta~ included).

  Raises:
    FedJaxDpError: fewer than two widths or a width < 1.
  """
  from fedjax_dp.validation import FedJaxDpError, check_int
  if len(widths) < 2:
    raise FedJaxDpError(f"widths must hold at least 2 layer widths, got {list(widths)}.",
                        option="widths")
  d = [check_int("widths", v, minimum=1) for v in widths]
  f = [2 * a * b for a, b in zip(d[:-1], d[1:])]
  fwd = sum(f)
  f2 = f[1] if len(f) > 1 else 0
  grad = 3 * fwd - f[0]
  hvp = 8 * fwd - 5 * f[0] - f2
  return {"forward": fwd, "gradient": grad, "hvp": hvp, "meta_gradient": grad + hvp,
          "nonprivate_meta_gradient": 2 * grad + hvp}


def epoch_flops(flops: Dict[str, int], mode: str, query_rows: float, support_rows: float,
                power_iterations: int = POWER_ITERATIONS) -> float:
  """Matmul FLOPs of one `meta.local_epoch` in ``mode`` for the expected draws
  ``query_rows`` (q^Q n^Q) and ``support_rows`` (q^S n^S) (module docstring).

  Raises:
    FedJaxDpError: ``mode`` not in `EPOCH_MODES`.
  """
  from fedjax_dp.validation import check_choice
  check_choice("mode", mode, EPOCH_MODES)
  inner = query_rows * flops["gradient"]
  if mode == "per_example_hessian":
    return inner + support_rows * flops["meta_gradient"]
  if mode == "first_order":
    return inner + support_rows * flops["gradient"]
  return (inner + support_rows * flops["gradient"]
          + (power_iterations + 3) * query_rows * flops["hvp"])


def _flat(tree):
  import jax
  import numpy as np
  return np.concatenate([np.asarray(l, np.float64).reshape(-1)
                         for l in jax.tree_util.tree_leaves(tree)])


def _example_loss(model):
  def loss(p, xe, ye):
    return model.per_example_loss(model.apply(p, xe[None]), ye[None])[0]
  return loss


def per_example_terms(model, w, theta, x, y):
  """Per example x_i (vmapped, jitted): ``g_i = grad l(theta~; x_i)`` and the
  forward-over-reverse HVP ``h_i = grad^2 l(w; x_i) g_i`` (``jax.jvp`` of ``jax.grad``),
  written here independently of `meta` and `per_example`.

  Args:
    model: the `fedjax_dp.models.Model`.
    w, theta: parameter pytrees (float32) of the meta model and theta~.
    x: float32 ``[B, ...]``; y: int32 ``[B]``.

  Returns:
    ``(g, h)``: float64 NumPy ``[B, P]`` each (leaves flattened in tree order).
  """
  import jax
  import numpy as np
  loss = _example_loss(model)

  @jax.jit
  def terms(w, theta, x, y):
    def one(xe, ye):
      g = jax.grad(loss)(theta, xe, ye)
      return g, jax.jvp(lambda p: jax.grad(loss)(p, xe, ye), (w,), (g,))[1]
    return jax.vmap(one)(x, y)

  n = len(x)
  flat = lambda t: np.concatenate([np.asarray(l, np.float64).reshape(n, -1)
                                   for l in jax.tree_util.tree_leaves(t)], 1)
  g, h = terms(w, theta, x, y)
  return flat(g), flat(h)


def clipped_sum_np(vectors, clip_norm: float):
  """``sum_i clip_C(v_i)`` of float64 ``[B, P]`` rows (Abadi et al. 2016, eq. 2:
  ``v min(1, C / ||v||_2)``), float64 ``[P]``."""
  import numpy as np
  norms = np.linalg.norm(vectors, axis=1)
  return (vectors * np.minimum(1.0, clip_norm / np.maximum(norms, 1e-30))[:, None]).sum(0)


def reference_meta_gradient(model, w, x, y, eta):
  """Independent reference of ``nonprivate_second_order`` (query = support = the
  batch): the mean of per-example gradients at w gives ``theta~ = w - eta g_Q``, the mean
  of per-example gradients at theta~ gives g2, the mean of per-example HVPs
  ``grad^2 l(w; x_i) g2`` gives ``H g2`` (the batch Hessian is the mean of the
  examples'); returns ``g2 - eta H g2`` (paper 003 eq. 2), float64 ``[P]``."""
  import jax
  import numpy as np
  loss = _example_loss(model)
  mean = lambda t: jax.tree_util.tree_map(lambda l: np.asarray(l, np.float64).mean(0), t)
  per_grad = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
  per_hvp = jax.jit(jax.vmap(lambda w, v, xe, ye: jax.jvp(
      lambda p: jax.grad(loss)(p, xe, ye), (w,), (v,))[1], in_axes=(None, None, 0, 0)))
  f32 = lambda t: jax.tree_util.tree_map(lambda l: np.asarray(l, np.float32), t)
  gq = mean(per_grad(w, x, y))
  theta = f32(jax.tree_util.tree_map(lambda a, b: np.asarray(a, np.float64) - eta * b,
                                     w, gq))
  g2 = f32(mean(per_grad(theta, x, y)))
  return _flat(g2) - eta * _flat(mean(per_hvp(w, g2, x, y)))


def check_row(got, ref, batch_size: int, clip_norm: float) -> Dict[str, Any]:
  """`common.check_sum` of ``got`` (a pytree or flat array) against the flat reference
  ``ref`` (relative L2 error <= `RTOL`, finite, norm <= B C); adds ``ok``."""
  out = common.check_sum(_flat(got), ref, batch_size, clip_norm, rtol=RTOL)
  out["ok"] = out["correct"]
  return out


def _time(fn: Callable, make_args: Callable, repeat: int, warmup: int = 3):
  """Seconds of ``repeat`` calls ``fn(*make_args(i))`` (after ``warmup`` calls), each
  until ``block_until_ready``; the arguments are built before each clock starts.
  Warm-up calls get ``make_args(-1), make_args(-2), ...``. Returns ``(seconds,
  outputs)`` of the timed calls."""
  import jax
  for i in range(warmup):
    jax.block_until_ready(fn(*make_args(-1 - i)))
  secs, outs = [], []
  for i in range(repeat):
    args = make_args(i)
    jax.block_until_ready(args)
    t0 = time.perf_counter()
    outs.append(jax.block_until_ready(fn(*args)))
    secs.append(time.perf_counter() - t0)
  return secs, outs


def _row(name: str, batch_size, examples: float, flops: float, secs: List[float],
         **extra) -> Dict[str, Any]:
  """One row: ``examples`` per-example vectors and ``flops`` matmul FLOPs per call,
  ``secs`` the timed calls' seconds; rates use the best (least disturbed) call."""
  best = min(secs)
  rec = {"name": name, "batch_size": batch_size, "seconds": secs, "best_s": best,
         "median_s": common._median(secs), "examples": examples, "flops": flops,
         "per_example_grads_per_s": examples / best, "gflops": flops / best / 1e9}
  rec.update(extra)
  return rec


def batch_rows(model, w, b: int, flops: Dict[str, int], repeat: int, seed: int = 0):
  """The four per-batch rows (module docstring) for batch size ``b``.

  Args:
    model: the MLP `fedjax_dp.models.Model`; w: its parameters (the meta model).
    b: batch size B (synthetic client 0's first B examples of seed ``seed``).
    flops: `flop_model` of the MLP.
    repeat: timed calls per row.

  Returns:
    list of `_row` dicts, each with the `check_row` fields.
  """
  import jax
  import jax.numpy as jnp

  from fedjax_dp.algorithms.rdp_pfl import meta
  from fedjax_dp.privacy.per_example import resolve_method

  xn, yn = workloads.synthetic_client_data(
      dict(feature_shape=FEATURE_SHAPE, num_classes=NUM_CLASSES, examples_per_client=b),
      0, seed)
  x, y = jnp.asarray(xn), jnp.asarray(yn)
  weights = jnp.ones((b,), jnp.float32)
  c = jnp.float32(CLIP_NORM)
  eta = jnp.float32(ETA)
  mean_loss = lambda p: jnp.mean(model.per_example_loss(model.apply(p, x), y))
  theta = jax.tree_util.tree_map(lambda a, g: a - ETA * g, w, jax.grad(mean_loss)(w))
  same = lambda *a: (lambda i: a)
  rows = []
  g, h = per_example_terms(model, w, theta, x, y)
  ref_first = clipped_sum_np(g, CLIP_NORM)
  for method in ("vmap", "auto"):
    fn = jax.jit(lambda w_, th, xb, yb, wt, cn, m=method: meta.grad_clipped_sum(
        model, m, at=th)(w_, xb, yb, wt, cn).total)
    secs, (*_, out) = _time(fn, same(w, theta, x, y, weights, c), repeat)
    label = method if method == "vmap" else f"auto ({resolve_method(model, theta, x)})"
    rows.append(_row(f"first_order_{method}", b, b, b * flops["gradient"], secs,
                     method=label, **check_row(out, ref_first, b, CLIP_NORM)))
  fn = jax.jit(lambda w_, th, xb, yb, wt, cn, e: meta.meta_clipped_sum(model, th, e)(
      w_, xb, yb, wt, cn).total)
  secs, (*_, out) = _time(fn, same(w, theta, x, y, weights, c, eta), repeat)
  ref = clipped_sum_np(g - ETA * h, CLIP_NORM)
  rows.append(_row("second_order", b, b, b * flops["meta_gradient"], secs,
                   method="vmap (jvp of grad)", **check_row(out, ref, b, CLIP_NORM)))
  fn = jax.jit(lambda w_, xb, yb, e: meta.meta_gradient(model, w_, xb, yb, xb, yb, e))
  secs, (*_, out) = _time(fn, same(w, x, y, eta), repeat)
  ref = reference_meta_gradient(model, w, x, y, ETA)
  rows.append(_row("nonprivate_second_order", b, b, b * flops["nonprivate_meta_gradient"],
                   secs, method="batch (no clipping)",
                   **check_row(out, ref, b, math.inf)))
  return rows


def epoch_rows(model, w, flops: Dict[str, int], repeat: int, seed: int = 0,
               modes: Sequence[str] = EPOCH_MODES):
  """One ``local_epoch_<mode>`` row per mode (module docstring).

  Args:
    model, w: as `batch_rows`.
    flops: `flop_model` of the MLP.
    repeat: timed epochs per mode (each with its own PRNG key).
    seed: seed of the client's rows (synthetic client 1) and of the keys.
    modes: a subset of `EPOCH_MODES`.

  Returns:
    list of `_row` dicts; ``ok`` is False if an epoch gave a non-finite model or had a
    non-finite or truncated row.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  from fedjax_dp.algorithms.rdp_pfl import meta
  from fedjax_dp.algorithms.rdp_pfl.algorithm import stage_config
  from fedjax_dp.algorithms.rdp_pfl.clients import is_query_row, split_counts

  n = CLIENT_ROWS
  xn, yn = workloads.synthetic_client_data(
      dict(feature_shape=FEATURE_SHAPE, num_classes=NUM_CLASSES, examples_per_client=n),
      1, seed)
  x, y = jnp.asarray(xn), jnp.asarray(yn)
  n_q, n_s = (int(v[0]) for v in split_counts(np.array([n]), QUERY_FRACTION))
  q_rows = jnp.asarray(is_query_row(n, QUERY_FRACTION))
  q_mask, s_mask = q_rows, ~q_rows
  q_cfg = stage_config(n_q, SAMPLING_RATE, OVERFLOW_PROB)
  s_cfg = stage_config(n_s, SAMPLING_RATE, OVERFLOW_PROB)
  e_q, e_s = SAMPLING_RATE * n_q, SAMPLING_RATE * n_s
  root = jax.random.key(seed + 1)
  rows = []
  for mode in modes:
    def epoch(w_, xb, yb, qm, sm, key, mode=mode):
      return meta.local_epoch(
          model, w_, xb, yb, qm, sm, key, eta=ETA, beta=BETA, clip_norm=CLIP_NORM,
          noise_multiplier=NOISE_MULTIPLIER, q_query=SAMPLING_RATE, q_support=SAMPLING_RATE,
          denom_query=e_q, denom_support=e_s, query_cfg=q_cfg, support_cfg=s_cfg,
          clip_mode=mode, power_iterations=POWER_ITERATIONS)

    # A fresh key per call (new Poisson draws); the last 3 are the warm-up calls'.
    keys = [jax.random.fold_in(root, i) for i in range(repeat + 3)]
    secs, outs = _time(jax.jit(epoch),
                       lambda i, keys=keys: (w, x, y, q_mask, s_mask, keys[i]), repeat)
    finite = all(np.all(np.isfinite(_flat(w_new))) for w_new, _ in outs)
    stats = [jax.tree_util.tree_map(np.asarray, st) for _, st in outs]
    rows_q = float(np.mean([s.rows[0] for s in stats]))
    rows_s = float(np.mean([s.rows[1] for s in stats]))
    bad = int(sum(s.nonfinite.sum() + s.truncated.sum() for s in stats))
    rec = _row(f"local_epoch_{mode}", None, e_s, epoch_flops(flops, mode, e_q, e_s), secs,
               method=mode, ok=bool(finite and bad == 0), seconds_per_epoch=min(secs),
               per_example_meta_grads_per_s=e_s / min(secs), client_rows=n,
               query_rows=n_q, support_rows=n_s, expected_query_draw=e_q,
               expected_support_draw=e_s, mean_query_draw=rows_q, mean_support_draw=rows_s,
               query_max_batch=q_cfg.max_batch_size, support_max_batch=s_cfg.max_batch_size,
               query_micro_batch=q_cfg.micro_batch_size,
               support_micro_batch=s_cfg.micro_batch_size, nonfinite_or_truncated=bad)
    rows.append(rec)
  return rows


def time_ratios(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
  """Best-time ratios between rows whose check passed (``ok``): per batch size
  ``"B=<b>"``, ``second_order / first_order_vmap`` and ``second_order /
  first_order_auto``; for the local epochs ``"local_epoch"``: per_example_hessian / first_order
  and paper / first_order. A pair with a failed (or missing) row gets no entry."""
  out: Dict[str, Dict[str, float]] = {}

  def find(name, b):
    for r in rows:
      if r["name"] == name and r["batch_size"] == b:
        return r if r.get("ok") else None
    return None

  pairs = (("second_order", "first_order_vmap"), ("second_order", "first_order_auto"))
  for b in dict.fromkeys(r["batch_size"] for r in rows if r["batch_size"] is not None):
    for num, den in pairs:
      a, c = find(num, b), find(den, b)
      if a and c:
        out.setdefault(f"B={b}", {})[f"{num}/{den}"] = a["best_s"] / c["best_s"]
  for num in ("local_epoch_per_example_hessian", "local_epoch_paper"):
    a, c = find(num, None), find("local_epoch_first_order", None)
    if a and c:
      out.setdefault("local_epoch", {})[f"{num}/local_epoch_first_order"] = (
          a["best_s"] / c["best_s"])
  return out


def versions():
  v = {p: md.version(p) for p in ("jax", "jaxlib", "flax")}
  v["fedjax_dp"] = md.version("fedjax_dp")
  return v


def run(quick: bool = False, batch_sizes: Optional[Sequence[int]] = None,
        repeat: Optional[int] = None, seed: int = 0,
        matmul_size: Optional[int] = None) -> Dict[str, Any]:
  """Every row (module docstring) and the same-process matmul rate.

  Args:
    quick: MLP 784-32-10, batch 8, 3 repeats, 1024 matmul (a smoke test); else the
      paper's 784-200-200-10, batches `DEFAULT_BATCH_SIZES`, 10 repeats, 2048 matmul.
    batch_sizes: ints >= 1 overriding the per-batch rows' B.
    repeat: timed calls per row (>= 1).
    seed: seed of the parameters, the data and the local epochs' keys.
    matmul_size: side of the reference float32 matmul.

  Returns:
    The JSON-ready record: ``rows`` (`_row` dicts: ``best_s`` / ``median_s`` seconds,
    ``per_example_grads_per_s``, ``gflops``, ``fraction_of_matmul``, ``ok`` and the check
    fields), ``ratios`` (`time_ratios`), ``flops_per_example`` (`flop_model`),
    ``matmul_gflops``, machine and versions.

  Raises:
    FedJaxDpError: a batch size, ``repeat`` or ``matmul_size`` below 1 or not an int.
  """
  import jax

  from benchmarks.roofline import matmul_gflops
  from fedjax_dp.models import count_params, create_model
  from fedjax_dp.validation import check_int
  hidden = QUICK_HIDDEN if quick else PAPER_HIDDEN
  batch_sizes = [check_int("batch_sizes", b, minimum=1) for b in (
      batch_sizes or (QUICK_BATCH_SIZES if quick else DEFAULT_BATCH_SIZES))]
  repeat = check_int("repeat", repeat or (3 if quick else 10), minimum=1)
  matmul_size = check_int("matmul_size", matmul_size or (1024 if quick else 2048),
                          minimum=1)
  mm_before = matmul_gflops(matmul_size)
  model = create_model("mlp", FEATURE_SHAPE, NUM_CLASSES, hidden=hidden)
  w = model.init(jax.random.key(seed))
  widths = layer_widths(hidden)
  flops = flop_model(widths)
  rows = []
  for b in batch_sizes:
    rows += batch_rows(model, w, b, flops, repeat, seed)
  rows += epoch_rows(model, w, flops, repeat, seed)
  mm_after = matmul_gflops(matmul_size)
  mm = max(mm_before, mm_after)
  for r in rows:
    r["fraction_of_matmul"] = r["gflops"] / mm
  return {"benchmark": "rdp_pfl", "quick": quick, "versions": versions(),
          "machine": common.machine_info(), "backend": jax.default_backend(),
          "device": str(jax.devices()[0].device_kind), "devices": jax.device_count(),
          "model": "mlp " + "-".join(map(str, widths)), "num_params": count_params(w),
          "eta": ETA, "clip_norm": CLIP_NORM, "repeat": repeat, "flops_per_example": flops,
          "matmul_gflops": mm, "matmul_gflops_before_after": [mm_before, mm_after],
          "matmul_size": matmul_size, "rows": rows, "ratios": time_ratios(rows),
          "peak_rss_mib": common.peak_rss_mib()}


def main(argv=None) -> Dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--quick", action="store_true",
                 help="MLP 784-32-10, batch 8, 3 repeats (a smoke test)")
  p.add_argument("--batch-sizes", default=None,
                 help="comma-separated B (default 30,128; --quick: 8)")
  p.add_argument("--repeat", type=int, default=None,
                 help="timed calls per row (default 10; --quick: 3)")
  p.add_argument("--matmul-size", type=int, default=None,
                 help="the reference matmul's size (default 2048; --quick: 1024)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None)
  a = p.parse_args(argv)
  bs = None
  if a.batch_sizes:
    try:
      bs = [int(v) for v in a.batch_sizes.split(",")]
    except ValueError:
      p.error(f"--batch-sizes must be comma-separated integers, got {a.batch_sizes!r}")
  rec = run(a.quick, bs, a.repeat, a.seed, a.matmul_size)
  common.emit(rec, a.out)
  return rec


if __name__ == "__main__":
  main()
