"""Text that arrives in pieces (an LLM's token stream) for Qwen3-TTS's streaming-text layout.

In the streaming-text layout (text.py) the prompt holds the first token of the assistant text
and frame g adds the next text token to its codec embedding (then tts_eos, then tts_pad), so
speech can start after the first word of a sentence that is still being written, and frame g
needs only its own text token. `TextStream` takes the pieces (str, or UTF-8 bytes cut
anywhere, even inside a character) and commits text tokens as soon as no later piece can
change them: the committed ids are always a prefix of `encode(assistant_text(whole text))`,
whatever the split, and at the end the whole text is tokenized once more and checked against
them. A frame whose token is not committed yet waits for it (`wait`): the codes then do not
depend on when the pieces came, only on the text.

When a token is final. The Qwen tokenizer (`tokenizers`) runs, on the raw string: (1) the
added tokens (<|im_end|>, ...) cut the string into segments; per segment (2) NFC, (3) the
Qwen2 split regex into pieces ("words"), (4) byte-level BPE inside each piece alone. So the
tokens up to a position `cut` of the text so far are final when, for any continuation:
  - no added token can start before `cut` and end after the text so far (the tail that is a
    proper prefix of an added token is held back);
  - NFC cannot join a character at or after `cut` with one before it: the character at
    `cut` starts fresh (a starter that no canonical composition takes as its second part);
  - `cut` is a piece boundary that a later character cannot move. Every alternative of the
    regex decides a match from the characters up to one past its end, except those that
    scan a run of whitespace (`\\s*[\\r\\n]+`, `\\s+(?!\\S)`: they read the whole run before
    backtracking) and the contractions ("'re": up to three characters, decided within a
    piece of two and its follower). So only the last piece and the pieces that reach into
    the text's trailing whitespace run can change; `cut` is the start of the first of them.
Text without spaces or punctuation (Chinese, Japanese) is one piece per run of letters, so it
commits at the next punctuation or space. A tokenizer whose normalizer or pre-tokenizer is
not Qwen2's commits nothing before the end (still exact, just not early).
"""

from __future__ import annotations

import codecs
import functools
import json
import re
import threading
import time
import unicodedata
from typing import Iterable, Optional

import numpy as np

from codecspec.frontend.textcheck import check_text

from .text import assistant_text, encode, reference_text

__all__ = [
    "TextStream",
    "TextRows",
    "TextCancelled",
    "SUFFIX_TOKENS",
    "stable_cut",
    "stream_layout",
    "prompt_body_tokens",
    "astream",
    "aspeak",
]

PREFIX = "<|im_start|>assistant\n"  # assistant_text's head, before the text
_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"  # and its tail, after it
# build_prompt's -5: the official code cuts the text's ids as ids[3:-5], the template's
# suffix being "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n" with Qwen's vocabulary
SUFFIX_TOKENS = 5
_QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


@functools.lru_cache(maxsize=1)
def _joins_backward() -> frozenset:
    """Code points NFC may compose with the character before them: the second part of every
    canonical pair decomposition (composition exclusions kept: a superset is safe) and the
    Hangul vowel and trailing jamo. Every decomposable code point lies below U+2FA20."""
    out = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for cp in range(0x2FA20):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            parts = d.split()
            if len(parts) == 2:
                out.add(int(parts[1], 16))
    return frozenset(out)


def starts_fresh(ch: str) -> bool:
    """Whether NFC leaves the text before `ch` alone whatever follows (a normalization
    boundary before `ch`): a starter, whose decomposition starts with a starter, neither of
    which composes with a preceding character."""
    first = unicodedata.normalize("NFD", ch)[0]
    if unicodedata.combining(ch) or unicodedata.combining(first):
        return False
    joins = _joins_backward()
    return ord(ch) not in joins and ord(first) not in joins


