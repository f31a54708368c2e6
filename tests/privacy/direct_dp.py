"""Direct dp_accounting computations that the privacy tests compare fedjax_dp with."""

import dp_accounting
from dp_accounting import rdp as dp_rdp

DELTA = 1e-5
ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def poisson(z, q):
  """A Poisson-sampled Gaussian DpEvent (rate ``q``, noise multiplier ``z``)."""
  return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))


def direct_rdp_epsilon(events, delta=DELTA, relation=ADD_REMOVE):
  """Epsilon of ``events`` composed by dp_accounting's own RdpAccountant."""
  acc = dp_rdp.RdpAccountant(neighboring_relation=relation)
  for event in events:
    acc.compose(event)
  return acc.get_epsilon(delta)
