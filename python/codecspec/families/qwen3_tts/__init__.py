"""Qwen3-TTS (12 Hz) checkpoints as published, run on ONNX Runtime without torch.

Modules: `checkpoint` (the folder: config, generation defaults, tensors, content hash),
`text` (the Qwen tokenizer through `tokenizers`, the official prompt layout), `graphs`
(ONNX graphs built from the safetensors and cached by content), `talker` (the temporal model's
KV-cached steps and its sampling rules), `pipeline` (text -> codes -> waveform), `decoder`
(the 12 Hz speech-tokenizer decoder), `steps` (the streams' steps on their slots, which
`pipeline` runs one stream through), `engine` (`Qwen3Family`, the serving engine's
`codecspec.pipeline.Family` adapter), `corpus` (the texts it speaks to be measured), `bench`
(the stages the one bench driver asks it to time), and the commands `cli` (synth), `calibrate`.
Importing this package imports none of them.
"""
