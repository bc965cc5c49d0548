"""The shared base of the input-file schemas (:mod:`.schema`): the documented bounds, the
field types (``num``, ``count``, ``text``, ``names``...), the strict :class:`_Schema` base
model, and the validation that turns a pydantic error into one line naming the key path, the
value and what is allowed (:func:`check`, :func:`parse`, :func:`violation`, :func:`describe`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      WithJsonSchema)

from ..errors import SpecError, show  # noqa: F401 (re-exported)
from ..units import PRECISIONS

# --------------------------------------------------------------------------------------------
# documented bounds (docs/schema/README.md): defined in bounds.py, importable without pydantic
# --------------------------------------------------------------------------------------------

from ..bounds import (MAX_BATCH, MAX_BATCH_PER_GPU, MAX_GPUS, MAX_RATE_PER_S,  # noqa: E402,F401
                     MAX_REQUESTS, MAX_SWEEP_POINTS, MAX_SYSTEM_PROMPTS, MAX_TOKENS,
                     MAX_TOKENS_PER_DAY, MAX_TRACE_MS, MAX_TURNS_MEAN, MAX_USD)


# --------------------------------------------------------------------------------------------
# field types
# --------------------------------------------------------------------------------------------


def _bounds(lo, hi, lo_open, hi_open) -> str:
    fmt = lambda x: f"{x:,}" if isinstance(x, int) else f"{x:g}"  # noqa: E731
    return f"{'(' if lo_open else '['}{fmt(lo)}, {fmt(hi)}{')' if hi_open else ']'}"


def num(lo: float, hi: float, doc: str, *, lo_open: bool = False, hi_open: bool = False):
    """A finite number in a documented range; ``doc`` states the unit and meaning."""
    rng = dict(gt=lo) if lo_open else dict(ge=lo)
    rng.update(lt=hi) if hi_open else rng.update(le=hi)
    return Annotated[float, Field(allow_inf_nan=False, description=(
        f"{doc}; a finite number in {_bounds(lo, hi, lo_open, hi_open)}"), **rng)]


def count(lo: int, hi: int, doc: str):
    """A whole number in a documented range."""
    return Annotated[int, Field(ge=lo, le=hi, description=f"{doc}; an integer in "
                                                          f"{_bounds(lo, hi, False, False)}")]


def text(doc: str):
    return Annotated[str, Field(description=doc)]


def nonempty(doc: str):
    return Annotated[str, Field(min_length=1, description=f"{doc}; a non-empty string")]


def flag(doc: str):
    return Annotated[bool, Field(description=f"{doc}; true or false")]


Precision = Literal[tuple(PRECISIONS)]  # type: ignore[valid-type]


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


def names(doc: str):
    """A name or a non-empty list of names (a list adds a dimension)."""
    return Annotated[list[Annotated[str, Field(min_length=1)]],
                     BeforeValidator(_one_or_many),
                     WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1},
                                               {"type": "array", "minItems": 1,
                                                "items": {"type": "string", "minLength": 1}}],
                                     "description": f"{doc}; a name or a non-empty list"}),
                     Field(min_length=1, description=f"{doc}; a name or a non-empty list")]


class _Schema(BaseModel):
    """Strict: an unknown key, a string for a number or a bool for an integer is an error."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Sources = Annotated[dict[str, str], Field(description="free-form table of strings")]



# --------------------------------------------------------------------------------------------
# validation with one-line messages
# --------------------------------------------------------------------------------------------


def _unwrap(tp: Any) -> Any:
    """The model class inside Optional[...] / list[...] / Annotated[...], if any."""
    for _ in range(6):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
        args = [a for a in get_args(tp) if a is not type(None)]
        if not args:
            return None
        tp = args[0]
    return None


def _field_at(root: type[BaseModel], loc: tuple) -> tuple[Any, type[BaseModel] | None, str]:
    """(FieldInfo of the last key or None, model holding it, dotted key path) of an error
    location; list indices are written ``key[i]``, union tags are dropped."""
    model: type[BaseModel] | None = root
    holder, info, path = root, None, ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
            continue
        if model is not None:
            fields = {(f.alias or k): f for k, f in model.model_fields.items()}
            path += ("." if path else "") + str(item)
            holder = model
            if item not in fields:          # an unknown key of a table
                return None, holder, path
            info = fields[item]
            model = _unwrap(info.annotation)
            continue
        if info is not None and get_origin(_strip(info.annotation)) is dict:
            path += ("." if path else "") + str(item)     # a key of a free-form table
    return info, holder, path


