"""What plugins are made of: the component kinds and their contracts (``components``), the hook
specifications (``hookspecs``), the registry of components (``registry``) and the plugin manager
that loads built-ins, entry points and recipe plugins (``manager``)."""
