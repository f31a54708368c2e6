"""Shared setup of the DP-MOCHA reproductions (Hu, Guo, Li, Pei, Gong, "Personalized
Federated Learning with Differential Privacy", IEEE IoT-J 2020).

The task (Sec. VII-A): one device per HAR subject (m = 30), per device a linear SVM for
SITTING (+1) against the other five activities (-1), rows scaled to unit L2 norm, a
random per-subject 75/25 split redrawn for every trial (MOCHA's ``split_data.m`` rule;
trial t = split seed t = noise seed t). Data: ``load_dataset("har_features", seed=t,
row_l2=True)``, UCI HAR's 561 features REBUILT by fedjax_dp from the raw HAPT recordings
(`FEATURES_NOTE`; every output says so).

Every run is `fedjax_dp.algorithms.dp_mocha.algorithm.simulate` (the functional API:
one compiled scan per outer iteration, reused for every hyper-parameter value), with the
paper's stated settings (Sec. VII-A) and our choices where the paper is silent:
xi = 0.5 (beta = xi m = 15), r = 1, delta = 1e-3, s2 from the noisy dual step
(``s2_mode="noisy_l2"``), W resynchronised after every Omega update, lambda
by 5-fold CV of the non-private run (``cv_lambda.py``).

Privacy (per device, record level): sigma1, sigma2 from the plug-in's calibration
(`fedjax_dp.algorithms.dp_mocha.plugin.DpMocha.noise_multipliers`, i.e. Theorem 5 with our
choice of its constants, q_t = (1 - tau / 2) n_min / n_t, p = 1 - P, K = every round of THAT run,
r = 1). Each private point reports three epsilons (`privacy_fields`): the paper's
(Theorem 5 at the calibrated sigmas, = the target), the accountant's with the paper's
sensitivities (exact Gaussian composition of the device's releases, no amplification)
and the provable ledger epsilon (the provable sensitivities of
`fedjax_dp.algorithms.dp_mocha.mechanism`), each of the worst device.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_store  # noqa: E402  (experiments/results_store.py; compilation cache on)

from fedjax_dp.algorithms.dp_mocha import algorithm as mocha  # noqa: E402
from fedjax_dp.algorithms.dp_mocha import objective  # noqa: E402
from fedjax_dp.privacy import device_ledger  # noqa: E402
from fedjax_dp.algorithms.dp_mocha import paper_calibration, plugin  # noqa: E402
from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.validation import FedJaxDpError  # noqa: E402

Results = results_store.Results
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
#: Stated in every output (the features are ours, not UCI HAR's published matrices).
FEATURES_NOTE = ("features rebuilt from the raw HAPT recordings (not UCI HAR's published "
                 "matrices)")
#: The paper's settings (Sec. VII-A): H outer x K inner rounds, epsilon, delta.
PAPER = dict(outer_rounds=10, inner_rounds=2000, epsilon=8.0, delta=1e-3, trials=10,
             positive_class=3)
#: Our choices where the paper is silent.
XI = 0.5
BUDGET_RATIO = 1.0
S2_MODE = "noisy_l2"
#: lambda when no cv_lambda.json exists (stated in every output that uses it).
FALLBACK_LAMBDA = 0.1
#: CI's reduced runs (``--quick``): 1 trial, H = 2 outer x K = 20 inner rounds.
QUICK = dict(trials=1, outer_rounds=2, inner_rounds=20)
DATASETS = ("har_features", "har")
#: How a run's randomness is fixed (every JSON's meta says it; runs carry the seeds).
SEEDING = ("trial t: data split seed t (load_dataset(..., seed=t), the per-subject 75/25 "
           "split) and noise key jax.random.key(t) (SDCA coordinates, step counts, drops, "
           "Gaussian noise); runs record split_seed and noise_seed (runs stored before "
           "these fields: both equal the trial)")


def arg_parser(doc: str, outer_rounds: int, inner_rounds: int,
               trials: int) -> argparse.ArgumentParser:
  """The flags every script shares: ``--trials``, ``--outer-rounds`` (H),
  ``--inner-rounds`` (K), ``--out``, ``--quick`` (CI's reduced run, writes to ``--out``),
  ``--resume`` (keep the runs already in the JSON), ``--report-only`` (rewrite the
  report from the JSON), ``--lam`` (override the CV choice), ``--dataset``."""
  p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
  p.add_argument("--trials", type=int, default=trials, help="trials (split + noise seeds)")
  p.add_argument("--outer-rounds", type=int, default=outer_rounds, help="H (paper: 10)")
  p.add_argument("--inner-rounds", type=int, default=inner_rounds, help="K (paper: 2000)")
  p.add_argument("--out", default=RESULTS, help="folder of the JSON / MD / PNG outputs")
  p.add_argument("--quick", action="store_true", help="CI's reduced run (seconds)")
  p.add_argument("--resume", action="store_true", help="skip runs already in the JSON")
  p.add_argument("--report-only", action="store_true", help="rewrite the report only")
  p.add_argument("--lam", type=float, default=None,
                 help="lambda (default: cv_lambda.json's choice, else 0.1)")
  p.add_argument("--dataset", default="har_features", choices=DATASETS,
                 help="har_features (default) or har (raw windows flattened; fallback)")
  return p


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
  """Parses ``argv`` and applies ``--quick``'s reduced scale; checks the scale.

  Raises:
    FedJaxDpError: ``--trials``, ``--outer-rounds`` or ``--inner-rounds`` below 1.
  """
  a = parser.parse_args(argv)
  if a.quick:
    a.trials, a.outer_rounds, a.inner_rounds = (QUICK["trials"], QUICK["outer_rounds"],
                                                QUICK["inner_rounds"])
  for name in ("trials", "outer_rounds", "inner_rounds"):
    if getattr(a, name) < 1:
      raise FedJaxDpError(f"--{name.replace('_', '-')} must be >= 1, got "
                          f"{getattr(a, name)}.", option=name)
  os.makedirs(a.out, exist_ok=True)
  return a


# --------------------------------------------------------------------------- data


class Trial(types.SimpleNamespace):
  """One trial's data: ``train`` / ``test`` `mocha.Problem` (float32 ``x [30, n_max,
  d]``, ``y`` in {-1, +1}), the padded numpy arrays they came from (``x``, ``y`` int
  labels, ``counts``; ``test_x``, ``test_y``, ``test_counts``), ``constant_error``
  (the "always -1" predictor's mean per-device test error) and ``seed``."""


_TRIALS: Dict[Tuple[str, int], Trial] = {}


def _unit_rows(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """Rows flattened to ``[m, n, d]`` float32, scaled to unit L2 norm, padding zeroed."""
  m, n = x.shape[:2]
  flat = np.asarray(x, np.float32).reshape(m, n, -1)
  norms = np.linalg.norm(flat, axis=-1, keepdims=True)
  flat = np.where(norms > 0, flat / np.maximum(norms, 1e-30), 0.0)
  mask = np.arange(n)[None, :] < np.asarray(counts)[:, None]
  return (flat * mask[..., None]).astype(np.float32)


def load_trial(seed: int, dataset: str = "har_features") -> Trial:
  """Trial ``seed``'s data (cached per process: every script of one process, e.g. the
  test file, shares one load).

  ``har_features``: ``load_dataset("har_features", seed=seed, row_l2=True)`` (d = 561).
  ``har`` (fallback): the raw 128 x 6 windows flattened (d = 768), rows L2-normalised.
  Labels: class 3 (SITTING) -> +1, the rest -> -1 (`mocha.make_problem`).

  Raises:
    FedJaxDpError: unknown ``dataset``; the loader's errors (data not installed).
  """
  key = (dataset, int(seed))
  if key in _TRIALS:
    return _TRIALS[key]
  if dataset == "har_features":
    d = load_dataset("har_features", seed=int(seed), row_l2=True)
  elif dataset == "har":
    d = load_dataset("har", seed=int(seed))
  else:
    raise FedJaxDpError(f"dataset must be one of {DATASETS}, got {dataset!r}.",
                        option="dataset")
  x = _unit_rows(d.x, d.counts)
  tx = _unit_rows(d.client_test_x, d.client_test_counts)
  pc = PAPER["positive_class"]
  train = mocha.make_problem(x, d.y, d.counts, positive_class=pc)
  test = mocha.make_problem(tx, d.client_test_y, d.client_test_counts, positive_class=pc)
  const = float(objective.mean_device_error(np.zeros((x.shape[0], x.shape[-1]),
                                                     np.float32), test.x, test.y,
                                            test.mask))
  out = Trial(train=train, test=test, x=x, y=np.asarray(d.y), counts=np.asarray(d.counts),
              test_x=tx, test_y=np.asarray(d.client_test_y),
              test_counts=np.asarray(d.client_test_counts), constant_error=const,
              seed=int(seed), source=d.source)
  _TRIALS[key] = out
  return out


def data_label(dataset: str) -> str:
  """One line naming the data, with `FEATURES_NOTE`."""
  if dataset == "har_features":
    return ("HAR sitting-vs-rest, 30 subjects, UCI HAR's 561 features with "
            f"{FEATURES_NOTE}; rows L2-normalised; random per-subject 75/25 split "
            "(MOCHA's rule) redrawn per trial")
  return ("HAR (raw HAPT 128x6 windows flattened to 768 values, NOT the 561 features: "
          f"the fallback; {FEATURES_NOTE} is what har_features would give); rows "
          "L2-normalised; sitting vs rest")


def pooled(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> mocha.Problem:
  """Every device's real rows in ONE task (m = 1): the global SVM's problem."""
  xs = np.concatenate([x[t, :c] for t, c in enumerate(counts)])[None]
  ys = np.concatenate([y[t, :c] for t, c in enumerate(counts)])[None]
  return mocha.make_problem(xs, ys, np.array([xs.shape[1]]),
                            positive_class=PAPER["positive_class"])


def subset_rows(x: np.ndarray, y: np.ndarray, rows: Sequence[np.ndarray],
                n_pad: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The rows ``rows[t]`` (indices) of every device t as padded arrays ``(x [m, n_pad,
  d], labels [m, n_pad], counts [m])``; ``n_pad`` (default: the largest count) fixes the
  padded shape so that several subsets share one compiled program."""
  counts = np.array([len(r) for r in rows])
  n = int(counts.max()) if n_pad is None else int(n_pad)
  xs = np.zeros((len(rows), n, x.shape[-1]), np.float32)
  ys = np.full((len(rows), n), -1, np.int64)
  for t, r in enumerate(rows):
    xs[t, :len(r)] = x[t, r]
    ys[t, :len(r)] = y[t, r]
  return xs, ys, counts


def make_problem(x: np.ndarray, labels: np.ndarray, counts: np.ndarray) -> mocha.Problem:
  """`mocha.make_problem` with the paper's labels (class 3, SITTING, -> +1)."""
  return mocha.make_problem(x, labels, counts, positive_class=PAPER["positive_class"])


# --------------------------------------------------------------------------- lambda


def cv_file(out: str) -> Optional[str]:
  """The cv_lambda.json to read: ``<out>/cv_lambda.json``, else ``results/``'s, else
  None."""
  for folder in (out, RESULTS):
    path = os.path.join(folder, "cv_lambda.json")
    if os.path.exists(path):
      return path
  return None


def choose_lambda(a, method: str = "mtl") -> Tuple[float, str]:
  """``(lambda, where it came from)``: ``--lam`` if given, else cv_lambda.json's choice
  for ``method`` (``mtl``, ``local`` or ``global``; the MTL choice when the method was
  not cross-validated), else `FALLBACK_LAMBDA` (stated)."""
  if a.lam is not None:
    return float(a.lam), "--lam"
  path = cv_file(a.out)
  if path is not None:
    meta = load_json(path)["meta"]
    chosen = meta.get("chosen_lambda_by_method") or {}
    where = _show_path(path)
    if method in chosen:
      return float(chosen[method]), f"5-fold CV ({method}), {where}"
    if "mtl" in chosen:
      return float(chosen["mtl"]), f"5-fold CV of MOCHA (no CV for {method}), {where}"
  return FALLBACK_LAMBDA, (f"fallback {FALLBACK_LAMBDA}: no cv_lambda.json (run "
                           "cv_lambda.py first)")


def _show_path(path: str) -> str:
  """``path`` relative to the repository when inside it, else absolute."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  full = os.path.abspath(path)
  return os.path.relpath(full, root) if full.startswith(root + os.sep) else full


def load_json(path: str) -> Dict[str, Any]:
  """A results JSON (``{"meta": ..., "runs": [...]}``)."""
  with open(path) as f:
    return json.load(f)


# --------------------------------------------------------------------------- runs


def calibrate(counts: np.ndarray, epsilon: float, tau: float, drop: float, outer: int,
              inner: int, delta: float = PAPER["delta"]) -> Dict[str, Any]:
  """Per-device sigma1, sigma2 by the plug-in's own calibration (`plugin.DpMocha.noise_multipliers`
  with ``calibration="paper"``, ``calibration_rounds="total"``): Theorem 5 with note
  6.1's constants, q_t = (1 - tau / 2) n_min / n_t, p = 1 - drop, K = outer * inner
  (every round of the run), r = 1.

  Returns:
    dict: ``sigma1``, ``sigma2`` (float64 ``[m]``), ``q`` ``[m]``, ``p``, ``k`` and
    ``paper`` (`paper_calibration.PaperSigmas` per device).
  """
  opts = plugin.DpMochaOptions(epsilon=float(epsilon), calibration="paper",
                               calibration_rounds="total", budget_ratio=BUDGET_RATIO,
                               outer_rounds=int(outer), tau=float(tau),
                               drop_probability=float(drop))
  run = types.SimpleNamespace(rounds=int(outer) * int(inner), delta=float(delta))
  return plugin.DpMocha().noise_multipliers(opts, run, np.asarray(counts))


def ledger_fields(sim: Dict[str, Any], s1: np.ndarray, s2: np.ndarray,
                  delta: float = PAPER["delta"]) -> Dict[str, Any]:
  """The accountant's and the ledger's epsilons of one run, each the worst device's:

  * ``epsilon_accountant``: exact Gaussian composition with the paper's sensitivities
    and no amplification: rho_t = releases_t (sigma1_t^-2 + sigma2_t^-2), releases_t =
    the rounds device t was active (simulate's ``device_active``),
    `device_ledger.gaussian_epsilon` (RDP);
  * ``epsilon_provable``: the ledger's, rho_t = sum over rounds of z^-2 of simulate's
    ``device_noise_multiplier`` ``[R, m]`` (finite entries; the provable sensitivities).

  Also ``releases_min`` / ``releases_max``.
  """
  releases = np.asarray(sim["device_active"], np.float64).sum(axis=0)
  with np.errstate(divide="ignore"):
    rho_paper = releases * (1.0 / s1 ** 2 + 1.0 / s2 ** 2)
    z = np.asarray(sim["device_noise_multiplier"], np.float64)
    inc = np.where(np.isfinite(z), np.where(z > 0, 1.0 / z ** 2, np.inf), 0.0)
  rho = inc.sum(axis=0)
  return dict(
      epsilon_accountant=device_ledger.gaussian_epsilon(float(rho_paper.max()), delta),
      epsilon_provable=device_ledger.gaussian_epsilon(float(rho.max()), delta),
      releases_min=int(releases.min()), releases_max=int(releases.max()))


def privacy_fields(sim: Dict[str, Any], cal: Dict[str, Any], epsilon: float,
                   delta: float = PAPER["delta"]) -> Dict[str, Any]:
  """The three epsilons of one private run (each the worst device's):
  ``epsilon_paper`` (Theorem 5, our choice of its constants, at the calibrated sigmas,
  `paper_calibration.theorem5_epsilon`; equals the target by construction) and
  `ledger_fields`' ``epsilon_accountant`` and ``epsilon_provable``. Also sigma ranges,
  releases, q and p."""
  s1, s2, q = (np.asarray(cal[k], np.float64) for k in ("sigma1", "sigma2", "q"))
  eps_paper = [paper_calibration.theorem5_epsilon(float(a), delta, float(qt), cal["p"],
                                                  cal["k"], BUDGET_RATIO)
               for a, qt in zip(s1, q)]
  return dict(
      epsilon_target=float(epsilon), epsilon_paper=float(max(eps_paper)),
      epsilon_paper_min=float(min(eps_paper)), **ledger_fields(sim, s1, s2, delta),
      sigma1_min=float(s1.min()), sigma1_max=float(s1.max()), sigma2_min=float(s2.min()),
      sigma2_max=float(s2.max()), q_min=float(q.min()), q_max=float(q.max()),
      p=float(cal["p"]), calibration_rounds=int(cal["k"]),
      gaussian_condition_holds=bool(all(c.gaussian_valid for c in cal["paper"])))


NO_PRIVACY = dict(epsilon_target=None, epsilon_paper=None, epsilon_paper_min=None,
                  epsilon_accountant=None, epsilon_provable=None)


def finite_list(values) -> List[Optional[float]]:
  """float list with NaN / inf as None (JSON-safe)."""
  return [float(v) if np.isfinite(v) else None for v in np.asarray(values, np.float64)]


def run_point(trial: Trial, lam: float, outer: int, inner: int, *, tau: float = 0.0,
              drop: float = 0.0, epsilon: Optional[float] = None, update_omega: bool = True,
              curves: bool = False, problem: Optional[mocha.Problem] = None,
              test: Optional[mocha.Problem] = None,
              sigma: Optional[float] = None) -> Dict[str, Any]:
  """One `mocha.simulate` run (``epsilon`` None: non-private, sigma1 = sigma2 = 0).

  Args:
    trial: the data (``problem`` / ``test`` replace its train / test problems).
    lam, outer (H), inner (K): the objective's lambda and the scale.
    tau, drop: device variability and drop probability (Sec. VII-A).
    epsilon: the paper's per-device target (Theorem 5 calibration, `calibrate`).
    update_omega: False: Omega = I / m throughout (independent local SVMs).
    curves: keep the primal objective / duality gap every K / 10 rounds.
    problem: with one task (m = 1, the global SVM) and a multi-device ``test``, the one
      model is every device's and only the final error is computed.
    sigma: instead of ``epsilon``'s calibration, sigma1 = sigma2 = ``sigma`` on every
      device (the sigma sweep); the result then has `ledger_fields`' epsilons.

  Returns:
    dict: ``final_test_error`` (mean per-device 0/1 error after H outer iterations),
    ``test_error`` (after each outer iteration), ``final_primal``, ``wall_s``,
    ``mean_active``, the privacy fields (`privacy_fields` or `NO_PRIVACY`) and, with
    ``curves``, ``rounds``, ``primal``, ``duality_gap``.
  """
  problem = trial.train if problem is None else problem
  test = trial.test if test is None else test
  m = problem.x.shape[0]
  private = epsilon is not None
  cal = None
  if private:
    cal = calibrate(np.asarray(problem.counts), epsilon, tau, drop, outer, inner)
    s1, s2 = cal["sigma1"], cal["sigma2"]
  else:
    s1 = s2 = np.full(m, 0.0 if sigma is None else float(sigma))
  cfg = mocha.DpMochaConfig(lam=float(lam), xi=XI, inner_rounds=int(inner), s2_mode=S2_MODE,
                            resync=True, update_omega=update_omega)
  hp = mocha.DpMochaHParams(np.float32(tau), np.float32(drop), np.asarray(s1, np.float32),
                            np.asarray(s2, np.float32))
  shared = m == 1 and test.x.shape[0] > 1  # one global model for every device
  t0 = time.perf_counter()
  sim = mocha.simulate(problem, cfg, hp, int(outer), seed=trial.seed,
                       test=None if shared else test)
  wall = time.perf_counter() - t0
  if shared:
    w = np.repeat(sim["w"], test.x.shape[0], axis=0)
    sim["test_error"] = np.array([float(objective.mean_device_error(w, test.x, test.y,
                                                                     test.mask))])
  out = dict(final_test_error=float(sim["test_error"][-1]),
             test_error=finite_list(sim["test_error"]),
             final_primal=finite_list(sim["primal"][-1:])[0], wall_s=wall,
             mean_active=float(np.mean(np.asarray(sim["device_active"], np.float64))),
             **(privacy_fields(sim, cal, epsilon) if private else NO_PRIVACY))
  if sigma is not None and not private:
    out.update(ledger_fields(sim, np.asarray(s1, np.float64), np.asarray(s2, np.float64)))
  if curves:
    out.update(rounds=[int(r) for r in sim["round"]], primal=finite_list(sim["primal"]),
               duality_gap=finite_list(sim["duality_gap"]))
  return out


def sweep(a, name: str, points: List[Dict[str, Any]], meta: Dict[str, Any],
          curves: bool = False) -> Results:
  """Runs every point (``label`` + `run_point` keywords ``tau``, ``drop``, ``epsilon``
  and any other keys kept as-is) for trials 0 .. ``--trials`` - 1 into
  ``<out>/<name>.json`` (rewritten atomically after every run; ``--resume`` skips the
  runs already there at the same scale and lambda)."""
  lam, lam_source = choose_lambda(a)
  res = Results(os.path.join(a.out, f"{name}.json"),
                dict(meta, data=data_label(a.dataset), features_note=FEATURES_NOTE,
                     dataset=a.dataset, outer_rounds=a.outer_rounds,
                     inner_rounds=a.inner_rounds, trials=a.trials, quick=a.quick, lam=lam,
                     lam_source=lam_source, xi=XI, beta=XI * 30, budget_ratio=BUDGET_RATIO,
                     s2_mode=S2_MODE, delta=PAPER["delta"], paper=PAPER,
                     seeding=SEEDING),
                resume=a.resume or a.report_only)
  if a.report_only:
    return res
  for trial_id in range(a.trials):
    for pt in points:
      key = dict(label=pt["label"], trial=trial_id, outer_rounds=a.outer_rounds,
                 inner_rounds=a.inner_rounds, lam=lam, dataset=a.dataset)
      if res.has(**key):
        continue
      trial = load_trial(trial_id, a.dataset)
      kw = {k: pt[k] for k in ("tau", "drop", "epsilon") if k in pt}
      out = run_point(trial, lam, a.outer_rounds, a.inner_rounds, curves=curves, **kw)
      out.update(key, constant_error=trial.constant_error, split_seed=trial_id,
                 noise_seed=trial.seed, **{k: v for k, v in pt.items() if k != "label"})
      res.add(out)
      print(f"{name}: {pt['label']} trial {trial_id}: error {out['final_test_error']:.4f} "
            f"({out['wall_s']:.1f} s)", flush=True)
  return res


# --------------------------------------------------------------------------- reports


def current_runs(a, res: Results) -> List[Dict[str, Any]]:
  """The runs of the current scale and dataset (a resumed file may hold others)."""
  return [r for r in res.runs if r.get("outer_rounds") == a.outer_rounds
          and r.get("inner_rounds") == a.inner_rounds and r.get("dataset", a.dataset)
          == a.dataset and (a.report_only or r.get("lam") == res.meta.get("lam"))]


def by_label(runs) -> Dict[str, List[Dict[str, Any]]]:
  """``{label: [runs]}`` in first-seen order."""
  out: Dict[str, List[Dict[str, Any]]] = {}
  for r in runs:
    out.setdefault(r["label"], []).append(r)
  return out


def mean_std(values) -> Tuple[float, float]:
  """Mean and sample std (0 for one value) of the finite values; NaN for none."""
  v = [float(x) for x in values if x is not None and math.isfinite(x)]
  if not v:
    return float("nan"), float("nan")
  return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)


def fmt(values, digits: int = 4, spec: str = "f") -> str:
  """``mean ± std`` (``mean`` for one value, ``n/a`` for none), ``digits`` decimals; with
  ``spec="g"`` 4 significant digits and a 2-digit std (objectives spanning decades)."""
  v = [x for x in values if x is not None and math.isfinite(x)]
  if not v:
    return "n/a"
  m, s = mean_std(v)
  mf, sf = (f".{digits}f", f".{digits}f") if spec == "f" else (".4g", ".2g")
  return f"{m:{mf}}" if len(v) == 1 else f"{m:{mf}} ± {s:{sf}}"


def fmt_g(values) -> str:
  """`fmt` with 4 significant digits (for objectives spanning decades)."""
  return fmt(values, spec="g")


def fmt_eps(v) -> str:
  """An epsilon: 3 significant digits; large ones in scientific notation; ``–`` for
  None (non-private)."""
  if v is None:
    return "–"
  if not math.isfinite(v):
    return "inf"
  return f"{v:.3g}" if v < 1e5 else f"{v:.2e}"


def privacy_cells(runs) -> List[str]:
  """Cells sigma1 range, eps target / paper / accountant / provable (first trial's:
  the calibration does not depend on the trial's noise; releases do, slightly)."""
  r = runs[0]
  if r.get("epsilon_target") is None:
    return ["0 (non-private)", "–", "–", "–", "–"]
  acc = max(x["epsilon_accountant"] for x in runs)
  prov = max(x["epsilon_provable"] for x in runs)
  return [f"{r['sigma1_min']:.3g}..{r['sigma1_max']:.3g}", fmt_eps(r["epsilon_target"]),
          fmt_eps(r["epsilon_paper"]), fmt_eps(acc), fmt_eps(prov)]


TABLE_HEAD = ("| config | test error | sigma1 = sigma2 (devices) | eps target | eps paper "
              "(Thm 5) | eps accountant (paper's s1, s2) | eps provable (ledger) | "
              "active devices / round | s / run |")


def table_rows(groups: Dict[str, List[Dict[str, Any]]]) -> List[str]:
  """The standard table (`TABLE_HEAD`) of every label's runs (mean ± std over trials;
  epsilons: the worst device, the largest over trials)."""
  lines = [TABLE_HEAD, "|" + "---|" * (TABLE_HEAD.count("|") - 1)]
  for label, runs in groups.items():
    cells = [fmt([r["final_test_error"] for r in runs])] + privacy_cells(runs) + [
        f"{30 * mean_std([r['mean_active'] for r in runs])[0]:.1f}",
        f"{mean_std([r['wall_s'] for r in runs])[0]:.1f}"]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return lines


def header(res: Results, title: str, extra: str = "") -> List[str]:
  """The report's first lines: title, data (with `FEATURES_NOTE`), scale, lambda."""
  m = res.meta
  scale = (f"H = {m['outer_rounds']} outer x K = {m['inner_rounds']} inner rounds = "
           f"{m['outer_rounds'] * m['inner_rounds']} rounds (paper: H = 10, K = 2000 = "
           f"20000 rounds), {m['trials']} trial(s)"
           + (" (CI-reduced --quick run)" if m.get("quick") else ""))
  return [f"# {title}", "",
          f"Data: {m['data']}.", "",
          f"Scale: {scale}. lambda = {m['lam']:g} ({m['lam_source']}), xi = {m['xi']} "
          f"(beta = xi m = {m['beta']:g}), r = {m['budget_ratio']:g}, delta = {m['delta']:g}, "
          f"s2 mode {m['s2_mode']}, W resynced after each Omega update. Private runs: "
          "sigma1 = sigma2 per device by the paper's Theorem 5 (our constants, "
          "q_t = (1 - tau/2) n_min / n_t, p = 1 - P, K = all rounds of the run). Error: "
          "mean over devices of each device's 0/1 test error on its own held-out rows "
          "(mean ± std over trials). Epsilons: the worst device's.", ""] + (
              [extra, ""] if extra else [])


def write_md(a, name: str, lines: List[str]) -> None:
  """``<out>/<name>.md``, written atomically."""
  path = os.path.join(a.out, f"{name}.md")
  with open(path + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
  os.replace(path + ".tmp", path)


def plot(path: str, panels, title: str, logx: bool = False, logy: bool = False) -> None:
  """One PNG (written atomically), one axes per panel.

  Args:
    path: the PNG.
    panels: ``[(ylabel, xlabel, curves, hlines, points)]`` with ``curves = [(label, xs,
      mean, std or None)]``, ``hlines = [(label, y)]`` and ``points = [(label, x, y)]``.
    title: the figure's title (should carry `FEATURES_NOTE`).
    logx, logy: log axes.
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import textwrap
  width = max(7.5, 5.6 * len(panels))
  fig, axes = plt.subplots(1, len(panels), figsize=(width, 4.6), squeeze=False)
  for ax, (ylabel, xlabel, curves, hlines, points) in zip(axes.flat, panels):
    for label, xs, mean, std in curves:
      mean = np.asarray(mean, np.float64)
      ax.plot(xs, mean, marker="o", ms=3, label=label)
      if std is not None:
        ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
    for i, (label, y) in enumerate(hlines):
      ls, color = (("--", "gray"), (":", "green"), ("-.", "purple"))[i % 3]
      ax.axhline(y, ls=ls, lw=1.2, color=color, label=label)
    for label, x, y in points:
      ax.plot([x], [y], marker="*", ms=12, ls="none", color="red", label=label)
    if logx:
      ax.set_xscale("log")
    if logy:
      ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle("\n".join(textwrap.fill(t, int(width * 14)) for t in title.split("\n")),
               fontsize=9)
  fig.tight_layout()
  tmp = path + ".tmp.png"
  fig.savefig(tmp, dpi=110)
  plt.close(fig)
  os.replace(tmp, path)
