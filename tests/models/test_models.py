"""Tests of `fedjax_dp.models` (modules, `Model`, losses, `count_params`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models import MODEL_NAMES, count_params, create_model
from fedjax_dp.models.core import cross_entropy_loss, multiclass_hinge_loss
from fedjax_dp.validation import FedJaxDpError


@pytest.mark.parametrize("name,feature_shape", [
    ("mlp", (4, 3)), ("cnn", (8, 8)), ("cnn", (6, 6, 2)), ("lenet5", (16, 16, 1)),
    ("cnn_fc50", (16, 16)),
    ("har_cnn", (16, 3)), ("cnn3", (8, 8)), ("cnn3", (32, 32, 3)),
    ("linear", (2, 3, 2)),
])
def test_logits_shape(name, feature_shape):
  num_classes, batch = 4, 3
  model = create_model(name, feature_shape, num_classes, hidden=(7,))
  params = jax.jit(model.init)(jax.random.key(0))
  for leaf in jax.tree_util.tree_leaves(params):
    assert leaf.dtype == jnp.float32
  x = jax.random.normal(jax.random.key(1), (batch,) + feature_shape)

  @jax.jit
  def run(params, x, y):
    loss, logits2 = model.loss_and_logits(params, x, y)
    return model.apply(params, x), loss, logits2, model.apply(params, x[:1])

  logits, loss, logits2, first = run(params, x, jnp.array([0, 1, 3]))
  assert logits.shape == (batch, num_classes) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(np.asarray(logits)))
  assert loss.shape == (batch,)
  np.testing.assert_allclose(np.asarray(logits2), np.asarray(logits), rtol=1e-6)
  # Examples are independent: the logits of one row do not depend on the others.
  np.testing.assert_allclose(np.asarray(first), np.asarray(logits[:1]), rtol=1e-5, atol=1e-6)
  assert model.feature_shape == feature_shape and model.num_classes == num_classes


def test_all_model_names_covered():
  assert set(MODEL_NAMES) == {"mlp", "cnn", "cnn3", "lenet5", "cnn_fc50", "har_cnn",
                              "linear", "char_lstm", "char_transformer"}


def test_cnn3_is_the_papers_cifar_cnn():
  """Paper 003's CNN with SAME padding: 930,826 parameters on 32x32x3 (note 6.3)."""
  model = create_model("cnn3", (32, 32, 3), 10, hidden=(128, 256))
  assert count_params(model.init(jax.random.key(0))) == 930_826


def test_count_params_mlp_hand_count():
  model = create_model("mlp", (5, 2), 3, hidden=(7, 4))
  params = model.init(jax.random.key(0))
  assert count_params(params) == (10 * 7 + 7) + (7 * 4 + 4) + (4 * 3 + 3)
  linear = create_model("linear", (6,), 2)
  assert count_params(linear.init(jax.random.key(0))) == 6 * 2 + 2
  assert count_params({}) == 0


def test_linear_activation_mlp_is_affine():
  model = create_model("mlp", (4,), 3, hidden=(5,), activation="linear")
  params = model.init(jax.random.key(0))
  a, b = jax.random.normal(jax.random.key(1), (2, 1, 4))
  f = lambda v: np.asarray(model.apply(params, v), np.float64)
  zero = jnp.zeros((1, 4))
  np.testing.assert_allclose(f(a + b) - f(zero), (f(a) - f(zero)) + (f(b) - f(zero)),
                             atol=1e-5)
  relu = create_model("mlp", (4,), 3, hidden=(5,))
  g = lambda v: np.asarray(relu.apply(params, v), np.float64)
  big = jnp.concatenate([a, -a])
  assert not np.allclose(g(big[:1]) + g(big[1:]), 2 * g(zero), atol=1e-4)


