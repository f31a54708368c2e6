"""Table II and Fig. 7 of RDP-PFL: training loss, test loss and accuracy against the
clip norm C in {0.8, 1.6, 2.4, 3.2, 4.0, 4.8} at epsilon 2. "Training loss" is our
reading of the paper's undefined term: the loss of the noisy adapted model theta~ on the
support draws (mean of the last 10 rounds); test loss: target clients after adaptation.

Usage: python experiments/rdp_pfl/table2_fig7_clip.py [--quick] [--rounds T] [--seeds S]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rdp_pfl_sweep import run_sweep  # noqa: E402

PAPER_TABLE = {0.8: (0.861, 0.219), 1.6: (0.709, 0.169), 2.4: (0.649, 0.156),
               3.2: (0.657, 0.153), 4.0: (0.712, 0.161), 4.8: (1.012, 0.211)}


def main(argv=None) -> int:
  extra = [("paper MNIST train / test loss", lambda rs: "{:.3f} / {:.3f}".format(
      *PAPER_TABLE.get(rs[0]["config"]["clip_norm"], (float("nan"),) * 2)))]
  return run_sweep(argv, __doc__, "table2", "Table II / Fig. 7: losses and accuracy for C",
                   "clip_norm", [0.8, 1.6, 2.4, 3.2, 4.0, 4.8], lambda v: f"C={v:g}",
                   "inverted_u", "Paper (Table II, MNIST): train loss lowest at C = 2.4, "
                   "test loss lowest at C = 3.2; accuracy rises then falls (Fig. 7).",
                   quick_values=[0.8, 2.4, 4.8], extra=extra)


if __name__ == "__main__":
  sys.exit(main())