def _strip(tp: Any) -> Any:
    """``dict[...]`` or the type inside Optional[...] / Annotated[...]."""
    for _ in range(6):
        args = get_args(tp)
        if get_origin(tp) is dict or not args:
            return tp
        if get_origin(tp) is Annotated or type(None) in args:
            tp = [a for a in args if a is not type(None)][0]
        else:
            return tp
    return tp


def _doc(info: Any) -> str | None:
    """The description of a field, or of the constrained type inside its annotation."""
    if info is None:
        return None
    if getattr(info, "description", None):
        return info.description
    todo = [info.annotation]
    while todo:
        tp = todo.pop(0)
        for meta in getattr(tp, "__metadata__", ()):
            if getattr(meta, "description", None):
                return meta.description
        todo.extend(a for a in get_args(tp) if a is not type(None))
    return None


def _requirement(err: dict, info: Any, holder: type[BaseModel] | None) -> str:
    kind = err["type"]
    if kind == "missing":
        return "is missing (required)"
    if kind == "extra_forbidden":
        allowed = sorted((f.alias or k) for k, f in holder.model_fields.items()) if holder else []
        return f"is not a known key; allowed: {allowed}"
    if kind == "literal_error":
        expected = str(err.get("ctx", {}).get("expected", "")).replace(" or ", ", ")
        return f"is not one of [{expected}]"
    desc = _doc(info)
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a table"
    if kind in ("list_type", "tuple_type"):
        return "must be a list" + (f" ({desc})" if desc else "")
    if kind == "bool_type":
        return "must be true or false"
    if kind in ("string_type", "string_too_short"):
        return "must be a non-empty string" if kind == "string_too_short" else "must be a string"
    if kind == "too_short":
        return "must not be empty" + (f" ({desc})" if desc else "")
    if desc and ";" in desc:
        return "must be " + desc.rsplit("; ", 1)[1] + f" ({desc.rsplit('; ', 1)[0]})"
    if desc:
        return f"is not allowed: {err['msg'][0].lower()}{err['msg'][1:]} ({desc})"
    return err["msg"][0].lower() + err["msg"][1:]


def describe(root: type[BaseModel], exc: ValidationError) -> tuple[str, Any, str]:
    """(key path, offending value, what is allowed) of the first error."""
    errors = exc.errors(include_url=False)
    # prefer an error whose location names a key over a union's alternative-type noise
    err = errors[0]
    info, holder, path = _field_at(root, tuple(err["loc"]))
    return path, err.get("input"), _requirement(err, info, holder)


def parse(root: type[BaseModel], raw: Any) -> tuple[BaseModel | None, tuple[str, Any, str] | None]:
    """(validated model, None), or (None, (key path, value, what is allowed)) of the first
    violation of ``root``: one validation pass for loaders that format their own message."""
    try:
        return root.model_validate(raw), None
    except ValidationError as exc:
        return None, describe(root, exc)


def violation(root: type[BaseModel], raw: Any) -> tuple[str, Any, str] | None:
    """(key path, value, what is allowed) of the first violation of ``root``, or None."""
    return parse(root, raw)[1]


def check(root: type[BaseModel], raw: Any, where: str, *, prefix: str = "") -> BaseModel:
    """Validate ``raw`` against ``root``; a violation is a one-line :class:`SpecError`:
    ``"{where}: {prefix}{key path} = {value} {what is allowed}"``."""
    try:
        return root.model_validate(raw)
    except ValidationError as exc:
        path, value, need = describe(root, exc)
        key = f"{prefix}{path}" if path else prefix.rstrip(".") or "file"
        if need.startswith("is missing"):
            raise SpecError(f"{where}: {key} {need}") from None
        raise SpecError(f"{where}: {key} = {show(value)} {need}") from None
