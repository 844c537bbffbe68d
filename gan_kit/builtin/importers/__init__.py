"""Readers of other projects' trained networks into gankit's built-in architectures."""
