"""A tiny depth-decoder configuration shared by the training and calibration tests."""

from codecspec.graphs import DepthDecoderConfig, cpu_variant_supported

TINY = DepthDecoderConfig(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    num_codebooks=8,
    codebook_size=128,
    c0_vocab_size=128,
    num_draft_offsets=3,
    max_positions=16,
)
VARIANT = "cpu" if cpu_variant_supported() else "plain"


# ---------------------------------------------------------------------- reference model v2
V2_ROWS = [  # a tiny manifest: two languages, two speakers, phonemes from espeak-ng's IPA
    {"id": "a", "phonemes": "həlˈoʊ wˈɜːld", "language": "en", "variant": "f1", "split": "train"},
    {"id": "b", "phonemes": "ðɪs ɪz ɐ tˈɛst", "language": "en", "variant": "m1", "split": "train"},
    {"id": "c", "phonemes": "ɡuːtn tˈaːk", "language": "de", "variant": "f1", "split": "train"},
    {"id": "d", "phonemes": "vˈɪɹi ɡˈʊd", "language": "en", "variant": "m1", "split": "test"},
]
V2_LEVELS = 16  # codec v2 levels (TTSDataset's default), so the depth decoder predicts 15
V2_CODES = 32  # codes per level: c0 vocabulary = depth codebook size


def tiny_v2_configs(frontend=None, window: int = 4, **temporal):
    """(V2TemporalConfig, DepthDecoderConfig) a 2-core CPU trains and exports in seconds;
    `frontend` sets the table sizes (default: the one `V2_ROWS` gives)."""
    from codecspec.families.v2.torch_model import V2TemporalConfig
    from codecspec.frontend.text import Frontend
    from codecspec.graphs import small_depth

    fe = frontend or Frontend.from_manifest(V2_ROWS)
    base = dict(
        vocab_size=len(fe.vocab),
        num_languages=len(fe.languages),
        num_speakers=len(fe.speakers),
        c0_vocab_size=V2_CODES,
        d_model=32,
        num_heads=2,
        ff_size=64,
        encoder_layers=1,
        decoder_layers=2,
        draft_layers=1,
        fourier_bands=4,
        window=window,
        dropout=0.0,
    )
    base.update(temporal)
    dcfg = small_depth(
        num_layers=1,
        hidden_size=32,
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        intermediate_size=64,
        num_codebooks=V2_LEVELS,
        codebook_size=V2_CODES,
        c0_vocab_size=V2_CODES,
        num_draft_offsets=2,
        max_positions=V2_LEVELS + 4,
    )
    return V2TemporalConfig(**base), dcfg


def tiny_v2_model(
    window: int = 4,
    stop_bias=None,
    seed: int = 0,
    frontend=None,
    logit_scale: float = 1.0,
    **temporal,
):
    """An untrained tiny `V2Model` (eval mode; the same weights for the same seed).
    `stop_bias` (if given) sets the target and draft stop heads' bias; `logit_scale` scales
    the c0 heads and the depth heads (peaked laws give statistical tests their power)."""
    import torch

    from codecspec.families.v2.torch_model import V2Model

    tcfg, dcfg = tiny_v2_configs(frontend, window=window, **temporal)
    torch.manual_seed(seed)
    model = V2Model(tcfg, dcfg).eval()
    if stop_bias is not None:
        with torch.no_grad():
            for dec in (model.temporal.decoder, model.temporal.draft):
                dec.stop_head.bias.fill_(float(stop_bias))
    if logit_scale != 1.0:
        with torch.no_grad():
            for dec in (model.temporal.decoder, model.temporal.draft):
                dec.c0_head.weight.mul_(logit_scale)
            model.depth.heads.mul_(logit_scale)
    return model


def export_v2_graphs(model, out) -> None:
    """The graphs of a v2-runtime folder (v2 or aligned v3): encoder and step graphs, the
    float32 depth graph with its bf16-exact heads, the unit c0 input embeddings."""
    import numpy as np

    from codecspec.families.v2.torch_model import export_onnx
    from codecspec.graphs import build_depth_graph, save_model
    from codecspec.graphs.storage import round_bf16_exact
    from codecspec.train.networks import depth_weights

    export_onnx(model.temporal, out)
    w = depth_weights(model.depth)
    w["heads"] = round_bf16_exact(w["heads"], "heads")
    graph = build_depth_graph(model.depth.c, w, variant=VARIANT, heads="hidden")
    save_model(graph, out / "depth.onnx")
    np.save(out / "depth.heads.npy", w["heads"].astype(np.float16))
    emb = model.temporal.c0_in.weight.detach().numpy()[:-1]
    np.save(out / "c0_embeddings.npy", emb / np.linalg.norm(emb, axis=1, keepdims=True))