def is_qwen2_text_tokenizer(tok) -> bool:
    """The tokenizer whose behaviour the commit rule is derived for: NFC (or none), the
    Qwen2 split regex (isolated) then byte-level without its own regex, and no post-processor
    that trims offsets."""
    try:
        d = json.loads(tok.to_str())
    except Exception:
        return False
    norm, pre, post = d.get("normalizer"), d.get("pre_tokenizer") or {}, d.get("post_processor")
    if norm is not None and norm.get("type") != "NFC":
        return False
    if post is not None and post.get("trim_offsets", False):
        return False
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return False
    split, byte = steps
    return (
        split.get("type") == "Split"
        and (split.get("pattern") or {}).get("Regex") == _QWEN2_PATTERN
        and str(split.get("behavior")).lower() == "isolated"
        and not split.get("invert")
        and byte.get("type") == "ByteLevel"
        and not byte.get("use_regex")
        and not byte.get("add_prefix_space")
    )


def _added_contents(tok) -> tuple:
    d = json.loads(tok.to_str())
    return tuple(sorted({a["content"] for a in d.get("added_tokens", [])}, key=len, reverse=True))


def _held_for_added(raw: str, base: int, added: tuple) -> int:
    """The first position >= base from which the text so far is a proper prefix of an added
    token (a later piece could complete it), else len(raw)."""
    longest = max((len(a) for a in added), default=0)
    for i in range(max(base, len(raw) - longest + 1), len(raw)):
        tail = raw[i:]
        if any(len(a) > len(tail) and a.startswith(tail) for a in added):
            return i
    return len(raw)


def _segment_start(raw: str, base: int, limit: int, added: tuple) -> int:
    """Where the last segment begins: after the last complete added token in raw[base:limit]
    (the tokenizer cuts there before normalizing and splitting), else base."""
    if not added:
        return base
    pattern = "|".join(re.escape(a) for a in added)  # longest first: leftmost-longest
    start = base
    for m in re.finditer(pattern, raw[base:limit]):
        start = base + m.end()
    return start


def _normal_form(tok, raw: str, seg: int, limit: int):
    """(NFC of raw[seg:q], {normalized offset: raw position} at the boundaries), where q is
    the last position <= limit at which NFC starts fresh (limit itself only if a character
    is there); None if this normalizer and Python's disagree (nothing is committed then)."""
    bounds = [seg] + [i for i in range(seg + 1, min(limit + 1, len(raw))) if starts_fresh(raw[i])]
    where, parts, off = {0: seg}, [], 0
    for a, b in zip(bounds, bounds[1:]):
        part = unicodedata.normalize("NFC", raw[a:b])
        parts.append(part)
        off += len(part)
        where[off] = b
    text = "".join(parts)
    norm = tok.normalizer
    if norm is not None and norm.normalize_str(raw[seg : bounds[-1]]) != text:
        return None
    return text, where


def stable_cut(tok, raw: str, base: int, added: tuple) -> int:
    """The raw position up to which the tokens of `raw` (the template's head and the text so
    far) are final whatever text follows; base (a position known final) when none is later.
    The rule and why it holds: the module docstring."""
    limit = _held_for_added(raw, base, added)
    seg = _segment_start(raw, base, limit, added)
    found = _normal_form(tok, raw, seg, limit)
    if found is None:
        return base
    text, where = found
    pieces = [span for _, span in tok.pre_tokenizer.pre_tokenize_str(text)]
    if not pieces:
        return seg
    cut = pieces[-1][0]
    ws = len(text.rstrip())  # the trailing whitespace run starts here (len(text): none)
    for start, end in pieces:
        if start <= ws < end:
            cut = min(cut, start)
    # a piece boundary that is also a normalization boundary (a piece may start at a
    # combining mark that NFC did not join)
    starts = sorted({s for s, _ in pieces if s <= cut} | {0}, reverse=True)
    return next(where[s] for s in starts if s in where)


