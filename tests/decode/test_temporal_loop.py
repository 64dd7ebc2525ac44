"""The temporal speculation loop (`codecspec.decode.temporal`) on a tiny v2 model folder, its
rounds driven one utterance at a time by the old round loop (tests/v2_oracle.py).

Laws are tested by histograms over many short utterances (the stop head disabled, so every
utterance has F frames): per frame position, the c0 law (exact) or the c0 group law (PCG) of
speculative decoding must match autoregressive decoding, and a deliberately broken verifier
(accept every draft: the draft LM's law) must be caught by the same test.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from paths import DATA
from v2_oracle import round_frames

import codecspec as cs
from codecspec.decode import batched_depth
from codecspec.decode.temporal import Acceptance, TemporalLoop, expected_tokens_per_call
from codecspec.families.v2.model import V2TTS
from codecspec.fidelity import homogeneity_pvalue

FIXTURE = DATA / "tiny_v2"  # see tests/families/v2/test_v2_runtime.py
V2_CODES = 32

F = 3  # frames per utterance in the law tests
RUNS = 800
BROKEN_RUNS = 300  # the broken verifier's departure is large: fewer runs catch it
PHONEMES = "həlˈoʊ wˈɜːld"
P_MIN = 1e-4  # smallest p-value a correct sampler may show over these few positions


@pytest.fixture(scope="module")
def ar_codes(tts):
    """AR codes of RUNS utterances, shared by the law tests."""
    return _run(tts, temporal="ar")[0]


@pytest.fixture(scope="module")
def tts():
    """Peaked laws (scaled heads) and a stop head that never fires."""
    t = V2TTS(FIXTURE, provider="cpu", threads=1)
    t.params = cs.SamplingParams(1.0, 0, 1.0)  # the full law: no top-k cut
    t.depth.params = t.params
    return t


def _encoded(tts):
    _, ids, _, spk, enc = tts.encode_text(None, PHONEMES, "en", None)
    return enc, spk, tts.expected_frames(len(ids) - 2, "en")


def _loop(tts, enc, spk, expected, **kw):
    kw.setdefault("depth_mode", "ar")
    return tts.temporal_loop(enc, spk, expected, **kw)


def _run(tts, runs=RUNS, broken=False, unwarped=False, **kw):
    """codes [runs, F, G] and (pcg) emitted groups [runs, F]. broken: every draft accepted;
    unwarped: the verifier ignores the law's warp (drafts still drawn from warped rows)."""
    enc, spk, expected = _encoded(tts)
    codes, groups = [], []
    for seed in range(runs):
        loop = _loop(tts, enc, spk, expected, **kw)
        if broken:
            loop._verify = _accept_everything.__get__(loop)
        if unwarped:
            loop._verify = _verify_unwarped.__get__(loop)
        bd = tts.round_depth(loop.draft_len + 1)  # a round's depth loops batched
        frames = [c for c, _, _ in round_frames(loop, cs.Generator(seed), F, bd)]
        codes.append(np.stack(frames))
        groups.append(loop.stats.groups)
    return np.stack(codes), groups


class _Accepted:
    def __init__(self, tokens, groups):
        self.tokens, self.num_accepted, self.groups = tokens, len(tokens) - 1, groups


def _accept_everything(self, logits, tokens, probs, g):
    """A broken verifier: every draft accepted, then a bonus token from the target's last row:
    the emitted law is the draft LM's."""
    bonus = int(cs.sample(logits[len(tokens)], self.params, g))
    out = np.append(np.asarray(tokens, np.int32), bonus)
    grp = None
    if self.c0_groups is not None:
        grp = np.array([self.c0_groups.groups_of(int(t))[0] for t in out], np.int32)
    return _Accepted(out, grp)


