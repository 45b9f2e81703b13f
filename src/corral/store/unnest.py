"""Moved to corral.store.dialect.unnest (PostgreSQL's own); this name stays for the modules that
still import it from here."""

from corral.store.dialect.unnest import arrays, picked, rows

__all__ = ["arrays", "picked", "rows"]
