"""Output files that appear only when complete: one mechanism for every writer."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import SpecError


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


@contextmanager
def atomic_output(path: str | os.PathLike, *, option: str = "--output",
                  directory: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path`` to write into; on success it replaces ``path``
    (file or folder), on any error it is removed, so nothing half-written is ever left.
    A missing folder or an OS error is a one-line :class:`SpecError` naming ``option``."""
    target = Path(path)
    folder = target.resolve().parent
    if not folder.is_dir():
        raise SpecError(f"{option} {path}: cannot write (folder {folder} does not exist)")
    if target.is_dir() and not (directory and _is_zarr_store(target)):
        # a file never replaces a folder, and a store replaces only an earlier store: nothing
        # of the user's is ever deleted
        what = "a Zarr store" if directory else "a file"
        raise SpecError(f"{option} {path}: is an existing folder that is not {what} written "
                        f"before; give a new name (nothing was written or removed)")
    tmp = None
    try:
        if directory:
            tmp = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
        else:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{target.suffix}",
                                       dir=folder)
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
