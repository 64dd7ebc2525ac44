"""Dependencies point down: shared code never reaches into a family or training code.

Loading a model must not pull in PyTorch-side training or ablation code, so `decode/` and
`calibrate/` import nothing from `codecspec.train`, not even inside a function (the check
reads every import statement, module level or not). The shared packages (the pipeline's
protocol and registry, decoding, the runtime, the graph builders, the codec, calibration, the
serving engine and server, the text front end in tts/) name no family either: they import
nothing from `codecspec.families` or `codecspec.train` (the registry names families by module
path strings, which are not imports). The CLI and train/'s shared training code name no
family (the CLI reaches a family's own commands through the registry's hooks; it may run
train/'s ablation), and no CLI module defines a flag that a family's `cli_options` adds: a
family's flags come from the family. No family imports another family's package: what two
share is shared code (`codecspec.tts.text.PhonemeModel`, `codecspec.train.networks`, ...).
And the top-level subpackages import each other in no cycle (lazy imports included): a
helper two packages share lives in the lower one. Every check is shown a broken tree it
must flag."""

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import codecspec

PACKAGE = Path(codecspec.__file__).resolve().parent
LOWER = ("decode", "calibrate")
FORBIDDEN = "codecspec.train"
SHARED = ("pipeline", "decode", "runtime", "graphs", "codec", "calibrate", "serve", "tts")
FAMILY_CODE = ("codecspec.families", "codecspec.train")
# Shared too, but allowed training code: `codecspec ablate` runs train/ablate.py, and train/
# is where the families' shared training parts live.
NO_FAMILY = ("cli", "train")
FAMILIES = ("codecspec.families",)


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


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _forbidden(name: str) -> bool:
    return _under(name, (FORBIDDEN,))


def _modules(package_dir: Path, sub: str):
    """(path, dotted module name) of every module under package_dir/sub."""
    for path in sorted((package_dir / sub).rglob("*.py")):
        rel = path.relative_to(package_dir.parent).with_suffix("")
        yield path, ".".join(rel.parts)


def violations(package_dir: Path, subpackages=LOWER, forbidden=(FORBIDDEN,)) -> list:
    """One line per import statement under `subpackages` that reaches one of `forbidden`."""
    found = []
    for sub in subpackages:
        for path, module in _modules(package_dir, sub):
            for names in imports_of(path.read_text(encoding="utf-8"), module):
                bad = sorted(n for n in names if _under(n, forbidden))
                if bad:
                    found.append(f"{path.relative_to(package_dir)} imports {bad[0]}")
    return found


def cross_family_imports(package_dir: Path) -> list:
    """One line per import statement of a family package that reaches another family's."""
    found = []
    root = package_dir / "families"
    if not root.is_dir():
        return found
    for fam in sorted(p.name for p in root.iterdir() if p.is_dir()):
        others = tuple(
            f"{package_dir.name}.families.{o.name}"
            for o in root.iterdir()
            if o.is_dir() and o.name != fam
        )
        found += violations(package_dir, (f"families/{fam}",), others)
    return found


def subpackage_graph(package_dir: Path) -> dict:
    """Top-level subpackage -> the other top-level subpackages its modules import (every
    import statement, lazy ones too)."""
    root = package_dir.name
    subs = sorted(p.name for p in package_dir.iterdir() if (p / "__init__.py").is_file())
    graph = {s: set() for s in subs}
    for sub in subs:
        for path, module in _modules(package_dir, sub):
            for names in imports_of(path.read_text(encoding="utf-8"), module):
                for n in names:
                    parts = n.split(".")
                    if len(parts) > 1 and parts[0] == root and parts[1] in graph:
                        if parts[1] != sub:
                            graph[sub].add(parts[1])
    return graph


def cycle_edges(graph: dict) -> set:
    """The edges (a, b) of `graph` that lie on a cycle: b reaches a back."""

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for m in graph.get(todo.pop(), ()):
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen

    reachable = {n: reach(n) for n in graph}
    return {(a, b) for a in graph for b in graph[a] if a in reachable[b]}


def test_decode_and_calibrate_import_nothing_from_train():
    assert violations(PACKAGE) == []


def test_the_check_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "codecspec"
    (pkg / "decode").mkdir(parents=True)
    (pkg / "decode" / "bad.py").write_text(
        "def load():\n    from ..train.offsets import load_offsets\n    return load_offsets\n"
    )
    (pkg / "calibrate").mkdir()
    (pkg / "calibrate" / "also_bad.py").write_text("import codecspec.train.networks\n")
    found = violations(pkg)
    assert len(found) == 2 and any("codecspec.train.offsets" in f for f in found)


def test_shared_packages_import_no_family_and_no_training_code():
    assert violations(PACKAGE, SHARED, FAMILY_CODE) == []


def test_cli_and_shared_training_code_import_no_family():
    assert violations(PACKAGE, NO_FAMILY, FAMILIES) == []


def family_flags(commands) -> dict:
    """Flag -> family, of every flag some registered family's `cli_options` adds to one of
    `commands` (each family asked about each command on a parser of its own)."""
    from codecspec.pipeline import registry

    found = {}
    for entry in registry.families():
        if entry.cli_options is None:
            continue
        add = registry.import_path(entry.cli_options)
        for command in commands:
            p = argparse.ArgumentParser(add_help=False)
            add(command, p)
            found.update(
                dict.fromkeys((s for a in p._actions for s in a.option_strings), entry.name)
            )
    return found


