"""A speculative draft's engine options and the engine's decode outputs re-read, for the
callers above the engine (``plan``, ``bench``, their bands, ``validate``).

* :func:`mtp_acceptance_by_position`: an MTP draft's acceptance per position from its first
  position's, ``a_i = a_1 decay^(i-1)``, the decay from ``configs/realism.toml``.
* :func:`with_mtp_acceptance`: the engine options of an MTP draft whose acceptance falls with
  its position, ``a_i = a_1 decay^(i-1)``, as ``simulate``, ``plan`` and ``bench`` run it.
* :func:`decode_outputs`: the decode outputs (``tokens_per_step``,
  ``decode_tokens_per_s_per_gpu``, ``decode_tokens_per_s_per_user``, ``tpot_s``) under what
  the engine's step time does not see: another expected tokens per step (a draw of the
  acceptance: the step time does not depend on it, so throughputs are ``B E / step`` and TPOT
  ``step / E``), and GPUs that also prefill every request (colocated: per GPU a request of I
  input and O output tokens takes ``I / P + O / D`` GPU-seconds, and a user gets tokens only
  while its GPUs decode). Identities of the engine's outputs, not new physics: the callers
  read these here instead of re-deriving them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import SpecError

__all__ = ["mtp_acceptance_by_position", "with_mtp_acceptance", "published_acceptance",
           "decode_outputs"]


def mtp_acceptance_by_position(first_position_acceptance: float, depth: int) -> np.ndarray:
    """An MTP draft's acceptance per position 1..``depth``, ``a_i = a_1 * decay^(i-1)``
    (:func:`inference_factory.kernels.speculative.acceptance_by_position`), the decay of
    ``configs/realism.toml`` ``[speculative]``: the one place the library reads it so."""
    from ..kernels.speculative import acceptance_by_position
    from ..specs.realism import load_realism

    return acceptance_by_position(
        first_position_acceptance=first_position_acceptance,
        decay_per_position=load_realism().acceptance_decay_per_position, depth=depth)


def with_mtp_acceptance(m, kwargs: Mapping[str, Any], draft_depth) -> dict[str, Any]:
    """The engine options with the draft's acceptance per position as ``simulate`` uses it:
    ``a_i = a_1 * decay^(i-1)`` (:func:`inference_factory.kernels.speculative.acceptance_by_position`,
    decay ``configs/realism.toml`` ``[speculative]``, a component measurement of the MTP
    head), ``a_1`` the given ``acceptance_rate`` (else the engine's default). Where no
    ``acceptance_rate`` is given and the model has a published acceptance-length curve
    (``configs/acceptance.toml``), the acceptance per position derived from that curve
    instead (:func:`published_acceptance`). A separate draft model keeps a constant
    acceptance (the decay is measured for MTP heads only)."""
    from ..axes import NUMERIC_AXES

    out = dict(kwargs)
    deepest = int(max(draft_depth)) if len(draft_depth) else 0
    if deepest < 1 or out.get("draft_model") or not m.n_mtp_modules:
        return out
    golden = published_acceptance(m) if "acceptance_rate" not in out else None
    if golden is not None:      # the model's published curve; past its depths, its last value
        acc = np.concatenate([golden, np.full(max(deepest - golden.size, 0), golden[-1])])
        out["acceptance_by_position"] = [float(a) for a in acc[:deepest]]
        return out
    a1 = float(out.pop("acceptance_rate", NUMERIC_AXES["acceptance_rate"][0]))
    out["acceptance_by_position"] = [float(a) for a in mtp_acceptance_by_position(a1, deepest)]
    return out


def published_acceptance(m, mode: str | None = None) -> np.ndarray | None:
    """The draft's acceptance per position 1..K derived from the acceptance-length curve
    published for model ``m`` (``configs/acceptance.toml``: InferenceX's golden curves, in
    thinking mode ``mode``, default the file's), or None where none is published
    (:func:`inference_factory.kernels.speculative.acceptance_from_acceptance_lengths`)."""
    from ..kernels.speculative import acceptance_from_acceptance_lengths

    entry = acceptance_curves().get(m.name)
    if entry is None:
        return None
    mode = mode or entry["mode"]
    if mode not in entry:
        raise SpecError(f"configs/acceptance.toml: [{m.name!r}] has no {mode!r} curve; "
                        f"allowed {[k for k in entry if k.startswith('thinking_')]}")
    return acceptance_from_acceptance_lengths(entry[mode])


def acceptance_curves() -> dict[str, dict[str, Any]]:
    """``configs/acceptance.toml`` by model name, each curve checked: 1 <= AL(k) <= k + 1."""
    from ..specs.files import data_dir, read_toml

    path = data_dir("configs") / "acceptance.toml"
    out = read_toml(path)
    for name, entry in out.items():
        for key in ("file", "key", "source", "draft", "mode"):
            if not isinstance(entry.get(key), str):
                raise SpecError(f"{path}: [{name!r}].{key} is missing (required, a string)")
        for mode, al in entry.items():
            if mode.startswith("thinking_") and not (
                    isinstance(al, list) and al and all(
                        isinstance(x, (int, float)) and 1 <= x <= k + 1
                        for k, x in enumerate(al, start=1))):
                raise SpecError(f"{path}: [{name!r}].{mode} = {al!r} must list AL(k) for "
                                "k = 1.. with 1 <= AL(k) <= k + 1")
    return out


def decode_outputs(res: Mapping[str, Any], *, tokens_per_step=None,
                   prefill_tokens_per_s_per_gpu=None, input_per_output_token=None
                   ) -> dict[str, Any]:
    """The engine's decode outputs in ``res`` (those present) re-read, in a new mapping.

    ``tokens_per_step``: the expected tokens per verify step ``E`` instead of the engine's
    ``E0`` (``res["tokens_per_step"]``): throughputs times ``E / E0``, TPOT over it.
    ``prefill_tokens_per_s_per_gpu`` ``P`` with ``input_per_output_token`` ``I / O``: the
    same GPUs prefill every request, so output tokens/s per GPU become
    ``D' = 1 / (1/D + (I/O) / P)``, per user times ``D' / D`` (the decode share of GPU time)
    and TPOT ``1 / per user``. Other entries of ``res`` pass through."""
    out = dict(res)
    if tokens_per_step is not None:
        tps = np.asarray(res["tokens_per_step"], dtype=float)
        r = tokens_per_step / tps
        out["tokens_per_step"] = tps * r
        for k in ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user"):
            if k in out:
                out[k] = np.asarray(out[k]) * r
        if "tpot_s" in out:
            out["tpot_s"] = np.asarray(out["tpot_s"]) / r
    if prefill_tokens_per_s_per_gpu is not None:
        d = out["decode_tokens_per_s_per_gpu"]
        d_eff = 1.0 / (1.0 / d + input_per_output_token / prefill_tokens_per_s_per_gpu)
        if "decode_tokens_per_s_per_user" in out:
            user = out["decode_tokens_per_s_per_user"] * (d_eff / d)
            out["decode_tokens_per_s_per_user"] = user
            if "tpot_s" in out:
                out["tpot_s"] = 1.0 / user
        out["decode_tokens_per_s_per_gpu"] = d_eff
    return out
