"""Log-space grids of measured-over-roofline ratios, and their vectorized interpolation.

A measured kernel table becomes, per group of fixed keys (dtype, head counts, EP degree...),
a rectangular grid over its shape axes (m, n, k; batch, KV length; tokens) of
``ln(t_measured / t_roofline)``, with the axes in ``ln`` of the shape. Missing cells are
filled along each axis by the same linear-in-log interpolation used between cells. Outside
the measured range the value is held at the edge (the nearest measured shape) and the point
is flagged as extrapolated. Each node keeps where its value came from (a measured row, a fill
between measured rows, a fill held beyond them): a point is labelled by the worst of the
nodes it reads, so a point on a filled node is not called measured.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from . import xp

#: Where an op's time came from; stored as small integers, labelled in the Dataset.
SOURCES = ("roofline", "extrapolated", "interpolated", "measured")
ROOFLINE, EXTRAPOLATED, INTERPOLATED, MEASURED = range(4)

_ON_NODE = 1e-9


@dataclass(frozen=True)
class Grid:
    """Values on a rectangular grid. ``axes``: ln of each axis' coordinates (ascending);
    ``values``: ln(measured / roofline), shape = the axis lengths, no NaN."""

    axes: tuple[np.ndarray, ...]
    values: np.ndarray
    #: source code of each node's value (MEASURED: a measured row; INTERPOLATED: filled
    #: between measured rows; EXTRAPOLATED: filled beyond them), int8 of the values' shape;
    #: None: every node measured
    node_source: np.ndarray | None = None


def grid_from_rows(coords: list[np.ndarray], values: np.ndarray) -> Grid:
    """Rectangular grid from scattered rows (coordinates > 0, one value per row); duplicate
    cells keep the smallest value; missing cells are filled by :func:`fill_missing`."""
    axes, index = [], []
    for c in coords:
        u, inv = np.unique(np.asarray(c, dtype=float), return_inverse=True)
        axes.append(np.log(u))
        index.append(inv)
    grid = np.full([a.size for a in axes], np.inf)
    np.minimum.at(grid, tuple(index), np.asarray(values, dtype=float))
    grid[np.isinf(grid)] = np.nan
    values, labels = fill_missing_labelled(tuple(axes), grid)
    return Grid(tuple(axes), values, None if (labels == MEASURED).all() else labels)


def monotone(grid: Grid, axes=None) -> Grid:
    """Running maximum along every axis (or the axis indices ``axes``): a kernel given more
    work (larger m, n, k, batch, context, tokens, message) is never faster. Removes
    measurement noise and kernel-choice dips from a latency grid so predicted times never
    fall as a shape grows."""
    v = grid.values
    for ax in (range(v.ndim) if axes is None else axes):
        v = np.maximum.accumulate(v, axis=ax)
    return Grid(grid.axes, v, grid.node_source)


def fill_missing(axes: tuple[np.ndarray, ...], grid: np.ndarray) -> np.ndarray:
    """Fill NaN cells by linear interpolation in log space along one axis after another
    (held constant beyond the last measured cell of a line)."""
    return fill_missing_labelled(axes, grid)[0]


def fill_missing_labelled(axes: tuple[np.ndarray, ...],
                          grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fill_missing`, and each cell's source code: MEASURED where the grid had a
    value, INTERPOLATED where filled between two cells of its line (at worst their codes),
    EXTRAPOLATED where held beyond the line's last cell (or filled by the median)."""
    out = grid.copy()
    lab = np.where(np.isnan(grid), -1, MEASURED).astype(np.int8)
    for _ in range(len(axes)):
        if not np.isnan(out).any():
            break
        for ax, coord in enumerate(axes):
            moved = np.moveaxis(out, ax, -1)
            lines = moved.reshape(-1, coord.size)
            labs = np.moveaxis(lab, ax, -1).reshape(-1, coord.size)
            nans = np.isnan(lines)
            count = nans.sum(axis=1)
            # only the lines with a gap and a measured cell (a table's grid has thousands
            # of lines, few with gaps)
            for r in np.flatnonzero((count > 0) & (count < coord.size)):
                line, bad = lines[r], nans[r]
                line[bad] = np.interp(coord[bad], coord[~bad], line[~bad])
                good = np.flatnonzero(~bad)
                j = np.searchsorted(coord[good], coord[bad])
                inside = (j > 0) & (j < good.size)
                lo, hi = good[np.maximum(j - 1, 0)], good[np.minimum(j, good.size - 1)]
                labs[r, bad] = np.where(
                    inside, np.minimum(INTERPOLATED, np.minimum(labs[r, lo], labs[r, hi])),
                    EXTRAPOLATED)
            out = np.moveaxis(lines.reshape(moved.shape), -1, ax)
            lab = np.moveaxis(labs.reshape(moved.shape), -1, ax)
    if np.isnan(out).any():                      # an all-empty slice: the grid's median
        lab[np.isnan(out)] = EXTRAPOLATED
        out[np.isnan(out)] = np.nanmedian(out)
    return out, lab


