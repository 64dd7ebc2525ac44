"""The reference family (v1: RVQ codes, a temporal LM with latent feedback, the depth loop, a
frame count planned from the phonemes) as one package.

Modules: `model` (`ReferenceTTS`: the single-stream model and its `TemporalStepper`),
`temporal_batch` (the temporal step graph given a batch axis: `BatchedTemporal`), `engine`
(`ReferenceFamily`, the serving engine's `codecspec.pipeline.Family` adapter; `generate` is
it with one slot), `bench` / `cli` (its `codecspec bench`),
`torch_model` / `train` (its PyTorch model and training loop, the [train] extra). Its codec
is `codecspec.codec.codec`; the text front end (`codecspec.tts.text`, `codecspec.tts.phonemes`),
the streaming loop (`codecspec.tts.stream`) and the result type
(`codecspec.tts.synthesis.Synthesis`) are shared with the other phoneme-input families. The
registry (`codecspec.pipeline.registry`) names these by module path. Importing this package
imports none of them.
"""
