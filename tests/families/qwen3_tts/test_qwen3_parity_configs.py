"""Parity with the official Qwen3-TTS code as a property of the loader, over a sweep of configs.

tests/data/qwen3_configs/<name>/ are tiny checkpoints that walk the axes the published config
allows (widths, heads, KV heads, head_dim, layers, vocabulary and codebook sizes, where the
special ids sit, both RoPE thetas, M-RoPE sections, RMSNorm eps, repetition penalty, the three
model types, both prompt modes, texts with digits, punctuation and non-ASCII); <name>.fixtures.npz
holds what the official qwen-tts 0.1.1 code gives on them (`python
scripts/qwen3_parity_fixtures.py --configs`, torch). These tests need neither torch nor qwen-tts.

For every configuration: the prompt ids, the prompt rows, the talker's and the code predictor's
teacher-forced logits (within 1e-4) and the greedy codes in AR and in speculative mode, frame by
frame. A code mismatch is reported at its first (frame, group); a loader that reads the
predictor's RoPE theta from the talker must fail these comparisons (test_broken_loader_*).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Optional

import numpy as np
import pytest
import qwen3_cases as qc
from paths import DATA

pytest.importorskip("tokenizers")  # the [qwen3] extra (also in [test])

from codecspec.calibrate.data import teacher_forced_feeds
from codecspec.families.qwen3_tts.checkpoint import Qwen3Checkpoint
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
from codecspec.families.qwen3_tts.text import SPEAKER, build_prompt, load_text_tokenizer

DATA = DATA / "qwen3_configs"
CONFIGS = sorted(p.name[: -len(".cases.json")] for p in DATA.glob("*.cases.json"))
TOL = 1e-4


@functools.cache
def _fixture(name: str):
    cases = json.loads((DATA / f"{name}.cases.json").read_text(encoding="utf-8"))
    with np.load(DATA / f"{name}.fixtures.npz") as z:
        return cases, {k: z[k] for k in z.files}


def _all_cases():
    return [(n, i) for n in CONFIGS for i in range(len(_fixture(n)[0]))]


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    """name -> the loaded runtime (fp32, the official precision), built once per module."""
    cache = tmp_path_factory.mktemp("qwen3_configs_cache")
    return functools.cache(lambda name: Qwen3TTS.load(DATA / name, cache_dir=cache, weights="fp32"))


# ---------------------------------------------------------------------- comparing codes
def first_difference(got: np.ndarray, want: np.ndarray) -> Optional[tuple[int, int]]:
    """(frame, group) of the first code that differs, frames in order; when one run is a
    prefix of the other, the first frame the shorter one lacks, group 0. None: identical."""
    n = min(len(got), len(want))
    bad = np.argwhere(np.asarray(got[:n]) != np.asarray(want[:n]))
    if len(bad):
        return int(bad[0][0]), int(bad[0][1])
    return None if len(got) == len(want) else (n, 0)


def parity_message(where: str, got: np.ndarray, want: np.ndarray) -> Optional[str]:
    """None when the codes are identical, else a one-line account of the first difference."""
    at = first_difference(got, want)
    if at is None:
        return None
    f, g = at
    mine = "ended" if f >= len(got) else str(int(got[f, g]))
    theirs = "ended" if f >= len(want) else str(int(want[f, g]))
    return (
        f"{where}: first difference at frame {f}, group {g}: codecspec {mine}, official "
        f"{theirs} (codecspec {len(got)} frames, official {len(want)})"
    )


def _request(tts, case: dict) -> dict:
    # The official wrapper drops instruct for 0.6B CustomVoice; codecspec refuses it there.
    kw = dict(
        speaker=case.get("speaker"),
        language=qc.language(case),
        instruct=case.get("instruct") if tts.ck.accepts_instruct else None,
        streaming_text=qc.streaming_text(case),  # None: the official default of the mode
    )
    if case.get("ref_audio"):
        kw["ref_audio"] = DATA / case["ref_audio"]
    return kw


def _prompt(tts, case: dict):
    kw = _request(tts, case)
    kw["language"] = kw["language"] or "auto"  # build_prompt takes the resolved language
    if kw.pop("ref_audio", None) is not None:
        kw["speaker_vector"] = True
        tts._xvector = tts.speaker_vector(DATA / case["ref_audio"])
    return build_prompt(tts.tok, tts.spec, case["text"], **kw)


def greedy_mismatches(tts, name: str, mode: str) -> list[str]:
    cases, z = _fixture(name)
    limit = tts.ck.generation.max_new_tokens - 1  # frames the official run may make
    out = []
    for i, case in enumerate(cases):
        want = z[f"case_{i}_codes"]
        # A wrong model may never say eos: two frames past the official run are enough to
        # tell, and keep a failure from running to max_new_tokens (8192 in issue26).
        kw = dict(_request(tts, case), max_frames=min(len(want) + 2, limit))
        r = tts.generate_codes(case["text"], mode=mode, temperature=0, **kw)
        msg = parity_message(f"{name} case {i} ({mode})", r.codes, want)
        if msg:
            out.append(msg)
    return out


def predictor_logits(tts, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(codecspec, official) teacher-forced code-predictor logits [frames, G-1, V] of case 0,
    both from the official talker hidden states and codes."""
    _, z = _fixture(name)
    graph = tts.depth.graph
    inputs = {i.name for i in graph.session.get_inputs()}
    got = []
    for h, frame in zip(z["case_0_depth_hidden"], z["case_0_codes"]):
        feeds = teacher_forced_feeds(graph.config, h, frame, joined=graph.kv_joined)
        logits = graph.session.run(["logits"], {k: v for k, v in feeds.items() if k in inputs})
        got.append(logits[0][1:])  # row j + 1 is head j on the position holding c_j
    return np.stack(got), z["case_0_depth_logits"]


