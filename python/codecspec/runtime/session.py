"""ONNX Runtime sessions with sensible CPU options and clear errors for bad model files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import onnxruntime as ort

from codecspec.runtime.providers import resolve
from codecspec.runtime.threads import (
    check_threads,
    configure,
    per_session_pools,
    physical_cores,
    pool_size,
)

ModelSource = Union[str, os.PathLike, bytes]


def session_options(threads: int | None = None, spinning: bool = True) -> ort.SessionOptions:
    """Options of every codecspec session: full graph optimisation, sequential execution, and
    the process's shared thread pool (`codecspec.runtime.threads`), created with `threads`
    on first use. With CODECSPEC_THREAD_POOL=session the session gets its own pool instead."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if per_session_pools():
        so.intra_op_num_threads = check_threads(threads) or physical_cores()
        so.inter_op_num_threads = 1
        # Worker threads keep spinning between the back-to-back calls of a decode loop;
        # letting them sleep doubled the latency of a small depth graph here (0.72 -> 1.37
        # ms at q=1). (The shared pool always spins; there is only one of it.)
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    else:
        configure(threads)
        so.use_per_session_threads = False
    return so


def session_threads(session: ort.InferenceSession) -> int:
    """Intra-op threads a session created by `open_session` runs with."""
    so = session.get_session_options()
    if so.use_per_session_threads:
        return int(so.intra_op_num_threads)
    return int(pool_size() or 1)


def open_session(
    model: ModelSource,
    provider: str = "auto",
    threads: int | None = None,
    arena: bool = True,
    custom_ops: bool = False,
) -> ort.InferenceSession:
    """An InferenceSession for `model` (a path or serialized bytes). `arena=False` frees a
    run's intermediate tensors after it instead of keeping them in onnxruntime's CPU arena
    (for graphs with large, variable-size activations, such as a speech decoder).
    `custom_ops`: the graph uses codecspec's own operators (`runtime.custom_ops`); a
    ValueError naming `custom_ops` where this build cannot serve them.

    Raises FileNotFoundError for a missing file, ValueError naming `model` for a file that is
    not a loadable ONNX model, ProviderUnavailable (a ValueError) for a missing provider, and
    ThreadBudgetError (a ValueError naming `threads`) when the process's shared pool has
    another size.
    """
    providers = resolve(provider)
    so = session_options(threads)
    so.enable_cpu_mem_arena = bool(arena)
    if custom_ops:
        from codecspec.runtime import custom_ops as ops

        if not ops.register(so):
            raise ValueError("custom_ops: this build of codecspec._core serves no operators")
    where = "model: "
    if not isinstance(model, (bytes, bytearray)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"model: no such ONNX file: {path}")
        model = str(path)
        where = f"model: {path}: "  # the file first, as every broken-folder error says it
    try:
        return ort.InferenceSession(model, sess_options=so, providers=providers)
    except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise ValueError(f"{where}cannot load ONNX model ({type(e).__name__}: {e})") from e
