"""Benchmarks: each prints ratios against a baseline measured in the same run, and writes its latest
results next to itself."""
