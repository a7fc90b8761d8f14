"""Model specifications: the shape of a decoder-only transformer, torch-free.

One :class:`ModelSpec` serves the simulator (operator FLOPs and bytes) and the real path (the
torch model is built from it). Presets live in ``sim/presets/models.toml`` with the source of
every number; any Hugging Face style ``config.json`` (Llama family or GPT-2) loads with
:func:`load_hf_config`.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from hwmodels.datafile import read_data_file
from hwmodels.dtypes import DTYPE_BYTES, check_dtype
from hwmodels.errors import HetSpecError, PresetError, UnknownNameError

ARCHS = ("llama", "gpt2")


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer.

    ``arch="llama"``: RMSNorm, rotary positions, SwiGLU MLP (gate, up, down), grouped-query
    attention. ``arch="gpt2"``: LayerNorm, learned positions, GELU MLP (up, down), tied embedding.
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

    def __post_init__(self) -> None:
        for field in ("n_layers", "hidden", "intermediate", "n_heads", "n_kv_heads", "vocab", "max_position"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise HetSpecError(f"model {self.name}: {field} must be a positive integer, got {value!r}")
        if self.arch not in ARCHS:
            raise HetSpecError(f"model {self.name}: unknown arch {self.arch!r}; valid: {', '.join(ARCHS)}")
        check_dtype(self.dtype, f"model {self.name}: dtype")
        if self.hidden % self.n_heads:
            raise HetSpecError(f"model {self.name}: hidden {self.hidden} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise HetSpecError(f"model {self.name}: n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 3 for SwiGLU (gate, up, down), 2 for GELU (up, down)."""
        return 3 if self.arch == "llama" else 2

    @property
    def attn_params_per_layer(self) -> int:
        return self.hidden * (self.hidden + 2 * self.kv_dim) + self.hidden * self.hidden

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
        """Bytes of all weights at ``dtype`` (default: the spec's dtype)."""
        return self.params * DTYPE_BYTES[check_dtype(dtype or self.dtype, "dtype")]

    def kv_bytes_per_token(self, dtype: str | None = None) -> float:
        """KV-cache bytes one token adds over all layers."""
        return 2 * self.n_layers * self.kv_dim * DTYPE_BYTES[check_dtype(dtype or self.dtype, "dtype")]

    def with_dtype(self, dtype: str) -> "ModelSpec":
        return replace(self, dtype=check_dtype(dtype, "dtype"))

    # ------------------------------------------------------------------ Hugging Face config
    def to_hf_config(self) -> dict:
        """A Hugging Face ``LlamaForCausalLM`` config dict (Llama architecture only)."""
        if self.arch != "llama":
            raise HetSpecError(f"model {self.name}: only llama-architecture specs export a Llama config")
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_position,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "hidden_act": "silu",
            "torch_dtype": _HF_DTYPE_NAMES_REVERSE[self.dtype],
            "hetspec_name": self.name,
        }

    def to_dict(self) -> dict:
        return asdict(self)


_HF_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
_HF_DTYPE_NAMES_REVERSE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp8": "float16",
                           "int8": "float16", "int4": "float16", "tf32": "float32"}


def spec_from_hf_config(config: dict, name: str, where: str = "config") -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face config dict (Llama family, Mistral, Qwen2, GPT-2)."""

    def need(*keys, default=None):
        for key in keys:
            if key in config and config[key] is not None:
                return config[key]
        if default is not None:
            return default
        raise PresetError(where, keys[0], "missing field")

    model_type = str(config.get("model_type", "llama")).lower()
    required = (("n_layer", "n_embd", "n_head", "vocab_size") if model_type == "gpt2" else
                ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"))
    for key in required:
        if config.get(key) is None:
            raise PresetError(where, key, "missing field")
    dtype = _HF_DTYPE_NAMES.get(str(config.get("torch_dtype", "float16")), "fp16")
    try:
        if model_type == "gpt2":
            hidden = int(need("n_embd", "hidden_size"))
            return ModelSpec(
                name=name, arch="gpt2", n_layers=int(need("n_layer", "num_hidden_layers")), hidden=hidden,
                intermediate=int(config.get("n_inner") or 4 * hidden),
                n_heads=int(need("n_head", "num_attention_heads")),
                n_kv_heads=int(need("n_head", "num_attention_heads")),
                vocab=int(need("vocab_size")), max_position=int(need("n_positions", "n_ctx", default=1024)),
                norm_eps=float(config.get("layer_norm_epsilon", 1e-5)), tie_embeddings=True, dtype=dtype,
                source=where,
            )
        n_heads = int(need("num_attention_heads"))
        return ModelSpec(
            name=name, arch="llama", n_layers=int(need("num_hidden_layers")), hidden=int(need("hidden_size")),
            intermediate=int(need("intermediate_size")), n_heads=n_heads,
            n_kv_heads=int(config.get("num_key_value_heads") or n_heads), vocab=int(need("vocab_size")),
            max_position=int(config.get("max_position_embeddings") or 4096),
            rope_theta=float(config.get("rope_theta") or 10000.0),
            norm_eps=float(config.get("rms_norm_eps") or 1e-5),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)), dtype=dtype, source=where,
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
    """A preset by name, or a ``config.json`` (file or folder) by path."""
    table = _preset_table()
    if name_or_path in table:
        return table[name_or_path]
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or candidate.is_dir() or "/" in name_or_path:
        return load_hf_config(candidate)
    raise UnknownNameError("model", name_or_path, table)
