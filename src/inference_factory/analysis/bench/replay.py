"""``bench --trace``: N concurrent agent sessions replayed on one deployment (aggregated, or
disaggregated into a prefill and a decode pool), with prefix caching over HBM, optionally
CPU DRAM and NVMe.

One closed loop underneath (:mod:`..closed_loop`): at each concurrency the steady state
(:func:`~..closed_loop.solve_loop`) is solved at the requests really in flight, with the
prefill pass of the trace's mean prompt at the mean hit rate. Around it, three simulations
settle together (a fixed point, ``ROUNDS`` rounds):

1. per-turn latencies from the loop state: TTFT = poll + queue wait + max(own prefill,
   restore) (+ the KV transfer to the decode pool, P/D) -- the own prefill is the pass
   scaled by the turn's own batch-1 prefill time (its prompt and its hit) over the mean
   turn's; the restore is the hit's bytes per GPU from DRAM / NVMe at the tier's bandwidth
   (``Architecture.restore_s``), overlapped with the turn's own prefill as SGLang HiCache's
   layer-wise load-back does (an HBM hit costs nothing: the radix cache shares the pages);
   E2E = TTFT + (OSL - 1) TPOT;
2. :class:`.replay_sim.Schedule`: N lanes replay session trees (a root session and its
   sub-agents), each turn issued when what it waits on completes plus its think time
   (capped at the replay harness's idle-gap cap), as AIPerf's trace replay does;
3. :func:`.replay_sim.cache_hits`: the turns in start order through the factory's one
   exact-prefix LRU, HBM holding what weights, the runtime reserve and the running batch
   (decode batch B at its final lengths, the engine's memory terms) leave.

The requests in flight are ``sum E2E / duration`` (Little), duration ``= sum(tree spans) / N``
(each lane is busy with one tree at a time). The deployment's set-up (step tables, memory,
the schedule's structure) is built once (:func:`prepare_replay`) and replayed at any
concurrency and KV tiers (:func:`replay_point`): ``plan --trace`` searches through it.
Disaggregated deployments: :mod:`.replay_pd`. docs/MODEL.md section 12's assumptions hold;
those added here are in configs/agentic.toml and the docstrings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..closed_loop import Pool, StepTable, step_table
from ...engine import architecture, evaluate_arrays, with_mtp_acceptance
from ...errors import SpecError
from ...factory.session_io import load_sessions
from ...factory.sessions import Sessions, generate_sessions, load_shape
from ...specs import data_dir, load_hardware, load_model
from ...specs.engines import resolve_serving_engine
from .replay_metrics import turn_metrics
from .replay_pd import cache_pool_terms, transfer_per_turn_s
from .replay_sim import Schedule, agentic_constants, cache_hits
from .replay_solve import HITS, prompt_columns, e2e_of, loop_at, turn_terms

ROUNDS = 4


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


@dataclasses.dataclass
class ReplaySetup:
    """One deployment's replay, built once (:func:`prepare_replay`): the trace and its
    schedule, the decode and prefill step tables, the per-turn prefill scale, the memory the
    prefix cache may take and the tiers' terms. ``cache_pool`` holds the cache and prefills
    (aggregated: the one pool; P/D: the prefill pool)."""

    m: Any
    hw: Any
    eng: Any
    s: Sessions
    sched: Schedule
    axes: dict
    d_pool: Pool
    cache_pool: Pool
    colocated: bool
    dtab: StepTable
    ptab0: StepTable               # the prefill pool's table at hit 0
    pass_by_h: np.ndarray          # (hits, prompts) prefill pass times
    p_nodes: np.ndarray
    t1: np.ndarray                 # batch-1 prefill (prompt nodes, hits)
    t1_turn: np.ndarray            # batch-1 prefill (hits, turns) at each turn's prompt
    free_hbm: np.ndarray           # bytes per GPU the cache may take, per decode batch node
    batch_nodes: np.ndarray
    bpt_gpu: float
    snap: float
    state_gpu: float
    interval: float | None
    tier_bw: tuple
    transfer_s: np.ndarray         # per turn (0 aggregated)
    engine_time: bool
    lengths: dict                  # the step tables' kv_len, prompt_len, final_len

    @property
    def gpus(self) -> int:
        return self.d_pool.gpus + (0 if self.colocated else self.cache_pool.gpus)

    def deployment(self) -> str:
        if self.colocated:
            return self.d_pool.label()
        p, d = self.cache_pool, self.d_pool
        return f"{p.instances}p:{p.label()} + {d.instances}d:{d.label()}"


def prepare_replay(model="DeepSeek-V3", hardware="B200", *, trace="agentic_coding",
                   tp: int = 1, dp: int = 1, ep: int = 1, prefill_pool: Pool | None = None,
                   decode_pool: Pool | None = None, weight_precision=None, moe_precision=None,
                   kv_precision=None, attention_precision=None, draft_depth: int = 0,
                   acceptance_rate=None, engine=None, engine_time: bool = True,
                   realism=None) -> ReplaySetup:
    """The set-up of :func:`bench_trace` for one deployment (module docstring). Aggregated
    (``tp``, ``dp``, ``ep``) unless ``prefill_pool`` and ``decode_pool`` are given."""
    from .serve import _pool, _whole

    m, hw = load_model(model), load_hardware(hardware)
    # the engine's profile on this device, as bench resolves it
    eng = resolve_serving_engine(engine, "engine", hardware=hw.name).with_draft(draft_depth)
    s = resolve_trace(trace)
    p_pool, d_pool = _pool(prefill_pool, "prefill_pool"), _pool(decode_pool, "decode_pool")
    if (p_pool is None) != (d_pool is None):
        raise SpecError("a disaggregated deployment needs both prefill_pool and decode_pool")
    colocated = p_pool is None
    if colocated:
        p_pool = d_pool = Pool(1, _whole("tp", tp), _whole("dp", dp), _whole("ep", ep))
    depth = _whole("draft_depth", draft_depth, lo=0)
    if eng.model_refusal(m):
        raise SpecError(f"engine {eng.name} {eng.model_refusal(m)}")
    for pool in {d_pool, p_pool}:
        why = eng.refusal(model=m, mode="aggregated" if colocated else "disaggregated",
                          tp=pool.tp,
                          dp=pool.dp, ep=pool.ep, draft_depth=depth)
        if why:
            raise SpecError(f"engine {eng.label()} does not run {pool.label()}"
                            f"{'' if colocated else ' pools'}: {why} ({eng.source}); "
                            "see docs/ENGINES.md or name another --engine")
    arch = architecture(m)
    axes = {k: v for k, v in dict(weight_precision=weight_precision, moe_precision=moe_precision,
                                  kv_precision=kv_precision,
                                  attention_precision=attention_precision).items()
            if v is not None}
    axes["draft_depth"] = depth
    if acceptance_rate is not None:
        axes["acceptance_rate"] = float(acceptance_rate)
    axes = with_mtp_acceptance(m, axes, [axes["draft_depth"]])
    kvp = axes.get("kv_precision", "bf16")
    inp, out = s.input_tokens.astype(float), s.output_tokens.astype(float)
    if float((inp + out).max()) > m.max_position_embeddings:
        i = int(np.argmax(inp + out))
        raise s.fail(i, "input_tokens", int(inp[i]), f"plus its output exceeds {m.name}'s "
                     f"context of {m.max_position_embeddings} tokens")
    p_mean = float(inp.mean())
    ctx = float((out * (inp + out / 2)).sum() / out.sum())      # token-weighted decode context
    final = float((out * (inp + out)).sum() / out.sum())
    cap = eng.requests_per_rank(d_pool.dp)
    lengths = dict(mean_prompt=p_mean, decode_context=ctx, final_len=final, realism=realism)
    dtab = step_table(m, hw, d_pool, {**axes, "cache_hit_rate": 0.0}, batch_cap=cap,
                      max_prompts=cap, **lengths)
    p_cap = eng.requests_per_rank(p_pool.dp)
    tabs = [dtab if colocated and h == 0.0 else
            step_table(m, hw, p_pool, {**axes, "cache_hit_rate": h}, batch_cap=p_cap,
                       max_prompts=p_cap, **lengths) for h in HITS]
    pass_by_h = np.stack([t.pass_s for t in tabs])               # (hits, prompts)
    # batch-1 prefill of each prompt length at each hit: the per-turn scale
    p_nodes = np.geomspace(max(inp.min(), 1.0), inp.max(), 14)
    r = evaluate_arrays(m, hw, batch_size=1.0, prefill_batch_size=1.0,
                        prompt_len=p_nodes[:, None], cache_hit_rate=HITS[None, :], kv_len=ctx,
                        final_len=final, variables=["prefill_step_s"], realism=realism,
                        **p_pool.shape, **axes)
    t1 = np.broadcast_to(np.asarray(r["prefill_step_s"], float), (p_nodes.size, HITS.size))
    k = agentic_constants()
    hybrid = arch.state_bytes_per_sequence(kvp) > 0
    bpt_gpu = arch.kv_bytes_per_token_per_gpu(kvp, p_pool.tp)
    snap = state_gpu = 0.0
    if hybrid:
        state_gpu = sum(g.layers * g.memory.bytes_per_sequence / g.kv_split
                        for g in arch.memory_groups(kvp, p_pool.tp))
        # one state per radix path (mamba-max-states-per-path), amortized over its turns
        snap = state_gpu / bpt_gpu * k["hybrid_snapshot"]["states_per_path"] \
            * s.n_sessions / s.n_turns
    if colocated:
        mem = evaluate_arrays(m, hw, batch_size=dtab.batch, kv_len=ctx, final_len=final,
                              variables=["hbm_used_bytes_per_gpu"], realism=realism,
                              **p_pool.shape, **axes)
        free_hbm = np.maximum(hw.hbm_capacity_bytes - np.broadcast_to(
            np.asarray(mem["hbm_used_bytes_per_gpu"], float), dtab.batch.shape), 0.0)
        transfer = np.zeros(s.n_turns)
    else:
        free_hbm = np.full(dtab.batch.shape, cache_pool_terms(m, hw, p_pool, axes, eng,
                                                              p_mean, realism))
        transfer = transfer_per_turn_s(arch, hw, p_pool, kvp, inp, realism)
    return ReplaySetup(
        m=m, hw=hw, eng=eng, s=s, sched=Schedule(s, float(k["replay"]["idle_gap_cap_s"])),
        axes=axes, d_pool=d_pool, cache_pool=p_pool, colocated=colocated, dtab=dtab,
        pass_by_h=pass_by_h, ptab0=tabs[0], p_nodes=p_nodes, t1=t1,
        t1_turn=prompt_columns(t1, p_nodes, inp),
        free_hbm=free_hbm, batch_nodes=dtab.batch, bpt_gpu=bpt_gpu, snap=snap,
        state_gpu=state_gpu,
        interval=k["hybrid_snapshot"]["track_interval_tokens"] if hybrid else None,
        tier_bw=(hw.host_dram_bw_bytes_per_s, hw.nvme_bw_bytes_per_s / hw.gpus_per_node),
        transfer_s=transfer, engine_time=engine_time,
        lengths=dict(kv_len=ctx, prompt_len=p_mean, final_len=final))


def replay_point(st: ReplaySetup, c: int, *, kv_offload: str | None = "dram",
                 prefix_cache: bool = True, capacity_tokens=None, seed: int = 0,
                 per_turn: bool = False) -> dict:
    """One concurrency of the replay (module docstring), economics apart."""
    s = st.s
    dram_b, nvme_b = tier_bytes(st.hw, st.cache_pool, kv_offload)
    held = st.cache_pool.tp * st.bpt_gpu                         # bytes per token per rank
    hits = np.zeros((3, s.n_turns), np.int64)
    n_eff = float(c)
    tier_hits = 0
    for rnd in range(ROUNDS + 1):
        h_bar, scale, restore = turn_terms(st, hits)
        loop, ptab, dtab, pass_max = loop_at(st, n_eff, h_bar)
        if rnd == ROUNDS:
            break
        e2e = e2e_of(st, loop, scale, restore)
        start, span = st.sched.run(e2e, c)
        b = float(loop.decoding[0])
        free = float(np.interp(b, st.batch_nodes, st.free_hbm))
        caps = (free / st.bpt_gpu * st.cache_pool.ranks, dram_b / held,
                nvme_b / held) if prefix_cache else (0.0, 0.0, 0.0)
        if capacity_tokens is not None and prefix_cache:
            caps = tuple(float(x) for x in capacity_tokens)
        hits, peak = cache_hits(s, start, caps, st.snap, st.interval)
        tier_hits = max(tier_hits, int(hits[1:].sum()))
        n_eff = float(np.clip(e2e.sum() / (span.sum() / c), 1.0, c))
    met = turn_metrics(loop, s, st.sched, start, scale, restore, hits, dtab, ptab, st.eng,
                       pass_max=pass_max, concurrency=c, engine_time=st.engine_time,
                       seed=seed, ranks=st.cache_pool.ranks, transfer=st.transfer_s,
                       colocated=st.colocated,
                       keep=per_turn)
    # bytes one GPU reads back from DRAM / NVMe (its KV split; a hybrid's state snapshot
    # per restored prefix)
    met["restored_bytes_per_gpu"] = float(hits[1:].sum() * st.bpt_gpu) + (float(
        st.state_gpu * (hits[1:].sum(0) > 0).sum()) if st.interval is not None else 0.0)
    # lanes are busy span / N; the drawn latencies' excess over the mean ones the
    # schedule used (the first wave, queue tails) delays the lane that waits on it
    dur = (span.sum() + met.pop("_e2e_sum_s") - e2e.sum()) / c
    met.update(concurrency=c, num_gpus=st.gpus, duration=dur,
               requests_in_flight=n_eff, decode_batch_per_rank=float(loop.decoding[0]),
               **{f"kv_capacity_tokens_{t}": float(cv) for t, cv in
                  zip(("hbm", "dram", "nvme"), caps)},
               **{f"kv_peak_occupancy_{t}": (p / cv if cv else 0.0) for t, p, cv in
                  zip(("hbm", "dram", "nvme"), peak, caps)})
    # tier_hits: the most tokens DRAM / NVMe served in any round (0: nothing came back from
    # them, so HBM alone replays the same sequence)
    met["_state"] = dict(loop=loop, hits=hits, start=start, span=span, e2e=e2e,
                         n_eff=n_eff, pass_max=pass_max, tier_hit_tokens=tier_hits)
    return met


def bench_trace(model: str = "DeepSeek-V3", hardware: str = "B200", *,
                trace: str | Path | Sessions = "agentic_coding", tp: int = 1, dp: int = 1,
                ep: int = 1, prefill_pool=None, decode_pool=None,
                concurrency: Iterable[int] | int = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                kv_offload: str | None = "dram", prefix_cache: bool = True,
                weight_precision=None, moe_precision=None, kv_precision=None,
                attention_precision=None, draft_depth: int = 0, acceptance_rate=None,
                engine=None, engine_time: bool = True, seed: int = 0,
                cached_input_fraction: float | None = None, price: str | None = None,
                capacity_tokens: tuple[float, float, float] | None = None,
                per_turn: bool = False, uncertainty: Any = None) -> dict:
    """Replay a session trace at each concurrency (module docstring). Returns
    ``{"points": [one dict per concurrency, AIPerf's key names where they exist], "attrs"}``.
    ``prefill_pool`` and ``decode_pool`` (``Pool`` or mappings) replay a disaggregated
    deployment (:mod:`.replay_pd`). ``capacity_tokens`` (HBM, DRAM, NVMe) replaces the tiers'
    sizes (tests, what-ifs); ``per_turn`` keeps each point's per-turn arrays under
    ``"turns"``; ``uncertainty`` (True, "components" or an ``Uncertainty``) adds
    ``<name>_low`` / ``_high`` bands (:mod:`.replay_bands`)."""
    from .serve import _concurrency

    conc = _concurrency(concurrency)
    st = prepare_replay(model, hardware, trace=trace, tp=tp, dp=dp, ep=ep,
                        prefill_pool=prefill_pool, decode_pool=decode_pool,
                        weight_precision=weight_precision, moe_precision=moe_precision,
                        kv_precision=kv_precision, attention_precision=attention_precision,
                        draft_depth=draft_depth, acceptance_rate=acceptance_rate,
                        engine=engine, engine_time=engine_time)
    from .replay_metrics import economics
    bands = None
    if uncertainty is not None and uncertainty is not False:
        from .replay_bands import ReplayBands
        bands = ReplayBands(st, uncertainty)
    points = []
    for c in conc:
        p = replay_point(st, c, kv_offload=kv_offload, prefix_cache=prefix_cache,
                         capacity_tokens=capacity_tokens, seed=seed, per_turn=per_turn)
        state = p.pop("_state")
        economics([p], st.hw, cached_input_fraction=cached_input_fraction, price=price,
                  model=st.m)
        if bands is not None:
            p.update(bands.of(p, state, seed=seed, cached_input_fraction=cached_input_fraction,
                              price=price))
        points.append(p)
    s = st.s
    attrs = dict(model=st.m.name, hardware=st.hw.name, deployment=st.deployment(),
                 engine=st.eng.name, trace=s.source, turns=s.n_turns, sessions=s.n_sessions,
                 kv_offload=str(kv_offload) if prefix_cache else "no prefix cache",
                 hybrid_snapshot_interval_tokens=st.interval or 0,
                 **{k_: str(v) for k_, v in st.axes.items()})
    return {"points": points, "attrs": attrs}


