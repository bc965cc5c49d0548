"""What one side's simulation (:func:`.simulate.simulate`) takes from its config, levers and
trace before the engine runs: the precisions the low-precision lever picks, the routed-expert
popularity of the class mix, the class tendencies of a loaded trace, static batching's useful
share, the prefix cache's token capacity per tier, the arrival rate and the trace itself.
No physics: the formulas are in :mod:`inference_factory.kernels`."""

from __future__ import annotations

import numpy as np

from ..engine import architecture
from ..errors import SpecError
from ..kernels import memory as kmem
from ..kernels import moe as kmoe
from ..kernels import serving as kserv
from ..specs import ModelSpec, load_hardware
from ..specs.realism import load_realism
from ..units import SECONDS_PER_DAY
from .config import FactoryConfig, Levers, PoolConfig, lever_precisions  # noqa: F401
from .workload import Trace, generate_trace, load_trace

def expert_popularity(m: ModelSpec, trace: Trace, seed: int) -> np.ndarray | None:
    """Routed-token share per expert for the trace's class mix: each class has its own Zipf
    hot set (exponent = the class's expert_skew) on its own seeded permutation of experts,
    weighted by the class's share of tokens."""
    if not m.is_moe:
        return None
    tokens = np.bincount(trace.class_id, weights=trace.input_tokens + trace.output_tokens,
                         minlength=len(trace.class_names))
    pop = np.zeros(m.n_routed_experts)
    for c, w in enumerate(tokens / tokens.sum()):
        base = kmoe.zipf_popularity(n_experts=m.n_routed_experts, skew=float(trace.expert_skew[c]))
        perm = np.random.default_rng(seed + 7919 * (c + 1)).permutation(m.n_routed_experts)
        pop[perm] += w * base
    return pop / pop.sum()


def with_config_class_params(trace: Trace, cfg: FactoryConfig) -> Trace:
    """Give a loaded trace (whose classes carry no tendencies) the acceptance rate and expert
    skew of the config's class of the same name; unnamed or unknown classes take the
    request-share-weighted mean of the config's classes."""
    if np.all(np.isfinite(trace.acceptance_rate)) and np.all(np.isfinite(trace.expert_skew)):
        return trace
    by_name = {c.name: c for c in cfg.workload.classes}
    shares = np.array([c.share for c in cfg.workload.classes])
    mean_acc = float(np.average([c.acceptance_rate for c in cfg.workload.classes], weights=shares))
    mean_skew = float(np.average([c.expert_skew for c in cfg.workload.classes], weights=shares))
    acc = {n: by_name[n].acceptance_rate if n in by_name else mean_acc for n in trace.class_names}
    skew = {n: by_name[n].expert_skew if n in by_name else mean_skew for n in trace.class_names}
    return trace.with_class_params(acceptance_rate=acc, expert_skew=skew)


def static_batch_efficiency(output_tokens: np.ndarray, batch: int) -> float:
    """Useful share of slot-steps in static batches of ``batch`` consecutive arrivals
    (:func:`inference_factory.kernels.serving.static_batch_efficiency`)."""
    return kserv.static_batch_efficiency(output_tokens=output_tokens, batch_size=batch)



def tier_capacity_tokens(m: ModelSpec, pool: PoolConfig, levers: Levers, kv_prec: str,
                           weight_bytes_per_gpu: float, n_gpus: float) -> tuple[float, float, float]:
    """Token capacity of each tier over the prefill pool's GPUs: a share of the HBM left after
    weights and the runtime reserve, the hosts' DRAM and NVMe (per node, from the hardware)."""
    if not levers.prefix_cache:
        return (0.0, 0.0, 0.0)
    hw = load_hardware(pool.hardware)
    # prefix KV of the full-attention layers (sliding-window layers keep <= w tokens) as the
    # pool's TP groups hold it: each of the tp GPUs keeps its split of every token, so KV
    # heads fewer than tp (and MLA's latent) are held tp / kv_split times over. The host
    # tiers mirror the device layout per rank (SGLang HiCache sizes its host pool per TP
    # rank as hicache-ratio x the device pool), so the same bytes per token size all three.
    kv_tok = pool.tp * architecture(m).kv_bytes_per_token_per_gpu(kv_prec, pool.tp)
    architecture(m).snapshot_tokens(kv_prec)   # SpecError where no KV per token sizes a tier
    nodes = n_gpus / hw.gpus_per_node
    hbm = kmem.free_hbm_cache_bytes(hbm_capacity_bytes=hw.hbm_capacity_bytes,
                                    reserve_frac=load_realism().reserve_frac,
                                    weight_bytes=weight_bytes_per_gpu,
                                    cache_frac=levers.hbm_cache_frac, n_gpus=n_gpus)
    caps = {t: float(kmem.cache_capacity_tokens(cache_bytes=b, kv_bytes_per_token=kv_tok))
            for t, b in (("hbm", hbm), ("dram", hw.host_dram_capacity_bytes * nodes),
                         ("nvme", hw.nvme_capacity_bytes * nodes))}
    return tuple(caps[t] if t in levers.cache_tiers else 0.0 for t in ("hbm", "dram", "nvme"))



