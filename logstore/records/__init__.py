"""(package docstring: see docs/internals.md)"""
