"""An engine's own launch command for one instance of a deployment, from its profile's
``[launch]`` parts (``configs/serving_engines.toml``): the base command, the parts the
deployment uses (attention DP, expert parallelism, a draft, an FP8 cache, two-batch overlap,
the P/D role), the device recipe's flags; ``{name}`` fields filled from the deployment and
the profile's settings on the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from .engines import ServingEngine


def launch_command(eng: "ServingEngine", model: str, *, tp: int, dp: int, ep: int,
                   draft_depth: int, kv_precision: str, overlap: str, role: str,
                   dp_attention: bool) -> str:
    """The command line (one string); '' where the profile states no ``[launch]``."""
    parts = eng.launch
    if not parts:
        return ""
    use = [parts["base"]]
    if dp_attention:
        use.append(parts.get("dp_attention", ""))
    if ep > 1:
        use.append(parts.get("expert_parallel", ""))
    if draft_depth > 0:
        use.append(parts.get("speculative", ""))
    if kv_precision == "fp8":
        use.append(parts.get("kv_fp8", ""))
    if overlap == "two-batch":
        use.append(parts.get("two_batch_overlap", ""))
    if role:
        use.append(parts.get(role, ""))
    use.append(eng.flags)
    sup = eng.supports
    values = dict(model=model, tp=tp * (dp if dp_attention else 1), attn_tp=tp, dp=dp, ep=ep,
                  gpus=tp * dp, draft_depth=draft_depth, draft_tokens=draft_depth + 1,
                  max_running_requests=int(eng.requests_per_rank(1, draft_depth > 0)),
                  prefill_tokens=eng.pass_tokens(dp_attention),
                  stream_interval=eng.stream_interval_tokens,
                  recv_interval=eng.recv_interval_steps,
                  kv_connector=sup.kv_connector if sup else "",
                  cuda_graph_max_batch=sup.cuda_graph_max_batch if sup else 0)
    try:
        filled = [p.format(**values) for p in use if p]
    except (KeyError, IndexError, ValueError) as exc:
        raise SpecError(f"{eng.path}: engines.{eng.name}.launch: field {exc} is not one of "
                        f"{sorted(values)}") from None
    # ";yaml: LINE" in a part: a line of an options file written before the command
    words, yaml = [], {}
    for part in filled:
        head, *lines = part.split(";yaml:")
        words.append(head)
        for line in lines:
            key, _, val = " ".join(line.split()).partition(": ")
            yaml[key] = val                   # a later part replaces an earlier key
    command = " ".join(" ".join(words).split())
    if not yaml:
        return command
    body = "\n".join(f"{k}: {v}" for k, v in yaml.items())
    return f"cat > extra.yml <<'EOF'\n{body}\nEOF\n{command}"