class TextStream:
    """Text in pieces, tokenized as the whole text: `push(piece)` and `end()` from any
    thread, or `chunks` (an iterator of pieces) pulled by the consumer as it needs tokens.
    `wait(n)` blocks until n ids of `encode(assistant_text(text))` are known or the text
    ended, and returns (ids known, ended); after the end the ids are the whole text's (the
    template's suffix included)."""

    def __init__(self, tok, chunks: Optional[Iterable] = None):
        self._tok = tok
        self._source = None if chunks is None else iter(chunks)
        self._added = _added_contents(tok)
        self._early = is_qwen2_text_tokenizer(tok)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self._raw = PREFIX
        self._base = 0  # raw[:_base] is tokenized for good (its ids in _ids)
        self._ids: list = []
        self._ended = False
        self._error: Optional[BaseException] = None  # raised by wait (fail / cancel)
        self._cv = threading.Condition()
        self.first_text_at: Optional[float] = None  # perf_counter of the first non-empty piece
        self._suffix = list(tok.encode(_SUFFIX).ids)
        # A suffix of more than 5 tokens (a vocabulary without "assistant", e.g. a random
        # folder's) puts its first ones into the trailing text, after every text token, so
        # each committed token is still known to be spoken. With fewer, the last text tokens
        # fall outside the cut and only the end tells which: nothing is committed before it.
        self._early = self._early and len(self._suffix) >= SUFFIX_TOKENS
        self._used = False
        # the assistant id at which the frames' text rows start, where the prompt was built
        # before the text ended (None: built from the whole text)
        self.rows_from: Optional[int] = None

    # ---------------------------------------------------------------- producer side
    def push(self, piece) -> None:
        """One more piece of the text (str or bytes, UTF-8 cut anywhere). A bad piece is a
        ValueError naming `chunks`; the stream is then as before it (push a good one)."""
        with self._cv:
            if self._ended:
                raise ValueError("chunks: the text has ended; no piece can follow end()")
            text = self._decode(piece)
            if not text:
                return
            if self.first_text_at is None:
                self.first_text_at = time.perf_counter()
            self._raw += text
            self._commit()
            self._cv.notify_all()

    def end(self) -> None:
        """The text is complete: the rest is tokenized with the template's suffix."""
        with self._cv:
            if self._ended:
                return
            try:
                self._utf8.decode(b"", final=True)
            except UnicodeDecodeError:
                raise ValueError("chunks: the text ends inside a UTF-8 character") from None
            text = self.text
            if not text.strip():
                raise ValueError("chunks: the text is empty (nothing but whitespace)")
            ids = self._tok.encode(assistant_text(text)).ids
            if ids[: len(self._ids)] != self._ids:
                # the commit rule failed: a bug, never a different utterance
                raise RuntimeError(
                    "text stream: tokens committed early differ from the whole text's "
                    f"({text!r}); please report this text"
                )
            self._ids, self._ended = list(ids), True
            self._cv.notify_all()

    def fail(self, error: BaseException) -> None:
        """The text cannot go on (its producer failed): `wait` raises `error` from now on."""
        with self._cv:
            if self._error is None:
                self._error = error
            self._cv.notify_all()

    def watched(self, rows):
        """`rows` (step -> text row) that first raises the stream's failure, if any: a
        cancelled stream stops at the next frame even when its text is all known."""

        def row(step: int) -> np.ndarray:
            if self._error is not None:
                raise self._error
            return rows(step)

        return row

    def cancel(self) -> None:
        """The consumer is gone: `wait` raises TextCancelled from now on."""
        self.fail(TextCancelled("chunks: the stream was cancelled"))

    def _decode(self, piece) -> str:
        if isinstance(piece, (bytes, bytearray, memoryview)):
            state = self._utf8.getstate()
            try:
                text = self._utf8.decode(bytes(piece))
            except UnicodeDecodeError as e:
                self._utf8.setstate(state)
                raise ValueError(f"chunks: a piece is not valid UTF-8 ({e.reason})") from None
        elif isinstance(piece, str):
            if self._utf8.getstate()[0]:
                raise ValueError("chunks: a str piece inside a UTF-8 character cut over bytes")
            text = piece
        else:
            raise ValueError(f"chunks: each piece must be str or bytes, got {type(piece).__name__}")
        return check_text(text, "chunks")

    def _commit(self) -> None:
        if not self._early:
            return
        cut = stable_cut(self._tok, self._raw, self._base, self._added)
        if cut <= self._base:
            return
        enc = self._tok.encode(self._raw[self._base :])
        span = cut - self._base
        new = [i for i, (_, end) in zip(enc.ids, enc.offsets) if end <= span]
        self._ids += new
        self._base = cut

    # ---------------------------------------------------------------- consumer side
    @property
    def text(self) -> str:
        return self._raw[len(PREFIX) :]

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def cancelled(self) -> bool:
        return isinstance(self._error, TextCancelled)

    def wait(self, n: int) -> tuple:
        """(ids known, ended) once n ids are known or the text ended; pulls `chunks` when
        the stream was made over them, else waits for `push` / `end`."""
        while True:
            with self._cv:
                if self._error is not None:
                    raise self._error
                if len(self._ids) >= n or self._ended:
                    return np.asarray(self._ids, np.int64), self._ended
                if self._source is None:
                    self._cv.wait()
                    continue
            self._pull()

    def prompt_ids(self, body: int) -> np.ndarray:
        """The assistant ids `build_prompt` needs for a prompt whose rows hold `body` text
        tokens (`prompt_body_tokens`): the whole text's once it ended, else the first
        3 + body ids (waiting for them) and the template's suffix, with `rows_from` set to
        where the frames' text rows go on (`TextRows`). One utterance per stream."""
        if self._used:
            raise ValueError("text: this TextStream was spoken already; make one per utterance")
        self._used = True
        ids, ended = self.wait(3 + body)
        if ended:
            return ids
        self.rows_from = 3 + body
        # five stand-ins for the suffix: what build_prompt cuts off
        return np.asarray(list(ids[: 3 + body]) + self._suffix[-SUFFIX_TOKENS:], np.int64)

    def _pull(self) -> None:
        try:
            piece = next(self._source)
        except StopIteration:
            self.end()
            return
        self.push(piece)


