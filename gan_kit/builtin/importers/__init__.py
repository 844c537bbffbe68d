"""Built-in importers of other codebases' trained models (kind ``importer``)."""
