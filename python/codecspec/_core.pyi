"""Type stubs for the Rust extension codecspec._core."""

from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
__version__: str

class SamplingParams:
    def __init__(
        self,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
    ) -> None:
        """repetition_penalty > 0 (1 = off) acts in warp / sample when a history is passed;
        the verify functions and sample_factorized refuse a penalty other than 1."""
    @property
    def temperature(self) -> float: ...
    @property
    def top_k(self) -> int: ...
    @property
    def top_p(self) -> float: ...
    @property
    def repetition_penalty(self) -> float: ...
    @property
    def greedy(self) -> bool: ...

class Generator:
    def __init__(self, seed: Optional[int] = None, stream: Optional[int] = None) -> None: ...
    @property
    def seed(self) -> int: ...
    @property
    def stream(self) -> int: ...
    @property
    def step(self) -> int: ...
    def fork(self, stream_id: int) -> Generator: ...
    def copy(self) -> Generator: ...
    def __copy__(self) -> Generator: ...
    def random(self, n: int) -> npt.NDArray[np.float64]: ...

class DraftTree:
    @staticmethod
    def from_paths(paths: Sequence[Sequence[int]]) -> DraftTree: ...
    @staticmethod
    def chain(k: int) -> DraftTree: ...
    @staticmethod
    def greedy(
        accept: ArrayLike,
        budget: int,
        max_depth: Optional[int] = None,
        max_rank: Union[int, Sequence[int], None] = None,
    ) -> DraftTree: ...
    @staticmethod
    def from_json(s: str) -> DraftTree: ...
    def to_json(self) -> str: ...
    @property
    def num_nodes(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def parents(self) -> npt.NDArray[np.int32]: ...
    @property
    def depths(self) -> npt.NDArray[np.int32]: ...
    @property
    def ranks(self) -> npt.NDArray[np.int32]: ...
    @property
    def paths(self) -> list[tuple[int, ...]]: ...
    def children(self, i: int) -> list[int]: ...
    def expected_tokens(self, accept: ArrayLike) -> float: ...
    def ancestor_mask(self) -> npt.NDArray[np.bool_]: ...
    def attention_bias(self, past_len: int) -> npt.NDArray[np.float32]: ...
    def position_ids(self, past_len: int) -> npt.NDArray[np.int64]: ...
    def leaf_paths(self) -> npt.NDArray[np.int32]: ...

class VerifyResult:
    @property
    def tokens(self) -> npt.NDArray[np.int32]: ...
    @property
    def nodes(self) -> npt.NDArray[np.int32]: ...
    @property
    def num_accepted(self) -> int: ...
    @property
    def groups(self) -> Optional[npt.NDArray[np.int32]]: ...

def warp(
    logits: ArrayLike, params: SamplingParams, history: Optional[ArrayLike] = None
) -> npt.NDArray[np.float32]:
    """history: earlier token ids of this stream (1-D, each in [0, V)); the repetition
    penalty applies to their logits before temperature / top-k / top-p."""

def sample(
    logits: ArrayLike,
    params: SamplingParams,
    generator: Generator,
    history: Optional[ArrayLike] = None,
) -> npt.NDArray[np.int32]: ...
def topk(logits: ArrayLike, k: int) -> npt.NDArray[np.int32]: ...
def verify_chain(
    target_logits: ArrayLike,
    draft_tokens: ArrayLike,
    params: SamplingParams,
    generator: Generator,
    draft_probs: Optional[ArrayLike] = None,
    tolerance: float = 0.0,
) -> VerifyResult:
    """Chain verification; tolerance = SSD's beta in [0, 1] (accept iff u < min(1, p/q) + beta).

    tolerance 0.0 (default) is exact and bit-identical to omitting it; tolerance > 0 is lossy
    by design (the output no longer follows the target law). Raises ValueError naming
    `tolerance` for values outside [0, 1], NaN or non-numbers.
    """

def verify_tree(
    tree: DraftTree,
    node_tokens: ArrayLike,
    target_logits: ArrayLike,
    params: SamplingParams,
    generator: Generator,
    draft_probs: Optional[ArrayLike] = None,
    draft_kind: str = "topk",
) -> VerifyResult: ...
def verify_tree_batch(
    trees: Sequence[DraftTree],
    node_tokens: ArrayLike,
    target_logits: ArrayLike,
    params: SamplingParams,
    generators: Sequence[Generator],
    draft_probs: Optional[ArrayLike] = None,
    draft_kind: str = "topk",
) -> list[VerifyResult]: ...

# Stubs for AcousticGroups / verify_chain_coarse / FSQ / kv_commit, to merge into _core.pyi.
# Uses the names _core.pyi already imports: Sequence, Optional, Union, np, npt, ArrayLike,
# SamplingParams, Generator, VerifyResult.

class AcousticGroups:
    """Overlapping acoustic similarity groups; w[k, t] = 1 / |groups_of(t)|."""

    @staticmethod
    def from_embeddings(
        emb: ArrayLike, threshold: float, singletons: ArrayLike = ()
    ) -> AcousticGroups:
        """Group k = {t : cos(e_k, e_t) >= threshold} | {k}; emb [V, D] float32.

        Tokens in `singletons` form their own group and join no other. Raises ValueError
        naming `emb`, `threshold` or `singletons`.
        """
    @staticmethod
    def from_members(members: Sequence[Sequence[int]], vocab_size: int) -> AcousticGroups:
        """Explicit groups. Raises ValueError naming `members` or `vocab_size`."""
    @property
    def num_groups(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def nnz(self) -> int: ...
    def members(self, k: int) -> npt.NDArray[np.int32]: ...
    def groups_of(self, t: int) -> npt.NDArray[np.int32]: ...
    def coarse(self, probs: ArrayLike) -> Union[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """[..., V] -> [..., num_groups]; float32 in -> float32 out, otherwise float64."""

def verify_chain_coarse(
    groups: AcousticGroups,
    target_logits: ArrayLike,
    draft_tokens: ArrayLike,
    draft_probs: ArrayLike,
    params: SamplingParams,
    generator: Generator,
) -> VerifyResult: ...
def verify_tree_coarse(
    groups: Union[AcousticGroups, Sequence[AcousticGroups]],
    tree: DraftTree,
    node_tokens: ArrayLike,
    target_logits: ArrayLike,
    params: SamplingParams,
    generator: Generator,
) -> VerifyResult:
    """Coarse-grained verification of a top-k (deterministic children) tree.

    groups: one AcousticGroups for every row or a sequence of T (row i's groups, e.g. per RVQ
    level). The emitted group (result.groups) at every position follows the target's coarse
    law given the emitted prefix; singleton groups reproduce verify_tree(..., "topk") exactly.
    Raises ValueError naming the argument.
    """

def fsq_pack(channels: ArrayLike, levels: Sequence[int]) -> npt.NDArray[np.int64]: ...
def fsq_unpack(packed: ArrayLike, levels: Sequence[int]) -> npt.NDArray[np.int64]: ...
def sample_factorized(
    logits: ArrayLike,
    head_sizes: Sequence[int],
    params: SamplingParams,
    generator: Generator,
) -> npt.NDArray[np.int32]: ...
def sample_stop(
    stop_logits: ArrayLike, generator: Generator, temperature: float = 1.0
) -> npt.NDArray[np.bool_]: ...
def kv_commit(
    cache: Union[npt.NDArray[np.float32], npt.NDArray[np.float16]],
    past_len: int,
    nodes: ArrayLike,
    rows: Optional[ArrayLike] = None,
) -> int: ...

class HeadBank:
    def __init__(self, weights: ArrayLike) -> None: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def targets_bf16(self) -> bool: ...
    def logits(
        self, head: int, z: ArrayLike, offset: Optional[ArrayLike] = None
    ) -> npt.NDArray[np.float32]: ...
    def logits_rows(self, head: int, z: ArrayLike) -> npt.NDArray[np.float32]: ...
    def draft_candidates(
        self, z: ArrayLike, first_head: int, offsets: ArrayLike, m: int
    ) -> npt.NDArray[np.int32]: ...

class Projection:
    """y = x @ weights (+ bias) on the calling thread (no numpy BLAS, no thread pool): each
    output summed in input order with a separate multiply and add, so the same bits on every
    thread and machine. float64 weights make a float64 map, anything else float32."""

    def __init__(self, weights: ArrayLike, bias: Optional[ArrayLike] = None) -> None: ...
    def apply(self, x: ArrayLike) -> npt.NDArray[np.floating]:
        """[n, out_features] in the map's dtype from x [n, in_features]."""
    @property
    def in_features(self) -> int: ...
    @property
    def out_features(self) -> int: ...
    @property
    def dtype(self) -> str: ...

def verify_tree_hidden(
    tree: DraftTree,
    node_tokens: ArrayLike,
    hidden: ArrayLike,
    node_heads: ArrayLike,
    bank: HeadBank,
    params: SamplingParams,
    generator: Generator,
    draft_probs: Optional[ArrayLike] = None,
    draft_kind: str = "topk",
) -> VerifyResult: ...
