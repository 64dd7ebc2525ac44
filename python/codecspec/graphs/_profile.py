"""Node counts and ONNX Runtime CPU latency of the depth graphs (random weights).

    python -m codecspec.graphs._profile                 # Qwen3-TTS-0.6B-size code predictor
    python -m codecspec.graphs._profile --small         # 5 x 256 model
    python -m codecspec.graphs._profile --queries 1,4,8,16 --past 8 --threads 2 --repeats 40
    python -m codecspec.graphs._profile --heads-only    # LM heads: in-graph gather vs host

Each (variant, heads) graph runs with `--threads` intra-op threads, one inter-op thread and
full graph optimisation. Rounds visit every graph and every Q in turn (3 calls, the first one
discarded) so that machine noise spreads evenly; the table reports median and minimum ms.
For heads="hidden" the table also gives the time including the host-side head computation
(`compute_head_logits`: verify logits + K draft logits in numpy), which is what a runtime
using those graphs pays per call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from codecspec.runtime.session import session_options
from codecspec.runtime.threads import configure

from .builder import (
    GraphBuilder,
    _heads_part,
    build_depth_graph,
    count_nodes,
    cpu_variant_supported,
)
from .config import qwen3_tts_0_6b, small_depth
from .reference import compute_head_logits, example_feeds
from .weights import DepthDecoderWeights


def _bushy_tree_parents(q: int) -> list[int]:
    """A bushy tree of q nodes: root with up to 3 children per node, breadth first."""
    return [-1] + [(i - 1) // 3 for i in range(1, q)]


_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def main(argv=None) -> int:
    # numpy's BLAS threads fight ONNX Runtime's spinning threads on a 2-core machine (8 ms vs
    # 0.3 ms for one head matrix-vector product): pin BLAS to one thread before numpy starts.
    if argv is None and any(os.environ.get(k) != "1" for k in _BLAS_ENV):
        env = dict(os.environ, **{k: "1" for k in _BLAS_ENV})
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], env)
    args = _parser().parse_args(argv)
    config = small_depth(codebook_size=2048, c0_vocab_size=3072) if args.small else qwen3_tts_0_6b()
    queries = [int(q) for q in args.queries.split(",")]
    variants = args.variants.split(",")
    configure(args.threads)  # before any session: the shared pool gets the asked size
    if "cpu" in variants and not cpu_variant_supported():
        print("# onnxruntime here cannot run variant='cpu'; skipping it")
        variants = [v for v in variants if v != "cpu"]
    weights = _random_weights(config, args)

    # --no-spin only matters with CODECSPEC_THREAD_POOL=session (the shared pool spins).
    so = session_options(args.threads, spinning=not args.no_spin)

    if args.heads_only:
        return _heads_only(config, weights, so, queries, args)

    sessions = _open_sessions(config, weights, so, variants, args.heads.split(","))
    feeds = {
        q: example_feeds(
            config,
            past_len=args.past,
            parents=_bushy_tree_parents(q),
            seed=q,
            draft_offsets=weights["draft_offsets"],
        )
        for q in queries
    }
    times, host = _time_rounds(sessions, feeds, queries, weights["heads"], args.repeats)
    _print_table(sessions, queries, times, host, args.repeats)
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", action="store_true", help="5 layers x 256 hidden instead of Qwen")
    ap.add_argument("--queries", default="1,4,8,16")
    ap.add_argument("--past", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15, help="rounds (2 timed calls each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default="plain,cpu")
    ap.add_argument("--heads", default="graph,hidden")
    ap.add_argument("--no-spin", action="store_true", help="intra-op threads block, not spin")
    ap.add_argument(
        "--heads-only",
        action="store_true",
        help="time only the LM-head part: in-graph gather vs host compute_head_logits",
    )
    return ap


def _random_weights(config, args) -> DepthDecoderWeights:
    """Random weights of `config` (the timings do not depend on their values), with the
    header lines saying what was measured."""
    import onnxruntime as ort

    t0 = time.perf_counter()
    weights = DepthDecoderWeights.random(config, args.seed)
    print(f"# config: {config.to_json()}")
    print(
        f"# onnxruntime {ort.__version__}, {args.threads} intra-op threads, past={args.past}, "
        f"{weights.num_parameters / 1e6:.1f}M parameters (random weights "
        f"{time.perf_counter() - t0:.1f}s)"
    )
    return weights


def _open_sessions(config, weights, so, variants, heads_kinds) -> dict:
    """{(variant, heads): (session, its input names)} for every graph to time, built one at a
    time (the serialised model is dropped once its session holds it: two Qwen-size protos at
    once would double the peak memory)."""
    import onnxruntime as ort

    sessions = {}
    for variant in variants:
        for heads in heads_kinds:
            t0 = time.perf_counter()
            model = build_depth_graph(config, weights, variant=variant, heads=heads)
            t1 = time.perf_counter()
            blob = model.SerializeToString()
            sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
            t2 = time.perf_counter()
            names = [i.name for i in sess.get_inputs()]
            sessions[(variant, heads)] = (sess, names)
            print(
                f"# {variant:5s}/{heads:6s}: {count_nodes(model)} nodes, "
                f"{len(blob) / 1e6:.0f} MB, build {t1 - t0:.1f}s, session {t2 - t1:.1f}s"
            )
            del model, blob
    return sessions


def _time_rounds(sessions, feeds, queries, heads_w, repeats: int):
    """(graph seconds, graph + host heads seconds) per (graph, q). Round-robin over graphs, a
    short burst per graph: the first call of a burst (discarded) absorbs the previous session's
    spinning worker threads; rounds spread machine noise. The first round is warm-up."""
    times: dict = {(k, q): [] for k in sessions for q in queries}
    host: dict = {(k, q): [] for k in sessions for q in queries}
    for r in range(repeats):
        for key, (sess, names) in sessions.items():
            for q in queries:
                f = feeds[q]
                inp = {n: f[n] for n in names}
                for k in range(3):
                    t0 = time.perf_counter()
                    out = sess.run(None, inp)
                    t1 = time.perf_counter()
                    if key[1] == "hidden":
                        compute_head_logits(heads_w, out[0], f["head_ids"], f["draft_offsets"])
                    t2 = time.perf_counter()
                    if k > 0 and r > 0:
                        times[(key, q)].append(t1 - t0)
                        host[(key, q)].append(t2 - t0)
    return times, host


def _print_table(sessions, queries, times, host, repeats: int) -> None:
    """The markdown table: median (min) ms per graph and q; for heads="hidden" graphs also the
    time including the host-side heads, what a runtime using them pays per call."""
    print()
    print(f"median (min) ms over {2 * (repeats - 1)} calls")
    print()
    print("| variant | heads | " + " | ".join(f"Q={q}" for q in queries) + " |")
    print("|---|---|" + "---|" * len(queries))
    for key in sessions:
        cells = []
        for q in queries:
            t = 1e3 * np.asarray(times[(key, q)])
            cell = f"{np.median(t):.2f} ({t.min():.2f})"
            if key[1] == "hidden":
                h = 1e3 * np.asarray(host[(key, q)])
                cell += f"; +host heads {np.median(h):.2f} ({h.min():.2f})"
            cells.append(cell)
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")


def _heads_only(config, weights, so, queries, args) -> int:
    """The heads part of a heads="graph" model alone vs the host path, on random hidden states."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    c = config
    g = GraphBuilder()
    for n in ("hidden", "head_ids", "draft_offsets", "logits", "draft_logits"):
        g._used.add(n)
    _heads_part(g, c, weights, "hidden")
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        g.nodes,
        "heads_only",
        [
            helper.make_tensor_value_info("hidden", f32, ["q", c.hidden_size]),
            helper.make_tensor_value_info("head_ids", i64, ["q"]),
            helper.make_tensor_value_info(
                "draft_offsets", f32, [c.num_draft_offsets, c.hidden_size]
            ),
        ],
        [
            helper.make_tensor_value_info("logits", f32, ["q", c.codebook_size]),
            helper.make_tensor_value_info(
                "draft_logits", f32, ["q", c.num_draft_offsets, c.codebook_size]
            ),
        ],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(args.seed)
    heads_w = weights["heads"]
    offs = weights["draft_offsets"]
    res: dict = {(k, q): [] for k in ("graph", "host") for q in queries}
    inputs = {}
    for q in queries:
        f = example_feeds(c, past_len=args.past, parents=_bushy_tree_parents(q), seed=q)
        inputs[q] = {
            "hidden": rng.standard_normal((q, c.hidden_size), dtype=np.float32),
            "head_ids": f["head_ids"],
            "draft_offsets": offs,
        }
    for r in range(args.repeats):
        for q in queries:
            inp = inputs[q]
            for k in range(3):
                t0 = time.perf_counter()
                sess.run(None, inp)
                t1 = time.perf_counter()
                compute_head_logits(heads_w, inp["hidden"], inp["head_ids"], offs)
                t2 = time.perf_counter()
                if k > 0 and r > 0:
                    res[("graph", q)].append(t1 - t0)
                    res[("host", q)].append(t2 - t1)
    print()
    print("LM heads only (verify + draft logits), median (min) ms")
    print()
    print("| heads | " + " | ".join(f"Q={q}" for q in queries) + " |")
    print("|---|" + "---|" * len(queries))
    for k in ("graph", "host"):
        cells = []
        for q in queries:
            t = 1e3 * np.asarray(res[(k, q)])
            cells.append(f"{np.median(t):.2f} ({t.min():.2f})")
        print(f"| {k} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
