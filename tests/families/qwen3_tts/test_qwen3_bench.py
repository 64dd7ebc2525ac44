"""`codecspec bench --model QWEN3_DIR`: controlled acceptance, the speed-up map at a
checkpoint's own shape, and the bench record's keys (tiny official-class checkpoints)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from paths import DATA

from codecspec.decode.depth import ControlledDrafts

DATA = DATA / "qwen3_tiny"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_bench_cache")


@pytest.fixture(scope="module")
def tts(cache):
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    return Qwen3TTS.load(DATA / "custom_equal", cache_dir=cache, weights="int8")


def _frames(tts, n, seed=0):
    rng = np.random.default_rng(seed)
    c = tts.depth.config
    return (
        rng.standard_normal((n, c.input_width)).astype(np.float32),
        rng.integers(0, c.c0_vocab_size, n),
    )


class OffByOneDrafts(ControlledDrafts):
    """Deliberately broken: right about the level before the one drafted."""

    def __call__(self, cand, first_level):
        return super().__call__(cand, first_level - 1)


@pytest.mark.parametrize("acceptance", [0.3, 0.7])
def test_controlled_drafts_give_the_acceptance_asked(tts, acceptance):
    from codecspec.families.qwen3_tts.bench import controlled_depth_run, greedy_truth

    h, c0 = _frames(tts, 150)
    truth = greedy_truth(tts.depth, h, c0)
    run, stats = controlled_depth_run(tts.depth, h, c0, 150, acceptance, 3, 0, truth)
    assert abs(stats["acceptance"] - acceptance) < 0.05
    # greedy with drafts that are right or wrong by construction: the codes stay AR's
    assert np.array_equal(run.codes["ar"], run.codes["spec"])
    assert np.array_equal(run.codes["ar"], np.stack(truth))
    assert run.calls["spec"] < run.calls["ar"]


def test_drafts_at_the_wrong_level_are_caught(tts, monkeypatch):
    import codecspec.decode.depth as depth
    from codecspec.families.qwen3_tts.bench import controlled_depth_run

    monkeypatch.setattr(depth, "ControlledDrafts", OffByOneDrafts)
    h, c0 = _frames(tts, 60, seed=1)
    _, stats = controlled_depth_run(tts.depth, h, c0, 60, 0.7, 3, 0)
    assert abs(stats["acceptance"] - 0.7) > 0.3


def test_controlled_drafts_refuse_bad_input():
    with pytest.raises(ValueError, match="^acceptance:"):
        ControlledDrafts(1.5, 16)
    with pytest.raises(ValueError, match="^truth:"):
        ControlledDrafts(0.5, 16)(np.zeros((2, 1), np.int64), 2)


def test_speedup_map_points(cache):
    from codecspec.calibrate.speedup_map import locate
    from codecspec.families.qwen3_tts.bench import speedup_map

    doc = speedup_map(
        DATA / "custom_equal",
        weights="int8",
        cache_dir=cache,
        frames=6,
        acceptances=(0.2, 0.9),
        depths=(1, 2),
    )
    assert doc["weights"] == "int8" and len(doc["points"]) == 4
    for p in doc["points"]:
        assert p["speedup"] > 0 and p["ideal_speedup"] > 0 and 1.0 <= p["tokens_per_call"] <= 15
    by = {(p["budget"], p["acceptance"]): p for p in doc["points"]}
    assert by[(2, 0.9)]["tokens_per_call"] > by[(2, 0.2)]["tokens_per_call"]
    assert locate(doc, 2.47)["tokens_per_call"] == 2.47


def test_cli_bench_json_with_acceptance(cache, capsys):
    from codecspec.cli import main

    argv = ["bench", "--model", str(DATA / "custom_equal"), "--cache-dir", str(cache)]
    rc = main(argv + ["--frames", "6", "--acceptance", "0.8", "--weights", "int8", "--json"])
    assert rc == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["weights"] == "int8" and rec["acceptance"] == 0.8
    assert rec["greedy_spec_equals_ar"] is True
    assert {"ar", "spec"} <= set(rec["ms_per_frame"]) and rec["depth_speedup"] > 0
    assert main(argv + ["--frames", "6", "--acceptance", "2"]) == 2
    assert "acceptance:" in capsys.readouterr().err


def test_cli_bench_chooses_the_chain_here_or_takes_the_one_asked(cache, capsys):
    from codecspec.cli import main

    argv = ["bench", "--model", str(DATA / "custom_equal"), "--cache-dir", str(cache)]
    argv += ["--frames", "4", "--acceptance", "0.6", "--weights", "int8", "--json"]
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)
    choice = rec["draft_depth_choice"]
    assert choice["by"] == "auto" and rec["draft_depth"] == choice["depth"]
    assert set(choice["predicted_speedup"]) == {"1", "2", "3"}  # JSON keys
    assert set(choice["call_ratio"]) == {"2", "3", "4"} and rec["greedy_spec_equals_ar"]
    assert main(argv + ["--draft-depth", "2"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["draft_depth"] == 2 and rec["draft_depth_choice"]["by"] == "asked"
    for bad in ("0", "two"):
        with pytest.raises(SystemExit):
            main(argv + ["--draft-depth", bad])
        assert "--draft-depth" in capsys.readouterr().err
    assert main(argv + ["--draft-depth", "9"]) == 2
    assert "draft_depth:" in capsys.readouterr().err


def _chooses_by_cost(choose, tts, monkeypatch) -> bool:
    """Cheap verify rows (VNNI-like) buy the longest chain; dear ones (AVX2-like) the shortest."""
    from codecspec.families.qwen3_tts import bench

    picks = []
    for per_row, acceptance in ((0.05, 0.9), (0.9, 0.6)):

        def call_ms(dec, depths, calls, per_row=per_row):
            return {q: 1.0 + per_row * (q - 1) for q in range(1, max(depths) + 2)}

        monkeypatch.setattr(bench, "_call_ms", call_ms)
        picks.append(choose(tts.depth, acceptance)["depth"])
    return picks == [3, 1]


def test_the_chain_follows_what_a_verify_call_costs_and_a_fixed_chain_is_caught(tts, monkeypatch):
    from codecspec.families.qwen3_tts.bench import choose_draft_depth

    assert _chooses_by_cost(choose_draft_depth, tts, monkeypatch)

    def graphs_k(dec, acceptance, asked=None):  # deliberately broken: the old fixed chain
        return {"depth": min(dec.config.num_draft_offsets, dec.G - 2)}

    assert not _chooses_by_cost(graphs_k, tts, monkeypatch)


def test_sequenced_drafts_follow_the_frames_in_order(tts):
    """A speculative run over several frames with drafts set from the AR run's frames:
    acceptance 1 accepts every draft, and the same drafts one frame late are mostly refused
    (the deliberately misaligned variant the whole-pipeline figure must not be)."""
    import codecspec as cs
    from codecspec.decode.depth import SequencedDrafts

    h, c0 = _frames(tts, 12, seed=3)
    dec = tts.depth
    saved = dec.params, dec.tree, dec.draft_control
    dec.params = cs.SamplingParams(0.0, 0, 1.0)
    dec.set_tree(cs.DraftTree.chain(3))
    try:
        dec.draft_control = None
        truth = dec.decode_frames(h, c0, cs.Generator(0), "ar")
        for truths, aligned in ((truth, True), (np.roll(truth, 1, axis=0), False)):
            dec.draft_control = SequencedDrafts(1.0, dec.V, truths)
            dec.stats.reset()
            got = dec.decode_frames(h, c0, cs.Generator(0), "spec")
            assert np.array_equal(got, truth)  # exact whatever the drafts
            assert (dec.stats.acceptance == 1.0) == aligned
            if not aligned:
                assert dec.stats.acceptance < 0.5
        with pytest.raises(ValueError, match="^truths:"):
            dec.decode_frame(h[0], int(c0[0]), cs.Generator(0), "spec")  # a 13th frame
        dec.draft_control.rewind()
        dec.decode_frame(h[0], int(c0[0]), cs.Generator(0), "spec")
    finally:
        dec.params, dec.draft_control = saved[0], saved[2]
        dec.set_tree(saved[1])


def test_pipeline_end_to_end_at_an_acceptance(tts):
    from codecspec.families.qwen3_tts.bench import pipeline_at_acceptance

    out = pipeline_at_acceptance(tts, 0.9, 3, frames=5, seed=0, rounds=1)
    assert out["codes_equal_ar"] is True and 1 <= out["frames"] <= 5
    assert out["ar_ms"] > 0 and out["spec_ms"] > 0 and out["speedup"] > 0
    assert tts.depth.draft_control is None  # the pipeline is left as found


@pytest.mark.parametrize("frame_s", [0.005, 0.15, 1.2, 4.0])
def test_the_plan_fits_its_budget_or_runs_the_fewest_frames(frame_s):
    """Whatever a frame costs (int4 on a fast CPU to fp32 1.7B under load), the planned work
    is capped: it fits the seconds left, or is the least the figures need (MIN_FRAMES frames,
    one repeat), and never more frames, rounds or timed calls than the caps."""
    from codecspec.families.qwen3_tts.bench import (
        LEVELS,
        MIN_FRAMES,
        FrameCosts,
        plan_bench,
        plan_seconds,
    )

    costs = FrameCosts(frame=frame_s, depth=0.6 * frame_s, prefill=frame_s, decoder=0.1 * frame_s)
    for decoder, pipeline in ((False, False), (True, False), (True, True)):
        for seconds in (1.0, 60.0, 1e4):
            p = plan_bench(costs, seconds, 300, acceptance=True, decoder=decoder, pipeline=pipeline)
            assert MIN_FRAMES <= p.frames <= 300 and p.decoder == decoder
            assert p.pipeline_rounds <= LEVELS[0][0] and p.ttfa_repeats <= LEVELS[0][1]
            assert 0 < p.chain_calls <= LEVELS[0][2]
            assert p.seconds == plan_seconds(p, costs)
            least = p.frames == MIN_FRAMES and (p.pipeline_rounds, p.ttfa_repeats) == (1, 1)
            assert p.seconds <= seconds or least
            if p.seconds <= seconds and p.frames < 300:  # the most frames that fit
                bigger = type(p)(**{**p.as_dict(), "frames": p.frames + 1})
                assert plan_seconds(bigger, costs) > seconds
    # fewer frames asked than MIN_FRAMES: those; a chain asked for: no calls timed for one
    p = plan_bench(costs, 0.0, 4, acceptance=True, decoder=True, pipeline=True, choose_chain=False)
    assert p.frames == 4 and p.chain_calls == 0
    with pytest.raises(ValueError, match="^frames:"):
        plan_bench(costs, 10.0, 0, acceptance=False, decoder=False, pipeline=False)


def test_a_bench_over_its_budget_runs_the_planned_least(cache, monkeypatch):
    """A budget already spent (a slow machine): the talker stops at MIN_FRAMES frames, every
    later stage runs those frames once per repeat, and the end-to-end runs are the plan's."""
    from codecspec.families.qwen3_tts import bench
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    runs = []
    synthesize = Qwen3TTS.synthesize

    def counted(self, text, **kw):
        runs.append(kw["max_frames"])
        return synthesize(self, text, **kw)

    monkeypatch.setattr(Qwen3TTS, "synthesize", counted)
    rec = bench.bench_qwen3(
        DATA / "custom_equal",
        frames=40,
        cache_dir=cache,
        weights="int8",
        acceptance=0.6,
        budget=1e-6,
    )
    plan = rec["plan"]
    assert rec["talker_frames"] == rec["frames"] == plan["frames"] == bench.MIN_FRAMES
    assert (plan["pipeline_rounds"], plan["ttfa_repeats"], plan["chain_calls"]) == (1, 1, 10)
    assert plan["budget_s"] == 1e-6 and plan["bench_s"] > plan["load_s"] > 0
    assert rec["calls_per_frame"]["ar"] == 15 and rec["greedy_spec_equals_ar"] is True
    # a warm-up run of WARM_UP_FRAMES per mode, then one timed run per mode
    assert sorted(runs) == [bench.WARM_UP_FRAMES] * 2 + [bench.MIN_FRAMES] * 2
    assert rec["pipeline_end_to_end"]["frames"] == bench.MIN_FRAMES


