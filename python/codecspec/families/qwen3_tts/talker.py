"""The talker at run time: prefill and one-step decode over a host-owned KV cache, and the
sampling rules of the official talker `generate` call.

Sampling (Qwen3TTSForConditionalGeneration.generate -> transformers' generate): repetition
penalty over the c0 tokens generated so far (the prompt is embeddings, not ids, so it is not
in the history), every id of the top 1024 of the codec vocabulary except eos suppressed, eos
suppressed until `min_new_tokens` (2) tokens exist, then temperature / top-k / top-p, or
argmax when greedy. Suppression sets logits to -inf, which the penalty leaves at -inf, so the
order of the two does not matter.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

import codecspec as cs
from codecspec.graphs.config import zero_row
from codecspec.runtime.depth_graph import DepthGraph
from codecspec.runtime.kv import KVCache

__all__ = ["PrefixCache", "Talker", "TalkerSampler"]


class TalkerSampler:
    """Chooses c0 from the talker's logits (see the module docstring)."""

    def __init__(
        self,
        vocab_size: int,
        eos: int,
        suppressed: np.ndarray,
        params: cs.SamplingParams,
        min_new_tokens: int = 2,
    ) -> None:
        self.vocab_size, self.eos = int(vocab_size), int(eos)
        self.params, self.min_new_tokens = params, int(min_new_tokens)
        self.mask = np.zeros(self.vocab_size, bool)
        self.mask[np.asarray(suppressed, np.int64)] = True

    def logits(self, raw: np.ndarray, n_generated: int) -> np.ndarray:
        """The logits the warp sees (suppression applied, penalty not yet)."""
        out = np.array(raw, np.float32, copy=True).reshape(-1)
        out[self.mask] = -np.inf
        if n_generated < self.min_new_tokens:
            out[self.eos] = -np.inf
        return out

    def sample(self, raw: np.ndarray, history: list, g: cs.Generator) -> int:
        hist = np.asarray(history, np.int64)
        return int(cs.sample(self.logits(raw, len(history)), self.params, g, history=hist))

    def probs(self, raw: np.ndarray, history: list) -> np.ndarray:
        """The law `sample` draws from (for tests and diagnostics)."""
        hist = np.asarray(history, np.int64)
        return cs.warp(self.logits(raw, len(history)), self.params, history=hist)


class PrefixCache:
    """The talker's K/V of prompt prefixes already run, keyed by the rows' bytes.

    A prompt starts with rows that its voice, language and instruction fix and its text does
    not (the role tokens, the think/language/speaker tags: 9 of the 23 rows of a short
    CustomVoice sentence). `Talker.prefill` always runs those rows as a call of their own, so
    a prompt's K/V and hidden states are the same bits whether its prefix was cached or not;
    a cached prefix skips that call. Shared by a runtime's replicas (the server's slots);
    least recently used entries go first (~2 MB each at 0.6B)."""

    def __init__(self, entries: int = 16):
        if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
            raise ValueError(f"entries: expected an int >= 1, got {entries!r}")
        self.entries = entries
        self.hits = self.misses = 0
        self._kv: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(rows: np.ndarray) -> tuple:
        return rows.shape, hashlib.blake2b(rows.tobytes(), digest_size=16).digest()

    def get(self, key: tuple):
        with self._lock:
            kv = self._kv.get(key)
            if kv is None:
                self.misses += 1
                return None
            self._kv.move_to_end(key)
            self.hits += 1
            return kv

    def put(self, key: tuple, keys: np.ndarray, values: np.ndarray) -> None:
        with self._lock:
            self._kv[key] = (keys, values)
            self._kv.move_to_end(key)
            while len(self._kv) > self.entries:
                self._kv.popitem(last=False)


