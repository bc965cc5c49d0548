"""Measured kernel tables (``hardware/measured/<device>/<family>.csv``) as efficiency curves.

Each table row is one kernel NVIDIA measured on a real GPU (AIConfigurator 0.12.0, extracted
by ``calibration/extract_aiconfigurator.py``). Per row we compute the pure roofline of the
same shape on the table's device with the same work formulas the op graph uses
(:mod:`inference_factory.kernels.ops`), and keep ``ln(t_measured / t_roofline)``. An op is
then costed as its own pure roofline times that ratio, interpolated in log space over the
shape (:mod:`.grid`): exact at a measured shape, the nearest measured shape's efficiency and
floor outside the table, and usable on a sibling device with the same silicon (H800 = H100).

A family groups rows by keys that must match exactly (dtype, op) and keys matched to the
nearest measured value in log space (head counts, expert shapes, EP degree); the remaining
columns are interpolation axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import units
from ..specs import HardwareSpec, data_dirs, load_hardware
from . import grid as G

# families: table_families.py; a kind with its own tables registers them in its
# table_families_<kind>.py, imported on the line below (one name per kind)
from .table_families import DEEPEP_NODE_GPUS, FAMILIES, FILES, Family  # noqa: F401
from . import table_families_linear  # noqa: F401,E402 (registers gdn_*, kda_*)
from . import table_families_dsa  # noqa: F401,E402  (DSA module tables)
from . import table_families_msa  # noqa: F401,E402  (MSA block-sparse module tables)
from . import table_families_v4  # noqa: F401,E402 (registers compressed_module_*, mhc)
from .table_files import Rows, read_table
from .table_rooflines import (  # noqa: F401 (re-exported: ops, cost and tests read them here)
    DTYPES,
    MLA_TABLE_MODEL,
    _gqa_kv_tok,
    _kv_read,
    _peak,
    a2a_kernels,
    a2a_roofline_s,
    allgather_roofline_s,
    allreduce_roofline_s,
    attention_roofline_s,
    bmm_roofline_s,
    gemm_roofline_s,
    gqa_decode_roofline_s,
    gqa_prefill_roofline_s,
    mla_decode_roofline_s,
    mla_dims,
    mla_prefill_roofline_s,
    moe_roofline_s,
    nvlink_a2a_roofline_s,
)

# ---- per-device tables ----------------------------------------------------------------------

@dataclass(frozen=True)
class Curve:
    """One group's efficiency over its interpolation axes, for fixed keys."""

    grid: G.Grid
    group_source: int            # MEASURED, INTERPOLATED or EXTRAPOLATED for the fixed keys
    #: ln latency at the nodes per named roofline (time_s's pure_key): (spec, array)
    _nodes: dict = field(default_factory=dict, compare=False, repr=False)
    #: times already read, per named roofline and coordinates: (spec, (times, source))
    _times: dict = field(default_factory=dict, compare=False, repr=False)

    def time_s(self, roofline, *coords, mode: str = "separable", memo: dict | None = None,
               pure_key=None):
        """The op's time at shape ``coords`` given its pure roofline (a function of the
        coordinates), and a function giving the source code per point
        (:func:`.grid.interpolate_time`). ``pure_key`` (hashable; its first item the hardware
        spec the roofline is of) names the roofline: its latencies at the table's nodes are
        then computed once per curve, not once per call, and the times at coordinates read
        before are the ones read then (a plan's shapes share most GEMM shapes: 6 in 10 reads
        repeat), for grids of at most :data:`TIMES_MEMO_POINTS` points."""
        ckey = _coords_key(coords) if pure_key is not None else None
        if ckey is not None:
            ckey = (id(pure_key[0]),) + tuple(pure_key[1:]) + (mode,) + ckey
            hit = self._times.get(ckey)
            if hit is not None and hit[0] is pure_key[0]:     # the same spec object
                return hit[1]
        out = self._time_s(roofline, coords, mode, memo, pure_key)
        if ckey is not None:
            if len(self._times) >= _TIMES_MEMO_CAP:
                self._times.pop(next(iter(self._times)))      # the oldest
            if isinstance(out[0], np.ndarray):
                out[0].flags.writeable = False                # shared: never written
            self._times[ckey] = (pure_key[0], out)
        return out

    def _time_s(self, roofline, coords, mode, memo, pure_key):
        nodes = None
        if pure_key is not None and mode == "separable" and len(self.grid.axes) == 1:
            key = (id(pure_key[0]),) + tuple(pure_key[1:])
            hit = self._nodes.get(key)
            if hit is not None and hit[0] is pure_key[0]:     # the same spec object
                nodes = hit[1]
            else:
                axis = self.grid.axes[0]
                lat = self.grid.values + np.log(roofline(np.exp(axis)))
                nodes = (lat, np.diff(lat))
                self._nodes[key] = (pure_key[0], nodes)
        t, src = G.interpolate_time(self.grid, list(coords), roofline, mode, memo,
                                    node_latency=nodes)
        return t, lambda: np.minimum(src(), self.group_source).astype(np.int8)

    def log_ratio(self, *coords):
        """ln(measured / roofline) at shape coordinates (not logs) and a source code each."""
        logs = [np.log(np.maximum(np.asarray(c, dtype=float), 1e-30)) for c in coords]
        vals, src = G.interpolate(self.grid, logs)
        return vals, np.minimum(src, self.group_source).astype(np.int8)


