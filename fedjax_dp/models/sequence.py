"""Character-level language models: LEAF's LSTM and a small causal transformer.

Both map a batch of token windows ``x: float32 [B, T]`` (integer token ids stored as
float32, exact below 2^24; see `fedjax_dp.data.sources.shakespeare`) to next-token
logits ``float32 [B, vocab_size]`` read at the last position: LEAF's Shakespeare task
(Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018), which predicts the
character that follows an 80-character window.

Every parameter lives in a leaf module called once on one array, so DP-SGD's
per-example clipping takes the ghost path (`fedjax_dp.privacy.per_example`) instead of
materialising ``[B, P]`` per-example gradients:

* ``nn.Dense`` on a sequence ``[B, T, D]`` (the LSTM's input projections, attention's
  projections, the MLP): the sequence ghost norm (Li et al., ICLR 2022, eq. 4) or the
  direct per-example product, whichever is cheaper;
* `LSTMRecurrence` (``per_example_rule = "recurrent"``): the recurrent kernel ``W_h``
  of ``z_t = a_t + h_{t-1} W_h``. Its per-example gradient is
  ``sum_t h_{t-1}^T delta_t`` with ``delta_t = dL/dz_t = dL/da_t`` (``a_t`` enters only
  through ``z_t``), so it is a dense layer on the sequence ``h_{t-1}`` whose output
  gradients are the layer's input gradients: one extra backward pass through the
  recurrence, no per-example ``[B, H, 4H]`` tensor unless that is cheaper;
* ``nn.Embed``, ``nn.LayerNorm`` and `PositionEmbedding`: their own VJP vmapped over
  the batch (per-example gradients of that layer only: ``[B, vocab, d]`` at most).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = [
    "lstm_recurrence", "LSTMRecurrence", "LSTM", "CharLSTM", "PositionEmbedding", "CausalSelfAttention",
    "TransformerBlock", "CharTransformer", "tokens", "sample",
]


def tokens(x) -> jax.Array:
  """Token ids int32 ``[B, T]`` from ``x`` (float32 or integer ``[B, T]``): rounds, so
  float32 ids are exact."""
  if jnp.issubdtype(x.dtype, jnp.integer):
    return x.astype(jnp.int32)
  return jnp.round(x).astype(jnp.int32)


def _lstm_forward(a, w):
  """The recurrence of `LSTMRecurrence` over ``a [B, T, 4H]`` with ``w [H, 4H]``:
  ``(hs, cs, gates)``, each time-major: ``hs, cs [T, B, H]``, ``gates [T, B, 4H]`` (the
  activated i, f, g, o)."""
  h_dim = w.shape[0]

  def step(carry, a_t):
    h, c = carry
    i, f, g, o = jnp.split(a_t + h @ w, 4, axis=-1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    c = f * c + i * g
    h = o * jnp.tanh(c)
    return (h, c), (h, c, jnp.concatenate([i, f, g, o], axis=-1))

  zeros = jnp.zeros((a.shape[0], h_dim), jnp.float32)
  _, (hs, cs, gates) = jax.lax.scan(step, (zeros, zeros),
                                    jnp.swapaxes(a.astype(jnp.float32), 0, 1))
  return hs, cs, gates


@jax.custom_vjp
def lstm_recurrence(a, w):
  """``h [B, T, H]`` of the LSTM recurrence (`LSTMRecurrence`) with a fused backward
  pass: the reverse scan carries only ``(dL/dh, dL/dc)`` and emits
  ``delta_t = dL/dz_t``; the kernel's gradient ``sum_t h_{t-1}^T delta_t`` is then one
  ``[H, B T] x [B T, 4H]`` matmul after the loop instead of ``T`` small products
  accumulated inside it (what autodiff of the scan does, and what made the round 1.35x
  slower than a fused oneDNN LSTM on a CPU). Reverse mode only (``jax.custom_vjp``).

  Args:
    a: float32 ``[B, T, 4H]``, the input projections.
    w: float32 ``[H, 4H]``, the recurrent kernel.

  Returns:
    float32 ``[B, T, H]``.
  """
  return jnp.swapaxes(_lstm_forward(a, w)[0], 0, 1)


def _lstm_fwd(a, w):
  hs, cs, gates = _lstm_forward(a, w)
  return jnp.swapaxes(hs, 0, 1), (hs, cs, gates, w, jnp.zeros((0,), a.dtype))


def _lstm_bwd(res, dh_out):
  hs, cs, gates, w, a_like = res
  h_dim = w.shape[0]
  c_prev = jnp.concatenate([jnp.zeros_like(cs[:1]), cs[:-1]], axis=0)
  w_t = jnp.transpose(w)  # [4H, H], once: XLA:CPU left a per-step transpose in the loop

  def step(carry, xs):
    dh_next, dc_next = carry
    dh_t, c_t, c_p, gate = xs
    i, f, g, o = jnp.split(gate, 4, axis=-1)
    dh = dh_t + dh_next
    tanh_c = jnp.tanh(c_t)
    dc = dc_next + dh * o * (1.0 - tanh_c * tanh_c)
    delta = jnp.concatenate([dc * g * i * (1.0 - i), dc * c_p * f * (1.0 - f),
                             dc * i * (1.0 - g * g), dh * tanh_c * o * (1.0 - o)], axis=-1)
    return (delta @ w_t, dc * f), delta

  zeros = jnp.zeros(hs.shape[1:], jnp.float32)
  xs = (jnp.swapaxes(dh_out.astype(jnp.float32), 0, 1), cs, c_prev, gates)
  _, deltas = jax.lax.scan(step, (zeros, zeros), xs, reverse=True)   # [T, B, 4H]
  h_prev = jnp.concatenate([jnp.zeros_like(hs[:1]), hs[:-1]], axis=0)
  dw = jnp.einsum("tbh,tbf->hf", h_prev, deltas).reshape(h_dim, 4 * h_dim)
  return jnp.swapaxes(deltas, 0, 1).astype(a_like.dtype), dw.astype(w.dtype)


lstm_recurrence.defvjp(_lstm_fwd, _lstm_bwd)


class LSTMRecurrence(nn.Module):
  """The recurrent half of an LSTM layer (Hochreiter and Schmidhuber 1997, with the
  forget gate of Gers et al. 2000), without the input projection:

      z_t = a_t + h_{t-1} W_h,      [i, f, g, o] = split(z_t)
      c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g),      h_t = sigmoid(o) tanh(c_t)

  with ``h_{-1} = c_{-1} = 0``. ``a [B, T, 4H]`` is the input projection ``x_t W_x + b``
  (an ``nn.Dense``, see `LSTM`); returns ``h [B, T, H]`` float32. The only parameter
  is ``recurrent_kernel`` ``W_h [H, 4H]``. ``per_example_rule = "recurrent"`` tells
  the per-example clipping code to use the closed form of the module docstring.

  Attributes:
    hidden: H.
    fused_backward: True (default): `lstm_recurrence`'s hand-written backward pass
      (reverse mode only); False: JAX's autodiff of the scan (also forward mode, e.g.
      Hessian-vector products by ``jax.jvp``). Same values to float rounding.
  """
  hidden: int
  fused_backward: bool = True
  per_example_rule = "recurrent"

  @nn.compact
  def __call__(self, a):
    w = self.param("recurrent_kernel", nn.initializers.orthogonal(),
                   (self.hidden, 4 * self.hidden), jnp.float32)
    if self.fused_backward:
      return lstm_recurrence(a, w)
    return jnp.swapaxes(_lstm_forward(a, w)[0], 0, 1)


class LSTM(nn.Module):
  """One LSTM layer over a sequence: ``x [B, T, D]`` -> ``h [B, T, hidden]``.

  The input projection ``x_t W_x + b`` is one ``nn.Dense(4 * hidden)`` over the whole
  sequence, the recurrence `LSTMRecurrence`. The forget-gate bias starts at 1
  (Jozefowicz et al., ICML 2015), the other biases at 0. ``fused_backward``: as
  `LSTMRecurrence`.
  """
  hidden: int
  fused_backward: bool = True

  @nn.compact
  def __call__(self, x):
    h = self.hidden

    def bias_init(key, shape, dtype=jnp.float32):
      del key
      return jnp.zeros(shape, dtype).at[h:2 * h].set(1.0)

    a = nn.Dense(4 * h, bias_init=bias_init, name="input")(x)
    return LSTMRecurrence(h, self.fused_backward, name="recurrence")(a)


class CharLSTM(nn.Module):
  """LEAF's Shakespeare model: an 8-dimensional character embedding, two LSTM layers
  of 256 units and a dense output read at the last position (Caldas et al. 2018,
  the reference model in LEAF's ``models/shakespeare/stacked_lstm.py``; 818,137
  parameters with 81 tokens).

  Attributes:
    vocab_size: number of token ids (input) and classes (output).
    embed_dim: embedding width (LEAF: 8).
    hidden: the LSTM layers' widths (LEAF: ``(256, 256)``).
    fused_backward: as `LSTMRecurrence` (True: the hand-written backward pass).
  """
  vocab_size: int
  embed_dim: int = 8
  hidden: Sequence[int] = (256, 256)
  fused_backward: bool = True

  @nn.compact
  def __call__(self, x):
    h = nn.Embed(self.vocab_size, self.embed_dim, name="embed")(tokens(x))
    for i, width in enumerate(self.hidden):
      h = LSTM(width, self.fused_backward, name=f"lstm_{i}")(h)
    return nn.Dense(self.vocab_size, name="out")(h[:, -1])


class PositionEmbedding(nn.Module):
  """Learned absolute positions: ``h [B, T, D]`` -> ``h + P[:T]`` with ``P [max_len, D]``
  (Vaswani et al. 2017 use fixed sinusoids; GPT-2 learns them, as here)."""
  max_len: int

  @nn.compact
  def __call__(self, h):
    p = self.param("embedding", nn.initializers.normal(0.02), (self.max_len, h.shape[-1]),
                   jnp.float32)
    return h + p[None, :h.shape[1]]


class CausalSelfAttention(nn.Module):
  """Multi-head causal self-attention (Vaswani et al. 2017, eq. 1, with a causal mask):
  ``h [B, T, D]`` -> ``[B, T, D]``. Queries, keys and values come from one
  ``nn.Dense(3 D)``, the output from ``nn.Dense(D)``: plain dense layers on the
  sequence, so per-example clipping takes the ghost path."""
  num_heads: int

  @nn.compact
  def __call__(self, h):
    b, t, d = h.shape
    if d % self.num_heads:
      raise ValueError(f"model width {d} must be a multiple of num_heads={self.num_heads}")
    hd = d // self.num_heads
    qkv = nn.Dense(3 * d, name="qkv")(h).reshape((b, t, 3, self.num_heads, hd))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(hd))
    causal = jnp.tril(jnp.ones((t, t), bool))
    scores = jnp.where(causal[None, None], scores, jnp.finfo(jnp.float32).min)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return nn.Dense(d, name="out")(out.reshape((b, t, d)))


class TransformerBlock(nn.Module):
  """Pre-norm block (GPT-2 layout): ``h + attn(LN(h))``, then ``h + MLP(LN(h))`` with a
  GELU MLP of width ``mlp_ratio * D``."""
  num_heads: int
  mlp_ratio: int = 4

  @nn.compact
  def __call__(self, h):
    d = h.shape[-1]
    h = h + CausalSelfAttention(self.num_heads, name="attn")(nn.LayerNorm(name="ln1")(h))
    m = nn.Dense(self.mlp_ratio * d, name="mlp_in")(nn.LayerNorm(name="ln2")(h))
    return h + nn.Dense(d, name="mlp_out")(nn.gelu(m))


class CharTransformer(nn.Module):
  """A small decoder-only (causal) transformer for next-character prediction: token
  embedding, learned positions, ``len(widths)`` pre-norm blocks, a final LayerNorm and
  a dense output read at the last position.

  Attributes:
    vocab_size: number of token ids and classes.
    max_len: the longest window (positions).
    widths: the model width of each block; all equal (e.g. ``(128, 128)``: 2 blocks).
    num_heads: attention heads per block (must divide the width).
  """
  vocab_size: int
  max_len: int
  widths: Sequence[int] = (128, 128)
  num_heads: int = 4

  @nn.compact
  def __call__(self, x):
    d = int(self.widths[0])
    h = nn.Embed(self.vocab_size, d, embedding_init=nn.initializers.normal(0.02),
                 name="embed")(tokens(x))
    h = PositionEmbedding(self.max_len, name="positions")(h)
    for i in range(len(self.widths)):
      h = TransformerBlock(self.num_heads, name=f"block_{i}")(h)
    h = nn.LayerNorm(name="ln_f")(h)
    return nn.Dense(self.vocab_size, name="out")(h[:, -1])


def sample(model, params, prompt, length: int, key, temperature: float = 1.0,
           pad_id: int = 0) -> jax.Array:
  """Samples ``length`` tokens after ``prompt`` from a next-token model, one at a time.

  Each step feeds the last ``T = model.feature_shape[0]`` tokens (the prompt
  left-padded with ``pad_id`` when shorter) and draws the next token from
  ``softmax(logits / temperature)``; the whole loop is one ``lax.scan``.

  Args:
    model: a `fedjax_dp.models.Model` over windows ``[T]`` (``char_lstm``,
      ``char_transformer`` or your own).
    params: its parameters.
    prompt: token ids ``[P]`` (any integer or float array, P >= 0).
    length: how many tokens to sample (>= 1).
    key: a PRNG key.
    temperature: > 0; lower is greedier.
    pad_id: the id that fills a prompt shorter than T (Shakespeare: 0, the newline).

  Returns:
    int32 ``[length]``: the sampled ids (the prompt not included).

  Raises:
    ValueError: ``length < 1`` or ``temperature <= 0``.
  """
  if length < 1 or not temperature > 0:
    raise ValueError(f"length must be >= 1 and temperature > 0, got {length} and "
                     f"{temperature}.")
  t = int(model.feature_shape[0])
  prompt = tokens(jnp.asarray(prompt).reshape(-1))[-t:]
  window = jnp.concatenate([jnp.full((t - prompt.shape[0],), pad_id, jnp.int32), prompt])

  def step(win, k):
    logits = model.apply(params, win[None].astype(jnp.float32))[0]
    nxt = jax.random.categorical(k, logits / temperature).astype(jnp.int32)
    return jnp.concatenate([win[1:], nxt[None]]), nxt

  _, out = jax.jit(lambda w, ks: jax.lax.scan(step, w, ks))(
      window, jax.random.split(key, length))
  return out
