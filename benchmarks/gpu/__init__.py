"""The GPU kit (`benchmarks.gpu.run_kit`, prepared by `benchmarks.gpu.prepare`).

Standard library only at import time: the torch peers import `benchmarks.gpu.cifar10`.
"""
