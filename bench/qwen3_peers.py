"""Side by side on this CPU: codecspec and the CPU runtimes a Qwen3-TTS user would pick instead.

One Qwen3-TTS 0.6B CustomVoice folder (a real download, or random weights of the real shape
from `codecspec random-checkpoint qwen3-0.6b DIR`), the same text, speaker and language, the
same number of frames, greedy decoding, the same thread count everywhere. Each system runs in
its own long-lived worker process (its own interpreter if its packages live in another
environment), so the peak RSS reported is that system's alone. Each worker loads its model and
makes one untimed full-length warm-up run; then the systems run interleaved over `--rounds`
rounds, the order rotated every round so that load from other users of the machine hits all
alike; the table shows medians.

Per system and round (ms per 80 ms frame; frames = the frames the system actually made):
  talker          the talker's steps after the prefill (one per frame);
  code predictor  the 15 calls of the depth loop per frame (codecspec: `--mode spec` rows make
                  fewer calls, see below);
  12 Hz decoder   codes -> 24 kHz waveform;
  whole           wall time text -> whole waveform (not streamed), ÷ frames;
  TTFA            a second, streamed request: seconds from the call to its first audio chunk;
  peak RSS        the worker's ru_maxrss at the end (load, warm-up and all rounds).

The systems, how each was installed and converted, how its length was forced and where its
stage times come from:

  codecspec       this repository (`pip install -e .`). `Qwen3TTS.load(DIR, threads=T,
                  weights=fp32|int8|int4)`; `generate_codes(text, speaker=, language=,
                  temperature=0, max_frames=N)` then `waveform(...)`; stage times from the
                  result's `.seconds` (talker, depth) and the decoder call's wall time; TTFA from
                  `stream(...)` (first chunk = one frame). Rows "spec @ acceptance A": the
                  speculative depth loop (`mode="spec"`) with drafts whose top candidate is
                  right with probability A (`codecspec.decode.depth.SequencedDrafts`, what
                  `codecspec bench --acceptance A` runs end to end): random weights accept
                  nothing, so this times the real graphs at the acceptance a trained checkpoint
                  would give (the paper: 0.61, 2.47 codes per call for the 0.6B). The drafts
                  are drawn against the frames of one greedy AR run of the same request, made
                  at load; verification is the real one, so the acceptance the run got is
                  measured and shown. Verification is exact (the code predictor's placed
                  attention), so the speculative run makes the AR frames the drafts know;
                  where this CPU's quantised kernel computes one row unlike several (int4 on
                  AVX2) it can leave them, and the drafts are then iterated to its own frames
                  (same draws each request; `truth_reproduced` in the JSON says whether that
                  settled). The depth loop alone is also timed once at exactly A through the
                  bench API
                  (`controlled_depth_run`: each frame's drafts right about its own greedy
                  codes, AR and speculative interleaved frame by frame).
  qwentts.cpp     ggml, through the PyPI wheel `realtimetts-qwen-native-cpu` (0.4.2; import
                  `qwentts_cpp_cpu`; needs glibc >= 2.35 and AVX2/FMA/F16C). Its two GGUF files
                  (talker; 12 Hz tokenizer) are made by the upstream converter and quantiser of
                  github.com/ServeurpersoCom/qwentts.cpp, which are not in the wheel:
                  `convert.py` (safetensors -> F32 GGUF; needs torch, safetensors and `gguf`;
                  it reads `checkpoints/Qwen3-TTS-12Hz-0.6B-CustomVoice` and
                  `checkpoints/Qwen3-TTS-Tokenizer-12Hz`: symlinks to DIR and to a copy of
                  DIR/speech_tokenizer whose config.json gains the three decoder_config keys a
                  random folder leaves to the class defaults and convert.py reads:
                  num_semantic_quantizers 1, layer_scale_initial_scale 0.01,
                  vector_quantization_hidden_dimension 512; `--prepare OUT` makes them) and
                  `tools/quantize.cpp` (compiled against ggml's headers, linked to the wheel's
                  own libggml-base: `g++ -O2 -std=c++17 -Iggml/include -Isrc
                  tools/quantize.cpp -lggml-base -lggml`, a one-line src/version.h) with
                  `quantize F32.gguf OUT.gguf Q8_0|Q4_K_M`, the talker and the tokenizer alike
                  (its policy keeps codebooks F32, conv kernels F16 at load). Length:
                  `synthesize(max_new_tokens=N, do_sample=False, subtalker_do_sample=False)`;
                  `cpu_threads=T`; stage times from its `[Perf]` log lines; TTFA from
                  `stream(...)` (it streams from the first frame).
  vox-tts         `pip install vox-tts` (0.19.5; native C++ engine). Its own converter, numpy
                  only: `python -m vox build --model DIR --dtype bf16 --quant q8|q4 -o
                  M.tmod`. vox needs "assistant" to be one token of the text tokenizer ("chat
                  role prefix must tokenize to 3 tokens"); the random BPE of a random folder
                  splits it (ass + istant), so vox converts a copy of the folder (`--prepare
                  OUT`) whose last merge is replaced by "ass istant" and whose vocab id of that
                  merge is renamed "assistant": the text tokenizes as before, the prompt's role
                  line is one position shorter. `Engine(M, threads=T)`,
                  `speaker_voice(speaker)`; length: `synthesize(..., max_frames=N,
                  temperature=0, sub_temperature=0)`; stage times from `Engine.stats()`; TTFA
                  from `stream(...)` (4-frame chunks).
  official        `qwen-tts` 0.1.1 on PyTorch float32 (`pip install torch transformers==4.57.3
                  accelerate einops librosa soundfile onnxruntime` and `pip install qwen-tts==0.1.1
                  --no-deps`; sox / torchaudio are stood in for, the 12 Hz model never calls
                  them). `Qwen3TTSModel.from_pretrained(DIR, device_map="cpu",
                  dtype=torch.float32)`, `torch.set_num_threads(T)`; the model's `generate`
                  called as `generate_custom_voice` calls it with do_sample=False,
                  subtalker_dosample=False, max_new_tokens=N+1 (its loop returns one frame fewer
                  than tokens); stage times from forward hooks on the talker and the code
                  predictor; decoder `speech_tokenizer.decode`. No streaming: no TTFA.

`python bench/qwen3_peers.py DIR --prepare OUT` makes those two folders (symlinks to DIR's
weights) and prints the conversion commands.

Every peer is optional: one that cannot be imported is reported as "not installed (pip install
...)" and skipped, one whose converted files are missing as "not converted (command)". Peers
whose packages conflict with this environment run from their own: `--python KIND=PATH` (kinds:
codecspec, qwentts, vox, official). Workers start one at a time; when less than
`--min-free-gb` of memory is left after a load, the systems not yet started are skipped.

Not run in CI. A run on the project's 2-core machine (see docs/performance.md):

    python bench/qwen3_peers.py /tmp/q06 --frames 40 --threads 2 --rounds 3 \\
        --gguf-dir ~/peers/gguf --tmod-dir ~/peers \\
        --python qwentts=~/venv-peers/bin/python --python vox=~/venv-peers/bin/python \\
        --python official=~/venv-torchpeers/bin/python \\
        --json bench/results/qwen3_peers.json --plot docs/qwen3_peers.png --write-docs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

TEXT = "The quick brown fox jumps over the lazy dog."
SPEAKER = "aiden"
LANGUAGE = "english"
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # 80 ms at 24 kHz
STAGES = ("talker", "code_predictor", "decoder", "whole")
STAGE_TITLES = ("talker", "code predictor (15 calls)", "12 Hz decoder", "whole")
DOCS_BEGIN = "<!-- qwen3_peers:begin (bench/qwen3_peers.py --write-docs) -->"
DOCS_END = "<!-- qwen3_peers:end -->"


def docs_markers(tag: str | None) -> tuple:
    """The markers of the section --write-docs replaces; a --docs-tag gives a machine its own
    section beside the untagged one (e.g. avx512 beside the AVX2 run)."""
    if not tag:
        return DOCS_BEGIN, DOCS_END
    return (
        f"<!-- qwen3_peers[{tag}]:begin (bench/qwen3_peers.py --write-docs --docs-tag {tag}) -->",
        f"<!-- qwen3_peers[{tag}]:end -->",
    )


TALKER_GGUF = "qwen-talker-0.6b-customvoice-{quant}.gguf"
CODEC_GGUF = "qwen-tokenizer-12hz-{quant}.gguf"
TMOD = "qwen3-0.6b-customvoice.{quant}.tmod"

INSTALL = {
    "codecspec": "pip install -e .  (this repository)",
    "qwentts": "pip install realtimetts-qwen-native-cpu==0.4.2",
    "vox": "pip install vox-tts==0.19.5",
    "official": "pip install torch transformers==4.57.3 accelerate einops librosa soundfile "
    "onnxruntime && pip install qwen-tts==0.1.1 --no-deps",
}
IMPORTS = {
    "codecspec": "codecspec",
    "qwentts": "qwentts_cpp_cpu",
    "vox": "vox",
    "official": "qwen_tts",
}

# name -> (kind, options, row label)
SYSTEMS = {
    "codecspec-fp32": ("codecspec", {"weights": "fp32"}, "codecspec fp32, AR"),
    "codecspec-int8": ("codecspec", {"weights": "int8"}, "codecspec int8, AR"),
    "codecspec-int4": ("codecspec", {"weights": "int4"}, "codecspec int4, AR"),
    "codecspec-int8-spec": (
        "codecspec",
        {"weights": "int8", "acceptance": 0.61},
        "codecspec int8, spec @ acceptance 0.61",
    ),
    "codecspec-int4-spec": (
        "codecspec",
        {"weights": "int4", "acceptance": 0.61},
        "codecspec int4, spec @ acceptance 0.61",
    ),
    "qwentts-q8_0": ("qwentts", {"quant": "Q8_0"}, "qwentts.cpp Q8_0"),
    "qwentts-q4_k_m": ("qwentts", {"quant": "Q4_K_M"}, "qwentts.cpp Q4_K_M"),
    "qwentts-f32": ("qwentts", {"quant": "F32"}, "qwentts.cpp F32"),
    "vox-q8": ("vox", {"quant": "q8"}, "vox-tts q8"),
    "vox-q4": ("vox", {"quant": "q4"}, "vox-tts q4 (talker 4-bit)"),
    "official-fp32": ("official", {}, "official qwen-tts, PyTorch fp32"),
}
DEFAULT_SYSTEMS = (
    "codecspec-fp32,codecspec-int8,codecspec-int4,codecspec-int4-spec,"
    "qwentts-q8_0,qwentts-q4_k_m,vox-q8,vox-q4,official-fp32"
)


# ---------------------------------------------------------------------------------- workers
# Each worker answers JSON lines on a private copy of its stdout (native libraries that print
# to stdout write to stderr instead): "load" -> {version, load_s, ...}; "run" -> one timed
# request plus one streamed one; "rss" -> peak RSS; "quit".


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class CodecspecWorker:
    def __init__(self, opts: dict, a: dict) -> None:
        import codecspec
        from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

        self.a, self.mode = a, "ar"
        self.version = getattr(codecspec, "__version__", "?") + _git_rev(Path(__file__).parent)
        self.tts = Qwen3TTS.load(
            a["model"], provider="cpu", threads=a["threads"], weights=opts["weights"]
        )
        self.decoder = self.tts.speech_decoder()
        if opts.get("acceptance") is not None:
            self._controlled(float(opts["acceptance"]))

    def _request(self) -> dict:
        a = self.a
        return dict(
            speaker=a["speaker"],
            language=a["language"],
            temperature=0,
            max_frames=a["frames"],
            mode=self.mode,
        )

    def _controlled(self, acceptance: float, tries: int = 3) -> None:
        """The depth loop speculative with drafts of a set acceptance (module doc).

        The drafts are right about a known run of frames, the AR run's. Exact verification
        reproduces them; where this CPU's quantised kernel rounds a verified row unlike an
        AR row, the speculative run can leave them (then the talker follows it, and nothing
        after is accepted): the truth is then iterated to the speculative run's own frames,
        with the same draws every run, until a run reproduces it."""
        import numpy as np

        import codecspec as cs

        trace: list = []  # (hidden, c0) per frame, for the depth loop alone below
        frames = self.tts.iter_frames(self.a["text"], trace=trace, **self._request())
        truth = np.asarray(list(frames), np.int64)  # AR, greedy
        from codecspec.families.qwen3_tts.bench import choose_draft_depth

        dec = self.tts.depth
        # --draft-depth, or the chain `codecspec bench` chooses on this device
        depth = self.a.get("draft_depth") or choose_draft_depth(dec, acceptance)["depth"]
        dec.set_tree(cs.DraftTree.chain(int(depth)))
        self.acceptance, self.mode, self.draft_depth = acceptance, "spec", int(depth)
        for i in range(tries):
            self.truth = truth
            self._rewind()
            codes = self.tts.generate_codes(self.a["text"], **self._request()).codes
            self.truth_tries = i + 1
            same = codes.shape == truth.shape and bool((codes == truth).all())
            if same:
                break
            truth = codes
        self.extra = {"truth_tries": self.truth_tries, "truth_reproduced": same}
        self.extra["depth_at_acceptance"] = self._depth_at_acceptance(acceptance, depth, trace)

    def _depth_at_acceptance(self, acceptance: float, depth: int, trace: list) -> dict:
        """The depth loop alone at exactly this acceptance, through the bench API
        (`controlled_depth_run`, what `codecspec bench --acceptance A` times): the frames of
        one AR request, each frame's drafts right about that frame's own greedy codes, AR
        and speculative interleaved frame by frame. Once, at load (`trace`: the AR request's
        (hidden, c0) per frame)."""
        import numpy as np

        from codecspec.families.qwen3_tts.bench import controlled_depth_run

        dec = self.tts.depth
        saved, dec.draft_control = dec.draft_control, None
        hiddens = np.stack([h for h, _ in trace])
        c0s = np.array([c for _, c in trace])
        run, stats = controlled_depth_run(dec, hiddens, c0s, len(c0s), acceptance, depth, 0)
        dec.draft_control = saved
        n = len(c0s)
        return {
            "frames": n,
            "ar_ms_per_frame": run.median_ms("ar"),
            "spec_ms_per_frame": run.median_ms("spec"),
            "acceptance_measured": stats["acceptance"],
            "codes_per_call": 15.0 / max(run.calls["spec"] / n, 1e-9),
            "speedup": run.median_ms("ar") / max(run.median_ms("spec"), 1e-9),
        }

    def _rewind(self) -> None:
        """A fresh draft control (the same draws every request) at frame 0."""
        if self.mode == "spec":
            from codecspec.decode.depth import SequencedDrafts

            self.tts.depth.draft_control = SequencedDrafts(
                self.acceptance, self.tts.depth.V, self.truth, 0
            )

    def run(self) -> dict:
        text, dec = self.a["text"], self.tts.depth
        self._rewind()
        dec.stats.reset()
        t0 = time.perf_counter()
        r = self.tts.generate_codes(text, **self._request())
        t1 = time.perf_counter()
        wav = self.tts.waveform(r)
        t2 = time.perf_counter()
        s = r.seconds
        out = {
            "frames": int(len(r.codes)),
            "samples": int(len(wav)),
            "prefill_ms": 1e3 * s["prefill"],
            "talker_ms": 1e3 * s["talker"],
            "code_predictor_ms": 1e3 * s["depth"],
            "decoder_ms": 1e3 * (t2 - t1),
            "whole_ms": 1e3 * (t2 - t0),
            "depth_calls_per_frame": dec.stats.calls_per_frame,
        }
        if self.mode == "spec":
            out["acceptance_measured"] = dec.stats.acceptance
            out["codes_per_depth_call"] = 15.0 / max(dec.stats.calls_per_frame, 1e-9)
            same = r.codes.shape == self.truth.shape and bool((r.codes == self.truth).all())
            out["codes_equal_truth"] = same
            out["truth_tries"] = self.truth_tries
            out["draft_depth"] = self.draft_depth
        self._rewind()
        t0 = time.perf_counter()
        chunks = self.tts.stream(text, **self._request())
        first = next(chunks, None)
        out["ttfa_s"] = time.perf_counter() - t0
        out["first_chunk_frames"] = 0 if first is None else len(first) / SAMPLES_PER_FRAME
        chunks.close()
        return out


def _git_rev(where: Path) -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" ({rev})" if rev else ""


# qwentts.cpp's stage lines, e.g. "[Perf] TalkerDecode 3377.4 ms (8 frames, ...)": name, ms.
_PERF = re.compile(r"\[Perf\]\s*(\w+)\s+([0-9.]+)\s*ms")


class QwenttsWorker:
    def __init__(self, opts: dict, a: dict) -> None:
        import qwentts_cpp_cpu as q

        self.a = a
        gdir = Path(a["gguf_dir"])
        talker = gdir / TALKER_GGUF.format(quant=opts["quant"])
        codec = gdir / CODEC_GGUF.format(quant=opts["quant"])
        if not codec.is_file():  # the tokenizer left at F32 when only the talker was quantised
            codec = gdir / CODEC_GGUF.format(quant="F32")
        self.tts = q.QwenTTS(talker, codec, cpu_threads=a["threads"])
        self.version = f"{q.__version__} (libqwen {self.tts.library.version()})"
        self.files = [talker.name, codec.name]
        self.lines: list = []
        self.tts.set_log_callback(lambda level, msg: self.lines.append(msg))

    def _kw(self) -> dict:
        a = self.a
        return dict(
            text=a["text"],
            lang=a["language"],
            speaker=a["speaker"],
            seed=0,
            max_new_tokens=a["frames"],
            do_sample=False,
            subtalker_do_sample=False,
        )

    def run(self) -> dict:
        self.lines.clear()
        t0 = time.perf_counter()
        wav, _sr = self.tts.synthesize(**self._kw())
        whole = time.perf_counter() - t0
        perf = {}
        for line in self.lines:
            for name, ms in _PERF.findall(line):
                perf[name.strip().lower()] = perf.get(name.strip().lower(), 0.0) + float(ms)
        out = {
            "frames": int(round(len(wav) / SAMPLES_PER_FRAME)),
            "samples": int(len(wav)),
            "whole_ms": 1e3 * whole,
            "perf_ms": perf,
            "log_tail": [ln.strip() for ln in self.lines if "perf" in ln.lower()][-12:],
        }
        out.update(_qwentts_stages(perf))
        t0 = time.perf_counter()
        chunks = self.tts.stream(**self._kw())
        first = next(chunks, None)
        out["ttfa_s"] = time.perf_counter() - t0
        out["first_chunk_frames"] = 0 if first is None else len(first[0]) / SAMPLES_PER_FRAME
        chunks.close()
        return out


def _qwentts_stages(perf: dict) -> dict:
    """talker / code predictor / decoder ms from its [Perf] lines (names as 4d80a09 logs)."""
    names = {
        "prefill_ms": "prefill",
        "talker_ms": "talkerdecode",
        "code_predictor_ms": "codepredictor",
        "decoder_ms": "codecdecode",
    }
    return {k: perf[n] for k, n in names.items() if n in perf}


class VoxWorker:
    def __init__(self, opts: dict, a: dict) -> None:
        import vox

        self.a = a
        path = Path(a["tmod_dir"]) / TMOD.format(quant=opts["quant"])
        self.engine = vox.Engine(str(path), threads=a["threads"])
        self.voice = self.engine.speaker_voice(a["speaker"])
        self.version = vox.__version__
        self.files = [path.name]

    def _kw(self) -> dict:
        a = self.a
        return dict(
            max_frames=a["frames"], temperature=0, sub_temperature=0, language=a["language"]
        )

    def run(self) -> dict:
        text = self.a["text"]
        before = self.engine.stats()
        t0 = time.perf_counter()
        wav = self.engine.synthesize(text, self.voice, **self._kw())
        whole = time.perf_counter() - t0
        after = self.engine.stats()
        out = {
            "frames": int(round(len(wav) / SAMPLES_PER_FRAME)),
            "samples": int(len(wav)),
            "whole_ms": 1e3 * whole,
            "stage_s": _stats_delta(before, after),
        }
        out.update(_vox_stages(out["stage_s"]))
        t0 = time.perf_counter()
        chunks = self.engine.stream(text, self.voice, **self._kw())
        first = next(iter(chunks), None)
        out["ttfa_s"] = time.perf_counter() - t0
        out["first_chunk_frames"] = 0 if first is None else len(first) / SAMPLES_PER_FRAME
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
        return out


def _stats_delta(before: dict, after: dict) -> dict:
    """Engine.stats()["backend"]["seconds"] (cumulative per stage) over one request."""
    b, a = (x.get("backend", {}).get("seconds", {}) for x in (before, after))
    return {k: v - b.get(k, 0.0) for k, v in a.items() if isinstance(v, (int, float))}


def _vox_stages(seconds: dict) -> dict:
    """talker / code predictor / decoder ms from the stage seconds of Engine.stats()."""
    names = {
        "prefill_ms": "prefill",
        "talker_ms": "talker",
        "code_predictor_ms": "predictor",
        "decoder_ms": "codec",
    }
    return {k: 1e3 * seconds[n] for k, n in names.items() if n in seconds}


def _stand_in_modules() -> None:
    """qwen_tts imports sox and torchaudio for its 25 Hz tokenizer only: empty stand-ins."""
    import importlib.machinery
    import types

    for name in ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules.setdefault(name, m)
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]


class OfficialWorker:
    def __init__(self, opts: dict, a: dict) -> None:
        import importlib.metadata

        import torch

        torch.set_num_threads(a["threads"])
        _stand_in_modules()

        from qwen_tts import Qwen3TTSModel

        self.a, self.torch = a, torch
        self.wrap = Qwen3TTSModel.from_pretrained(a["model"], device_map="cpu", dtype=torch.float32)
        self.model = self.wrap.model
        self.version = (
            f"{importlib.metadata.version('qwen-tts')} (torch {torch.__version__}, "
            f"transformers {importlib.metadata.version('transformers')})"
        )
        self.clock = {"talker": [], "code_predictor": []}
        self._hook(self.model.talker.model, "talker")
        self._hook(self.model.talker.code_predictor, "code_predictor")

    def _hook(self, module, key: str) -> None:
        start = []

        def pre(_m, _args, _kw=None):
            start.append(time.perf_counter())

        def post(_m, _args, _out, _kw=None):
            self.clock[key].append(time.perf_counter() - start.pop())

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    def run(self) -> dict:
        w, a = self.wrap, self.a
        for v in self.clock.values():
            v.clear()
        t0 = time.perf_counter()
        input_ids = w._tokenize_texts([w._build_assistant_text(a["text"])])
        kw = w._merge_generate_kwargs(
            do_sample=False, subtalker_dosample=False, max_new_tokens=a["frames"] + 1
        )
        with self.torch.inference_mode():
            codes, _ = self.model.generate(
                input_ids=input_ids,
                instruct_ids=[None],
                languages=[a["language"]],
                speakers=[a["speaker"]],
                non_streaming_mode=True,
                **kw,
            )
            t1 = time.perf_counter()
            wavs, _sr = self.model.speech_tokenizer.decode([{"audio_codes": codes[0]}])
        t2 = time.perf_counter()
        talker = self.clock["talker"]
        return {
            "frames": int(codes[0].shape[0]),
            "samples": int(len(wavs[0])),
            "prefill_ms": 1e3 * (talker[0] if talker else 0.0),
            "talker_ms": 1e3 * sum(talker[1:]),  # the first forward is the prefill
            "code_predictor_ms": 1e3 * sum(self.clock["code_predictor"]),
            "code_predictor_calls": len(self.clock["code_predictor"]),
            "decoder_ms": 1e3 * (t2 - t1),
            "whole_ms": 1e3 * (t2 - t0),
            "ttfa_s": None,
        }


WORKERS = {
    "codecspec": CodecspecWorker,
    "qwentts": QwenttsWorker,
    "vox": VoxWorker,
    "official": OfficialWorker,
}


def worker_main(spec: dict) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the runtimes print goes to the log, not into the replies
    sys.stdout = sys.stderr

    def reply(obj) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    kind, a, system = spec["kind"], spec["args"], None
    for line in sys.stdin:
        cmd = json.loads(line)["cmd"]
        try:
            if cmd == "load":
                try:
                    if kind == "official":
                        _stand_in_modules()
                    __import__(IMPORTS[kind])
                except ImportError as e:
                    reply({"ok": False, "skip": f"not installed ({INSTALL[kind]}): {e}"})
                    return
                t0 = time.perf_counter()
                system = WORKERS[kind](spec["opts"], a)
                load_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                warm = system.run()  # untimed warm-up, full length
                reply(
                    {
                        "ok": True,
                        "version": system.version,
                        "files": getattr(system, "files", None),
                        "extra": getattr(system, "extra", None),
                        "load_s": load_s,
                        "warmup_s": time.perf_counter() - t0,
                        "warmup": warm,
                    }
                )
            elif cmd == "run":
                reply({"ok": True, "run": system.run()})
            elif cmd == "rss":
                reply({"ok": True, "peak_rss_mb": _peak_rss_mb()})
            else:
                reply({"ok": True})
                return
        except Exception as e:  # noqa: BLE001 - reported to the parent, which skips the system
            reply(
                {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
            )
            return


# ---------------------------------------------------------------------------------- parent
class Worker:
    def __init__(self, name: str, python: str, spec: dict, log_path: Path) -> None:
        self.name = name
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in close()
        env = dict(os.environ)
        t = str(spec["args"]["threads"])
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[k] = t
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )

    def ask(self, cmd: str) -> dict:
        try:
            self.proc.stdin.write(json.dumps({"cmd": cmd}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return {"ok": False, "error": f"worker gone (see {self.log.name})"}
        line = self.proc.stdout.readline()
        if not line:
            return {"ok": False, "error": f"worker exited (see {self.log.name})"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask("quit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.log.close()


def mem_available_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("inf")


def cpu_simd_flags() -> list:
    try:
        from codecspec.graphs.row_probe import cpu_simd_flags as flags

        return flags()
    except ImportError:
        want = ("avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "amx_int8")
        try:
            with open("/proc/cpuinfo") as f:
                have = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
        except OSError:
            return []
        return [x for x in want if x in have]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def missing_files(kind: str, opts: dict, args) -> str | None:
    if kind == "qwentts":
        g = Path(args.gguf_dir or ".")
        t = g / TALKER_GGUF.format(quant=opts["quant"])
        if args.gguf_dir is None or not t.is_file():
            return (
                f"not converted ({t} missing: qwentts.cpp's convert.py, then "
                f"quantize ... {opts['quant']}; see the module doc; --gguf-dir DIR)"
            )
        c = [g / CODEC_GGUF.format(quant=q) for q in (opts["quant"], "F32")]
        if not any(p.is_file() for p in c):
            return f"not converted ({c[1]} missing)"
    if kind == "vox":
        p = Path(args.tmod_dir or ".") / TMOD.format(quant=opts["quant"])
        if args.tmod_dir is None or not p.is_file():
            return (
                f"not converted ({p} missing: python -m vox build --model {args.model} "
                f"--dtype bf16 --quant {opts['quant']} -o {p}; --tmod-dir DIR)"
            )
    return None


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list) -> dict:
    """Medians over rounds, per frame (ms) for the stages, seconds for TTFA."""
    out = {}
    for key in STAGES + ("prefill",):
        per = [r[f"{key}_ms"] / r["frames"] for r in runs if r.get(f"{key}_ms") is not None]
        out[f"{key}_ms_per_frame"] = median(per)
    out["prefill_ms"] = median([r.get("prefill_ms") for r in runs])
    out["ttfa_s"] = median([r.get("ttfa_s") for r in runs])
    out["frames"] = sorted({r["frames"] for r in runs})
    for k in ("acceptance_measured", "codes_per_depth_call", "draft_depth", "first_chunk_frames"):
        v = median([r.get(k) for r in runs])
        if v is not None:
            out[k] = v
    w = out["whole_ms_per_frame"]
    out["rtf"] = None if w is None else w / 80.0
    return out


def fmt(v, digits=1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def markdown_table(record: dict) -> str:
    rows = [
        "| system | version | "
        + " | ".join(STAGE_TITLES)
        + " | RTF | prefill (ms, once) | time to first audio | peak RSS |",
        "|---|---|" + "---:|" * (len(STAGES) + 4),
    ]
    for r in record["systems"].values():
        if "summary" not in r:
            continue
        s = r["summary"]
        ttfa = "—" if s["ttfa_s"] is None else f"{s['ttfa_s']:.2f} s"
        if s["ttfa_s"] is not None and s.get("first_chunk_frames"):
            ttfa += f" ({s['first_chunk_frames']:g} fr.)"
        rss = "—" if r.get("peak_rss_mb") is None else f"{r['peak_rss_mb'] / 1024:.2f} GB"
        cells = [fmt(s[f"{k}_ms_per_frame"]) for k in STAGES]
        rows.append(
            f"| {r['label']} | {r.get('version', '')} | "
            + " | ".join(cells)
            + f" | {fmt(s['rtf'], 2)} | {fmt(s.get('prefill_ms'), 0)} | {ttfa} | {rss} |"
        )
    return "\n".join(rows)


def skipped_lines(record: dict) -> list:
    return [f"- {r['label']}: {r['skip']}" for r in record["systems"].values() if "skip" in r]


def spec_note(r: dict) -> str:
    """What the speculative row measured: the whole pipeline's acceptance, and the depth
    loop alone at exactly the asked acceptance (bench API), with what that gives whole."""
    if "summary" not in r or r.get("acceptance") is None:
        return ""
    s, x = r["summary"], (r.get("extra") or {})
    text = (
        f"{r['label']}: in the whole pipeline the verifier accepted "
        f"{fmt(s.get('acceptance_measured'), 2)} of the drafts "
        f"({fmt(s.get('codes_per_depth_call'), 2)} codes per depth call, a chain of "
        f"{fmt(s.get('draft_depth'), 0)} drafts)"
    )
    if x.get("truth_reproduced") is False:
        text += (
            " — below the asked acceptance: on this CPU the verify rows round unlike the AR "
            "rows (`codecspec calibrate` measures it), the speculative run leaves the frames the "
            "drafts know (random weights' flat logits tie often), and after that nothing is "
            f"accepted ({x.get('truth_tries')} tries to follow its own frames did not settle)"
        )
    d = x.get("depth_at_acceptance")
    if d:
        text += (
            f". The depth loop alone at exactly {r['acceptance']} (`controlled_depth_run`, "
            f"each frame's drafts right about its own greedy codes; {d['frames']} frames, AR "
            f"and speculative interleaved): {d['ar_ms_per_frame']:.1f} ms AR → "
            f"{d['spec_ms_per_frame']:.1f} ms speculative per frame ({d['speedup']:.2f}×, "
            f"acceptance {d['acceptance_measured']:.2f}, {d['codes_per_call']:.2f} codes per "
            "call)"
        )
    return text + ".\n"


PEER_NOTES = (
    "- **codecspec** (this repository): `Qwen3TTS.load(DIR, threads=2, weights=...)`, "
    "`generate_codes(text, speaker=, language=, temperature=0, max_frames=N)` then "
    "`waveform()`; stages from the result's `.seconds` and the decoder call; TTFA from "
    '`stream()` (first chunk one frame). The speculative row: `mode="spec"` with '
    "`SequencedDrafts` (what `codecspec bench --acceptance A` runs end to end): drafts right "
    "with probability A about the frames of one greedy AR run of the same request, real "
    "verification (random weights accept nothing by themselves; the paper's acceptance for "
    "the 0.6B is 0.61); the acceptance the run actually got is measured and shown below the "
    "table.",
    "- **qwentts.cpp** (ggml) through PyPI `realtimetts-qwen-native-cpu` 0.4.2 (import "
    "`qwentts_cpp_cpu`, libqwen 4d80a09). GGUF files from the upstream "
    "(github.com/ServeurpersoCom/qwentts.cpp) `convert.py` (safetensors → F32; torch, "
    "safetensors, gguf) and `tools/quantize.cpp` (built against ggml's headers and the "
    "wheel's libggml-base), Q8_0 and Q4_K_M for the talker and the tokenizer alike. A "
    "random folder's speech_tokenizer/config.json lacks three decoder keys convert.py reads "
    "(num_semantic_quantizers 1, layer_scale_initial_scale 0.01, "
    "vector_quantization_hidden_dimension 512: the class defaults), added in a copy. Length: "
    "`synthesize(max_new_tokens=N, do_sample=False, subtalker_do_sample=False)`, "
    "`cpu_threads=2`; stages from its `[Perf]` log lines (TalkerDecode, CodePredictor, "
    "CodecDecode); TTFA from `stream()` (first chunk one frame).",
    "- **vox-tts** 0.19.5 (`pip install vox-tts`, native C++): its own converter `python -m "
    "vox build --model DIR --dtype bf16 --quant q8|q4` (numpy only). It refuses a text "
    'tokenizer in which "assistant" is not one token; the random BPE splits it (ass + '
    'istant), so it converts a copy of the folder whose last merge is replaced by "ass '
    'istant" (that merge\'s vocab id renamed "assistant"): the text\'s tokens are the '
    "same, the prompt's role line one position shorter (vox also always uses the "
    "streaming-text prompt). Length: `synthesize(max_frames=N, temperature=0, "
    "sub_temperature=0)`, `Engine(M, threads=2)`; stages from `Engine.stats()`; TTFA from "
    "`stream()` (first chunk four frames).",
    "- **official** `qwen-tts` 0.1.1 on PyTorch float32 (`pip install torch "
    "transformers==4.57.3 accelerate einops librosa soundfile onnxruntime` and `pip install "
    "qwen-tts==0.1.1 --no-deps`): `from_pretrained(DIR, dtype=torch.float32)`, "
    "`generate(..., do_sample=False, subtalker_dosample=False, max_new_tokens=N+1)` (its loop "
    "returns one frame fewer than tokens); stages from forward hooks; no streaming.",
    "",
    "`python bench/qwen3_peers.py DIR --prepare OUT` makes the two folder copies and prints "
    "the conversion commands; the script's docstring has the details.",
)


def docs_section(record: dict, plot: str | None, docs: Path, tag: str | None = None) -> str:
    m = record["machine"]
    rounds = record["rounds"]
    begin, end = docs_markers(tag)
    where = f", {tag}" if tag else ""
    lines = [
        begin,
        f"## Side by side with the CPU runtimes people pick ({record['date'][:10]}{where})",
        "",
        f"`bench/qwen3_peers.py` on {m['cpu']} ({m['cores']} cores; SIMD: "
        f"{', '.join(m['simd']) or 'none listed'}), {record['model_note']}: the text "
        f'"{record["text"]}", speaker {record["speaker"]}, {record["language"]}, exactly '
        f"{record['frames']} frames, greedy, {record['threads']} threads each; every system "
        "in its own long-lived worker (peak RSS is its own), one untimed warm-up, the systems "
        f"interleaved over {rounds} round{'s' if rounds != 1 else ''} with the order rotated; "
        "medians in ms per 80 ms frame. Whole = text → whole waveform (not streamed) ÷ "
        "frames, the prefill and the host work included; time to first audio from a second, "
        "streamed request (warm), with the first chunk's length.",
        "",
        markdown_table(record),
        "",
    ]
    notes = skipped_lines(record)
    if notes:
        lines += ["Not in this run:", *notes, ""]
    lines += [spec_note(r) for r in record["systems"].values() if spec_note(r)]
    lines += ["How each system was installed, converted and held to the length:", ""]
    lines += list(PEER_NOTES)
    lines += ["", f"Command: `{record['command']}`"]
    if plot:
        rel = os.path.relpath(os.path.abspath(plot), os.path.abspath(docs.parent))
        lines += ["", f"![side by side]({rel})"]
    lines.append(end)
    return "\n".join(lines) + "\n"


def write_docs(path: Path, section: str, tag: str | None = None) -> None:
    begin, end = docs_markers(tag)
    text = path.read_text() if path.is_file() else "# Performance notes\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def plot(record: dict, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib not installed (pip install matplotlib); skipped")
        return None
    rows = [r for r in record["systems"].values() if "summary" in r]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    left = [0.0] * len(rows)
    labels = [r["label"] for r in rows]
    for key, title in [("prefill", "prefill (÷ frames)"), *zip(STAGES[:3], STAGE_TITLES[:3])]:
        vals = [r["summary"][f"{key}_ms_per_frame"] or 0.0 for r in rows]
        ax.barh(labels, vals, left=left, label=title)
        left = [a + b for a, b in zip(left, vals)]
    whole = [r["summary"]["whole_ms_per_frame"] or 0.0 for r in rows]
    ax.scatter(whole, labels, marker="|", s=300, color="black", label="whole", zorder=3)
    ax.axvline(80.0, color="grey", linestyle="--", linewidth=1, label="real time (80 ms)")
    ax.invert_yaxis()
    ax.set_xlabel("ms per 80 ms frame (medians)")
    m = record["machine"]
    ax.set_title(
        f"Qwen3-TTS 0.6B, {record['frames']} frames, {record['threads']} threads, "
        f"{m['cores']} cores ({', '.join(m['simd'])})",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# The decoder_config keys qwentts.cpp's convert.py reads that a random folder leaves to the
# official class defaults (the released tokenizer's config.json has them).
TOKENIZER_DEFAULTS = {
    "num_semantic_quantizers": 1,
    "layer_scale_initial_scale": 0.01,
    "vector_quantization_hidden_dimension": 512,
}


def _link_all(src: Path, dst: Path, skip=()) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in skip and not (dst / f.name).exists():
            (dst / f.name).symlink_to(f.resolve())


def prepare(model: Path, out: Path) -> None:
    """The folders the peers' converters read (module doc), then their commands."""
    model, out = model.resolve(), out.resolve()
    # qwentts.cpp: checkpoints/<name> as its convert.py looks for them
    ck = out / "qwentts" / "checkpoints"
    ck.mkdir(parents=True, exist_ok=True)
    talker = ck / "Qwen3-TTS-12Hz-0.6B-CustomVoice"
    if not talker.exists():
        talker.symlink_to(model)
    tok = ck / "Qwen3-TTS-Tokenizer-12Hz"
    _link_all(model / "speech_tokenizer", tok, skip=("config.json",))
    cfg = json.loads((model / "speech_tokenizer" / "config.json").read_text())
    for k, v in TOKENIZER_DEFAULTS.items():
        cfg["decoder_config"].setdefault(k, v)
    (tok / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    # vox-tts: "assistant" one token of the text tokenizer
    vox_dir = out / "vox-folder"
    _link_all(model, vox_dir, skip=("vocab.json", "merges.txt"))
    vocab = json.loads((model / "vocab.json").read_text())
    merges = (model / "merges.txt").read_text().rstrip("\n").split("\n")
    if "assistant" not in vocab:
        a, b = merges[-1].split(" ")
        vocab["assistant"] = vocab.pop(a + b)
        merges[-1] = "ass istant"
        if not {"ass", "istant"} <= set(vocab):
            print("vox: 'ass' / 'istant' are not tokens of this vocabulary; edit by hand")
    (vox_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (vox_dir / "merges.txt").write_text("\n".join(merges) + "\n")
    q = "ServeurpersoCom/qwentts.cpp"
    print(
        f"""made {ck} and {vox_dir}. Then:
  # qwentts.cpp: convert.py and tools/quantize.cpp from github.com/{q} (not in the wheel)
  cd {out / "qwentts"} && python convert.py      # torch, safetensors, gguf; writes models/*-F32
  g++ -O2 -std=c++17 -I<ggml>/include -I<qwentts.cpp>/src <qwentts.cpp>/tools/quantize.cpp \\
      -L<wheel>/qwentts_cpp_cpu/lib -l:libggml-base.so.0 -l:libggml.so.0 -o quantize
  for q in Q8_0 Q4_K_M; do for m in qwen-talker-0.6b-customvoice qwen-tokenizer-12hz; do
      ./quantize models/$m-F32.gguf models/$m-$q.gguf $q; done; done   # --gguf-dir models
  # vox-tts
  for q in q8 q4; do python -m vox build --model {vox_dir} --dtype bf16 --quant $q \\
      -o {out}/{TMOD.format(quant="$q")}; done                          # --tmod-dir {out}"""
    )


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("model", help="Qwen3-TTS 0.6B CustomVoice folder (random weights will do)")
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"of {', '.join(SYSTEMS)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--text", default=TEXT)
    p.add_argument("--speaker", default=SPEAKER)
    p.add_argument("--language", default=LANGUAGE)
    p.add_argument("--gguf-dir", help=f"qwentts.cpp GGUF files ({TALKER_GGUF}, {CODEC_GGUF})")
    p.add_argument("--tmod-dir", help=f"vox-tts models ({TMOD})")
    p.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="KIND=PATH",
        help="interpreter for a kind's workers (codecspec, qwentts, vox, official)",
    )
    p.add_argument(
        "--draft-depth",
        type=int,
        default=None,
        help="spec rows: drafts per round, a chain (default: what `codecspec bench` chooses here)",
    )
    p.add_argument("--min-free-gb", type=float, default=1.5)
    p.add_argument("--json", help="write the record here")
    p.add_argument("--plot", help="write a bar chart here (needs matplotlib)")
    p.add_argument(
        "--write-docs",
        nargs="?",
        const="docs/performance.md",
        help="write the table into this markdown file's section (default docs/performance.md)",
    )
    p.add_argument(
        "--docs-tag",
        default=None,
        help="with --write-docs: a section of its own for this machine (e.g. avx512), beside "
        "the untagged one instead of replacing it",
    )
    p.add_argument("--logs", default=None, help="worker logs here (default: a temp folder)")
    p.add_argument(
        "--prepare",
        metavar="OUT",
        help="make the folders the peers' converters read under OUT, print their commands, exit",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prepare:
        prepare(Path(args.model), Path(args.prepare))
        return 0
    pythons = {"codecspec": sys.executable}
    for item in args.python:
        kind, _, path = item.partition("=")
        if kind not in INSTALL or not path:
            raise SystemExit(f"--python: expected KIND=PATH with KIND of {list(INSTALL)}")
        pythons[kind] = path
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; known: {list(SYSTEMS)}")
    import tempfile

    logs = Path(args.logs or tempfile.mkdtemp(prefix="qwen3_peers_"))
    logs.mkdir(parents=True, exist_ok=True)
    shared = {
        "model": str(Path(args.model).resolve()),
        "text": args.text,
        "speaker": args.speaker,
        "language": args.language,
        "frames": args.frames,
        "threads": args.threads,
        "gguf_dir": args.gguf_dir,
        "tmod_dir": args.tmod_dir,
        "draft_depth": args.draft_depth,
    }
    record = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # the home folder as ~: the command lands in docs, which name no machine's paths
        "command": "python bench/qwen3_peers.py "
        + " ".join(sys.argv[1:] if argv is None else argv).replace(str(Path.home()), "~"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "simd": cpu_simd_flags()},
        "model": shared["model"],
        "model_note": "one random-weight 0.6B CustomVoice folder "
        "(`codecspec random-checkpoint qwen3-0.6b`)",
        **{k: shared[k] for k in ("text", "speaker", "language", "frames", "threads")},
        "rounds": args.rounds,
        "systems": {},
    }
    workers: dict = {}
    out_of_memory = False
    for name in names:
        kind, opts, label = SYSTEMS[name]
        entry = record["systems"][name] = {"label": label, "kind": kind, **opts}
        why = missing_files(kind, opts, args)
        if why is None and out_of_memory:
            why = f"skipped: less than {args.min_free_gb} GB of memory left"
        if why is not None:
            entry["skip"] = why
            print(f"{label}: {why}", flush=True)
            continue
        spec = {"kind": kind, "opts": opts, "args": shared}
        w = Worker(name, pythons.get(kind, sys.executable), spec, logs / f"{name}.log")
        print(f"{label}: loading and warming up ...", flush=True)
        reply = w.ask("load")
        if not reply.get("ok"):
            entry["skip"] = reply.get("skip") or f"failed: {reply.get('error')}"
            if reply.get("trace"):
                entry["trace"] = reply["trace"]
            print(f"{label}: {entry['skip']}", flush=True)
            w.close()
            continue
        keys = ("version", "files", "load_s", "warmup_s", "extra")
        entry.update({k: reply.get(k) for k in keys if reply.get(k) is not None})
        entry["warmup"] = reply.get("warmup")
        print(
            f"{label}: {entry['version']}, load {reply['load_s']:.1f} s, warm-up "
            f"{reply['warmup_s']:.1f} s ({reply['warmup']['frames']} frames)",
            flush=True,
        )
        workers[name] = w
        if mem_available_gb() < args.min_free_gb:
            out_of_memory = True
    runs = {n: [] for n in workers}
    order = list(workers)
    for r in range(args.rounds):
        if args.json and r:  # what the finished rounds gave, should the run be cut short
            Path(args.json + ".partial").write_text(json.dumps({**record, "runs": runs}) + "\n")
        k = r % max(len(order), 1)
        for name in order[k:] + order[:k]:
            if name not in workers:
                continue
            reply = workers[name].ask("run")
            if not reply.get("ok"):
                record["systems"][name]["skip"] = f"failed in round {r}: {reply.get('error')}"
                print(f"{name}: {record['systems'][name]['skip']}", flush=True)
                workers.pop(name).close()
                continue
            run = reply["run"]
            runs[name].append(run)
            print(
                f"round {r + 1}/{args.rounds} {name}: {run['frames']} frames, whole "
                f"{run['whole_ms'] / max(run['frames'], 1):.1f} ms/frame, TTFA "
                f"{fmt(run.get('ttfa_s'), 2)} s",
                flush=True,
            )
    for name, w in workers.items():
        reply = w.ask("rss")
        record["systems"][name]["peak_rss_mb"] = reply.get("peak_rss_mb")
        w.close()
        entry = record["systems"][name]
        entry["runs"] = runs[name]
        if runs[name]:
            entry["summary"] = summarise(runs[name])
            if args.frames not in entry["summary"]["frames"]:
                entry["frames_note"] = f"made {entry['summary']['frames']}, not {args.frames}"
    table = markdown_table(record)
    print()
    print(
        f"CPU: {record['machine']['cpu']}, {record['machine']['cores']} cores, SIMD: "
        f"{' '.join(record['machine']['simd'])}"
    )
    print(
        f"{args.frames} frames, {args.threads} threads, medians of {args.rounds} rounds, "
        "ms per 80 ms frame"
    )
    print(table)
    for line in skipped_lines(record):
        print(line)
    for r in record["systems"].values():
        if spec_note(r):
            print(spec_note(r), end="")
    png = plot(record, args.plot) if args.plot else None
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        Path(args.json + ".partial").unlink(missing_ok=True)
    if args.write_docs:
        docs = Path(args.write_docs)
        write_docs(docs, docs_section(record, png, docs, args.docs_tag), args.docs_tag)
        print(f"wrote the section of {args.write_docs}")
    print(f"worker logs: {logs}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker_main(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