#: Largest grid (points of the coordinates) whose times a curve keeps, and the most kept
#: per curve (the oldest dropped beyond).
TIMES_MEMO_POINTS = 1 << 12
_TIMES_MEMO_CAP = 512


def _coords_key(coords) -> tuple | None:
    """The coordinates as a hashable key (shape and bytes of each array), or None where one
    is not a plain number or numpy array (a traced value) or the grid is large."""
    key, points = [], 1
    for c in coords:
        if isinstance(c, np.ndarray):
            if c.dtype != np.float64:
                return None
            points = max(points, c.size)
            key.append((c.shape, c.tobytes()))
        elif isinstance(c, (float, int)) and not isinstance(c, bool):
            key.append(float(c))
        else:
            return None
    return tuple(key) if points <= TIMES_MEMO_POINTS else None


_MISSING = object()


class DeviceTables:
    """The measured tables of one device folder, reduced to efficiency grids on demand."""

    def __init__(self, folder: Path, hw: HardwareSpec):
        self.folder, self.hw = folder, hw
        self._frames: dict[str, Rows] = {}
        self._spans: dict[str, bool] = {}
        self._curves: dict[tuple, Curve | None] = {}
        self._text: dict[tuple, np.ndarray] = {}
        self._has: dict[str, bool] = {}
        self._groups: dict[tuple, tuple] = {}
        self._grids: dict[tuple, G.Grid] = {}
        self._files: dict[str, Rows] = {}

    def kernel_floor_s(self) -> float:
        """Fixed cost of one small kernel on this device: the fastest GEMM measured
        (launch and tail of a kernel that does almost no work, CUDA graphs on)."""
        if not hasattr(self, "_floor"):
            df = self.rows("gemm")
            self._floor = float(df[FAMILIES["gemm"].value].min()) * units.US
        return self._floor

    def provenance(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """Who measured the tables, from their provenance columns: backend -> (versions,
        table files), e.g. ``{"aiter": (("0.1.7.post2.dev18", "e4048607a5"), ("gemm", "moe")),
        "rccl": (("rccl-tests ae3e635",), ("allreduce",))}``."""
        if not hasattr(self, "_provenance"):
            by: dict[str, tuple[set, set]] = {}
            for family, (fname, _) in FILES.items():
                if not self.has(family):
                    continue
                if fname not in self._files:
                    self._files[fname] = Rows(read_table(self.folder / fname))
                df = self._files[fname]
                for b, v in set(zip(df["backend"], df["version"])):
                    versions, files = by.setdefault(str(b), (set(), set()))
                    versions.add(str(v))
                    files.add(fname[:-4])
            self._provenance = {b: (tuple(sorted(v)), tuple(sorted(f)))
                                for b, (v, f) in sorted(by.items())}
        return self._provenance

    def gemm_times_quantization(self, backends) -> bool:
        """Whether every quantised row of the GEMM table comes from a backend in
        ``backends`` (whose collectors time the activation quantisation with the GEMM)."""
        names = self.backends("gemm", quantised=True)
        return bool(names) and names <= set(backends)

    def backends(self, family: str, quantised: bool = False) -> frozenset:
        """The ``backend`` names of a family's rows (only the non-BF16 rows where
        ``quantised``); empty where the device has no such table."""
        key = (family, quantised)
        memo = self.__dict__.setdefault("_backends", {})
        if key not in memo:
            names: frozenset = frozenset()
            if self.has(family):
                df = self.rows(family)
                b = df["backend"].astype(str)
                if quantised:
                    b = b[df["dtype"].astype(str) != "bf16"]
                names = frozenset(np.unique(b).tolist())
            memo[key] = names
        return memo[key]

    def spans_nodes(self, family: str) -> bool:
        """Whether a DeepEP table holds rows measured across more than one node."""
        if family not in self._spans:
            self._spans[family] = (self.has(family)
                                   and float(self.rows(family)["node_num"].max()) > 1)
        return self._spans[family]

    def has(self, family: str) -> bool:
        """Whether the device folder has the family's table (looked up once: a Path and a
        stat per op cost more than the op's arithmetic on a point)."""
        if family not in self._has:
            self._has[family] = (self.folder / FILES[family][0]).is_file()
        return self._has[family]

    def rows(self, family: str) -> Rows:
        """The family's rows with ``log_ratio`` = ln(measured / roofline) added."""
        if family not in self._frames:
            fname, filt = FILES[family]
            if fname not in self._files:     # families sharing a file read it once
                self._files[fname] = Rows(read_table(self.folder / fname))
            df = self._files[fname]
            if filt is not None and filt[0] in df.columns:
                df = df.where(df[filt[0]] == filt[1])
            fam = FAMILIES[family]
            v = df[fam.value].astype(float)
            df = df.where(np.isfinite(v) & (v > 0))
            roof = fam.roofline_rows(self.hw, df)
            df = df.assign(log_ratio=np.log(df[fam.value] * units.US / roof))
            self._frames[family] = df
        return self._frames[family]

    def curve(self, family: str, exact: dict, nearest: dict, fixed_axes: dict | None = None):
        """Efficiency curve of ``family`` for the given keys; ``fixed_axes`` (axis -> value)
        are interpolated out. None where the table lacks the exact keys."""
        fixed_axes = fixed_axes or {}
        # the ops give their keys in one order, so their items in that order name the curve
        # (another order would only be another entry for the same curve)
        key = (family, tuple(exact.items()), tuple(nearest.items()), tuple(fixed_axes.items()))
        curve = self._curves.get(key, _MISSING)
        if curve is not _MISSING:
            return curve
        fam = FAMILIES[family]
        df, cand = self._group(family, key[1], exact)
        curve = None
        if len(df):
            src, best = G.MEASURED, ()
            if fam.nearest:
                want = np.array([float(nearest[k]) for k in fam.nearest])
                dist = np.abs(np.log(cand) - np.log(want)).sum(axis=1)
                best = tuple(cand[int(np.argmin(dist))])
                if dist.min() > 1e-9:
                    src = G.EXTRAPOLATED
            # the grid of the rows at the nearest keys, shared by every curve that fixes
            # other axes of it (the GEMMs of one dtype: one grid, a reduction per (n, k))
            gkey = (family, key[1], best)
            grid = self._grids.get(gkey)
            if grid is None:
                if fam.nearest:
                    mask = np.ones(len(df), dtype=bool)
                    for k, v in zip(fam.nearest, best):
                        mask &= np.isclose(df[k].astype(float), v)
                    df = df.where(mask)
                grid = self._grids[gkey] = self._efficiency_grid(fam, df)
            if fixed_axes:
                idx = {fam.axes.index(a): math.log(v) for a, v in fixed_axes.items()}
                grid, fsrc = G.reduce(grid, idx)
                src = min(src, fsrc)
            curve = Curve(grid, src)
        self._curves[key] = curve
        return curve


    def _group(self, family: str, items: tuple, exact: dict):
        """The family's rows with the ``exact`` keys, and the distinct values of its nearest
        keys among them (rows by row, in the table's order; None without nearest keys),
        once per family and exact keys."""
        hit = self._groups.get((family, items))
        if hit is not None:
            return hit
        fam = FAMILIES[family]
        df = self.rows(family)
        mask = None
        for k, v in exact.items():
            text = self._text.get((family, k))
            if text is None:            # a key's column as text, once per family
                text = self._text[(family, k)] = df[k].astype(str)
            mask = text == str(v) if mask is None else mask & (text == str(v))
        df = df.where(mask) if mask is not None else df
        cand = None
        if fam.nearest and len(df):
            cand = np.stack([df[k].astype(float) for k in fam.nearest], axis=1)
            _, first = np.unique(cand, axis=0, return_index=True)
            cand = cand[np.sort(first)]          # distinct, in the table's order
        self._groups[(family, items)] = (df, cand)
        return df, cand

    def _efficiency_grid(self, fam: Family, df: Rows) -> G.Grid:
        """ln(measured / roofline) on the rectangular grid of the group's shape axes.

        Missing cells and the region beyond the table take the efficiency of their measured
        neighbours (filled in ln(eta)); the roofline is computed exactly at every node; the
        implied latencies are then made non-decreasing along every axis (more work is never
        faster), and the ratio recomputed."""
        coords = [df[a].astype(float) for a in fam.axes]
        eta = G.grid_from_rows(coords, df["log_ratio"])
        mesh = np.meshgrid(*[np.exp(a) for a in eta.axes], indexing="ij")
        frame = {c: np.full(mesh[0].shape, df[c][0], dtype=object) for c in fam.args}
        for a, v in zip(fam.axes, mesh):
            frame[a] = v
        frame = {c: np.asarray(v).ravel() for c, v in frame.items()}
        roof = np.log(fam.roofline_rows(self.hw, frame)).reshape(mesh[0].shape)
        # the envelope is taken over measured cells only: a filled cell (a guess) raises no
        # other, else one far extrapolation in a sparse grid (AITER's per-model shapes)
        # lifts every larger shape of its lines; on a full grid this is G.monotone
        v = eta.values + roof
        measured = np.full(v.shape, -np.inf)
        measured[tuple(np.searchsorted(a, np.log(c)) for a, c in zip(eta.axes, coords))] = \
            v[tuple(np.searchsorted(a, np.log(c)) for a, c in zip(eta.axes, coords))]
        axes = (None if fam.monotone_axes is None
                else [fam.axes.index(a) for a in fam.monotone_axes])
        lat = np.maximum(v, G.monotone(G.Grid(eta.axes, measured), axes).values)
        return G.Grid(eta.axes, lat - roof, eta.node_source)


_DEVICES: dict[str, DeviceTables | None] = {}


def tables_for(hw: HardwareSpec) -> DeviceTables | None:
    """Measured tables for ``hw``: its own folder, or the sibling its spec names
    (``[measured] kernel_tables``); None for a device without any (e.g. the MI series)."""
    name = hw.kernel_tables or hw.name
    if name not in _DEVICES:
        found = [d / "measured" / name for d in data_dirs("hardware")
                 if (d / "measured" / name).is_dir()]
        folder = found[0] if found else None
        if folder is not None:
            table_hw = hw if name == hw.name else load_hardware(name)
            _DEVICES[name] = DeviceTables(folder, table_hw)
        else:
            _DEVICES[name] = None
    return _DEVICES[name]
