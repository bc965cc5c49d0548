"""Where spec folders live, and the strict TOML reader every loader shares."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from ..errors import SpecError


# --------------------------------------------------------------------------------------------
# where spec folders live
# --------------------------------------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_REPO_ROOT = _PACKAGE_DIR.parents[1]


def bundled_dir(kind: str) -> Path:
    """The bundled ``hardware``, ``models`` or ``configs`` folder: the copy shipped inside the
    wheel (``inference_factory/_data/<kind>``), else the top-level folder of a source checkout."""
    both = _BUNDLED.get(kind)
    if both is None:
        shipped = _PACKAGE_DIR / "_data" / kind
        both = _BUNDLED[kind] = (shipped, os.fspath(shipped), _REPO_ROOT / kind)
    return both[0] if os.path.isdir(both[1]) else both[2]


#: kind -> (shipped folder, as a string, source checkout's folder): built once (a Path costs
#: microseconds; every spec lookup asks), the shipped one's presence checked on every call.
_BUNDLED: dict[str, tuple[Path, str, Path]] = {}


def data_dirs(kind: str) -> list[Path]:
    """The search path for ``kind``: the folders of ``INFERENCE_FACTORY_<KIND>_DIR``
    (``os.pathsep``-separated, first wins), then the bundled folder. A user's file shadows a
    bundled one of the same name or alias; every other bundled file stays visible."""
    env = os.environ.get(_ENV_VARS.get(kind) or f"INFERENCE_FACTORY_{kind.upper()}_DIR")
    user = [Path(p) for p in env.split(os.pathsep) if p] if env else []
    return user + [bundled_dir(kind)]


_ENV_VARS = {k: f"INFERENCE_FACTORY_{k.upper()}_DIR" for k in ("hardware", "models", "configs")}


def data_dir(kind: str) -> Path:
    """The first folder of :func:`data_dirs` (the user's, if any, else the bundled one)."""
    return data_dirs(kind)[0]


# --------------------------------------------------------------------------------------------
# strict TOML reading
# --------------------------------------------------------------------------------------------

_NUM = (int, float)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason})") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a folder, not a TOML file") from None


class _Table:
    """Accessor that checks keys, types and ranges of one TOML table."""

    def __init__(self, path: Path, raw: Mapping[str, Any], where: str = ""):
        self.path, self.raw, self.where, self.used = path, raw, where, set()

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _fail(self, key: str, msg: str) -> SpecError:
        return SpecError(f"{self.path}: {self._key(key)} {msg}")

    def get(self, key, kind, *, required=True, default=None, positive=False, allowed=None,
            minimum=None):
        self.used.add(key)
        if key not in self.raw:
            if required:
                raise self._fail(key, "is missing (required)")
            return default
        value = self.raw[key]
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, _NUM):
                raise self._fail(key, f"= {value!r} must be a number")
            value = float(value)
            if not math.isfinite(value):
                raise self._fail(key, f"= {value!r} must be a finite number")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._fail(key, f"= {value!r} must be an integer")
        elif kind is bool:
            if not isinstance(value, bool):
                raise self._fail(key, f"= {value!r} must be true or false")
        elif kind is str:
            if not isinstance(value, str):
                raise self._fail(key, f"= {value!r} must be a string")
        elif kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self._fail(key, f"= {value!r} must be a list of strings")
        if positive and value <= 0:
            raise self._fail(key, f"= {value!r} must be > 0")
        if minimum is not None and value < minimum:
            raise self._fail(key, f"= {value!r} must be >= {minimum}")
        if allowed is not None and value not in allowed:
            raise self._fail(key, f"= {value!r} is not one of {sorted(allowed)}")
        return value

    def table(self, key, *, required=True) -> "_Table":
        self.used.add(key)
        if key not in self.raw:
            if required:
                raise self._fail(key, "table is missing (required)")
            return _Table(self.path, {}, self._key(key))
        value = self.raw[key]
        if not isinstance(value, dict):
            raise self._fail(key, f"= {value!r} must be a table")
        return _Table(self.path, value, self._key(key))

    def has(self, key) -> bool:
        return key in self.raw

    def strings(self, key) -> dict[str, str]:
        """A free-form table of string values (sources, notes)."""
        sub = self.table(key, required=False)
        for k, v in sub.raw.items():
            if not isinstance(v, str):
                raise SpecError(f"{self.path}: {sub._key(k)} = {v!r} must be a string")
        return dict(sub.raw)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.used)
        if unknown:
            key = unknown[0]
            raise self._fail(key, f"= {self.raw[key]!r} is not a known key; "
                                  f"allowed: {sorted(self.used)}")

