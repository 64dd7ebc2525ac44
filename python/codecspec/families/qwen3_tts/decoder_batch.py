"""The speech-decoder chunks of several streams in one graph call (`codecspec serve`).

`BatchedDecoder` runs a batched twin of the stateful decoder graph (`decoder_graph`,
`batched=True`: the same operators over a leading axis of one row per stream, each row at
its own position with its own state). `feed_many` advances several `DecoderStream`s at
once: every stream's next graph call (`DecoderStream.calls`, the very calls its own
`feed` would run) is taken, the calls of the same frame count go in one batched call (a
call of fewer frames cannot be padded: the padding frames would enter the row's state),
a lone call runs on the stream's own graph, and each stream keeps its own state and
position between calls. `DecoderBatcher` is the rendezvous for a server whose streams feed
their chunks from worker threads: a feed waits a moment for the other open streams' feeds,
then one thread decodes them all.

Not bit-identical to a lone decode: a few onnxruntime kernels compute a row by another
path when more rows share the call (ReduceSum over a [1, ...] tensor; Sin, Cos and Sqrt,
whose vector body and scalar tail round differently, and which elements fall in which
depends on the tensor's size), so a batched row differs from the stream alone by float32
rounding, which the causal state then carries on (random weights at the published shape,
16 frames, 4 streams: max |difference| 1.0e-6, 115 dB SNR against the lone decode, 0.03 of
a 16-bit step). tests/families/qwen3_tts/test_decoder_batch.py states the bound.

Whether it pays: the decoder's work is convolutions whose cost grows with the rows, so a
batched call saves only what a call costs beyond its rows (weight reads, per-node
overhead). CPU time per stream-frame at the published shape, one thread, lone against
batched, on a machine shared with a training run (+-10 %): chunks of 1 frame 107 -> 93 ms
(2 streams), 89 -> 80 (4), 113 -> 119 (8); of 4 frames 79 -> 85, 82 -> 91, 84 -> 83. No
saving beyond the noise, so the engine asks for it (`Qwen3Family.batch_decoder`) rather
than making it the default; bench/qwen3_talker_rows.py --audio measures it served.

The batched graph is written once into the decoder's cache entry beside its graph
(`decoder.batched[.fused].onnx`), reading the lone graph's weights file: the same tensors
under the same names, checked byte for byte, so nothing is written twice.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path
from typing import Optional

import numpy as np

from .decoder import DecoderStream, SpeechDecoder

__all__ = ["BatchedDecoder", "DecoderBatcher", "BatchedStream", "batched_graph"]

_BATCHED_FILE = "decoder.batched.onnx"
_BATCHED_FUSED_FILE = "decoder.batched.fused.onnx"


# ---------------------------------------------------------------------- the graph file
def batched_graph(source) -> Optional[Path]:
    """The batched graph beside `source.graph` (a `DecoderSource`), built on first use; None
    where the cache entry cannot be written."""
    name = _BATCHED_FUSED_FILE if source.fused else _BATCHED_FILE
    path = source.graph.with_name(name)
    if path.is_file():
        return path
    model = _build(source)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        import onnx

        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    except OSError:  # a cache this process may read but not write: no batching
        tmp.unlink(missing_ok=True)
        return None
    return path


def _build(source):
    from codecspec.runtime.custom_ops import fuse_snake

    from .decoder import _read_folder
    from .decoder_graph import build_speech_decoder_graph

    config, _, where = _read_folder(Path(source.folder))
    model = build_speech_decoder_graph(config, lambda k: where[k].get(k), batched=True)
    share_weights(model, source.graph)
    if source.fused:
        fuse_snake(model)
    return model


def share_weights(model, lone_graph: Path) -> int:
    """Points every initializer of `model` that the lone graph keeps in its weights file
    under the same name, shape and bytes at that file (in place); returns how many."""
    import onnx
    from onnx import numpy_helper

    lone = onnx.load(str(lone_graph), load_external_data=False)
    ext = {
        t.name: t for t in lone.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
    }
    shared, files = 0, {}
    for t in model.graph.initializer:
        ref = ext.get(t.name)
        if ref is None or list(ref.dims) != list(t.dims) or ref.data_type != t.data_type:
            continue
        info = {e.key: e.value for e in ref.external_data}
        where = lone_graph.parent / info["location"]
        if where not in files:
            files[where] = np.memmap(where, np.uint8, "r")
        offset, length = int(info.get("offset", 0)), int(info["length"])
        raw = numpy_helper.to_array(t).tobytes()
        if raw == files[where][offset : offset + length].tobytes():
            t.CopyFrom(ref)
            shared += 1
    return shared


# ---------------------------------------------------------------------- batched calls
class BatchedDecoder:
    """A `SpeechDecoder` and its batched twin: `feed_many` decodes several streams'
    blocks together (see the module docstring)."""

    def __init__(self, decoder: SpeechDecoder, session) -> None:
        self.decoder, self.session = decoder, session
        self.calls = 0  # batched graph calls run (tests, benches)
        self.rows = 0  # stream rows in them

    @classmethod
    def load(cls, decoder: SpeechDecoder) -> Optional[BatchedDecoder]:
        """None for a decoder not loaded from a folder, or whose cache cannot take the
        batched graph."""
        from codecspec.runtime.session import open_session

        src = decoder.source
        path = batched_graph(src) if src is not None else None
        if path is None:
            return None
        session = open_session(
            path, provider=src.provider, threads=src.threads, arena=False, custom_ops=src.fused
        )
        return cls(decoder, session)

    def feed_many(self, streams: list, blocks: list) -> list:
        """`[s.feed(b) for s, b in zip(streams, blocks)]`, with the calls of equal frame
        counts run together. Each stream at most once."""
        d = self.decoder
        plans = [s.calls(d._check_codes(b, "codes")) for s, b in zip(streams, blocks)]
        parts: list = [[] for _ in streams]
        ready = {k: c for k, c in enumerate(next(p, None) for p in plans) if c is not None}
        while ready:
            groups: dict = {}
            for k, (block, _) in ready.items():
                groups.setdefault(len(block), []).append(k)
            for ks in groups.values():
                curs = [streams[k]._cur for k in ks]
                for k, audio in zip(ks, self._run(curs, [ready[k][0] for k in ks])):
                    if ready[k][1]:
                        parts[k].append(audio)
                    nxt = next(plans[k], None)
                    if nxt is None:
                        del ready[k]
                    else:
                        ready[k] = nxt
        return [np.concatenate(p) if p else np.zeros(0, np.float32) for p in parts]

    def _run(self, curs: list, blocks: list) -> list:
        """One call for these cursors' blocks (all of one frame count): the lone graph for
        one, the batched graph for more, each cursor's state and position advanced."""
        d = self.decoder
        if len(curs) == 1:  # exactly the stream's own call
            return [d._run(curs[0], blocks[0])]
        feeds = {
            "codes": np.stack(blocks),
            "position": np.array([c.position for c in curs], dtype=np.int64),
        }
        for s_in, _, _ in d._states:
            feeds[s_in] = np.concatenate([c.states[s_in] for c in curs])
        out = self.session.run(d._out_names, feeds)
        for b, cur in enumerate(curs):
            cur.states = {s_in: v[b : b + 1] for (s_in, _, _), v in zip(d._states, out[1:])}
            cur.position += len(blocks[b])
        self.calls += 1
        self.rows += len(curs)
        return list(out[0])


