"""Where spec folders live, and the TOML reader every loader shares (the checks of each file
are its pydantic schema: :mod:`.schema`)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

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
# TOML reading
# --------------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    """A UTF-8 text file's text; a missing file, a folder or another encoding (UTF-16, a
    latin-1 byte) is one line naming the file and the byte."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason}); "
                        "save it as UTF-8") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_toml(path: Path) -> dict[str, Any]:
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