class TextCancelled(Exception):
    """A text stream's consumer stopped while a frame waited for its text."""


def stream_layout(streaming_text: Optional[bool]) -> bool:
    """The layout of a request whose text arrives in pieces: streaming text (None, the
    default, and True); the whole-text layout puts every text token in the prompt, before
    the first frame, so it is a ValueError naming the argument."""
    if streaming_text is False:
        raise ValueError(
            "streaming_text: a text that arrives in pieces needs the streaming-text layout "
            "(True or None); the whole-text layout (False) puts all of the text in the prompt, "
            "so it must be known before the first frame"
        )
    return True


def prompt_body_tokens(tok, ref_text: Optional[str], ref_frames: int) -> int:
    """How many tokens of the text the streaming-text prompt's rows hold (build_prompt): the
    first one, or for an in-context clone as many as the reference's codec rows outnumber
    its transcript's tokens (the text pairs with the codec row for row)."""
    if not ref_text:
        return 1
    ref = len(encode(tok, reference_text(ref_text))) - 5  # ref_ids[3:-2]
    return max(0, 1 + int(ref_frames) - ref)


class TextRows:
    """The text row frame g adds to its codec embedding, for a text still arriving when the
    prompt was built (`TextStream.rows_from` set): the prompt's trailing rows
    (`head`, what the reference transcript left over), then assistant id rows_from + j as
    it is committed (waiting for it), then tts_eos, then tts_pad; as the whole text's
    trailing rows would be. `project`: ids -> their text-projection rows. At the end the
    prompt gets the whole text's prompt_ids and trailing_ids (what a report shows)."""

    def __init__(self, stream: TextStream, prompt, head, project, eos_row, pad_row):
        self._stream, self._prompt, self._project = stream, prompt, project
        self._head, self._eos, self._pad = list(head), eos_row, pad_row
        self._start = int(stream.rows_from)
        self._head_ids = np.asarray(prompt.trailing_ids[:-1], np.int64)
        self._rows: list = []
        self._finished = False

    def __call__(self, step: int) -> np.ndarray:
        if step < len(self._head):
            return self._head[step]
        k = self._start + step - len(self._head)  # the assistant id this frame adds
        ids, ended = self._stream.wait(k + 1)
        body_end = len(ids) - SUFFIX_TOKENS if ended else len(ids)
        if ended:
            self._finish(ids)
        if k >= body_end:
            return self._eos if k == body_end else self._pad
        have = self._start + len(self._rows)
        if have <= k:  # every id committed since the last call, projected in one call
            self._rows.extend(self._project(ids[have:body_end]))
        return self._rows[k - self._start]

    def _finish(self, ids: np.ndarray) -> None:
        if self._finished:
            return
        self._finished = True
        p = self._prompt
        p.prompt_ids = ids
        rest = ids[self._start : len(ids) - SUFFIX_TOKENS]
        eos = p.trailing_ids[-1:]
        p.trailing_ids = np.concatenate([self._head_ids, rest, eos]).astype(np.int64)


