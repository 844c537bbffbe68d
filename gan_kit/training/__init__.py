"""What one training step is made of: the step context and its verbs (``step``), the views
strategies run through (``networks``: DDP, compile, precision), the process group
(``distributed``), G_ema (``ema``), the data sets and the training loader (``data``) and image
decoding (``imageio``). Nothing here knows a specific component."""
