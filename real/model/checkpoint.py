"""Hugging Face style checkpoints: ``config.json`` + ``model.safetensors`` (or shards).

Tensor names are those of ``LlamaForCausalLM`` (``model.embed_tokens.weight``,
``model.layers.{i}.self_attn.q_proj.weight``, ..., ``model.norm.weight``, ``lm_head.weight``),
so :func:`load_model` also reads real Llama-family weights from disk. Sharded checkpoints
(``model.safetensors.index.json`` mapping each tensor to a ``model-0000k-of-0000n.safetensors``
file) load the same way. Shapes are checked against the config before any tensor is read.
Checkpoints whose body tensors lack the ``model.`` prefix (``embed_tokens.weight``,
``layers.{i}....``, ``norm.weight``: Hugging Face's ``LlamaModel``, or a causal LM saved that
way) load too: :func:`canonical_name` maps them. A file that is not readable safetensors (empty,
truncated, a garbage header) fails with one line naming it (:func:`open_safetensors`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from hwmodels.atomic_files import atomic_path, write_text
from hwmodels.errors import HetSpecError, UnknownNameError
from real.model.transformer import Transformer, rope_tables
from sim.model_spec import ModelSpec, load_hf_config

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

#: Tensors that some Llama checkpoints carry but that are derived, not learned (older
#: transformers versions saved the rotary inverse frequencies); they are skipped on load.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

#: Prefix of the body's tensors in a ``LlamaForCausalLM`` checkpoint, and the body's top-level
#: names, which a checkpoint without the prefix (``LlamaModel``) starts with.
BODY_PREFIX = "model."
BODY_ROOTS = ("embed_tokens.", "layers.", "norm.")

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes of a module's parameters (tied tensors counted once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return int(sum(seen.values()))


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in TORCH_DTYPES:
        raise UnknownNameError("torch dtype", dtype, TORCH_DTYPES)
    return TORCH_DTYPES[dtype]


def expected_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama checkpoint of ``spec`` must hold, with its shape (HF names)."""
    d, kv, inter = spec.hidden, spec.kv_dim, spec.intermediate
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab, d)}
    for i in range(spec.n_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (spec.n_heads * spec.head_dim, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, spec.n_heads * spec.head_dim),
            p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate_proj.weight": (inter, d),
            p + "mlp.up_proj.weight": (inter, d),
            p + "mlp.down_proj.weight": (d, inter),
        })
    shapes["model.norm.weight"] = (d,)
    if not spec.tie_embeddings:
        shapes["lm_head.weight"] = (spec.vocab, d)
    return shapes


def canonical_name(name: str) -> str:
    """A checkpoint tensor's name as :func:`expected_shapes` spells it (``model.`` added to a body
    tensor stored without it)."""
    return BODY_PREFIX + name if name.startswith(BODY_ROOTS) else name


