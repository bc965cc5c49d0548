"""The command line (click only, thin): it parses, calls the analysis and specs layers, and
prints. ``inference-factory`` is :func:`main`; :data:`cli` is the click group."""

from .main import cli, main

__all__ = ["cli", "main"]