def arrival_rate_per_s(cfg: FactoryConfig, trace: Trace) -> float:
    """Mean arrival rate over the day that sizes the fleet and the money [requests/s]:
    ``workload.output_tokens_per_day`` over the trace's mean output (a scenario given by its
    daily tokens); else a loaded trace's own rate, n / (last - first arrival); else the
    config's ``arrival_rate_per_s`` (the synthetic trace's daily mean)."""
    w = cfg.workload
    if w.output_tokens_per_day:
        return float(w.output_tokens_per_day / SECONDS_PER_DAY / trace.output_tokens.mean())
    if cfg.trace_path and trace.n_requests > 1 and trace.duration_s > 0:
        return float((trace.n_requests - 1) / trace.duration_s)
    return float(w.arrival_rate_per_s)


def arrival_rate_source(cfg: FactoryConfig) -> str:
    if cfg.workload.output_tokens_per_day:
        return "workload.output_tokens_per_day / mean output tokens"
    return "the trace's own (requests / span)" if cfg.trace_path else "workload.arrival_rate_per_s"


def config_trace(cfg: FactoryConfig) -> Trace:
    """The config's trace: the loaded file (its first ``trace_head`` requests when set) or
    the synthetic workload."""
    if cfg.trace_path:
        trace = load_trace(cfg.trace_path)
        if cfg.trace_head > trace.n_requests:
            raise SpecError(f"--requests {cfg.trace_head} (trace_head) exceeds the "
                            f"{trace.n_requests:,} requests of the trace {cfg.trace_path}; "
                            f"allowed 1..{trace.n_requests:,}")
        return trace.head(cfg.trace_head) if cfg.trace_head else trace
    return generate_trace(cfg.workload)


def _engine_realism(cfg: FactoryConfig, hw, realism):
    """``realism`` (None: the bundled constants) as the config's engine runs on ``hw``
    (:meth:`Realism.for_engine`); unchanged (None stays None) where the engine has no settings
    for the device or states nothing that changes the costs."""
    from ..engine import resolve_realism
    from ..specs.engines import resolve_serving_engine

    eng = resolve_serving_engine(cfg.engine, f"{cfg.path or cfg.name}: engine")
    if not eng.runs_on(hw.name):
        return realism
    rl = resolve_realism(False, realism)
    out = rl.for_engine(resolve_serving_engine(cfg.engine, f"{cfg.path or cfg.name}: engine",
                                               hardware=hw.name))
    return realism if out is rl else out


def _serving_engine(cfg: FactoryConfig):
    """The side's serving-engine profile (the config's ``engine``, else the default). The
    factory takes its name and its policy: a colocated side (``levers.pd_split = false``) is
    modelled prefill-first (a prompt's pass runs on its own and stretches the others'
    TPOT), so a profile that mixes prompt chunks into decode steps is refused there rather
    than modelled as something it is not. Its limits, poll and stream intervals and host
    times are not modelled: the pools' own ``tokens_per_gpu`` and ``max_batch_per_gpu`` set
    the passes and the batch cap (:data:`~inference_factory.specs.engines.FACTORY_IGNORES`)."""
    from ..specs.engines import list_serving_engines, load_serving_engine, resolve_serving_engine

    eng = resolve_serving_engine(cfg.engine, f"{cfg.path or cfg.name}: engine")
    if eng.prefill_mixes_with_decode(colocated=not cfg.levers.pd_split):
        fine = [n for n in list_serving_engines()
                if not load_serving_engine(n).prefill_mixes_with_decode(True)]
        raise SpecError(f"engine = {eng.name!r} mixes prompt chunks into decode steps, which "
                        f"simulate does not model on a colocated side ({cfg.name}: "
                        f"levers.pd_split = false); allowed there: {', '.join(fine)} "
                        "(or pd_split = true)")
    return eng
