"""The bench / synth / quality command bodies, until they move into `codecspec.cli`.

The rooms tts/ held are `codecspec.frontend` (text front end), `codecspec.evaluation`,
`codecspec.train.dataset` and `codecspec.pipeline` (`stream`, `synthesis`, `depth_bench`).
"""