def _verify_unwarped(self, logits, tokens, probs, g):
    """A broken verifier: the target's rows taken at temperature 1 with no cut, while the
    drafts were drawn from warped rows; the emitted law is then the unwarped target's."""
    full = cs.SamplingParams(1.0, 0, 1.0)
    return cs.verify_chain(logits, tokens, full, g, draft_probs=probs)


def _c0_pvalues(a, b) -> list:
    return [
        homogeneity_pvalue(
            np.bincount(a[:, f, 0], minlength=V2_CODES), np.bincount(b[:, f, 0], minlength=V2_CODES)
        )
        for f in range(F)
    ]


def test_a_draft_equal_to_the_target_is_always_accepted(tts):
    enc, spk, expected = _encoded(tts)
    for n in (1, 3):
        loop = TemporalLoop(
            tts.stepper(enc, spk, expected),
            tts.stepper(enc, spk, expected),  # the target's own graph as the draft
            tts.depth,
            tts.params,
            draft_len=n,
        )
        frames = list(round_frames(loop, cs.Generator(7), 4 * (n + 1)))
        assert len(frames) == 4 * (n + 1)
        st = loop.stats
        assert st.acceptance == 1.0 and st.accepted == st.drafted > 0
        assert st.tokens_per_call == n + 1
        assert st.target_calls == 4


def test_ar_is_the_zero_draft_case_of_the_same_loop(tts):
    enc, spk, expected = _encoded(tts)
    loop = _loop(tts, enc, spk, expected, temporal="ar")
    frames = list(round_frames(loop, cs.Generator(3), 5))
    assert loop.draft is None and loop.draft_len == 0
    assert loop.stats.target_calls == 5 and loop.stats.tokens_per_call == 1.0
    # the same seed gives the same codes through generate()
    s = tts.generate("", phonemes=PHONEMES, seed=3, max_frames=5, mode="ar", decode_audio=False)
    np.testing.assert_array_equal(s.codes, np.stack([c for c, _, _ in frames]))


def _depth_pvalues(a, b) -> list:
    """A depth level of every frame position, pooled: the depth loop's law."""
    return [
        homogeneity_pvalue(
            np.bincount(a[:, :, lv].ravel(), minlength=V2_CODES),
            np.bincount(b[:, :, lv].ravel(), minlength=V2_CODES),
        )
        for lv in (1, 8, 15)
    ]


def _depth_accepts_the_first_drafts(self, call, tree, n, tokens, heads, g):
    """A broken depth verifier: the rank-0 chain of drafts is always accepted, then a bonus
    code from the target's row after it: the emitted law is the draft heads' argmax."""
    nodes, node = [], 0
    while kids := [c for c in tree.children(node) if c < n]:
        node = kids[0]
        nodes.append(node)
    bonus = int(cs.sample(self._target_row(call, node, int(heads[node])), self.params, g))
    nodes = np.array(nodes, np.int32)
    return SimpleNamespace(nodes=nodes, tokens=np.append(tokens[nodes], bonus).astype(np.int32))


def _batched_accepts_the_first_drafts(problems):
    """The same broken depth verifier for the batched depth loop the rounds run in."""
    out = []
    for ln, tree, logits, tokens in problems:
        if tree.num_nodes == 1:  # a root-only draw: the real one
            out += _REAL_VERIFY_LANES([(ln, tree, logits, tokens)])
            continue
        nodes, node = [], 0
        while kids := [c for c in tree.children(node) if c < len(tokens)]:
            node = kids[0]
            nodes.append(node)
        bonus = int(cs.sample(logits[node], ln.params, ln.generator))
        nodes = np.array(nodes, np.int32)
        out.append(SimpleNamespace(nodes=nodes, tokens=np.append(tokens[nodes], bonus)))
    return out


_REAL_VERIFY_LANES = batched_depth.verify_lanes


