"""The shipped FSQ model (python/codecspec/models/fsq) end to end on ONNX Runtime, no torch:
one graph call per frame, the stop head ends held-out utterances, batching keeps each
stream's output, the CLI's synth/bench, and wrong-family folders are refused by name.
Phonemes come from the folder's bench.json, so espeak-ng is not needed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from paths import REPO
from test_perf import check_record

import codecspec as cs
from codecspec.families.fsq.bench import _batched
from codecspec.families.fsq.model import FSQ_FILES, FSQTTS, FSQFamily, default_fsq_dir
from codecspec.pipeline.family import SpeechRequest
from codecspec.pipeline.loop import run_inline, run_together
from codecspec.pipeline.registry import load_model, model_family, resolve_model_dir

DIR = default_fsq_dir()
REPO_FSQ = REPO / "python" / "codecspec" / "models" / "fsq"
pytestmark = pytest.mark.skipif(
    not all((DIR / f).is_file() for f in FSQ_FILES), reason="no shipped FSQ model"
)


@pytest.fixture(scope="module")
def tts():
    return FSQTTS(provider="cpu", threads=1)


@pytest.fixture(scope="module")
def texts():
    return json.loads((DIR / "bench.json").read_text())["utterances"]


def _say(tts, u, **kw):
    return tts.generate(
        "", phonemes=u["phonemes"], language=u["language"], speaker=u["speaker"], **kw
    )


def test_shipped_folder_size_and_metadata():
    total = sum(p.stat().st_size for p in DIR.iterdir() if p.is_file())
    assert total <= 25 * 2**20, f"{total / 2**20:.1f} MiB shipped"
    meta = json.loads((DIR / "model.json").read_text())
    assert meta["levels"] == [8, 7, 6, 6] and meta["groups"] == 8 and meta["packed_range"] == 2016
    assert (DIR / "MODEL_CARD.md").is_file()
    # the training report stays in the repository; the wheel carries what is read at run time
    assert (REPO_FSQ / "report.json").is_file()


def test_one_graph_call_per_frame_and_the_stop_head_ends_utterances(tts, texts):
    stopped, ratio = 0, []
    for i, u in enumerate(texts[:4]):
        s = _say(tts, u, seed=i, decode_audio=False)
        assert s.graph_calls == len(s.codes)  # one step call per frame, nothing else
        assert s.codes.shape[1] == 32 and s.codes.dtype == np.int64
        assert np.all(s.codes < np.array(tts.codec.cfg.channel_levels))
        stopped += s.stopped
        ratio.append(len(s.codes) / u["frames"])
    assert stopped == 4, "the length guard, not the stop head, ended an utterance"
    assert 0.6 < np.median(ratio) < 1.6, ratio


def test_length_guard_is_reported(tts, texts):
    s = _say(tts, texts[0], seed=0, max_frames=5, decode_audio=False)
    assert len(s.codes) == 5 and not s.stopped and s.max_frames == 5


def _states(tts, family, us, seed):
    """The streams of utterances `us` on `family`, stream b drawing from fork b of `seed`,
    each with its own guard, prepared as a served request is (the bench's streams)."""
    reqs = [SpeechRequest(u["phonemes"], "ipa", u["speaker"], u["language"]) for u in us]
    return [family.prepare(r, cs.Generator(seed).fork(b)) for b, r in enumerate(reqs)]


def test_batch_gives_each_stream_its_own_output(tts, texts):
    """Streams run together through the engine's loop (one step call for all of them) get
    the codes each gets alone: padding and batch-mates do not change a stream's bits."""
    us = texts[:3]
    family = FSQFamily(tts, 3, 400, 400)
    batch = run_together(family, _states(tts, family, us, 5))
    assert len({len(c) for c in batch}) > 1  # they end at different steps
    assert family.slots.calls == max(len(c) for c in batch)
    for b in range(3):
        alone = FSQFamily(tts, 1, 400, 400)
        state = _states(tts, alone, us, 5)[b]
        np.testing.assert_array_equal(np.stack(list(run_inline(alone, state))), batch[b])


def test_the_batched_bench_runs_the_streams_together(tts, texts):
    res = _batched(tts, texts[:3], 5)
    family = FSQFamily(tts, 3, 400, 400)
    lengths = [len(c) for c in run_together(family, _states(tts, family, texts[:3], 5))]
    assert res["batch"] == 3 and res["batch_step_calls"] == max(lengths)
    assert res["batch_ms_per_step"] > 0 and res["batch_frames_per_second"] > 0


def test_audio_and_rtf(tts, texts):
    s = _say(tts, texts[1], seed=1)
    assert s.wav.shape == (len(s.codes) * 1280,) and np.all(np.isfinite(s.wav))
    assert s.real_time_factor > 0 and s.ms_per_frame > 0


def test_registry_picks_the_family_and_refuses_the_wrong_one():
    assert model_family("fsq") == "fsq" and resolve_model_dir("fsq") == DIR
    assert model_family("reference") == "reference"
    with pytest.raises(ValueError, match="model_dir: .*codecspec-reference-tts/1"):
        FSQTTS(resolve_model_dir("reference"))
    with pytest.raises(ValueError, match="model"):
        model_family("/nonexistent/model")
    assert type(load_model("fsq", provider="cpu")).__name__ == "FSQTTS"


def test_unsupported_options_name_the_argument(tts, texts):
    with pytest.raises(ValueError, match="rate"):
        _say(tts, texts[0], rate=1.2)
    with pytest.raises(ValueError, match="mode"):
        _say(tts, texts[0], mode="spec")
    with pytest.raises(ValueError, match="language"):
        tts.generate("", phonemes="a", language="xx")


def test_levels_that_do_not_match_the_packed_range_are_refused(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(DIR, d)
    meta = json.loads((d / "model.json").read_text())
    meta["packed_range"] = 2048
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="levels"):
        FSQTTS(d)


def _cli(*args):
    r = subprocess.run(
        [sys.executable, "-m", "codecspec.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_cli_synth_and_bench(tmp_path, texts):
    u = texts[2]
    out = _cli(
        "synth",
        "",
        "--model",
        "fsq",
        "--phonemes",
        u["phonemes"],
        "--language",
        u["language"],
        "-o",
        str(tmp_path / "a.wav"),
        "-q",
        "--threads",
        "1",
    )
    assert "graph calls / frame: 1.00" in out and "stop head" in out
    assert (tmp_path / "a.wav").stat().st_size > 1000
    res = json.loads(
        _cli(
            "bench",
            "--model",
            "fsq",
            "--utterances",
            "2",
            "--batch",
            "2",
            "--json",
            "--threads",
            "1",
        )
    )
    assert res["calls_per_frame"] == 1.0 and res["loop_ms_per_frame"] > 0
    assert res["real_time_factor"] > 0 and res["batch"] == 2
    # the bench record (codecspec.perf): one call per frame, no speculative figures
    check_record(res, "fsq", ["step graph + encoder", "sampling (host)", "vocoder"])
    assert res["ms_per_frame"]["spec"] is None and res["depth_speedup"] is None
    assert res["pipeline_rtf"]["ar"] == pytest.approx(res["real_time_factor"], rel=1e-6)
    assert "nothing to speculate" in res["verdict"]
