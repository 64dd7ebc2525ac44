"""Every public function rejects invalid input with a ValueError whose message names the argument
(docs/design.md section 4); a Rust panic (pyo3 PanicException, a BaseException) or an
OverflowError / TypeError from argument conversion is a failure here."""

import numpy as np
import pytest
from stats import N_DRAWS, counts_of, law_ok, np_warp

import codecspec as cs

NAN, INF, NINF = np.nan, np.inf, -np.inf
V = 6


def sp(t=1.0, k=0, p=1.0):
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


def G():
    return cs.Generator(seed=0)


def rows(n, v=V, bad=None):
    x = np.linspace(-1, 1, n * v, dtype=np.float32).reshape(n, v)
    if bad is not None:
        x[n - 1, 2] = bad
    return x


def probs(n, v=V):
    return np.full((n, v), 1.0 / v, dtype=np.float32)


def i32(*a):
    return np.array(a, dtype=np.int32)


TREE_PATHS = [(0,), (1,), (0, 0)]


def tree():
    return cs.DraftTree.from_paths(TREE_PATHS)


TOK = i32(0, 1, 2, 3)

CASES = [
    # SamplingParams
    (
        "params-neg-temperature",
        lambda: cs.SamplingParams(temperature=-0.5, top_k=0, top_p=1.0),
        "temperature",
    ),
    (
        "params-nan-temperature",
        lambda: cs.SamplingParams(temperature=NAN, top_k=0, top_p=1.0),
        "temperature",
    ),
    (
        "params-inf-temperature",
        lambda: cs.SamplingParams(temperature=INF, top_k=0, top_p=1.0),
        "temperature",
    ),
    ("params-top-p-zero", lambda: cs.SamplingParams(temperature=1.0, top_k=0, top_p=0.0), "top_p"),
    ("params-top-p-neg", lambda: cs.SamplingParams(temperature=1.0, top_k=0, top_p=-0.1), "top_p"),
    ("params-top-p-big", lambda: cs.SamplingParams(temperature=1.0, top_k=0, top_p=1.5), "top_p"),
    ("params-top-p-nan", lambda: cs.SamplingParams(temperature=1.0, top_k=0, top_p=NAN), "top_p"),
    ("params-top-k-neg", lambda: cs.SamplingParams(temperature=1.0, top_k=-1, top_p=1.0), "top_k"),
    # warp / sample
    ("warp-nan", lambda: cs.warp(rows(2, bad=NAN), sp()), "logits"),
    ("warp-posinf", lambda: cs.warp(rows(2, bad=INF), sp()), "logits"),
    ("warp-nan-greedy", lambda: cs.warp(rows(2, bad=NAN), sp(0.0)), "logits"),
    ("warp-all-neginf-row", lambda: cs.warp(np.full((2, V), NINF, np.float32), sp()), "logits"),
    ("warp-0d", lambda: cs.warp(np.float32(1.0), sp()), "logits"),
    ("warp-empty-vocab", lambda: cs.warp(np.zeros((3, 0), np.float32), sp()), "logits"),
    ("warp-str-dtype", lambda: cs.warp(np.array([["a", "b"]]), sp()), "logits"),
    ("sample-nan", lambda: cs.sample(rows(2, bad=NAN), sp(), G()), "logits"),
    ("sample-posinf", lambda: cs.sample(rows(2, bad=INF), sp(0.0), G()), "logits"),
    ("sample-0d", lambda: cs.sample(np.float32(1.0), sp(), G()), "logits"),
    ("sample-empty-vocab", lambda: cs.sample(np.zeros((3, 0), np.float32), sp(), G()), "logits"),
    # verify_chain
    ("chain-nan", lambda: cs.verify_chain(rows(3, bad=NAN), i32(1, 2), sp(), G()), "target_logits"),
    (
        "chain-posinf",
        lambda: cs.verify_chain(rows(3, bad=INF), i32(1, 2), sp(), G()),
        "target_logits",
    ),
    (
        "chain-nan-greedy",
        lambda: cs.verify_chain(rows(3, bad=NAN), i32(1, 2), sp(0.0), G()),
        "target_logits",
    ),
    (
        "chain-all-neginf-row",
        lambda: cs.verify_chain(np.full((3, V), NINF, np.float32), i32(1, 2), sp(0.0), G()),
        "target_logits",
    ),
    ("chain-1d-logits", lambda: cs.verify_chain(rows(1)[0], i32(), sp(), G()), "target_logits"),
    (
        "chain-3d-logits",
        lambda: cs.verify_chain(rows(3)[None], i32(1, 2), sp(), G()),
        "target_logits",
    ),
    (
        "chain-row-count",
        lambda: cs.verify_chain(rows(2), i32(1, 2), sp(), G()),
        "target_logits|draft_tokens",
    ),
    ("chain-token-too-big", lambda: cs.verify_chain(rows(3), i32(1, V), sp(), G()), "draft_tokens"),
    ("chain-token-neg", lambda: cs.verify_chain(rows(3), i32(-1, 2), sp(), G()), "draft_tokens"),
    (
        "chain-token-2d",
        lambda: cs.verify_chain(rows(3), i32(1, 2)[None], sp(), G()),
        "draft_tokens",
    ),
    (
        "chain-token-str",
        lambda: cs.verify_chain(rows(3), np.array(["a", "b"]), sp(), G()),
        "draft_tokens",
    ),
    (
        "chain-q-shape-v",
        lambda: cs.verify_chain(rows(3), i32(1, 2), sp(), G(), probs(2, V + 1)),
        "draft_probs",
    ),
    (
        "chain-q-shape-k",
        lambda: cs.verify_chain(rows(3), i32(1, 2), sp(), G(), probs(3)),
        "draft_probs",
    ),
    (
        "chain-q-neg",
        lambda: cs.verify_chain(
            rows(3), i32(1, 2), sp(), G(), probs(2) * [[1, 1, 1, 1, 2.5, -0.5]]
        ),
        "draft_probs",
    ),
    (
        "chain-q-nan",
        lambda: cs.verify_chain(rows(3), i32(1, 2), sp(), G(), probs(2) * [[1, 1, 1, 1, 1, NAN]]),
        "draft_probs",
    ),
    (
        "chain-q-inf",
        lambda: cs.verify_chain(rows(3), i32(1, 2), sp(), G(), probs(2) * [[1, 1, 1, 1, 1, INF]]),
        "draft_probs",
    ),
    (
        "chain-q-nan-greedy",
        lambda: cs.verify_chain(
            rows(3), i32(1, 2), sp(0.0), G(), probs(2) * [[1, 1, 1, 1, 1, NAN]]
        ),
        "draft_probs",
    ),
    # verify_tree
    (
        "tree-kind",
        lambda: cs.verify_tree(tree(), TOK, rows(4), sp(), G(), probs(4), "greedy"),
        "draft_kind",
    ),
    (
        "tree-kind-case",
        lambda: cs.verify_tree(tree(), TOK, rows(4), sp(), G(), probs(4), "IID"),
        "draft_kind",
    ),
    (
        "tree-node-count",
        lambda: cs.verify_tree(tree(), i32(0, 1, 2), rows(4), sp(), G()),
        "node_tokens",
    ),
    (
        "tree-node-range",
        lambda: cs.verify_tree(tree(), i32(0, 1, V, 3), rows(4), sp(), G()),
        "node_tokens",
    ),
    (
        "tree-node-neg",
        lambda: cs.verify_tree(tree(), i32(0, 1, 2, -3), rows(4), sp(), G()),
        "node_tokens",
    ),
    (
        "tree-root-range",
        lambda: cs.verify_tree(tree(), i32(V + 4, 1, 2, 3), rows(4), sp(), G()),
        "node_tokens",
    ),
    ("tree-row-count", lambda: cs.verify_tree(tree(), TOK, rows(3), sp(), G()), "target_logits"),
    ("tree-nan", lambda: cs.verify_tree(tree(), TOK, rows(4, bad=NAN), sp(), G()), "target_logits"),
    (
        "tree-posinf",
        lambda: cs.verify_tree(tree(), TOK, rows(4, bad=INF), sp(0.0), G()),
        "target_logits",
    ),
    (
        "tree-q-shape",
        lambda: cs.verify_tree(tree(), TOK, rows(4), sp(), G(), probs(4, V + 1), "iid"),
        "draft_probs",
    ),
    (
        "tree-q-rows",
        lambda: cs.verify_tree(tree(), TOK, rows(4), sp(), G(), probs(3), "iid"),
        "draft_probs",
    ),
    (
        "tree-q-neg",
        lambda: cs.verify_tree(
            tree(), TOK, rows(4), sp(), G(), probs(4) * [[1, 1, 1, 1, 2.5, -0.5]], "swor"
        ),
        "draft_probs",
    ),
    (
        "tree-q-nan",
        lambda: cs.verify_tree(
            tree(), TOK, rows(4), sp(), G(), probs(4) * [[1, 1, 1, 1, 1, NAN]], "iid"
        ),
        "draft_probs",
    ),
    # verify_tree_batch
    (
        "batch-generators",
        lambda: cs.verify_tree_batch([tree(), tree()], np.tile(TOK, 2), rows(8), sp(), [G()]),
        "generators",
    ),
    (
        "batch-node-tokens",
        lambda: cs.verify_tree_batch([tree(), tree()], TOK, rows(8), sp(), [G(), G()]),
        "node_tokens",
    ),
    (
        "batch-logits",
        lambda: cs.verify_tree_batch([tree(), tree()], np.tile(TOK, 2), rows(7), sp(), [G(), G()]),
        "target_logits",
    ),
    (
        "batch-nan",
        lambda: cs.verify_tree_batch([tree()], TOK, rows(4, bad=NAN), sp(), [G()]),
        "target_logits",
    ),
    (
        "batch-kind",
        lambda: cs.verify_tree_batch([tree()], TOK, rows(4), sp(), [G()], probs(4), "x"),
        "draft_kind",
    ),
    (
        "batch-q-neg",
        lambda: cs.verify_tree_batch([tree()], TOK, rows(4), sp(), [G()], -probs(4), "iid"),
        "draft_probs",
    ),
    # DraftTree
    ("paths-not-closed", lambda: cs.DraftTree.from_paths([(0,), (1, 1)]), "paths"),
    ("paths-duplicate", lambda: cs.DraftTree.from_paths([(0,), (0,)]), "paths"),
    ("paths-neg-rank", lambda: cs.DraftTree.from_paths([(0,), (0, -2)]), "paths"),
    ("greedy-accept-big", lambda: cs.DraftTree.greedy(np.array([[0.5, 1.2]]), 2), "accept"),
    ("greedy-accept-neg", lambda: cs.DraftTree.greedy(np.array([[0.5, -0.1]]), 2), "accept"),
    ("greedy-accept-nan", lambda: cs.DraftTree.greedy(np.array([[0.5, NAN]]), 2), "accept"),
    ("greedy-accept-1d", lambda: cs.DraftTree.greedy(np.array([0.5, 0.4]), 2), "accept"),
    ("greedy-budget-neg", lambda: cs.DraftTree.greedy(np.array([[0.5, 0.4]]), -1), "budget"),
    (
        "greedy-max-depth-neg",
        lambda: cs.DraftTree.greedy(np.array([[0.5, 0.4]]), 1, max_depth=-1),
        "max_depth",
    ),
    (
        "greedy-max-rank-neg",
        lambda: cs.DraftTree.greedy(np.array([[0.5, 0.4]]), 1, max_rank=-1),
        "max_rank",
    ),
    (
        "expected-accept-range",
        lambda: tree().expected_tokens(np.array([[0.5, 1.5], [0.5, 0.5]])),
        "accept",
    ),
    ("expected-accept-small", lambda: tree().expected_tokens(np.array([[0.5, 0.5]])), "accept"),
    ("expected-accept-narrow", lambda: tree().expected_tokens(np.array([[0.5], [0.5]])), "accept"),
    ("generator-neg-seed", lambda: cs.Generator(seed=-1), "seed"),
    ("generator-neg-stream", lambda: cs.Generator(seed=1, stream=-1), "stream"),
    ("fork-neg-stream", lambda: cs.Generator(seed=1).fork(-1), "stream_id"),
    ("random-neg-n", lambda: cs.Generator(seed=1).random(-1), "n"),
    ("bias-neg-past", lambda: tree().attention_bias(-1), "past_len"),
    ("positions-neg-past", lambda: tree().position_ids(-1), "past_len"),
]


