"""How well a model says its text: words and phonemes recognised on the evaluation sets
(`intelligibility`, `phoneme_recognition`), the floors and the ceiling (`floors`), DTW
log-mel distance (`quality`), and the reports `codecspec quality` prints (`reports`)."""
