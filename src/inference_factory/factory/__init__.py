"""Factory layer: deterministic request traces and the tiered prefix KV cache."""
