"""The character models (`fedjax_dp.models.sequence`) and their per-example clipping."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models import count_params, create_model
from fedjax_dp.models.sequence import LSTMRecurrence
from fedjax_dp.privacy import per_example
from fedjax_dp.validation import FedJaxDpError

VOCAB = 81


def _batch(b=6, t=12, seed=1):
  kx, ky = jax.random.split(jax.random.PRNGKey(seed))
  x = jax.random.randint(kx, (b, t), 0, VOCAB).astype(jnp.float32)
  y = jax.random.randint(ky, (b,), 0, VOCAB)
  return x, y


def _rel_err(a_tree, b_tree):
  return max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
             for a, b in zip(jax.tree_util.tree_leaves(a_tree),
                             jax.tree_util.tree_leaves(b_tree)))


def test_leaf_lstm_parameter_count():
  """LEAF's model: embedding 81 x 8, LSTM 8 -> 256 -> 256, dense 256 -> 81."""
  model = create_model("char_lstm", (80,), VOCAB)
  n = count_params(model.init(jax.random.PRNGKey(0)))
  lstm = lambda d_in, h: 4 * h * (d_in + h) + 4 * h  # noqa: E731
  assert n == VOCAB * 8 + lstm(8, 256) + lstm(256, 256) + 256 * VOCAB + VOCAB == 818_137


def test_lstm_recurrence_matches_a_numpy_lstm():
  """The recurrence against an independent float64 loop of the LSTM equations."""
  b, t, h = 3, 7, 5
  a = np.random.default_rng(0).normal(size=(b, t, 4 * h)).astype(np.float32)
  mod = LSTMRecurrence(h)
  params = mod.init(jax.random.PRNGKey(0), jnp.asarray(a))["params"]
  got = np.asarray(mod.apply({"params": params}, jnp.asarray(a)))
  w = np.asarray(params["recurrent_kernel"], np.float64)
  sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
  hs, cs = np.zeros((b, h)), np.zeros((b, h))
  for step in range(t):
    z = a[:, step].astype(np.float64) + hs @ w
    i, f, g, o = z[:, :h], z[:, h:2 * h], z[:, 2 * h:3 * h], z[:, 3 * h:]
    cs = sig(f) * cs + sig(i) * np.tanh(g)
    hs = sig(o) * np.tanh(cs)
    np.testing.assert_allclose(got[:, step], hs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,hidden", [("char_lstm", (16, 12)),
                                         ("char_transformer", (16, 16))])
@pytest.mark.parametrize("clip", ["tiny", "median", "huge"])
def test_ghost_equals_vmap(name, hidden, clip):
  """Ghost clipping of every layer (recurrent kernel, sequence dense layers, embedding,
  LayerNorm, positions) equals vmap(grad) then clip, with a padded row; at the median
  norm some examples are clipped and some not, so a wrong norm on either side shows."""
  model = create_model(name, (12,), VOCAB, hidden=hidden)
  params = model.init(jax.random.PRNGKey(0))
  x, y = _batch()
  assert per_example.ghost_support(model, params, x) == (True, "")
  w = jnp.array([1, 1, 0, 1, 1, 1], jnp.float32)
  raw = per_example.clipped_grad_sum(model, params, x, y, w, 1e9, method="vmap")
  real = np.asarray(raw.norms)[np.asarray(w) > 0]
  clip_norm = {"tiny": 1e-3, "median": float(np.median(real)), "huge": 1e3}[clip]
  ghost = per_example.clipped_grad_sum(model, params, x, y, w, clip_norm, method="ghost")
  vmap = per_example.clipped_grad_sum(model, params, x, y, w, clip_norm, method="vmap")
  np.testing.assert_allclose(ghost.norms, vmap.norms, rtol=1e-5)
  assert _rel_err(ghost.total, vmap.total) < 1e-5
  assert len(set(np.round(real, 4))) == len(real)  # distinct norms: the cases differ


