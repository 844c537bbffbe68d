"""Built-in architectures (PGGAN, DCGAN, StyleGAN2), class conditioning, initializers and growth
schedulers."""
