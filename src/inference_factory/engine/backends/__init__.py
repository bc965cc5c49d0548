"""Execution backends of the engine: the tracer (:mod:`.tape`) records the block's array code
once as a program; the interpreter (:mod:`.interp`) replays it over point lists, compiled by
numba. The physics never imports this package; the engine's entry point does."""
