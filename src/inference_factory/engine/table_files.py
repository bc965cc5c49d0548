"""The measured tables as files: a CSV parsed once (pandas) and kept as numpy columns in the
cache folder, and the small frame of numpy columns the efficiency curves select from."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np


class Rows:
    """A measured table as named numpy columns, in the file's order: numbers with the dtype
    pandas parses them to (int64 or float64), text as ``str`` arrays. What the efficiency
    curves need of a frame (select rows, add a column), without pandas on the path of an
    answer; :meth:`to_frame` gives the pandas DataFrame."""

    __slots__ = ("_cols", "_n")

    def __init__(self, columns: dict[str, np.ndarray]):
        self._cols = dict(columns)
        self._n = len(next(iter(self._cols.values()))) if self._cols else 0

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, column: str) -> np.ndarray:
        return self._cols[column]

    def keys(self):
        return self._cols.keys()

    def where(self, mask: np.ndarray) -> "Rows":
        """The rows where ``mask`` holds, in order."""
        return Rows({k: v[mask] for k, v in self._cols.items()})

    def assign(self, **columns: np.ndarray) -> "Rows":
        return Rows({**self._cols, **columns})

    def to_frame(self):
        """The rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self._cols)


def cache_dir() -> Path | None:
    """Where derived files are kept between processes: ``$INFERENCE_FACTORY_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/inference-factory`` (``~/.cache/inference-factory``); None if unset and
    there is no home."""
    root = os.environ.get("INFERENCE_FACTORY_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache" if Path.home() else None)
    return Path(base) / "inference-factory" if base else None


def read_table(path: Path) -> dict[str, np.ndarray]:
    """The columns of a measured CSV table (``#`` lines are comments), parsed by pandas.

    The parsed columns are kept in the cache folder (:func:`cache_dir`, ``tables/``) under the
    digest of the file's bytes, as numpy arrays (text as codes into its distinct values), so a
    later process reads them without pandas (~1 ms instead of pandas' ~150 ms import and its
    parse). An edited file has another digest; a cache that cannot be read or written is
    passed over (the file is parsed again)."""
    data = path.read_bytes()
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    root = cache_dir()
    cached = (root / "tables" / f"{path.stem}-{digest}-v{CACHE_FORMAT}.npz"
              if root is not None else None)
    if cached is not None and cached.is_file():
        try:
            with np.load(cached, allow_pickle=False) as z:
                # the digest inside must be the file's: a cache file renamed or swapped
                # with another table's is another table's columns (parse again)
                if "digest" in z.files and str(z["digest"]) == digest:
                    return _unpack(z)
        except Exception:       # noqa: BLE001 (a damaged or foreign file: parse again)
            pass
    import io

    import pandas as pd

    df = pd.read_csv(io.BytesIO(data), comment="#")
    cols = {c: (df[c].to_numpy() if df[c].dtype.kind in "biuf"
                else np.asarray(df[c].astype(str).to_numpy(), dtype=str)) for c in df.columns}
    if cached is not None:
        _write_cache(cached, cols, digest)
    return cols


#: Version of the cached layout (part of the file name: another layout is another file).
CACHE_FORMAT = 3


def _unpack(z) -> dict[str, np.ndarray]:
    """The columns from their cached layout: one 2-D array per numeric dtype (a row per
    column), the text columns as rows of codes into one array of their labels."""
    names, kinds, rows = z["columns"], z["kinds"], z["rows"]
    groups = {k: z[k] for k in z.files if k.startswith("n:")}
    codes = z["codes"] if "codes" in z.files else None
    labels = np.split(z["labels"], np.cumsum(z["label_counts"])[:-1]) if codes is not None else []
    out = {}
    for name, kind, row in zip(names.tolist(), kinds.tolist(), rows.tolist()):
        if kind == "t":     # labels of the column's own width (as parsed), then the rows
            out[name] = np.array(labels[row].tolist(), dtype=str)[codes[row]]
        else:
            out[name] = groups[kind][row]
    return out


def _write_cache(path: Path, cols: dict[str, np.ndarray], digest: str) -> None:
    """Write the columns and the digest of the table they came from atomically (a temporary
    file renamed into place); errors ignored."""
    kinds, rows, groups, codes, labels = [], [], {}, [], []
    for v in cols.values():
        if v.dtype.kind == "U":
            lab, code = np.unique(v, return_inverse=True)
            kinds.append("t")
            rows.append(len(codes))
            codes.append(code.reshape(-1).astype(np.int32))
            labels.append(lab)
        else:
            kind = f"n:{v.dtype.str}"
            kinds.append(kind)
            rows.append(len(groups.setdefault(kind, [])))
            groups[kind].append(v)
    arrays = {"digest": np.asarray(digest), "columns": np.asarray(list(cols), dtype=str),
              "kinds": np.asarray(kinds, dtype=str),
              "rows": np.asarray(rows, dtype=np.int64),
              **{k: np.stack(v) for k, v in groups.items()}}
    if codes:
        arrays.update(codes=np.stack(codes), labels=np.concatenate(labels),
                      label_counts=np.asarray([len(x) for x in labels], dtype=np.int64))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
