"""The session replay's latency solve at one state of the cache (:mod:`.replay`): the
prefill table at the mean hit, the closed loop at the requests in flight, each turn's
prefill scale and restore, its mean E2E. Shared by the replay's fixed point and its bands
(:mod:`.replay_bands`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..closed_loop import StepTable, solve_loop
from ...engine import architecture

#: Hit rates at which the prefill pool's passes are evaluated (interpolated between).
HITS = np.array([0.0, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99])


def prefill_table(st, h_bar: float, pass_by_h=None) -> StepTable:
    """The prefill pool's step table with its passes at the mean hit ``h_bar``."""
    pb = st.pass_by_h if pass_by_h is None else pass_by_h
    return dataclasses.replace(st.ptab0, pass_s=np.array(
        [np.interp(h_bar, HITS, pb[:, j]) for j in range(st.ptab0.prompts.size)]))


def loop_at(st, c_eff: float, h_bar: float, dtab=None, pass_by_h=None):
    """The loop state at ``c_eff`` requests in flight and mean hit ``h_bar``."""
    s, eng = st.s, st.eng
    computed = float(s.input_tokens.mean()) * (1.0 - h_bar)
    pool = st.cache_pool
    pass_max = max(1.0, np.floor(eng.pass_tokens_per_rank(pool.dp) / max(computed, 1.0)))
    ptab = prefill_table(st, h_bar, pass_by_h)
    dtab = st.dtab if dtab is None else dtab
    loop = solve_loop([max(c_eff, 1.0)], colocated=st.colocated, decode=dtab, prefill=ptab,
                      decode_ranks=st.d_pool.ranks, prefill_ranks=pool.ranks, engine=eng,
                      dp_attention=st.d_pool.dp > 1, mean_prompt=computed,
                      mean_output=float(s.output_tokens.mean()), pass_prompts_max=pass_max,
                      transfer_s=float(st.transfer_s.mean()), engine_time=st.engine_time,
                      decode_dp=st.d_pool.dp,
                      # the turns' own lengths: where the KV pool fills, the engine's
                      # admission and retraction over them (analysis.full_memory)
                      lengths=dict(prompt_tokens=s.input_tokens.astype(float),
                                   output_tokens=s.output_tokens.astype(float), seed=0,
                                   draft_depth=float(st.axes.get("draft_depth", 0))))
    return loop, ptab, dtab, pass_max


def turn_terms(st, hits):
    """Per turn: the prefill scale (own batch-1 prefill over the mean turn's) and the
    restore time from DRAM / NVMe."""
    inp = st.s.input_tokens.astype(float)
    h_turn = hits.sum(0) / inp
    h_bar = float(hits.sum() / inp.sum())
    scale = _along_hits(st.t1_turn, h_turn) / _scale(
        st.t1, st.p_nodes, np.array([inp.mean()]), np.array([h_bar]))[0]
    kvp = st.axes.get("kv_precision", "bf16")
    arch = architecture(st.m)
    restore = sum(arch.restore_s(kvp, sequences=1.0, cached_tokens=hits[t].astype(float),
                                 tp=st.cache_pool.tp, tier_bytes_per_s=st.tier_bw[t - 1])
                  for t in (1, 2))
    return h_bar, scale, restore


def e2e_of(st, loop, scale, restore) -> np.ndarray:
    """Each turn's mean E2E latency at the loop state (what the schedule replays)."""
    out = st.s.output_tokens.astype(float)
    wait = float(loop.poll_wait_s[0] + loop.queue_wait_s[0] + loop.cap_wait_s[0]
                 + (0.0 if loop.retracted_wait_s is None else loop.retracted_wait_s[0]))
    return wait + np.maximum(float(loop.pass_s[0]) * scale, restore) + st.transfer_s \
        + (out - 1.0) * float(loop.tpot_s[0])


def prompt_columns(t1, p_nodes, p):
    """Batch-1 prefill time of prompts ``p`` at every hit node (log-linear in P)."""
    lp = np.log(p_nodes)
    return np.stack([np.interp(np.log(p), lp, t1[:, j]) for j in range(HITS.size)])


def _scale(t1, p_nodes, p, h):
    """Batch-1 prefill time of prompts ``p`` at hits ``h`` (log-linear in P, linear in h)."""
    return _along_hits(prompt_columns(t1, p_nodes, p), h)


def _along_hits(cols, h):
    """Columns over the hit nodes read at hits ``h`` (linear in h)."""
    p = cols[0]
    j = np.clip(np.searchsorted(HITS, h, side="right") - 1, 0, HITS.size - 2)
    w = np.clip((h - HITS[j]) / (HITS[j + 1] - HITS[j]), 0.0, 1.0)
    idx = np.arange(p.size)
    return cols[j, idx] * (1 - w) + cols[j + 1, idx] * w
