"""Membership-inference attacks (loss threshold, shadow models)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_dp.models import create_model
from fedjax_dp.privacy import membership
from fedjax_dp.validation import FedJaxDpError


@settings(max_examples=40, deadline=None)
@given(a=st.lists(st.integers(0, 5), min_size=1, max_size=12),
       b=st.lists(st.integers(0, 5), min_size=1, max_size=12))
def test_auc_is_the_pairwise_win_rate_with_ties_half(a, b):
  brute = np.mean([[1.0 if x > y else 0.5 if x == y else 0.0 for y in b] for x in a])
  assert membership.roc_auc(np.array(a, float), np.array(b, float)) == pytest.approx(brute)


def test_loss_threshold_attack_separates_and_guesses():
  rng = np.random.default_rng(0)
  sep = membership.loss_threshold_attack(rng.exponential(0.05, 400),
                                         rng.exponential(1.0, 400) + 0.2)
  assert sep.accuracy > 0.9 and sep.auc > 0.95
  same = membership.loss_threshold_attack(rng.exponential(1.0, 2000),
                                          rng.exponential(1.0, 2000))
  assert abs(same.accuracy - 0.5) < 0.05 and abs(same.auc - 0.5) < 0.05
  with pytest.raises(FedJaxDpError, match="at least"):
    membership.loss_threshold_attack([0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
  with pytest.raises(FedJaxDpError, match="finite"):
    membership.loss_threshold_attack([np.nan] * 5, [0.1] * 5)


def _memorizer():
  """A model that memorises random labels: the attack's easy case."""
  model = create_model("mlp", (20,), 4, hidden=(64,))
  opt = optax.adam(0.01)

  def train(x, y, i):
    params = model.init(jax.random.key(100 + i))
    state = opt.init(params)
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    @jax.jit
    def step(p, s):
      g = jax.grad(lambda q: jnp.mean(model.per_example_loss(model.apply(q, xj), yj)))(p)
      u, s = opt.update(g, s, p)
      return optax.apply_updates(p, u), s

    for _ in range(300):
      params, state = step(params, state)
    return params

  return model, train


def test_shadow_attack_beats_guessing_on_a_memorising_model():
  rng = np.random.default_rng(1)
  draw = lambda n: (rng.normal(size=(n, 20)).astype(np.float32),
                    rng.integers(0, 4, n).astype(np.int32))
  model, train = _memorizer()
  mx, my = draw(60)
  nx, ny = draw(60)
  target = train(mx, my, 99)
  shadows = [draw(60) + draw(60) for _ in range(3)]
  res = membership.shadow_model_attack(model, target, mx, my, nx, ny, shadows, train, 4)
  assert res.accuracy > 0.7 and res.auc > 0.75
  # The loss-threshold attack agrees on this target.
  lt = membership.loss_threshold_attack(membership.per_example_losses(model, target, mx, my),
                                        membership.per_example_losses(model, target, nx, ny))
  assert lt.accuracy > 0.7


def test_shadow_attack_on_an_untrained_model_is_a_guess():
  rng = np.random.default_rng(2)
  draw = lambda n: (rng.normal(size=(n, 20)).astype(np.float32),
                    rng.integers(0, 4, n).astype(np.int32))
  model, train = _memorizer()
  target = model.init(jax.random.key(7))  # trained on nothing: no membership signal
  mx, my = draw(300)
  nx, ny = draw(300)
  shadows = [draw(60) + draw(60) for _ in range(2)]
  res = membership.shadow_model_attack(model, target, mx, my, nx, ny, shadows, train, 4)
  assert abs(res.accuracy - 0.5) < 0.08


def test_shadow_attack_bad_input():
  model, train = _memorizer()
  x = np.zeros((4, 20), np.float32)
  y = np.zeros(4, np.int32)
  with pytest.raises(FedJaxDpError, match="shadow_data"):
    membership.shadow_model_attack(model, None, x, y, x, y, [], train, 4)