def test_exact_temporal_and_depth_speculation_keep_the_ar_law(tts, ar_codes):
    ar = ar_codes
    sp, _ = _run(tts, temporal="spec", draft_len=2, depth_mode="spec")
    p_c0, p_depth = _c0_pvalues(ar, sp), _depth_pvalues(ar, sp)
    assert min(p_c0 + p_depth) > P_MIN, (p_c0, p_depth)
    broken, _ = _run(tts, runs=BROKEN_RUNS, broken=True, temporal="spec", draft_len=2)
    p_broken = _c0_pvalues(ar, broken)
    assert min(p_broken[1:]) < 1e-6, p_broken  # frame 0 is the target's in both


@pytest.fixture(scope="module")
def warped():
    """The same folder at a law shaped like the shipped v3's (temperature 0.6, a top-k cut):
    the draft's rows, the verifier and AR must all apply the same warp."""
    t = V2TTS(FIXTURE, provider="cpu", threads=1)
    t.params = cs.SamplingParams(0.6, 8, 1.0)
    t.depth.params = t.params
    return t


def test_exact_temporal_speculation_keeps_a_warped_ar_law(warped):
    ar = _run(warped, runs=RUNS, temporal="ar")[0]
    sp = _run(warped, runs=RUNS, temporal="spec", draft_len=2)[0]
    p = _c0_pvalues(ar, sp) + _depth_pvalues(ar, sp)
    assert min(p) > P_MIN, p
    # broken: the verifier (and its bonus draw) ignores the warp the drafts were drawn at
    broken = _run(warped, runs=BROKEN_RUNS, unwarped=True, temporal="spec", draft_len=2)[0]
    assert min(_c0_pvalues(ar[:BROKEN_RUNS], broken)[1:]) < 1e-6


def test_the_depth_law_check_catches_a_broken_depth_verifier(tts, ar_codes, monkeypatch):
    """The depth half of the law test above, shown able to fail: exact temporal speculation
    (c0 keeps its law) over a depth verifier that accepts every rank-0 draft."""
    monkeypatch.setattr(tts.depth, "_verify", _depth_accepts_the_first_drafts.__get__(tts.depth))
    monkeypatch.setattr(batched_depth, "verify_lanes", _batched_accepts_the_first_drafts)
    broken, _ = _run(tts, runs=BROKEN_RUNS, temporal="spec", draft_len=2, depth_mode="spec")
    p_depth = _depth_pvalues(ar_codes, broken)
    assert p_depth[0] > P_MIN, p_depth  # level 1 is sampled from the target before any draft
    assert min(p_depth[1:]) < 1e-6, p_depth


def test_pcg_loop_keeps_the_group_law_of_c0(tts, ar_codes):
    theta = 0.3
    grp = tts.c0_groups(theta)
    sizes = [len(grp.members(k)) for k in range(grp.num_groups)]
    assert max(sizes) > 1  # non-trivial groups, or the test would be the exact one
    rng = np.random.default_rng(0)

    def ar_groups(codes):  # a group per AR token: uniform over the groups holding it
        return np.array(
            [[rng.choice(grp.groups_of(int(t))) for t in row] for row in codes[:, :, 0]]
        )

    ar = ar_codes
    pcg, groups = _run(tts, temporal="spec", draft_len=2, accept=Acceptance("pcg", theta=theta))
    ga, gp = ar_groups(ar), np.array(groups)
    assert gp.shape == (RUNS, F)
    pv = [
        homogeneity_pvalue(
            np.bincount(ga[:, f], minlength=grp.num_groups),
            np.bincount(gp[:, f], minlength=grp.num_groups),
        )
        for f in range(F)
    ]
    assert min(pv) > P_MIN, pv
    # every emitted token lies in its emitted group
    for row_c, row_g in zip(pcg[:, :, 0], gp):
        for t, g in zip(row_c, row_g):
            assert t in grp.members(int(g))
    _, bg = _run(
        tts,
        runs=BROKEN_RUNS,
        broken=True,
        temporal="spec",
        draft_len=2,
        accept=Acceptance("pcg", theta=theta),
    )
    bg = np.array(bg)
    pb = [
        homogeneity_pvalue(
            np.bincount(ga[:, f], minlength=grp.num_groups),
            np.bincount(bg[:, f], minlength=grp.num_groups),
        )
        for f in range(1, F)
    ]
    assert min(pb) < 1e-6, pb


