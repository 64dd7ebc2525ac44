"""The FSQ family (GroupFSQ codes, factorised heads, a stop head) as one package.

Modules: `model` (`FSQTTS`: the single-stream model, its `FSQStepper` / `FSQSlots` and
`FSQFrameDecoder`), `engine` (`FSQFamily`, the serving engine's `codecspec.pipeline.Family`
adapter), `bench` (`codecspec bench` and `synth` figures for FSQ folders). The codec is
`codecspec.codec.fsq`; the PyTorch training is `codecspec.train.fsq_torch` / `fsq_train`.
The registry (`codecspec.pipeline.registry`) names these by module path; the old paths
`codecspec.tts.fsq`, `codecspec.serve.fsq` and `codecspec.tts.fsq_bench` are aliases of
them. Importing this package imports none of them.
"""
