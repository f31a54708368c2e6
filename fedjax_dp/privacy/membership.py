"""Membership-inference attacks on a trained model: an empirical check of what DP buys.

Two attacks, for any `fedjax_dp.models.Model` and parameters:

* `loss_threshold_attack` (Yeom, Giacomelli, Fredrikson, Jha, CSF 2018): a sample is
  called a member when the model's loss on it is below a threshold. The threshold is
  chosen on one half of the (member, non-member) samples and the accuracy reported on
  the other half, so the score is not tuned on what it is scored on.
* `shadow_model_attack` (Shokri, Stronati, Song, Shmatikov, S&P 2017): the attacker
  trains shadow models on data from the same distribution whose membership it knows,
  records their sorted softmax vectors on their own training ("in") and held-out
  ("out") samples, and fits one attack classifier per true class (logistic regression
  on the sorted probability vector, trained with optax). The classifiers then label the
  target model's outputs on the target's members and non-members.

Both report the attack accuracy on a balanced set (0.5 = guessing) and the ROC AUC.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_dp.validation import FedJaxDpError, check_int


@dataclasses.dataclass(frozen=True)
class AttackResult:
  """Attack accuracy on balanced members / non-members, and ROC AUC.

  Attributes:
    accuracy: fraction of correct member / non-member calls on the evaluation set
      (balanced, so 0.5 is guessing).
    auc: area under the ROC curve of the attack score.
    num_members / num_nonmembers: evaluation set sizes.
  """
  accuracy: float
  auc: float
  num_members: int
  num_nonmembers: int


def roc_auc(scores_members: np.ndarray, scores_nonmembers: np.ndarray) -> float:
  """P(score of a random member > score of a random non-member), ties counted half
  (the Mann-Whitney U statistic)."""
  s = np.concatenate([scores_members, scores_nonmembers])
  ranks = _average_ranks(s)
  n1, n0 = len(scores_members), len(scores_nonmembers)
  return float((ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _average_ranks(s: np.ndarray) -> np.ndarray:
  order = np.argsort(s, kind="mergesort")
  ranks = np.empty(len(s), np.float64)
  sorted_s = s[order]
  i = 0
  while i < len(s):
    j = i
    while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
      j += 1
    ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
    i = j + 1
  return ranks


def _balanced(a: np.ndarray, b: np.ndarray, rng) -> Tuple[np.ndarray, np.ndarray]:
  n = min(len(a), len(b))
  if n < 2:
    raise FedJaxDpError(f"need at least 2 members and 2 non-members, got {len(a)} and "
                        f"{len(b)}.")
  return a[rng.permutation(len(a))[:n]], b[rng.permutation(len(b))[:n]]


def per_example_losses(model, params, x: np.ndarray, y: np.ndarray,
                       batch_size: int = 2048) -> np.ndarray:
  """The model's loss on each example: float64 ``[n]``."""
  fn = jax.jit(lambda p, xb, yb: model.per_example_loss(model.apply(p, xb), yb))
  out = [np.asarray(fn(params, jnp.asarray(x[i:i + batch_size]),
                       jnp.asarray(y[i:i + batch_size])))
         for i in range(0, len(x), batch_size)]
  return np.concatenate(out).astype(np.float64)


def loss_threshold_attack(member_losses: Sequence[float], nonmember_losses: Sequence[float],
                          seed: int = 0) -> AttackResult:
  """Yeom et al.'s attack: "member" iff loss < t, with t chosen on a calibration half.

  Args:
    member_losses / nonmember_losses: per-example losses of the target model on samples
      it was / was not trained on (e.g. `per_example_losses`).
    seed: seed of the balanced subsampling and the calibration split.

  Returns:
    `AttackResult` on the evaluation half (AUC of ``-loss`` on that half).

  Raises:
    FedJaxDpError: fewer than 4 samples of either kind, or non-finite losses.
  """
  rng = np.random.default_rng(seed)
  m = np.asarray(member_losses, np.float64)
  n = np.asarray(nonmember_losses, np.float64)
  if not (np.all(np.isfinite(m)) and np.all(np.isfinite(n))):
    raise FedJaxDpError("losses must be finite.")
  m, n = _balanced(m, n, rng)
  half = len(m) // 2
  if half < 2:
    raise FedJaxDpError("need at least 4 members and 4 non-members.")
  cal_m, ev_m, cal_n, ev_n = m[:half], m[half:], n[:half], n[half:]
  cands = np.unique(np.concatenate([cal_m, cal_n]))
  acc = [(np.sum(cal_m < t) + np.sum(cal_n >= t)) / (2 * half) for t in cands]
  t = cands[int(np.argmax(acc))] if len(cands) else 0.0
  ev_acc = (np.sum(ev_m < t) + np.sum(ev_n >= t)) / (len(ev_m) + len(ev_n))
  return AttackResult(float(ev_acc), roc_auc(-ev_m, -ev_n), len(ev_m), len(ev_n))


