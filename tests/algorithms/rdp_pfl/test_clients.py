"""Paper 003's clients: the 3-class partition (note 6.2), source/target and query/support
splits, and the one-step personalisation (eq. 4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.algorithms.rdp_pfl import clients
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError


def _data(per_class=120, classes=10, test_per_class=30, seed=0):
  rng = np.random.default_rng(seed)
  y = np.repeat(np.arange(classes), per_class)
  x = (rng.normal(size=(len(y), 5)) + y[:, None]).astype(np.float32)
  ty = np.repeat(np.arange(classes), test_per_class)
  tx = (rng.normal(size=(len(ty), 5)) + ty[:, None]).astype(np.float32)
  # tag every image with its index, to check that none is used twice
  x[:, 0] = np.arange(len(y))
  return x, y, tx, ty


def test_partition_has_the_papers_structure():
  x, y, tx, ty = _data()
  sp = clients.make_meta_split(x, y, tx, ty, num_classes=10, num_clients=20,
                               samples_per_class=10, test_per_class=5, seed=3)
  sets = sp.class_sets
  assert sets.shape == (20, 3)
  assert len({tuple(s) for s in sets}) == 20                      # distinct class sets
  assert np.all(np.diff(sets, axis=1) > 0)                        # 3 distinct classes
  fd = sp.source
  assert fd.num_clients == 12 and sp.adapt_x.shape[0] == 8        # 40% target
  used = []
  for i in range(12):
    labels = fd.y[i, :fd.counts[i]]
    assert set(labels) == set(sets[i]) and np.all(np.bincount(labels)[sets[i]] == 10)
    used += list(fd.x[i, :fd.counts[i], 0])
  for k in range(8):
    labels = sp.adapt_y[k, :sp.adapt_counts[k]]
    assert set(labels) == set(sets[12 + k])
    assert set(sp.test_y[k, :sp.test_counts[k]]) == set(sets[12 + k])
    assert sp.test_counts[k] == 15
    used += list(sp.adapt_x[k, :sp.adapt_counts[k], 0])
  assert len(used) == len(set(used)) == 20 * 30                   # no image twice
  # the central test set (evaluation without adaptation) is the targets' test images
  assert len(fd.test_y) == 8 * 15


def test_query_rows_are_a_fixed_rule_of_position():
  """Adding a record (the next row) never moves another between query and support."""
  for f in (0.5, 0.3, 0.8):
    rows = clients.is_query_row(40, f)
    for n in range(1, 40):
      nq, ns = clients.split_counts(np.array([n]), f)
      assert rows[:n].sum() == nq[0] == np.floor(n * f + 1e-9) and nq[0] + ns[0] == n


def test_capacity_and_distinctness_errors_name_the_argument():
  x, y, tx, ty = _data(per_class=40)
  with pytest.raises(FedJaxDpError, match="samples_per_class"):
    clients.make_meta_split(x, y, tx, ty, num_classes=10, num_clients=50,
                            samples_per_class=20)
  with pytest.raises(FedJaxDpError, match="distinct class sets"):
    clients.make_meta_split(x, y, tx, ty, num_classes=10, num_clients=121,
                            samples_per_class=1 + 1)
  with pytest.raises(FedJaxDpError, match="target_fraction"):
    clients.make_meta_split(x, y, tx, ty, num_classes=10, num_clients=10,
                            samples_per_class=5, target_fraction=1.0)


def test_without_a_test_split_targets_hold_out_their_own_images():
  x, y, _, _ = _data()
  sp = clients.make_meta_split(x, y, None, None, num_classes=10, num_clients=10,
                               samples_per_class=10, test_per_class=4, seed=1)
  adapt = set(sp.adapt_x[..., 0][sp.adapt_x[..., 0] > 0].tolist())
  test = set(sp.test_x[..., 0][sp.test_x[..., 0] > 0].tolist())
  assert adapt.isdisjoint(test) and all(c == 12 for c in sp.test_counts)


def test_personalisation_is_one_gradient_step():
  model = create_model("mlp", (5,), 10, hidden=(4,))
  w = model.init(jax.random.key(0))
  x, y, tx, ty = _data()
  sp = clients.make_meta_split(x, y, tx, ty, num_classes=10, num_clients=10,
                               samples_per_class=6, test_per_class=3)
  ax, ay, ac = (jnp.asarray(a) for a in (sp.adapt_x, sp.adapt_y, sp.adapt_counts))
  theta = clients.personalise(model, w, ax[0], ay[0], ac[0], 0.5)

  def f(p):
    return jnp.mean(model.per_example_loss(model.apply(p, ax[0, :ac[0]]), ay[0, :ac[0]]))

  ref = jax.tree_util.tree_map(lambda a, g: a - 0.5 * g, w, jax.grad(f)(w))
  for u, v in zip(jax.tree_util.tree_leaves(theta), jax.tree_util.tree_leaves(ref)):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
  out = clients.personalised_metrics(model, w, (ax, ay, ac),
                                     tuple(jnp.asarray(a) for a in (sp.test_x, sp.test_y,
                                                                    sp.test_counts)), 0.5)
  loss, acc, loss0, acc0 = (float(v) for v in out)
  assert 0 <= acc <= 1 and 0 <= acc0 <= 1 and loss > 0 and loss0 > 0
  # eta = 0: adaptation changes nothing
  same = clients.personalised_metrics(model, w, (ax, ay, ac), tuple(
      jnp.asarray(a) for a in (sp.test_x, sp.test_y, sp.test_counts)), 0.0)
  assert float(same[0]) == pytest.approx(float(same[2]), rel=1e-6)
