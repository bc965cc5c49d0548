"""``bench --trace``: N concurrent agent sessions replayed on one aggregated deployment, with
prefix caching over HBM, optionally CPU DRAM and NVMe.

One closed loop underneath (:mod:`..closed_loop`): at each concurrency the steady state
(:func:`~..closed_loop.solve_loop`) is solved at the requests really in flight, with the
prefill pass of the trace's mean prompt at the mean hit rate. Around it, three simulations
settle together (a fixed point, ``ROUNDS`` rounds):

1. per-turn latencies from the loop state: TTFT = poll + queue wait + max(own prefill,
   restore) -- the own prefill is the pass scaled by the turn's own batch-1 prefill time
   (its prompt and its hit) over the mean turn's; the restore is the hit's bytes per GPU
   from DRAM / NVMe at the tier's bandwidth (``Architecture.restore_s``), overlapped with the
   turn's own prefill as SGLang HiCache's layer-wise load-back does (an HBM hit costs
   nothing: the radix cache shares the pages); E2E = TTFT + (OSL - 1) TPOT;
2. :class:`.replay_sim.Schedule`: N lanes replay session trees (a root session and its
   sub-agents), each turn issued when what it waits on completes plus its think time
   (capped at the replay harness's idle-gap cap), as AIPerf's trace replay does;
3. :func:`.replay_sim.cache_hits`: the turns in start order through the factory's one
   exact-prefix LRU, HBM holding what weights, the runtime reserve and the running batch
   (decode batch B at its final lengths, the engine's memory terms) leave.

The requests in flight are ``sum E2E / duration`` (Little), duration ``= sum(tree spans) / N``
(each lane is busy with one tree at a time). docs/MODEL.md section 12's assumptions hold;
those added here are in configs/agentic.toml and the docstrings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..closed_loop import Pool, solve_loop, step_table
from ...engine import architecture, evaluate_arrays, with_mtp_acceptance
from ...errors import SpecError
from ...factory.session_io import load_sessions
from ...factory.sessions import Sessions, generate_sessions, load_shape
from ...specs import data_dir, load_hardware, load_model
from ...specs.engines import resolve_serving_engine
from .replay_metrics import turn_metrics
from .replay_sim import Schedule, agentic_constants, cache_hits

ROUNDS = 4
_HITS = np.array([0.0, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99])


def resolve_trace(trace: str | Path | Sessions) -> Sessions:
    """A :class:`Sessions`: given, a bundled shape's name (configs/traces/NAME.toml), a
    shape file (.toml) or a trace file (:func:`load_sessions`)."""
    if isinstance(trace, Sessions):
        return trace
    p = Path(trace)
    bundled = data_dir("configs") / "traces" / f"{trace}.toml"
    if p.suffix == "" and bundled.is_file():
        p = bundled
    if p.suffix.lower() == ".toml":
        if not p.is_file():
            raise SpecError(f"{p}: file not found")
        return generate_sessions(load_shape(p), source=str(p))
    return load_sessions(p)


def tier_bytes(hw, pool: Pool, kv_offload: str | None) -> tuple[float, float]:
    """DRAM and NVMe bytes of the deployment: ``dram`` the InferenceX pro-rata rule
    (configs/agentic.toml [dram_offload]), ``dram:GB`` a given size, ``+nvme`` the nodes'
    NVMe pro rata to the GPUs used."""
    if kv_offload in (None, "", "none"):
        return 0.0, 0.0
    c = agentic_constants()["dram_offload"]
    dram = nvme = 0.0
    for part in str(kv_offload).split("+"):
        name, _, size = part.partition(":")
        share = pool.gpus / hw.gpus_per_node
        if name == "dram":
            try:
                dram = float(size) * 1e9 if size else (
                    min(hw.host_dram_capacity_bytes, c["server_cap_bytes"]) * c["utilization"]
                    * share)
            except ValueError:
                dram = -1.0
            if not dram >= 0:
                raise SpecError(f"--kv-offload {kv_offload!r}: dram:GB needs a size in GB >= 0")
        elif name == "nvme":
            nvme = float(size) * 1e9 if size else hw.nvme_capacity_bytes * share
        else:
            raise SpecError(f"--kv-offload {kv_offload!r}: allowed none, dram, dram:GB, "
                            "dram+nvme")
    return dram, nvme


def bench_trace(model: str = "DeepSeek-V3", hardware: str = "B200", *,
                trace: str | Path | Sessions = "agentic_coding", tp: int = 1, dp: int = 1,
                ep: int = 1, concurrency: Iterable[int] | int = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                kv_offload: str | None = "dram", prefix_cache: bool = True,
                weight_precision=None, moe_precision=None, kv_precision=None,
                attention_precision=None, draft_depth: int = 0, acceptance_rate=None,
                engine=None, engine_time: bool = True, seed: int = 0,
                cached_input_fraction: float | None = None, price: str | None = None,
                capacity_tokens: tuple[float, float, float] | None = None,
                per_turn: bool = False) -> dict:
    """Replay a session trace at each concurrency (module docstring). Returns
    ``{"points": [one dict per concurrency, AIPerf's key names where they exist], "attrs"}``.
    ``capacity_tokens`` (HBM, DRAM, NVMe) replaces the tiers' sizes (tests, what-ifs);
    ``per_turn`` keeps each point's per-turn arrays under ``"turns"``."""
    from .serve import _concurrency, _whole

    m, hw = load_model(model), load_hardware(hardware)
    # the engine's profile on this device, as bench takes it
    eng = resolve_serving_engine(engine, "engine", hardware=hw.name)
    s = resolve_trace(trace)
    conc = _concurrency(concurrency)
    pool = Pool(1, _whole("tp", tp), _whole("dp", dp), _whole("ep", ep))
    arch = architecture(m)
    axes = {k: v for k, v in dict(weight_precision=weight_precision, moe_precision=moe_precision,
                                  kv_precision=kv_precision,
                                  attention_precision=attention_precision).items()
            if v is not None}
    axes["draft_depth"] = _whole("draft_depth", draft_depth, lo=0)
    if acceptance_rate is not None:
        axes["acceptance_rate"] = float(acceptance_rate)
    axes = with_mtp_acceptance(m, axes, [axes["draft_depth"]])
    kvp = axes.get("kv_precision", "bf16")
    inp, out = s.input_tokens.astype(float), s.output_tokens.astype(float)
    if float((inp + out).max()) > m.max_position_embeddings:
        i = int(np.argmax(inp + out))
        raise s.fail(i, "input_tokens", int(inp[i]), f"plus its output exceeds {m.name}'s "
                     f"context of {m.max_position_embeddings} tokens")
    p_mean, o_mean = float(inp.mean()), float(out.mean())
    ctx = float((out * (inp + out / 2)).sum() / out.sum())      # token-weighted decode context
    final = float((out * (inp + out)).sum() / out.sum())
    cap = eng.requests_per_rank(pool.dp)
    common = dict(mean_prompt=p_mean, decode_context=ctx, final_len=final, batch_cap=cap,
                  max_prompts=cap)
    tabs = [step_table(m, hw, pool, {**axes, "cache_hit_rate": h}, **common) for h in _HITS]
    dtab = tabs[0]
    pass_by_h = np.stack([t.pass_s for t in tabs])               # (hits, prompts)
    # batch-1 prefill of each prompt length at each hit: the per-turn scale
    p_nodes = np.geomspace(max(inp.min(), 1.0), inp.max(), 14)
    r = evaluate_arrays(m, hw, batch_size=1.0, prefill_batch_size=1.0,
                        prompt_len=p_nodes[:, None], cache_hit_rate=_HITS[None, :], kv_len=ctx,
                        final_len=final, variables=["prefill_step_s"], **pool.shape, **axes)
    t1 = np.broadcast_to(np.asarray(r["prefill_step_s"], float), (p_nodes.size, _HITS.size))
    mem = evaluate_arrays(m, hw, batch_size=dtab.batch, kv_len=ctx, final_len=final,
                          variables=["hbm_used_bytes_per_gpu"], **pool.shape, **axes)
    free_hbm = np.maximum(hw.hbm_capacity_bytes - np.broadcast_to(
        np.asarray(mem["hbm_used_bytes_per_gpu"], float), dtab.batch.shape), 0.0)
    bpt_gpu = arch.kv_bytes_per_token_per_gpu(kvp, pool.tp)
    dram_b, nvme_b = tier_bytes(hw, pool, kv_offload)
    held = pool.tp * bpt_gpu                                    # bytes per token per rank
    k = agentic_constants()
    hybrid = arch.state_bytes_per_sequence(kvp) > 0
    snap = state_gpu = 0.0
    if hybrid:
        state_gpu = sum(g.layers * g.memory.bytes_per_sequence / g.kv_split
                        for g in arch.memory_groups(kvp, pool.tp))
        # one state per radix path (mamba-max-states-per-path), amortized over its turns
        snap = state_gpu / bpt_gpu * k["hybrid_snapshot"]["states_per_path"] \
            * s.n_sessions / s.n_turns
    interval = k["hybrid_snapshot"]["track_interval_tokens"] if hybrid else None
    tier_bw = (hw.host_dram_bw_bytes_per_s, hw.nvme_bw_bytes_per_s / hw.gpus_per_node)
    sched = Schedule(s, float(k["replay"]["idle_gap_cap_s"]))
    rng_seed = seed
    points = []
    for c in conc:
        hits = np.zeros((3, s.n_turns), np.int64)
        n_eff = float(c)
        for rnd in range(ROUNDS + 1):
            h_turn = hits.sum(0) / inp
            h_bar = float(hits.sum() / inp.sum())
            ptab = dataclasses.replace(dtab, pass_s=np.array(
                [np.interp(h_bar, _HITS, pass_by_h[:, j]) for j in range(dtab.prompts.size)]))
            computed = p_mean * (1.0 - h_bar)
            pass_max = max(1.0, np.floor(eng.pass_tokens_per_rank(pool.dp) / max(computed, 1.0)))
            st = solve_loop([max(n_eff, 1.0)], colocated=True, decode=dtab, prefill=ptab,
                            decode_ranks=pool.ranks, prefill_ranks=pool.ranks, engine=eng,
                            dp_attention=pool.dp > 1, mean_prompt=computed,
                            mean_output=o_mean, pass_prompts_max=pass_max,
                            engine_time=engine_time, decode_dp=pool.dp,
                            lengths=dict(prompt_tokens=inp, output_tokens=out, seed=seed,
                                         draft_depth=float(axes["draft_depth"])))
            scale = _scale(t1, p_nodes, inp, h_turn) / _scale(t1, p_nodes, np.array([p_mean]),
                                                             np.array([h_bar]))[0]
            restore = sum(arch.restore_s(kvp, sequences=1.0, cached_tokens=hits[t].astype(float),
                                         tp=pool.tp, tier_bytes_per_s=tier_bw[t - 1])
                          for t in (1, 2))
            if rnd == ROUNDS:
                break
            wait = float(st.poll_wait_s[0] + st.queue_wait_s[0] + st.cap_wait_s[0]
                         + st.retracted_wait_s[0])
            e2e = wait + np.maximum(float(st.pass_s[0]) * scale, restore) \
                + (out - 1.0) * float(st.tpot_s[0])
            start, span = sched.run(e2e, c)
            b = float(st.decoding[0])
            caps = (float(np.interp(b, dtab.batch, free_hbm)) / bpt_gpu * pool.ranks,
                    dram_b / held, nvme_b / held) if prefix_cache else (0.0, 0.0, 0.0)
            if capacity_tokens is not None and prefix_cache:
                caps = tuple(float(x) for x in capacity_tokens)
            hits, peak = cache_hits(s, start, caps, snap, interval)
            n_eff = float(np.clip(e2e.sum() / (span.sum() / c), 1.0, c))
        met = turn_metrics(st, s, sched, start, scale, restore, hits, dtab, ptab, eng,
                           pass_max=pass_max, concurrency=c, engine_time=engine_time,
                           seed=rng_seed, ranks=pool.ranks, keep=per_turn)
        # bytes one GPU reads back from DRAM / NVMe (its KV split; a hybrid's state snapshot
        # per restored prefix)
        met["restored_bytes_per_gpu"] = float(hits[1:].sum() * bpt_gpu) + (float(
            state_gpu * (hits[1:].sum(0) > 0).sum()) if hybrid else 0.0)
        # lanes are busy span / N; the drawn latencies' excess over the mean ones the
        # schedule used (the first wave, queue tails) delays the lane that waits on it
        dur = (span.sum() + met.pop("_e2e_sum_s") - e2e.sum()) / c
        met.update(concurrency=c, num_gpus=pool.gpus, duration=dur,
                   requests_in_flight=n_eff, decode_batch_per_rank=float(st.decoding[0]),
                   **{f"kv_capacity_tokens_{t}": float(cv) for t, cv in
                      zip(("hbm", "dram", "nvme"), caps)},
                   **{f"kv_peak_occupancy_{t}": (p / cv if cv else 0.0) for t, p, cv in
                      zip(("hbm", "dram", "nvme"), peak, caps)})
        points.append(met)
    from .replay_metrics import economics
    economics(points, hw, cached_input_fraction=cached_input_fraction, price=price, model=m)
    attrs = dict(model=m.name, hardware=hw.name, deployment=pool.label(), engine=eng.name,
                 trace=s.source, turns=s.n_turns, sessions=s.n_sessions,
                 kv_offload=str(kv_offload) if prefix_cache else "no prefix cache",
                 hybrid_snapshot_interval_tokens=interval or 0, **{k_: str(v) for k_, v in
                                                                    axes.items()})
    return {"points": points, "attrs": attrs}


def _scale(t1, p_nodes, p, h):
    """Batch-1 prefill time of prompts ``p`` at hits ``h`` (log-linear in P, linear in h)."""
    lp = np.log(p_nodes)
    cols = np.stack([np.interp(np.log(p), lp, t1[:, j]) for j in range(_HITS.size)])
    j = np.clip(np.searchsorted(_HITS, h, side="right") - 1, 0, _HITS.size - 2)
    w = np.clip((h - _HITS[j]) / (_HITS[j + 1] - _HITS[j]), 0.0, 1.0)
    idx = np.arange(p.size)
    return cols[j, idx] * (1 - w) + cols[j + 1, idx] * w
