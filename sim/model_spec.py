"""Model specifications: the shape of a decoder-only transformer, torch-free.

One :class:`ModelSpec` serves the simulator (operator FLOPs and bytes) and the real path (the
torch model is built from it). Presets live in ``sim/presets/models.toml`` with the source of
every number; any Hugging Face style ``config.json`` (Llama family or GPT-2) loads with
:func:`load_hf_config`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from hwmodels.datafile import read_data_file
from hwmodels.dtypes import DTYPE_BYTES, check_dtype
from hwmodels.errors import HetSpecError, PresetError, UnknownNameError
from sim.model_fields import field_bool, field_float, field_int

ARCHS = ("llama", "gpt2")

#: RoPE variants the real model implements (``real.model.transformer.rope_inv_freq``), with the
#: parameters each needs (Hugging Face's names, as in ``rope_scaling`` / ``rope_parameters``).
ROPE_TYPES: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer.

    ``arch="llama"``: RMSNorm, rotary positions, SwiGLU MLP (gate, up, down), grouped-query
    attention. ``arch="gpt2"``: LayerNorm, learned positions, GELU MLP (up, down), tied embedding.

    ``attn_head_dim``: the attention head size when a config gives one that is not
    ``hidden // n_heads`` (Hugging Face's ``head_dim``); None derives it. ``rope_scaling``: the
    RoPE variant and its parameters (a dict, kept as sorted pairs; empty = plain RoPE), one of
    :data:`ROPE_TYPES`. ``bos_token_id`` / ``eos_token_id``: carried through save and load.
    """

    name: str
    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    dtype: str = "fp16"
    arch: str = "llama"
    max_position: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    source: str = ""
    attn_head_dim: int | None = None
    rope_scaling: tuple = ()
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    #: weights stored in formats other than ``dtype`` (a GGUF file's tensor types): one
    #: :class:`sim.model_gguf.WeightFormat` per step-graph operator; empty: every weight at ``dtype``
    weight_formats: tuple = ()

    def __post_init__(self) -> None:
        for field in ("n_layers", "hidden", "intermediate", "n_heads", "n_kv_heads", "vocab", "max_position"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise HetSpecError(f"model {self.name}: {field} must be a positive integer, got {value!r}")
        for field in ("rope_theta", "norm_eps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise HetSpecError(f"model {self.name}: {field} must be a finite number > 0, got {value!r}")
        if self.arch not in ARCHS:
            raise HetSpecError(f"model {self.name}: unknown arch {self.arch!r}; valid: {', '.join(ARCHS)}")
        check_dtype(self.dtype, f"model {self.name}: dtype")
        hd = self.attn_head_dim
        if hd is not None and (not isinstance(hd, int) or isinstance(hd, bool) or hd <= 0):
            raise HetSpecError(f"model {self.name}: attn_head_dim must be a positive integer, got {hd!r}")
        if hd is not None and self.hidden % self.n_heads == 0 and hd == self.hidden // self.n_heads:
            object.__setattr__(self, "attn_head_dim", None)   # the derived size: one spelling of one shape
        if self.attn_head_dim is None and self.hidden % self.n_heads:
            raise HetSpecError(f"model {self.name}: hidden {self.hidden} is not divisible by n_heads {self.n_heads} "
                               f"(give head_dim explicitly)")
        if self.n_heads % self.n_kv_heads:
            raise HetSpecError(f"model {self.name}: n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")
        if self.arch == "llama" and self.head_dim % 2:
            raise HetSpecError(f"model {self.name}: head_dim {self.head_dim} is odd; rotary embeddings need an even one")
        object.__setattr__(self, "rope_scaling", _check_rope_scaling(self.name, self.rope_scaling))
        for field in ("bos_token_id", "eos_token_id"):
            value = getattr(self, field)
            if isinstance(value, list | tuple):
                value = tuple(value)
                object.__setattr__(self, field, value)
            ids = value if isinstance(value, tuple) else () if value is None else (value,)
            if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in ids):
                raise HetSpecError(f"model {self.name}: {field} must be a token id (or a list of them), got {value!r}")

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.attn_head_dim if self.attn_head_dim is not None else self.hidden // self.n_heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection's output (and the output projection's input)."""
        return self.n_heads * self.head_dim

    @property
    def rope_parameters(self) -> dict:
        """The RoPE variant: ``{"rope_type": ..., <its parameters>}`` (``rope_type`` "default" when plain)."""
        params = dict(self.rope_scaling)
        params.setdefault("rope_type", "default")
        return params

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 3 for SwiGLU (gate, up, down), 2 for GELU (up, down)."""
        return 3 if self.arch == "llama" else 2

    @property
    def attn_params_per_layer(self) -> int:
        return self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden

    @property
    def mlp_params_per_layer(self) -> int:
        return self.mlp_matrices * self.hidden * self.intermediate

    @property
    def params_per_layer(self) -> int:
        norms = 2 * self.hidden
        return self.attn_params_per_layer + self.mlp_params_per_layer + norms

    @property
    def embedding_params(self) -> int:
        pos = self.max_position * self.hidden if self.arch == "gpt2" else 0
        return self.vocab * self.hidden + pos

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters (the LM head counted once when tied to the embedding)."""
        head = 0 if self.tie_embeddings else self.lm_head_params
        return self.n_layers * self.params_per_layer + self.embedding_params + head + self.hidden

    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of all weights at ``dtype`` (default: the spec's dtype); the weights of
        :attr:`weight_formats` at their stored size (a tied LM head counted once)."""
        dt = DTYPE_BYTES[check_dtype(dtype or self.dtype, "dtype")]
        stored = [f for f in self.weight_formats if not (f.op == "lm_head" and self.tie_embeddings)]
        return sum(f.stored_bytes for f in stored) + (self.params - sum(f.elements for f in stored)) * dt

    def weight_format(self, op: str):
        """How the weights of step-graph operator ``op`` are stored (a :class:`sim.model_gguf.WeightFormat`;
        None: at the compute dtype)."""
        return next((f for f in self.weight_formats if f.op == op), None)

    def dequantized(self, dtype: str) -> "ModelSpec":
        """The spec with every weight at ``dtype``: what the real path runs after dequantizing a GGUF file."""
        return replace(self, dtype=check_dtype(dtype, "dtype"), weight_formats=())

    def kv_bytes_per_token(self, dtype: str | None = None) -> float:
        """KV-cache bytes one token adds over all layers."""
        return 2 * self.n_layers * self.kv_dim * DTYPE_BYTES[check_dtype(dtype or self.dtype, "dtype")]

    def with_dtype(self, dtype: str) -> "ModelSpec":
        return replace(self, dtype=check_dtype(dtype, "dtype"))

    # ------------------------------------------------------------------ Hugging Face config
    def to_hf_config(self) -> dict:
        """A Hugging Face ``LlamaForCausalLM`` config dict (Llama architecture only), readable by
        transformers 4 (``rope_theta``, ``rope_scaling``, ``torch_dtype``) and 5 (``rope_parameters``,
        ``dtype``): both spellings are written. Token ids are written as they are (null when unknown)
        so that transformers does not fill in its defaults."""
        if self.arch != "llama":
            raise HetSpecError(f"model {self.name}: only llama-architecture specs export a Llama config")
        scaling = dict(self.rope_scaling) or None
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_position,
            "rope_theta": self.rope_theta,
            "rope_scaling": scaling,
            "rope_parameters": {**self.rope_parameters, "rope_theta": self.rope_theta},
            "rms_norm_eps": self.norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id,
            "torch_dtype": _HF_DTYPE_NAMES_REVERSE[self.dtype],
            "dtype": _HF_DTYPE_NAMES_REVERSE[self.dtype],
            "hetspec_name": self.name,
        }

    def to_dict(self) -> dict:
        return asdict(self)


_HF_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
_HF_DTYPE_NAMES_REVERSE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp8": "float16",
                           "int8": "float16", "int4": "float16", "tf32": "float32"}


def _check_rope_scaling(model: str, scaling) -> tuple:
    """``scaling`` (a dict, or sorted pairs) checked against :data:`ROPE_TYPES`, as sorted pairs
    (hashable, so a spec stays a cache key); the plain variant is ``()``."""
    params = dict(scaling or ())
    if "type" in params:                                    # transformers 4's older spelling
        params.setdefault("rope_type", params.pop("type"))
    params.pop("rope_theta", None)                          # a field of its own (rope_theta)
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise HetSpecError(f"model {model}: rope partial_rotary_factor {params['partial_rotary_factor']} is not "
                           f"supported (HetSpec rotates the whole head)")
    rope_type = params.get("rope_type") or "default"
    if rope_type not in ROPE_TYPES:
        raise HetSpecError(f"model {model}: rope_type {rope_type!r} is not supported; HetSpec implements "
                           f"{', '.join(ROPE_TYPES)}")
    needs = ROPE_TYPES[rope_type]
    out: dict = {"rope_type": rope_type} if rope_type != "default" else {}
    for key in needs:
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise HetSpecError(f"model {model}: rope_type {rope_type!r} needs a positive {key}, got {value!r}")
        out[key] = int(value) if key == "original_max_position_embeddings" else float(value)
    if rope_type == "llama3" and out["high_freq_factor"] <= out["low_freq_factor"]:
        raise HetSpecError(f"model {model}: rope llama3 needs high_freq_factor > low_freq_factor, got "
                           f"{out['high_freq_factor']} and {out['low_freq_factor']}")
    return tuple(sorted(out.items()))


def _hf_rope(config: dict, where: str) -> tuple[float, dict]:
    """RoPE theta and variant of a config, from either spelling: transformers 5's ``rope_parameters``
    (theta inside) or transformers 4's ``rope_theta`` + ``rope_scaling``."""
    key = "rope_parameters" if config.get("rope_parameters") is not None else "rope_scaling"
    params = config.get(key)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise PresetError(where, key, f"expected an object, got {params!r}")
    if any(isinstance(v, dict) for v in params.values()):
        raise PresetError(where, key, "per-layer-type RoPE parameters are not supported")
    theta = params.get("rope_theta")
    if theta is None:
        theta = config.get("rope_theta")
    params = dict(params)
    if config.get("partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", config["partial_rotary_factor"])
    if theta is None:
        return 10000.0, params
    if isinstance(theta, bool) or not isinstance(theta, int | float):
        raise PresetError(where, "rope_theta", f"must be a finite number > 0, got {theta!r}")
    return float(theta), params


def _hf_dtype(config: dict, where: str) -> str:
    """The weights' dtype from ``dtype`` (transformers 5) or ``torch_dtype`` (4); fp16 when neither."""
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is None:
            continue
        name = str(value).removeprefix("torch.")
        if name not in _HF_DTYPE_NAMES:
            raise PresetError(where, key, f"dtype {value!r} is not supported; valid: {', '.join(_HF_DTYPE_NAMES)}")
        return _HF_DTYPE_NAMES[name]
    return "fp16"


def _check_llama_features(config: dict, where: str) -> None:
    """Refuse Llama-config features HetSpec's model does not implement (rather than ignore them)."""
    act = config.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise PresetError(where, "hidden_act", f"{act!r} is not supported (HetSpec's llama MLP is SwiGLU: silu)")
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise PresetError(where, key, "biases are not supported (HetSpec's llama projections have none)")


def spec_from_hf_config(config: dict, name: str, where: str = "config") -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face config dict (Llama family, Mistral, Qwen2, GPT-2).

    Every field is checked where it is read: its type (a bool is not an integer, a string is not a
    number), its range (a count >= 1, a norm epsilon or RoPE theta finite and > 0); a wrong one is
    one line naming the file and the field, never truncated or replaced by a default."""
    model_type = config.get("model_type", "llama")
    if not isinstance(model_type, str):
        raise PresetError(where, "model_type", f"must be a string, got {model_type!r}")
    model_type = model_type.lower()
    required = (("n_layer", "n_embd", "n_head", "vocab_size") if model_type == "gpt2" else
                ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"))
    for key in required:
        if config.get(key) is None:
            raise PresetError(where, key, "missing field")
    dtype = _hf_dtype(config, where)
    try:
        if model_type == "gpt2":
            hidden = field_int(config, where, "n_embd", "hidden_size")
            n_heads = field_int(config, where, "n_head", "num_attention_heads")
            return ModelSpec(
                name=name, arch="gpt2", n_layers=field_int(config, where, "n_layer", "num_hidden_layers"),
                hidden=hidden, intermediate=field_int(config, where, "n_inner", default=4 * hidden),
                n_heads=n_heads, n_kv_heads=n_heads, vocab=field_int(config, where, "vocab_size"),
                max_position=field_int(config, where, "n_positions", "n_ctx", default=1024),
                norm_eps=field_float(config, where, "layer_norm_epsilon", 1e-5), tie_embeddings=True, dtype=dtype,
                source=where,
            )
        n_heads = field_int(config, where, "num_attention_heads")
        _check_llama_features(config, where)
        theta, rope = _hf_rope(config, where)
        if isinstance(theta, bool) or not math.isfinite(theta) or theta <= 0:
            raise PresetError(where, "rope_theta", f"must be a finite number > 0, got {theta!r}")
        head_dim = config.get("head_dim")
        return ModelSpec(
            name=name, arch="llama", n_layers=field_int(config, where, "num_hidden_layers"),
            hidden=field_int(config, where, "hidden_size"),
            intermediate=field_int(config, where, "intermediate_size"), n_heads=n_heads,
            n_kv_heads=field_int(config, where, "num_key_value_heads", default=n_heads),
            vocab=field_int(config, where, "vocab_size"),
            max_position=field_int(config, where, "max_position_embeddings", default=4096),
            rope_theta=theta, rope_scaling=rope,
            norm_eps=field_float(config, where, "rms_norm_eps", 1e-5),
            tie_embeddings=field_bool(config, where, "tie_word_embeddings", False), dtype=dtype, source=where,
            attn_head_dim=field_int(config, where, "head_dim") if head_dim is not None else None,
            bos_token_id=config.get("bos_token_id"), eos_token_id=config.get("eos_token_id"),
        )
    except PresetError:
        raise
    except HetSpecError as exc:  # the spec itself is inconsistent (e.g. heads do not divide hidden)
        raise PresetError(where, "config", str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise PresetError(where, "config", f"bad value: {exc}") from None


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Load a Hugging Face ``config.json`` (or a folder holding one) from disk."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = read_data_file(path, "model config")
    if not isinstance(config, dict):
        raise PresetError(str(path), "json", "top level must be an object")
    return spec_from_hf_config(config, name or config.get("hetspec_name") or path.parent.name, str(path))


def spec_from_gguf(gguf_file, name: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a read GGUF file (:func:`sim.model_gguf.spec_fields`; the reader is there)."""
    from sim.model_gguf import spec_fields

    fields = spec_fields(gguf_file, name)
    try:
        return ModelSpec(**fields)
    except HetSpecError as exc:   # the metadata is inconsistent in a way the reader does not check
        raise PresetError(fields["source"], "llama", str(exc)) from None


def load_gguf_spec(path: str | Path, name: str | None = None, header_only: bool = False) -> ModelSpec:
    """The :class:`ModelSpec` of a Llama GGUF file, its weights at their stored sizes (``header_only``: the file
    may be the header and tensor table alone, :func:`sim.model_gguf.read_gguf`)."""
    from sim.model_gguf import read_gguf

    return spec_from_gguf(read_gguf(path, header_only=header_only), name)


# ---------------------------------------------------------------------- presets
_MODEL_FIELDS = ("n_layers", "hidden", "intermediate", "n_heads", "n_kv_heads", "vocab")


@lru_cache(maxsize=None)
def _preset_table() -> dict[str, ModelSpec]:
    text = resources.files("sim").joinpath("presets/models.toml").read_text()
    where = "sim/presets/models.toml"
    data = tomllib.loads(text)
    out: dict[str, ModelSpec] = {}
    for name, entry in data.items():
        for field in _MODEL_FIELDS + ("source",):
            if field not in entry:
                raise PresetError(where, f"{name}.{field}", "missing field")
        kwargs = {k: v for k, v in entry.items() if k != "description"}
        try:
            out[name] = ModelSpec(name=name, **kwargs)
        except TypeError as exc:
            raise PresetError(where, name, str(exc)) from None
    return out


def model_names() -> tuple[str, ...]:
    return tuple(_preset_table())


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name, a ``config.json`` (file or folder) or a GGUF file by path."""
    table = _preset_table()
    if name_or_path in table:
        return table[name_or_path]
    candidate = Path(name_or_path)
    if candidate.suffix.lower() == ".gguf":
        return load_gguf_spec(candidate)
    if candidate.suffix == ".json" or candidate.is_dir() or "/" in name_or_path:
        return load_hf_config(candidate)
    raise UnknownNameError("model", name_or_path, table)
