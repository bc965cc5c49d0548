"""Hyper-connections as one operation of a layer (``mhc``): the pre and post steps of
DeepSeek-V4's manifold-constrained hyper-connections around the attention and feed-forward
blocks (:mod:`inference_factory.kernels.hyper_connections`), on models whose file sets
``[architecture] hyper_connections`` (the residual stream's width in hidden vectors,
``hc_mult``). Every GPU runs them on its own tokens (the stream is not split by TP)."""

from __future__ import annotations

from ..kernels import hyper_connections as khc
from .op import Op
from .precision import compute_precision

__all__ = ["mhc_ops"]


def mhc_ops(g, n_layers, tokens) -> list[Op]:
    """The ``mhc`` op of ``n_layers`` layers over ``tokens`` tokens (none where the model has
    no hyper-connections). Its parameters are read as BF16 (aiconfigurator's mHC op)."""
    m = g.m
    n = m.hyper_connections
    if not n:
        return []
    return [Op("mhc", "compute", "attn0", n_layers, rate="gemm",
               precision=compute_precision(g.hw, "bf16") or "bf16", m_tokens=tokens,
               flop=khc.mhc_flop(tokens=tokens, hidden_size=m.hidden_size, hc_mult=n,
                                 sinkhorn_iters=m.hyper_connection_sinkhorn_iters),
               hbm_bytes=khc.mhc_bytes(tokens=tokens, hidden_size=m.hidden_size, hc_mult=n))]