def tiny_v2_folder(
    path, window: int = 4, stop_bias=None, seed: int = 0, logit_scale: float = 1.0, **temporal
):
    """Writes an untrained tiny v2 model folder (`codecspec.families.v2.model.V2_FILES`, float32
    graphs; the weights of `tiny_v2_model(window, stop_bias, seed, **temporal)`) to `path` and
    returns it. A very high `stop_bias` stops after the first frame, a very low one never stops;
    `temporal` overrides `V2TemporalConfig` fields (e.g. decoder_layers)."""
    import json
    from pathlib import Path

    import numpy as np

    from codecspec.codec.codec import CodecConfig
    from codecspec.families.v2.codec import CodecV2, V2Config
    from codecspec.families.v2.model import V2_FORMAT
    from codecspec.frontend.text import Frontend

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    fe = Frontend.from_manifest(V2_ROWS)
    model = tiny_v2_model(window, stop_bias, seed, fe, logit_scale, **temporal)
    tcfg, dcfg = model.temporal.cfg, model.depth.c
    export_v2_graphs(model, out)
    # codec v2 with the depth decoder's shape: 16 levels of 4 x 8 = 32 codes
    ccfg = V2Config.blocks(grid=(4, 8), n_levels=V2_LEVELS, bins="uniform")
    spectral = CodecConfig()
    rng = np.random.default_rng(seed)
    feats = rng.standard_normal((4 * V2_CODES, spectral.feature_dim)).astype(np.float32)
    CodecV2.fit(feats, ccfg, spectral, iters=1).save(out / "codec_v2.npz")
    meta = {
        "format": V2_FORMAT,
        "frontend": fe.to_dict(),
        "sampling": {"temperature": 0.9, "top_k": 50, "top_p": 1.0},
        "voices": {"en": "en-us", "de": "de"},
        "default_speaker": fe.speakers.names[0],
        "frames_per_phoneme": {"en": 1.5, "de": 1.5},
        "max_pace": 2.0,
        "temporal_config": tcfg.to_dict(),
        "depth_config": dcfg.to_dict(),
    }
    (out / "model.json").write_text(json.dumps(meta, indent=1))
    return out


# A depth decoder small enough to check in its weights: the Qwen3 code-predictor semantics of
# the torch DepthModel, kept as golden outputs for the torch-free graph-builder test.
GOLDEN_DEPTH = DepthDecoderConfig(
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    intermediate_size=48,
    num_codebooks=4,
    codebook_size=16,
    c0_vocab_size=16,
    num_draft_offsets=2,
    max_positions=8,
)


def write_depth_golden(path, seed: int = 0):
    """The torch `DepthModel(GOLDEN_DEPTH)`'s teacher-forced logits on 3 frames with its
    weights under codecspec's names ("w:<name>"), non-trivial norms so a dropped norm shows
    (tests/data/depth_golden.npz)."""
    import numpy as np
    import torch

    from codecspec.train.networks import DepthModel, depth_weights

    torch.manual_seed(seed)
    m = DepthModel(GOLDEN_DEPTH).eval()
    with torch.no_grad():
        for layer in m.layers:
            for n in (layer.input_norm, layer.q_norm, layer.k_norm, layer.post_norm):
                n.weight.uniform_(0.5, 1.5)
    G = GOLDEN_DEPTH.num_codebooks
    hidden = torch.randn(3, GOLDEN_DEPTH.hidden_size)
    codes = torch.randint(0, GOLDEN_DEPTH.codebook_size, (3, G))
    with torch.no_grad():
        logits = m(hidden, codes).numpy()  # [3, G-1, V]
    out = {f"w:{k}": np.asarray(v) for k, v in depth_weights(m).items()}
    out.update(hidden=hidden.numpy(), codes=codes.numpy(), logits=logits)
    np.savez_compressed(path, **out)
    return path


