"""No shipped model file records an absolute path into the checkout it was built in: the
recipes record the paths they are given, and a path like /home/me/codecspec/python/... is
meaningless on a user's machine (and leaks the builder's tree). Paths of other inputs (a
random checkpoint under /tmp that a map was measured on) are records, not checkout paths."""

import json
from pathlib import Path

import codecspec

MODELS = Path(codecspec.__file__).resolve().parent / "models"
PACKAGE_PART = "/python/codecspec/"


def checkout_paths(value) -> list:
    """Every string in a JSON value that is an absolute path into a source checkout."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in checkout_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in checkout_paths(v)]
    if isinstance(value, str) and value.startswith("/") and PACKAGE_PART in value:
        return [value]
    return []


def test_shipped_json_holds_no_checkout_path():
    found = {
        str(f.relative_to(MODELS)): checkout_paths(json.loads(f.read_text()))
        for f in sorted(MODELS.rglob("*.json"))
    }
    assert len(found) > 5  # the folders' reports, profiles, ablations were read
    assert not {f: p for f, p in found.items() if p}


def test_the_check_flags_an_absolute_checkout_path():
    # the broken variant: what the v3 ship wrote before its paths were made relative
    bad = {
        "files": {
            "json": "/home/builder/codecspec/python/codecspec/models/v3/ablation/ablation.json"
        }
    }
    assert checkout_paths(bad) == [bad["files"]["json"]]
    ok = {"model": "python/codecspec/models/v3/depth.onnx", "map": "/tmp/qwen3_06b_rand"}
    assert checkout_paths(ok) == []
