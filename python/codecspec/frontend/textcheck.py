"""Which characters a text to be spoken may hold: one policy for every family and entry point.

Text crosses two boundaries that do not take every Python string: C strings (espeak-ng's
library and its command-line tool read up to the first NUL, so "Hi\\0 there" was spoken as
"Hi") and UTF-8 / Rust strings (a lone surrogate cannot be encoded; the `tokenizers`
library raises TypeError on one). Rather than let either cut or crash deep inside a front
end, :func:`check_text` refuses, up front and with the argument's name, the character and
its index:

* a lone surrogate (U+D800-U+DFFF): not a character, not encodable in UTF-8;
* a control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F) other than the
  ASCII whitespace ones (tab, line feed, vertical tab, form feed, carriage return), which
  text files and wrapped text hold and every front end reads as a space.

Everything else passes and is spoken in full as far as the front end has sounds for it:
format characters (zero-width joiner, RTL / LTR marks, a byte-order mark), combining marks,
every script, private-use and unassigned code points (which a front end skips as it skips
punctuation). A text is thus spoken whole or refused: never silently cut.
"""

from __future__ import annotations

import re

__all__ = ["check_text", "text_problem"]

# NUL..BS, SO..US, DEL..APC (C1), and the surrogate range: what check_text refuses
_REFUSED = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """Why `text` cannot be spoken as given (the first refused character), or None."""
    m = _REFUSED.search(text)
    if m is None:
        return None
    ch, i = m.group(), m.start()
    if "\ud800" <= ch <= "\udfff":
        return f"a lone surrogate U+{ord(ch):04X} at index {i} (not a character; no UTF-8 form)"
    return (
        f"the control character U+{ord(ch):04X} at index {i} (text may hold tab, line feed, "
        "vertical tab, form feed and carriage return, no other control character)"
    )


def check_text(text, name: str = "text") -> str:
    """`text` if it is a string every front end speaks in full; else ValueError
    "`name`: ..." naming the first refused character (see the module docstring). An empty
    or blank string passes here: whether one is allowed is the caller's rule."""
    if not isinstance(text, str):
        raise ValueError(f"{name}: expected a str, got {type(text).__name__}")
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(f"{name}: contains {problem}")
    return text
