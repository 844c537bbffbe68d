"""Importers of networks trained by other code bases into gankit's architectures: plain conversion
functions (options and state dicts), which the importer components call."""
