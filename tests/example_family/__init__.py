"""A tiny model family, added the way docs/adding_a_family.md says a family is added.

Everything the family is lives in this package: `model.py` (its single-stream model and its
codec, numpy only), `engine.py` (its `codecspec.pipeline.Family` adapter, what the serving
engine batches) and `options.py` (its own `codecspec synth` flag, `--toy-tone`: argparse
only). `ENTRY` is its one registry line:
`tests/pipeline/test_example_family.py` hands it to
`codecspec.pipeline.registry.register`; a family inside the package would instead be one more
`Entry(...)` in `FAMILIES`. No module of the `codecspec` package names this family, and
importing this package imports none of its code (the entry names it by module path).
"""

from codecspec.pipeline.registry import Entry

FORMAT = "codecspec-example-toy/1"  # the "format" of its folders' model.json

ENTRY = Entry(
    "example-toy",
    formats=(FORMAT,),
    model="example_family.model:ToyTTS",
    engine="example_family.engine:ToyFamily",
    cli_options="example_family.options:add_options",
)
