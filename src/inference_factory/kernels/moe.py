"""Mixture-of-experts: experts touched per step and load balance."""

import numpy as np


def expected_distinct_experts(*, n_experts, experts_per_token, tokens):
    r"""Expected number of distinct experts hit by ``tokens`` tokens routed top-k uniformly.

    .. math:: E_d = E \left[1 - \left(1 - \frac{k}{E}\right)^{T}\right]

    Each expert is chosen by a token with probability k/E; tokens route independently. At
    T = 1, E_d = k; as T grows, E_d -> E. Weights read per step are those of the experts
    actually touched (reading only top-k whatever the batch, or always all E, are both known
    defects).
    """
    return n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** tokens)


#: Below this exponent :math:`e^a < 2^{-57}`, under the rounding of a sum of whole experts:
#: clamping the argument there changes nothing beyond that rounding and keeps ``exp`` off its
#: slow underflow path (a bin of popular experts is saturated at large batches).
SATURATED_EXPONENT = -40.0


def expected_distinct_experts_popular(*, expert_hit_prob, tokens):
    r"""Expected distinct experts for non-uniform routing, summed over popularity bins.

    .. math:: E_d = \sum_j m_j \left[1 - (1 - q_j)^{T}\right]

    ``expert_hit_prob`` is a sequence of (m_j, q_j) pairs: m_j experts each chosen by a token
    with probability q_j (sum_j m_j q_j = k). Looping over a handful of bins keeps memory at
    one grid-sized array. :math:`(1 - q)^T` is computed as :math:`e^{\max(T \ln(1 - q), a_s)}`
    with :data:`SATURATED_EXPONENT` :math:`a_s` (the same within rounding), and the sum as
    :math:`\sum_j m_j - \sum_j m_j (1 - q_j)^T`: one multiply-add per bin; the subtraction
    costs at most about :math:`\sum_j m_j / E_d` ulps of E_d. Against
    :math:`\sum_j m_j\,(-\mathrm{expm1}(T \ln(1 - q_j)))`, which has no cancellation
    (DeepSeek-V3's bins, EP32 with 32 redundant experts): within 3e-15 relative for T >= 1
    (E_d >= k); below one token (a prefill pass mostly served from the cache), where
    E_d -> 0, the relative error grows: up to 7e-9 measured from 1e-6 to 1 token
    (``tests/engine/test_measured.py``).
    """
    untouched = 0.0
    for m, q in expert_hit_prob:
        untouched = untouched + m * np.exp(np.maximum(tokens * np.log1p(-q), SATURATED_EXPONENT))
    return sum(m for m, _ in expert_hit_prob) - untouched


def routing_fluctuation_factor(*, mean_tokens_per_rank, n_ranks):
    r"""Expected max/mean load over EP ranks from the randomness of routing alone.

    .. math:: f = 1 + \sqrt{\frac{2 \ln R}{\bar n}}

    Gaussian extreme-value approximation for the maximum of R roughly Poisson loads of mean
    n-bar (E[max] ~ mu + sigma sqrt(2 ln R)). Equals 1 for one rank. Finite batches are never
    perfectly balanced even when the popularity is uniform.
    """
    n_bar = np.maximum(mean_tokens_per_rank, 1e-9)
    return 1.0 + np.sqrt(2.0 * np.log(np.maximum(n_ranks, 1.0)) / n_bar)


def zipf_popularity(*, n_experts, skew):
    r"""Expert popularity p_i proportional to (i + 1)^(-s), normalised to sum 1.

    s = 0 is uniform routing; s around 1 gives a few hot experts, as measured in production
    MoE traces (the skew users set is an assumption about their traffic, not a constant).
    The one Zipf law of the library: the factory's cached-prefix and system-prompt
    popularities are this over their ranked items.
    """
    ranks = np.arange(1, int(n_experts) + 1, dtype=float)
    w = ranks ** (-float(skew))
    return w / w.sum()


def replica_counts(*, popularity, n_redundant):
    r"""Replicas per expert when ``n_redundant`` extra copies go to the hottest experts.

    Each extra replica goes, one at a time, to the expert with the highest load per replica
    :math:`p_i / r_i` at that moment (EPLB-style). Returns integer counts summing to
    E + R; each replica takes an equal share of its expert's tokens.
    """
    p = np.asarray(popularity, dtype=float)
    replicas = np.ones(p.size, dtype=int)
    for _ in range(int(n_redundant)):
        replicas[np.argmax(p / replicas)] += 1
    return replicas


