"""Specs by name, alias or path: folder indexes, and parsed specs cached while their files
are unchanged."""

from __future__ import annotations

import hashlib
import os
import stat
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError, closest
from .files import data_dirs
from .hardware import HardwareSpec, _parse_hardware
from .models import ModelSpec, _parse_model


# --------------------------------------------------------------------------------------------
# lookup by name or path
# --------------------------------------------------------------------------------------------


#: A file or folder changed less than this long before it was read may change again within the
#: same tick of the file system's clock without its timestamps moving ("racy" timestamps, as in
#: git's index): what was read from it is not trusted on its stamp alone until it is older than
#: this. 2 s is the coarsest timestamp resolution in common use (FAT's modification time).
_RACY_NS = 2_000_000_000


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies one version of a file or folder: inode and device (a file replaced by a
    rename is another file), modification and change times (the change time cannot be set
    back by ``touch`` or ``cp -p``; a folder's change when an entry is added, removed or
    renamed) and size."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _settled(st: os.stat_result, now_ns: int) -> bool:
    return now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS


@dataclass
class _FolderIndex:
    """The names and aliases of one spec folder, and the stamps they were read under."""
    stamp: tuple            # the folder's (a file added, removed or renamed changes it)
    files: tuple            # (path, stamp) of every *.toml file, sorted by name
    stems: dict[str, Path]  # lower-cased file stem -> file
    index: dict[str, Path]  # lower-cased stem or alias -> file (a stem wins over an alias)
    settled: bool           # no stamp was too recent to be trusted ("racy")
    clashes: dict[str, tuple[Path, ...]] | None = None  # alias -> the files that claim it


_INDEX_CACHE: dict[str, _FolderIndex] = {}


def _read_folder(folder: str, st: os.stat_result) -> _FolderIndex:
    now = time.time_ns()
    files, settled = [], _settled(st, now)
    with os.scandir(folder) as it:
        entries = sorted((e.name, e.path) for e in it if e.name.endswith(".toml"))
    for name, path in entries:
        try:
            fst = os.stat(path)
        except OSError:         # removed while listing: the folder's stamp has moved too
            continue
        files.append((path, _stamp(fst)))
        settled = settled and _settled(fst, now)
    paths = [Path(f) for f, _ in files]
    clashes: dict[str, tuple[Path, ...]] = {}
    return _FolderIndex(stamp=_stamp(st), files=tuple(files),
                        stems={q.stem.lower(): q for q in paths},
                        index=_build_index(paths, clashes), settled=settled, clashes=clashes)


def _files_unchanged(ix: _FolderIndex) -> bool:
    for path, stamp in ix.files:
        try:
            if _stamp(os.stat(path)) != stamp:
                return False
        except OSError:
            return False
    return True


def _folder_index(folder: str, st: os.stat_result, *, contents: bool) -> _FolderIndex:
    """The folder's index, read again when it may be stale. The folder's own stamp moves
    when a file is added, removed or renamed, so file names (stems) need only that; aliases
    live inside the files, so ``contents=True`` also checks every file's stamp (an edit in
    place moves only the file's). Stamps too recent to be trusted (:data:`_RACY_NS`) never
    are: the folder is read again on every call until it has settled."""
    ix = _INDEX_CACHE.get(folder)
    if (ix is None or not ix.settled or ix.stamp != _stamp(st)
            or (contents and not _files_unchanged(ix))):
        ix = _INDEX_CACHE[folder] = _read_folder(folder, st)
    return ix


def _build_index(files, clashes: dict | None = None) -> dict[str, Path]:
    """Lower-cased stem or alias -> file. An alias that two files of the folder claim (and no
    file is named after) is recorded in ``clashes`` (alias -> the files): resolving it is an
    error, not a silent pick of the first file."""
    out: dict[str, Path] = {}
    claims: dict[str, list[Path]] = {}
    for p in files:
        out[p.stem.lower()] = p
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
            continue        # a broken file is reported when it is loaded, not while indexing
        for alias in raw.get("aliases", []) if isinstance(raw.get("aliases"), list) else []:
            if isinstance(alias, str):
                out.setdefault(alias.lower(), p)
                owners = claims.setdefault(alias.lower(), [])
                if p not in owners:
                    owners.append(p)
    stems = {p.stem.lower() for p in files}
    if clashes is not None:
        clashes.update({a: tuple(ps) for a, ps in claims.items()
                        if len(ps) > 1 and a not in stems})
    return out