def _locate(axis: np.ndarray, x):
    """Lower cell index, weight of the upper neighbour, clamped flag, and a function giving
    the on-node flag (only needed for source labels)."""
    x = xp.asarray(x, dtype=float)
    if axis.size == 1:
        off = np.abs(x - axis[0]) > _ON_NODE
        return np.zeros(x.shape, dtype=np.intp), np.zeros(x.shape), off, lambda: ~off
    xc = np.clip(x, axis[0], axis[-1])
    clamped = (x < axis[0] - _ON_NODE) | (x > axis[-1] + _ON_NODE)
    # the lower node of the cell: the interior nodes at or below the clamped coordinate
    # (the first node always is; the last cell ends at the last node; NaN sorts last)
    i = (np.searchsorted(axis[1:-1], xc, side="right") if axis.size > 2
         else np.zeros(np.shape(xc), dtype=np.intp))
    lo = xp.lookup(axis, i)
    w = (xc - lo) / xp.lookup(np.diff(axis), i)

    def on_node():
        hi = xp.lookup(axis, i + 1)
        on = (np.abs(xc - lo) <= _ON_NODE) | (np.abs(xc - hi) <= _ON_NODE)
        return on & ~clamped
    return i, w, clamped, on_node


def _corners(locs):
    """(weight, corner) of each corner of the cells the points fall in; ``corner`` is the
    0/1 offset along each axis from the cell's lower node."""
    for corner in itertools.product((0, 1), repeat=len(locs)):
        weight = 1.0
        for (_, w, _, _), c in zip(locs, corner):
            weight = weight * (w if c else 1.0 - w)
        yield weight, corner


def _cell(shape: tuple, locs):
    """Flat index, in an array of ``shape``, of the lower node of each point's cell."""
    flat = locs[0][0]
    for k in range(1, len(locs)):
        flat = flat * shape[k] + locs[k][0]
    return flat


def _gather(values: np.ndarray, cell, corner: tuple) -> np.ndarray:
    """``values`` at ``corner`` of each point's cell (``cell``: :func:`_cell`), as one flat
    lookup from the corner's offset in the flattened array (numpy's tuple fancy indexing
    costs several times more per point; one cell index serves every corner). Along an axis
    of one node the upper corner is that node."""
    if not corner:
        return values[()]
    off = sum(int(np.prod(values.shape[k + 1:])) for k, c in enumerate(corner)
              if c and values.shape[k] > 1)
    return xp.lookup(values.reshape(-1)[off:], cell)


def _source(locs, shape, node_source=None) -> np.ndarray:
    """Source code per point: EXTRAPOLATED where a coordinate was clamped, MEASURED on a
    node, INTERPOLATED inside a cell; at worst the code of the nodes read (``node_source``,
    :attr:`Grid.node_source`: a filled node is not measured)."""
    clamped = np.zeros(shape, dtype=bool)
    on_node = np.ones(shape, dtype=bool)
    for _, _, cl, on in locs:
        clamped = clamped | cl
        on_node = on_node & on()
    src = np.where(clamped, EXTRAPOLATED, np.where(on_node, MEASURED, INTERPOLATED))
    if node_source is not None:
        src = np.minimum(src, _nodes_read(node_source, locs, shape))
    return src.astype(np.int8)


def _nodes_read(node_source: np.ndarray, locs, shape) -> np.ndarray:
    """The worst :attr:`Grid.node_source` among the corners each point reads with a
    positive weight (a point on a node reads that node only)."""
    cell = _cell(node_source.shape, locs)
    worst = np.full(shape, MEASURED, dtype=np.int8)
    for weight, corner in _corners(locs):
        read = np.broadcast_to(weight, shape) > 1e-12
        worst = np.where(read, np.minimum(worst, _gather(node_source, cell, corner)), worst)
    return worst


