"""Regenerate the JSON Schema files beside this script from inference_factory.specs.schema.

    python docs/schema/generate.py

tests/specs/test_schema.py fails when a committed file differs from what this writes.
"""

from pathlib import Path

from inference_factory.specs.schema import write_json_schemas

if __name__ == "__main__":
    for path in write_json_schemas(Path(__file__).resolve().parent):
        print(path)
