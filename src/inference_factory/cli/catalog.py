"""``inference-factory prices list|show`` and ``configs list|show``: what ships with the
package, readable from a pip install (thin: read the bundled files, print them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import click

from ..errors import SpecError
from ..output.tables import chosen_format, render
from .params import format_option


# --------------------------------------------------------------------------------------------
# prices
# --------------------------------------------------------------------------------------------


@click.group("prices")
def prices_group() -> None:
    """Dated API list prices (configs/prices.toml), by id."""


def _price_rows(model: str | None):
    import dataclasses

    from ..specs.prices import load_prices
    from ..specs import load_model

    want = load_model(model).name if model else None
    return [dataclasses.asdict(p) for p in load_prices().values()
            if want is None or p.model == want]


@prices_group.command("list")
@click.option("--model", "-m", default=None, help="Only the prices of this model.")
@format_option
def prices_list(model: str | None, fmt: str | None, as_json: bool) -> None:
    """Price ids with model, date and USD per million tokens (input hit / miss, output)."""
    import pandas as pd

    df = pd.DataFrame(_price_rows(model))
    fmt = chosen_format(fmt, as_json)
    if fmt in ("table", "markdown") and not df.empty:
        df = df[["id", "model", "date", "input_cache_hit_usd_per_mtok",
                 "input_cache_miss_usd_per_mtok", "output_usd_per_mtok"]]
    click.echo(render(df, fmt))


@prices_group.command("show")
@click.argument("price_id")
@click.option("--json", "as_json", is_flag=True, help="Print the price as JSON.")
def prices_show(price_id: str, as_json: bool) -> None:
    """One price: every field and its source."""
    import dataclasses
    import json

    from ..specs.prices import resolve_price

    p = dataclasses.asdict(resolve_price(price_id))
    if as_json:
        click.echo(json.dumps(p, indent=2))
        return
    width = max(len(k) for k in p)
    click.echo("\n".join(f"{k.ljust(width)}  {v}" for k, v in p.items()))


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------


@click.group("configs")
def configs_group() -> None:
    """Bundled configs: factory scenarios, sweeps, prices and realism constants."""


def _configs() -> dict[str, tuple[Path, str, str]]:
    """name -> (path, kind, description) of every bundled config file."""
    from ..specs import bundled_dir

    root = bundled_dir("configs")
    out = {}
    for p in sorted(root.rglob("*.toml")):
        name = p.relative_to(root).with_suffix("").as_posix()
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
            raw = {}
        if "sweep" in raw:
            kind, desc = "sweep", raw["sweep"].get("description", "")
        elif "price" in raw:
            kind, desc = "prices", f"{len(raw['price'])} dated API list prices"
        elif "model" in raw or "extends" in raw:
            kind, desc = "factory", raw.get("description", "")
        else:
            kind = p.stem
            desc = next((ln.lstrip("# ").strip() for ln in p.read_text(
                encoding="utf-8").splitlines() if ln.startswith("#")), "")
        out[name] = (p, kind, desc)
    return out


@configs_group.command("list")
@format_option
def configs_list(fmt: str | None, as_json: bool) -> None:
    """Bundled config files: name (for 'configs show'), kind and description."""
    import pandas as pd

    df = pd.DataFrame([{"name": n, "kind": k, "description": d, "path": str(p)}
                       for n, (p, k, d) in _configs().items()])
    fmt = chosen_format(fmt, as_json)
    if fmt in ("table", "markdown"):
        df = df.drop(columns=["path"])
    click.echo(render(df, fmt))


@configs_group.command("show")
@click.argument("name")
@click.option("--path", "path_only", is_flag=True, help="Print only the file's path.")
def configs_show(name: str, path_only: bool) -> None:
    """Print a bundled config (e.g. 'configs show factory > my.toml' to start your own)."""
    found = _configs()
    key = name.removesuffix(".toml")
    if key not in found:
        raise SpecError(f"unknown config {name!r}; available: {sorted(found)} "
                        "(see 'inference-factory configs list')")
    p = found[key][0]
    click.echo(str(p) if path_only else portable_text(p).rstrip("\n"))


#: Keys whose value is a file path relative to the config: (table or "" for the top level, key).
PATH_KEYS = (("", "extends"), ("", "baseline"), ("workload", "trace"))


def portable_text(path: Path) -> str:
    """A bundled config's text with every relative path (``extends``, ``baseline``,
    ``workload.trace``) made absolute, so that the printed copy works wherever it is saved
    (``configs show deepseek-day > dd.toml`` kept ``extends = "factory.toml"``, which then
    named a file beside dd.toml that does not exist)."""
    import json
    import re

    text = path.read_text(encoding="utf-8")
    out, table = [], ""
    for line in text.splitlines(keepends=True):
        head = re.match(r"\s*\[\[?\s*([A-Za-z0-9_.]+)\s*\]\]?", line)
        if head:
            table = head.group(1)
        m = re.match(r'(\s*)([A-Za-z_]+)(\s*=\s*)"([^"\\]*)"(.*)', line, re.S)
        if m and (table, m.group(2)) in PATH_KEYS and m.group(4) \
                and not Path(m.group(4)).is_absolute():
            target = (path.parent / m.group(4)).resolve()
            out.append(f"{m.group(1)}# was {m.group(2)} = {json.dumps(m.group(4))} "
                       "(relative to the bundled file)\n")
            line = f"{m.group(1)}{m.group(2)}{m.group(3)}{json.dumps(str(target))}{m.group(5)}"
        out.append(line)
    return "".join(out)


COMMANDS = (prices_group, configs_group)
