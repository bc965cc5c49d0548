"""Serving economics: revenue, cost, margins, payback, tokens per megawatt."""

import numpy as np

HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0


def capex_usd_per_gpu_hour(*, capex_usd_per_gpu, depreciation_years, residual_frac):
    r"""Straight-line depreciation of the accelerator, per hour of its life.

    .. math:: c = \frac{K (1 - r)}{Y \cdot 8760}

    K purchase price per GPU, r residual value fraction at the end of Y years. Financing,
    networking, storage, CPUs and facility capex are excluded (the seed's contribution-margin
    boundary).
    """
    return capex_usd_per_gpu * (1.0 - residual_frac) / (depreciation_years * HOURS_PER_YEAR)


def gpu_power_w(*, tdp_w, busy_frac, idle_frac_of_tdp, busy_frac_of_tdp):
    r"""Average electrical power of one GPU at a utilisation.

    .. math:: P = P_{TDP} \left[f_{idle} + u (f_{busy} - f_{idle})\right]

    f are fractions of TDP drawn when idle and when busy in the phase. The Splitwise power
    model (serving_facts.md) gives, for H100, idle 75 W, prefill 700 W, decode 380 W of a
    700 W TDP: f_idle = 0.107, f_prefill = 1.0, f_decode = 0.543.
    """
    return tdp_w * (idle_frac_of_tdp + busy_frac * (busy_frac_of_tdp - idle_frac_of_tdp))


def energy_usd_per_hour(*, power_w, pue, usd_per_kwh):
    r"""Electricity cost of a load, facility overhead included.

    .. math:: c = \frac{P}{1000} \cdot PUE \cdot p_{kWh}
    """
    return power_w / 1000.0 * pue * usd_per_kwh


def revenue_usd(*, input_hit_tokens, input_miss_tokens, output_tokens, usd_per_mtok_input_hit,
                usd_per_mtok_input_miss, usd_per_mtok_output):
    r"""API revenue of a token mix at per-million-token list prices.

    .. math:: R = 10^{-6} (n_{hit} p_{hit} + n_{miss} p_{miss} + n_{out} p_{out})
    """
    return 1e-6 * (input_hit_tokens * usd_per_mtok_input_hit
                   + input_miss_tokens * usd_per_mtok_input_miss
                   + output_tokens * usd_per_mtok_output)


def gross_margin_frac(*, revenue_usd, cost_usd):
    r"""Gross margin, (R - C) / R: the share of revenue left after the modelled costs."""
    return (revenue_usd - cost_usd) / revenue_usd


def cost_profit_margin_frac(*, revenue_usd, cost_usd):
    r"""Cost-profit margin, (R - C) / C: the form providers publish (DeepSeek's "545%")."""
    return (revenue_usd - cost_usd) / cost_usd


def usd_per_mtok(*, cost_usd, tokens):
    r"""Cost per million tokens, 10^6 C / n."""
    return 1e6 * cost_usd / tokens


def payback_months(*, capex_usd_per_gpu, monthly_margin_usd_per_gpu):
    r"""Months for one GPU's contribution (revenue minus running costs, before depreciation)
    to repay its purchase price.

    .. math:: m = \frac{K}{(R - C_{run}) / \text{month}}

    Infinite when the contribution is not positive.
    """
    with np.errstate(divide="ignore"):
        return capex_usd_per_gpu / np.maximum(monthly_margin_usd_per_gpu, 0.0)


def tokens_per_s_per_mw(*, tokens_per_s, facility_power_w):
    r"""Token throughput per megawatt of facility power, :math:`10^6 \, T / P_{fac}`; the
    power basis is the caller's (:func:`facility_power_w_per_gpu`)."""
    return tokens_per_s / (facility_power_w / 1e6)


def joules_per_token(*, tokens_per_s, facility_power_w):
    r"""Facility energy per token, :math:`E = P_{fac} / T` (J = W s); the inverse of
    :func:`tokens_per_s_per_mw` up to its 10^6. The power basis is the caller's."""
    return facility_power_w / tokens_per_s


def facility_power_w_per_gpu(*, power_basis, gpu_power_w, pue, allin_kw_per_gpu):
    r"""Facility power charged to one GPU, on a named power basis.

    .. math::
        P_{fac} = \begin{cases} P_{GPU} \cdot PUE & \text{gpu-tdp-pue} \\
                  1000 \, K_{all-in} & \text{all-in-provisioned} \end{cases}

    ``gpu-tdp-pue``: the GPU's own average draw (:func:`gpu_power_w`, Splitwise phase fractions
    of TDP) times the facility overhead; CPUs, NICs and switches are not counted, so it is
    the smallest defensible figure (700 W x 0.543 x 1.3 = 494 W for an H100 decoding at full
    load). ``all-in-provisioned``: SemiAnalysis's provisioned kW per GPU (GPU, CPU, network and
    facility, TDP-based; IMAX_TCO, 1.73 kW for H100), fixed whatever the load, the basis of
    InferenceX's tokens/s per MW. Arrays broadcast; an unknown basis raises ValueError.
    """
    if power_basis == "gpu-tdp-pue":
        return gpu_power_w * pue
    if power_basis == "all-in-provisioned":
        return 1000.0 * np.asarray(allin_kw_per_gpu, dtype=float) + 0.0 * gpu_power_w
    raise ValueError(f"power_basis {power_basis!r}: expected gpu-tdp-pue or all-in-provisioned")


def usd_per_mtok_output_all_in(*, usd_per_mtok_output, usd_per_mtok_input, isl_tokens,
                               osl_tokens):
    r"""Cost of a million output tokens with their prompts' prefill charged to them.

    .. math:: c = c_{out} + \frac{i}{o} c_{in}

    c_out, c_in: $/M output tokens of decode and $/M input tokens of prefill; i / o prompt
    tokens per output token.
    """
    return usd_per_mtok_output + isl_tokens / osl_tokens * usd_per_mtok_input