@contextmanager
def open_safetensors(path: str | Path, device: str = "cpu") -> Iterator:
    """``safe_open`` of ``path``; a missing, empty, truncated or garbled file fails with one line naming it."""
    try:
        handle = safe_open(str(path), framework="pt", device=device)
    except (SafetensorError, OSError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise HetSpecError(f"{path}: not a readable safetensors file ({reason})") from None
    with handle as f:
        yield f


def save_safetensors(tensors: dict, path: str | Path) -> Path:
    """``safetensors.torch.save_file`` of ``tensors`` to ``path``, atomically (hwmodels.atomic_files)."""
    with atomic_path(path) as temp:
        save_file(tensors, str(temp), metadata={"format": "pt"})
    return Path(path)


def _stored_names(path: Path, keys) -> dict[str, str]:
    """Canonical name -> name as stored, for the tensors of one file (a name stored twice fails)."""
    out: dict[str, str] = {}
    for key in keys:
        name = canonical_name(key)
        if name in out:
            raise HetSpecError(f"{path}: tensor {name} is stored twice (as {out[name]} and {key})")
        out[name] = key
    return out


# ---------------------------------------------------------------------- save
def save_model(model: Transformer, folder: str | Path, max_shard_bytes: int | None = None) -> Path:
    """Write ``config.json`` and the weights; with ``max_shard_bytes``, shards + an index."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / CONFIG_FILE, json.dumps(model.spec.to_hf_config(), indent=2) + "\n")
    names = expected_shapes(model.spec)
    state = model.state_dict()
    # contiguous CPU copies: safetensors stores plain buffers and refuses shared storage
    tensors = {name: state[name].detach().to("cpu").contiguous().clone() for name in names}
    if max_shard_bytes is None:
        save_safetensors(tensors, folder / SINGLE_FILE)
        return folder
    shards = list(_shard(tensors, max_shard_bytes))
    weight_map = {}
    for k, shard in enumerate(shards, start=1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        save_safetensors(shard, folder / fname)
        weight_map.update({name: fname for name in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_text(folder / INDEX_FILE, json.dumps(index, indent=2) + "\n")
    return folder


def _shard(tensors: dict[str, torch.Tensor], max_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """Greedy shards in tensor order; a tensor larger than ``max_bytes`` gets a shard of its own."""
    if max_bytes <= 0:
        raise HetSpecError(f"max_shard_bytes must be positive, got {max_bytes}")
    shard: dict[str, torch.Tensor] = {}
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shard and size + nbytes > max_bytes:
            yield shard
            shard, size = {}, 0
        shard[name] = t
        size += nbytes
    if shard:
        yield shard


# ---------------------------------------------------------------------- load
def checkpoint_files(folder: str | Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (single file or sharded)."""
    folder = Path(folder)
    index = folder / INDEX_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise HetSpecError(f"{index}: not a safetensors index (needs a 'weight_map' object)") from None
        out = {}
        for name, fname in weight_map.items():
            path = folder / fname
            if not path.exists():
                raise HetSpecError(f"{index}: shard {fname} (holding {name}) does not exist")
            out[canonical_name(name)] = path
        return out
    single = folder / SINGLE_FILE
    if not single.exists():
        raise HetSpecError(f"checkpoint {folder}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
    with open_safetensors(single) as f:
        return {name: single for name in _stored_names(single, f.keys())}


def check_shapes(folder: str | Path, spec: ModelSpec) -> dict[str, Path]:
    """Raise one line naming the first missing or mis-shaped tensor; return name -> file."""
    files = checkpoint_files(folder)
    found: dict[str, tuple[int, ...]] = {}
    for path in sorted(set(files.values())):
        with open_safetensors(path) as f:
            for name, key in _stored_names(path, f.keys()).items():
                found[name] = tuple(f.get_slice(key).get_shape())
    expected = expected_shapes(spec)
    for name, shape in expected.items():
        if name not in found:
            raise HetSpecError(f"checkpoint {folder}: tensor {name} is missing "
                               f"(config expects shape {list(shape)})")
        if found[name] != shape:
            raise HetSpecError(f"checkpoint {folder}: tensor {name} has shape {list(found[name])}, "
                               f"config expects {list(shape)}")
    tied_head = spec.tie_embeddings and "lm_head.weight" in found
    for name in found:
        if name not in expected and not name.endswith(IGNORED_SUFFIXES) and not tied_head:
            raise HetSpecError(f"checkpoint {folder}: unexpected tensor {name} for a "
                               f"{spec.n_layers}-layer llama config")
    return {name: files[name] for name in expected}


def load_model(folder: str | Path, dtype: str | torch.dtype = torch.float32,
               device: str | torch.device = "cpu", name: str | None = None) -> Transformer:
    """A :class:`Transformer` from a Hugging Face style folder (config + safetensors).

    The model is built on the meta device and the checkpoint's tensors are assigned to it, so
    loading never allocates random weights first (a 7B checkpoint loads in its own memory).
    """
    folder = Path(folder)
    spec = load_hf_config(folder, name)
    files = check_shapes(folder, spec)
    dt = torch_dtype(dtype)
    state: dict[str, torch.Tensor] = {}
    for path in sorted(set(files.values())):
        with open_safetensors(path) as f:
            for tname, key in _stored_names(path, f.keys()).items():
                if tname in files:
                    try:
                        tensor = f.get_tensor(key)
                    except SafetensorError as exc:
                        raise HetSpecError(f"{path}: tensor {key} is unreadable ({str(exc).splitlines()[0]})") from None
                    state[tname] = tensor.to(device=device, dtype=dt)
    return model_from_state(spec, state, device)


def model_from_state(spec: ModelSpec, state: dict[str, torch.Tensor], device: str | torch.device = "cpu") -> Transformer:
    """A :class:`Transformer` of ``spec`` holding the tensors of ``state`` (Hugging Face names, every one of
    :func:`expected_shapes`): built on the meta device and the tensors assigned, so no random weights are
    allocated first; a tied LM head shares the embedding; the RoPE tables rebuilt on ``device``."""
    with torch.device("meta"):
        model = Transformer(spec)
    if spec.tie_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if spec.tie_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # RoPE tables are derived, not stored: rebuilt off the meta device, computed in fp64 and held in the
    # weights' dtype (fp32, or bf16 / fp16 as transformers casts them to its activations' dtype).
    cos, sin = rope_tables(spec, spec.max_position)
    dtype = model.lm_head.weight.dtype
    model.rope_cos, model.rope_sin = cos.to(device, dtype), sin.to(device, dtype)
    return model.eval()
