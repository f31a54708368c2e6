"""Fig. 5 of RDP-PFL: accuracy against the round for the number of samples per client
(epsilon 2; the paper gives no counts: 3 classes x {50, 100, 200, 300} images).

Usage: python experiments/rdp_pfl/fig5_samples.py [--quick] [--rounds T] [--seeds S]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rdp_pfl_sweep import run_sweep  # noqa: E402


def main(argv=None) -> int:
  return run_sweep(argv, __doc__, "fig5", "Fig. 5: accuracy for samples per client",
                   "samples_per_class", [50, 100, 200, 300],
                   lambda v: f"{3 * v} samples/client", "increasing",
                   "Paper: more samples per client give a higher accuracy.",
                   quick_values=[10, 30])


if __name__ == "__main__":
  sys.exit(main())