def test_cli_bench_no_pipeline_times_the_loops_only(cache, capsys):
    from codecspec.cli import main

    argv = ["bench", "--model", str(DATA / "custom_equal"), "--cache-dir", str(cache)]
    argv += ["--frames", "6", "--acceptance", "0.6", "--weights", "int8", "--no-pipeline"]
    assert main(argv + ["--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    names = {s["name"] for s in rec["stages"]}
    assert "speech decoder" not in names and {"talker step", "depth loop"} <= names
    assert rec["ttfa_s"] is None and rec["pipeline_end_to_end"] is None
    assert rec["plan"]["decoder"] is False and rec["plan"]["budget_s"] == 90.0
    assert main(argv + ["--budget", "0"]) == 0  # no limit: every stage runs --frames
    out = capsys.readouterr().out
    assert "bench: 6 talker frames, 6 frames per later stage" in out and "no time limit" in out


def test_cli_bench_refuses_quality_before_it_runs(capsys, monkeypatch):
    """--quality's reports cannot load a Qwen3-TTS folder: one error line naming the flag,
    before the bench spends its budget (the bench itself is never called)."""
    from codecspec.cli import main
    from codecspec.families.qwen3_tts import bench

    monkeypatch.setattr(bench, "bench_qwen3", lambda *a, **k: pytest.fail("the bench ran"))
    assert main(["bench", "--model", str(DATA / "custom_equal"), "--quality"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--quality: not for Qwen3-TTS folders" in err and "\n" not in err
