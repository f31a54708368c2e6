"""Table III of the amplitude-varying paper: membership-inference success against the
final global model, vartheta in {0.95, 1, 1.05} x epsilon in {5, 10, 20}, and without DP.

Protocol (the paper gives only "50 trials, 25 shadow models"; note section 9 item 23):
Fashion-MNIST is split into disjoint pools. The target federation has U = 100 clients of
500 training images (train[:50000]); its members are 1,000 of those images, its
non-members 1,000 test images (test[:5000]). The attacker's shadow federations copy the
target's recipe (the same |D_k| = 500, q = 0.1, tau, C, epsilon, vartheta) on the
remaining pool: shadow i trains 10 clients on its share of train[50000:] and holds out
test[5000:] images. Two attacks are scored: Shokri et al.'s shadow-model attack and the
loss-threshold attack (Yeom et al.); success = attack accuracy on balanced members and
non-members (0.5 is guessing).

On CPU the default is 3 trials and 2 shadow federations (the paper: 50 and 25); the
README states the reduction.

Usage:
  python experiments/amplitude_varying/table3_mia.py [--trials 3] [--shadows 2] [--quick]

Writes ``results/table3.json|md``.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from fedjax_dp.algorithms import amplitude_varying as av  # noqa: E402
from fedjax_dp.data import load_dataset  # noqa: E402
from fedjax_dp.data.federated_data import from_client_lists  # noqa: E402
from fedjax_dp.federated import PopulationData, make_block_fn, run_rounds  # noqa: E402
from fedjax_dp.models import create_model  # noqa: E402
from fedjax_dp.privacy import membership  # noqa: E402

PAPER = {(5, 0.95): 0.581, (5, 1.0): 0.582, (5, 1.05): 0.573, (10, 0.95): 0.599,
         (10, 1.0): 0.587, (10, 1.05): 0.583, (20, 0.95): 0.607, (20, 1.0): 0.602,
         (20, 1.05): 0.596, "no DP": 0.993}
PER_CLIENT = 500


def federation(x, y, num_clients, name):
  xs = [x[i * PER_CLIENT:(i + 1) * PER_CLIENT] for i in range(num_clients)]
  ys = [y[i * PER_CLIENT:(i + 1) * PER_CLIENT] for i in range(num_clients)]
  return from_client_lists(name, xs, ys, 10, source="experiments/amplitude_varying")


def train_fl(model, fd, seed, rounds, epsilon, vartheta, mechanism, clients_per_round):
  """The paper's FL recipe on federation ``fd``; returns the final global params."""
  alg = av.amplitude_varying(model, fd, epsilon=epsilon, vartheta=vartheta, rounds=rounds,
                             clients_per_round=clients_per_round, mechanism=mechanism,
                             **{k: v for k, v in common.PAPER.items()
                                if k in ("local_steps", "clip_norm", "delta",
                                         "learning_rate")})
  pop = PopulationData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))
  key = jax.random.key(seed)
  state = alg.init(jax.random.fold_in(key, 1 << 20))
  c = alg.config
  sched = av.hparams_for(c, c["stddevs"])
  static = (fd.num_clients, clients_per_round, mechanism, rounds)
  if static not in _COMPILED:  # one program per federation shape serves every cell
    _COMPILED[static] = (alg.round_fn, make_block_fn(alg.round_fn))
  round_fn, block_fn = _COMPILED[static]
  state, _ = run_rounds(round_fn, state, pop, sched, key, rounds=rounds,
                        block_size=rounds, block_fn=block_fn)
  return state.params


_COMPILED = {}