def interpolate(grid: Grid, log_points: list) -> tuple[np.ndarray, np.ndarray]:
    """Multilinear interpolation of ``grid`` at ln-coordinates ``log_points`` (one array per
    axis, broadcastable). Returns the values and a source code per point
    (:data:`MEASURED` on a grid node, :data:`INTERPOLATED` inside, :data:`EXTRAPOLATED`
    where any coordinate was clamped to the measured range)."""
    pts = np.broadcast_arrays(*[np.asarray(p, dtype=float) for p in log_points])
    locs = [_locate(a, p) for a, p in zip(grid.axes, pts)]
    out = np.zeros(pts[0].shape if pts else ())
    cell = _cell(grid.values.shape, locs) if locs else None
    for weight, corner in _corners(locs):
        out = out + weight * _gather(grid.values, cell, corner)
    return out, _source(locs, out.shape, grid.node_source)


def interpolate_time(grid: Grid, coords: list, roofline, mode: str = "separable",
                     memo: dict | None = None, node_latency=None) -> tuple[np.ndarray, np.ndarray]:
    r"""An operation's time from a grid of ln(measured / roofline) and its own roofline.

    Inside the measured range the implied latencies of the cell's corner shapes,
    :math:`\eta_c\, t_0(x_c)`, are interpolated linearly in log space; beyond it the time
    follows the op's own roofline from the nearest measured shape:

    .. math:: \ln t(x) = \sum_c w_c \left[\ln \eta_c + \ln t_0(x_c)\right]
              + \ln t_0(x) - \ln t_0(\bar x)

    with :math:`\bar x` the shape clamped to the table (the correction only ever raises the
    time: below the smallest measured shape the edge latency holds). Interpolating latencies rather than
    ratios keeps a time that grows with the shape between measured shapes (the roofline
    bends between them). ``roofline`` maps shape coordinates (broadcastable arrays) to
    seconds. ``mode`` says what it depends on, so that it is evaluated on as few points as
    possible: ``"separable"`` (the coordinates only: the latencies are computed once on the
    table's nodes) or ``"linear_first"`` (proportional to the first coordinate, with per-point
    parameters in the rest, e.g. attention over a batch of sequences with a draft length per
    point: :math:`t_0(b, x) = b\,t_0(1, x)`).
    ``memo`` (a dict living for one pass) shares the location of a coordinate array in an
    axis between the ops that use both (the GEMMs of a pass share their M).
    ``node_latency``: the 1-D separable case's ln latencies at the nodes,
    ``grid.values + ln t_0(nodes)``, and their differences, when the caller has them.
    Returns the times and a function giving the source code per point (computed only when
    asked for: ``detail="ops"``)."""
    if mode == "separable" and len(grid.axes) == 1:
        return _interpolate_time_1d(grid.axes[0], grid.values, coords[0], roofline, memo,
                                    node_latency, grid.node_source)
    cs = [xp.asarray(c, dtype=float) for c in coords]
    logs = [np.log(np.maximum(c, 1e-30)) for c in cs]
    locs = [_locate(a, lg) for a, lg in zip(grid.axes, logs)]
    shape = np.broadcast_shapes(*[c.shape for c in cs])
    out = np.zeros(shape)
    cell = _cell(grid.values.shape, locs)
    if mode == "separable":
        mesh = np.meshgrid(*[np.exp(a) for a in grid.axes], indexing="ij")
        latency = grid.values + np.log(roofline(*mesh))
        for weight, corner in _corners(locs):
            out = out + weight * _gather(latency, cell, corner)
    else:
        # ln eta_c + ln x_0c at the nodes (t0 = x_0 t0(1, x_1..); the axis is ln x_0); the
        # rest per point
        head = grid.values + grid.axes[0].reshape((-1,) + (1,) * (len(cs) - 1))
        rest: dict[tuple, np.ndarray] = {}    # t0(1, x_1..) per corner of x_1..
        for weight, corner in _corners(locs):
            if not np.any(weight):
                continue
            if corner[1:] not in rest:
                node = [_gather(np.exp(axis), i, (c,))
                        for axis, (i, _, _, _), c in zip(grid.axes[1:], locs[1:], corner[1:])]
                rest[corner[1:]] = np.log(roofline(1.0, *node))
            out = out + weight * (_gather(head, cell, corner) + rest[corner[1:]])
    clamped = np.broadcast_to(locs[0][2], shape)
    for _, _, cl, _ in locs[1:]:
        clamped = clamped | cl
    if clamped.any() and mode == "separable":
        def grown(base, *sub):
            inside = [np.exp(np.clip(np.log(np.maximum(c, 1e-30)), a[0], a[-1]))
                      for c, a in zip(sub, grid.axes)]
            return base + np.maximum(np.log(roofline(*sub)) - np.log(roofline(*inside)), 0.0)
        # the correction (and the sum) at the clamped points only: the roofline has no
        # per-point parameter
        out = xp.apply_where(clamped, (out, *cs), grown, out)
    elif clamped.any():
        def grown():
            # coordinates inside the table stay bit-identical, so the correction is exactly 0
            inside = [np.where(cl, np.exp(np.clip(lg, a[0], a[-1])), c)
                      for lg, a, c, (_, _, cl, _) in zip(logs, grid.axes, cs, locs)]
            corr = np.log(cs[0]) - np.log(inside[0])
            if any(np.any(cl) for _, _, cl, _ in locs[1:]):   # else t0(1, x_1..) cancels
                corr = corr + (np.log(roofline(1.0, *cs[1:]))
                               - np.log(roofline(1.0, *inside[1:])))
            # below the smallest measured shape a kernel is floor-bound: it keeps the edge's
            # latency rather than shrinking with its roofline
            return out + np.maximum(corr, 0.0)
        # the per-point roofline parameters are not the coordinates': computed on every
        # point, used where clamped
        out = xp.where_lazy(clamped, grown, out)
    return np.exp(out), lambda: _source(locs, shape, grid.node_source)


