"""``plan`` per serving engine: the candidates an engine runs on a device, priced with its
profile, and the launch command of a recommendation.

An engine's profile on a device (:meth:`inference_factory.specs.engines.ServingEngine.on`)
states what it runs there (:class:`~inference_factory.specs.engines.Supports`: modes,
attention DP, expert parallelism, speculative decoding, two-batch overlap, weight and KV
formats, instance size) and its request cap. :func:`engine_candidates` keeps, of one
device's shape grids (computed once, engine-independent), the shapes, overlap policies,
draft depths and decode batches the engine runs, and prices them through the shared
candidate builder (:func:`.candidates._candidates`) with that engine's closed loop; every
row names its engine. Nothing here adds physics.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ..full_memory import (engine_overhead_tokens, engine_pool, engine_sequences_held,
                           pool_memory_fraction)
from .candidates import _candidates


def _keep_overlaps(sg, allowed):
    """A shape grid with only the overlap policies in ``allowed`` (None: none left)."""
    keep = [i for i, ov in enumerate(sg.overlaps) if ov in allowed]
    if not keep:
        return None
    if len(keep) == len(sg.overlaps):
        return sg
    return dataclasses.replace(sg, overlaps=[sg.overlaps[i] for i in keep],
                               values=[sg.values[i] for i in keep])


def engine_candidates(eng, m, hw, prof, per_shape, isl, osl, ttft_s, tpot_s, gpus, modes, *,
                      rates, utilization, notes: list[str]) -> list[pd.DataFrame]:
    """The candidates of one device and precision profile that engine ``eng`` (resolved
    for the device) runs, priced with its profile; a refusal of the whole profile or mode
    goes to ``notes``."""
    precs = {k: v for k, v in prof.items() if k in ("weight_precision", "moe_precision",
                                                     "kv_precision")}
    why = eng.refusal(model=m, mode=eng.supports.modes[0], precisions=precs)
    if why:
        notes.append(f"{eng.label()}: {prof.get('precision', '')} refused ({why})")
        return []
    use_modes = [md for md in modes if md in eng.supports.modes]
    if not use_modes:
        return []
    overlaps = ("none", "two-batch") if eng.supports.two_batch_overlap else ("none",)
    kept = []
    for shape, sg in per_shape:
        if eng.refusal(model=m, mode=use_modes[0], tp=shape.get("tp", 1),
                       dp=shape.get("dp", 1), ep=shape.get("ep", 1)):
            continue
        sg = _keep_overlaps(sg, overlaps)
        if sg is not None:
            kept.append((shape, sg))
    if not kept:
        return []
    frames = _candidates(m, hw, prof, kept, isl, osl, ttft_s, tpot_s, gpus, use_modes,
                         rates=rates, utilization=utilization, serving_engine=eng)
    out = []
    for f in frames:
        dp = f["dp"].to_numpy(float)
        draft = f["draft_depth"].to_numpy(float)
        cap = np.where(draft > 0, eng.requests_per_rank(1, True), eng.requests_per_rank(1))
        cap = cap / np.where((dp > 1) & eng.dp_attention_divides_limits, dp, 1.0)
        ok = f["batch_size"].to_numpy(float) <= cap
        if not eng.supports.speculative:
            ok &= draft == 0
        f = f.loc[ok].copy()
        f["engine"] = eng.name
        f["engine_version"] = eng.version
        f["engine_label"] = eng.label()
        _engine_pool(f, eng, m, hw, isl + osl)
        f["runs_eager"] = eng.runs_eager(f["batch_size"].to_numpy(float))
        out.append(f)
    return out


def _engine_pool(f: pd.DataFrame, eng, m, hw, final_tokens: int) -> None:
    """The decode batch per DP rank an engine's KV pool holds at the final length
    (``kv_pool_max_batch``), by the rule ``bench``'s full-memory loop applies
    (:func:`..full_memory.engine_pool`: its pool share of the GPU at the model's context,
    less the weights, without the draft's where the draft is not in the pool, in whole
    pages; :func:`..full_memory.engine_sequences_held`: whole pages of the final length
    plus a sequence's fixed bytes in the pool's tokens,
    :func:`..full_memory.engine_overhead_tokens`); a row whose batch exceeds it does not fit (the memory
    model's fit, HBM less its runtime reserve, still applies too). An engine that states
    no share keeps the memory model's."""
    tokens = engine_pool(
        eng, context_tokens=float(m.max_position_embeddings),
        hbm_bytes=float(hw.hbm_capacity_bytes),
        weight_bytes=f["weight_bytes_per_gpu"].to_numpy(float),
        bytes_per_token=f["kv_pool_bytes_per_token_per_gpu"].to_numpy(float),
        draft_weight_bytes=f["draft_weight_bytes_per_gpu"].to_numpy(float),
        draft_bytes_per_token=f["draft_bytes_per_token_per_gpu"].to_numpy(float))
    held = np.broadcast_to(engine_sequences_held(
        eng, tokens, final_tokens=float(final_tokens),
        overhead_tokens=engine_overhead_tokens(
            eng, f["sequence_overhead_tokens"].to_numpy(float),
            bytes_per_token=f["kv_pool_bytes_per_token_per_gpu"].to_numpy(float),
            draft_bytes_per_token=f["draft_bytes_per_token_per_gpu"].to_numpy(float))),
        (len(f),))
    f["kv_pool_max_batch"] = np.minimum(held, f["max_batch_size"].to_numpy(float))
    over = f["fits"].to_numpy(bool) & (f["batch_size"].to_numpy(float) > held)
    if over.any():
        share = pool_memory_fraction(eng.kv_memory_fraction, eng.kv_pool,
                                     m.max_position_embeddings)
        f.loc[over, "fits"] = False
        f.loc[over, "meets_slo"] = False
        f.loc[over, "reason"] = (f"does not fit in {eng.name}'s KV pool ("
                                 f"{share:g} of HBM less the weights)")


def add_launch(recs: pd.DataFrame, m, engines: dict) -> pd.DataFrame:
    """The recommendations with ``launch_command``: the engine's own command for the
    recommended deployment (aggregated: one instance; P/D: the prefill and the decode
    pool's), from the profile ``engines[(hardware, engine)]``; and ``cuda_graph_note``
    where its decode batch runs outside the engine's CUDA graphs (:func:`eager_note`)."""
    out = recs.copy()
    cmds, graph = [], []
    for _, r in out.iterrows():
        eng = engines.get((r.get("hardware"), r.get("engine")))
        reason = r.get("reason")
        if eng is None or (isinstance(reason, str) and reason) or not isinstance(r.get("mode"),
                                                                                str):
            cmds.append("")
            graph.append("")
            continue
        graph.append(eager_note(eng, float(r["batch_size"])))
        common = dict(draft_depth=int(r["draft_depth"]), kv_precision=str(r["kv_precision"]),
                      overlap=str(r["overlap"]))
        repo = m.hf_repo or m.name
        if r["mode"] == "aggregated":
            cmds.append(eng.launch_command(repo, tp=int(r["tp"]), dp=int(r["dp"]),
                                           ep=int(r["ep"]), **common))
        else:
            pre = eng.launch_command(repo, tp=int(r["prefill_tp"]), dp=int(r["prefill_dp"]),
                                     ep=int(r["prefill_ep"]), role="prefill",
                                     **{**common, "overlap": str(r.get("prefill_overlap")
                                                                 or "none")})
            dec = eng.launch_command(repo, tp=int(r["tp"]), dp=int(r["dp"]), ep=int(r["ep"]),
                                     role="decode", **common)
            cmds.append(f"# prefill x{int(r['prefill_instances'])}\n{pre}\n"
                        f"# decode x{int(r['decode_instances'])}\n{dec}")
    out["launch_command"] = cmds
    out["cuda_graph_note"] = graph
    return out


def eager_note(eng, batch_per_rank) -> str:
    """One line where a decode batch per DP rank runs outside engine ``eng``'s CUDA graphs
    (:meth:`~inference_factory.specs.engines.ServingEngine.runs_eager`: above SGLang's
    --cuda-graph-max-bs, cuda_graph_runner can_run(); TensorRT-LLM's cuda_graph_config
    max_batch_size; vLLM's max capture size), else ''. The eager step's extra host launch
    time is not modelled: no component measurement of per-kernel launch overhead is in the
    reference set (aiconfigurator's only constant, vLLM's 0.8 ms per layer of prefill
    dispatch, is fitted to serving results), so such a step time is optimistic."""
    b = np.atleast_1d(np.asarray(batch_per_rank, dtype=float))
    over = b[eng.runs_eager(b)]
    if not over.size:
        return ""
    return (f"{eng.label()} runs a decode batch above {eng.supports.cuda_graph_max_batch} per "
            f"rank (up to {over.max():.4g}) eagerly, outside its CUDA graphs: step time "
            "unmodelled (optimistic there)")
