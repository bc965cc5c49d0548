"""The input schemas (inference_factory.specs.schema): published JSON Schema is current, every
bundled file conforms, and messages are one line naming file, key, value and what is allowed."""

from __future__ import annotations

import glob
import json
import tomllib
from pathlib import Path

import pytest

from inference_factory import SpecError
from inference_factory.specs import schema as S

ROOT = Path(__file__).resolve().parents[2]


#: what a pydantic release may render differently without changing what a schema says
_RENDERING = ("title", "$comment", "$schema", "$id")


def _structure(node, parent: str = ""):
    """What a schema says about the files (keys, types, bounds, descriptions), without the
    rendering details above (property names under "properties" are always kept)."""
    if isinstance(node, dict):
        return {k: _structure(v, k) for k, v in node.items()
                if parent in ("properties", "$defs") or k not in _RENDERING}
    if isinstance(node, list):
        return [_structure(v) for v in node]
    return node


def test_committed_json_schema_is_up_to_date():
    """Byte-identical with the pydantic that generated the files; with another pydantic, the
    same keys, types, bounds and descriptions (so a new pydantic release cannot fail CI)."""
    folder = ROOT / "docs" / "schema"
    expected = S.json_schemas()
    committed = {p.name for p in folder.glob("*.schema.json")}
    assert committed == set(expected), "run python docs/schema/generate.py"
    for name, text in expected.items():
        old = (folder / name).read_text()
        stale = f"{name} is stale: python docs/schema/generate.py"
        if S.PYDANTIC_VERSION in json.loads(old)["$comment"]:
            assert old == text, stale
        else:
            assert _structure(json.loads(old)) == _structure(json.loads(text)), stale


@pytest.mark.parametrize("pattern,model", [
    ("hardware/*.toml", S.HardwareFile), ("models/*.toml", S.ModelFile),
    ("configs/sweeps/*.toml", S.SweepFile),
    ("configs/[!pr]*.toml", S.FactoryConfigFile),
    ("configs/serving_engines.toml", S.ServingEnginesFile),
    ("configs/agentic.toml", S.AgenticFile)])
def test_bundled_files_conform(pattern, model):
    #: files of configs/ that are not factory configs (each has its own schema; op_groups.toml
    #: its checking loader, analysis.price_by_position.load_op_groups)
    other = ({"serving_engines.toml", "uncertainty.toml", "acceptance.toml", "bench_presets.toml",
              "agentic.toml", "op_groups.toml"}
             if model is S.FactoryConfigFile
             else set())
    files = sorted(f for f in glob.glob(str(ROOT / pattern)) if Path(f).name not in other)
    assert files
    for f in files:
        with open(f, "rb") as fh:
            S.check(model, tomllib.load(fh), f)


@pytest.mark.parametrize("raw,fragment", [
    ({"workload": {"n_requests": 10**12}},
     "workload.n_requests = 1000000000000 must be an integer in [1, 10,000,000]"),
    ({"workload": {"class": [{"name": "a"}]}}, "workload.class[0].share is missing (required)"),
    ({"levers": {"cache_tiers": ["hbm", "ssd"]}},
     "levers.cache_tiers[1] = 'ssd' is not one of ['hbm', 'dram', 'nvme']"),
    ({"decode": {"tp": True}}, "decode.tp = True must be an integer in [1, 65,536]"),
    ({"slo": {"ttft_s": float("inf")}}, "slo.ttft_s = inf must be a finite number in (0, 86400]"),
    ({"bogus": 1}, "bogus = 1 is not a known key; allowed: ['baseline', 'decode',"),
    ({"model": "DeepSeek-V3"}, "model = 'DeepSeek-V3' must be a table"),
])
def test_factory_config_messages(raw, fragment):
    with pytest.raises(SpecError) as exc:
        S.check(S.FactoryConfigFile, raw, "f.toml")
    msg = str(exc.value)
    assert msg.startswith("f.toml: ") and "\n" not in msg
    assert fragment in msg, msg


def test_huge_values_are_shown_short():
    with pytest.raises(SpecError) as exc:
        S.check(S.TraceRow, {"timestamp": 0, "input_length": 10**5000, "output_length": 1},
                "t.jsonl")
    msg = str(exc.value)
    assert "input_length = <integer of about 5001 digits>" in msg and len(msg) < 200


def test_agentic_constants_messages():
    raw = {"replay": {"idle_gap_cap_s": 300.0},
           "dram_offload": {"server_cap_bytes": 3e12, "utilization": 1.5},
           "hybrid_snapshot": {"track_interval_tokens": 8192, "states_per_path": 1},
           "pricing": {"cached_input_fraction": 0.1}}
    with pytest.raises(SpecError) as exc:
        S.check(S.AgenticFile, raw, "agentic.toml")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("agentic.toml: dram_offload.utilization = 1.5")
    assert "(0, 1]" in msg, msg