def _interpolate_time_1d(axis, values, x, roofline, memo=None, latency=None,
                         node_source=None):
    """:func:`interpolate_time` for one shape axis and a roofline of the coordinate only: the
    same rule, linear in log space over the nodes' implied latencies (held at the lower edge),
    plus the roofline's growth above the upper edge."""
    key = (axis.tobytes(), id(x))      # tables of one family share their axes
    if memo is not None and key in memo:
        _, x, log_x, cell, w, above = memo[key]
    else:
        x = xp.asarray(x, dtype=float)
        log_x = np.log(np.maximum(x, 1e-30))
        # fractional node index of each point (held at the edges): linear in log x; kept as
        # the lower node and the weight of the upper one, shared by the ops at this x
        frac = np.interp(log_x, axis, np.arange(axis.size, dtype=float))
        cell = np.minimum(frac.astype(np.intp), max(axis.size - 2, 0))
        w = frac - cell
        above = log_x > axis[-1] + _ON_NODE
        above = above if above.any() else None
        if memo is not None:
            memo[key] = (axis, x, log_x, cell, w, above)
    if latency is None:
        latency = values + np.log(roofline(np.exp(axis)))
        slope = np.diff(latency)
    else:                           # the caller's (ln latency at the nodes, its differences)
        latency, slope = latency
    if axis.size == 1:
        out = np.full_like(log_x, latency[0])
    else:
        # numpy.interp over the node index, written as a gather: no search per point
        out = xp.lookup(latency, cell) + w * xp.lookup(slope, cell)
    if above is not None:
        # above the table the time follows the op's roofline (the growth, and the sum, at
        # those points only)
        top = np.exp(axis[-1])

        def grown(base, xa):
            return base + np.maximum(np.log(roofline(xa)) - np.log(roofline(top)), 0.0)
        out = xp.apply_where(above, (out, x), grown, out)
    return np.exp(out), lambda: _source([_locate(axis, log_x)], np.shape(log_x), node_source)


def reduce(grid: Grid, fixed: dict[int, float]) -> tuple[Grid, int]:
    """Fix some axes (index -> ln value): a lower-dimensional grid over the others, and the
    worst source code of the fixing (EXTRAPOLATED if a fixed value lies outside)."""
    keep = [i for i in range(len(grid.axes)) if i not in fixed]
    mesh = np.meshgrid(*[grid.axes[i] for i in keep], indexing="ij")
    pts = []
    it = iter(mesh)
    for i in range(len(grid.axes)):
        pts.append(np.full(mesh[0].shape if mesh else (), fixed[i]) if i in fixed else next(it))
    vals, _ = interpolate(grid, pts)
    nodes = None
    if grid.node_source is not None:      # each kept node: the worst node the fixing reads
        shape = np.shape(vals)
        nodes = _nodes_read(grid.node_source, [_locate(a, np.broadcast_to(p, shape))
                                               for a, p in zip(grid.axes, pts)], shape)
        nodes = None if (nodes == MEASURED).all() else nodes
    fixed_src = MEASURED
    for i, v in fixed.items():
        _, _, cl, on = _locate(grid.axes[i], np.asarray(v))
        fixed_src = min(fixed_src, EXTRAPOLATED if cl else (MEASURED if on() else INTERPOLATED))
    return Grid(tuple(grid.axes[i] for i in keep), vals, nodes), fixed_src
