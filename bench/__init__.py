"""ecron's benchmarks: ``python -m bench.<name>``; see docs/performance.md."""
