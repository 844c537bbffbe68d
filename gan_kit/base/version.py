"""gankit's version, in a module of its own: core modules that record it (checkpoints, the
resolved recipe.toml, ``gankit --version``) import it from here, not from the ``gan_kit``
facade, which would pull in every layer of the public API."""

__version__ = "0.2.0"
