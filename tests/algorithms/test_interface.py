"""An algorithm plugs into `fedjax-dp run` through the interface alone: a toy algorithm
defined here (DP-FedAvg whose client learning rate decays every block, a host-side
controller, an extra metrics field and a summary field) is registered and run through
the command line, the run loop and the ledger without any of them knowing it."""

import dataclasses
import json
from typing import Any, Dict, Literal, Union

import numpy as np
import pytest

from fedjax_dp import cli
from fedjax_dp.algorithms import registry
from fedjax_dp.algorithms.dp_fedavg import dp_fedavg
from fedjax_dp.algorithms.interface import (Controller, FederatedAlgorithm, check_choices,
                                            choices)
from fedjax_dp.algorithms.options import FederatedOptions
from fedjax_dp.privacy import disclosure
from fedjax_dp.runs import RunConfig, run
from fedjax_dp.validation import FedJaxDpError, check_positive


@dataclasses.dataclass
class DecayOptions(FederatedOptions):
  """DP-FedAvg with a decaying client learning rate."""
  clip_norm: float = 0.5
  """S"""
  noise_multiplier: float = 1.0
  """z"""
  lr_decay: float = 0.5
  """factor on the client learning rate after every block"""


class DecayController(Controller):
  def schedule(self, start, stop):
    hp = super().schedule(start, stop)
    lr = self.alg.config["client_learning_rate"] * self.decay ** (start // self.eval_every)
    return hp._replace(client=hp.client._replace(
        learning_rate=np.full(stop - start, lr, np.float32)))

  def next_block(self, done, planned):  # one block per evaluation period
    blk = super().next_block(done, min(planned, done + self.eval_every))
    return blk

  def round_fields(self, record: Dict[str, Any]) -> Dict[str, Any]:
    self.seen += 1
    return {"client_lr": self.alg.config["client_learning_rate"]
            * self.decay ** ((record["round"] - 1) // self.eval_every)}


class Decay(FederatedAlgorithm):
  name = "toy_decay"
  description = "test: DP-FedAvg with a decaying client learning rate"
  Options = DecayOptions
  noise_multiplier_option = "noise_multiplier"
  default_noise_multiplier = 1.0
  function = staticmethod(dp_fedavg)
  metric_labels = {"client_lr": (disclosure.PUBLIC, "hyper-parameter")}

  def validate(self, options, run):
    options.validate_federated()
    check_positive("lr_decay", options.lr_decay)

  def build(self, setup):
    o = setup.options
    return dp_fedavg(setup.model, setup.data, clip_norm=o.clip_norm,
                     noise_multiplier=o.noise_multiplier, **o.federated_kwargs(setup))

  def controller(self, alg, setup, eval_every):
    c = DecayController(alg, eval_every)
    c.decay, c.seen = setup.options.lr_decay, 0
    return c

  def summary_fields(self, alg, setup, controller, records):
    return {"final_client_lr": records[-1]["client_lr"], "rounds_seen": controller.seen}

  def describe(self, summary):
    return [f"toy: final client learning rate {summary['final_client_lr']:g}"]


@pytest.fixture
def toy():
  plugin = registry.register(Decay())
  yield plugin
  del registry.REGISTRY[plugin.name]


ARGS = ["--dataset", "synthetic", "--num-clients", "12", "--model", "linear", "--rounds",
        "4", "--eval-every", "2", "--no-progress"]


def test_a_registered_algorithm_runs_through_the_cli(toy, tmp_path, capsys):
  out = tmp_path / "toy"
  assert cli.main(["run", "--algorithm", "toy_decay", *ARGS, "--lr-decay", "0.25",
                   "--out", str(out)]) == 0
  printed = capsys.readouterr().out
  assert "toy: final client learning rate 0.025" in printed
  rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
  assert [r["client_lr"] for r in rows] == pytest.approx([0.1, 0.1, 0.025, 0.025])
  s = json.loads((out / "summary.json").read_text())
  assert s["algorithm"] == "toy_decay" and s["final_client_lr"] == pytest.approx(0.025)
  assert s["rounds_seen"] == 4 and s["config"]["lr_decay"] == 0.25
  assert s["metrics_disclosure"]["client_lr"]["kind"] == "public"
  assert s["noise_multiplier"] == 1.0 and s["epsilon"] > 0  # accounted like any other


def test_the_decay_changes_training(toy):
  """The controller's schedule reaches the compiled round (not only the records)."""
  base = dict(algorithm="toy_decay", dataset="synthetic", num_clients=12, model="linear",
              rounds=4, eval_every=2, out=None)
  a = run(RunConfig.from_dict({**base, "lr_decay": 1.0}), progress=False)
  b = run(RunConfig.from_dict({**base, "lr_decay": 0.01}), progress=False)
  assert a.records[1]["train_loss"] == b.records[1]["train_loss"]  # first block: same lr
  assert a.records[3]["aggregate_norm"] != pytest.approx(b.records[3]["aggregate_norm"])


def test_its_options_are_flags_config_keys_and_checked(toy, tmp_path, capsys):
  assert "lr_decay" in RunConfig.option_names("toy_decay")
  assert choices(DecayOptions, "sampler") == ("poisson", "fixed_size", "balls_in_bins",
                                              "random_allocation", "cyclic_poisson")
  rc = cli.main(["run", "--algorithm", "toy_decay", *ARGS, "--lr-decay", "-1",
                 "--out", str(tmp_path / "bad")])
  err = capsys.readouterr().err
  assert rc == 2 and "lr_decay must be > 0" in err and "(option --lr-decay)" in err
  with pytest.raises(SystemExit):
    cli.main(["run", "--algorithm", "toy_decay", "--help"])
  assert "--lr-decay" in capsys.readouterr().out
  # A flag of another algorithm is refused, naming whose it is (the first registered
  # algorithm with an option the toy lacks):
  own = {f.name for f in dataclasses.fields(DecayOptions)}
  owner, option = next((n, f.name) for n in registry.names()
                       for f in dataclasses.fields(registry.get(n).Options)
                       if f.name not in own)
  flag = "--" + option.replace("_", "-")
  rc = cli.main(["run", "--algorithm", "toy_decay", *ARGS, flag, "2"])
  assert rc == 2 and f"{flag} is an option of {owner}" in capsys.readouterr().err


def test_the_hooks_outside_runs_have_defaults(toy):
  """A plug-in that sets none of them: no audit targets (non-private as far as
  ``fedjax-dp audit`` knows), no bounds of its own fields, no shared-test configuration
  (which the shared algorithm tests report as missing)."""
  plugin = registry.get("toy_decay")
  assert tuple(plugin.audit_targets()) == ()
  assert dict(plugin.schedule_bounds()) == {}
  assert plugin.test_config(None, None) is None


def test_an_unlabelled_metric_is_refused(toy, monkeypatch):
  monkeypatch.setattr(Decay, "metric_labels", {})
  with pytest.raises(FedJaxDpError, match="'client_lr' has no disclosure label"):
    run(RunConfig.from_dict(dict(algorithm="toy_decay", dataset="synthetic",
                                 num_clients=12, model="linear", rounds=2, eval_every=2,
                                 out=None)), progress=False)


def test_register_refuses_duplicates_and_non_algorithms(toy):
  with pytest.raises(FedJaxDpError, match="already registered"):
    registry.register(Decay())
  with pytest.raises(FedJaxDpError, match="FederatedAlgorithm instance"):
    registry.register(object())


def test_check_choices_of_a_number_or_a_word():
  """``Union[float, Literal["adaptive"]]``: a number passes (the other member), a word
  must be one of the Literal's, and a plain Literal still refuses anything else."""
  @dataclasses.dataclass
  class Opts:
    clip_norm: Union[float, Literal["adaptive"]] = 0.5
    rule: Literal["geometric", "linear"] = "geometric"

  check_choices(Opts(clip_norm=0.5))
  check_choices(Opts(clip_norm="adaptive"))
  with pytest.raises(FedJaxDpError, match="clip_norm"):
    check_choices(Opts(clip_norm="adaptiv"))
  with pytest.raises(FedJaxDpError, match="rule"):
    check_choices(Opts(rule=0.5))
