"""A run's pictures (fedjax_dp.runs.plots): the label distribution of a partition, the
titles that say which epsilon is which, curves.png, partition.png and `fedjax-dp plot`."""

import json
import os

import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.data.federated_data import from_client_lists
from fedjax_dp.runs import plots
from fedjax_dp.validation import FedJaxDpError
from tiny_runs import tiny_run

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path):
  with open(path, "rb") as f:
    return f.read(8) == PNG


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
  """Two tiny runs that differ in the noise multiplier; the second writes only the
  metrics released under DP (no train loss)."""
  a = tiny_run(tmp_path_factory, logger="none", noise_multiplier=1.0)
  b = tiny_run(tmp_path_factory, logger="none", noise_multiplier=2.0,
               dp_metrics_only=True)
  return a, b


def test_label_distribution_counts_each_clients_real_examples():
  ys = [np.array([0, 0, 2]), np.array([1]), np.array([2, 2, 2, 0, 1])]
  fd = from_client_lists("toy", [np.zeros((len(y), 2)) for y in ys], ys, num_classes=4)
  got = plots.label_distribution(fd)
  np.testing.assert_array_equal(got, [[2, 0, 1, 0], [0, 1, 0, 0], [1, 1, 3, 0]])
  assert got.shape == (3, 4)
  np.testing.assert_array_equal(got.sum(1), fd.counts)  # padding is not counted


def test_label_distribution_refuses_labels_outside_the_classes():
  fd = from_client_lists("toy", [np.zeros((2, 1))], [np.array([0, 3])], num_classes=3)
  with pytest.raises(FedJaxDpError, match=r"num_classes=3"):
    plots.label_distribution(fd)


def test_plot_partition_writes_a_png_and_caps_the_rows(tmp_path, make_fd):
  fd = make_fd(num_clients=130, min_examples=2, max_examples=6)
  path = plots.plot_partition(fd, str(tmp_path / "p.png"), max_clients=100)
  assert _is_png(path)
  fig = plots.partition_figure(fd, max_clients=100)
  try:
    assert fig._suptitle.get_text() == (
        "synthetic: partition natural, 130 clients (the 100 largest shown)")
    heat, sizes = fig.axes[0], fig.axes[1]
    frac = heat.get_images()[0].get_array()
    assert frac.shape == (100, 3)
    np.testing.assert_allclose(frac.sum(1), 1.0)
    widths = [p.get_width() for p in sizes.patches]
    assert len(widths) == 100 and widths == sorted(widths, reverse=True)
    assert widths[0] == fd.counts.max()
  finally:
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.parametrize("summary,want", [
    ({"epsilon": 268.93, "accountant": "rdp", "delta": 1e-3},
     "epsilon 268.9 (RDP accountant, delta 1e-3)"),
    ({"epsilon": 2.5, "accountant": "pld", "delta": 2.5e-5},
     "epsilon 2.5 (PLD accountant, delta 2.5e-5)"),
    ({"epsilon": 268.93, "accountant": "rdp", "delta": 1e-3, "epsilon_paper": 20.0,
      "epsilon_paper_note": "the paper's accounting: basic composition of the budgets"},
     "accountant: eps=268.9 (RDP, delta 1e-3); paper's calibration: eps=20 (basic "
     "composition)"),
    ({"epsilon": 5.0, "accountant": "rdp", "delta": 1e-5, "epsilon_paper": 1.234,
      "epsilon_paper_note": "the paper's Theorem 5 (our choice of its constants)"},
     "accountant: eps=5 (RDP, delta 1e-5); paper's calibration: eps=1.234 (Theorem 5)"),
    ({"epsilon": None, "accountant": "rdp", "delta": 1e-3},
     "non-private (epsilon = inf)"),
    ({"epsilon": float("inf"), "accountant": "rdp", "delta": 1e-3,
      "epsilon_paper": float("inf")}, "non-private (epsilon = inf)"),
    ({"private": False, "epsilon": None, "accountant": "rdp", "delta": 1e-3},
     "non-private (epsilon = inf)"),
    # A DP run stopped before its first block finished (e.g. during compilation).
    ({"private": True, "rounds": 0, "epsilon": 0.0, "accountant": "rdp", "delta": 1e-3},
     "no rounds completed (epsilon = 0)"),
])
def test_epsilon_label_says_which_epsilon_is_which(summary, want):
  assert plots.epsilon_label(summary) == want


def test_run_title_names_algorithm_and_dataset():
  title = plots.run_title({"algorithm": "my_paper", "dataset": "fashion_mnist",
                           "epsilon": 31.4, "accountant": "rdp", "delta": 1e-3,
                           "epsilon_paper": 20, "epsilon_paper_mechanism": (
                               "classical Gaussian mechanism per iteration, noise scaled "
                               "linearly by R (uplink) and T (downlink)")})
  assert title.startswith("my_paper on fashion_mnist\n")
  assert "accountant: eps=31.4 (RDP, delta 1e-3)" in title
  assert "paper's calibration: eps=20 (classical Gaussian, linear composition)" in title


