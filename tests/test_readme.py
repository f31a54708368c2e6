"""The README's commands and API example are what they claim to be."""

import os
import re

import numpy as np
import pytest

from fedjax_dp.data.sources import har

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(ROOT, "README.md")) as f:
    return f.read()


def test_ci_runs_exactly_the_readme_test_command():
  bash_blocks = re.findall(r"```bash\n(.*?)```", _readme(), re.S)
  test_cmds = [b.strip() for b in bash_blocks if "pytest" in b]
  assert len(test_cmds) == 1
  with open(os.path.join(ROOT, ".ci", "run")) as f:
    ci_lines = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
  # The README's test command, then the type check (whose baseline only shrinks).
  assert ci_lines[-2:] == [test_cmds[0], "python .ci/pyright_check.py"]
  assert any("fedjax-dp run" in b for b in bash_blocks)


@pytest.mark.slow
@pytest.mark.skipif(not har.is_available(), reason="HAR package not installed")
def test_readme_api_example_runs():
  code = re.findall(r"```python\n(.*?)```", _readme(), re.S)[0]
  namespace = {}
  exec(compile(code, "README.md", "exec"), namespace)  # pylint: disable=exec-used
  records, ledger = namespace["records"], namespace["ledger"]
  assert len(records) == 20 and ledger.num_rounds == 20
  assert records[-1]["epsilon"] == pytest.approx(ledger.epsilon())
  assert 0 < ledger.epsilon(accountant="pld") < ledger.epsilon()
  assert np.isfinite(records[-1]["train_loss"])