def main(argv=None) -> int:
  p = common.arg_parser(__doc__, dataset=False, seeds=False)
  p.add_argument("--trials", type=int, default=3)
  p.add_argument("--shadows", type=int, default=2)
  a = p.parse_args(argv)
  if a.report_only:
    summarize(common.stored_results(os.path.join(a.out, "table3.json")), a.out)
    return 0
  cells = [(e, v) for e in (5.0, 10.0, 20.0) for v in (0.95, 1.0, 1.05)] + ["no DP"]
  if a.quick:
    a.trials, a.shadows, a.rounds, cells = 1, 1, 3, [(10.0, 1.05), "no DP"]
  fm = load_dataset("fashion_mnist", partition="iid", num_clients=100, seed=0)
  x = np.concatenate([fm.x[k, :fm.counts[k]] for k in range(fm.num_clients)])
  y = np.concatenate([fm.y[k, :fm.counts[k]] for k in range(fm.num_clients)])
  tx, ty = fm.test_x, fm.test_y
  model = create_model("mlp", fm.feature_shape, 10, hidden=(32,), activation="linear")
  target_fd = federation(x[:50000], y[:50000], 100, "fmnist-target")
  n_shadow_clients = (len(x) - 50000) // PER_CLIENT // max(a.shadows, 1)
  res = common.open_results(os.path.join(a.out, "table3.json"), dict(
      table="Table III", trials=a.trials, shadows=a.shadows, rounds=a.rounds,
      target="100 clients x 500 Fashion-MNIST images, K = 10",
      shadow=f"{a.shadows} shadow federations of {n_shadow_clients} clients x 500, K = 1"),
      resume=a.resume)
  for trial in range(a.trials):
    rng = np.random.default_rng(trial)
    mem = rng.choice(50000, 1000, replace=False)
    non = rng.choice(5000, 1000, replace=False)
    for cell in cells:
      label = cell if cell == "no DP" else f"epsilon={cell[0]:g}, vartheta={cell[1]:g}"
      if res.has(label=label, trial=trial):
        continue
      eps, v, mech = (1.0, 1.0, "none") if cell == "no DP" else (cell[0], cell[1], "gaussian")
      target = train_fl(model, target_fd, 1000 * trial, a.rounds, eps, v, mech, 10)
      shadows = []
      for s in range(a.shadows):
        lo = 50000 + s * n_shadow_clients * PER_CLIENT
        sx, sy = x[lo:lo + n_shadow_clients * PER_CLIENT], y[lo:lo + n_shadow_clients * PER_CLIENT]
        out_lo = 5000 + s * (5000 // max(a.shadows, 1))
        ox, oy = tx[out_lo:out_lo + len(sx)], ty[out_lo:out_lo + len(sx)]
        shadows.append((sx, sy, ox, oy))

      def shadow_train(sx, sy, i, eps=eps, v=v, mech=mech, trial=trial):
        fd = federation(sx, sy, len(sx) // PER_CLIENT, f"shadow{i}")
        return train_fl(model, fd, 1000 * trial + 1 + i, a.rounds, eps, v, mech, 1)

      shadow = membership.shadow_model_attack(
          model, target, x[mem], y[mem], tx[non], ty[non], shadows, shadow_train, 10,
          seed=trial)
      loss = membership.loss_threshold_attack(
          membership.per_example_losses(model, target, x[mem], y[mem]),
          membership.per_example_losses(model, target, tx[non], ty[non]), seed=trial)
      r = dict(label=label, trial=trial, epsilon=None if mech == "none" else eps,
               vartheta=v, shadow_accuracy=shadow.accuracy, shadow_auc=shadow.auc,
               loss_threshold_accuracy=loss.accuracy, loss_threshold_auc=loss.auc,
               paper=PAPER.get(cell if cell == "no DP" else (int(cell[0]), cell[1])))
      res.add(r)
      print(f"trial {trial} {label}: shadow {shadow.accuracy:.3f} (AUC {shadow.auc:.3f}), "
            f"loss threshold {loss.accuracy:.3f}", flush=True)
  summarize(res, a.out)
  return 0


def summarize(res, out):
  labels = list(dict.fromkeys(r["label"] for r in res.runs))
  lines = ["Table III reproduction (Fashion-MNIST, MLP 784-32-10 linear, M = "
           f"{res.meta['rounds']}): membership-inference accuracy on balanced members / "
           f"non-members, mean ± std (sample std, ddof = 1) over {res.meta['trials']} "
           "trial(s), "
           f"{res.meta['shadows']} shadow federation(s) (paper: 50 trials, 25 shadows).", "",
           "| setting | shadow-model attack | AUC | loss-threshold attack | paper |",
           "|---|---|---|---|---|"]
  for label in labels:
    rs = [r for r in res.runs if r["label"] == label]
    f = lambda k: common.mean_spread([r[k] for r in rs])
    lines.append(f"| {label} | {f('shadow_accuracy')} | {f('shadow_auc')} | "
                 f"{f('loss_threshold_accuracy')} | {rs[0]['paper']} |")
  common.write_report(out, "table3", lines)


if __name__ == "__main__":
  sys.exit(main())