def _resolve(name: str | os.PathLike, kind: str, folder: Path | None) -> Path:
    if not isinstance(name, (str, os.PathLike)):
        raise SpecError(f"{kind} name must be a string, got {name!r}")
    s = os.fspath(name)
    if s.endswith(".toml") or (os.sep in s and Path(s).exists()):
        p = Path(s)
        if not p.is_file():
            raise SpecError(f"{s}: {kind} file not found")
        return p
    folders = [Path(folder)] if folder is not None else data_dirs(kind)
    stats = []
    for f in folders:
        try:
            st = os.stat(f)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise SpecError(f"{f}: {kind} folder not found")
        _warn_if_empty(f, kind)
        stats.append(st)
    key = s.lower()
    for i, (f, st) in enumerate(zip(folders, stats)):
        if i == 0:
            # a file's stem wins over every alias, and the first folder over the others: a
            # stem hit there depends on the listing alone, not on the files' contents
            hit = _folder_index(os.fspath(f), st, contents=False).stems.get(key)
            if hit is not None:
                return hit
        ix = _folder_index(os.fspath(f), st, contents=True)
        hit = ix.index.get(key)
        if hit is not None:
            both = (ix.clashes or {}).get(key)
            if both:
                raise SpecError(f"{kind.rstrip('s')} alias {s!r} is claimed by "
                                f"{len(both)} files in {f}: "
                                f"{', '.join(q.name for q in both)}; an alias must name one "
                                "file: remove it from all but one (or give the file name)")
            return hit
    names = sorted({p.stem for f in folders for p in f.glob("*.toml")})
    index: dict[str, Path] = {}
    for f, st in zip(folders, stats):
        for k, q in _folder_index(os.fspath(f), st, contents=True).index.items():
            index.setdefault(k, q)
    near = closest(s, index)            # a misspelt name or alias: its file's name
    hint = f"; did you mean {index[near].stem!r}?" if near is not None else ""
    where = ", ".join(str(f) for f in folders)
    raise SpecError(f"unknown {kind.rstrip('s')} {s!r}{hint} (in {where}; available: "
                    f"{names})" if hint else
                    f"unknown {kind.rstrip('s')} {s!r} in {where}; available: {names}")


_CACHE: dict[tuple, Any] = {}


def _cached(path: Path, parse):
    """``parse(path)``, once per version of the file (:func:`_stamp`, and the path it was
    reached by: a spec records its path). A file changed too recently for its stamp to tell
    it from its next edit (:data:`_RACY_NS`) is kept with the digest of its bytes, read before
    parsing and compared on each hit until it has settled: the same object while the bytes
    are the same (the engine keys its compiled programs on the spec objects), parsed again
    when they differ."""
    st = os.stat(path)
    key = (parse, os.fspath(path), _stamp(st))
    settled = _settled(st, time.time_ns())
    hit = _CACHE.get(key)
    if hit is not None and hit[1] is None:          # a settled version: its stamp tells it
        return hit[0]
    digest = (hashlib.sha256(Path(path).read_bytes()).digest()
              if hit is not None or not settled else None)
    if hit is not None and hit[1] == digest:        # the same bytes (now settled or not yet)
        _CACHE[key] = (hit[0], None if settled else digest)
        return hit[0]
    out = parse(path)
    _CACHE[key] = (out, None if settled else digest)
    return out


def load_hardware(name: str | os.PathLike, folder: str | os.PathLike | None = None) -> HardwareSpec:
    """Load a hardware spec by name, alias (case-insensitive) or path to a TOML file."""
    if isinstance(name, HardwareSpec):
        return name
    return _cached(_resolve(name, "hardware", folder), _parse_hardware)


def load_model(name: str | os.PathLike, folder: str | os.PathLike | None = None) -> ModelSpec:
    """Load a model spec by name, alias (case-insensitive) or path to a TOML file."""
    if isinstance(name, ModelSpec):
        return name
    return _cached(_resolve(name, "models", folder), _parse_model)


_WARNED_EMPTY: set = set()


def _warn_if_empty(folder: Path, kind: str) -> None:
    """A user's folder (``INFERENCE_FACTORY_<KIND>_DIR`` or ``folder=``) without one .toml
    file is almost surely a wrong path: said once, as a warning (the bundled specs still
    serve)."""
    from .files import bundled_dir

    f = Path(folder)
    if f not in _WARNED_EMPTY and f != bundled_dir(kind) and not any(f.glob("*.toml")):
        from ..errors import warn
        _WARNED_EMPTY.add(f)
        warn(f"{f}: the {kind} folder holds no .toml file; only the bundled {kind} are used")


def _list(kind: str, folder) -> list[str]:
    folders = [Path(folder)] if folder is not None else data_dirs(kind)
    for f in folders:
        if not f.is_dir():
            raise SpecError(f"{f}: {kind} folder not found")
        _warn_if_empty(f, kind)
    return sorted({p.stem for f in folders for p in f.glob("*.toml")})


def list_hardware(folder: str | os.PathLike | None = None) -> list[str]:
    """Names of the hardware specs on the search path (or in ``folder``)."""
    return _list("hardware", folder)


def list_models(folder: str | os.PathLike | None = None) -> list[str]:
    """Names of the model specs on the search path (or in ``folder``)."""
    return _list("models", folder)