def test_recurrent_rule_with_a_long_sequence_forms_per_example_gradients():
  """T large against H: the rule forms [B, H, 4H] instead of the ghost norm; still equal."""
  model = create_model("char_lstm", (40,), VOCAB, hidden=(4,))
  params = model.init(jax.random.PRNGKey(0))
  x, y = _batch(b=5, t=40)
  w = jnp.ones(5, jnp.float32)
  ghost = per_example.clipped_grad_sum(model, params, x, y, w, 0.1, method="ghost")
  vmap = per_example.clipped_grad_sum(model, params, x, y, w, 0.1, method="vmap")
  assert _rel_err(ghost.total, vmap.total) < 1e-5


def test_models_take_integer_ids_stored_as_float32():
  model = create_model("char_transformer", (12,), VOCAB, hidden=(8,))
  params = model.init(jax.random.PRNGKey(0))
  x, _ = _batch()
  np.testing.assert_allclose(model.apply(params, x), model.apply(params, x.astype(jnp.int32)))
  assert model.apply(params, x).shape == (6, VOCAB)


@pytest.mark.parametrize("name,shape,hidden,match", [
    ("char_lstm", (28, 28), None, "token windows"),
    ("char_transformer", (12,), (16, 8), "all equal"),
    ("char_transformer", (12,), (10,), "multiple of its 4 heads"),
])
def test_bad_shapes_and_widths_are_refused(name, shape, hidden, match):
  with pytest.raises(FedJaxDpError, match=match):
    create_model(name, shape, VOCAB, hidden=hidden)


def test_sample_feeds_the_last_window_and_is_greedy_at_low_temperature():
  """At a tiny temperature sampling is argmax: check each token against the model's own
  argmax on the window built independently in numpy."""
  from fedjax_dp.models.sequence import sample
  model = create_model("char_lstm", (6,), VOCAB, hidden=(8,))
  params = model.init(jax.random.PRNGKey(3))
  prompt = np.array([5, 9, 2], np.int32)
  got = np.asarray(sample(model, params, prompt, 5, jax.random.PRNGKey(0), temperature=1e-6))
  window = [0, 0, 0, 5, 9, 2]
  for tok in got:
    logits = model.apply(params, jnp.asarray([window], jnp.float32))[0]
    assert tok == int(jnp.argmax(logits))
    window = window[1:] + [int(tok)]
  with pytest.raises(ValueError, match="temperature"):
    sample(model, params, prompt, 5, jax.random.PRNGKey(0), temperature=0.0)


def test_decode_inverts_encode():
  from fedjax_dp.data.sources.shakespeare import decode, encode
  text = "To be, or not to be: that is the question.\n"
  assert decode(encode(text)) == text
  assert decode(encode("caf\u00e9")) == "caf?"


def test_fused_lstm_backward_equals_autodiff_of_the_scan():
  """`lstm_recurrence`'s hand-written VJP against JAX's autodiff of the same scan, for
  both inputs, with a cotangent on every time step."""
  b, t, h = 3, 9, 6
  rng = np.random.default_rng(1)
  a = jnp.asarray(rng.normal(size=(b, t, 4 * h)), jnp.float32)
  cot = jnp.asarray(rng.normal(size=(b, t, h)), jnp.float32)
  fused, plain = LSTMRecurrence(h), LSTMRecurrence(h, fused_backward=False)
  params = fused.init(jax.random.PRNGKey(0), a)["params"]

  def grads(mod):
    out, vjp = jax.vjp(lambda p, x: mod.apply({"params": p}, x), params, a)
    return out, vjp(cot)

  (out_f, (gp_f, ga_f)), (out_p, (gp_p, ga_p)) = grads(fused), grads(plain)
  np.testing.assert_allclose(out_f, out_p, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(ga_f, ga_p, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(gp_f["recurrent_kernel"], gp_p["recurrent_kernel"],
                             rtol=1e-4, atol=1e-6)
