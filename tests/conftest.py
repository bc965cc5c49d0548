import os

# hypothesis: deterministic and bounded, so the suite stays fast and reproducible in CI
from hypothesis import settings

settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True)
# on demand, 10x the generated cases (tests/test_fuzz.py scales its properties from this):
#   HYPOTHESIS_PROFILE=fuzz python -m pytest tests/test_fuzz.py
settings.register_profile("fuzz", max_examples=1000, deadline=None, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

