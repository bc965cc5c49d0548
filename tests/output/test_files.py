"""One module owns outputs (_io.atomic_output): nothing of the user's is ever deleted, a file
appears only when complete, and a killed write leaves no temporary behind."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from inference_factory import SpecError
from inference_factory.output.files import atomic_output, json_text, write_text_atomic


def _entries(folder):
    return sorted(os.listdir(folder))


def test_refuses_a_folder_and_keeps_it(tmp_path):
    target = tmp_path / "results"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(SpecError, match=r"is an existing folder"):
        write_text_atomic(target, "new")
    assert (target / "keep.txt").read_text() == "mine"
    assert _entries(tmp_path) == ["results"]


def test_refuses_a_missing_parent(tmp_path):
    with pytest.raises(SpecError, match=r"does not exist"):
        write_text_atomic(tmp_path / "nope" / "out.json", "x")
    assert _entries(tmp_path) == []


def test_replaces_an_existing_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert _entries(tmp_path) == ["out.json"]


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as tmp:
            with open(tmp, "w") as fh:
                fh.write("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert _entries(tmp_path) == ["out.csv"]


def test_a_new_file_is_not_created_on_error(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(tmp_path / "new.nc") as tmp:
            open(tmp, "w").write("half")
            raise KeyboardInterrupt
    assert _entries(tmp_path) == []


def test_signal_handlers_are_restored_after_the_write(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with atomic_output(tmp_path / "a.txt") as tmp:
        assert signal.getsignal(signal.SIGTERM) is not before
        open(tmp, "w").write("x")
    assert signal.getsignal(signal.SIGTERM) is before


_WRITER = textwrap.dedent("""
    import sys, time
    from inference_factory.output.files import atomic_output
    with atomic_output(sys.argv[1]) as tmp:
        with open(tmp, "w") as fh:
            fh.write("x" * 100000)
            fh.flush()
        print("writing", flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_killed_write_removes_its_temporary(tmp_path, sig):
    """SIGTERM (as SIGINT) during a write: exit, no temporary beside the target, the old
    file untouched (issue 12: SIGTERM left a 163 MB hidden temporary)."""
    target = tmp_path / "grid.csv"
    target.write_text("old")
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert len(_entries(tmp_path)) == 2            # the temporary exists meanwhile
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert rc != 0
    if sig == signal.SIGTERM:
        assert rc == 128 + signal.SIGTERM
    assert _entries(tmp_path) == ["grid.csv"]
    assert target.read_text() == "old"


def test_json_text_writes_non_finite_numbers_as_null():
    obj = {"a": math.inf, "b": [1.0, -math.inf, math.nan], "c": np.float64("inf"),
           "d": np.array([1.5, np.nan]), "e": (np.int64(3), "x")}
    assert json.loads(json_text(obj)) == {"a": None, "b": [1.0, None, None], "c": None,
                                          "d": [1.5, None], "e": [3, "x"]}
