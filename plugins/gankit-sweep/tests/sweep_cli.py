"""What the sweep tests share: a ``gankit``-like click group holding the commands the plugin
registers through its ``register_commands`` hook, as ``gankit`` itself does at start-up, and a
metric plugin whose value a test sets."""

from __future__ import annotations

import click

import gankit_sweep

cli = click.Group("gankit")
gankit_sweep.register_commands(cli)

#: A recipe plugin (written to a file by a test): metric ``const`` reports its option ``value``
#: at every evaluation - a metric a test can make worse.
CONST_METRIC = '''
import attrs
from gan_kit import Metric, hookimpl, option


class Const(Metric):
    """Reports its option ``value`` at every evaluation: a metric a test can make worse."""

    num_images = 8

    @attrs.frozen
    class Options:
        value: float = option(1.0, help="The value reported.")

    def compute(self, generate, reals, device):
        return {"Metrics/const": float(self.options.value)}


@hookimpl
def register_metrics(register):
    register("const", Const)
'''
