"""GGUF files (llama.cpp's format): a model's shape and each weight's stored size, torch-free.

A GGUF file is a header (magic ``GGUF``, version, tensor and key-value counts), typed key-value
metadata (``llama.block_count``, ``tokenizer.ggml.tokens``, ...), one record per tensor (name,
dimensions innermost first, type, offset) and the tensor data, aligned to ``general.alignment``
(32 bytes by default). The layout is that of the GGUF specification (ggml's ``docs/gguf.md``);
this reader walks it with :mod:`struct` over a memory map, so a 49k-token vocabulary costs
milliseconds (``gguf.GGUFReader`` builds a numpy view per array element: seconds).

Each tensor type stores ``block_size`` weights in ``type_size`` bytes, scales included: Q4_1 keeps
32 weights in 20 bytes (16 bytes of 4-bit values, an fp16 scale and an fp16 minimum), Q8_0 32 in 34.
The sizes are the gguf package's ``GGML_QUANT_SIZES`` (gguf-py/gguf/constants.py, ggml's table), so
every type llama.cpp writes is sized here, and a type id it does not list is refused.

:func:`spec_fields` reads a Llama-architecture file into the fields of a :class:`~sim.model_spec.ModelSpec`
(``sim.model_spec.spec_from_gguf`` builds it), whose ``weight_formats`` say how each step-graph
operator's weights are stored; the real path (``real.model.gguf``) dequantizes the same tensors into
its torch model.
"""

from __future__ import annotations

import mmap
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from hwmodels.errors import HetSpecError, PresetError
from sim.model_fields import field_float, field_int

GGUF_MAGIC = b"GGUF"
#: Versions with 64-bit counts and lengths (version 1 used 32-bit ones and is no longer written).
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

#: Metadata value types of the GGUF specification: id -> struct format (8: string, 9: array).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

#: The Llama tensors outside the layers: GGUF name -> (Hugging Face name, step-graph operator).
GLOBAL_TENSORS = {
    "token_embd.weight": ("model.embed_tokens.weight", "embed"),
    "output_norm.weight": ("model.norm.weight", "final_norm"),
    "output.weight": ("lm_head.weight", "lm_head"),
}
#: Per layer: ``blk.{i}.<role>.weight`` -> (``model.layers.{i}.<HF role>.weight``, step-graph operator).
LAYER_TENSORS = {
    "attn_norm": ("input_layernorm", "attn_norm"),
    "attn_q": ("self_attn.q_proj", "q_proj"),
    "attn_k": ("self_attn.k_proj", "k_proj"),
    "attn_v": ("self_attn.v_proj", "v_proj"),
    "attn_output": ("self_attn.o_proj", "o_proj"),
    "ffn_norm": ("post_attention_layernorm", "mlp_norm"),
    "ffn_gate": ("mlp.gate_proj", "gate_proj"),
    "ffn_up": ("mlp.up_proj", "up_proj"),
    "ffn_down": ("mlp.down_proj", "down_proj"),
}
#: Derived tensors some converters write (Llama 3's RoPE frequency factors): the simulator ignores
#: them; the real path refuses them (its RoPE variants come from config parameters).
IGNORED_TENSORS = ("rope_freqs.weight",)

#: Compute dtype of a spec read from GGUF: the weights are priced as stored (``weight_formats``),
#: activations and the KV cache at this dtype, fp16 as llama.cpp's GPU back-ends keep them, unless
#: the file's projections are all F32 or BF16.
_PLAIN_DTYPES = {"F32": "fp32", "BF16": "bf16"}


