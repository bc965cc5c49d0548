"""The documented API survives the layout: ``import inference_factory as inf`` names, and the
flat module paths users and notebooks import (``inference_factory.questions``, ...) are the
same module objects as their homes in the layer folders."""

import importlib
import subprocess
import sys

import pytest

import inference_factory as inf


@pytest.mark.parametrize("old, new", sorted(inf.MOVED_MODULES.items()))
def test_a_flat_module_path_is_its_new_home(old, new):
    alias = importlib.import_module(f"inference_factory.{old}")
    home = importlib.import_module(f"inference_factory.{new}")
    assert alias is home
    assert home.__spec__.name == f"inference_factory.{new}"      # its own spec, not the alias's
    assert getattr(inf, old) is home


def test_names_users_import_from_the_flat_paths():
    code = ("from inference_factory.economics import CostModel, add_economics; "
            "from inference_factory import questions; "
            "from inference_factory.sweep import load_sweep_file, run_sweep, write_result; "
            "from inference_factory.schema import HardwareFile; "
            "from inference_factory.realism import load_realism; "
            "from inference_factory.validation import predict; "
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
