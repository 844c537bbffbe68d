"""The bottom layer: errors, options, phases, the stash, random draws, threads, CPU features, the
allocator, layer helpers and the version. Nothing here imports anything from gan_kit above it."""
