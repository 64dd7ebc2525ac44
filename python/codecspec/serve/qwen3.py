"""Moved to `codecspec.families.qwen3_tts.engine` (the Qwen3-TTS family's package); this
alias keeps the old import path working."""

import sys

from codecspec.families.qwen3_tts import engine as _moved

sys.modules[__name__] = _moved