@dataclass(frozen=True)
class WeightFormat:
    """The stored weights of one step-graph operator over all its instances (e.g. every layer's
    ``q_proj``): their type name (a GGUF tensor type, ``Q4_1``; several joined by ``+`` when layers
    differ), how many weights and how many bytes, block scales included."""

    op: str
    type: str
    elements: int
    stored_bytes: int

    @property
    def bytes_per_weight(self) -> float:
        return self.stored_bytes / self.elements


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    type: str               # GGML type name: F32, F16, Q8_0, Q4_1, ...
    dims: tuple[int, ...]   # innermost first, as stored (numpy / torch shape is reversed)
    offset: int             # of its data in the file
    n_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    metadata: dict = field(repr=False)
    tensors: dict = field(repr=False)    # name -> GGUFTensor, in file order

    def value(self, key: str, kind: type | tuple = (int,), default=None, required: bool = True):
        """Metadata value ``key`` of type ``kind`` (one line naming the file and the key otherwise)."""
        if key not in self.metadata:
            if required and default is None:
                raise PresetError(str(self.path), key, "missing field")
            return default
        value = self.metadata[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            raise PresetError(str(self.path), key, f"expected {_kind_name(kind)}, got {_short(value)}")
        return value


def _as_tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind) -> str:
    return " or ".join({int: "an integer", float: "a number", str: "a string", bool: "a boolean",
                        list: "an array"}.get(k, k.__name__) for k in _as_tuple(kind))


def _short(value) -> str:
    return f"an array of {len(value)}" if isinstance(value, list) else repr(value)


def type_sizes() -> dict[int, tuple[str, int, int]]:
    """GGML tensor type id -> (name, weights per block, bytes per block), from the gguf package."""
    from gguf.constants import GGML_QUANT_SIZES

    return {int(t): (t.name, block, size) for t, (block, size) in GGML_QUANT_SIZES.items()}


class _Cursor:
    """Little-endian reads from a memory-mapped file; running past its end is a truncated file."""

    def __init__(self, buf, path: Path):
        self.buf, self.pos, self.path = buf, 0, path

    def read(self, fmt: str):
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise HetSpecError(f"{self.path}: truncated GGUF header (at byte {self.pos:,})") from None
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.read("<Q")
        end = self.pos + n
        if end > len(self.buf):
            raise HetSpecError(f"{self.path}: truncated GGUF header (a {n:,}-byte string at byte {self.pos:,})")
        raw = bytes(self.buf[self.pos:end])
        self.pos = end
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str):
        if vtype in _SCALARS:
            return self.read(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.read("<I"), self.read("<Q")
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                size = struct.calcsize(fmt)
                if self.pos + n * size > len(self.buf):
                    raise HetSpecError(f"{self.path}: truncated GGUF header (array {key})")
                values = list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, self.pos))
                self.pos += n * size
                return values
            return [self.value(etype, key) for _ in range(n)]
        raise PresetError(str(self.path), key, f"unknown GGUF value type {vtype}")


