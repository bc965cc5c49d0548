"""Speculative decoding / multi-token prediction: tokens per verify step."""

import numpy as np


def expected_tokens_per_step(*, draft_depth, acceptance_rate):
    r"""Expected tokens emitted per verify step with draft depth d and a constant
    per-position acceptance a (each draft accepted given all earlier ones were).

    .. math:: E = \sum_{i=0}^{d} a^{i} = \frac{1 - a^{d+1}}{1 - a}

    E lies in [1, d + 1]; the verify step always yields its own token. Source: Leviathan et al.
    2023 (arXiv:2211.17192) eq. 1; serving_facts.md. At a = 1 the limit d + 1 is taken.
    """
    # a = 1 is approached from below (relative error < 1e-8 for d < 100) to avoid 0/0
    a = np.clip(acceptance_rate, 0.0, 1.0 - 1e-10)
    d = np.maximum(draft_depth, 0.0)
    return (1.0 - a ** (d + 1.0)) / (1.0 - a)


def expected_tokens_per_step_sequence(*, draft_depth, acceptance_by_position):
    r"""Expected tokens per verify step for per-position acceptances a_1..a_D.

    .. math:: E(d) = 1 + \sum_{i=1}^{d} \prod_{j=1}^{i} a_j

    ``draft_depth`` may be an array of integers 0..D; the cumulative sums are computed once and
    read at the whole depths with ``numpy.interp`` (exact at the nodes; a per-point depth of a
    traced block, :mod:`..engine.tape`, cannot index an array). Source: as :func:`expected_tokens_per_step`, position-dependent form
    (vllm PR #38045 base x decay^i parametrisation is a special case).
    """
    a = np.asarray(acceptance_by_position, dtype=float)
    table = np.concatenate([[1.0], 1.0 + np.cumsum(np.cumprod(a))])
    return np.interp(np.trunc(np.clip(draft_depth, 0, a.size)), np.arange(table.size), table)


def acceptance_by_position(*, first_position_acceptance, decay_per_position, depth):
    r"""Per-position draft acceptance a_1..a_D, geometric in the position.

    .. math:: a_i = a_1 \, \delta^{\,i-1}, \qquad i = 1..D

    ``first_position_acceptance`` a_1 is the acceptance of the first drafted token (DeepSeek's
    "second-token acceptance"); ``decay_per_position`` δ in [0, 1] (1 = constant acceptance).
    Source: the base x decay^i parametrisation of vllm PR #38045 (serving_facts.md); δ is set
    in ``configs/realism.toml`` from TensorRT-LLM's measured MTP-1 / MTP-3 accepted lengths.
    """
    i = np.arange(int(depth), dtype=float)
    return float(first_position_acceptance) * float(decay_per_position) ** i


def acceptance_from_acceptance_lengths(acceptance_lengths):
    r"""Per-position draft acceptance a_1..a_K from a measured acceptance-length curve
    AL(1..K) (mean tokens per verify step at each draft length k, separately measured).

    A chain draft accepts position i only if every earlier one was accepted, so
    AL(k) = 1 + \sum_{i<=k} q_i with q_i = \prod_{j<=i} a_j non-increasing in i. The measured
    increments AL(k) - AL(k-1) (AL(0) = 1) are made non-increasing by pooling adjacent
    violators (the least-squares non-increasing fit, which keeps AL at the end of every
    pooled run: exact wherever the measured curve is already consistent), clipped to
    [0, 1]; then a_i = q_i / q_{i-1}.

    .. math:: a_i = q_i / q_{i-1}, \qquad q_0 = 1

    Source: the expected tokens per step of :func:`expected_tokens_per_step_sequence`
    (Leviathan et al. 2023, position-dependent form) read backwards; the curves are
    InferenceX's golden_al_distribution (configs/acceptance.toml)."""
    al = np.asarray(acceptance_lengths, dtype=float)
    inc = np.diff(np.concatenate([[1.0], al]))
    blocks = []                                   # [sum, count] of pooled runs
    for x in inc:
        blocks.append([x, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    q = np.clip(np.concatenate([np.full(c, s / c) for s, c in blocks]), 0.0, 1.0)
    prev = np.concatenate([[1.0], q[:-1]])
    return np.divide(q, prev, out=np.zeros_like(q), where=prev > 0)
