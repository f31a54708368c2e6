"""Cohort chunking: how many clients are trained at once.

A round processes its (padded) cohort of ``K`` clients in chunks of ``c`` clients,
``lax.scan``-ning over the chunks with a running sum of the clipped, weighted updates,
so that the round's working memory is O(c x P) for P parameters, not O(K x P).
With several devices the cohort is first split evenly across them and each device
scans over its own chunks.

`auto_chunk_size` picks ``c`` from the parameter count, the size of a client's data
and the memory available on the device; any explicit ``chunk_size`` overrides it.
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple, Optional

import jax

from fedjax_dp.validation import FedJaxDpError, check_int

# Per-client working set in units of the parameter vector: the client's parameters,
# gradient, optimiser state (up to two moments), delta and clipped delta.
PARAM_COPIES_PER_CLIENT = 6
# Per-client data copies: the gathered padded data plus one minibatch view.
DATA_COPIES_PER_CLIENT = 2
# On CPUs, large chunks do not pay: XLA:CPU already splits each op over the cores, a
# batched matmul over many clients runs slower than a few small ones, and large chunks
# evict the clients' parameters from cache between local steps; very small chunks pay a
# loop iteration (gather, clip, accumulate) per client. Measured on the 2-core
# benchmark machine with one JAX device per core, local training of the 199k-parameter
# MLP: 1 client per chunk 99 GFLOP/s, 2: 125, 5: 122, 10: 80, 25: 51 (one device:
# 1: 64, 5: 85, 100: 42). Hence chunks of about CPU_PARAMS_PER_CHUNK parameters.
CPU_MAX_CHUNK = 64
CPU_PARAMS_PER_CHUNK = 1 << 19
# A chunk only has to amortise the chunk loop's per-iteration work; once one client's
# update is large, more clients per chunk cost time on a CPU (a vmapped chunk runs its
# micro-batch loops as long as its slowest client, and XLA:CPU runs the vmapped small
# matmuls of convolutions worse than one client's). Measured on a 2-core machine, the
# 25.6k-parameter CIFAR-shaped CNN of `benchmarks.workloads`
# DPSGD_USER_CNN, whose parameter count alone allows 20 clients per chunk: 1 client per
# chunk takes 0.46x the round time of 10 (record-level DP-SGD; 2: 0.58x, 5: 0.79x) and
# 0.53x (user-level training; 2: 0.76x). Hence at most CPU_FLOPS_PER_CHUNK of one
# client's update per chunk, from its lowered program's XLA cost analysis (a loop body
# counts once: about one local step). The CNN's DP-SGD update (77 MFLOP) gets 1; the MLP's
# (32 MFLOP) keeps the parameter rule's 2; the default HAR job's 1-D CNN (21 MFLOP) gets 4
# instead of 16 (steady 0.44-0.50 vs 0.52-0.54 s/round, two paired runs).
CPU_FLOPS_PER_CHUNK = 1e8
# XLA's runtime keeps a little host memory per executed iteration of the chunk loop
# until the loop ends (measured on XLA:CPU, jax 0.10: about 40 KB per iteration; peak
# RSS +175 MB for 5,000 vs 625 iterations, while XLA's own buffer assignment stayed at
# 20.6 MiB). The automatic size therefore also caps the chunks per device, so that
# host memory stays flat in the cohort size.
MAX_CHUNKS_PER_DEVICE = 1024


class ChunkLayout(NamedTuple):
  """How a padded cohort of ``k`` slots is laid out.

  Attributes:
    chunk_size: clients per chunk on one device.
    chunks_per_shard: chunks scanned on each device.
    num_shards: devices the cohort axis is split over.
    padded_size: ``chunk_size * chunks_per_shard * num_shards >= k`` (the extra slots
      are masked padding: they contribute exactly zero).
  """
  chunk_size: int
  chunks_per_shard: int
  num_shards: int
  padded_size: int


def available_memory_bytes(device: Optional[Any] = None) -> int:
  """Bytes free on ``device`` (default: the first local device).

  Accelerators report ``bytes_limit - bytes_in_use`` from ``device.memory_stats()``;
  CPUs report the host's available physical memory (``/proc/meminfo`` MemAvailable,
  else ``sysconf``).
  """
  dev: Any = device if device is not None else jax.local_devices()[0]
  if dev.platform != "cpu":
    stats = dev.memory_stats() or {}
    if "bytes_limit" in stats:
      return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def per_client_bytes(num_params: int, client_data_bytes: int) -> int:
  """Estimated working memory of one client in a chunk, bytes:
  ``PARAM_COPIES_PER_CLIENT * 4 * P + DATA_COPIES_PER_CLIENT * client_data_bytes``
  (activations of one minibatch are not counted: they are small next to these for the
  models and batch sizes used in FL simulation)."""
  return PARAM_COPIES_PER_CLIENT * 4 * int(num_params) + DATA_COPIES_PER_CLIENT * int(
      client_data_bytes)


def auto_chunk_size(num_clients: int, num_params: int, client_data_bytes: int, *,
                    memory_fraction: float = 0.25,
                    device: Optional[Any] = None, client_flops: float = 0.0) -> int:
  """Clients per chunk so that a chunk uses at most ``memory_fraction`` of free memory.

  Args:
    num_clients: clients to process on this device (>= 1).
    num_params: model parameters P.
    client_data_bytes: bytes of one client's padded data (features + labels).
    memory_fraction: share of `available_memory_bytes` a chunk may use, in (0, 1].
    device: the device (default: the first local device).
    client_flops: XLA's FLOP estimate of one client's update (0: unknown).

  Returns:
    ``c`` in ``[1, num_clients]``; on CPUs also at most `CPU_MAX_CHUNK`,
    ``CPU_PARAMS_PER_CHUNK // num_params`` and ``CPU_FLOPS_PER_CHUNK // client_flops``
    (at least 1; see the comments there), but at least
    ``ceil(num_clients / MAX_CHUNKS_PER_DEVICE)`` when memory allows.

  Raises:
    FedJaxDpError: invalid arguments.
  """
  num_clients = check_int("num_clients", num_clients, minimum=1)
  if not 0.0 < memory_fraction <= 1.0:
    raise FedJaxDpError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}.")
  dev: Any = device if device is not None else jax.local_devices()[0]
  budget = memory_fraction * available_memory_bytes(dev)
  by_memory = int(budget // max(per_client_bytes(num_params, client_data_bytes), 1))
  c = by_memory
  if dev.platform == "cpu":
    c = min(c, CPU_MAX_CHUNK, CPU_PARAMS_PER_CHUNK // max(int(num_params), 1))
    if client_flops > 0:
      c = min(c, max(1, int(CPU_FLOPS_PER_CHUNK // client_flops)))
  c = max(c, min(by_memory, math.ceil(num_clients / MAX_CHUNKS_PER_DEVICE)))
  return max(1, min(num_clients, c))


def chunk_layout(k: int, chunk_size: int, num_shards: int = 1) -> ChunkLayout:
  """Splits ``k`` cohort slots over ``num_shards`` devices in chunks of at most
  ``chunk_size``, choosing the chunk count first and then the smallest equal chunk,
  so that padding is below one client per chunk.

  Raises:
    FedJaxDpError: non-positive sizes.
  """
  k = check_int("k", k, minimum=1)
  chunk_size = check_int("chunk_size", chunk_size, minimum=1)
  num_shards = check_int("num_shards", num_shards, minimum=1)
  per_shard = math.ceil(k / num_shards)
  n = math.ceil(per_shard / chunk_size)
  c = math.ceil(per_shard / n)
  return ChunkLayout(c, n, num_shards, c * n * num_shards)
