"""The phoneme families' text front end: text -> phonemes -> ids (`text`: `Frontend`,
`PhonemeModel`; espeak-ng: `phonemes`, `espeak`; v3's phoneme track: `aligned`), and which
text may be spoken, from where (`textcheck`, `text_input`)."""
