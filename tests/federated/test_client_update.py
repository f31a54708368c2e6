"""Tests of `fedjax_dp.federated.client.make_client_update` (local training)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_dp.federated.client import ClientHParams, DpSgdConfig, make_client_update
from fedjax_dp.models import create_model
from fedjax_dp.validation import FedJaxDpError

DIM, CLASSES, MAX_N = 3, 3, 10
MODEL = create_model("linear", (DIM,), CLASSES)
PARAMS = MODEL.init(jax.random.key(0))
LR = 0.5


def _data(seed=0, max_n=MAX_N, dim=DIM):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(max_n, dim)), jnp.float32)
  y = jnp.asarray(rng.integers(0, CLASSES, size=max_n), jnp.int32)
  return x, y


def _mean_loss(params, x, y, n, model=MODEL):
  """Mean loss over the first ``n`` rows (written independently of the library)."""
  logits = x @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"]
  logp = jax.nn.log_softmax(logits)
  nll = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
  w = (jnp.arange(x.shape[0]) < n).astype(jnp.float32)
  return jnp.sum(nll * w) / n


_grad = jax.jit(jax.grad(_mean_loss))


@jax.jit
def _gd_step(p, x, y, n, lr):
  g = _grad(p, x, y, n)
  return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)


def _gd_reference(x, y, n, steps, lr=LR, params=PARAMS):
  """``steps`` of full-batch gradient descent on the ``n`` real examples."""
  p = params
  for _ in range(steps):
    p = _gd_step(p, x, y, n, lr)
  return jax.tree_util.tree_map(jnp.subtract, p, params)


def _assert_tree_close(a, b, rtol=1e-5, atol=1e-6):
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


def _assert_tree_equal(a, b):
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@functools.lru_cache(maxsize=None)
def _cu(batch_size, local_epochs=None, local_steps=None, lr=LR, momentum=None,
        return_weights=False, vmapped=False):
  """Jitted client updates, cached so that tests sharing a configuration compile once."""
  cu = make_client_update(MODEL, optax.sgd(lr, momentum=momentum), batch_size=batch_size,
                          max_examples=MAX_N, local_epochs=local_epochs,
                          local_steps=local_steps, return_weights=return_weights)
  if vmapped:
    cu = jax.vmap(cu, in_axes=(None, 0, 0, 0, 0, None))
  return jax.jit(cu)


def _tree_norm(t):
  return float(np.sqrt(sum(np.sum(np.asarray(l, np.float64) ** 2)
                           for l in jax.tree_util.tree_leaves(t))))


@pytest.mark.parametrize("epochs,b", [(1, 3), (2, 4)])
def test_steps_per_client_is_ceil_n_over_b(epochs, b):
  cu = _cu(b, local_epochs=epochs, vmapped=True)
  counts = jnp.array([1, 3, 7, 10], jnp.int32)
  x, y = _data()
  xs, ys = jnp.stack([x] * 4), jnp.stack([y] * 4)
  ks = jax.random.split(jax.random.key(1), 4)
  _, m = cu(PARAMS, xs, ys, counts, ks, ClientHParams())
  expected = [epochs * math.ceil(int(n) / b) for n in counts]
  np.testing.assert_array_equal(np.asarray(m.num_steps), expected)
  np.testing.assert_array_equal(np.asarray(m.num_examples), np.asarray(counts))
  assert np.all(np.isfinite(np.asarray(m.loss))) and np.all(np.asarray(m.loss) > 0)


def test_full_batch_one_step_equals_minus_lr_grad():
  n = 7
  x, y = _data(1)
  cu = _cu(MAX_N, local_epochs=1)
  delta, m = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(0), ClientHParams())
  g = _grad(PARAMS, x, y, n)
  _assert_tree_close(delta, jax.tree_util.tree_map(lambda l: -LR * l, g))
  assert int(m.num_steps) == 1
  np.testing.assert_allclose(float(m.loss), float(_mean_loss(PARAMS, x, y, n)), rtol=1e-5)
  np.testing.assert_allclose(float(m.update_norm), _tree_norm(delta), rtol=1e-5)
  assert int(m.nonfinite_grads) == 0 and float(m.example_clip_fraction) == 0.0


def test_return_weights():
  x, y = _data(1)
  d, _ = _cu(4, local_epochs=2)(PARAMS, x, y, jnp.int32(9), jax.random.key(0),
                                 ClientHParams())
  w, _ = _cu(4, local_epochs=2, return_weights=True)(
      PARAMS, x, y, jnp.int32(9), jax.random.key(0), ClientHParams())
  _assert_tree_close(w, jax.tree_util.tree_map(jnp.add, PARAMS, d), rtol=1e-6)


@pytest.mark.parametrize("n", [2, 6, 10])
def test_local_steps_full_batch_equals_gradient_descent(n):
  """local_steps=tau with a batch at least as large as the client: tau full-batch GD
  steps, each real example counted exactly once per step (no duplicates)."""
  tau = 4
  x, y = _data(2)
  delta, m = _cu(MAX_N, local_steps=tau)(PARAMS, x, y, jnp.int32(n), jax.random.key(3),
                                         ClientHParams())
  _assert_tree_close(delta, _gd_reference(x, y, n, tau))
  assert int(m.num_steps) == tau


def test_local_steps_takes_exactly_tau_steps():
  tau = 5
  cu = _cu(3, local_steps=tau, vmapped=True)
  counts = jnp.array([1, 2, 7, 10], jnp.int32)
  x, y = _data()
  _, m = cu(PARAMS, jnp.stack([x] * 4), jnp.stack([y] * 4), counts,
            jax.random.split(jax.random.key(0), 4), ClientHParams())
  np.testing.assert_array_equal(np.asarray(m.num_steps), [tau] * 4)


def test_inactive_steps_are_noops_for_stateful_optimizers():
  # max_n 10, b 5, n 3: step 0 is the full batch, step 1 is past the data and must not
  # move the params (momentum would otherwise keep going).
  x, y = _data(4)
  cu = _cu(5, local_epochs=1, momentum=0.9)
  delta, m = cu(PARAMS, x, y, jnp.int32(3), jax.random.key(0), ClientHParams())
  assert int(m.num_steps) == 1
  _assert_tree_close(delta, _gd_reference(x, y, 3, 1))


def test_padding_rows_do_not_matter():
  x, y = _data(5)
  n = 6
  cu = _cu(4, local_epochs=2)
  ref = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(9), ClientHParams())
  rng = np.random.default_rng(0)
  for garbage_x, garbage_y in [(rng.normal(size=(MAX_N - n, DIM)) * 1e3, 2),
                               (np.full((MAX_N - n, DIM), np.nan), 99)]:
    x2 = x.at[n:].set(jnp.asarray(garbage_x, jnp.float32))
    y2 = y.at[n:].set(garbage_y)
    out = cu(PARAMS, x2, y2, jnp.int32(n), jax.random.key(9), ClientHParams())
    _assert_tree_equal(out, ref)  # delta and every metric, bit for bit


def test_same_key_same_update_different_key_different_order():
  x, y = _data(6)
  cu = _cu(4, local_epochs=2)
  a, _ = cu(PARAMS, x, y, jnp.int32(10), jax.random.key(0), ClientHParams())
  b, _ = cu(PARAMS, x, y, jnp.int32(10), jax.random.key(0), ClientHParams())
  c, _ = cu(PARAMS, x, y, jnp.int32(10), jax.random.key(1), ClientHParams())
  _assert_tree_equal(a, b)
  assert not np.allclose(np.asarray(a["Dense_0"]["kernel"]), np.asarray(c["Dense_0"]["kernel"]))


def test_nonfinite_gradient_step_is_skipped_and_counted():
  x, y = _data(7)
  x = x.at[0, 0].set(jnp.nan)  # a real example with a NaN feature
  cu = make_client_update(MODEL, optax.sgd(0.1), batch_size=MAX_N, max_examples=MAX_N,
                          local_steps=4, skip_nonfinite_steps=True)
  delta, m = cu(PARAMS, x, y, jnp.int32(5), jax.random.key(0), ClientHParams())
  assert int(m.nonfinite_grads) == 4  # every full-batch step contains it
  for leaf in jax.tree_util.tree_leaves(delta):
    np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_nonfinite_gradient_without_step_check_gives_nonfinite_update():
  """By default the NaN propagates to the update (the round then zeroes and counts it)."""
  x, y = _data(7)
  x = x.at[0, 0].set(jnp.nan)
  delta, m = _cu(MAX_N, local_steps=4)(PARAMS, x, y, jnp.int32(5), jax.random.key(0),
                                       ClientHParams())
  assert int(m.nonfinite_grads) == 0
  assert not all(np.isfinite(np.asarray(l)).all() for l in jax.tree_util.tree_leaves(delta))


def test_client_update_argument_errors():
  with pytest.raises(FedJaxDpError, match="local_epochs"):
    make_client_update(MODEL, optax.sgd(0.1), batch_size=2, max_examples=5)
  with pytest.raises(FedJaxDpError, match="local_epochs"):
    make_client_update(MODEL, optax.sgd(0.1), batch_size=2, max_examples=5, local_epochs=1,
                       local_steps=2)
  with pytest.raises(FedJaxDpError, match="local_epochs"):
    make_client_update(MODEL, optax.sgd(0.1), batch_size=2, max_examples=5, local_epochs=0)
  with pytest.raises(FedJaxDpError, match="local_steps"):
    make_client_update(MODEL, optax.sgd(0.1), batch_size=2, max_examples=5, local_steps=-1)
  with pytest.raises(FedJaxDpError, match="batch_size"):
    make_client_update(MODEL, optax.sgd(0.1), batch_size=0, max_examples=5, local_epochs=1)
  with pytest.raises(FedJaxDpError, match="max_examples"):
    make_client_update(MODEL, optax.sgd(0.1), batch_size=2, max_examples=0, local_epochs=1)


# --- Record-level DP-SGD path ---------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _dp_client(steps, max_n=MAX_N, model=MODEL, q=1.0, lr=LR):
  cfg = DpSgdConfig.create(max_n, q, local_steps=steps)
  return jax.jit(make_client_update(model, optax.sgd(lr), batch_size=max_n,
                                    max_examples=max_n, dp_sgd=cfg))


def test_dp_sgd_config():
  cfg = DpSgdConfig.create(100, 0.1, local_epochs=2)
  assert cfg.num_steps == 20
  assert 10 < cfg.max_batch_size <= 100
  from scipy import stats
  assert stats.binom.sf(cfg.max_batch_size, 100, 0.1) < 1e-9
  assert DpSgdConfig.create(10, 1.0, local_steps=3) == DpSgdConfig(3, 10, 8)
  assert DpSgdConfig.create(10, 1.0, local_steps=3, micro_batch_size=None) == DpSgdConfig(3, 10)
  assert DpSgdConfig.create(10, 1.0, local_steps=3, micro_batch_size=50).micro_batch_size is None
  assert cfg.micro_batch_size == 8  # max(8, 100 * 0.1 / 2)
  assert DpSgdConfig.create(1000, 0.1, local_steps=1).micro_batch_size == 50
  with pytest.raises(FedJaxDpError, match="micro_batch_size"):
    DpSgdConfig.create(10, 0.5, local_steps=1, micro_batch_size=0)
  with pytest.raises(FedJaxDpError, match="record_sampling_rate"):
    DpSgdConfig.create(10, 0.0, local_steps=1)
  with pytest.raises(FedJaxDpError):
    DpSgdConfig.create(10, 0.5)


@pytest.mark.parametrize("n", [4, 10])
def test_dp_sgd_no_noise_huge_clip_is_gradient_descent(n):
  x, y = _data(8)
  cu = _dp_client(3)
  # The public denominator equals the client's n here, so DP-SGD is plain GD.
  hp = ClientHParams(record_clip_norm=1e6, record_noise_multiplier=0.0,
                     record_sampling_rate=1.0, record_denominator=float(n))
  delta, m = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(0), hp)
  _assert_tree_close(delta, _gd_reference(x, y, n, 3))
  assert int(m.num_steps) == 3
  assert float(m.example_clip_fraction) == 0.0
  assert int(m.batch_truncated) == 0
  np.testing.assert_allclose(float(m.loss), float(_mean_loss(PARAMS, x, y, n)), rtol=0.5)


def test_dp_sgd_example_clip_fraction_and_bound():
  n = 8
  x, y = _data(9)
  cu = _dp_client(1)
  per_ex_norms = np.array([_tree_norm(_grad(PARAMS, x[i:i + 1], y[i:i + 1], 1))
                           for i in range(n)])
  for c in (1e-6, float(np.median(per_ex_norms)), 1e6):
    hp = ClientHParams(c, 0.0, 1.0, record_denominator=float(n))
    delta, m = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(0), hp)
    np.testing.assert_allclose(float(m.example_clip_fraction), np.mean(per_ex_norms > c),
                               atol=1e-6)
    # The averaged clipped gradient has norm <= C.
    assert _tree_norm(delta) <= LR * c * (1 + 1e-5)


def test_dp_sgd_noise_std():
  dim, classes, n, z, c, lr = 200, 10, 8, 1.5, 0.3, 1.0
  model = create_model("linear", (dim,), classes)
  params = model.init(jax.random.key(0))
  x, y = _data(10, max_n=n, dim=dim)
  y = y % classes
  cu = _dp_client(1, max_n=n, model=model, lr=lr)
  b = 5.0  # the public denominator, not the client's n = 8
  hp = lambda zz: ClientHParams(c, zz, 1.0, record_denominator=b)
  clean, _ = cu(params, x, y, jnp.int32(n), jax.random.key(1), hp(0.0))
  noisy, _ = cu(params, x, y, jnp.int32(n), jax.random.key(1), hp(z))
  diff = np.concatenate([np.ravel(np.asarray(a) - np.asarray(b_)) for a, b_ in zip(
      jax.tree_util.tree_leaves(noisy), jax.tree_util.tree_leaves(clean))])
  expected = lr * z * c / b  # noise N(0, (z C)^2) on the sum, divided by b
  assert abs(diff.std() - expected) <= 6 * expected / np.sqrt(2 * diff.size)


def test_dp_sgd_divides_by_the_public_denominator_not_the_client_size():
  """Issue 13, 1d: the step is the clipped sum over b, whatever the client's size."""
  n = 8
  x, y = _data(9)
  cu = _dp_client(1)
  hp = lambda b: ClientHParams(1e6, 0.0, 1.0, record_denominator=b)
  d4, _ = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(0), hp(4.0))
  d8, _ = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(0), hp(8.0))
  _assert_tree_close(d4, jax.tree_util.tree_map(lambda l: 2.0 * l, d8))
  with pytest.raises(FedJaxDpError, match="record_denominator"):
    cu(PARAMS, x, y, jnp.int32(n), jax.random.key(0), ClientHParams(1.0, 1.0, 1.0))


