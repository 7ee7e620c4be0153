"""Data: the ``Example`` shape, the synthetic multi-hop world, and loaders for real benchmarks."""

from workbench.data.example import Example, load_examples, save_examples

__all__ = ["Example", "load_examples", "save_examples"]
