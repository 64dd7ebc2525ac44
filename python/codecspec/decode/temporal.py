"""Temporal speculation: rounds of draft LM -> one target call -> verification -> depth loops.

The two-stage v2 model's temporal LM reads only the c0 history, so L drafted c0 tokens can be
scored by the target in one call over its ring cache
(`codecspec.families.v2.model.V2Stepper.score`).
A round (`TemporalLoop.next_round`, then `finish_round`):

1. the draft LM catches up on the committed c0s it has not seen, then proposes L tokens, each
   sampled from its warped distribution q (kept for verification);
2. one target call scores the L + 1 frames (the last is the bonus position);
3. verification — `exact` (`cs.verify_chain`: the emitted c0 sequence has the target's law),
   `ssd` (`cs.verify_chain(..., tolerance=beta)`: lossy by design) or `pcg`
   (`cs.verify_chain_coarse` over similarity groups of c0: the emitted *group* sequence has
   the target's coarse law) — accepts a prefix and emits one correction/bonus token;
4. the target commits the accepted frames' K/V, the draft rewinds to what it saw correctly;
5. the depth loops of all the round's frames run together, one batched depth call per level
   (`codecspec.decode.batched_depth`: a frame's c1.. depend only on its hidden state and c0),
   each frame drawing from its own generator (`frame_generator`); then the target's stop
   head is drawn frame by frame (a stop discards the rest of the round).

With `draft_len=0` a round is one target call and a zero-draft verification, i.e. plain
autoregressive decoding: AR is the degenerate case of this loop, not a copy of it. The
serving engine runs the same rounds for many streams and batches all their frames' depth
loops into one call (`codecspec.families.v2.model`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.decode.batched_depth import FrameJob, frame_generator

__all__ = [
    "ACCEPT_RULES",
    "LOOPS",
    "Acceptance",
    "Round",
    "TemporalStats",
    "TemporalLoop",
    "run_round",
    "speculation_config",
]

ACCEPT_RULES = ("exact", "ssd", "pcg")


@dataclass(frozen=True)
class Acceptance:
    """How drafted tokens are accepted: rule "exact", "ssd" (tolerance `beta` in [0, 1]) or
    "pcg" (similarity groups at cosine `theta` in (-1, 1])."""

    rule: str = "exact"
    beta: float = 0.0
    theta: Optional[float] = None

    def __post_init__(self):
        if self.rule not in ACCEPT_RULES:
            raise ValueError(f"accept: expected one of {ACCEPT_RULES}, got {self.rule!r}")
        b = self.beta
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0.0 <= b <= 1.0:
            raise ValueError(f"beta: expected a number in [0, 1], got {b!r}")
        if self.rule == "pcg":
            t = self.theta
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not -1.0 < t <= 1.0:
                raise ValueError(f"theta: expected a number in (-1, 1], got {t!r}")
        if self.rule == "ssd" and self.beta == 0.0:
            pass  # ssd(0) is exact sampling: allowed, it is the sweep's first point

    @property
    def label(self) -> str:
        if self.rule == "ssd":
            return f"ssd(beta={self.beta:g})"
        if self.rule == "pcg":
            return f"pcg(theta={self.theta:g})"
        return "exact"


# Which loops speculate: the depth loop within a frame, the temporal loop across frames, or
# both (`codecspec bench --loops`, `codecspec quality`'s v2 modes, `synth --loops`).
LOOPS = ("depth", "temporal", "both")


def speculation_config(loops: str, accept: str, beta: float, theta: Optional[float]) -> dict:
    """generate() keywords of a model with both loops (v2/v3) for speculating in `loops` with
    acceptance rule `accept` (SSD's `beta`, PCG's `theta`). It lives beside `Acceptance`, not
    in a family, because the CLI's synth and quality commands build it too."""
    if loops not in LOOPS:
        raise ValueError(f"loops: expected one of {LOOPS}, got {loops!r}")
    rule = Acceptance(accept, beta=beta if accept == "ssd" else 0.0, theta=theta)
    temporal = loops in ("temporal", "both")
    depth = loops in ("depth", "both")
    if accept == "ssd" and not temporal:
        raise ValueError("accept: 'ssd' is a temporal-loop rule (use --loops temporal|both)")
    return {
        "temporal": "spec" if temporal else "ar",  # explicit: the model's "auto" may be spec
        "accept": rule,
        "mode": ("pcg" if accept == "pcg" else "spec") if depth else "ar",
        "depth_theta": theta if accept == "pcg" else None,
    }


