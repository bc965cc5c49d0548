"""Pure, vectorized formulas. Kernels import numpy only: no specs, no xarray, no I/O.

Every function takes keyword-only numbers (floats, ndarrays or DataArrays, broadcast by numpy
rules), returns one array, and carries its equation, assumptions and source in its docstring.
``docs/MODEL.md`` collects them.
"""
