"""Dependencies point down: decoding and calibration never reach into training code.

Loading a model must not pull in PyTorch-side training or ablation code, so `decode/` and
`calibrate/` import nothing from `codecspec.train`, not even inside a function (the check
reads every import statement, module level or not)."""

import ast
import subprocess
import sys
from pathlib import Path

import codecspec

PACKAGE = Path(codecspec.__file__).resolve().parent
LOWER = ("decode", "calibrate")
FORBIDDEN = "codecspec.train"


def imports_of(source: str, module: str) -> list:
    """Per import statement of `source` (the text of `module`): the absolute names it
    imports (a relative import resolved against the importing module's package)."""
    statements = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            statements.append({a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: -node.level]
                base = ".".join(parts + ([base] if base else []))
            statements.append({base} | {f"{base}.{a.name}" for a in node.names})
    return statements


def _forbidden(name: str) -> bool:
    return name == FORBIDDEN or name.startswith(FORBIDDEN + ".")


def violations(package_dir: Path, subpackages=LOWER) -> list:
    """One line per import statement under `subpackages` that reaches codecspec.train."""
    found = []
    for sub in subpackages:
        for path in sorted((package_dir / sub).rglob("*.py")):
            rel = path.relative_to(package_dir.parent).with_suffix("")
            for names in imports_of(path.read_text(encoding="utf-8"), ".".join(rel.parts)):
                bad = sorted(n for n in names if _forbidden(n))
                if bad:
                    found.append(f"{path.relative_to(package_dir)} imports {bad[0]}")
    return found


def test_decode_and_calibrate_import_nothing_from_train():
    assert violations(PACKAGE) == []


def test_the_check_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "codecspec"
    (pkg / "decode").mkdir(parents=True)
    (pkg / "decode" / "bad.py").write_text(
        "def load():\n    from ..train.offsets import load_offsets\n    return load_offsets\n"
    )
    (pkg / "calibrate").mkdir()
    (pkg / "calibrate" / "also_bad.py").write_text("import codecspec.train.tts_train\n")
    found = violations(pkg)
    assert len(found) == 2 and any("codecspec.train.offsets" in f for f in found)


def test_loading_a_model_and_decoding_loads_no_training_module():
    code = (
        "import sys\n"
        "import codecspec.decode, codecspec.calibrate, codecspec.tts.registry\n"
        "from codecspec.tts.registry import load_model\n"
        "load_model()\n"
        "print([m for m in sys.modules if m.startswith('codecspec.train')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.strip() == "[]"