async def astream(tts, chunks, info: Optional[dict] = None, **kw):
    """Audio chunks (float32, 24 kHz) of a text whose pieces come from `chunks`, an async
    iterator (or a plain one) of str or bytes pieces, fed from the event loop while
    `aspeak` makes the audio in a worker thread. A bad piece ends the stream with its
    ValueError; a consumer that stops (closes this generator, or is cancelled) stops the
    worker within a frame."""
    import asyncio

    stream = tts.text_stream()

    async def feed() -> None:
        try:
            if hasattr(chunks, "__aiter__"):
                async for piece in chunks:
                    stream.push(piece)
            else:
                for piece in chunks:
                    stream.push(piece)
            stream.end()
        except Exception as e:
            stream.fail(e)

    feeder = asyncio.ensure_future(feed())
    speech = aspeak(tts, stream, info=info, **kw)
    try:
        async for audio in speech:
            yield audio
    finally:
        feeder.cancel()
        await speech.aclose()  # closed now, not when collected: the worker stops here


async def aspeak(tts, stream: TextStream, info: Optional[dict] = None, **kw):
    """Audio chunks of `stream` (fed elsewhere: `push` / `end`) as `tts.stream` makes them
    in a worker thread (one runtime speaks one utterance at a time: give each concurrent
    one a `tts.replica()`). Closing or cancelling this generator cancels the stream (the
    worker stops at its next frame) and waits for the worker to have stopped, so the
    runtime is free again when it returns."""
    import asyncio

    loop = asyncio.get_running_loop()
    out: asyncio.Queue = asyncio.Queue()

    def post(item) -> None:
        try:
            loop.call_soon_threadsafe(out.put_nowait, item)
        except RuntimeError:  # the loop closed: nobody is listening any more
            stream.cancel()

    def speak() -> None:
        try:
            # one utterance at a time per runtime: a consumer that stopped listening
            # cancelled its stream, but its worker leaves only at its next frame, and a
            # runtime given back before then would run two utterances on one talker and
            # depth-loop cache (the KV commit overflowed)
            with tts.speaking:
                for audio in tts.stream(stream, info=info, **kw):
                    post(("audio", audio))
            post(("done", None))
        except BaseException as e:  # handed to the consumer, raised there
            post(("error", e))

    worker = threading.Thread(target=speak, name="qwen3-text-stream", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = await out.get()
            if kind == "error":
                raise value
            if kind == "done":
                return
            yield value
    finally:
        stream.cancel()
        await asyncio.shield(loop.run_in_executor(None, worker.join))
