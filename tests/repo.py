"""The repository's root folder, for tests that need it at import time (the ``repo_root`` fixture serves the rest)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