# ---------------------------------------------------------------------- the comparisons
def test_sweep_is_checked_in():
    assert len(CONFIGS) >= 16, CONFIGS
    assert "issue26" in CONFIGS


@pytest.mark.parametrize("name,i", _all_cases())
def test_prompt_ids(name, i):
    cases, z = _fixture(name)
    ck = Qwen3Checkpoint(DATA / name)
    c = cases[i]
    p = build_prompt(
        load_text_tokenizer(ck.dir),
        ck.spec,
        c["text"],
        language=qc.language(c) or "auto",
        speaker=c.get("speaker"),
        instruct=c.get("instruct") if ck.accepts_instruct else None,
        streaming_text=qc.streaming_text(c),
        speaker_vector=bool(c.get("ref_audio")),
    )
    assert p.prompt_ids.tolist() == z[f"case_{i}_prompt_ids"].tolist()
    assert p.instruct_ids.tolist() == z[f"case_{i}_instruct_ids"].tolist()
    # the layout the official call used: its method's default where the case named none
    assert p.streaming_text == bool(z[f"case_{i}_streaming"])


@pytest.mark.parametrize("name", CONFIGS)
def test_prompt_rows_and_talker_logits_teacher_forced(load, name):
    """Case 0: the prefill rows, then the talker's logits at the prompt's last row and over
    the first frames, fed the official codes."""
    cases, z = _fixture(name)
    tts = load(name)
    p = _prompt(tts, cases[0])
    emb, trailing = tts.prompt_embeds(p)
    ref = z["case_0_embeds"]
    assert emb.shape == ref.shape, f"{name}: prompt rows {emb.shape}, official {ref.shape}"
    xrow = (p.codec_ids == SPEAKER) & (p.speaker_id is None)  # a Base prompt's x-vector row
    np.testing.assert_allclose(emb[~xrow], ref[~xrow], atol=TOL, rtol=0, err_msg=name)
    for r in np.flatnonzero(xrow):  # the x-vector, relative to its own scale
        np.testing.assert_allclose(emb[r], ref[r], atol=TOL * np.abs(ref[r]).max(), rtol=0)
    want = z["case_0_logits"]
    h = tts.talker.prefill(emb, capacity=len(emb) + len(want))
    got = [tts.talker.logits(h)]
    for f, frame in enumerate(z["case_0_codes"][: len(want) - 1]):
        e = tts.frame_embed(frame) + (trailing[f] if f < len(trailing) else tts._pad_row)
        got.append(tts.talker.logits(tts.talker.step(e)))
    np.testing.assert_allclose(np.stack(got), want, atol=TOL, rtol=0, err_msg=name)


@pytest.mark.parametrize("name", CONFIGS)
def test_predictor_logits_teacher_forced(load, name):
    got, want = predictor_logits(load(name), name)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=name)


@pytest.mark.parametrize("mode", ["ar", "spec"])
@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_codes_frame_by_frame(load, name, mode):
    problems = greedy_mismatches(load(name), name, mode)
    assert not problems, "\n".join(problems)


