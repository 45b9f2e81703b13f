"""The `corral` command: Typer commands over `corral.client`.

Its command modules keep their annotations as objects (no `from __future__ import annotations`):
Typer reads every command's signature at each start, and annotations kept as strings would be
parsed and evaluated again each time. A name imported only for type checking is quoted.
"""
