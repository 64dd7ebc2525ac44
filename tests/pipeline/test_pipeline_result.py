"""One result type: every family's `generate` result is a `codecspec.pipeline.result.Result`
whose stage figures (total_seconds, stage_ms_per_frame) come from its `stage_seconds()`, with
the fields and figures the families' types had before (their constructors' field order
included: callers build them positionally)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from codecspec.families.fsq.model import FSQSynthesis
from codecspec.families.qwen3_tts.pipeline import Qwen3Result
from codecspec.pipeline.result import Result, Synthesis

CODES = np.zeros((4, 16), np.int64)


def test_every_family_result_is_a_result():
    for cls in (Synthesis, FSQSynthesis, Qwen3Result):
        assert issubclass(cls, Result) and dataclasses.fields(cls)[0].name == "codes"
    with pytest.raises(NotImplementedError):
        Result(CODES).stage_seconds()


def test_synthesis_figures_are_its_stages():
    s = Synthesis(CODES, None, 16000, "", "ar", 3, 45, 0.1, 0.2, 0.3, frontend_seconds=0.05)
    assert s.total_seconds == 0.05 + 0.2 + 0.1 + 0.3 and s.frames == 4
    assert s.stage_ms_per_frame() == {
        "frontend": 1e3 * 0.05 / 4,
        "temporal": 1e3 * 0.2 / 4,
        "depth": 1e3 * 0.1 / 4,
        "vocoder": 1e3 * 0.3 / 4,
    }


def test_fsq_figures_are_its_stages():
    s = FSQSynthesis(CODES, None, 16000, "", 4, False, 4, 0.3, 0.1, 0.2)
    assert s.total_seconds == 0.3 + 0.1 + 0.2 and s.hit_max_frames
    assert s.stage_ms_per_frame()["frontend"] == 0.0 and s.stage_ms_per_frame()["depth"] == 25.0


def test_qwen3_figures_are_its_seconds():
    r = Qwen3Result(CODES, False, None, {"prefill": 0.1, "talker": 0.2, "depth": 0.3})
    assert r.total_seconds == 0.1 + 0.2 + 0.3 and list(r.stage_ms_per_frame()) == [
        "prefill",
        "talker",
        "depth",
    ]