def test_ssd_accepts_more_and_says_it_is_lossy(tts, ar_codes):
    """SSD's tolerance raises acceptance and changes the c0 law (it is lossy by design; the
    same check at beta = 0, which is exact sampling, keeps the AR law)."""
    acc = {}
    for beta in (0.0, 0.5):
        for seed in range(150):
            loop = _loop(
                tts,
                *_encoded(tts),
                temporal="spec",
                draft_len=3,
                accept=Acceptance("ssd", beta=beta),
            )
            list(round_frames(loop, cs.Generator(seed), 9, tts.round_depth(4)))
            acc.setdefault(beta, []).append(loop.stats.acceptance)
    assert np.mean(acc[0.5]) > np.mean(acc[0.0]) + 0.05
    exact, _ = _run(tts, temporal="spec", draft_len=3, accept=Acceptance("ssd", beta=0.0))
    assert min(_c0_pvalues(ar_codes, exact)) > P_MIN
    lossy, _ = _run(
        tts, runs=BROKEN_RUNS, temporal="spec", draft_len=3, accept=Acceptance("ssd", beta=0.5)
    )
    p_lossy = _c0_pvalues(ar_codes, lossy)
    assert min(p_lossy[1:]) < 1e-6, p_lossy  # frame 0 is the target's alone
    assert Acceptance("ssd", beta=0.5).label == "ssd(beta=0.5)"


def test_expected_tokens_per_call():
    assert expected_tokens_per_call(0.0, 3) == 1.0
    assert expected_tokens_per_call(1.0, 3) == 4.0
    assert abs(expected_tokens_per_call(0.5, 2) - 1.75) < 1e-12


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(rule="greedy"), "accept"),
        (dict(rule="ssd", beta=1.5), "beta"),
        (dict(rule="ssd", beta=float("nan")), "beta"),
        (dict(rule="ssd", beta=-0.1), "beta"),
        (dict(rule="pcg", theta=None), "theta"),
        (dict(rule="pcg", theta=-1.0), "theta"),
        (dict(rule="pcg", theta=1.5), "theta"),
        (dict(rule="pcg", theta=float("nan")), "theta"),
    ],
)
def test_bad_acceptance_names_the_argument(kw, name):
    with pytest.raises(ValueError, match=name):
        Acceptance(**kw)


def test_bad_loop_arguments_name_the_argument(tts):
    enc, spk, expected = _encoded(tts)
    t, d = tts.stepper(enc, spk, expected), tts.stepper(enc, spk, expected, draft=True)
    for bad in (-1, True, 2.0):
        with pytest.raises(ValueError, match="draft_len"):
            TemporalLoop(t, d, tts.depth, tts.params, draft_len=bad)
    with pytest.raises(ValueError, match="draft_len"):  # beyond the ring cache's slack
        TemporalLoop(t, d, tts.depth, tts.params, draft_len=100)
    with pytest.raises(ValueError, match="draft"):
        TemporalLoop(t, None, tts.depth, tts.params, draft_len=2)
    with pytest.raises(ValueError, match="c0_groups"):
        TemporalLoop(t, d, tts.depth, tts.params, accept=Acceptance("pcg", theta=0.5))
    other = cs.AcousticGroups.from_members([[t] for t in range(V2_CODES + 3)], V2_CODES + 3)
    with pytest.raises(ValueError, match="c0_groups"):
        TemporalLoop(
            t, d, tts.depth, tts.params, accept=Acceptance("pcg", theta=0.5), c0_groups=other
        )
    loop = TemporalLoop(t, d, tts.depth, tts.params)
    for bad in (0, -3, True):
        with pytest.raises(ValueError, match="max_frames"):
            list(round_frames(loop, cs.Generator(0), bad))
    with pytest.raises(ValueError, match="temporal"):
        tts.generate("", phonemes=PHONEMES, temporal="tree")
    with pytest.raises(ValueError, match="mode"):
        tts.depth.decode_frame(np.zeros(32, np.float32), 0, cs.Generator(0), "pcg-ish")