def test_dp_sgd_poisson_batches_ignore_padding():
  n = 6
  x, y = _data(11)
  cu = _dp_client(5, q=0.5)
  hp = ClientHParams(1.0, 0.5, 0.5, record_denominator=3.0)
  ref = cu(PARAMS, x, y, jnp.int32(n), jax.random.key(2), hp)
  x2 = x.at[n:].set(jnp.nan)
  y2 = y.at[n:].set(99)
  out = cu(PARAMS, x2, y2, jnp.int32(n), jax.random.key(2), hp)
  _assert_tree_equal(out, ref)
  delta, m = ref
  assert int(m.num_steps) == 5 and int(m.batch_truncated) == 0
  assert 0.0 <= float(m.example_clip_fraction) <= 1.0
  assert np.isfinite(_tree_norm(delta)) and _tree_norm(delta) > 0


@pytest.mark.parametrize("dp", [True, False])
def test_ghost_and_vmap_per_example_paths_give_the_same_local_training(dp):
  """Issue 15: the fast per-example path (ghost norms + book-keeping) and the vmap(grad)
  reference give the same DP-SGD update (noise on, clip binding, Poisson batches with
  padding) and the same clipped-GD update (``grad_clip_norm``), on an MLP."""
  model = create_model("mlp", (DIM,), CLASSES, hidden=(6,))
  params = model.init(jax.random.key(4))
  x, y = _data(12)
  x = x.at[7:].set(jnp.nan)  # padding past the client's 7 examples
  outs = {}
  for method in ("ghost", "vmap"):
    if dp:
      cu = make_client_update(model, optax.sgd(LR), batch_size=3, max_examples=MAX_N,
                              dp_sgd=DpSgdConfig.create(MAX_N, 0.4, local_steps=4),
                              per_example_method=method)
      hp = ClientHParams(0.05, 0.7, 0.4, record_denominator=4.0)
    else:
      cu = make_client_update(model, optax.sgd(LR), batch_size=3, max_examples=MAX_N,
                              local_steps=4, per_example_method=method)
      hp = ClientHParams(grad_clip_norm=0.05)
    outs[method] = jax.jit(lambda p, x, y, k: cu(p, x, y, jnp.int32(7), k, hp))(
        params, x, y, jax.random.key(5))
  (dg, mg), (dv, mv) = outs["ghost"], outs["vmap"]
  _assert_tree_close(dg, dv)
  assert float(mg.loss) == pytest.approx(float(mv.loss), rel=1e-5)
  if dp:
    assert float(mg.example_clip_fraction) == float(mv.example_clip_fraction) > 0
  assert all(bool(jnp.all(jnp.isfinite(l))) for l in jax.tree_util.tree_leaves(dg))
  with pytest.raises(FedJaxDpError, match="per_example_method"):
    make_client_update(model, optax.sgd(LR), batch_size=3, max_examples=MAX_N,
                       local_steps=1, per_example_method="fast")


@pytest.mark.parametrize("micro", [1, 3, 7])
def test_dp_sgd_micro_batches_give_the_one_pass_result(micro):
  """Issue 15: processing only the micro-batches a Poisson draw fills (a while loop)
  gives the same update and metrics as one pass over the padded batch, noise and
  clipping on, for clients with few and many examples."""
  x, y = _data(13)
  hp = ClientHParams(0.3, 0.8, 0.6, 0.5, record_denominator=6.0)
  cfgs = {m: DpSgdConfig.create(MAX_N, 0.6, local_steps=4, micro_batch_size=m)
          for m in (None, micro)}
  assert cfgs[None].micro_batch_size is None and cfgs[micro].micro_batch_size == micro
  for n in (2, 10):
    outs = [jax.jit(make_client_update(MODEL, optax.sgd(1.0), batch_size=6,
                                       max_examples=MAX_N, dp_sgd=cfgs[m]))(
                PARAMS, x, y, jnp.int32(n), jax.random.key(6), hp) for m in (None, micro)]
    _assert_tree_close(outs[0][0], outs[1][0])
    for a, b in zip(outs[0][1], outs[1][1]):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
    assert float(outs[0][1].example_clip_fraction) > 0
