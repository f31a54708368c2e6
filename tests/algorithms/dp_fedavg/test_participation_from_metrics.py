"""Structured participation end to end: `fedjax-dp run --algorithm dp_fedavg --sampler
balls_in_bins | random_allocation | cyclic_poisson`, and its epsilon recomputed from
metrics.jsonl alone, without fedjax_dp's accounting code:

* cyclic_poisson: dp_accounting, the Poisson-sampled Gaussian at q b in the rounds
  r mod b == 0 (the worst group's);
* balls_in_bins / random_allocation: an independent small Monte Carlo here (the mixture
  density written as an explicit sum over the k-subsets, not the elementary symmetric
  recursion), whose point epsilon must lie between the one at delta and the one at
  delta / 3: the run's epsilon is an upper confidence bound (accepted delta estimates
  are at most ~0.6 delta with the production draws), so it sits above the point value
  at delta, and not far.
"""

import itertools
import json
import math

import dp_accounting
import numpy as np
import pytest
from scipy import optimize, special

from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError

SYNTH = dict(dataset="synthetic", num_clients=20, model="mlp", hidden="8", rounds=6,
             eval_every=3, delta=1e-2, algorithm="dp_fedavg", noise_multiplier=1.2)


def _run(tmp_path, **extra):
  out = tmp_path / extra["sampler"]
  res = run(RunConfig.from_dict(dict(SYNTH, out=str(out), **extra)).validate(),
            progress=False)
  rows = [json.loads(l) for l in open(out / "metrics.jsonl")]
  return res, rows


def _mc_epsilon(z, t, k, epochs, delta, n=40_000, seed=11):
  """Point estimate: P = mixture over k-subsets of N(mu 1_S, I), Q = N(0, I); the larger
  of the two directions' smallest eps with mean (1 - e^{eps - L})_+ <= delta."""
  rng = np.random.default_rng(seed)
  mu = 1 / z
  subsets = [list(s) for s in itertools.combinations(range(t), k)]

  def loss(x):  # log mean_S exp(mu sum_S x - k mu^2 / 2), explicitly over the subsets
    terms = np.stack([mu * x[:, s].sum(axis=1) for s in subsets], axis=1)
    return special.logsumexp(terms, axis=1) - math.log(len(subsets)) - k * mu * mu / 2

  def epoch(present):
    x = rng.normal(size=(n, t))
    if present:
      pick = np.array([subsets[i] for i in rng.integers(len(subsets), size=n)])
      np.put_along_axis(x, pick, np.take_along_axis(x, pick, 1) + mu, axis=1)
    return loss(x) if present else -loss(x)

  eps = 0.0
  for present in (True, False):
    total = sum(epoch(present) for _ in range(epochs))
    d = lambda e: np.mean(np.maximum(0.0, -np.expm1(e - total))) - delta
    eps = max(eps, 0.0 if d(0.0) <= 0 else optimize.brentq(d, 0, 50))
  return eps


@pytest.mark.parametrize("sampler,extra,t,k", [
    # balls-in-bins calibrated to a target epsilon (bisection on the MC accountant)
    ("balls_in_bins", dict(sampling_rate=0.25, noise_multiplier=None, target_epsilon=3.0),
     4, 1),
    ("random_allocation", dict(sampling_rate=0.5, participations_per_epoch=2), 4, 2),
])
def test_allocation_epsilon_from_metrics(tmp_path, sampler, extra, t, k):
  res, rows = _run(tmp_path, sampler=sampler, **extra)
  last = rows[-1]
  assert (last["sampler"], last["epoch_length"], last["participations_per_epoch"]) == (
      sampler, t, k)
  assert last["accounting_method"] == "monte_carlo" and last["mc_samples"] >= 100_000
  assert res.summary["sampler"] == sampler and res.summary["mc_confidence"] == 0.999
  z = last["noise_stddev"] / last["sensitivity"]
  if "target_epsilon" in extra:
    assert 2.9 < last["epsilon"] <= 3.0  # calibrated, not merely safe
  else:
    assert z == pytest.approx(1.2, rel=1e-6)
  assert last["sampling_rate"] == pytest.approx(k / t, rel=1e-6)
  epochs = math.ceil(len(rows) / t)  # a partial epoch charged as a full one
  lo = _mc_epsilon(z, t, k, epochs, last["delta"])
  hi = _mc_epsilon(z, t, k, epochs, last["delta"] / 3)
  assert lo <= last["epsilon"] <= hi, (lo, last["epsilon"], hi)
  assert res.summary["epsilon"] == pytest.approx(last["epsilon"])


def test_cyclic_poisson_epsilon_from_metrics(tmp_path):
  res, rows = _run(tmp_path, sampler="cyclic_poisson", sampling_rate=0.2, min_separation=3)
  acc = dp_accounting.rdp.RdpAccountant()
  for i, r in enumerate(rows):
    assert r["sampler"] == "cyclic_poisson"
    if i % r["min_separation"] == 0:
      acc.compose(dp_accounting.PoissonSampledDpEvent(
          r["sampling_rate"] * r["min_separation"],
          dp_accounting.GaussianDpEvent(r["noise_stddev"] / r["sensitivity"])))
    assert acc.get_epsilon(r["delta"]) == pytest.approx(r["epsilon"], rel=1e-6)
  assert res.summary["epsilon_rdp"] == pytest.approx(rows[-1]["epsilon"], rel=1e-6)


def test_contradictory_options_refused(tmp_path):
  for extra, option in ((dict(sampler="poisson", participations_per_epoch=2),
                         "participations_per_epoch"),
                        (dict(sampler="cyclic_poisson"), "min_separation"),
                        (dict(sampler="balls_in_bins", min_separation=2), "min_separation")):
    with pytest.raises(FedJaxDpError) as e:
      RunConfig.from_dict(dict(SYNTH, out=str(tmp_path / "x"), **extra)).validate()
    assert e.value.option == option
  with pytest.raises(FedJaxDpError, match="not supported by this algorithm"):
    cfg = {k: v for k, v in SYNTH.items() if k not in ("noise_multiplier", "delta")}
    run(RunConfig.from_dict(dict(cfg, algorithm="fedavg", sampler="balls_in_bins",
                                 sampling_rate=0.25, out=str(tmp_path / "y"))).validate(),
        progress=False)
