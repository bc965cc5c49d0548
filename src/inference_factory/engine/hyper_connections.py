"""Hyper-connections as one operation of a layer (``mhc``): the pre and post steps of
DeepSeek-V4's manifold-constrained hyper-connections around the attention and feed-forward
blocks (:mod:`inference_factory.kernels.hyper_connections`), on models whose file sets
``[architecture] hyper_connections`` (the residual stream's width in hidden vectors,
``hc_mult``). Every GPU runs them on its own tokens (the stream is not split by TP).
Costed from the measured ``mhc`` table where the device has one
(:mod:`.table_families_v4`: pre + post per layer; the RMSNorms stay small kernels of their
own), else on the roofline."""

from __future__ import annotations

from ..kernels import hyper_connections as khc
from .op import Op, roofline_key
from .precision import compute_precision
from .table_families_v4 import mhc_roofline_s

__all__ = ["mhc_ops"]


def mhc_ops(g, n_layers, tokens) -> list[Op]:
    """The ``mhc`` op of ``n_layers`` layers over ``tokens`` tokens (none where the model has
    no hyper-connections). Its parameters are read as BF16 (aiconfigurator's mHC op)."""
    m, hw = g.m, g.hw
    n, h, s = m.hyper_connections, m.hidden_size, m.hyper_connection_sinkhorn_iters
    if not n:
        return []
    return [Op("mhc", "compute", "attn0", n_layers, rate="gemm",
               precision=compute_precision(hw, "bf16") or "bf16", m_tokens=tokens,
               flop=khc.mhc_flop(tokens=tokens, hidden_size=h, hc_mult=n, sinkhorn_iters=s),
               hbm_bytes=khc.mhc_bytes(tokens=tokens, hidden_size=h, hc_mult=n),
               family="mhc", keys={"hc_mult": n, "sinkhorn_iters": s},
               nearest={"hidden_size": h}, coords=(tokens,),
               pure_fn=lambda t_: mhc_roofline_s(hw, t_, h, n, s),
               pure_key=roofline_key(hw, "mhc", h, n, s))]
