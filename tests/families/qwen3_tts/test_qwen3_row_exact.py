"""A verify call must score a position as the AR call does, or speculation moves the law:
`row_exact.probe_tree_rows` measures it (every draft set right, so every level is scored by a
verify call) and `codecspec calibrate` lets `auto` speculate only where it holds to float
rounding. On the tiny checkpoints it holds at every precision; a decoder whose verify calls
are perturbed by one int8 activation step (a deliberately broken variant) must be caught,
and a fast but inexact tree must not be chosen however much it pays."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from paths import DATA

import codecspec as cs
from codecspec.families.qwen3_tts.calibrate import collect_corpus, speculate_here
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
from codecspec.families.qwen3_tts.row_exact import ROUNDING, probe_tree_rows
from codecspec.graphs import read_graph_metadata
from codecspec.graphs.row_probe import probe_rows
from codecspec.runtime import custom_ops

pytest.importorskip("tokenizers")

FOLDER = DATA / "qwen3_tiny" / "custom_equal"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_rows")


def _model(cache, weights: str) -> tuple:
    tts = Qwen3TTS.load(FOLDER, cache_dir=cache, weights=weights, threads=1)
    tts.depth.set_tree(cs.DraftTree.chain(3))
    hiddens, c0s = collect_corpus(tts, 6, max_frames=6)
    return tts, hiddens, c0s


@pytest.mark.parametrize("weights", ["fp32", "int8", "int4"])
def test_verify_rows_agree_with_ar_to_rounding_on_the_tiny_checkpoint(cache, weights):
    tts, hiddens, c0s = _model(cache, weights)
    rows = probe_tree_rows(tts.depth, hiddens, c0s)
    assert rows["exact"] and rows["frames"] == len(c0s) > 0
    assert rows["max_rel_diff"] <= ROUNDING
    # The code predictor's attention places each row's keys by position (bit for bit where
    # the quantised MatMul kernel computes a row alike in any call: tests/graphs/
    # test_placed_attention.py checks every precision against this CPU's kernels).
    want = "placed_op" if custom_ops.available() else "placed"  # the operator where served
    assert read_graph_metadata(tts.depth.graph.path)["attention"] == want
    if (
        weights != "fp32"
        and probe_rows(onnx.load(str(tts.depth.graph.path)), weights).row_independent
    ):
        assert rows["bitwise"], rows


@pytest.mark.parametrize("paths", [[(2,)], [(1,), (1, 0)], [(0,), (2,), (0, 1)]])
def test_a_tree_without_the_truths_rank_is_probed_on_its_truth_path_only(cache, paths):
    """Calibration may choose a tree whose drafts sit at ranks the truth is not at (here: the
    truth is drafted at rank 0): those nodes hold other codes, their rows are no AR row's
    counterpart, and the probe must not compare them (it did, and called exact rows 1.7
    of the row apart on the 0.6B code predictor's calibrated tree [[2]])."""
    tts, hiddens, c0s = _model(cache, "int8")
    tts.depth.set_tree(cs.DraftTree.from_paths(paths))
    rows = probe_tree_rows(tts.depth, hiddens, c0s)
    assert rows["exact"] and rows["max_rel_diff"] <= ROUNDING, rows


class OneStepOff:
    """A verify call whose logits come out one int8 activation step (1/127 of the row) off:
    what quantised weights did to the 0.6B code predictor's verify rows."""

    def __init__(self, call):
        self.call, self.logits = call, call.logits

    def __getattr__(self, name):
        return getattr(self.call, name)

    def run(self):
        self.call.run()
        self.logits += np.abs(self.logits).max(axis=1, keepdims=True) / 127.0


def test_a_perturbed_verify_call_is_caught(cache):
    tts, hiddens, c0s = _model(cache, "fp32")
    dec = tts.depth
    dec._tree_call = OneStepOff(dec._tree_call)
    rows = probe_tree_rows(dec, hiddens, c0s)
    assert not rows["exact"] and rows["max_rel_diff"] > 100 * ROUNDING


def test_the_probe_leaves_the_decoder_as_it_was(cache):
    tts, hiddens, c0s = _model(cache, "fp32")
    dec = tts.depth
    before = (dec.params, dec.draft_control, dec._verify, dec._target_row)
    probe_tree_rows(dec, hiddens, c0s)
    assert (dec.params, dec.draft_control, dec._verify, dec._target_row) == before


def test_an_inexact_tree_is_not_chosen_however_much_it_pays():
    exact = {"exact": True, "max_rel_diff": 1e-7}
    moved = {"exact": False, "max_rel_diff": 0.05}
    assert speculate_here(1.4, exact)[0] is True
    assert speculate_here(0.9, exact)[0] is False
    speculate, why = speculate_here(3.0, moved)
    assert speculate is False and "move the law" in why
    assert speculate_here(None, exact)[0] is False


def test_spec_by_name_says_so_only_where_calibration_measured_rows_apart(tmp_path, capsys):
    from types import SimpleNamespace

    from codecspec.calibrate.decision import DECISION_FILE, write_decision
    from codecspec.families.qwen3_tts.cli import _speculation_note

    tts = SimpleNamespace(weights="int4", calibration_file=lambda name: tmp_path / name)
    args = SimpleNamespace(quiet=False, mode="spec")
    _speculation_note(args, tts, "spec")  # no calibration: nothing measured, nothing said
    assert capsys.readouterr().err == ""
    for exact, said in ((True, False), (False, True)):
        rows = {"exact": exact, "max_rel_diff": 1e-8 if exact else 0.05}
        write_decision(
            tmp_path / DECISION_FILE, speculate=False, why="t", measured={"tree_rows": rows}
        )
        _speculation_note(args, tts, "spec")
        assert ("does not keep the AR law" in capsys.readouterr().err) is said
    _speculation_note(SimpleNamespace(quiet=False, mode="auto"), tts, "ar")
    assert capsys.readouterr().err == ""
