"""How well a model says its text, beside the floors and the ceiling it is measured against.

intelligibility      words recognised / WER by an offline recognizer (Whisper), bootstrap CIs,
                     the evaluation sets (eval_sentences.json, eval_sus.json, eval_hard.json)
phoneme_recognition  phonemes recognised / PER beside the words
floors               the espeak-ng, codec (the ceiling) and aligned-lookup rows
quality              distance to a reference rendering without a recognizer (DTW log-mel)
"""
