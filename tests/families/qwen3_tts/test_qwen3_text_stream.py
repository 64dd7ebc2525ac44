"""Qwen3-TTS with the text arriving in pieces (issue 49 item 1): `TextStream` commits exactly
the whole text's token ids whatever the split (str or UTF-8 bytes, inside a character,
between a base and its combining mark, inside an added token), and the codes of
`stream_text` / `generate_codes(text_stream(...))` are bit-identical to the whole text's in
the streaming-text layout, greedy and sampled, AR and speculative, CustomVoice, x-vector and
in-context clones, whatever the split and whenever the pieces come."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import DATA

pytest.importorskip("tokenizers")

from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
from codecspec.families.qwen3_tts.text import assistant_text, load_text_tokenizer
from codecspec.families.qwen3_tts.text_stream import TextStream, stable_cut

TINY = DATA / "qwen3_tiny"
CLONE = DATA / "qwen3_clone"
TEXT = "Hello there, one loop!  It's 12 o'clock\n\nnaïve café, 你好。 done."
# 18 text tokens that every configuration below speaks past (the tiny random models stop at
# frame 29 to 60): the text runs out mid-utterance, so tts_eos and tts_pad follow it
SHORT = "It's 12, café 你好!"
FRAMES = 60

# every character class the commit rule reasons about: letters of several scripts, digits,
# contractions, punctuation, whitespace runs with newlines, NBSP, combining marks (NFC
# joins some), Hangul jamo (NFC composes them), emoji with a modifier, the added tokens
_ATOMS = list("ab xyz'sSlLrEvdmt\n\r\t  .,!?-12é\u0301\u0308\u0327cAOä你好\u1100\u1161\u11a8한<|>")
_ATOMS += ["<|im_end|>", "<|endoftext|>", "<|im_", "e\u0301", "\u00a0", "\u3000", "👍🏽", "'re"]
_SAFE = st.characters(
    blacklist_categories=("Cs",),
    blacklist_characters=[chr(c) for c in [*range(0, 9), *range(14, 32), *range(127, 160)]],
)
TEXTS = st.one_of(
    st.lists(st.sampled_from(_ATOMS), min_size=1, max_size=25).map("".join),
    st.text(_SAFE, min_size=1, max_size=30),
).filter(lambda t: t.strip())


@pytest.fixture(scope="module")
def tok():
    return load_text_tokenizer(TINY / "custom_equal")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    cache = tmp_path_factory.mktemp("qwen3_text_stream")
    load = lambda d: Qwen3TTS.load(d, cache_dir=cache, weights="fp32", threads=1)  # noqa: E731
    # a random folder's vocabulary splits "assistant" in two: the template's suffix is six
    # tokens, so the whole text's ids[3:-5] end with its first one (`SUFFIX_TOKENS`)
    from codecspec.families.qwen3_tts.random_checkpoint import write_random_checkpoint

    random_tiny = tmp_path_factory.mktemp("qwen3_random_tiny") / "m"
    write_random_checkpoint("tiny", random_tiny, seed=0)
    return {
        "custom_equal": load(TINY / "custom_equal"),
        "base_xvector": load(TINY / "base_xvector"),
        "base_icl": load(CLONE / "base_icl"),
        "random_tiny": load(random_tiny),
    }


def _split(seq, cuts):
    cuts = sorted(set(cuts))
    return [seq[a:b] for a, b in zip([0, *cuts], [*cuts, len(seq)])]


def _pieces(data, text: str):
    """A random split of `text`, as str pieces or as UTF-8 bytes cut anywhere."""
    seq = text.encode() if data.draw(st.booleans(), label="bytes") else text
    cuts = data.draw(st.lists(st.integers(0, len(seq)), max_size=10), label="cuts")
    return _split(seq, cuts)


# ---------------------------------------------------------------------- tokens
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=TEXTS, data=st.data())
def test_any_split_commits_the_whole_texts_ids(tok, text, data):
    want = tok.encode(assistant_text(text)).ids
    s = TextStream(tok)
    for piece in _pieces(data, text):
        s.push(piece)
        # what is committed before the end is final: a prefix of the whole text's ids
        assert s.wait(0)[0].tolist() == want[: len(s.wait(0)[0])]
    s.end()
    ids, ended = s.wait(len(want) + 1)
    assert ended and ids.tolist() == want


@pytest.mark.parametrize(
    "pieces",
    [
        ["caf", b"\xc3", b"\xa9 au lait"],  # inside a two-byte character
        ["你", "好".encode()[:1], "好".encode()[1:], "。 ok"],  # inside a three-byte one
        ["cafe", "\u0301 au", " lait"],  # NFC joins the mark with the e before it
        ["\u1100", "\u1161", "\u11a8 x"],  # Hangul jamo composed across pieces
        ["it", "'", "re", " 'll", "ok"],  # contractions cut
        ["a <|im_", "end|> b", " c"],  # an added token cut
        ["a  ", " \n", "\n  ", "b"],  # a whitespace run cut
    ],
)
def test_hard_splits(tok, pieces):
    s = TextStream(tok)
    for p in pieces:
        s.push(p)
    s.end()
    text = "".join(p if isinstance(p, str) else p.decode() for p in _join_bytes(pieces))
    assert s.wait(0)[0].tolist() == tok.encode(assistant_text(text)).ids


def _join_bytes(pieces):
    out, buf = [], b""
    for p in pieces:
        if isinstance(p, bytes):
            buf += p
            continue
        if buf:
            out.append(buf)
            buf = b""
        out.append(p)
    return out + ([buf] if buf else [])


def test_tokens_commit_once_no_later_piece_can_change_them(tok):
    """A word commits when the next one starts, not at the end of the text."""
    s = TextStream(tok)
    s.push("Hello")
    assert len(s.wait(0)[0]) == 3  # the template's head; "Hello" could still grow
    s.push(" wor")
    hello = tok.encode(assistant_text("Hello")).ids[3:-5]
    assert s.wait(0)[0].tolist()[3:] == hello
    s.push("ld  ")  # " world" ends at the space; the trailing run may still grow
    world = tok.encode(assistant_text("Hello world")).ids[3:-5]
    assert s.wait(0)[0].tolist()[3:] == world
    # the run ends: "  xy" splits as " ", " xy" (the last character is held back too:
    # NFC may still join it with a mark that follows)
    s.push("xy")
    space = tok.encode(" ").ids
    assert s.wait(0)[0].tolist()[3:] == world + space


def test_stable_cut_holds_back_a_partial_added_token(tok):
    raw = "<|im_start|>assistant\nhi <|im_e"
    cut = stable_cut(tok, raw, 0, ("<|im_end|>", "<|im_start|>"))
    assert cut <= raw.index("<|im_e")


def test_bad_pieces_name_the_argument_and_leave_the_stream_usable(tok):
    s = TextStream(tok)
    s.push("ok ")
    for bad in (3, b"\xff", "a\x00b"):
        with pytest.raises(ValueError, match="^chunks: "):
            s.push(bad)
    s.push(b"\xc3")
    with pytest.raises(ValueError, match="^chunks: "):
        s.push("x")  # a str inside a character cut over bytes
    s.push(b"\xa9 fin")
    s.end()
    assert s.wait(0)[0].tolist() == tok.encode(assistant_text("ok é fin")).ids
    with pytest.raises(ValueError, match="^chunks: "):
        s.push("more")
    for pieces in ([b"caf\xc3"], [" ", "\n"]):  # ends inside a character; only whitespace
        s = TextStream(tok)
        for p in pieces:
            s.push(p)
        with pytest.raises(ValueError, match="^chunks: "):
            s.end()


# ---------------------------------------------------------------------- codes
def _kw(name: str) -> dict:
    if name in ("custom_equal", "random_tiny"):
        return dict(speaker="aiden", language="english")
    if name == "base_xvector":
        return dict(ref_audio=TINY / "ref.wav")
    return dict(ref_audio=CLONE / "ref_a.wav", ref_text="Good morning.")


_WHOLE: dict = {}


def _whole(models, name, text, **kw):
    key = (name, text, tuple(sorted(kw.items())))
    if key not in _WHOLE:
        tts = models[name]
        r = tts.generate_codes(text, streaming_text=True, max_frames=FRAMES, **_kw(name), **kw)
        _WHOLE[key] = r.codes
    return _WHOLE[key]


def _streamed(models, name, pieces, **kw):
    tts = models[name]
    r = tts.generate_codes(tts.text_stream(pieces), max_frames=FRAMES, **_kw(name), **kw)
    return r.codes


CONFIGS = [
    ("custom_equal", dict(mode="ar", seed=0)),
    ("custom_equal", dict(mode="spec", seed=5)),
    ("custom_equal", dict(mode="ar", temperature=0.0)),
    ("custom_equal", dict(mode="spec", temperature=0.0)),
    ("base_xvector", dict(mode="spec", seed=2)),
    ("base_xvector", dict(mode="ar", seed=3)),
    ("base_icl", dict(mode="ar", seed=1)),
    ("base_icl", dict(mode="spec", seed=4)),
    ("random_tiny", dict(mode="ar", seed=0)),
    ("random_tiny", dict(mode="spec", seed=1)),
]


@pytest.mark.parametrize("name,kw", CONFIGS)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_split_gives_the_whole_texts_codes(models, name, kw, data):
    want = _whole(models, name, SHORT, **kw)
    trailing = len(models[name].tok.encode(assistant_text(SHORT)).ids) - 8
    assert len(want) > trailing + 2  # spoken past the text's end, its tts_eos and a tts_pad
    got = _streamed(models, name, _pieces(data, SHORT), **kw)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["custom_equal", "base_icl"])
def test_word_pieces_and_random_texts_agree(models, name):
    """An LLM-like split (one piece per word) of texts that run out mid-utterance or not."""
    for text in ("Hi.", "One two three four five six seven eight nine ten eleven twelve."):
        pieces = [w + " " for w in text.split(" ")]
        pieces[-1] = pieces[-1][:-1]
        want = _whole(models, name, text, seed=3)
        np.testing.assert_array_equal(_streamed(models, name, pieces, seed=3), want)


def test_codes_do_not_depend_on_when_the_pieces_come(models):
    """A producer thread pushing with pauses (the frames wait for their text)."""
    tts = models["custom_equal"]
    s = tts.text_stream()
    pieces = [TEXT[i : i + 4] for i in range(0, len(TEXT), 4)]

    def produce():
        rng = np.random.default_rng(0)
        for p in pieces:
            time.sleep(float(rng.uniform(0, 0.01)))
            s.push(p)
        s.end()

    threading.Thread(target=produce).start()
    r = tts.generate_codes(s, max_frames=FRAMES, **_kw("custom_equal"), seed=4)
    np.testing.assert_array_equal(r.codes, _whole(models, "custom_equal", TEXT, seed=4))
    assert r.prompt.streaming_text


def test_stream_text_audio_equals_the_whole_texts(models):
    tts = models["custom_equal"]
    kw = dict(_kw("custom_equal"), seed=6, max_frames=12)
    want = np.concatenate(list(tts.stream(TEXT, streaming_text=True, **kw)))
    got = np.concatenate(list(tts.stream_text(_split(TEXT, range(0, len(TEXT), 5)), **kw)))
    np.testing.assert_array_equal(got, want)


def test_astream_text_from_an_async_iterator(models):
    tts = models["custom_equal"]
    kw = dict(_kw("custom_equal"), seed=6, max_frames=12)

    async def pieces():
        for p in _split(TEXT, range(0, len(TEXT), 7)):
            await asyncio.sleep(0)
            yield p

    async def run():
        return [a async for a in tts.astream_text(pieces(), **kw)]

    got = np.concatenate(asyncio.run(run()))
    want = np.concatenate(list(tts.stream(TEXT, streaming_text=True, **kw)))
    np.testing.assert_array_equal(got, want)


def test_whole_text_layout_and_reuse_are_refused(models):
    tts = models["custom_equal"]
    with pytest.raises(ValueError, match="^streaming_text: "):
        tts.generate_codes(
            tts.text_stream(["Hi", " there"]), streaming_text=False, **_kw("custom_equal")
        )
    s = tts.text_stream(["Hi there."])
    tts.generate_codes(s, max_frames=3, **_kw("custom_equal"))
    with pytest.raises(ValueError, match="^text: "):
        tts.generate_codes(s, max_frames=3, **_kw("custom_equal"))
    with pytest.raises(ValueError, match="^speaker: "):  # the request checked before any text
        tts.generate_codes(tts.text_stream(iter(())), speaker="nobody")


# ---------------------------------------------------------------------- CLI
def test_cli_reads_stdin_as_it_arrives(models, tmp_path):
    """`codecspec synth --text-stdin --stream`, fed by a pipe that writes the text in pieces
    with pauses (the last piece cut inside a character): audio is in the WAV before the text
    has ended, and --codes-out holds the whole text's codes in the streaming-text layout."""
    import json
    import os
    import subprocess
    import sys

    wav, codes = tmp_path / "out.wav", tmp_path / "codes.npy"
    cmd = [sys.executable, "-m", "codecspec", "synth", "--text-stdin", "--stream", "--json"]
    cmd += ["--model", str(TINY / "custom_equal"), "--speaker", "aiden", "--language", "english"]
    cmd += ["--weights", "fp32", "--mode", "ar", "--seed", "0", "--max-frames", str(FRAMES)]
    cmd += ["-o", str(wav), "--codes-out", str(codes)]
    env = dict(os.environ, CODECSPEC_CACHE=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    data = SHORT.encode()
    head, tail = data[:7], data[7:]  # "It's 12": its first tokens are final
    proc.stdin.write(head)
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not wav.exists() or wav.stat().st_size <= 44):
        assert proc.poll() is None, "synth ended before the text did"
        time.sleep(0.05)
    assert wav.stat().st_size > 44, "no audio before the rest of the text came"
    for i in range(0, len(tail), 3):
        proc.stdin.write(tail[i : i + 3])
        proc.stdin.flush()
        time.sleep(0.02)
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0
    out = proc.stdout.read()
    report = json.loads(out)
    assert report["streaming_text"] is True
    assert report["first_audio_after_first_text_ms"] is not None
    want = _whole(models, "custom_equal", SHORT, mode="ar", seed=0)
    np.testing.assert_array_equal(np.load(codes), want)


