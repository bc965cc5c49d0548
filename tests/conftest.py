import os

# hypothesis: deterministic and bounded, so the suite stays fast and reproducible in CI
from hypothesis import settings

settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True)
# on demand, 10x the generated cases (tests/test_fuzz.py scales its properties from this):
#   HYPOTHESIS_PROFILE=fuzz python -m pytest tests/test_fuzz.py
settings.register_profile("fuzz", max_examples=1000, deadline=None, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))



# derived files (the parsed measured tables, engine.measured.read_table) go to a folder of this
# test session, not the user's cache
if "INFERENCE_FACTORY_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _cache = tempfile.mkdtemp(prefix="inference-factory-test-cache-")
    os.environ["INFERENCE_FACTORY_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
