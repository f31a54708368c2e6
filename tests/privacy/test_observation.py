"""What the server observes decides the DpEvent (issue 30): independent checks.

* Attributable uploads (each upload seen with its sender): `VisibleParticipationDpEvent`,
  never amplification. Its PLD is checked against the closed-form hockey-stick
  divergence of the binomial mixture of Gaussians (the issue's F1 numbers), its RDP
  against numerical integration, heterogeneous rounds against a brute-force sum over
  participation patterns.
* Sampling without replacement (fixed-size cohorts, replace-one) has a PLD now (F9):
  checked against the exact divergence of the worst one-dimensional canary (computed
  here by numerical integration and FFT convolution), against the RDP bound it must
  improve on, and against the one-round profile of Dong, Roth, Su's C_p(f).
"""

import itertools
import math

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest
from scipy import integrate, signal, stats

from fedjax_dp.privacy import accountants, events
from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.validation import FedJaxDpError


def gaussian_delta(eps, mu):
  """Hockey-stick divergence of N(mu, 1) vs N(0, 1) (Balle and Wang 2018, Thm. 8)."""
  mu = np.asarray(mu, np.float64)
  out = np.zeros_like(mu)
  pos = mu > 0
  m = mu[pos]
  out[pos] = stats.norm.cdf(-eps / m + m / 2) - np.exp(eps) * stats.norm.cdf(-eps / m - m / 2)
  return out


def solve_epsilon(delta_of, delta, hi=200.0):
  lo = 0.0
  for _ in range(200):
    mid = (lo + hi) / 2
    if delta_of(mid) > delta:
      lo = mid
    else:
      hi = mid
  return hi


def exact_visible_epsilon(z, q, rounds, delta):
  """sum_k Binom(k; T, q) delta_G(eps; sqrt(k) / z) = delta, solved for eps."""
  k = np.arange(rounds + 1)
  w = stats.binom.pmf(k, rounds, q)
  return solve_epsilon(lambda e: float(np.sum(w * gaussian_delta(e, np.sqrt(k) / z))),
                       delta)


# --------------------------------------------------------------------------------------
# The one event builder.
# --------------------------------------------------------------------------------------

def test_make_dp_event_by_observation():
  g = dp_accounting.GaussianDpEvent(1.5)
  assert events.make_dp_event(1.5, 0.1) == dp_accounting.PoissonSampledDpEvent(0.1, g)
  assert events.make_dp_event(1.5, 0.1, observation="attributable") == \
      events.VisibleParticipationDpEvent(0.1, g)
  # Fixed size: the unit's participation probability is m / n, visible.
  assert events.make_dp_event(1.5, None, 2, "fixed_size", 50, 5, "attributable") == \
      events.VisibleParticipationDpEvent(0.1, dp_accounting.SelfComposedDpEvent(g, 2))
  assert events.make_dp_event(1.5, 1.0, observation="attributable") == g
  assert isinstance(events.make_dp_event(0.0, 0.5, observation="public"),
                    dp_accounting.NoOpDpEvent)
  assert isinstance(events.make_dp_event(0.0, 0.5, observation="attributable"),
                    dp_accounting.NonPrivateDpEvent)
  with pytest.raises(FedJaxDpError, match="observation"):
    events.make_dp_event(1.0, 0.1, observation="everything")


def test_attributable_user_level_needs_zero_out_or_replace_one():
  with pytest.raises(FedJaxDpError, match="add_remove"):
    events.check_observation("attributable", "poisson", "add_remove", "user")
  assert events.check_observation("attributable", "poisson", "zero_out", "user")
  assert events.check_observation("attributable", "fixed_size", "replace_one", "user")
  # At record level the upload belongs to the record's client, present in both worlds.
  assert events.check_observation("attributable", "poisson", "add_remove", "record")
  with pytest.raises(FedJaxDpError, match="add_remove"):
    PrivacyLedger(1e-5, observation="attributable")


