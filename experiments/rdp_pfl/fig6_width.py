"""Fig. 6 of RDP-PFL: accuracy against the round for the width of the last hidden
layer (epsilon 2; the paper gives no widths: 784-200-W-10 with W in 16 .. 1024).

Usage: python experiments/rdp_pfl/fig6_width.py [--quick] [--rounds T] [--seeds S]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rdp_pfl_sweep import run_sweep  # noqa: E402


def main(argv=None) -> int:
  return run_sweep(argv, __doc__, "fig6", "Fig. 6: accuracy for the last layer's width",
                   "hidden", ["200,16", "200,64", "200,256", "200,1024"],
                   lambda v: f"784-{v.replace(',', '-')}-10", "inverted_u",
                   "Paper: accuracy rises then falls with the width (an 'optimal model "
                   "size'; the bound itself is monotone in S).",
                   quick_values=["8", "32"])


if __name__ == "__main__":
  sys.exit(main())
