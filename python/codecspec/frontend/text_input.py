"""The text a command speaks: the argument, a UTF-8 file or standard input, checked by
`textcheck`; below both the CLI's synth and a family's own (Qwen3-TTS's), which share it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from codecspec.frontend.textcheck import check_text

__all__ = ["check_stdin_alone", "read_stdin_text", "read_text_file", "stdin_pieces", "synth_text"]


def read_text_file(path) -> str:
    """The text of a UTF-8 file for --text-file; one-line errors naming the option."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"--text-file: {p} is a directory, not a text file")
    if not p.is_file():
        raise ValueError(f"--text-file: no such file: {p}")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"--text-file: {p} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    except OSError as e:
        raise ValueError(f"--text-file: cannot read {p} ({e.strerror})") from None
    if not text.strip():
        raise ValueError(f"--text-file: {p} is empty")
    # Checked before the whitespace is joined: the index is the character's in the file.
    check_text(text, f"--text-file: {p}")
    return " ".join(text.split())  # line breaks of a wrapped file are not pauses


def stdin_pieces(fd=None, size: int = 4096):
    """Standard input's bytes as they arrive: os.read returns what the pipe holds now (a
    few bytes of an LLM's output), not a line or a full buffer."""
    fd = sys.stdin.fileno() if fd is None else fd
    while True:
        piece = os.read(fd, size)
        if not piece:
            return
        yield piece


def check_stdin_alone(args) -> None:
    """--text-stdin with a positional text or --text-file: a ValueError naming it."""
    if getattr(args, "text_stdin", False) and (args.text is not None or args.text_file):
        raise ValueError("--text-stdin: give the text one way (TEXT, --text-file or --text-stdin)")


def read_stdin_text() -> str:
    """--text-stdin read whole: the text verbatim (its line breaks too, as a text streamed
    from standard input is read), UTF-8; one-line errors naming the option."""
    try:
        text = b"".join(stdin_pieces()).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"--text-stdin: standard input is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    if not text.strip():
        raise ValueError("--text-stdin: standard input holds no text")
    return check_text(text, "--text-stdin")


def synth_text(args) -> str:
    """The text `codecspec synth` speaks: the positional text, --text-file's or standard
    input's (--text-stdin; all read whole); ValueError naming `text` where none or two are
    given. Every family's synth uses it."""
    check_stdin_alone(args)
    if getattr(args, "text_stdin", False):
        return read_stdin_text()
    if args.text_file is not None:
        if args.text:
            raise ValueError("text: give the text or --text-file, not both")
        return read_text_file(args.text_file)
    if args.text is None:
        raise ValueError("text: give the text to speak, --text-file FILE or --text-stdin")
    return check_text(args.text, "text")