# --------------------------------------------------------------------------------------
# Visible participation: PLD, RDP, heterogeneous rounds.
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,z,rounds,delta,exact,amplified", [
    # The F1 numbers: z relative to the replace-one sensitivity 2C.
    (100, 10, 1.0, 50, 1e-3, 11.24, 7.13),
    (1000, 10, 1.0, 100, 1e-5, 8.62, 1.48),
])
def test_visible_participation_pld_is_the_exact_binomial_mixture(n, m, z, rounds, delta,
                                                                 exact, amplified):
  ledger = PrivacyLedger(delta, sampler="fixed_size", population_size=n, cohort_size=m,
                         observation="attributable")
  ledger.record_many(np.full(rounds, z), np.full(rounds, m / n))
  reference = exact_visible_epsilon(z, m / n, rounds, delta)
  assert reference == pytest.approx(exact, abs=0.01)
  assert ledger.epsilon(accountant="pld") == pytest.approx(reference, rel=1e-4)
  assert ledger.epsilon(accountant="pld") >= reference - 1e-9  # pessimistic grid
  assert ledger.epsilon() >= ledger.epsilon(accountant="pld")  # RDP is an upper bound
  # What the old code claimed for the same uploads: amplification by sampling.
  old = accountants.compute_epsilon(z, m / n, rounds, delta, sampler="fixed_size",
                                    population_size=n, cohort_size=m)
  assert old == pytest.approx(amplified, abs=0.01) and old < reference


@pytest.mark.parametrize("alpha", [1.5, 2.0, 4.0, 9.0])
def test_visible_participation_rdp_by_numerical_integration(alpha):
  q, z = 0.3, 1.2
  mu = 1 / z
  # The observer sees (took part?, output): D_alpha = log(E_Q[(dP/dQ)^alpha]) / (alpha-1).
  inner, _ = integrate.quad(lambda x: math.exp(alpha * stats.norm.logpdf(x, mu)
                                               + (1 - alpha) * stats.norm.logpdf(x)),
                            -30, 40, limit=400, epsabs=0, epsrel=1e-11)
  expected = math.log((1 - q) + q * inner) / (alpha - 1)
  got = accountants.visible_participation_rdp(q, [alpha], [alpha / (2 * z * z)])[0]
  assert got == pytest.approx(expected, rel=1e-8)
  event = events.VisibleParticipationDpEvent(q, dp_accounting.GaussianDpEvent(z))
  vec, _ = accountants._rdp_uncached(event, (alpha,), events.NeighborRel.ADD_OR_REMOVE_ONE)
  assert vec[0] == pytest.approx(expected, rel=1e-8)


def test_visible_participation_heterogeneous_rounds_against_brute_force():
  """Six rounds with different z and q: the exact delta is a sum over the 2^6
  participation patterns of Gaussians composed over the rounds taken part in."""
  zs = np.array([0.8, 1.0, 1.3, 0.9, 2.0, 1.1])
  qs = np.array([0.2, 0.5, 0.3, 0.1, 0.9, 0.4])
  delta = 1e-4

  def delta_of(eps):
    total = 0.0
    for pattern in itertools.product([0, 1], repeat=6):
      s = np.asarray(pattern, bool)
      w = np.prod(np.where(s, qs, 1 - qs))
      mu = math.sqrt(np.sum(1 / zs[s] ** 2))
      total += w * gaussian_delta(eps, np.array([mu]))[0]
    return total

  reference = solve_epsilon(delta_of, delta)
  ledger = PrivacyLedger(delta, relation="zero_out", observation="attributable")
  ledger.record_many(zs, qs)
  assert ledger.epsilon(accountant="pld") == pytest.approx(reference, rel=1e-3)
  assert ledger.epsilon() >= reference


def test_visible_participation_truncation_uses_the_real_rate():
  """Issue 30 (F6): the cohort-overflow term used the accounting rate 1 for local-noise
  Poisson runs (probability 1: a vacuous delta)."""
  ledger = PrivacyLedger(1e-3, relation="zero_out", observation="attributable",
                         truncation=events.Truncation(30, 29))
  ledger.record_many(np.full(50, 2.0), np.full(50, 0.5))
  p = 50 * stats.binom.sf(29, 31, 0.5)
  assert ledger.truncation_probability() == pytest.approx(p, rel=1e-9)
  assert ledger.truncation_probability() < 1e-6
  assert ledger.delta_total() < 1.0


# --------------------------------------------------------------------------------------
# Sampling without replacement: its PLD (F9).
# --------------------------------------------------------------------------------------