@pytest.mark.parametrize("depth_mode", ["ar", "spec"])
def test_a_rounds_frames_decode_the_same_together_and_one_by_one(tts, depth_mode):
    """A round's depth loops run in one batched loop; each frame draws from its own
    generator, so frame-by-frame decoding through the DepthDecoder gives the same codes."""
    enc, spk, expected = _encoded(tts)
    out = []
    for batched in (True, False):
        loop = _loop(tts, enc, spk, expected, temporal="spec", depth_mode=depth_mode)
        bd = tts.round_depth(loop.draft_len + 1) if batched else None
        assert not batched or bd is not None
        out.append(np.stack([c for c, _, _ in round_frames(loop, cs.Generator(5), 3 * F, bd)]))
        assert loop.stats.tokens_per_call > 1.0  # some rounds had several frames
    assert np.array_equal(out[0], out[1])
    # the comparison can fail: another seed gives other codes
    loop = _loop(tts, enc, spk, expected, temporal="spec", depth_mode=depth_mode)
    other = np.stack([c for c, _, _ in round_frames(loop, cs.Generator(6), 3 * F)])
    assert other.shape != out[0].shape or not np.array_equal(other, out[0])


@pytest.mark.parametrize("depth_mode", ["ar", "spec"])
def test_a_rounds_frames_on_the_shared_depth_decoder_batch_the_same(tmp_path, depth_mode):
    """The shared depth decoder's graph is built in memory at load (from depth_shared.npz and
    the codec's codebooks); a round's frames still run in one batched loop on it, with the
    same codes as frame by frame."""
    import shutil

    from tiny_models import add_codebook_tied_shared

    folder = tmp_path / "tiny_v2_shared"
    shutil.copytree(FIXTURE, folder)
    add_codebook_tied_shared(folder, scale=0.3, seed=1)
    (folder / "depth_shared.tree.json").write_text(cs.DraftTree.from_paths([(0,), (1,)]).to_json())
    tts = V2TTS(folder, provider="cpu", threads=1, depth="shared")
    enc, spk, expected = _encoded(tts)
    out = []
    for batched in (True, False):
        loop = _loop(tts, enc, spk, expected, temporal="spec", depth_mode=depth_mode)
        bd = tts.round_depth(loop.draft_len + 1) if batched else None
        assert not batched or bd is not None, "the shared decoder has a batched form"
        out.append(np.stack([c for c, _, _ in round_frames(loop, cs.Generator(5), 3 * F, bd)]))
        assert loop.stats.tokens_per_call > 1.0  # some rounds had several frames
    assert np.array_equal(out[0], out[1])
    assert bd is None and tts.round_depth(4).calls > 0  # the batched run made its calls


def test_a_rounds_depth_loops_share_graph_calls(tts):
    """Batching a round's frames: fewer depth calls than frames x levels."""
    enc, spk, expected = _encoded(tts)
    loop = _loop(tts, enc, spk, expected, temporal="spec", depth_mode="ar")
    bd = tts.round_depth(loop.draft_len + 1)
    calls0, lanes0 = bd.calls, bd.lane_calls
    list(round_frames(loop, cs.Generator(8), 3 * F, bd))
    levels = tts.depth.G - 1
    multi = [a + 1 for a in loop.stats.accepted_per_round if a > 0]  # rounds of 2+ frames
    assert multi, "some round had several frames"
    assert bd.calls - calls0 == len(multi) * levels  # one call per level per such round
    assert bd.lane_calls - lanes0 == sum(multi) * levels
