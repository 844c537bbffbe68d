"""What reads or drives runs from outside the loop: ``evaluate`` (metrics of a run or a
checkpoint), ``report`` (a run as pictures), ``bench`` (timing the update strategies),
``sampling`` and ``grids`` (images from a generator), ``docgen`` (docs/recipes.md)."""
