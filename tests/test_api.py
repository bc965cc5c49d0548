"""The documented API survives the layout: ``import inference_factory as inf`` names, and the
module paths users and notebooks import (``inference_factory.analysis.questions``, ...) are
their homes in the layer folders (the earlier flat paths and their import hook are gone)."""

import importlib
import subprocess
import sys

import pytest

import inference_factory as inf


#: earlier flat module -> its home in the layered package
MOVED_MODULES = {"questions": "analysis.questions", "economics": "analysis.economics",
                 "sweep": "analysis.sweep", "validation": "analysis.validation",
                 "schema": "specs.schema", "realism": "specs.realism"}


@pytest.mark.parametrize("old, new", sorted(MOVED_MODULES.items()))
def test_a_module_is_imported_from_its_home(old, new):
    home = importlib.import_module(f"inference_factory.{new}")
    assert home.__spec__.name == f"inference_factory.{new}"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"inference_factory.{old}")


def test_names_users_import_from_their_homes():
    code = ("from inference_factory.analysis.economics import CostModel, add_economics; "
            "from inference_factory.analysis import questions; "
            "from inference_factory.analysis.sweep import load_sweep_file, run_sweep, "
            "write_result; "
            "from inference_factory.specs.schema import HardwareFile; "
            "from inference_factory.specs.realism import load_realism; "
            "from inference_factory.analysis.validation import predict; "
            "import inference_factory.analysis.questions as q; "
            "assert questions is q; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_package_names():
    for name in inf.__all__:
        assert getattr(inf, name) is not None, name
    assert callable(inf.evaluate) and callable(inf.plan) and callable(inf.to_dataframe)
    with pytest.raises(AttributeError):
        inf.no_such_name
