"""`fedjax_dp.models.conv_lowering`: flax nn.Conv as patches x kernel equals flax itself."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models import conv_lowering as cl
from fedjax_dp.models import from_module

CASES = [
    # (kernel, strides, padding, dilation, groups, spatial, c_in, c_out)
    ((3, 3), 1, "SAME", 1, 1, (8, 8), 3, 4),
    ((3, 3), 2, "SAME", 1, 1, (9, 8), 3, 4),
    ((2, 2), (2, 1), "VALID", 1, 1, (7, 6), 2, 3),
    ((3, 3), 1, "SAME", 2, 1, (9, 9), 2, 3),
    ((3, 3), 1, ((1, 2), (0, 1)), 1, 1, (6, 7), 2, 3),
    ((3, 3), 1, 1, 1, 2, (6, 6), 4, 6),
    ((4, 4), 2, "SAME", 1, 1, (8, 8), 2, 2),
    ((3, 3), 1, "CIRCULAR", 1, 1, (5, 6), 2, 3),
    ((3, 3), 1, "REFLECT", 1, 1, (5, 6), 2, 3),
    ((5,), 1, "CAUSAL", 2, 1, (12,), 3, 2),
    ((5,), 3, "SAME", 1, 3, (13,), 3, 6),
    ((2, 2, 2), 1, "VALID", 1, 1, (4, 4, 3), 2, 2),
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_patches_equal_flax_conv(case):
  ks, strides, padding, dil, groups, spatial, c_in, c_out = case
  conv = nn.Conv(c_out, ks, strides=strides, padding=padding, kernel_dilation=dil,
                 feature_group_count=groups)
  x = jax.random.normal(jax.random.key(1), (2,) + spatial + (c_in,))
  params = conv.init(jax.random.key(0), x)
  params = jax.tree_util.tree_map(lambda p: p + 0.1, params)  # a non-zero bias
  want = conv.apply(params, x)
  with cl.lowered_convs():
    got = conv.apply(params, x)
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # The gradients (what training and per-example clipping use) agree too.
  def loss(p, lowered):
    with cl.lowered_convs(lowered):
      return jnp.sum(jnp.sin(conv.apply(p, x)))
  g_want, g_got = jax.grad(loss)(params, False), jax.grad(loss)(params, True)
  for a, b in zip(jax.tree_util.tree_leaves(g_got), jax.tree_util.tree_leaves(g_want)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_extra_and_missing_batch_axes_and_mask_and_no_bias():
  mask = np.ones((3, 3, 2, 3), np.float32)
  mask[1, 1] = 0.0
  conv = nn.Conv(3, (3, 3), use_bias=False, mask=jnp.asarray(mask))
  x = jax.random.normal(jax.random.key(2), (2, 3, 5, 5, 2))
  params = conv.init(jax.random.key(0), x)
  for inp in (x, x[0, 0]):  # two batch axes; one unbatched example
    with cl.lowered_convs():
      got = conv.apply(params, inp)
    np.testing.assert_allclose(got, conv.apply(params, inp), rtol=1e-5, atol=1e-5)


def test_unsupported_configurations_stay_with_flax():
  assert cl.conv_plan(nn.Conv(2, (3,), input_dilation=2)) is None
  assert "input_dilation" in cl.unsupported_reason(nn.Conv(2, (3,), input_dilation=2))
  assert cl.conv_plan(nn.ConvTranspose(2, (3,))) is None
  assert cl.conv_plan(nn.ConvLocal(2, (3,))) is None

  class Odd(nn.Conv):
    def __call__(self, x):
      return super().__call__(x) * 2.0

  assert "overrides" in cl.unsupported_reason(Odd(2, (3,)))
  # Left to flax, the output is flax's (the interceptor does not touch it).
  conv = nn.Conv(2, (3,), input_dilation=2, padding=((1, 1),))
  x = jnp.ones((1, 5, 1))
  p = conv.init(jax.random.key(0), x)
  with cl.lowered_convs():
    np.testing.assert_array_equal(conv.apply(p, x), conv.apply(p, x))


class _UserCNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.avg_pool(nn.relu(nn.Conv(4, (3, 3))(x)), (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(6, (3, 3), strides=2)(x))
    return nn.Dense(3)(x.reshape((x.shape[0], -1)))


def test_model_apply_lowers_by_default_and_native_is_flax():
  x = jax.random.normal(jax.random.key(3), (4, 12, 12, 2))
  model = from_module(_UserCNN(), (12, 12, 2), 3)
  native = from_module(_UserCNN(), (12, 12, 2), 3, conv_lowering="native")
  assert model.conv_lowering == "patches" and native.conv_lowering == "native"
  params = model.init(jax.random.key(0))
  np.testing.assert_allclose(model.apply(params, x), native.apply(params, x),
                             rtol=1e-5, atol=1e-5)
  jaxpr = str(jax.make_jaxpr(model.apply)(params, x))
  assert "conv_general_dilated" not in jaxpr
  assert "conv_general_dilated" in str(jax.make_jaxpr(native.apply)(params, x))


def test_bad_conv_lowering_is_refused():
  from fedjax_dp.validation import FedJaxDpError
  with pytest.raises(FedJaxDpError, match="conv_lowering"):
    from_module(_UserCNN(), (12, 12, 2), 3, conv_lowering="fast")


class _Net(nn.Module):
  conv_cls: type = nn.Conv

  @nn.compact
  def __call__(self, x):
    x = nn.avg_pool(nn.relu(self.conv_cls(4, (3, 3))(x)), (2, 2), strides=(2, 2))
    x = nn.relu(self.conv_cls(6, (3, 3), padding="VALID")(x))
    return nn.Dense(3)(x.reshape((x.shape[0], -1)))


def test_a_flax_conv_network_is_the_same_program_as_with_our_patch_conv():
  """What makes a user's nn.Conv CNN never slower than our `layers.Conv`: both trace to
  the same jaxpr, for the forward pass and for both per-example clipping methods."""
  from fedjax_dp.models import layers
  from fedjax_dp.privacy import per_example as pe
  user = from_module(_Net(), (10, 10, 2), 3)
  ours = from_module(_Net(conv_cls=layers.Conv), (10, 10, 2), 3)
  params = user.init(jax.random.key(0))
  x, y, w = jnp.ones((4, 10, 10, 2)), jnp.zeros(4, jnp.int32), jnp.ones(4)
  assert str(jax.make_jaxpr(user.apply)(params, x)) == str(
      jax.make_jaxpr(ours.apply)(params, x))
  for method in ("ghost", "vmap"):
    def trace(model):
      return str(jax.make_jaxpr(lambda p: pe.clipped_grad_sum(
          model, p, x, y, w, 1.0, method=method))(params))
    assert trace(user) == trace(ours), method