def cli_defined_flags(package_dir: Path) -> list:
    """(module path, line, flag) of every string flag an `add_argument` call under cli/
    names."""
    found = []
    for path, _ in _modules(package_dir, "cli"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if not (call and node.func.attr == "add_argument"):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"):
                    found.append((path.relative_to(package_dir), node.lineno, arg.value))
    return found


def cli_family_flags(package_dir: Path, flags: dict) -> list:
    """One line per flag a CLI module defines that `flags` (`family_flags`) gives a family."""
    return [
        f"{path}:{line} defines {flag}, a flag of the {flags[flag]} family"
        for path, line, flag in cli_defined_flags(package_dir)
        if flag in flags
    ]


def _subcommands() -> list:
    from codecspec.cli import build_parser

    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def test_no_cli_module_defines_a_family_flag():
    flags = family_flags(_subcommands())
    assert "--ref-audio" in flags and "--loops" in flags  # the check sees the families' flags
    assert cli_family_flags(PACKAGE, flags) == []


def test_the_cli_flag_check_sees_a_family_flag_defined_in_the_cli(tmp_path):
    pkg = tmp_path / "codecspec"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "cli" / "bad.py").write_text(
        "def register(p):\n"
        "    p.add_argument('--seed', type=int, default=0)\n"
        "    p.add_argument('--ref-audio', default=None)\n"
        "    p.add_argument(f'--{prefix}loops')\n"  # not a literal: not read
    )
    flags = family_flags(["synth", "bench"])
    assert cli_family_flags(pkg, flags) == [
        "cli/bad.py:3 defines --ref-audio, a flag of the qwen3-tts family"
    ]


def test_no_family_imports_another_family():
    assert cross_family_imports(PACKAGE) == []


def test_the_cross_family_check_sees_a_family_that_borrows_another(tmp_path):
    pkg = tmp_path / "codecspec"
    for fam, text in (
        ("v2", "def f():\n    from codecspec.families.reference.model import ReferenceTTS\n"),
        ("fsq", "from ..reference import model\n"),  # relative, one level up
        ("reference", "from codecspec.families.reference import engine\n"),  # its own: fine
    ):
        (pkg / "families" / fam).mkdir(parents=True)
        (pkg / "families" / fam / "model.py").write_text(text)
    found = cross_family_imports(pkg)
    assert len(found) == 2, found
    assert any(f.startswith("families/v2/model.py") for f in found)
    assert any(f.startswith("families/fsq/model.py") for f in found)


def test_the_family_check_sees_a_shared_module_that_names_a_family(tmp_path):
    pkg = tmp_path / "codecspec"
    (pkg / "pipeline").mkdir(parents=True)
    (pkg / "pipeline" / "bad.py").write_text(
        "def detect(folder):\n"
        "    from codecspec.families.qwen3_tts.checkpoint import is_qwen3_folder\n"
        "    return is_qwen3_folder(folder)\n"
        "TABLE = {'qwen3': 'codecspec.families.qwen3_tts:Qwen3TTS'}  # a string: allowed\n"
    )
    (pkg / "runtime").mkdir()
    (pkg / "runtime" / "also_bad.py").write_text("from ..families import qwen3_tts\n")
    (pkg / "serve").mkdir()
    (pkg / "serve" / "bad_too.py").write_text("from codecspec.families.fsq import engine\n")
    (pkg / "families").mkdir()
    (pkg / "families" / "fine.py").write_text("import codecspec.train.networks\n")
    (pkg / "cli").mkdir()
    (pkg / "cli" / "fine.py").write_text("from codecspec.train.ablate import ablate\n")
    (pkg / "cli" / "bad.py").write_text("from codecspec.families.qwen3_tts import cli\n")
    found = violations(pkg, SHARED, FAMILY_CODE)
    assert len(found) == 3, found
    assert any("codecspec.families.qwen3_tts.checkpoint" in f for f in found)
    assert any(f.startswith("runtime/also_bad.py") for f in found)
    assert any(f.startswith("serve/bad_too.py") for f in found)
    assert violations(pkg, NO_FAMILY, FAMILIES) == [
        "cli/bad.py imports codecspec.families.qwen3_tts"
    ]


def test_no_import_cycle_between_subpackages():
    found = sorted(cycle_edges(subpackage_graph(PACKAGE)))
    assert not found, f"(importer, imported) edges on an import cycle between subpackages: {found}"


def test_the_cycle_check_sees_a_cycle_through_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "codecspec"
    for sub, text in (
        ("pipeline", "def f():\n    from ..serve import engine\n"),
        ("serve", "from codecspec.codec import audio\n"),
        ("codec", "import codecspec.pipeline.registry\n"),
        ("decode", "from codecspec.codec import audio\n"),  # on no cycle
    ):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
        (pkg / sub / "m.py").write_text(text)
    graph = subpackage_graph(pkg)
    assert graph["decode"] == {"codec"}
    assert cycle_edges(graph) == {
        ("pipeline", "serve"),
        ("serve", "codec"),
        ("codec", "pipeline"),
    }


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
