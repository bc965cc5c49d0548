"""``python -m inference_factory``: same as the ``inference-factory`` command."""

from .cli import main

if __name__ == "__main__":
    main()
