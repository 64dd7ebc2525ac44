"""The v2 family (formats v2 and v3: reference models v2 and v3) as one package.

Modules: `model` (`V2TTS`, the loaded folder with its steppers, the round loop's settings and
`generate` / `stream`; v3 is the same runtime told espeak-ng's phoneme timing; `V2Family`, the
family: the `codecspec.pipeline.Family` that prepares every request, the serving engine's
and, with one slot, `generate`'s), `bench` (`codecspec bench` figures for v2/v3 folders),
`quality` (its decode modes as the commands name them). Its codec is
`codecspec.families.v2.codec`, its batch-axis step graphs `step_batch` here, its PyTorch
training `torch_model` / `train` here (the [train] extra). The registry
(`codecspec.pipeline.registry`) names these by module path. Importing this package imports
none of them.
"""
