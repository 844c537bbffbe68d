"""One run's life: ``launch`` (what ``gankit run`` resolves before it trains), the training loop
(``engine``), the ``Run`` it trains (``run``), continuing a run (``resume``), the checkpoint files
(``checkpoint``), the run directory (``rundir``) and its lock (``lock``)."""
