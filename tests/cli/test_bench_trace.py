"""``bench --trace`` on the command line: JSON keys, bad input exits 2 with one line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from inference_factory.cli import cli


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


def test_trace_json_has_aiperf_keys_and_interactivity(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [{"session_id": s, "input_length": 2000 + 600 * k, "output_length": 100}
            for s in ("a", "b") for k in range(3)]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = run("bench", "--trace", str(p), "-m", "Llama-3.1-8B", "-H", "H100-SXM", "-c", "1,2",
            "--kv-offload", "none", "--json")
    assert r.exit_code == 0, r.output
    pts = json.loads(r.output)["points"]
    assert [q["concurrency"] for q in pts] == [1, 2]
    for key in ("time_to_first_token_p50_ms", "request_latency_p90_ms",
                "output_token_throughput", "e2e_normalized_interactivity_p90",
                "prefix_hit_rate_hbm", "revenue_usd_per_gpu_hour"):
        assert key in pts[0]
    # each later turn resends the previous 2000 + 600 k + 100 tokens: all of them hit
    hit = sum(2000 + 600 * (k - 1) + 100 for k in (1, 2)) / sum(2000 + 600 * k for k in range(3))
    assert pts[0]["prefix_hit_rate"] == hit


def test_bad_trace_exits_2_with_one_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"session_id": "a", "input_length": 10, "output_length": 5}\n'
                 '{"session_id": "a", "input_length": 12, "output_length": 5}\n')
    r = run("bench", "--trace", str(p), "-m", "Llama-3.1-8B", "-H", "H100-SXM", "-c", "1")
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "line 2" in lines[0] and "input_length" in lines[0]


def _trace_file(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [{"session_id": s, "input_length": 2000 + 600 * k, "output_length": 100}
            for s in ("a", "b", "c") for k in range(3)]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(p)


def test_trace_replays_a_disaggregated_deployment(tmp_path):
    r = run("bench", "--trace", _trace_file(tmp_path), "-m", "Llama-3.1-8B", "-H", "H100-SXM",
            "--prefill-pool", "1:tp=1", "--decode-pool", "1:tp=1", "-c", "2", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["attrs"]["deployment"] == "1p:tp1 + 1d:tp1"
    assert out["points"][0]["num_gpus"] == 2


def test_plan_trace_json_names_the_deployment_kind(tmp_path):
    r = run("plan", "--trace", _trace_file(tmp_path), "-m", "Llama-3.1-8B", "-H", "H100-SXM",
            "--gpus", "2", "-p", "tp=1", "--precision", "native", "--engine", "sglang",
            "-c", "1,2", "--kv-offload", "none,dram", "--e2e-interactivity", "1", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    rec = out["recommendations"][0]
    assert rec["mode"] in ("aggregated", "disaggregated") and rec["gpus"] == 2
    assert rec["e2e_normalized_interactivity_p90"] >= 1
    kinds = {(k["mode"], k["kv_offload"]) for k in out["best_per_kind"]}
    assert kinds == {(m, o) for m in ("aggregated", "disaggregated") for o in ("none", "dram")}


def test_plan_trace_refuses_what_the_trace_sets(tmp_path):
    r = run("plan", "--trace", _trace_file(tmp_path), "-m", "Llama-3.1-8B", "--isl", "2000")
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "--isl" in lines[0] and "--trace" in lines[0]