class Talker:
    """talker.onnx with a growing host KV cache; `prefill` then `step`, each returning the
    final-norm hidden state of the last position (the code predictor's `past_hidden`)."""

    def __init__(
        self,
        path: Path | DepthGraph,
        codec_head: np.ndarray | cs.HeadBank,
        provider="auto",
        threads=None,
        prefixes: PrefixCache | None = None,
    ):
        # a DepthGraph: share that loaded session (one talker cache per concurrent utterance)
        self.graph = path if isinstance(path, DepthGraph) else DepthGraph(path, provider, threads)
        self.config = self.graph.config
        # The codec head runs in the Rust core, not as numpy's `head @ hidden`: a BLAS call
        # leaves OpenBLAS's worker threads spinning for ~0.1 s after it returns, and on two
        # cores they took the CPU from the depth loop's graph calls that follow (its first
        # eight calls per frame ran at half speed: 10.3 against 5.8 ms per int8 call).
        # A bank shared with another talker (a replica) is passed as is.
        if isinstance(codec_head, cs.HeadBank):
            self.bank = codec_head
        else:
            self.bank = cs.HeadBank(np.ascontiguousarray(codec_head, np.float32)[None])
        self.cache: KVCache | None = None
        self._step = None
        # (TalkerSlots, slot): the cache is that slot of a buffer the serving engine's
        # talkers share, so their steps can run as one call (talker_rows.py)
        self.home = None
        self.prefixes = PrefixCache() if prefixes is None else prefixes

    @property
    def length(self) -> int:
        return 0 if self.cache is None else self.cache.length

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    @property
    def head(self) -> cs.HeadBank:
        """The codec head (a one-head bank; `Talker(graph, talker.head)` shares it)."""
        return self.bank

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        return self.bank.logits(0, hidden)

    def _alloc(self, capacity: int) -> None:
        c = self.config
        old = self.cache
        if self.home is not None:  # a slot of a shared buffer: its rows stay where they are
            slots, slot = self.home
            slots.reserve(capacity)
            self.cache = slots.view(slot, 0 if old is None else old.length)
            self._bind_step()
            return
        self.cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, capacity)
        if old is not None and old.length:
            n = old.length
            self.cache.keys[:, :, :n] = old.keys[:, :, :n]
            self.cache.values[:, :, :n] = old.values[:, :, :n]
            self.cache.length = n
        self._bind_step()

    def _bind_step(self) -> None:
        """The one-row step call over the current cache (again after a shared buffer grew)."""
        capacity = self.cache.capacity
        self._step = self.graph.bind(1, self.cache.keys, self.cache.values)
        self._step.ids[:] = zero_row(self.config)  # all inputs come through input_embeds
        self._step.bias[...] = -np.inf
        self._step.bias[0, : self.cache.length] = 0.0
        self._step.bias[0, capacity] = 0.0

    def prefill(self, embeds: np.ndarray, capacity: int, fixed: int = 0) -> np.ndarray:
        """Runs the prompt rows [n, H] from an empty cache holding `capacity` positions. The
        first `fixed` rows (the prompt's text-independent prefix, see PrefixCache) run as a
        call of their own, or come from the prefix cache."""
        embeds = np.ascontiguousarray(embeds, np.float32)
        n = len(embeds)
        if n + 1 > self.max_positions:
            raise ValueError(
                f"text: the prompt has {n} positions, the talker at most {self.max_positions}"
            )
        if isinstance(fixed, bool) or not isinstance(fixed, int) or not 0 <= fixed < n:
            raise ValueError(f"fixed: expected an int in [0, {n}), got {fixed!r}")
        self.cache = None
        self._alloc(max(capacity, n + 1))
        if fixed:
            keys, values = self._prefix(embeds[:fixed])
            self.cache.keys[:, :, :fixed] = keys
            self.cache.values[:, :, :fixed] = values
            self.cache.length = fixed
        hidden = self._rows(embeds[fixed:], self.cache)
        self._step.bias[0, :n] = 0.0
        return hidden

    def _prefix(self, rows: np.ndarray) -> tuple:
        """(keys, values) [layers, kv_heads, len(rows), head_dim] of a prompt prefix run
        from an empty cache of its own size (so its bits do not depend on the request)."""
        key = self.prefixes.key(rows)
        kv = self.prefixes.get(key)
        if kv is None:
            c = self.config
            scratch = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, len(rows) + 1)
            self._rows(rows, scratch)
            kv = (scratch.keys[:, :, : len(rows)].copy(), scratch.values[:, :, : len(rows)].copy())
            self.prefixes.put(key, *kv)
        return kv

    def _rows(self, rows: np.ndarray, cache: KVCache) -> np.ndarray:
        """Runs `rows` after the cache's valid positions (causal among themselves), appends
        their K/V to it; the last row's hidden state."""
        start, m, cap = cache.length, len(rows), cache.capacity
        call = self.graph.bind(m, cache.keys, cache.values)
        call.ids[:] = zero_row(self.config)
        call.embeds[...] = rows
        call.pos[:] = np.arange(start, start + m)
        call.bias[...] = -np.inf
        call.bias[:, :start] = 0.0
        call.bias[:, cap : cap + m] = np.triu(np.full((m, m), -np.inf, np.float32), k=1)
        call.run()
        self._commit(cache, call, m)
        return call.hidden[-1].copy()

    def _commit(self, cache: KVCache, call, m: int) -> None:
        """The call's m rows into the cache: an in-place graph wrote them there already."""
        if self.graph.kv_in_place:
            cache.length += m
        else:
            cache.commit(call.new_keys, call.new_values, np.arange(m, dtype=np.int32))

    def step(self, embed: np.ndarray) -> np.ndarray:
        """One position after the cached ones; grows the cache when it is full."""
        n = self.next_position()
        s = self._step
        s.embeds[0] = embed
        s.pos[0] = n
        s.run()
        self._commit(self.cache, s, 1)
        s.bias[0, n] = 0.0
        return s.hidden[0].copy()

    def next_position(self) -> int:
        """The position the next step writes, after growing a full cache (ValueError when
        the talker holds no more positions)."""
        n = self.cache.length
        if n + 1 > self.max_positions:
            raise ValueError(f"max_frames: the talker holds at most {self.max_positions} positions")
        if n >= self.cache.capacity:
            self._alloc(min(2 * self.cache.capacity, self.max_positions))
        return n

    def stepped(self) -> None:
        """A step of this talker's position ran elsewhere (a batched call wrote its K/V into
        this cache's slot): the cache and the one-row call take it in."""
        n = self.cache.length
        self.cache.length = n + 1
        self._step.bias[0, n] = 0.0