def test_cli_refuses_the_whole_text_layout_with_stdin(tmp_path, capsys):
    from codecspec.cli import main

    rc = main(
        ["synth", "--text-stdin", "--stream", "--no-streaming-text"]
        + ["--model", str(TINY / "custom_equal"), "-o", str(tmp_path / "o.wav")]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "error: --no-streaming-text: " in err and "\n" not in err


def test_cli_reads_stdin_whole_without_stream(models, tmp_path):
    import os
    import subprocess
    import sys

    codes = tmp_path / "codes.npy"
    cmd = [sys.executable, "-m", "codecspec", "synth", "--text-stdin", "--streaming-text"]
    cmd += ["--model", str(TINY / "custom_equal"), "--speaker", "aiden", "--language", "english"]
    cmd += ["--weights", "fp32", "--mode", "ar", "--seed", "0", "--max-frames", str(FRAMES)]
    cmd += ["--codes-out", str(codes), "--json"]
    env = dict(os.environ, CODECSPEC_CACHE=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(cmd, input=SHORT.encode(), capture_output=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    want = _whole(models, "custom_equal", SHORT, mode="ar", seed=0)
    np.testing.assert_array_equal(np.load(codes), want)
    bad = subprocess.run(cmd[:-3] + ["x"], input=b"y", capture_output=True, env=env)
    assert bad.returncode == 2 and b"--text-stdin: give the text one way" in bad.stderr


def test_a_consumer_that_stops_stops_the_worker(models):
    """aspeak closed while its frames wait for text that never comes: the worker thread
    stops (the runtime is free again) by the time aclose returns."""
    from codecspec.families.qwen3_tts.text_stream import aspeak

    tts = models["custom_equal"].replica()

    async def run():
        s = tts.text_stream()
        s.push("It's 12, café and more")  # never ended
        gen = aspeak(tts, s, max_frames=FRAMES, **_kw("custom_equal"), seed=0)
        first = await gen.__anext__()
        t0 = time.perf_counter()
        await gen.aclose()
        return first, time.perf_counter() - t0

    before = threading.active_count()
    first, closing = asyncio.run(run())
    assert first.size > 0 and closing < 5.0
    assert threading.active_count() == before
    assert not [t for t in threading.enumerate() if t.name == "qwen3-text-stream"]


def test_a_runtime_speaks_one_utterance_at_a_time(models):
    """A consumer that leaves without closing its generator (an `async for` left by an
    exception) while the next utterance starts on the same runtime, as a WebSocket session
    that ends and the next one that takes its runtime: the next one's audio is its own (it
    waits for the first worker, `Qwen3TTS.speaking`; side by side the two shared one talker and
    depth-loop cache and the KV commit overflowed)."""
    from codecspec.families.qwen3_tts.text_stream import aspeak

    base = models["custom_equal"]
    kw = dict(max_frames=FRAMES, **_kw("custom_equal"), seed=0)
    second = "One two three."
    want = np.concatenate(list(base.replica().stream(second, streaming_text=True, **kw)))
    tts = base.replica()

    def ended(text):
        s = tts.text_stream()
        s.push(text)
        s.end()
        return s

    async def run():
        left = aspeak(tts, ended(TEXT), **kw)
        await left.__anext__()  # then abandoned, still speaking
        got = [a async for a in aspeak(tts, ended(second), **kw)]
        await left.aclose()
        return np.concatenate(got)

    np.testing.assert_array_equal(asyncio.run(run()), want)


def test_closing_astream_text_stops_the_worker(models):
    """astream_text closed after its first audio while its pieces still come: the worker
    thread has stopped by the time aclose returns (the inner aspeak is closed at once, not
    when collected: its text, never ended, would keep the worker waiting)."""
    tts = models["custom_equal"].replica()

    async def pieces():
        yield "It's 12, café and more"
        await asyncio.sleep(3600)  # an LLM that never finishes

    async def run():
        gen = tts.astream_text(pieces(), max_frames=FRAMES, **_kw("custom_equal"), seed=0)
        first = await gen.__anext__()
        await gen.aclose()
        return first, [t for t in threading.enumerate() if t.name == "qwen3-text-stream"]

    first, workers = asyncio.run(run())
    assert first.size > 0 and not workers