def read_gguf(path: str | Path, header_only: bool = False) -> GGUFFile:
    """The metadata and tensor records of a GGUF file (no tensor data is read). ``header_only``: the file may be
    the header and tensor table alone (the start of a checkpoint, as the web page uploads it): tensors past its
    end are not a truncated file."""
    path = Path(path)
    if not path.is_file():
        raise HetSpecError(f"GGUF file {path} does not exist")
    with open(path, "rb") as f:
        size = path.stat().st_size
        if size < 24:
            raise HetSpecError(f"{path}: not a GGUF file ({size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, path, None if header_only else size)


def _parse(buf, path: Path, size: int | None) -> GGUFFile:
    cur = _Cursor(buf, path)
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise HetSpecError(f"{path}: not a GGUF file (magic {bytes(buf[:4])!r}, expected {GGUF_MAGIC!r})")
    cur.pos = 4
    version = cur.read("<I")
    if version not in SUPPORTED_VERSIONS:
        raise PresetError(str(path), "version", f"GGUF version {version} is not supported (valid: "
                                                f"{', '.join(map(str, SUPPORTED_VERSIONS))}, little-endian)")
    n_tensors, n_kv = cur.read("<Q"), cur.read("<Q")
    metadata: dict = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.read("<I"), key)
    sizes = type_sizes()
    records = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = tuple(cur.read("<Q") for _ in range(cur.read("<I")))
        type_id, offset = cur.read("<I"), cur.read("<Q")
        if type_id not in sizes:
            raise PresetError(str(path), f"tensor {name}", f"unknown tensor type id {type_id} (known: GGML types "
                                                           f"{', '.join(t[0] for t in sizes.values())})")
        records.append((name, dims, type_id, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        raise PresetError(str(path), "general.alignment", f"expected a positive integer, got {alignment!r}")
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict[str, GGUFTensor] = {}
    for name, dims, type_id, offset in records:
        type_name, block, type_size = sizes[type_id]
        n = 1
        for d in dims:
            n *= d
        if dims and dims[0] % block:
            raise PresetError(str(path), f"tensor {name}", f"rows of {dims[0]} weights are not whole {type_name} "
                                                           f"blocks of {block}")
        tensor = GGUFTensor(name, type_name, dims, data_start + offset, n // block * type_size)
        if size is not None and tensor.offset + tensor.n_bytes > size:
            raise HetSpecError(f"{path}: truncated: tensor {name} ends at byte {tensor.offset + tensor.n_bytes:,}, "
                               f"the file has {size:,}")
        if name in tensors:
            raise PresetError(str(path), f"tensor {name}", "stored twice")
        tensors[name] = tensor
    return GGUFFile(path, version, metadata, tensors)


# ---------------------------------------------------------------------- Llama models
def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face ``LlamaForCausalLM`` name of a GGUF tensor (None: not a Llama weight)."""
    if gguf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[gguf_name][0]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_TENSORS \
            and parts[3] == "weight":
        return f"model.layers.{parts[1]}.{LAYER_TENSORS[parts[2]][0]}.weight"
    return None


def step_op(gguf_name: str) -> str:
    """The step-graph operator (:mod:`sim.step_graph`) that reads a Llama GGUF tensor."""
    if gguf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[gguf_name][1]
    return LAYER_TENSORS[gguf_name.split(".")[2]][1]


def expected_tensors(fields: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Llama GGUF file of a spec's ``fields`` (:func:`spec_fields`), with its shape
    (outermost first, as HF's)."""
    h, i, v = fields["hidden"], fields["intermediate"], fields["vocab"]
    hd = fields["attn_head_dim"]
    q, kv = fields["n_heads"] * hd, fields["n_kv_heads"] * hd
    out = {"token_embd.weight": (v, h), "output_norm.weight": (h,)}
    if not fields["tie_embeddings"]:
        out["output.weight"] = (v, h)
    for layer in range(fields["n_layers"]):
        out.update({f"blk.{layer}.{role}.weight": shape for role, shape in (
            ("attn_norm", (h,)), ("attn_q", (q, h)), ("attn_k", (kv, h)), ("attn_v", (kv, h)),
            ("attn_output", (h, q)), ("ffn_norm", (h,)), ("ffn_gate", (i, h)), ("ffn_up", (i, h)),
            ("ffn_down", (h, i)))})
    return out


def spec_fields(gf: GGUFFile, name: str | None = None) -> dict:
    """The :class:`~sim.model_spec.ModelSpec` fields of a Llama GGUF file: the shape from its metadata, its
    tensors checked against it, their stored formats (``weight_formats``). Another architecture, a feature
    HetSpec's model lacks, a missing, misshapen or extra tensor fails with one line naming the file and the
    field."""
    where = str(gf.path)
    meta = gf.metadata
    arch = gf.value("general.architecture", str)
    if arch != "llama":
        raise PresetError(where, "general.architecture", f"{arch!r} is not supported (HetSpec runs the llama "
                                                         f"architecture)")
    # every number by the checkers of a config.json (sim.model_fields): one definition of each type and range
    if field_int(meta, where, "llama.expert_count", default=0, low=0):
        raise PresetError(where, "llama.expert_count", "mixture-of-experts models are not supported")
    n_layers = field_int(meta, where, "llama.block_count")
    hidden = field_int(meta, where, "llama.embedding_length")
    intermediate = field_int(meta, where, "llama.feed_forward_length")
    n_heads = field_int(meta, where, "llama.attention.head_count")
    n_kv = field_int(meta, where, "llama.attention.head_count_kv", default=n_heads)
    if n_heads % n_kv:
        raise PresetError(where, "llama.attention.head_count_kv", f"{n_kv} KV heads do not divide the {n_heads} "
                                                                  f"heads (not divisible)")
    head_dim = field_int(meta, where, "llama.attention.key_length", default=hidden // n_heads or 1)
    if "llama.attention.key_length" not in meta and hidden % n_heads:
        raise PresetError(where, "llama.attention.head_count", f"{n_heads} heads of a {hidden}-wide model: heads "
                                                               f"must divide it (not divisible)")
    value_dim = field_int(meta, where, "llama.attention.value_length", default=head_dim)
    if value_dim != head_dim:
        raise PresetError(where, "llama.attention.value_length", f"{value_dim} differs from the key length "
                                                                 f"{head_dim} (not supported)")
    rotary = field_int(meta, where, "llama.rope.dimension_count", default=head_dim)
    if rotary != head_dim:
        raise PresetError(where, "llama.rope.dimension_count", f"{rotary} rotary dimensions of a {head_dim}-wide "
                                                               f"head: partial rotary is not supported")
    scaling = gf.value("llama.rope.scaling.type", str, required=False, default="none")
    if scaling not in ("none", "linear"):
        raise PresetError(where, "llama.rope.scaling.type", f"{scaling!r} is not supported (none, linear)")
    rope = ({"rope_type": "linear", "factor": field_float(meta, where, "llama.rope.scaling.factor", None)}
            if scaling == "linear" else {})
    if scaling == "linear" and rope["factor"] is None:
        raise PresetError(where, "llama.rope.scaling.factor", "missing field")
    tokens = meta.get("tokenizer.ggml.tokens")
    embd = gf.tensors.get("token_embd.weight")
    vocab_default = len(tokens) if isinstance(tokens, list) else embd.shape[0] if embd is not None else None
    if meta.get("llama.vocab_size") is None and vocab_default is None:
        raise PresetError(where, "llama.vocab_size", "missing field (and no tokenizer.ggml.tokens)")
    fields = dict(
        name=name or gf.path.stem, arch="llama", n_layers=n_layers, hidden=hidden, intermediate=intermediate,
        n_heads=n_heads, n_kv_heads=n_kv, vocab=field_int(meta, where, "llama.vocab_size", default=vocab_default),
        max_position=field_int(meta, where, "llama.context_length", default=4096),
        rope_theta=field_float(meta, where, "llama.rope.freq_base", 10000.0), rope_scaling=rope,
        norm_eps=field_float(meta, where, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        tie_embeddings="output.weight" not in gf.tensors, source=where, attn_head_dim=head_dim,
        bos_token_id=_token_id(meta, where, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_token_id(meta, where, "tokenizer.ggml.eos_token_id"))
    formats = check_tensors(gf, fields)
    dtypes = {_PLAIN_DTYPES.get(f.type) for f in formats if f.op.endswith("_proj")}
    fields["dtype"] = dtypes.pop() if len(dtypes) == 1 and None not in dtypes else "fp16"
    fields["weight_formats"] = formats
    return fields


def _token_id(meta: dict, where: str, key: str) -> int | None:
    """An optional token id: absent, or an integer >= 0."""
    return field_int(meta, where, key, low=0) if meta.get(key) is not None else None


def check_tensors(gf: GGUFFile, fields: dict) -> tuple[WeightFormat, ...]:
    """Every tensor of a spec's ``fields`` present with its shape, nothing else but :data:`IGNORED_TENSORS`;
    the stored format of each step-graph operator's weights (a tied LM head reads the embedding's)."""
    expected = expected_tensors(fields)
    layers = fields["n_layers"]
    for tname, shape in expected.items():
        tensor = gf.tensors.get(tname)
        if tensor is None:
            raise PresetError(str(gf.path), f"tensor {tname}", f"missing (a {layers}-layer llama model "
                                                               f"needs it, shape {list(shape)})")
        if tensor.shape != shape:
            raise PresetError(str(gf.path), f"tensor {tname}", f"shape {list(tensor.shape)}, the metadata "
                                                               f"implies {list(shape)}")
    for tname in gf.tensors:
        if tname not in expected and tname not in IGNORED_TENSORS:
            raise PresetError(str(gf.path), f"tensor {tname}", f"not part of a {layers}-layer llama model "
                                                               f"(biases and extra weights are not supported)")
    by_op: dict[str, list[GGUFTensor]] = defaultdict(list)
    for tname in expected:
        by_op[step_op(tname)].append(gf.tensors[tname])
    if fields["tie_embeddings"]:
        by_op["lm_head"] = by_op["embed"]
    return tuple(WeightFormat(op, "+".join(sorted({t.type for t in ts})), sum(t.n_elements for t in ts),
                              sum(t.n_bytes for t in ts)) for op, ts in by_op.items())
