import os

# hypothesis: deterministic and bounded, so the suite stays fast and reproducible in CI
from hypothesis import settings

settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
