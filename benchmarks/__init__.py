"""Throughput, roofline and scale benchmarks (run: ``python -m benchmarks.run``).

Nothing here is imported by the library. Peer-framework scripts (``peer_*.py``) run in
their own virtual environments and import only the standard library and this
package's dependency-free modules (`benchmarks.workloads`, `benchmarks.common`).
"""
