"""Fig. 3 of RDP-PFL: accuracy against the round for several delta at epsilon 2 (the
paper gives no delta values; ours: 1e-5, 1e-4, 1e-3, 1e-2).

Usage: python experiments/rdp_pfl/fig3_delta.py [--quick] [--rounds T] [--seeds S]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rdp_pfl_sweep import run_sweep  # noqa: E402


def main(argv=None) -> int:
  return run_sweep(argv, __doc__, "fig3", "Fig. 3: accuracy for delta (epsilon 2)", "delta",
                   [1e-5, 1e-4, 1e-3, 1e-2], lambda v: f"delta={v:g}", "increasing",
                   "Paper: a larger delta gives a higher accuracy.",
                   extra=None)


if __name__ == "__main__":
  sys.exit(main())