@dataclass
class TemporalStats:
    rounds: int = 0
    frames: int = 0  # emitted (before a stop cut the last round)
    drafted: int = 0
    accepted: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0  # host: warps, verification, commits
    depth_seconds: float = 0.0
    accepted_per_round: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # pcg: emitted group per frame (exact-law variable)

    @property
    def tokens_per_call(self) -> float:
        """c0 tokens emitted per target call (1.0 for AR)."""
        return self.frames / max(self.target_calls, 1)

    @property
    def acceptance(self) -> float:
        return self.accepted / max(self.drafted, 1)

    @property
    def temporal_seconds(self) -> float:
        return self.target_seconds + self.draft_seconds + self.verify_seconds

    @property
    def host_share(self) -> float:
        """Host work of the rounds relative to their target calls."""
        return self.verify_seconds / max(self.target_seconds, 1e-12)


@dataclass
class Round:
    """What one round emitted: frames t .. t+k-1 (their c0s, the target's hidden states and
    stop logits from the round's one target call)."""

    t: int
    c0s: np.ndarray  # int64 [k]
    hidden: np.ndarray  # [k, D]
    stop_logits: np.ndarray  # [k]

    def __len__(self) -> int:
        return len(self.c0s)


class TemporalLoop:
    """Speculative (or, with draft_len 0, autoregressive) decoding of one utterance, a round
    at a time: the serving engine's step runs each stream's round (`round_steps`,
    `frame_jobs`, `finish_round`; `codecspec.families.v2.model.V2Family`), and `generate`
    is that engine with one slot.

    target / draft: `V2Stepper`s of the same utterance (draft may be None when draft_len is
    0); depth: a `DepthDecoder`; depth_mode "ar", "spec" or "pcg" (the depth loop's own
    rule); c0_groups: `cs.AcousticGroups` over the c0 vocabulary for accept rule "pcg";
    params: c0's sampling law; depth_params: the depth levels' (default: params)."""

    def __init__(
        self,
        target,
        draft,
        depth,
        params: cs.SamplingParams,
        *,
        draft_len: int = 3,
        accept: Acceptance = Acceptance(),
        c0_groups: Optional[cs.AcousticGroups] = None,
        depth_mode: str = "ar",
        depth_params: Optional[cs.SamplingParams] = None,
    ):
        if isinstance(draft_len, bool) or not isinstance(draft_len, int) or draft_len < 0:
            raise ValueError(f"draft_len: expected an int >= 0, got {draft_len!r}")
        if draft_len > 0 and draft is None:
            raise ValueError("draft: a draft stepper is needed for draft_len > 0")
        if draft_len > 0 and draft.cache.capacity - draft.window + 1 < draft_len:
            raise ValueError(
                f"draft_len: at most {draft.cache.capacity - draft.window + 1} with this "
                f"draft graph's cache ({draft.cache.capacity} slots, window {draft.window})"
            )
        if accept.rule == "pcg":
            if not isinstance(c0_groups, cs.AcousticGroups):
                raise ValueError("c0_groups: accept rule 'pcg' needs cs.AcousticGroups over c0")
            if c0_groups.vocab_size != target.vocab_size:
                raise ValueError(
                    f"c0_groups: groups over {c0_groups.vocab_size} tokens, "
                    f"the target's c0 vocabulary has {target.vocab_size}"
                )
        self.target, self.draft, self.depth, self.params = target, draft, depth, params
        self.draft_len, self.accept, self.c0_groups = draft_len, accept, c0_groups
        self.depth_mode = depth_mode
        # the depth levels' own law (a folder may sample them cooler than c0)
        self.depth_params = params if depth_params is None else depth_params
        self.stats = TemporalStats()
        self.c0s: list = []

    def _prev(self, i: int) -> int:
        return self.target.start_token if i == 0 else int(self.c0s[i - 1])

    def _propose(self, t: int, n: int, g: cs.Generator):
        """n draft tokens for frames t..t+n-1 and the warped rows they were drawn from (a
        coroutine: yields the draft's score requests, see `round_steps`)."""
        d, st = self.draft, self.stats
        tokens = np.empty(n, np.int32)
        probs = np.empty((n, self.target.vocab_size), np.float32)
        pending = [self._prev(i) for i in range(d.t, t + 1)]  # catch up, then frame t's input
        for j in range(n):
            t0 = time.perf_counter()
            out = yield d, pending
            st.draft_seconds += time.perf_counter() - t0
            st.draft_calls += 1
            t0 = time.perf_counter()
            logits = out[1][-1]
            d.commit(out, len(pending))
            probs[j] = cs.warp(logits, self.params)
            tokens[j] = cs.sample(logits, self.params, g)
            pending = [int(tokens[j])]
            st.verify_seconds += time.perf_counter() - t0
        return tokens, probs

    def _verify(self, logits, tokens, probs, g):
        a = self.accept
        if a.rule == "pcg":
            return cs.verify_chain_coarse(self.c0_groups, logits, tokens, probs, self.params, g)
        if tokens.size == 0:
            return cs.verify_chain(logits, tokens, self.params, g)
        return cs.verify_chain(logits, tokens, self.params, g, draft_probs=probs, tolerance=a.beta)

    def next_round(self, generator: cs.Generator, max_frames: int) -> Round:
        """One round's temporal part (draft, one target call, verification, commits): at
        least one and at most `max_frames` - frames so far new frames, whose c0s join
        `self.c0s`."""
        return run_round(self.round_steps(generator, max_frames))

    def round_steps(self, generator: cs.Generator, max_frames: int):
        """`next_round` as a coroutine: it yields each graph call it needs as (stepper,
        prev_tokens), takes that call's output (`stepper.score(prev_tokens)`) back, and
        returns the Round. `run_round` answers it call by call; the serving engine answers
        the requests of all its streams with one batched call per graph."""
        st, tgt = self.stats, self.target
        t = len(self.c0s)
        n = min(self.draft_len, max_frames - t - 1)
        if n > 0:
            tokens, probs = yield from self._propose(t, n, generator)
        else:
            tokens = np.empty(0, np.int32)
            probs = np.empty((0, tgt.vocab_size), np.float32)
        t0 = time.perf_counter()
        out = yield tgt, [self._prev(t)] + tokens.tolist()
        t1 = time.perf_counter()
        r = self._verify(out[1], tokens, probs, generator)
        a = int(r.num_accepted)
        tgt.commit(out, a + 1)
        if self.draft is not None and self.draft.t > t + a + 1:
            self.draft.rewind(t + a + 1)
        st.target_seconds += t1 - t0
        st.verify_seconds += time.perf_counter() - t1
        st.target_calls += 1
        st.rounds += 1
        st.drafted += n
        st.accepted += a
        st.accepted_per_round.append(a)
        emitted = np.asarray(r.tokens, np.int64)[: a + 1]
        self.c0s.extend(int(c) for c in emitted)
        if self.accept.rule == "pcg":
            st.groups.extend(int(x) for x in np.asarray(r.groups)[: a + 1])
        return Round(t, emitted, out[0][: a + 1], out[2][: a + 1])

    def frame_jobs(self, rnd: Round, generator: cs.Generator) -> list:
        """The depth loops the round's frames need (`decode_frames` runs them)."""
        return [
            FrameJob(
                rnd.hidden[j],
                int(c0),
                self.depth_mode,
                self.depth_params,
                frame_generator(generator, rnd.t + j),
            )
            for j, c0 in enumerate(rnd.c0s)
        ]

    def finish_round(self, rnd: Round, codes: list, generator: cs.Generator) -> tuple:
        """(codes int64 [k', G], stopped): the stop head drawn frame by frame over the
        round's decoded frames; a stop ends the utterance at its frame, the rest of the
        round is dropped. A frame whose depth loop failed raises its error."""
        out = []
        for j, c in enumerate(codes):
            if isinstance(c, Exception):
                raise c
            out.append(np.asarray(c, np.int64))
            self.stats.frames += 1
            if bool(cs.sample_stop(rnd.stop_logits[j : j + 1], generator)[0]):
                return np.stack(out), True
        return np.stack(out), False


def run_round(steps) -> Round:
    """Drives a `TemporalLoop.round_steps` coroutine with one graph call per request."""
    try:
        request = next(steps)
        while True:
            stepper, prev = request
            request = steps.send(stepper.score(prev))
    except StopIteration as done:
        return done.value


def expected_tokens_per_call(alpha: float, draft_len: int) -> float:
    """(1 - α^(L+1)) / (1 - α): frames per round at i.i.d. per-token acceptance α."""
    if alpha >= 1.0:
        return float(draft_len + 1)
    return (1.0 - math.pow(alpha, draft_len + 1)) / (1.0 - alpha)
