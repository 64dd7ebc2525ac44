"""The text policy (frontend/textcheck.py) at every boundary where a string could be cut or fail:
espeak-ng's library and command-line tool (C strings), the Qwen3-TTS tokenizer path, and
`codecspec synth`'s text and --text-file (issue 51)."""

from __future__ import annotations

import shutil
import unicodedata

import pytest

from codecspec.frontend.textcheck import check_text, text_problem

ALLOWED_CONTROLS = "\t\n\x0b\x0c\r"


def refused_by_policy(text: str) -> bool:
    """The policy restated from Unicode's own categories (not the module's regex)."""
    return any(
        unicodedata.category(c) == "Cs"
        or (unicodedata.category(c) == "Cc" and c not in ALLOWED_CONTROLS)
        for c in text
    )


def test_the_policy_over_every_bmp_code_point():
    for cp in range(0x10000):
        c = chr(cp)
        assert (text_problem("a" + c) is not None) == refused_by_policy(c), hex(cp)


@pytest.mark.parametrize(
    "text,index,what",
    [
        ("Hi\x00 there", 2, "U+0000"),
        ("Hi \ud800 there", 3, "surrogate U+D800"),
        ("\x1b[31m", 0, "U+001B"),
        ("ok\x9f", 2, "U+009F"),
    ],
)
def test_check_text_names_the_argument_the_character_and_its_index(text, index, what):
    with pytest.raises(ValueError) as e:
        check_text(text, "input")
    msg = str(e.value)
    assert msg.startswith("input: contains") and what in msg and f"index {index}" in msg


@pytest.mark.parametrize(
    "text",
    [
        "tab\tand\nnew lines\r\n",
        "e\u0301 combining, \u200d joiner, \u202eRTL\u202c override, \ufeff BOM",
        "עברית العربية 中文 日本語 한국어 हिन्दी ελληνικά русский",
        "private \ue000 and unassigned \U000e0fff",
    ],
)
def test_text_is_passed_whole(text):
    assert check_text(text) is text


def test_a_non_string_names_the_argument():
    with pytest.raises(ValueError, match="^instruct: expected a str"):
        check_text(b"bytes", "instruct")


# --------------------------------------------------------------------------- espeak-ng
def _espeak_library():
    from codecspec.frontend import espeak

    if not espeak.available():
        pytest.skip("espeak-ng's library is not available")
    return espeak


@pytest.mark.parametrize("call", ["ipa", "render", "timing"])
def test_the_espeak_library_refuses_a_nul_instead_of_cutting(call):
    # Before: "Hi\0 this is ..." was spoken (and phonemized) as "Hi".
    espeak = _espeak_library()
    fn = getattr(espeak, call)
    with pytest.raises(ValueError, match="^text: contains the control character U\\+0000"):
        fn("Hi\x00 this is a much longer sentence.", "en-us")


def test_the_c_boundary_itself_refuses_nul_and_surrogates():
    # The timing worker loads _espeak_lib alone (python -I): its own guard must hold.
    from codecspec.frontend._espeak_lib import Library, _c_text

    assert _c_text("Hi") == b"Hi\x00"
    for bad in ("Hi\x00 there", "Hi \ud800"):
        with pytest.raises(ValueError, match="^text: contains"):
            _c_text(bad)
    lib = _espeak_library()._library()
    assert isinstance(lib, Library)
    with pytest.raises(ValueError, match="^text:"):
        lib.ipa_clauses("Hi\x00 there", "en-us")


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
def test_phonemize_refuses_a_nul_for_the_command_line_tool_too():
    from codecspec.frontend.phonemes import phonemize

    with pytest.raises(ValueError, match="^text: contains"):
        phonemize("Hi\x00 this is a much longer sentence.", "en-us")
    full = phonemize("Hi\tthis is\na much longer sentence.", "en-us")
    assert full.count("|") == 0 and len(full) > 20, full  # tab and newline: spoken whole


