"""What `fedjax-dp run` prints at the end (fedjax_dp.runs.report): a short privacy line
with the detail on a second line, and only the outputs that were written."""

import os

from fedjax_dp.runs import report

PRIVATE = {
    "epsilon": 3.1154, "epsilon_rdp": 3.1154, "epsilon_pld": 3.01, "delta": 1e-3,
    "delta_total": 1e-3, "privacy_unit": "user-level", "relation": "add_remove",
    "sampler": "poisson", "accountant": "rdp", "noise_multiplier": 1.1, "clip_norm": 0.5,
    "sampling_rate": 0.3,
    "neighboring_relation": "add/remove-one: neighbouring datasets differ by ...",
}


def test_privacy_line_is_short_and_readable():
  line = report.privacy_line(PRIVATE)
  assert line == ("(epsilon = 3.115, delta = 1e-3)-DP, user-level, add/remove one client, "
                  "Poisson sampling; accountant: RDP")
  assert len("  privacy: " + line) <= 120
  detail = report.privacy_detail(PRIVATE)
  assert detail == ("RDP 3.115, PLD 3.010, noise multiplier 1.1, clip norm 0.5, sampling "
                    "rate 0.3")


def test_truncation_delta_is_split_on_the_second_line():
  s = dict(PRIVATE, delta_total=1.2e-3, relation="replace_one", sampler="fixed_size",
           privacy_unit="record-level")
  line = report.privacy_line(s)
  assert line.startswith("(epsilon = 3.115, delta = 1.2e-3)-DP, record-level, replace one "
                         "record, fixed-size cohorts")
  assert "truncation" not in line and len(line) <= 110
  assert "delta 1.2e-3 = 1e-3 (accountant) + 2e-4 (cohort truncation)" in \
      report.privacy_detail(s)


def test_monte_carlo_accounting_is_named_not_called_rdp():
  s = dict(PRIVATE, sampler="balls_in_bins", epsilon_pld=3.1154, mc_samples=200000,
           mc_confidence=0.999, accounting_method="monte_carlo: random allocation ...")
  line = report.privacy_line(s)
  assert "balls-in-bins participation" in line and "RDP" not in line
  assert line.endswith("accountant: Monte Carlo (holds with probability >= 0.999)")
  detail = report.privacy_detail(s)
  assert detail.startswith("Monte Carlo 3.115 (an upper confidence bound from 200000 draws")
  assert "PLD 3" not in detail
  assert "accountant: RDP" in report.privacy_line(dict(PRIVATE, sampler="cyclic_poisson"))


def test_print_privacy_lines_fit(capsys):
  report.print_privacy(dict(PRIVATE, algorithm="dp_fedavg"))
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("  privacy: (epsilon = 3.115")
  assert lines[1].startswith("    accounting: RDP 3.115")
  assert all(len(line) <= 120 for line in lines[:2])


def test_outputs_lists_only_what_was_written(tmp_path):
  out = str(tmp_path)
  for f in ("metrics.jsonl", "summary.json", "curves.png"):
    open(os.path.join(out, f), "w").close()
  assert report.output_files(out) == f"{out}/metrics.jsonl, summary.json, curves.png"
  os.mkdir(os.path.join(out, "tensorboard"))
  os.mkdir(os.path.join(out, "checkpoints"))
  assert report.output_files(out) == (
      f"{out}/metrics.jsonl, summary.json, curves.png, tensorboard/, checkpoints/ (resume "
      f"a killed run with --resume {out})")


def test_a_small_epsilon_is_not_printed_as_zero():
  assert report.eps_text(0.00087) == "0.00087"
  assert report.eps_text(0.0) == "0.000" and report.eps_text(3.1154) == "3.115"
  assert report.eps_text(2.5e5) == "2.5e+05"
