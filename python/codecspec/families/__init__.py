"""Model families: what is particular to one family of codec-LM TTS models (one package each)."""
