"""The FSQ family (GroupFSQ codes, factorised heads, a stop head) as one package.

Modules: `model` (`FSQTTS`, the loaded folder with its `generate` / `stream`; `FSQFamily`,
the family: the `codecspec.pipeline.Family` that prepares every request, the serving engine's
and, with one slot, `generate`'s; `FSQSlots`, `FSQStepper` and `FSQFrameDecoder`), `bench`
(`codecspec bench` figures for FSQ folders). The codec is `codecspec.families.fsq.codec`;
the PyTorch training is `torch_model` / `train` here (the [train] extra). The registry
(`codecspec.pipeline.registry`) names these by module path. Importing this package imports
none of them.
"""