V2_GOLDEN_WINDOW = 4  # tests/data/tiny_v2's
V2_GOLDEN_FRAMES = (
    2 * (V2_GOLDEN_WINDOW + 8) + 3
)  # past the ring capacity (W + CACHE_SLACK 8) twice


def write_v2_golden(path, seed: int = 3):
    """The torch teacher-forced outputs of tests/data/tiny_v2's model (the weights
    `tiny_v2_model(4, -50.0, 0, logit_scale=6.0)`) on one utterance, windowed and with full
    attention, and the utterance's inputs: what the torch-free step-graph tests compare the
    checked-in graphs with (tests/data/tiny_v2_golden.npz)."""
    import dataclasses

    import numpy as np
    import torch

    from codecspec.families.v2.torch_model import V2Model
    from codecspec.frontend.text import Frontend

    fe = Frontend.from_manifest(V2_ROWS)
    model = tiny_v2_model(V2_GOLDEN_WINDOW, -50.0, 0, fe, 6.0)
    cfg, T, P = model.temporal.cfg, V2_GOLDEN_FRAMES, 9
    full = V2Model(dataclasses.replace(cfg, window=T), model.depth.c).eval()
    full.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(seed)
    b = {
        "phonemes": torch.randint(4, cfg.vocab_size, (1, P), generator=gen),
        "phoneme_lengths": torch.tensor([P]),
        "language": torch.tensor([0]),
        "speaker": torch.tensor([1]),
        "c0": torch.randint(0, cfg.c0_vocab_size, (1, T), generator=gen),
        "frames_per_phoneme": torch.tensor([1.3]),
    }
    args = [b[k] for k in ("phonemes", "phoneme_lengths", "language", "speaker", "c0")]
    with torch.no_grad():
        h, logits, stop, d_logits, d_stop, *_ = model.temporal(*args, b["frames_per_phoneme"])
        _, logits_full, *_ = full.temporal(*args, b["frames_per_phoneme"])
    out = {k: v.numpy() for k, v in b.items()}
    outs = dict(h=h, logits=logits, stop=stop, draft_logits=d_logits, draft_stop=d_stop)
    out.update({k: v.numpy() for k, v in outs.items()}, logits_full=logits_full.numpy())
    np.savez_compressed(path, **out)
    return path


if __name__ == "__main__":  # rewrite the checked-in fixture: python tests/tiny_models.py
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    data = Path(__file__).parent / "data"
    tiny_v2_folder(data / "tiny_v2", stop_bias=-50.0, logit_scale=6.0)
    write_v2_golden(data / "tiny_v2_golden.npz")
    write_depth_golden(data / "depth_golden.npz")
    # 16 decoder layers: 4 KiB of K/V a frame, so a cache that kept its history would grow
    # RSS far above the loop's own ~0.6 KiB a frame (test_v2_runtime's constant-memory test)
    tiny_v2_folder(data / "tiny_v2_deep", stop_bias=-50.0, logit_scale=6.0, decoder_layers=16)


def add_codebook_tied_shared(folder, scale: float = 0.3, seed: int = 0, dim: int = 8) -> None:
    """A v2-format `folder` (copied fixture) plus a random shared depth decoder tied to RVQ
    codebooks, as v3's shipped one is: the codebooks go to codec.npz (read by the shared
    decoder only; a fixture keeps decoding audio with its own codec file)."""
    import json
    from pathlib import Path

    import numpy as np

    from codecspec.graphs.shared import save_shared, shared_shapes

    folder = Path(folder)
    meta = json.loads((folder / "model.json").read_text())
    cfg = DepthDecoderConfig.from_dict(meta["depth_config"])
    rng = np.random.default_rng(seed)
    cb = rng.standard_normal((cfg.num_codebooks, cfg.codebook_size, dim)).astype(np.float16)
    np.savez(folder / "codec.npz", codebooks=cb)
    tie = {"codebook_features": dim + 1, "per_level_head": True}
    arrays = {
        k: (scale * rng.standard_normal(shape)).astype(np.float32)
        for k, shape in shared_shapes(cfg, True, True, **tie).items()
    }
    save_shared(
        folder / "depth_shared.npz", cfg, arrays, share_c0=True, level_embeddings=True,
        codebooks=cb.astype(np.float32), per_level_head=True,
    )  # fmt: skip