def rank_load_imbalance(*, popularity, n_ranks, n_redundant=0, balanced=False, seed=0):
    r"""Max/mean routed-token load over EP ranks for a given expert popularity and placement.

    Parameters
    ----------
    popularity : 1-D array
        Share of routed tokens going to each expert (sums to 1). [fraction]
    n_ranks : int
        Expert-parallel ranks. [GPUs]
    n_redundant : int
        Extra replicas of the hottest experts (EPLB). Each replica takes an equal share of its
        expert's tokens. [experts]
    balanced : bool
        True: replicas plus longest-processing-time greedy placement (EPLB-style, DeepSeek
        ``eplb``). False: experts placed contiguously by id, ids assigned to popularity in a
        fixed pseudo-random order (what a placement unaware of load does).

    Returns
    -------
    float
        max over ranks of load / mean load (>= 1). Expert efficiency is its reciprocal.

    Notes
    -----
    Slots per rank are (E + R)/R_ep; both placements fill every rank's slots exactly.
    """
    p = np.asarray(popularity, dtype=float)
    n_exp = p.size
    n_ranks = int(n_ranks)
    if n_ranks <= 1:
        return 1.0
    slots = -(-(n_exp + int(n_redundant)) // n_ranks)   # ceil: as weight memory counts them
    if not balanced:
        # every expert on exactly one rank: ranks hold ceil or floor of E / R_ep experts (with
        # more ranks than experts some ranks hold none and the busiest carries a whole expert)
        order = np.random.default_rng(seed).permutation(n_exp)
        loads = np.array([c.sum() for c in np.array_split(p[order], n_ranks)])
        return float(loads.max() / (p.sum() / n_ranks))
    replicas = replica_counts(popularity=p, n_redundant=n_redundant)
    items = np.repeat(p / replicas, replicas)
    items = np.sort(items)[::-1]
    loads = np.zeros(n_ranks)
    counts = np.zeros(n_ranks, dtype=int)
    for w in items:
        open_ranks = np.flatnonzero(counts < slots) if slots * n_ranks >= items.size else np.arange(n_ranks)
        r = open_ranks[np.argmin(loads[open_ranks])]
        loads[r] += w
        counts[r] += 1
    return float(loads.max() / (p.sum() / n_ranks))


def busiest_rank_excess_s(*, mean_pairs, load_factor, compute_s_per_pair):
    r"""Time the busiest EP rank's grouped expert GEMM takes beyond a balanced rank's.

    .. math:: \Delta t = (L - 1)\, \bar n\, \tau_c

    :math:`\bar n` token-expert pairs per rank on average (``mean_pairs``), the busiest rank
    holding :math:`L \bar n` (``load_factor`` L >= 1, expert placement and routing noise), and
    :math:`\tau_c` the kernel's time per pair where it is compute-bound
    (``compute_s_per_pair``): measured, :math:`t(n_{ref}) / \text{pairs}(n_{ref})` at the
    largest token count measured for the kernel's shape and dtype on the device (any phase of
    its table), where that row is compute-bound by :func:`is_compute_bound`; else the
    realistic roofline's compute time per pair. A curve that stops while the kernel still
    streams weights (H200 wide-EP decode, EP 8: 382 us at 32 tokens, 385 us at 1024) would
    give the weight stream per pair (0.38 us, against 0.080 us from the same shape's
    131072-token prefill row). The busiest rank then takes :math:`t_{bal} + \Delta t`, where
    :math:`t_{bal}` is the balanced kernel's time at the same tokens.

    Assumption: the rank streams the weights of its experts once whatever their load, and the
    pairs beyond the mean are computed at the kernel's compute-bound rate, not hidden under
    that weight stream (a hot expert needs more M tiles, the cold ones still one each). Where
    the balanced kernel is itself compute-bound, :math:`t_{bal} = \bar n \tau_c` and the sum
    is :math:`L\,t_{bal}`, the load times the work; where it streams weights (decode), the
    excess stays. A roofline :math:`\max(L t_F, t_B)` instead puts no cost on the load until
    it turns compute-bound.

    Source (component measurements, NVIDIA aiconfigurator ``moe_perf.parquet``, B200,
    TensorRT-LLM 1.3.0rc20 CUTLASS NVFP4, DeepSeek shape, EP 8, busiest rank timed under
    power-law routing, collector/helper.py ``_generate_power_law_distribution``): the
    balanced kernel is flat at 282-330 us from 256 to 4096 tokens (it streams weights),
    yet the skewed one costs 47, 108, 214, 318, 707 us more at 1024-16384 tokens: 0.77, 0.88,
    0.87, 0.65, 0.72 times the balanced 16384-token time scaled to those tokens, i.e. an
    excess linear in the tokens at the compute-bound rate (L - 1 about 0.8 at every size;
    EP 32: 0.87, 0.73, 0.93, 0.75, 0.61). Not fitted: L comes from the engine's placement.
    """
    return np.maximum(load_factor - 1.0, 0.0) * mean_pairs * compute_s_per_pair


#: Log-log slope of a kernel's time over its token count from which it counts as
#: compute-bound: where compute and the weight stream add, t = B + tau n, the slope
#: d ln t / d ln n = tau n / t is the compute share of the time, and the roofline's ridge
#: (compute time = memory time) is a share of 1/2. Derived, not fitted.
COMPUTE_BOUND_SLOPE = 0.5


def is_compute_bound(*, t_s, t_prev_s, tokens, prev_tokens):
    r"""Whether a measured kernel is compute-bound at ``tokens``, from its time there and at
    the measured token count below (``prev_tokens``).

    .. math:: s = \frac{\ln(t / t_{prev})}{\ln(n / n_{prev})} \ge \tfrac{1}{2}

    A weight-streaming kernel is flat in the tokens (s near 0), a compute-bound one linear
    (s near 1). With the time as B + tau n (streaming and compute not overlapped), s is the
    compute share tau n / t at the interval, and the roofline's ridge, where the compute
    time equals the memory time, is s = 1/2 (:data:`COMPUTE_BOUND_SLOPE`). Example (H200
    SGLang DeepGEMM wide-EP, DeepSeek shape, FP8, EP 8, ``hardware/measured/H200-SXM/
    moe_wideep.csv``): decode 384.1 -> 385.2 us from 512 to 1024 tokens, s = 0.004 (not
    compute-bound); prefill 5053 -> 10440 us from 65536 to 131072 tokens, s = 1.05.
    """
    if not (t_s > 0 and t_prev_s > 0 and tokens > prev_tokens > 0):
        return False
    slope = np.log(t_s / t_prev_s) / np.log(tokens / prev_tokens)
    return bool(slope >= COMPUTE_BOUND_SLOPE)
