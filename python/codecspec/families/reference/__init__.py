"""The reference family (v1: RVQ codes, a temporal LM with latent feedback, the depth loop, a
frame count planned from the phonemes) as one package.

Modules: `model` (`ReferenceTTS`, the loaded folder with its `generate` / `stream`, and
`ReferenceFamily`, the family: the `codecspec.pipeline.Family` that prepares every request
and steps the streams, the serving engine's and, with one slot, `generate`'s; the training
recipe's `TemporalStepper`), `temporal_batch` (the temporal step graph given a batch axis:
`BatchedTemporal`), `bench` (its `codecspec bench` figures),
`torch_model` / `train` (its PyTorch model and training loop, the [train] extra). Its codec
is `codecspec.codec.codec`; the text front end (`codecspec.frontend.text`,
`codecspec.frontend.phonemes`), `generate` / `stream` over the family
(`codecspec.pipeline.stream`) and the result type (`codecspec.pipeline.result.Synthesis`) are
shared with the other phoneme-input families. The registry (`codecspec.pipeline.registry`)
names these by module path. Importing this package imports none of them.
"""