# --------------------------------------------------------------------------- Qwen3-TTS
@pytest.mark.parametrize(
    "kw,arg",
    [
        (dict(text="Hi\x00 there"), "text"),
        (dict(text="Hi \ud800 there"), "text"),
        (dict(text="Hi.", instruct="Warm\x00 and slow."), "instruct"),
        (dict(text="Hi.", ref_text="Hello \udc80", ref_audio="clip.wav"), "ref_text"),
    ],
)
def test_qwen3_requests_refuse_what_the_tokenizer_would_fail_on(kw, arg):
    # Before: a lone surrogate reached the tokenizers library (TypeError "TextInputSequence
    # must be str"): a 500 in the server. The text is checked before the checkpoint is used.
    from codecspec.families.qwen3_tts.pipeline import check_request

    kw = dict(dict(speaker=None, language=None, instruct=None), **kw)
    with pytest.raises(ValueError) as e:
        check_request(None, **kw)
    assert str(e.value).startswith(f"{arg}: contains"), e.value


# --------------------------------------------------------------------------- synth
def test_text_file_with_a_nul_is_refused_naming_the_option(tmp_path):
    from codecspec.frontend.text_input import read_text_file

    f = tmp_path / "t.txt"
    f.write_bytes(b"Hello\x00 world, this is the rest.\n")
    with pytest.raises(ValueError) as e:
        read_text_file(f)
    assert str(e.value).startswith(f"--text-file: {f}: contains the control character U+0000")


def test_text_file_naming_a_directory_says_so(tmp_path):
    from codecspec.frontend.text_input import read_text_file

    with pytest.raises(ValueError, match="is a directory"):
        read_text_file(tmp_path)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--text-file", "{tmp}"], "--text-file: .* is a directory"),
        (["--text-file", "{tmp}/nul.txt"], "--text-file: .*U\\+0000 at index 5"),
        (["Hi\x00 there"], "^codecspec synth: error: text: contains .*U\\+0000"),
    ],
)
def test_synth_reports_bad_text_in_one_line(tmp_path, capsys, argv, message):
    import re

    from codecspec.cli import main

    (tmp_path / "nul.txt").write_bytes(b"Hello\x00 world")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["synth", "--model", "reference", "-o", str(tmp_path / "o.wav"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err


# --------------------------------------------------------------------------- fuzzed files
def _file_bytes():
    from hypothesis import strategies as st

    text = st.text(st.characters(exclude_categories=()), max_size=30)
    utf8 = text.map(lambda t: t.encode("utf-8", "surrogatepass"))  # lone surrogates too
    words = st.lists(
        st.sampled_from(["Hello", " ", "world.", "\n", "\x00", "\r\n", "\u202e", "e\u0301"]),
        max_size=10,
    ).map(lambda w: "".join(w).encode())
    prefix = st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\x00"])
    return st.tuples(prefix, st.one_of(st.binary(max_size=40), utf8, words)).map(b"".join)


def test_any_text_file_bytes_are_refused_in_one_line_or_read_whole(tmp_path_factory):
    """`codecspec synth --text-file` over arbitrary bytes (issue 51): a one-line ValueError
    naming --text-file, or the file's text whole (whitespace joined), with nothing in it that
    a C string or UTF-8 boundary would alter; espeak-ng then speaks it or finds nothing to
    say (a ValueError naming `text`), never anything else."""
    import argparse
    import os

    from hypothesis import given, settings

    from codecspec.frontend.text_input import synth_text

    espeak = shutil.which("espeak-ng") is not None
    folder = tmp_path_factory.mktemp("text_files")
    nightly = os.environ.get("CODECSPEC_FUZZ") == "nightly"
    examples = int(os.environ.get("CODECSPEC_FUZZ_EXAMPLES", 2000 if nightly else 150))

    @settings(max_examples=examples, derandomize=not nightly, deadline=None)
    @given(data=_file_bytes())
    def check(data):
        f = folder / "t.txt"
        f.write_bytes(data)
        args = argparse.Namespace(text=None, text_file=f)
        try:
            text = synth_text(args)
        except ValueError as e:
            assert str(e).startswith("--text-file: ") and "\n" not in str(e), e
            return
        whole = data.decode("utf-8-sig")
        assert text == " ".join(whole.split()), (data, text)
        assert not refused_by_policy(whole), data
        if espeak:
            from codecspec.frontend.phonemes import phonemize

            try:
                assert phonemize(text, "en-us")
            except ValueError as e:
                assert str(e).startswith("text: espeak-ng found nothing to say"), e

    check()
