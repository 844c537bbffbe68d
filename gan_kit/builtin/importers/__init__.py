"""Readers of the official reference implementations' files: what gankit's components take from them."""
