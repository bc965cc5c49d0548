"""Output files that appear only when complete: one mechanism for every writer.

Every file or folder the package writes for a user goes through :func:`atomic_output`:

- an output path that is an existing folder (other than a Zarr store written before, for a
  ``.zarr`` output) or whose parent folder does not exist is a one-line :class:`SpecError`
  before anything is written;
- the result is written to a hidden temporary beside the target and moved over it with one
  ``os.replace`` (atomic on one filesystem), so a reader sees the old file or the new one;
- on any error, on Ctrl-C (SIGINT) and on SIGTERM/SIGHUP the temporary is removed and the
  target is left as it was. The signal handlers are installed only while a write is in
  progress (main thread only) and the previous handlers are restored afterwards.

:func:`json_text` is the one JSON encoder of results: non-finite floats become ``null``
(strict JSON has no NaN or Infinity); counts are written as integers (``384``, not ``384.0``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..errors import SpecError
from .metadata import is_count, plain_number


def _default_mode(path: str | os.PathLike) -> None:
    """Give a file made by ``mkstemp``/``mkdtemp`` (private, 0600/0700) the permissions a
    plainly created file or folder would have under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~umask)


def _is_zarr_store(path: Path) -> bool:
    """A folder holding Zarr metadata at its root (v2 ``.zgroup``/``.zarray``, v3 ``zarr.json``)."""
    return any((path / name).is_file() for name in (".zgroup", ".zarray", "zarr.json"))


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)


#: Signals that end the process while a write is in progress; each removes the temporary.
_TERMINATING = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextmanager
def _exit_cleanly_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM/SIGHUP raise ``SystemExit(128 + signum)`` (as SIGINT
    raises KeyboardInterrupt), so ``finally`` clauses run and temporaries are removed; the
    previous handlers are restored on the way out. No-op outside the main thread, where
    Python cannot install handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = {}
    try:
        for sig in _TERMINATING:
            previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def check_target(path: str | os.PathLike, *, option: str = "--output",
                 directory: bool = False, overwrite: bool = True) -> tuple[Path, Path]:
    """(target, its folder) when ``path`` may be written; otherwise a one-line SpecError: the
    folder does not exist, or the path is an existing folder (other than a Zarr store written
    before, for a ``directory`` output), the name is empty, or the file exists and
    ``overwrite`` is False (a file of the user's that only ``--force`` may replace). Commands
    call it before any work so that a bad output path fails fast; :func:`atomic_output` calls
    it again before writing."""
    if not str(os.fspath(path)).strip():
        raise SpecError(f"{option} {str(path)!r}: give a file name")
    target = Path(path)
    if not overwrite and target.exists():
        raise SpecError(f"{option} {path}: the file exists; give another name or --force to "
                        "replace it (nothing was written)")
    folder = Path(os.path.abspath(target)).parent
    if not folder.is_dir():
        raise SpecError(f"{option} {path}: cannot write (folder {folder} does not exist)")
    if target.is_dir() and not (directory and _is_zarr_store(target)):
        # a file never replaces a folder, and a store replaces only an earlier store: nothing
        # of the user's is ever deleted
        what = "a Zarr store" if directory else "a file"
        raise SpecError(f"{option} {path}: is an existing folder that is not {what} written "
                        f"before; give a new name (nothing was written or removed)")
    return target, folder


@contextmanager
def atomic_output(path: str | os.PathLike, *, option: str = "--output",
                  directory: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path`` to write into; on success it replaces ``path``
    (file or folder), on any error it is removed, so nothing half-written is ever left.
    A missing folder or an OS error is a one-line :class:`SpecError` naming ``option``."""
    target, folder = check_target(path, option=option, directory=directory)
    with _exit_cleanly_on_signals():
        tmp = None
        try:
            if directory:
                tmp = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
            else:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.",
                                           suffix=f".tmp{target.suffix}", dir=folder)
                os.close(fd)
            yield tmp
            _default_mode(tmp)
            if target.is_dir():
                old = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=folder)
                os.replace(target, os.path.join(old, "x"))
                os.replace(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, target)
            tmp = None
        except OSError as exc:
            raise SpecError(f"{option} {path}: cannot write ({exc.strerror or exc})") from None
        finally:
            if tmp is not None:
                _remove(tmp)


def write_text_atomic(path: str | os.PathLike, text: str, *, option: str = "--output") -> None:
    """Write ``text`` through :func:`atomic_output`."""
    with atomic_output(path, option=option) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)


def _plain(x: Any, count: bool = False) -> Any:
    """JSON-ready copy: numpy scalars and arrays as Python values and lists, tuples as lists,
    non-finite floats (and pandas' missing value) as None; under a key that counts whole
    things (output.metadata.is_count: ``batch_size``, ``gpus``, ``completed``...) a whole
    float as an int (``384``, not ``384.0``)."""
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        return plain_number(x) if count else x
    if isinstance(x, dict):
        return {str(k): _plain(v, is_count(str(k))) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v, count) for v in x]
    if getattr(x, "ndim", 0) > 0 and hasattr(x, "tolist"):
        return _plain(x.tolist(), count)
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        return _plain(x.item(), count)
    if type(x).__name__ == "NAType":          # pandas.NA of a nullable integer column
        return None
    return x


def json_text(obj: Any, *, indent: int | None = 2) -> str:
    """Strict JSON of a result: non-finite numbers (``inf``, ``nan``) as ``null``, numpy
    values as plain numbers; never raises on a number."""
    return json.dumps(_plain(obj), indent=indent, allow_nan=False, default=str)
