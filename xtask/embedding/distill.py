"""Distils a BERT sentence encoder (safetensors + tokenizer.json) into a static model2vec model.

Used by `cargo xtask embedding`. Each vocabulary token is encoded alone (`[CLS] token [SEP]`)
by the transformer, its output mean-pooled (the encoder's own pooling), the vectors reduced by
PCA and weighted down by the token's frequency rank (smooth inverse frequency), as model2vec
does. Writes OUT/model.safetensors (one float32 tensor `embeddings`) and OUT/tokenizer.json
(without padding or truncation).
Needs numpy only. Usage: distill.py MODEL_DIR OUT_DIR [PCA_DIMS]
"""

import json
import math
import os
import struct
import sys

# One BLAS thread: the matrices are small, and spinning worker threads on a busy machine made it
# ten times slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=kinds[meta["dtype"]]).reshape(meta["shape"])
    return out


def layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def encode(t, config, ids):
    """Mean-pooled last hidden states of the sequences `ids` ([batch, length], no padding)."""
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    hd = hidden // heads
    batch, length = ids.shape
    x = t["embeddings.word_embeddings.weight"][ids]
    x = x + t["embeddings.position_embeddings.weight"][:length][None]
    x = x + t["embeddings.token_type_embeddings.weight"][0][None, None]
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(h, name):
            return h @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        q = lin(x, "attention.self.query").reshape(batch, length, heads, hd).transpose(0, 2, 1, 3)
        k = lin(x, "attention.self.key").reshape(batch, length, heads, hd).transpose(0, 2, 1, 3)
        v = lin(x, "attention.self.value").reshape(batch, length, heads, hd).transpose(0, 2, 1, 3)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        x = layer_norm(x + lin(a, "attention.output.dense"), t[p + "attention.output.LayerNorm.weight"],
                       t[p + "attention.output.LayerNorm.bias"])
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"])
    return x.mean(1)


def main():
    src, out = sys.argv[1], sys.argv[2]
    pca_dims = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    config = json.load(open(f"{src}/config.json"))
    tok = json.load(open(f"{src}/tokenizer.json"))
    vocab = tok["model"]["vocab"]
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    t = {k: v.astype(np.float32) if v.dtype == np.float32 else v for k, v in read_safetensors(f"{src}/model.safetensors").items()}
    t = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in t.items()}
    n = len(vocab)
    vectors = np.zeros((n, config["hidden_size"]), dtype=np.float32)
    step = 2048
    for start in range(0, n, step):
        ids = np.arange(start, min(n, start + step))
        seq = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        vectors[start:start + len(ids)] = encode(t, config, seq)
        print(f"\r{start + len(ids)}/{n} tokens", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    # PCA: centre, rotate onto the principal axes, keep the first `pca_dims`.
    centred = vectors - vectors.mean(0)
    eigval, eigvec = np.linalg.eigh(np.cov(centred, rowvar=False))
    order = np.argsort(eigval)[::-1][:pca_dims]
    reduced = centred @ eigvec[:, order]
    # Smooth inverse frequency by rank (a BERT vocabulary lists words by frequency): frequent
    # tokens weigh less in a text's mean.
    rank = np.arange(1, n + 1, dtype=np.float64)
    p = (1.0 / rank) / (1.0 / rank).sum()
    reduced *= (1e-3 / (1e-3 + p))[:, None]
    reduced = reduced.astype(np.float32)
    body = reduced.tobytes()
    header = json.dumps({"embeddings": {"dtype": "F32", "shape": list(reduced.shape), "data_offsets": [0, len(body)]}})
    header += " " * ((8 - len(header) % 8) % 8)
    with open(f"{out}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header.encode())
        f.write(body)
    # The encoder's tokenizer pads to and cuts at a fixed length; a static model averages only
    # the text's own tokens, whatever its length.
    tok["padding"] = None
    tok["truncation"] = None
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    print(f"{n} x {reduced.shape[1]} -> {out}/model.safetensors", file=sys.stderr)


if __name__ == "__main__":
    main()
