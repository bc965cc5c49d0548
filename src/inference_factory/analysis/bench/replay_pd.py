"""The session replay on a disaggregated (P/D) deployment: what differs from the aggregated
one (:mod:`.replay`) is where the prefix cache lives and the KV transfer.

- **The cache lives on the prefill pool.** The prefill workers keep the radix cache and its
  host tier; the decode workers keep none: InferenceX's agentic P/D recipes at commit
  843c6254f (IMAX_REPO) run SGLang's prefill with ``enable-hierarchical-cache``
  (``hicache-ratio 0.9``, ``write_back``) and its decode with ``disable-radix-cache: true``
  (benchmarks/multi_node/srt-slurm-recipes/sglang/qwen3.5/gb300-fp4/agentic/
  disagg-gb300-1p1d-tp4-tp4-c64-mtp-hicache-session-jid2530029.yaml; the DeepSeek-V4 ones,
  sglang/deepseek-v4/agentic/disagg-gb300-2p1d-dep8-tp4-c80-mtp-kvoffload.yaml, put HiCache
  on the prefill side too), and TRT-LLM under Dynamo enables block reuse and a host cache on
  the prefill workers only (trtllm/glm5.2/gb300-fp4/agentic/
  dynamo-disagg-gb300-1p1d-tep8-c20-b5-mtp5.yaml: prefill ``enable_block_reuse: true``,
  ``host_cache_size`` 128 GiB; decode ``enable_block_reuse: false``). So here the HBM tier
  is what the prefill pool's weights, runtime reserve and one pass of prompts leave, the
  DRAM / NVMe tiers are pro rata to the prefill pool's GPUs (the same rule as aggregated),
  and a hit's restore is read at the prefill pool's TP split.
- **Every turn's whole context moves to the decode pool** (its decode worker has no cache):
  the prefix's bytes over every layer group (``Architecture.prefix_bytes``) over the
  prefill instance's NICs, as ``bench``'s P/D transfer
  (:func:`inference_factory.kernels.serving.kv_transfer_s`), per turn at its own prompt.
  ASSUMPTION (optimistic): the transfer is not overlapped with nor queued behind other
  transfers (the link is taken as free for each turn).
"""

from __future__ import annotations

import numpy as np

from ...engine import evaluate_arrays, resolve_realism
from ...kernels import serving as ks


def cache_pool_terms(m, hw, pool, axes, eng, mean_prompt: float, realism=None) -> float:
    """HBM bytes per GPU of the prefill pool the prefix cache may take: the capacity less
    weights, the runtime reserve and one pass of prompts (the engine's pass budget per rank
    of mean prompts, at their prompt length)."""
    k = max(1.0, np.floor(eng.pass_tokens_per_rank(pool.dp) / max(mean_prompt, 1.0)))
    mem = evaluate_arrays(m, hw, batch_size=k, kv_len=mean_prompt, final_len=mean_prompt,
                          variables=["hbm_used_bytes_per_gpu"], realism=realism,
                          **pool.shape, **axes)
    used = float(np.asarray(mem["hbm_used_bytes_per_gpu"], float).reshape(-1)[0])
    return max(hw.hbm_capacity_bytes - used, 0.0)


def transfer_per_turn_s(arch, hw, pool, kv_precision: str, prompt_tokens, realism=None):
    """Seconds to send each turn's whole cache (its prompt's tokens, every layer group's
    context and per-sequence terms) from the prefill instance to the decode instance: the
    instance's ``tp`` GPUs' NICs at the achieved scale-out fraction, plus one scale-out
    latency (configs/realism.toml [links], as ``bench``'s P/D)."""
    rl = resolve_realism(False, realism)
    p = np.asarray(prompt_tokens, float)
    link = hw.scale_out_bw_bytes_per_s * pool.tp * rl.out_frac
    sent = np.asarray(arch.prefix_bytes(kv_precision, p), float)
    return np.asarray(ks.kv_transfer_s(prompt_tokens=p, kv_bytes_per_token=sent / np.maximum(
        p, 1.0), link_bytes_per_s=link, latency_s=rl.out_latency_s), float)
