"""Benchmarks behind `telesum bench ...`, and the reference implementations they compare against."""