@pytest.mark.parametrize("fn, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejects(fn, match):
    """The message starts with the argument's name (a whole word: "n" is not "nodes")."""
    with pytest.raises(ValueError, match=rf"^(?:{match})\b"):
        fn()


@pytest.mark.parametrize(
    "s, name",
    [
        ("", "s"),
        ("{}", "s"),
        ('{"format": "other", "version": 1, "paths": []}', "s"),
        ('{"format": "codecspec.tree", "version": 1, "paths": [[0], [0]]}', "paths"),
    ],
)
def test_from_json_rejects(s, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        cs.DraftTree.from_json(s)


# ------------------------------------------------------------------------------------------
# groups, coarse verification, fsq, factorized / stop sampling

EMB = np.random.default_rng(0).standard_normal((V, 3)).astype(np.float32)


def grp():
    return cs.AcousticGroups.from_members([[0, 1], [1, 2], [3, 4, 5]], V)


GROUP_CASES = [
    (
        "emb-nan",
        lambda: cs.AcousticGroups.from_embeddings(np.where(EMB == EMB[2, 1], NAN, EMB), 0.5),
        "emb",
    ),
    ("emb-1d", lambda: cs.AcousticGroups.from_embeddings(EMB[0], 0.5), "emb"),
    (
        "emb-zero-row",
        lambda: cs.AcousticGroups.from_embeddings(
            np.vstack([EMB, np.zeros((1, 3), np.float32)]), 0.5
        ),
        "emb",
    ),
    ("threshold-nan", lambda: cs.AcousticGroups.from_embeddings(EMB, NAN), "threshold"),
    (
        "singletons-range",
        lambda: cs.AcousticGroups.from_embeddings(EMB, 0.5, singletons=[V]),
        "singletons",
    ),
    (
        "singletons-neg",
        lambda: cs.AcousticGroups.from_embeddings(EMB, 0.5, singletons=[-1]),
        "singletons",
    ),
    ("members-range", lambda: cs.AcousticGroups.from_members([[0, 1], [2, V]], V), "members"),
    ("coarse-vocab", lambda: grp().coarse(probs(1, V + 1)), "probs"),
    (
        "pcg-vocab",
        lambda: cs.verify_chain_coarse(
            grp(), rows(3, V + 1), i32(1, 2), probs(2, V + 1), sp(), G()
        ),
        "target_logits",
    ),
    (
        "pcg-nan",
        lambda: cs.verify_chain_coarse(grp(), rows(3, bad=NAN), i32(1, 2), probs(2), sp(), G()),
        "target_logits",
    ),
    (
        "pcg-token",
        lambda: cs.verify_chain_coarse(grp(), rows(3), i32(1, V), probs(2), sp(), G()),
        "draft_tokens",
    ),
    (
        "pcg-q-neg",
        lambda: cs.verify_chain_coarse(grp(), rows(3), i32(1, 2), -probs(2), sp(), G()),
        "draft_probs",
    ),
    (
        "pcg-q-shape",
        lambda: cs.verify_chain_coarse(grp(), rows(3), i32(1, 2), probs(3), sp(), G()),
        "draft_probs",
    ),
    (
        "pcg-rows",
        lambda: cs.verify_chain_coarse(grp(), rows(2), i32(1, 2), probs(2), sp(), G()),
        "target_logits|draft_tokens",
    ),
    ("fsq-channels", lambda: cs.fsq_pack(np.array([[8, 0, 0, 0]]), [8, 7, 6, 6]), "channels"),
    ("fsq-packed", lambda: cs.fsq_unpack(np.array([2016]), [8, 7, 6, 6]), "packed"),
    ("fsq-levels", lambda: cs.fsq_unpack(np.array([0]), [8, 0]), "levels"),
    (
        "fact-sizes",
        lambda: cs.sample_factorized(rows(2, 9), [5, 3], sp(), G()),
        "head_sizes|logits",
    ),
    ("fact-zero-head", lambda: cs.sample_factorized(rows(2, 6), [6, 0], sp(), G()), "head_sizes"),
    ("fact-nan", lambda: cs.sample_factorized(rows(2, 6, bad=NAN), [3, 3], sp(), G()), "logits"),
    ("stop-nan", lambda: cs.sample_stop(np.array([0.0, NAN], np.float32), G()), "stop_logits"),
    (
        "stop-temperature",
        lambda: cs.sample_stop(np.array([0.0], np.float32), G(), temperature=-1.0),
        "temperature",
    ),
    ("kv-nodes", lambda: cs.kv_commit(np.zeros((4, 2), np.float32), 0, np.array([0, 9])), "nodes"),
    ("kv-past", lambda: cs.kv_commit(np.zeros((4, 2), np.float32), 5, np.array([0])), "past_len"),
    (
        "kv-past-neg",
        lambda: cs.kv_commit(np.zeros((4, 2), np.float32), -1, np.array([0])),
        "past_len",
    ),
]


@pytest.mark.parametrize("fn, match", [c[1:] for c in GROUP_CASES], ids=[c[0] for c in GROUP_CASES])
def test_rejects_extensions(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


# ------------------------------------------------------------------------------------------
# duplicate top-k siblings: either rejected (ValueError naming node_tokens) or deduplicated so
# that the law still holds -- never double-counted mass


def test_topk_duplicate_siblings_rejected_or_lossless():
    t = cs.DraftTree.from_paths([(0,), (1,), (2,)])
    tok = i32(0, 2, 2, 4)  # siblings 1 and 2 both carry token 2
    x = np.array([[0.0, 0.3, 1.2, -0.5, 0.9, 0.1]] * 4, dtype=np.float32)
    g = cs.Generator(seed=1)
    try:
        cs.verify_tree(t, tok, x, sp(), g)
    except ValueError as e:
        assert "node_tokens" in str(e)
        return
    n = N_DRAWS // 4
    first = np.array([cs.verify_tree(t, tok, x, sp(), g).tokens[0] for _ in range(n)])
    want = np_warp(x[0])
    assert law_ok(counts_of(first, V), want, n), "duplicate siblings double-count mass"
    assert not law_ok(counts_of(first, V), np_warp(x[0], 1.5), n)  # the check has power


def test_python_dash_m_codecspec_is_the_command_line():
    """`python -m codecspec` runs the same parser as the `codecspec` script (exit codes too)."""
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "codecspec", "--help"], capture_output=True)
    assert ok.returncode == 0 and b"synth" in ok.stdout and b"serve" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "codecspec", "synth", "hi", "--temperature", "-1"],
        capture_output=True,
    )
    assert bad.returncode == 2 and b"temperature" in bad.stderr