def test_sweep_covers_eos_and_the_frame_limit():
    lengths = {}
    for name in CONFIGS:
        cases, z = _fixture(name)
        limit = json.loads((DATA / name / "generation_config.json").read_text())["max_new_tokens"]
        for i in range(len(cases)):
            lengths[(name, i)] = (len(z[f"case_{i}_codes"]), limit)
    assert any(n < limit - 1 for n, limit in lengths.values())  # some stop at eos
    assert any(n == limit - 1 for n, limit in lengths.values())  # some at max_new_tokens


# ---------------------------------------------------------------------- the checks can fail
def test_parity_message_names_the_first_frame_and_group():
    want = np.arange(12).reshape(3, 4)
    got = want.copy()
    assert parity_message("x", got, want) is None
    got[1, 2] = 99
    got[2, 0] = 98
    assert first_difference(got, want) == (1, 2)
    assert "frame 1, group 2: codecspec 99, official 6" in parity_message("x", got, want)
    assert first_difference(want[:2], want) == (2, 0)
    assert "codecspec ended, official 8" in parity_message("x", want[:2], want)


def test_broken_loader_fails_the_comparison(tmp_path, monkeypatch):
    """A loader that takes the code predictor's RoPE theta from the talker (1e6 instead of
    1e4 in issue26) must be caught by the teacher-forced logits and by the codes."""
    from codecspec.families.qwen3_tts import predictor_import as qwen3

    right = qwen3.config_from_qwen3_tts

    def talker_theta(root, **kw):
        c = right(root, **kw)
        return dataclasses.replace(c, rope_theta=float(root["talker_config"]["rope_theta"]))

    monkeypatch.setattr(qwen3, "config_from_qwen3_tts", talker_theta)
    tts = Qwen3TTS.load(DATA / "issue26", cache_dir=tmp_path, weights="fp32")
    assert tts.depth.graph.config.rope_theta == 1e6  # the break took effect
    got, want = predictor_logits(tts, "issue26")
    assert np.abs(got - want).max() > 100 * TOL
    problems = greedy_mismatches(tts, "issue26", "ar")
    assert problems and all("first difference at frame" in p for p in problems), problems


# ---------------------------------------------------------------------- issue 26, as reported
def _synth_codes(tmp_path, capsys, *extra) -> tuple[np.ndarray, str]:
    from codecspec.cli import main

    cases, _ = _fixture("frame_limit")
    out = tmp_path / "c.npy"
    argv = ["synth", cases[0]["text"], "--model", str(DATA / "frame_limit")]
    argv += ["--speaker", cases[0]["speaker"], "--language", cases[0]["language"]]
    argv += ["--temperature", "0", "--mode", "ar", "--provider", "cpu", "--codes-out", str(out)]
    assert main(argv + ["--cache-dir", str(tmp_path / "cache"), "--json", *extra]) == 0
    return np.load(out), capsys.readouterr().err


def test_cli_greedy_codes_are_the_official_ones_by_default(tmp_path, capsys):
    """What issue 26 ran (no --weights): the default is fp32, and its greedy codes are the
    official ones; asking for it by name gives the same."""
    official = _fixture("frame_limit")[1]["case_0_codes"]
    codes, err = _synth_codes(tmp_path, capsys)
    assert parity_message("synth (default weights)", codes, official) is None
    assert "quantised" not in err
    named, _ = _synth_codes(tmp_path, capsys, "--weights", "fp32")
    assert np.array_equal(named, codes)


def test_cli_greedy_on_quantised_weights_says_how_to_get_the_official_codes(tmp_path, capsys):
    _, err = _synth_codes(tmp_path, capsys, "--weights", "int8")
    assert "weights int8" in err and "--weights fp32" in err


def test_cli_subtalker_flags_set_the_code_predictors_law_alone(tmp_path, capsys):
    """`--temperature 0 --subtalker-temperature 1.5`: the talker greedy, the code predictor
    sampled, the codes of the Python call with those keywords (the official methods'
    subtalker_temperature)."""
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    greedy, _ = _synth_codes(tmp_path, capsys)
    extra = ("--subtalker-temperature", "1.5", "--seed", "1")
    sampled, _ = _synth_codes(tmp_path, capsys, *extra)
    assert greedy[0, 0] == sampled[0, 0] and not np.array_equal(greedy, sampled)
    case = _fixture("frame_limit")[0][0]
    tts = Qwen3TTS.load(DATA / "frame_limit", cache_dir=tmp_path / "cache", weights="fp32")
    want = tts.generate_codes(
        case["text"],
        speaker=case["speaker"],
        language=case["language"],
        temperature=0,
        subtalker_temperature=1.5,
        seed=1,
    ).codes
    assert np.array_equal(sampled, want)
