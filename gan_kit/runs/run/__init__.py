"""A training run: ``build_run(recipe, plugins)`` builds a ``Run`` - its data, networks,
objectives, optimizers, schedules and precision, each part whole in a module of its own - and
the training loop (``gan_kit.runs.engine``) drives it; lifecycle hooks receive it.

=================  ==================================================================
``build``          ``build_run``: the parts in order, every component from the registry
``core``           ``Run``: the parts, the progress, what the engine calls per step
``data``           ``RunData``: the data sets, channels, classes, real images by seed
``optimizers``     ``Optimizers``: G's and D's, their lr / betas per phase and lazy ratio
``schedules``      ``Schedules``: scheduled options set before every iteration
``images``         ``generate``: G's images for latents, never moving the training RNG
``state``          a run's checkpoint state: save, restore, frozen files
=================  ==================================================================
"""

from gan_kit.runs.run.build import build_run, resolve_device, seed_everything
from gan_kit.runs.run.core import Run

Run.builder = staticmethod(build_run)

__all__ = ["Run", "build_run", "resolve_device", "seed_everything"]