def test_hinge_loss_matches_formula():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(20, 4)).astype(np.float32) * 2
  labels = rng.integers(0, 4, size=20)
  out = np.asarray(multiclass_hinge_loss(jnp.asarray(logits), jnp.asarray(labels)))
  expected = []
  for s, y in zip(logits, labels):
    other = max(s[j] for j in range(4) if j != y)
    expected.append(max(0.0, 1.0 + other - s[y]))
  np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
  assert np.any(out == 0.0) and np.any(out > 0.0)  # both regimes exercised
  # Binary case is the SVM hinge on the margin.
  two = jnp.array([[0.0, 3.0], [0.0, 0.2], [1.0, 0.0]])
  np.testing.assert_allclose(np.asarray(multiclass_hinge_loss(two, jnp.array([1, 1, 1]))),
                             [0.0, 0.8, 2.0], rtol=1e-6)


def test_model_loss_selection():
  logits = jnp.array([[2.0, 0.0, -1.0], [0.0, 0.5, 0.1]])
  labels = jnp.array([0, 2])
  hinge = create_model("linear", (3,), 3, loss="hinge")
  ce = create_model("linear", (3,), 3)
  np.testing.assert_allclose(np.asarray(hinge.per_example_loss(logits, labels)),
                             np.asarray(multiclass_hinge_loss(logits, labels)))
  lse = np.log(np.sum(np.exp(np.asarray(logits, np.float64)), axis=1))
  expected_ce = lse - np.asarray(logits)[np.arange(2), np.asarray(labels)]
  np.testing.assert_allclose(np.asarray(ce.per_example_loss(logits, labels)), expected_ce,
                             rtol=1e-5)
  np.testing.assert_allclose(np.asarray(cross_entropy_loss(logits, labels)), expected_ce,
                             rtol=1e-5)


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="cnn", feature_shape=(10,)), "cnn"),
    (dict(name="cnn", feature_shape=(2, 2, 2, 2)), "cnn"),
    (dict(name="har_cnn", feature_shape=(8, 8, 1)), "har_cnn"),
    (dict(name="har_cnn", feature_shape=(8,)), "har_cnn"),
    (dict(name="resnet", feature_shape=(8,)), "model"),
    (dict(name="mlp", feature_shape=(8,), num_classes=1), "num_classes"),
    (dict(name="mlp", feature_shape=(8,), loss="mse"), "loss"),
    (dict(name="mlp", feature_shape=(8,), activation="tanh"), "activation"),
])
def test_bad_arguments_raise(kwargs, match):
  kwargs = {"num_classes": 3, **kwargs}
  with pytest.raises(FedJaxDpError, match=match):
    create_model(**kwargs)
  assert issubclass(FedJaxDpError, ValueError)


def test_cnn_fc50_matches_paper_001_layout():
  """Paper 001's CNN (note 001 section 5 [D]): conv 10 and 20 (5x5), a norm with 40
  parameters, dense 50 and 10: 21,880 parameters on 28x28; each example is normalised
  on its own (no batch coupling: a row's logits do not depend on the other rows)."""
  import jax
  from fedjax_dp.models import count_params, create_model
  m = create_model("cnn_fc50", (28, 28), 10)
  p = m.init(jax.random.key(0))
  assert count_params(p) == 21880
  x = np.asarray(jax.random.normal(jax.random.key(1), (3, 28, 28)))
  full = np.asarray(m.apply(p, x))
  np.testing.assert_allclose(np.asarray(m.apply(p, x[:1])), full[:1], rtol=1e-5, atol=1e-5)
  with pytest.raises(FedJaxDpError, match="cnn_fc50"):
    create_model("cnn_fc50", (8, 8), 10)


def test_lenet5_matches_paper_004_layout():
  """2 conv (5x5, 6 and 16 filters) + 3 dense (120, 84, 10): 44,426 parameters on
  28x28x1 and 62,006 on 32x32x3 (the paper-004 note, section 5.3)."""
  import jax
  from fedjax_dp.models import count_params, create_model
  for shape, n in (((28, 28, 1), 44426), ((32, 32, 3), 62006)):
    m = create_model("lenet5", shape, 10)
    p = m.init(jax.random.key(0))
    assert count_params(p) == n
    assert m.apply(p, np.zeros((2,) + shape, np.float32)).shape == (2, 10)
