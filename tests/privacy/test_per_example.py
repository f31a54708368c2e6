"""Per-example clipped gradient sums: the ghost path equals the vmap(grad) reference."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models import Model, create_model
from fedjax_dp.privacy import per_example as pe
from fedjax_dp.validation import FedJaxDpError


def _batch(shape, num_classes, b=7, seed=1):
  x = jax.random.normal(jax.random.PRNGKey(seed), (b,) + tuple(shape))
  y = jax.random.randint(jax.random.PRNGKey(seed + 1), (b,), 0, num_classes)
  return x, y


def _reference(model, params, x, y, w, c):
  """Per-example gradients one at a time (no vmap), clipped and summed in float64."""
  total = None
  norms = []
  for i in range(x.shape[0]):
    g = jax.grad(lambda p: model.per_example_loss(model.apply(p, x[i:i + 1]), y[i:i + 1])[0])(
        params)
    leaves = [np.asarray(l, np.float64) for l in jax.tree_util.tree_leaves(g)]
    n = np.sqrt(sum(np.sum(l * l) for l in leaves))
    norms.append(n)
    s = float(w[i]) * min(1.0, c / n) if n > 0 else float(w[i])
    leaves = [s * l for l in leaves]
    total = leaves if total is None else [a + b for a, b in zip(total, leaves)]
  return total, np.array(norms)


def _assert_close(result, ref_total, ref_norms, w):
  got = [np.asarray(l, np.float64) for l in jax.tree_util.tree_leaves(result.total)]
  scale = max(np.max(np.abs(l)) for l in ref_total)
  for a, b in zip(got, ref_total):
    np.testing.assert_allclose(a, b, atol=2e-5 * scale, rtol=0)
  real = np.asarray(w) > 0
  np.testing.assert_allclose(np.asarray(result.norms)[real], ref_norms[real], rtol=2e-4)


@pytest.mark.parametrize("name,shape,classes", [
    ("mlp", (28, 28), 10), ("cnn", (28, 28, 1), 62), ("har_cnn", (128, 6), 6),
    ("linear", (12,), 3)])
def test_ghost_and_vmap_equal_the_per_example_reference(name, shape, classes):
  model = create_model(name, shape, classes)
  params = model.init(jax.random.PRNGKey(0))
  x, y = _batch(shape, classes)
  w = jnp.array([1, 1, 0, 1, 1, 1, 0], jnp.float32)
  x = x.at[2].set(jnp.nan)  # a padded row's contents must not matter
  c = 0.5
  ok, why = pe.ghost_support(model, params, x)
  assert ok, why
  xr = jnp.where(w[:, None, None] > 0 if x.ndim == 3 else
                 (w > 0).reshape((-1,) + (1,) * (x.ndim - 1)), x, 0)
  ref_total, ref_norms = _reference(model, params, xr, y, w, c)
  assert np.sum(ref_norms[np.asarray(w) > 0] > c) >= 2  # the clip binds for some rows
  for method in ("ghost", "vmap", "auto"):
    out = jax.jit(lambda p, x, y, w: pe.clipped_grad_sum(model, p, x, y, w, c, method=method))(
        params, x, y, w)
    _assert_close(out, ref_total, ref_norms, w)
    assert bool(jnp.all(out.finite))
    assert out.loss.shape == (7,)
  assert pe.resolve_method(model, params, x) == "ghost"


class _Mixed(nn.Module):
  """Strided flax Conv, LayerNorm, a Dense on a sequence (3-D input) and a head."""
  seq_features: int = 4

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(3, (3, 3), strides=(2, 2), padding="SAME")(x)
    x = nn.LayerNorm()(x)
    b, h, w, c = x.shape
    x = x.reshape((b, h * w, c))           # a sequence of T = h*w tokens
    x = nn.tanh(nn.Dense(self.seq_features)(x))
    return nn.Dense(5)(x.reshape((b, -1)))


@pytest.mark.parametrize("image,seq_features", [((8, 8, 2), 4), ((4, 4, 2), 64)])
def test_ghost_on_flax_conv_layernorm_and_sequence_dense(image, seq_features):
  # (8,8) -> T = 16 tokens, d_in 3 x d_out 4: the direct ||a^T e|| branch;
  # (4,4) -> T = 4, d_in 3 x d_out 64: the ghost-norm <aa^T, ee^T> branch.
  model = Model("mixed", _Mixed(seq_features), image, 5)
  params = model.init(jax.random.PRNGKey(3))
  x, y = _batch(image, 5, b=5)
  w = jnp.ones(5)
  assert pe.ghost_support(model, params, x) == (True, "")
  ref_total, ref_norms = _reference(model, params, x, y, w, 0.3)
  out = pe.clipped_grad_sum(model, params, x, y, w, 0.3, method="ghost")
  _assert_close(out, ref_total, ref_norms, w)


class _Shared(nn.Module):
  @nn.compact
  def __call__(self, x):
    d = nn.Dense(x.shape[-1])
    return nn.Dense(3)(d(nn.relu(d(x))))     # the same Dense twice: shared weights


class _OwnParamAndChild(nn.Module):
  @nn.compact
  def __call__(self, x):
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
    return nn.Dense(3)(x * scale)


class _WithBatchNorm(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(3)(nn.BatchNorm(use_running_average=False)(x))


@pytest.mark.parametrize("module,reason", [
    (_Shared(), "more than once"), (_OwnParamAndChild(), "outside a leaf"),
    (_WithBatchNorm(), "does not apply with params alone")])
def test_models_the_ghost_path_cannot_serve_fall_back_to_vmap(module, reason):
  model = Model("m", module, (6,), 3)
  x, y = _batch((6,), 3, b=4)
  if isinstance(module, _WithBatchNorm):
    params = module.init(jax.random.PRNGKey(0), x)["params"]
  else:
    params = model.init(jax.random.PRNGKey(0))
  ok, why = pe.ghost_support(model, params, x)
  assert not ok and reason in why
  with pytest.raises(FedJaxDpError, match="method='ghost' cannot serve"):
    pe.clipped_grad_sum(model, params, x, y, jnp.ones(4), 1.0, method="ghost")
  if not isinstance(module, _WithBatchNorm):  # BatchNorm cannot run per example at all
    assert pe.resolve_method(model, params, x) == "vmap"
    ref_total, ref_norms = _reference(model, params, x, y, jnp.ones(4), 0.2)
    _assert_close(pe.clipped_grad_sum(model, params, x, y, jnp.ones(4), 0.2), ref_total,
                  ref_norms, jnp.ones(4))


@pytest.mark.parametrize("method", ["ghost", "vmap"])
def test_non_finite_rows_are_zeroed_and_flagged(method):
  model = create_model("mlp", (6,), 3, hidden=(5,))
  params = model.init(jax.random.PRNGKey(0))
  x, y = _batch((6,), 3, b=4)
  w = jnp.ones(4)
  bad = x.at[1, 2].set(jnp.inf)
  out = pe.clipped_grad_sum(model, params, bad, y, w, 1.0, method=method)
  assert out.finite.tolist() == [True, False, True, True]
  assert float(out.norms[1]) == 0.0
  keep = jnp.array([1, 0, 1, 1], jnp.float32)
  ref = pe.clipped_grad_sum(model, params, x, y, keep, 1.0, method="vmap")
  for a, b in zip(jax.tree_util.tree_leaves(out.total), jax.tree_util.tree_leaves(ref.total)):
    assert bool(jnp.all(jnp.isfinite(a)))
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("method", ["ghost", "vmap"])
def test_clip_edge_cases(method):
  model = create_model("mlp", (6,), 3, hidden=(5,))
  params = model.init(jax.random.PRNGKey(0))
  x, y = _batch((6,), 3, b=4)
  w = jnp.array([1.0, 1.0, 0.5, 1.0])
  zero = pe.clipped_grad_sum(model, params, x, y, w, 0.0, method=method)
  assert all(float(jnp.max(jnp.abs(l))) == 0.0 for l in jax.tree_util.tree_leaves(zero.total))
  # A clip norm above every gradient's norm: the plain weighted gradient sum.
  big = pe.clipped_grad_sum(model, params, x, y, w, 1e6, method=method)
  plain = jax.grad(lambda p: jnp.sum(w * model.per_example_loss(model.apply(p, x), y)))(params)
  for a, b in zip(jax.tree_util.tree_leaves(big.total), jax.tree_util.tree_leaves(plain)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  # Clipped to C: each row's contribution has norm min(norm, C).
  c = 0.1
  one = [pe.clipped_grad_sum(model, params, x, y, jnp.eye(4)[i], c, method=method)
         for i in range(4)]
  for o in one:
    n = float(jnp.sqrt(sum(jnp.sum(l * l) for l in jax.tree_util.tree_leaves(o.total))))
    assert n == pytest.approx(min(c, float(o.norms.max())), rel=1e-5)


def test_unknown_method_is_refused():
  model = create_model("linear", (4,), 2)
  params = model.init(jax.random.PRNGKey(0))
  x, y = _batch((4,), 2, b=2)
  with pytest.raises(FedJaxDpError, match="method"):
    pe.clipped_grad_sum(model, params, x, y, jnp.ones(2), 1.0, method="fast")


def test_clipped_sum_serves_a_second_order_per_example_term():
  """Paper 003's per-example meta-gradient m_x = (I - eta H_x(w)) grad l(theta; x),
  written as a Hessian-vector product, clipped per example and summed."""
  model = create_model("mlp", (5,), 3, hidden=(4,))
  w0 = model.init(jax.random.PRNGKey(0))
  theta = jax.tree_util.tree_map(lambda l: l + 0.05, w0)
  x, y = _batch((5,), 3, b=6)
  eta, c = 0.3, 0.2

  def loss1(p, xe, ye):
    return model.per_example_loss(model.apply(p, xe[None]), ye[None])[0]

  def meta(p, ex):
    xe, ye = ex
    g = jax.grad(loss1)(theta, xe, ye)
    hvp = jax.jvp(lambda q: jax.grad(loss1)(q, xe, ye), (p,), (g,))[1]
    return jax.tree_util.tree_map(lambda a, b: a - eta * b, g, hvp), loss1(p, xe, ye)

  out = pe.clipped_sum(meta, w0, (x, y), jnp.ones(6), c)
  expect = None
  for i in range(6):
    v, _ = meta(w0, (x[i], y[i]))
    leaves = [np.asarray(l, np.float64) for l in jax.tree_util.tree_leaves(v)]
    n = np.sqrt(sum(np.sum(l * l) for l in leaves))
    np.testing.assert_allclose(float(out.norms[i]), n, rtol=1e-5)
    leaves = [l * min(1.0, c / n) for l in leaves]
    expect = leaves if expect is None else [a + b for a, b in zip(expect, leaves)]
  assert np.sum(np.asarray(out.norms) > c) >= 2
  for a, b in zip(jax.tree_util.tree_leaves(out.total), expect):
    np.testing.assert_allclose(a, b, atol=1e-6)


class _AllConvs(nn.Module):
  """Every nn.Conv configuration the patches lowering takes, plus a masked conv (left
  to its own vmapped VJP)."""
  masked: bool = False

  @nn.compact
  def __call__(self, x):                                    # [B, 9, 9, 2]
    x = nn.relu(nn.Conv(4, (3, 3), strides=2, padding="SAME")(x))                 # 5x5x4
    x = nn.relu(nn.Conv(4, (3, 3), padding="CIRCULAR", feature_group_count=2)(x))
    x = nn.relu(nn.Conv(6, (2, 2), kernel_dilation=2, padding=((1, 0), (0, 1)))(x))
    b, h, w, c = x.shape
    x = nn.Conv(3, (3,), padding="CAUSAL", use_bias=False)(x.reshape((b, h * w, c)))
    if self.masked:
      mask = jnp.ones((2, 3, 3)).at[0].set(0.0)
      x = nn.Conv(3, (2,), mask=mask)(x)
    return nn.Dense(4)(x.reshape((b, -1)))


@pytest.mark.parametrize("masked", [False, True])
def test_flax_convs_per_example_equal_the_native_reference(masked):
  """Strides, SAME/CIRCULAR/explicit/CAUSAL padding, dilation, feature groups, no bias:
  ghost (conv closed form) and vmap both equal a per-example reference computed with
  flax's native convolution; the closed form runs no native convolution at all."""
  native = Model("n", _AllConvs(masked), (9, 9, 2), 4, conv_lowering="native")
  lowered = Model("l", _AllConvs(masked), (9, 9, 2), 4)
  params = native.init(jax.random.PRNGKey(4))
  x, y = _batch((9, 9, 2), 4, b=6)
  w = jnp.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
  ref_total, ref_norms = _reference(native, params, x, y, w, 0.05)
  assert pe.ghost_support(lowered, params, x) == (True, "")
  for method in ("ghost", "vmap"):
    out = pe.clipped_grad_sum(lowered, params, x, y, w, 0.05, method=method)
    _assert_close(out, ref_total, ref_norms, w)
  jaxpr = str(jax.make_jaxpr(lambda p: pe.clipped_grad_sum(
      lowered, p, x, y, w, 0.05, method="ghost").total)(params))
  assert "conv_general_dilated" not in jaxpr
