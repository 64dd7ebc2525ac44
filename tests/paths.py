"""Where the tests' fixtures and the repository are, defined once: `DATA` (tests/data, the
checked-in fixtures), `TESTS` (this folder) and `REPO` (the repository root). Test modules
live in folders that mirror the package (tests/families/v2/, tests/serve/, ...), so a path
made from a test file's own location would depend on how deep it sits."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
REPO = TESTS.parent
