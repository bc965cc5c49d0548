"""Documented upper bounds of every input (docs/schema/README.md), as plain numbers.

The schema (:mod:`inference_factory.specs.schema`, pydantic) and the command line's option grammar
(:mod:`inference_factory.grammar`, which must import fast) read the same constants.
"""

#: GPUs in one parallel group (tp, dp, ep, a deployment unit): 2^16, 900x the largest
#: published serving instance (DeepSeek's 144-GPU decode unit; NVL576 racks).
MAX_GPUS = 65_536
#: Tokens of one prompt, output, system prompt or context: 10^7 (Llama 4 Scout's 10M window).
MAX_TOKENS = 10_000_000
#: Requests of one synthetic workload: 10^7. Measured on configs/factory.toml's mix: 10^6
#: requests generate in 1.5 s into 63 MB of trace arrays (477 MB peak RSS with imports), so
#: the bound keeps a trace under ~1 GB; 10^12 requests raised MemoryError.
MAX_REQUESTS = 10_000_000
#: Distinct system prompts of one workload class.
MAX_SYSTEM_PROMPTS = 1_000_000
#: Mean turns per conversation.
MAX_TURNS_MEAN = 1_000.0
#: Sequences per GPU in a decode batch (a config cap).
MAX_BATCH_PER_GPU = 65_536
#: Sequences (or prompts) per data-parallel rank on an engine axis: 10^6.
MAX_BATCH = 1_000_000
#: Request arrival rate, per second.
MAX_RATE_PER_S = 1e7
#: Output tokens per day of a scenario: 10^15, 6,000x DeepSeek's published 168 B (DS_DAY6).
MAX_TOKENS_PER_DAY = 1e15
#: Trace timestamps, milliseconds from the trace start: 10^11 ms = 3.2 years.
MAX_TRACE_MS = 1e11
#: Points of one sweep unless ``--max-points`` raises it (a 10^8-point float64 variable is 0.8 GB).
MAX_SWEEP_POINTS = 100_000_000
#: Concurrency values of one ``bench --uncertainty``: each is solved once per band draw (64,
#: analysis/bench/bands.py), ~17 ms of CPU per value here (-c 1..2000 took 36 s of CPU and
#: over 2 minutes on two shared cores), so 128 values keep a band to about 2 s.
MAX_BAND_CONCURRENCIES = 128
#: Any price in US dollars (per GPU, per GPU-hour, per million tokens).
MAX_USD = 1e9
#: Rows of one tensor-core tile (realism ``tile_m_tokens``): a sanity cap, the largest batch per
#: GPU a config may ask for (real tiles are 64-256 rows).
MAX_TILE_M_TOKENS = MAX_BATCH_PER_GPU
#: A fixed latency of one collective or one layer (realism ``*_latency_us``, ``per_layer_us``):
#: one second, 5 orders of magnitude above the bundled ones (10-20 us, configs/realism.toml).
MAX_FIXED_LATENCY_US = 1_000_000
#: Small kernels per block or passes per layer (realism ``[other_kernels]``): a sanity cap, over
#: 100x the bundled counts (at most 6, configs/realism.toml).
MAX_KERNELS_PER_BLOCK = 1_000
