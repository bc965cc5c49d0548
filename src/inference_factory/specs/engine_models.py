"""Which model families an engine profile runs on its device (``configs/serving_engines.toml``
``[model_families]``, ``[engines.X.models]``, ``[engines.X.model_supports]``): a model's
family by its name or an alias, the refusal of a family the profile does not run there (one
line naming the file, the field, its value and the families it runs), and the device's
:class:`~inference_factory.specs.engines.Supports` with the fields a family replaces. A model
in no family, or a profile without a ``models`` table, is not restricted."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from .engines import ServingEngine, Supports


def family_of(eng: "ServingEngine", model) -> str:
    """The family ``model`` (a spec, or a name or alias of a model file) belongs to by its
    name or an alias; '' where it is in none."""
    if isinstance(model, str):
        from .catalog import load_model
        try:
            model = load_model(model)
        except SpecError:
            pass                         # not a model file: the name alone
    names = {getattr(model, "name", model), *getattr(model, "aliases", ())}
    return next((f for f, ms in eng.model_families.items() if names & set(ms)), "")


def _runs_here(eng: "ServingEngine", devices) -> bool:
    """Whether ``devices`` names the profile's device, the device whose settings it takes
    (``like``) or every device ('*')."""
    return bool({eng.device, eng.settings_from, "*"} & set(devices))


def model_refusal(eng: "ServingEngine", model) -> str:
    """'' where the profile runs ``model``'s family on its device; else one line."""
    fam = family_of(eng, model)
    if not fam or not eng.models or not eng.device:
        return ""
    devices = eng.models.get(fam, ())
    if _runs_here(eng, devices):
        return ""
    here = sorted(f for f, ds in eng.models.items() if _runs_here(eng, ds))
    field = (f"engines.{eng.name}.models.{fam} = {list(devices)}" if devices else
             f"engines.{eng.name}.models has no {fam}")
    return (f"does not run {getattr(model, 'name', model)} (family {fam}) on {eng.device}: "
            f"{eng.path}: {field}; the families it runs there: {', '.join(here) or 'none'}")


def supports_for(eng: "ServingEngine", model) -> "Supports | None":
    """The device's supports with the fields ``model``'s family replaces."""
    over = eng.model_supports.get(family_of(eng, model)) if model is not None else None
    if not over or eng.supports is None:
        return eng.supports
    return dataclasses.replace(eng.supports, **{
        k: tuple(v) if isinstance(v, list) else v for k, v in over.items()})


def refusal(eng: "ServingEngine", model, deployment: dict[str, Any]) -> str:
    """Why the profile does not run ``deployment`` of ``model`` on its device ('' where it
    does): the family first, then the (family's) supports."""
    if eng.supports is None:
        return ""
    if model is not None and model_refusal(eng, model):
        return model_refusal(eng, model)
    why = supports_for(eng, model).refusal(**deployment)
    if why and model is not None and not eng.supports.refusal(**deployment):
        fam = family_of(eng, model)        # the family's own supports refused it
        why += f" for family {fam} ({eng.path}: engines.{eng.name}.model_supports.{fam})"
    return why


def read_models(path, name: str, entry: dict, families: dict, devices: dict):
    """Pop a profile's ``models`` and ``model_supports`` from its parsed ``entry``, checked:
    each family one of ``[model_families]``, each device one of the profile's or '*'."""
    models = {fam: tuple(ds) for fam, ds in (entry.pop("models") or {}).items()}
    fam_sup = {fam: {a: b for a, b in sup.items() if b is not None}
               for fam, sup in (entry.pop("model_supports") or {}).items()}
    for where, fam in [*(("models", f) for f in models), *(("model_supports", f) for f in fam_sup)]:
        if fam not in families:
            raise SpecError(f"{path}: engines.{name}.{where}.{fam}: not a family of "
                            f"[model_families]; allowed: {sorted(families)}")
    for fam, ds in models.items():
        bad = [x for x in ds if x != "*" and x not in devices]
        if bad:
            raise SpecError(f"{path}: engines.{name}.models.{fam} = {bad[0]!r} is not a device "
                            f"of the profile; allowed: {sorted(devices)} or '*'")
    return models, fam_sup