def test_curves_png_of_a_run_and_its_title(two_runs):
  (out, res), _ = two_runs
  assert _is_png(os.path.join(out, "curves.png"))
  assert _is_png(os.path.join(out, "partition.png"))
  records, summary = plots.read_run(out)
  fig = plots.curves_figure(records, summary)
  try:
    assert fig._suptitle.get_text() == plots.run_title(summary)
    assert "RDP accountant" in fig._suptitle.get_text()
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts == []  # every panel has its curve
    acc = fig.axes[0]
    (line, baseline) = acc.get_lines()
    assert list(line.get_xdata()) == [2, 4]
    assert baseline.get_ydata()[0] == pytest.approx(summary["majority_class_accuracy"])
  finally:
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_curves_say_train_loss_not_released_for_dp_metrics_only(two_runs):
  _, (out, _) = two_runs
  records, summary = plots.read_run(out)
  assert not any("train_loss" in r for r in records)
  fig = plots.curves_figure(records, summary)
  try:
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert texts == ["train loss not released (--dp-metrics-only)"]
  finally:
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_cli_plot_overlays_runs_labelled_by_the_differing_key(two_runs, tmp_path, capsys,
                                                               monkeypatch):
  (a, _), (b, _) = two_runs
  monkeypatch.chdir(tmp_path)
  assert cli.main(["plot", a, b]) == 0
  assert _is_png(tmp_path / "compare.png")  # the default, in the current folder
  assert "compare.png" in capsys.readouterr().out
  summaries = [plots.read_run(d)[1] for d in (a, b)]
  labels = plots.differing_labels(summaries)
  assert "noise_multiplier=1.0" in labels[0] and "noise_multiplier=2.0" in labels[1]
  assert not any("out=" in label for label in labels)  # the folders always differ
  out = tmp_path / "eps.png"
  assert cli.main(["plot", a, b, "--x", "epsilon", "--labels", "z=1", "z=2",
                   "--out", str(out)]) == 0
  assert _is_png(out) and str(out) in capsys.readouterr().out


def test_compare_legend_and_label_count(two_runs, tmp_path):
  (a, _), (b, _) = two_runs
  runs = [plots.read_run(a), plots.read_run(b)]
  fig = plots.compare_figure(runs, labels=None, x="round")
  try:
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("noise_multiplier=1.0" in t for t in legend_texts)
    assert any("noise_multiplier=2.0" in t for t in legend_texts)
  finally:
    import matplotlib.pyplot as plt
    plt.close(fig)
  with pytest.raises(FedJaxDpError) as e:
    plots.plot_compare(runs, str(tmp_path / "x.png"), labels=["only one"])
  assert e.value.option == "labels"


def test_identical_configs_are_labelled_by_folder():
  s = {"config": {"algorithm": "dp_fedavg", "out": "a", "seed": 0}}
  assert plots.differing_labels([s, dict(s)], names=["a", "b"]) == ["a", "b"]


def test_a_none_that_resolves_to_the_same_value_is_no_difference():
  """data_seed None is the run's seed: data_seed=0 and None of seed-0 runs are equal."""
  s = {"config": {"seed": 0, "data_seed": None, "noise_multiplier": 1.0}}
  t = {"config": {"seed": 0, "data_seed": 0, "noise_multiplier": 2.0}}
  assert plots.differing_labels([s, t]) == ["noise_multiplier=1.0", "noise_multiplier=2.0"]
  u = {"config": {"seed": 1, "data_seed": None, "noise_multiplier": 1.0}}
  assert plots.differing_labels([t, u], names=["a", "b"]) == [
      "seed=0, data_seed=0, noise_multiplier=2.0",
      "seed=1, data_seed=1, noise_multiplier=1.0"]


def test_curves_of_a_dp_run_without_rounds_do_not_say_non_private():
  import matplotlib.pyplot as plt
  summary = {"algorithm": "dp_fedavg", "dataset": "har", "private": True, "rounds": 0,
             "epsilon": 0.0, "accountant": "rdp", "delta": 1e-3}
  fig = plots.curves_figure([], summary)
  texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [fig._suptitle.get_text()]
  plt.close(fig)
  assert not any("non-private" in t for t in texts)
  assert any("no rounds completed" in t for t in texts)


def test_cli_plot_names_a_folder_without_run_files(tmp_path, capsys, two_runs):
  (a, _), _ = two_runs
  empty = tmp_path / "not_a_run"
  empty.mkdir()
  assert cli.main(["plot", a, str(empty)]) == 2
  err = capsys.readouterr().err
  assert "not_a_run" in err and "metrics.jsonl" in err
  missing = tmp_path / "no_such_folder"
  assert cli.main(["plot", str(missing)]) == 2
  assert "no_such_folder" in capsys.readouterr().err
  (empty / "metrics.jsonl").write_text(json.dumps({"round": 1}) + "\n")
  with pytest.raises(FedJaxDpError, match="summary.json") as e:
    plots.read_run(str(empty))
  assert e.value.option == "run_dirs"
