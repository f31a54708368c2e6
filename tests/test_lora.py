"""LoRA and pre-trained wrappers (fedjax_dp.models.lora): exact start at the base model,
the merged kernel W0 + (alpha/r) A B checked against NumPy, trainable counts, gradients
only to the factors, input checks, and a user-level DP-FedAvg run with each wrapper."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from fedjax_dp.data import from_client_lists
from fedjax_dp.models import (LoRAModel, PretrainedModel, count_params, create_model,
                              pretrained)
from fedjax_dp.models.lora import DEFAULT_TARGETS, OUTPUT_TARGET, lora, merge
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.runs.sweep import run_sweep
from fedjax_dp.validation import FedJaxDpError

T, V, WIDTH = 6, 7, 8  # window, vocabulary, model width: tiny and fast


@pytest.fixture(scope="module")
def base():
  model = create_model("char_transformer", (T,), V, hidden=(WIDTH, WIDTH))
  params = model.init(jax.random.key(0))
  x = np.asarray(jax.random.randint(jax.random.key(1), (5, T), 0, V), np.float32)
  return model, params, x


def _flat(tree):
  return traverse_util.flatten_dict(tree, sep="/")


def _perturbed(params, seed):
  """Every LoRA factor replaced by N(0, 0.3^2) values (B no longer zero)."""
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree_util.tree_unflatten(
      tree, [0.3 * jax.random.normal(k, l.shape) for k, l in zip(keys, leaves)])


def test_lora_starts_exactly_at_the_base_model(base):
  model, params, x = base
  m = lora(model, params, rank=2)
  assert isinstance(m, LoRAModel)
  p = m.init(jax.random.key(3))
  for path in m.target_paths:
    assert not np.any(np.asarray(p_leaf(p, path, "lora_b")))
    assert np.std(np.asarray(p_leaf(p, path, "lora_a"))) > 0
  np.testing.assert_array_equal(np.asarray(m.apply(p, x)),
                                np.asarray(model.apply(params, x)))


def p_leaf(tree, path, name):
  for part in path.split("/"):
    tree = tree[part]
  return tree[name]


@pytest.mark.parametrize("rank,alpha", [(1, None), (3, 6.0)])
def test_apply_equals_the_numpy_merged_kernel(base, rank, alpha):
  model, params, x = base
  m = lora(model, params, rank=rank, alpha=alpha)
  p = _perturbed(m.init(jax.random.key(4)), 5)
  scale = (rank if alpha is None else alpha) / rank
  merged = {k: np.asarray(v, np.float64) for k, v in _flat(params).items()}
  for path in m.target_paths:  # W0 + (alpha/r) A B, independently in float64 NumPy
    a = np.asarray(p_leaf(p, path, "lora_a"), np.float64)
    b = np.asarray(p_leaf(p, path, "lora_b"), np.float64)
    merged[path + "/kernel"] = merged[path + "/kernel"] + scale * a @ b
  ref = model.apply(traverse_util.unflatten_dict(
      {k: jnp.asarray(v, jnp.float32) for k, v in merged.items()}, sep="/"), x)
  out = m.apply(p, x)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-5)
  assert np.max(np.abs(np.asarray(out) - np.asarray(model.apply(params, x)))) > 1e-3
  for k, v in _flat(merge(m, p)).items():
    np.testing.assert_allclose(np.asarray(v), merged[k], rtol=1e-5, atol=1e-6)


def test_targets_and_trainable_count(base):
  model, params, _ = base
  kernels = {k[:-len("/kernel")]: v.shape for k, v in _flat(params).items()
             if k.endswith("/kernel")}
  m = lora(model, params, rank=2)
  blocks = sorted(p for p in kernels if p.startswith("block_"))
  assert sorted(m.target_paths) == blocks and len(blocks) == 8  # qkv, out, mlp x 2
  assert count_params(m.init(jax.random.key(0))) == sum(
      2 * (kernels[p][0] + kernels[p][1]) for p in blocks)
  with_out = lora(model, params, rank=2, targets=DEFAULT_TARGETS + (OUTPUT_TARGET,))
  assert OUTPUT_TARGET in with_out.target_paths
  assert count_params(with_out.init(jax.random.key(0))) == count_params(
      m.init(jax.random.key(0))) + 2 * (WIDTH + V)
  only_qkv = lora(model, params, rank=3, targets=[r"block_\d+/attn/qkv"])
  assert count_params(only_qkv.init(jax.random.key(0))) == 2 * 3 * (WIDTH + 3 * WIDTH)


def test_gradients_reach_only_the_factors(base):
  model, params, x = base
  m = lora(model, params, rank=2, alpha=3.0)
  y = jnp.arange(len(x)) % V
  loss = lambda q: jnp.mean(m.per_example_loss(m.apply(q, x), y))  # noqa: E731
  p0 = m.init(jax.random.key(6))
  g0 = jax.grad(loss)(p0)  # B = 0: dL/dA = scale G B^T = 0, dL/dB = scale A^T G != 0
  for path in m.target_paths:
    assert not np.any(np.asarray(p_leaf(g0, path, "lora_a")))
    assert float(jnp.linalg.norm(p_leaf(g0, path, "lora_b"))) > 0
  p = _perturbed(p0, 7)
  g = jax.grad(loss)(p)
  assert jax.tree_util.tree_structure(g) == jax.tree_util.tree_structure(p)
  # chain rule through W = W0 + s A B, with G = dL/dW of the base model at the merge
  full = jax.grad(lambda q: jnp.mean(model.per_example_loss(model.apply(q, x), y)))(
      merge(m, p))
  for path in m.target_paths:
    big_g = p_leaf(full, path, "kernel")
    a, b = p_leaf(p, path, "lora_a"), p_leaf(p, path, "lora_b")
    np.testing.assert_allclose(p_leaf(g, path, "lora_a"), m.scale * big_g @ b.T,
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(p_leaf(g, path, "lora_b"), m.scale * a.T @ big_g,
                               rtol=1e-4, atol=1e-6)


def test_pretrained_init_returns_the_params(base):
  model, params, x = base
  shifted = jax.tree_util.tree_map(lambda a: a + 0.01, params)
  m = pretrained(model, shifted)
  assert isinstance(m, PretrainedModel) and m.name.endswith("_pretrained")
  for key in (jax.random.key(0), jax.random.key(9)):
    got = m.init(key)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(shifted)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert count_params(m.init(jax.random.key(0))) == count_params(params)
  np.testing.assert_array_equal(np.asarray(m.apply(m.init(None), x)),
                                np.asarray(model.apply(shifted, x)))


def test_bad_input_names_the_argument(base):
  model, params, _ = base
  cases = [
      (dict(rank=0), "rank"),
      (dict(rank=WIDTH + 1), "rank"),  # above min(d_in, d_out) of attn/out [8, 8]
      (dict(rank=2, targets=["nothing_here"]), "targets"),
      (dict(rank=2, targets=["block_0/(attn"]), "targets"),
      (dict(rank=2, targets="block_0"), "targets"),
      (dict(rank=2, alpha=0.0), "alpha"),
  ]
  for kwargs, option in cases:
    with pytest.raises(FedJaxDpError) as e:
      lora(model, params, **kwargs)
    assert e.value.option == option, (kwargs, e.value)
  wrong = dict(params)
  wrong.pop("ln_f")
  with pytest.raises(FedJaxDpError) as e:
    lora(model, wrong, rank=2)
  assert e.value.option == "base_params"
  with pytest.raises(FedJaxDpError) as e:
    pretrained(model, jax.tree_util.tree_map(lambda a: a[..., :1], params))
  assert e.value.option == "params"
  with pytest.raises(FedJaxDpError) as e:
    lora(lora(model, params, rank=2), params, rank=2)
  assert e.value.option == "model"


def test_user_level_dp_fedavg_runs_with_both_wrappers(base):
  model, params, _ = base
  rng = np.random.default_rng(0)

  def windows(n):
    x = rng.integers(0, V, (n, T)).astype(np.float32)
    return x, ((x[:, -1] + 1) % V).astype(np.int32)  # next token: last one + 1

  xs, ys = zip(*[windows(12) for _ in range(8)])
  tx, ty = windows(30)
  data = from_client_lists("toy_windows", list(xs), list(ys), V, test_x=tx, test_y=ty)
  cfg = RunConfig.from_dict(dict(
      algorithm="dp_fedavg", rounds=3, clients_per_round=4, local_steps=1, batch_size=4,
      clip_norm=0.5, target_epsilon=8.0, delta=1e-3, out=None, seed=0))
  full = pretrained(model, params)  # one run
  result = run(cfg, progress=False, data=data, model=full)
  summaries = [(full, result.summary, result.state.params)]
  adapted = lora(model, params, rank=2)  # through run_sweep's model pass-through
  sweep = run_sweep(cfg, seeds=[1], data=data, model=adapted, progress=False)
  summaries += [(adapted, m.summary, m.state.params) for m in sweep.members]
  for m, summary, trained in summaries:
    assert summary["model"] == m.name
    assert math.isclose(summary["epsilon"], 8.0, rel_tol=0.01)
    assert math.isfinite(summary["final_test_accuracy"])
    # only the wrapper's parameters are trained (and clipped, noised, uploaded)
    assert count_params(trained) == count_params(m.init(jax.random.key(0)))
  assert count_params(summaries[1][2]) == sum(
      2 * (a + b) for a, b in (np.shape(p_leaf(params, q, "kernel"))
                               for q in adapted.target_paths))


def test_ghost_support_declines_lora_and_auto_clipping_uses_vmap():
  """A LoRA model's layers read merged kernels that are not in its params: the ghost
  path says so and method="auto" takes vmap(grad), equal to method="vmap"."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from fedjax_dp.models import create_model
  from fedjax_dp.models.lora import lora
  from fedjax_dp.privacy import per_example
  base = create_model("char_transformer", (8,), 81, hidden=(8,))
  model = lora(base, base.init(jax.random.PRNGKey(0)), rank=2)
  params = model.init(jax.random.PRNGKey(1))
  x = jax.random.randint(jax.random.PRNGKey(2), (3, 8), 0, 81).astype(jnp.float32)
  y = jnp.array([1, 2, 3])
  ok, why = per_example.ghost_support(model, params, x)
  assert not ok and "not in params" in why
  w = jnp.ones(3, jnp.float32)
  auto = per_example.clipped_grad_sum(model, params, x, y, w, 0.1)
  ref = per_example.clipped_grad_sum(model, params, x, y, w, 0.1, method="vmap")
  for a, b in zip(jax.tree_util.tree_leaves(auto.total), jax.tree_util.tree_leaves(ref.total)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
