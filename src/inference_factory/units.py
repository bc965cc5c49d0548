"""Unit constants. SI inside the package; vendor units are converted here and only here.

Vendor capacities and bandwidths are decimal (1 GB = 1e9 bytes, 1 TB/s = 1e12 bytes/s);
binary units exist only for sources that state GiB.
"""

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB, TiB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
TFLOP = 1e12
GBIT = 1e9 / 8.0  # bytes in one gigabit
US = 1e-6  # one microsecond in seconds
MS = 1e-3
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0

#: Bytes per element of each numeric format. FP4 is stored as MXFP4 (OCP Microscaling
#: format): 4-bit elements plus one 8-bit shared scale per 32-element block = 4.25 bits.
#: FP8 block scales (one FP32 scale per 128x128 weight block) add 0.024% and are ignored.
BYTES_PER_ELEMENT = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp4": 4.25 / 8.0,
    # INT4 weight-only (W4A16): 4-bit integers plus one BF16 scale per group of 32, as
    # Kimi-K2-Thinking/K2.5 ship them (quantization_config: compressed-tensors, int,
    # num_bits 4, strategy group, group_size 32, symmetric: no zero point); ASSUMPTION:
    # scales at the checkpoint dtype (bfloat16). 4 + 16/32 = 4.5 bits.
    "int4": 4.5 / 8.0,
}
PRECISIONS = tuple(BYTES_PER_ELEMENT)


# ---- pint: the units of the outputs ---------------------------------------------------------

#: pint definitions of the output units (tokens, sequences, GPUs, USD, ...), loaded on top of
#: pint's default registry; shipped beside this module.
REGISTRY_FILE = "units_registry.txt"
_REGISTRY: list = []


def unit_registry():
    """The package's ``pint.UnitRegistry``: pint's defaults plus :data:`REGISTRY_FILE`
    (``token``, ``sequence``, ``request``, ``GPU``, ``expert``, ``step``, ``FLOP``, ``USD``;
    prefixes and plurals as pint gives them: ``Mtoken``, ``tokens``). Made once per process.
    Needs the ``units`` extra (``pip install inference-factory[units]``)."""
    if not _REGISTRY:
        from importlib.resources import files

        from .errors import require

        require("pint", "the units registry", extra="units")
        import pint

        reg = pint.UnitRegistry(force_ndarray_like=True)   # as pint-xarray needs
        with (files(__package__) / REGISTRY_FILE).open() as fh:
            reg.load_definitions(fh.read().splitlines())
        _REGISTRY.append(reg)
    return _REGISTRY[0]


def parse_units(text: str):
    """``text`` (a variable's ``units`` attribute) as a pint unit of :func:`unit_registry`."""
    return unit_registry().parse_units(text)


def quantify(ds):
    """``ds.pint.quantify(unit_registry=unit_registry())``: every variable and coordinate
    with a ``units`` attribute as a pint quantity (labels and flags, which have none, stay as
    they are). Needs the ``units`` extra (pint, pint-xarray)."""
    from .errors import require

    require("pint_xarray", "quantify", extra="units")
    import pint_xarray  # noqa: F401  (registers the .pint accessor)

    return ds.pint.quantify(unit_registry=unit_registry())
