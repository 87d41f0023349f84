"""kllint: static analysis for KL-divergence gradient pitfalls in RL code for language models."""

__version__ = "0.1.0"
