"""A ``gankit``-like click group holding the commands the plugin registers through its
``register_commands`` hook, as ``gankit`` itself does at start-up."""

from __future__ import annotations

import click

import gankit_sweep

cli = click.Group("gankit")
gankit_sweep.register_commands(cli)
