"""Docs resolve every source tag in docs/REFERENCES.md and stay inside the repository."""


def test_every_source_tag_resolves_in_references_and_docs_stay_in_the_repo():
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    listed = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", (repo / "docs" / "REFERENCES.md")
                            .read_text(encoding="utf-8"), flags=re.M))
    assert len(listed) > 40
    code_names = {"BLOCK_M", "BYTES_PER_ELEMENT", "INFERENCE_FACTORY_HARDWARE_DIR",
                  "INFERENCE_FACTORY_MODELS_DIR", "NUMBA_CACHE_DIR", "HYPOTHESIS_PROFILE",
                  "INFERENCE_FACTORY_CACHE_DIR", "XDG_CACHE_HOME",
                  "KV_LEN", "PATH_ORDER", "POOL_BYTES"}
    files = [*[f for f in (repo / "docs").glob("*.md") if f.name != "REFERENCES.md"],
             repo / "README.md", *(repo / "configs").glob("*.toml"),
             *(repo / "hardware").glob("*.toml"), *(repo / "models").glob("*.toml")]
    assert any(f.suffix == ".md" for f in files)
    for f in files:
        text = f.read_text(encoding="utf-8")
        tags = set(re.findall(r"\b[A-Z][A-Z0-9]+_[A-Z0-9_]*[A-Z0-9]\b", text)) - code_names
        assert tags <= listed, f"{f.name}: {sorted(tags - listed)} not in docs/REFERENCES.md"
        if f.suffix == ".md":
            assert "shared/" not in text, f"{f.name} points outside the repository"