# ---------------------------------------------------------------------- many threads
class _Feed:
    def __init__(self, stream: BatchedStream, codes) -> None:
        self.stream, self.codes = stream, codes
        self.audio: Optional[np.ndarray] = None
        self.error: Optional[BaseException] = None
        self.done = False


class DecoderBatcher:
    """Feeds of many streams from many threads, decoded together: a feed joins a queue;
    the first thread to find no decode running becomes its leader, waits up to `gather_s`
    (or until every open stream has a feed queued) and decodes the queue in one
    `feed_many`; feeds that arrive meanwhile wait for the next leader. A stream counts as
    open from its first feed to `close()` (or its collection), so a stream that has ended
    holds no one up."""

    def __init__(self, batched: BatchedDecoder, gather_s: float = 0.01) -> None:
        self.batched = batched
        self.gather_s = float(gather_s)
        self._cond = threading.Condition()
        self._queue: list = []
        self._busy = False
        self._open: weakref.WeakSet = weakref.WeakSet()
        self.batch_sizes: list = []  # feeds per leader's decode (tests, benches)

    def open_stream(self, context=None) -> BatchedStream:
        return BatchedStream(self, DecoderStream(self.batched.decoder, context))

    def feed(self, stream: BatchedStream, codes) -> np.ndarray:
        job = _Feed(stream, codes)
        with self._cond:
            self._open.add(stream)
            self._queue.append(job)
            self._cond.notify_all()
            while not job.done and self._busy:
                self._cond.wait()
            if not job.done:  # this thread leads the next decode
                jobs = self._gather()
        if not job.done:
            self._decode(jobs)
        if job.error is not None:
            raise job.error
        return job.audio

    def close(self, stream: BatchedStream) -> None:
        with self._cond:
            self._open.discard(stream)
            self._cond.notify_all()

    def _gather(self) -> list:
        """(lock held) Wait for the other open streams' feeds, then take the queue."""
        self._busy = True
        deadline = time.monotonic() + self.gather_s
        while len(self._queue) < len(self._open):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        jobs, self._queue = self._queue, []
        return jobs

    def _decode(self, jobs: list) -> None:
        try:
            audio = self.batched.feed_many([j.stream.stream for j in jobs], [j.codes for j in jobs])
            for j, a in zip(jobs, audio):
                j.audio = a
        except BaseException as e:  # every waiting feed gets the error, not a hang
            for j in jobs:
                j.error = e
        with self._cond:
            for j in jobs:
                j.done = True
            self.batch_sizes.append(len(jobs))
            self._busy = False
            self._cond.notify_all()


class BatchedStream:
    """One stream's side of a `DecoderBatcher` (`feed` as `DecoderStream.feed`)."""

    def __init__(self, batcher: DecoderBatcher, stream: DecoderStream) -> None:
        self.batcher, self.stream = batcher, stream

    @property
    def frames(self) -> int:
        return self.stream.frames

    def feed(self, codes) -> np.ndarray:
        return self.batcher.feed(self, codes)

    def close(self) -> None:
        self.batcher.close(self)