def sorted_softmax(model, params, x: np.ndarray, batch_size: int = 2048) -> np.ndarray:
  """The model's class probabilities on ``x``, each row sorted in decreasing order
  (Shokri et al.'s attack features): float32 ``[n, num_classes]``."""
  fn = jax.jit(lambda p, xb: -jnp.sort(-jax.nn.softmax(model.apply(p, xb), axis=-1), -1))
  return np.concatenate([np.asarray(fn(params, jnp.asarray(x[i:i + batch_size])))
                         for i in range(0, len(x), batch_size)])


def _fit_logistic(features: np.ndarray, labels: np.ndarray, steps: int = 300,
                  learning_rate: float = 0.1):
  """Logistic regression on log-probability features (optax adam, full batch)."""
  x = jnp.asarray(np.log(np.clip(features, 1e-12, 1.0)))
  mu, sd = x.mean(0), x.std(0) + 1e-6
  x = (x - mu) / sd
  y = jnp.asarray(labels, jnp.float32)
  params = (jnp.zeros(x.shape[1]), jnp.zeros(()))
  opt = optax.adam(learning_rate)
  state = opt.init(params)

  def loss(p):
    logits = x @ p[0] + p[1]
    return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, y)) + 1e-3 * jnp.sum(p[0] ** 2)

  @jax.jit
  def step(p, s):
    g = jax.grad(loss)(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s

  for _ in range(steps):
    params, state = step(params, state)

  def score(f):
    z = (jnp.log(jnp.clip(jnp.asarray(f), 1e-12, 1.0)) - mu) / sd
    return np.asarray(z @ params[0] + params[1])

  return score


def shadow_model_attack(model, target_params, member_x: np.ndarray, member_y: np.ndarray,
                        nonmember_x: np.ndarray, nonmember_y: np.ndarray,
                        shadow_data: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray,
                                                    np.ndarray]],
                        train_fn: Callable[[np.ndarray, np.ndarray, int], object],
                        num_classes: int, seed: int = 0) -> AttackResult:
  """Shokri et al.'s shadow-model attack against ``target_params``.

  Args:
    model: the model family (the attacker knows the architecture and training recipe).
    target_params: the trained target model.
    member_x, member_y / nonmember_x, nonmember_y: samples the target was / was not
      trained on (evaluation; balanced by subsampling).
    shadow_data: one ``(in_x, in_y, out_x, out_y)`` per shadow model: its training set
      and a disjoint held-out set, drawn from the target's distribution but disjoint
      from the target's data.
    train_fn: ``train_fn(x, y, shadow_index) -> params``, the attacker's imitation of
      the target's training (for a federated target: a federated run on ``x, y``).
    num_classes: number of classes (one attack classifier per class).
    seed: seed of the balancing.

  Returns:
    `AttackResult` on the target's balanced members / non-members.

  Raises:
    FedJaxDpError: no shadow data, or a class without shadow examples of both kinds.
  """
  check_int("num_classes", num_classes, minimum=2)
  if not shadow_data:
    raise FedJaxDpError("shadow_data must hold at least one shadow model's data.")
  feats: List[np.ndarray] = []
  labels: List[np.ndarray] = []
  classes: List[np.ndarray] = []
  for i, (in_x, in_y, out_x, out_y) in enumerate(shadow_data):
    params = train_fn(in_x, in_y, i)
    for x, y, lab in ((in_x, in_y, 1), (out_x, out_y, 0)):
      feats.append(sorted_softmax(model, params, x))
      labels.append(np.full(len(y), lab))
      classes.append(np.asarray(y))
  f, l, c = np.concatenate(feats), np.concatenate(labels), np.concatenate(classes)
  scorers = {}
  for k in range(num_classes):
    sel = c == k
    if len(np.unique(l[sel])) < 2:
      raise FedJaxDpError(f"class {k} has no shadow examples of both kinds (in / out).")
    scorers[k] = _fit_logistic(f[sel], l[sel])
  rng = np.random.default_rng(seed)
  idx_m = rng.permutation(len(member_y))
  idx_n = rng.permutation(len(nonmember_y))
  n = min(len(idx_m), len(idx_n))
  if n < 2:
    raise FedJaxDpError("need at least 2 members and 2 non-members to evaluate.")
  scores = []
  for x, y, idx in ((member_x, member_y, idx_m[:n]), (nonmember_x, nonmember_y, idx_n[:n])):
    probs = sorted_softmax(model, target_params, x[idx])
    yy = np.asarray(y)[idx]
    s = np.empty(n)
    for k in range(num_classes):
      sel = yy == k
      if sel.any():
        s[sel] = scorers[k](probs[sel])
    scores.append(s)
  acc = (np.sum(scores[0] > 0) + np.sum(scores[1] <= 0)) / (2 * n)
  return AttackResult(float(acc), roc_auc(scores[0], scores[1]), n, n)
