"""One table of model families: which folders each reads, where its code lives, the default.

Every place that picks a family (`load_model` below, the serving engine,
the CLI's synth / bench / calibrate / serve) asks this table instead of naming families in
an if-chain. Entries name their code by module path ("module:attribute") and nothing is
imported until a family is asked for, so looking a folder up loads no model code, and
this module imports no family (tests/repository/test_layering.py checks it).

    entry = family_of("fsq")            # a shipped name, a folder, or None (the default)
    tts = entry.load("model")(folder)   # the single-stream model class
    engine_family = entry.load("engine").open(folder, slots, ...)

Adding a family: one `Entry` in FAMILIES (before the default's, when its `detect` must be
asked first), or, for a family whose code lives outside this package, an entry point in the
group "codecspec.families" naming its `Entry` (found at the first lookup, `discover`), or
`register(entry)` at start-up; docs/adding_a_family.md walks one through.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from codecspec.pipeline.family import model_format

__all__ = [
    "DEFAULT_MODEL",
    "Entry",
    "FAMILIES",
    "MODEL_NAMES",
    "ModelLoadError",
    "ENTRY_POINT_GROUP",
    "by_name",
    "discover",
    "families",
    "family_of",
    "find",
    "formats",
    "import_path",
    "load_model",
    "loading",
    "model_family",
    "open_family",
    "register",
    "resolve_model_dir",
    "take_options",
    "unregister",
]

# shipped (or checked-out) models by name
MODEL_NAMES = ("reference", "fsq", "fsq-aligned", "fsq-voices", "v2", "v3")
DEFAULT_MODEL = "v3"
# What CODECSPEC_MODEL_DIR, where set, stands for: the default model and "reference" (the
# v1 folder it named before there were others).
ENV_MODEL_NAMES = (None, "reference")
# Engine options every family is handed where it takes them and that the others ignore
# (a graph cache folder: the CLI always has one).
SHARED_OPTIONS = ("cache_dir",)


class ModelLoadError(ValueError):
    """A model folder that cannot be loaded, in one line: "model: <file or folder>: what is
    wrong". Every command that loads a model (synth, serve, bench, quality, calibrate)
    reports it as it is, without a traceback (a ValueError, so callers that catch those
    still do)."""


# "name: ..." where name is another argument than the model: the caller's mistake, not the
# folder's (e.g. "threads: ...", "ref_audio: ...")
_OTHER_ARGUMENT = re.compile(r"^(?!model:)[A-Za-z_][A-Za-z0-9_.]*: ")


@contextlib.contextmanager
def loading(folder):
    """Turns what a broken model folder raises while it loads into ModelLoadError, one line
    naming the file where the error says which (a file that cannot be read, a "model: ..."
    error of a reader that names it) and else the folder: a truncated ONNX, npz or
    safetensors file, a JSON file that does not parse, a missing entry. Errors naming
    another argument pass unchanged; other exception types (bugs) are not hidden."""
    try:
        yield
    except ModelLoadError:
        raise
    except OSError as e:  # FileNotFoundError, IsADirectoryError, PermissionError, ...
        own = re.match(r"model(?:_dir)?: ", str(e)) if e.filename is None else None
        if own:  # a reader's own message, about the folder or a file in it
            raise ModelLoadError("model: " + str(e)[own.end() :]) from e
        where = e.filename or folder
        raise ModelLoadError(f"model: {where}: {e.strerror or e}") from e
    except ValueError as e:
        msg = str(e)
        if _OTHER_ARGUMENT.match(msg):
            raise
        if msg.startswith("model: "):
            raise ModelLoadError(msg) from e
        raise ModelLoadError(f"model: {folder}: {type(e).__name__}: {msg}") from e
    except (KeyError, EOFError, zipfile.BadZipFile) as e:
        raise ModelLoadError(f"model: {folder}: {type(e).__name__}: {e}") from e


def _json_error(path: Path) -> Optional[str]:
    """Why the JSON file `path` does not parse, or None (it parses, or there is none)."""
    if not path.is_file():
        return None
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        return f"not UTF-8 ({e.reason} at byte {e.start})"
    except ValueError as e:
        return f"not valid JSON ({e})"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    return None


def import_path(path: str):
    """The object a "package.module:attribute" string names, imported now."""
    module, _, attr = path.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Entry:
    """One family. `formats`: the model.json "format" values it reads; `detect`: for a
    folder without one (a checkpoint as published), "module:function(folder) -> bool";
    `model` / `engine`: "module:Class" of the single-stream model and of the engine's
    `codecspec.pipeline.Family` adapter; `options`: the engine options only it takes;
    `title`: how messages name its folders. What differs per family in a command is the
    `Family` class's (`request_options`, `bench_figures`, `synth_command`, ...). `cli_options`:
    "module:function(command, parser)" adding the family's own flags to the `codecspec`
    subcommand `command` (a name such as "synth"; nothing for the others), the shared options
    being the CLI's (`codecspec.cli.options.family_options`); its module imports argparse at
    most, as `codecspec --help` imports it. `cli_commands`: "module:function(subparsers)"
    adding the family's own subcommands (Qwen3-TTS's import-qwen3 and random-checkpoint),
    light to import as well."""

    name: str
    formats: tuple = ()
    detect: Optional[str] = None
    model: Optional[str] = None
    engine: Optional[str] = None
    options: tuple = ()
    title: str = ""
    cli_options: Optional[str] = None
    cli_commands: Optional[str] = None

    def load(self, what: str):
        """The class `model` or `engine` names, imported now."""
        path = getattr(self, what)
        if path is None:
            raise ValueError(f"model: the {self.name} family has no {what}")
        return import_path(path)


_QWEN3 = "codecspec.families.qwen3_tts"
FAMILIES = (
    # A Qwen3-TTS checkpoint folder as published: config.json, no model.json.
    Entry(
        "qwen3-tts",
        detect=f"{_QWEN3}.checkpoint:is_qwen3_folder",
        model=f"{_QWEN3}.pipeline:Qwen3TTS.load",
        engine=f"{_QWEN3}.engine:Qwen3Family",
        options=("cache_dir", "ref_audio", "weights", "voices_dir", "decoder_precision"),
        title="Qwen3-TTS checkpoint",
        cli_options=f"{_QWEN3}.options:add_options",
        cli_commands=f"{_QWEN3}.commands:add_commands",
    ),
    Entry(
        "v2",  # formats v2 and v3 (v3: the v2 runtime told espeak-ng's phoneme timing)
        formats=("codecspec-v2-tts/1",),
        model="codecspec.families.v2.model:V2TTS",
        engine="codecspec.families.v2.model:V2Family",
        cli_options="codecspec.families.v2.options:add_options",
        title="v2 / v3 model",
    ),
    Entry(
        "fsq",
        formats=("codecspec-fsq-tts/1",),
        model="codecspec.families.fsq.model:FSQTTS",
        engine="codecspec.families.fsq.model:FSQFamily",
        options=("ref_audio", "voices_dir"),  # a voice-prefix folder's (fsq-voices)
        title="FSQ voice-prefix",
        cli_options="codecspec.families.fsq.options:add_options",
    ),
    Entry(
        "reference",
        formats=("codecspec-reference-tts/1",),
        model="codecspec.families.reference.model:ReferenceTTS",
        engine="codecspec.families.reference.model:ReferenceFamily",
    ),
)


def by_name(name: str) -> Entry:
    """The family called `name`; ValueError naming `family` otherwise."""
    table = families()
    for e in table:
        if e.name == name:
            return e
    raise ValueError(f"family: expected one of {[e.name for e in table]}, got {name!r}")


def register(entry: Entry, before: Optional[str] = None) -> Entry:
    """Adds a family to the table: last, or just before the family called `before` (a family
    whose `detect` must be asked before another's). For families whose code lives outside
    this package; every lookup (`family_of`, the engine, the CLI) sees it at once. ValueError
    naming `family` where its name, or a format it reads, is taken already."""
    global FAMILIES
    if any(e.name == entry.name for e in FAMILIES):
        raise ValueError(f"family: {entry.name!r} is registered already")
    taken = {f: e.name for e in FAMILIES for f in e.formats}
    for f in entry.formats:
        if f in taken:
            raise ValueError(f"family: format {f!r} is read by the {taken[f]} family already")
    table = list(FAMILIES)
    at = len(table) if before is None else table.index(by_name(before))
    table.insert(at, entry)
    FAMILIES = tuple(table)  # a new tuple: a lookup running now keeps the table it started on
    return entry


def unregister(name: str) -> Entry:
    """Takes the family called `name` out of the table (a test's registration, undone)."""
    global FAMILIES
    entry = by_name(name)
    FAMILIES = tuple(e for e in FAMILIES if e is not entry)
    return entry


ENTRY_POINT_GROUP = "codecspec.families"
_discovered = False


def families() -> tuple:
    """The table: the package's families, then those other installed packages declare
    (`discover`, run at the first lookup)."""
    discover()
    return FAMILIES


def discover(group: str = ENTRY_POINT_GROUP) -> list:
    """Registers the families that installed distributions declare under the entry-point
    group `group` (in pyproject.toml: `[project.entry-points."codecspec.families"]`,
    `name = "package.module:ENTRY"`, an `Entry`), once per process; returns the entries added.
    Only the module holding the `Entry` is imported (it names its code by module path, like
    the built-in entries). A plugin that does not load, is not an `Entry` or clashes with a
    registered family is skipped with a warning naming it: a broken plugin must not take the
    built-in families down with it."""
    global _discovered
    if _discovered:
        return []
    _discovered = True
    from importlib.metadata import entry_points

    added = []
    for ep in entry_points(group=group):
        try:
            entry = ep.load()
            if not isinstance(entry, Entry):
                raise TypeError(f"it is a {type(entry).__name__}, not a registry Entry")
            added.append(register(entry))
        except Exception as e:  # a plugin's own failure: skip it, keep the others
            warnings.warn(
                f"codecspec family plugin {ep.name} = {ep.value!r} skipped: {e}", stacklevel=2
            )
    return added


def formats() -> dict:
    """model.json "format" -> family name, every family's."""
    return {f: e.name for e in families() for f in e.formats}


def resolve_model_dir(name_or_dir=None) -> Path:
    """A named model's folder (`codecspec.model_store`: installed, or on
    CODECSPEC_MODEL_PATH), or the given folder. None = the default model, DEFAULT_MODEL
    (reference model v3, the one a recognizer understands: docs/reference_model_v3.md);
    CODECSPEC_MODEL_DIR, where set, replaces the default and "reference". A name that is not
    installed is a ValueError naming `model` and saying where to find it."""
    from codecspec.model_store import named_model_dir

    env = os.environ.get("CODECSPEC_MODEL_DIR")
    if env and name_or_dir in ENV_MODEL_NAMES:
        return Path(env)
    if name_or_dir is None:
        name_or_dir = DEFAULT_MODEL
    if name_or_dir in MODEL_NAMES:
        return named_model_dir(name_or_dir, must_exist=True)
    return Path(name_or_dir)


def family_of(name_or_dir=None, detect: bool = True) -> Entry:
    """The family of a shipped name, a folder, or None (the default model). A folder is
    asked first of the families that `detect` their own layout (in table order; not with
    detect=False), then by its model.json's "format". Raises ValueError naming `model`."""
    if detect and name_or_dir is not None and name_or_dir not in MODEL_NAMES:
        for e in families():
            if e.detect is not None and import_path(e.detect)(str(name_or_dir)):
                return e
    d = resolve_model_dir(name_or_dir)
    # A folder whose model.json (or, without one, a checkpoint's config.json) is broken is a
    # model folder all the same: say which file and why, not "neither a name nor a folder".
    for name in ("model.json", "config.json"):
        broken = _json_error(d / name)
        if broken is not None:
            raise ModelLoadError(f"model: {d / name}: {broken}")
        if (d / name).is_file():
            break
    if not (d / "model.json").is_file():
        raise ValueError(f"model: {d} is neither a model name {MODEL_NAMES} nor a model folder")
    fmt = model_format(d)
    known = formats()
    if fmt not in known:
        raise ValueError(f"model: {d} has model format {fmt!r}; known: {sorted(known)}")
    return by_name(known[fmt])


def find(name_or_dir=None) -> Optional[Entry]:
    """`family_of`, or None where the argument names no model of a known family (the CLI
    then reports what it was given in its own terms)."""
    try:
        return family_of(name_or_dir)
    except ModelLoadError:
        raise  # a model folder, broken: reported as such, not as "no model"
    except ValueError:
        return None


def take_options(entry: Optional[Entry], flags: bool = False, **given) -> dict:
    """The options of `given` that `entry`'s family takes; ValueError naming the first
    other one that is set (SHARED_OPTIONS excepted: the others ignore those), as the
    command-line flag with `flags` (ref_audio -> --ref-audio)."""
    takes = () if entry is None else entry.options
    for name, value in given.items():
        if value is not None and name not in takes and name not in SHARED_OPTIONS:
            titles = [e.title for e in families() if name in e.options and e.title]
            label = "--" + name.replace("_", "-") if flags else name
            raise ValueError(f"{label}: only for {' or '.join(titles)} folders")
    return {k: v for k, v in given.items() if k in takes}


def model_family(name_or_dir=None) -> str:
    """The family name of a shipped name or a folder with a model.json ("reference", "fsq",
    "v2"; no detection of checkpoint layouts). Raises ValueError naming `model`."""
    return family_of(name_or_dir, detect=False).name


def open_family(name_or_dir, slots, max_frames, max_phonemes, provider, threads, **options):
    """The engine adapter (`Family.open`) of a shipped name, a folder, or None (the default
    model), with `slots` streams of at most `max_frames` frames and `max_phonemes` input ids:
    `options` (cache_dir, ref_audio, weights, voices_dir) go to the family that takes them,
    one it does not take is a ValueError naming it (`take_options`), and a broken folder is a
    `ModelLoadError` naming the file."""
    entry = family_of(name_or_dir)
    taken = take_options(entry, **options)
    folder = resolve_model_dir(name_or_dir)  # None: the default model's folder
    family = entry.load("engine")
    with loading(folder):
        return family.open(folder, slots, max_frames, max_phonemes, provider, threads, **taken)


def load_model(name_or_dir=None, **kwargs):
    """The loaded model of a name or folder (`ReferenceTTS`, `FSQTTS`, `V2TTS`: whichever
    family its model.json names; None: the default, v3); kwargs go to its constructor. A
    broken folder is a `ModelLoadError` naming the file."""
    d = resolve_model_dir(name_or_dir)
    model = family_of(d, detect=False).load("model")
    with loading(d):
        return model(d, **kwargs)
