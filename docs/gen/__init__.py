"""Writes the generated parts of the documentation site: `python -m docs.gen` (see __main__.py)."""
