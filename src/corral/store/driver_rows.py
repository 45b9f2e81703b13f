"""Moved to corral.store.dialect.sqlite_rows (SQLite's own); this name stays for the modules that
still import it from here."""

from corral.store.dialect.sqlite_rows import _statement, insert_rows

__all__ = ["_statement", "insert_rows"]
