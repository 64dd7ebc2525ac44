"""The text front end of the phoneme families: text -> phonemes -> ids.

text        normalisation, sentence splitting, the phoneme vocabulary and id tables
            (`Frontend`, `PhonemeModel`: the phoneme families' shared text side)
phonemes    espeak-ng phonemes through its library or its tool
espeak      espeak-ng's library: phonemes, its own rendering and its phoneme timing
aligned     the per-frame phoneme track of the aligned model (v3) from that timing
textcheck   which characters a text to be spoken may hold (every family, every entry point)
"""