def _substitute_canary_epsilon(z, q, rounds, delta, h=2e-4):
  """Exact epsilon of the worst one-dimensional replace-one canary under sampling
  without replacement: the sum of clipped updates (norm C) with noise sigma = 2 C z sees
  the canary's +C with probability q in one world and -C in the other:
  P = (1-q) N(0, s^2) + q N(C, s^2) vs Q = (1-q) N(0, s^2) + q N(-C, s^2), composed
  ``rounds`` times (its privacy loss discretised upward on a grid of h nats and
  convolved by FFT)."""
  s, c = z, 0.5
  x = np.linspace(-30 * s - 3, 30 * s + 3, 400_001)
  lp = np.logaddexp(np.log1p(-q) + stats.norm.logpdf(x, 0, s),
                    np.log(q) + stats.norm.logpdf(x, c, s))
  lq = np.logaddexp(np.log1p(-q) + stats.norm.logpdf(x, 0, s),
                    np.log(q) + stats.norm.logpdf(x, -c, s))
  w = np.exp(lp)
  w /= w.sum()
  idx = np.ceil((lp - lq) / h).astype(np.int64)
  lo = int(idx.min())
  pmf = np.bincount(idx - lo, weights=w)
  out, out_lo = np.array([1.0]), 0
  for _ in range(rounds):
    out = np.maximum(signal.fftconvolve(out, pmf), 0.0)
    out_lo += lo
    keep = out > 1e-300
    first, last = np.argmax(keep), len(keep) - np.argmax(keep[::-1])
    out, out_lo = out[first:last], out_lo + first
  losses = (out_lo + np.arange(len(out))) * h

  def delta_of(eps):
    m = losses > eps
    return float(np.sum(out[m] * -np.expm1(eps - losses[m])))

  return solve_epsilon(delta_of, delta, hi=60.0)


@pytest.mark.parametrize("n,m,z,rounds,delta", [(100, 10, 1.0, 20, 1e-3),
                                                (30, 10, 1.5, 10, 1e-5)])
def test_without_replacement_pld_is_valid_and_tighter_than_rdp(n, m, z, rounds, delta):
  ledger = PrivacyLedger(delta, sampler="fixed_size", population_size=n, cohort_size=m)
  ledger.record_many(np.full(rounds, z), np.full(rounds, m / n))
  pld, rdp = ledger.epsilon(accountant="pld"), ledger.epsilon()
  canary = _substitute_canary_epsilon(z, m / n, rounds, delta)
  assert canary <= pld < rdp
  # Not the maximum of Poisson's two directions composed separately: that is below the
  # replace-one bound, which switches direction along the trade-off curve.
  both = dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(
      z, sampling_prob=m / n).self_compose(rounds).get_epsilon_for_delta(delta)
  assert both < pld


def test_without_replacement_one_round_profile_is_the_symmetrised_poisson_profile():
  """One round's PLD has the privacy profile max(delta_remove, delta_add) of the
  Poisson-subsampled Gaussian (Dong, Roth, Su's C_p(f)); both computed here from the
  closed forms (Balle, Barthe, Gaboardi 2018 for remove; the add direction by the
  change of variables x* below)."""
  z, q = 1.0, 0.2
  mu = 1 / z
  pld = accountants.sampled_without_replacement_gaussian_pld(z, q, 1e-4)
  for eps in (0.0, 0.1, 0.5, 1.0, 2.0, 3.0):
    e2 = math.log((math.exp(eps) - (1 - q)) / q)
    remove = q * gaussian_delta(e2, np.array([mu]))[0]
    add = 0.0
    a = 1 - math.exp(eps) * (1 - q)
    if a > 0:  # P = N(0, 1) vs Q = (1-q) N(0, 1) + q N(mu, 1): region x < x*
      xs = (math.log(a / (math.exp(eps) * q)) + mu * mu / 2) / mu
      add = a * stats.norm.cdf(xs) - math.exp(eps) * q * stats.norm.cdf(xs - mu)
    expected = max(remove, add)
    got = pld.get_delta_for_epsilon(eps)
    assert got >= expected - 1e-12  # pessimistic
    assert got == pytest.approx(expected, rel=2e-3, abs=1e-9)
