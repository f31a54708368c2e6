"""Options a dataset brings to ``fedjax-dp run`` and ``sweep`` when it is chosen.

Most options have one default for every dataset. A few datasets need others to train in
reasonable time on a laptop-class CPU: Shakespeare has about a thousand clients, so the
global default sampling rate (0.5) would put 500 character LSTMs in each round. Their
values sit between the options' own defaults and a config file:

    option defaults < the dataset's defaults (this table) < --config FILE < flags typed

A dataset default is dropped when its option, or the other option of an exclusive
pair (``clients_per_round`` / ``sampling_rate``, ``local_epochs`` / ``local_steps``, an
algorithm's own pairs), is given in the config file or typed, and it applies only to
options the chosen algorithm has. summary.json's ``config`` records the values used,
so a run's configuration is complete whatever their source.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Tuple

__all__ = ["DATASET_RUN_DEFAULTS", "dataset_defaults"]

#: ``{dataset: {option: value}}``.
#:
#: shakespeare: LEAF's character LSTM cut to one layer of 64 units (``hidden``; LEAF's
#: own 2 x 256 is ``--hidden 256,256``, about 46 s a round of 20 clients x 10 steps on 2
#: cores), 100 clients a round (about a tenth of the 987: user-level DP needs large
#: cohorts, the noise on the average shrinks as 1 / cohort), 2 local steps of 16 windows
#: with client SGD at lr 1.0, server SGD with momentum 0.9 at lr 0.5 (DP-FTRLM's server
#: optimiser), 100 rounds, evaluation every 10.
DATASET_RUN_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "shakespeare": {"hidden": "64", "clients_per_round": 100, "local_steps": 2,
                    "batch_size": 16, "client_learning_rate": 1.0,
                    "server_optimizer": "fedavgm", "server_learning_rate": 0.5,
                    "rounds": 100, "eval_every": 10},
}


def dataset_defaults(dataset: Any, table: Mapping[str, Any], typed: Iterable[str],
                     option_names: Iterable[str],
                     exclusive: Iterable[Tuple[str, str]]) -> Dict[str, Any]:
  """The dataset's defaults that apply, to be put under the config file's ``table``.

  Args:
    dataset: the run's dataset name (typed, else the config file's), or None.
    table: the config file's options (keys with dashes or underscores).
    typed: the option names typed on the command line.
    option_names: every option the chosen algorithm's run has.
    exclusive: the algorithm's pairs of options that exclude each other.

  Returns:
    ``{option: value}``, possibly empty.
  """
  defaults = DATASET_RUN_DEFAULTS.get(dataset if isinstance(dataset, str) else "", {})
  given = {str(k).replace("-", "_") for k in table} | set(typed)
  names = set(option_names)
  partner = {a: b for a, b in exclusive} | {b: a for a, b in exclusive}
  return {k: v for k, v in defaults.items()
          if k in names and k not in given and partner.get(k) not in given}
