"""The phoneme families' training data (`dataset`), the streaming loop (`stream`), the
depth-loop families' result type (`synthesis`), evaluation, and the bench / synth / quality
commands (the text front end is `codecspec.frontend`).

The models themselves are packages under `codecspec.families` (the reference v1 model is
`codecspec.families.reference.model.ReferenceTTS`); nothing here imports them.
"""

from codecspec.tts.dataset import Batch, TTSDataset, Utterance

__all__ = ["Batch", "TTSDataset", "Utterance"]
