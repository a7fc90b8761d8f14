"""Dovetail's feature-level drafter: Dynamic Gating Fusion + decoder blocks + the target's LM head.

Dovetail §III (the repository's "w1_silu_norm"
variant): with h the target's hidden state at position t-1 and e the embedding of token t,

    h1 = h W1,   h2 = SiLU(RMSNorm(e) W2),   z = sigmoid([h1; h2] Wz),   f = z * h1 + (1 - z) * h2

(W1, W2: d x d, Wz: 2d x d, no biases), then N Llama decoder blocks of the *target's* shape
(:class:`real.model.transformer.DecoderLayer`) and the target's LM head, a frozen copy like the embedding.
The blocks' output at position t is the drafter's guess of the target's hidden state at t
(EAGLE's feature regression) and its LM head gives token t+1.

Training (:func:`train_dgf`, EAGLE's recipe on the demo target's own greedy continuations):
teacher-forced on the target's hidden states, loss = ``FEATURE_WEIGHT`` x SmoothL1(feature) +
``TOKEN_WEIGHT`` x cross-entropy against the target's next-token distribution (EAGLE's v_w = 1.0,
p_w = 0.1). Departure, marked: no uniform-noise augmentation of the input features (EAGLE adds
it against error accumulation over long drafts; the demo trains for minutes, not days, and its
trees are shallow).

Files (``<demo cache>/<preset>/dgf/``): ``dgf_config.json`` (blocks, shapes, the demo models'
fingerprint) and ``dgf.safetensors`` (the fusion, the blocks; the embedding and the LM head are
the target's and are tied back on load), ``summary.json`` (the training's numbers and the SHA-256
content hash of the other two, :mod:`real.train.cache_hashes`, checked before they load, as the demo
cache's are).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hwmodels.atomic_files import write_text
from hwmodels.errors import HetSpecError, UnknownNameError
from real.model.checkpoint import open_safetensors, save_safetensors
from real.model.transformer import DecoderLayer, KVCache, RMSNorm, rope_tables
from real.train.loops import TrainConfig, _run

DGF_DIR = "dgf"
CONFIG_FILE = "dgf_config.json"
WEIGHTS_FILE = "dgf.safetensors"
SUMMARY_FILE = "summary.json"
#: EAGLE's loss weights (Dovetail's repository: v_w = 1.0 for the feature, p_w = 0.1 for the token).
FEATURE_WEIGHT = 1.0
TOKEN_WEIGHT = 0.1


@dataclass(frozen=True)
class DgfRecipe:
    """How the demo's DGF drafter is trained: blocks, data (the target's continuations) and steps."""

    blocks: int
    prompts: int            # train-split prompts the target continues
    prompt_tokens: int
    new_tokens: int
    train: TrainConfig      # batch = sequences per step
    eval_prompts: int = 16

    def key(self) -> dict:
        return asdict(self)


#: Per demo preset. Blocks: Dovetail adds blocks of the target's shape (5 for a 32-layer target);
#: the demo targets have 2 and 8 layers, so one block (tiny) and two (small) keep the drafter at
#: about a quarter to a half of a target pass, as Dovetail's 5/32 keeps it cheap next to its target.
#: Steps were sized on the 2-core CI machine (tiny: ~30 s, small: ~10 min). smollm2 (30 layers): one
#: block, since the frozen 49k x 576 LM head, not the blocks, dominates the drafter's cost (2.5 s per step of
#: 4 sequences at one thread; ~7 min with its 128 continuations).
DGF_RECIPES: dict[str, DgfRecipe] = {
    "tiny": DgfRecipe(blocks=1, prompts=64, prompt_tokens=32, new_tokens=48,
                      train=TrainConfig(steps=150, batch=8, seq_len=0, lr=3e-3, warmup_steps=15, weight_decay=0.0,
                                        seed=4)),
    "small": DgfRecipe(blocks=2, prompts=256, prompt_tokens=64, new_tokens=96,
                       train=TrainConfig(steps=600, batch=8, seq_len=0, lr=1e-3, warmup_steps=50, weight_decay=0.0,
                                         seed=4)),
    "smollm2": DgfRecipe(blocks=1, prompts=128, prompt_tokens=64, new_tokens=64,
                         train=TrainConfig(steps=120, batch=4, seq_len=0, lr=1e-3, warmup_steps=12, weight_decay=0.0,
                                           seed=4)),
}


def get_dgf_recipe(preset: str) -> DgfRecipe:
    if preset not in DGF_RECIPES:
        raise UnknownNameError("demo preset (DGF drafter)", preset, DGF_RECIPES)
    return DGF_RECIPES[preset]


class DgfDrafter(nn.Module):
    """Dovetail's drafter for a target of shape ``target_spec`` (see the module docstring)."""

    def __init__(self, target_spec, blocks: int, embed_weight: Tensor | None = None,
                 lm_head_weight: Tensor | None = None):
        super().__init__()
        if not isinstance(blocks, int) or blocks < 1:
            raise HetSpecError(f"DGF drafter: blocks must be an integer >= 1, got {blocks!r}")
        d, v = target_spec.hidden, target_spec.vocab
        self.target_spec = target_spec
        self.blocks = blocks
        #: the blocks' shape (KV cache, RoPE) is the target's, with ``blocks`` layers
        self.spec = replace(target_spec, name=f"dgf-{blocks}x-{target_spec.name}", n_layers=blocks)
        self.embed = nn.Embedding(v, d)
        self.lm_head = nn.Linear(d, v, bias=False)
        if embed_weight is not None:
            self.embed.weight = nn.Parameter(embed_weight.detach().clone(), requires_grad=False)
        if lm_head_weight is not None:
            self.lm_head.weight = nn.Parameter(lm_head_weight.detach().clone(), requires_grad=False)
        self.embed.weight.requires_grad_(False)
        self.lm_head.weight.requires_grad_(False)
        self.embed_norm = RMSNorm(d, target_spec.norm_eps)
        self.w1 = nn.Linear(d, d, bias=False)        # h1 = h W1
        self.w2 = nn.Linear(d, d, bias=False)        # h2 = SiLU(RMSNorm(e) W2)
        self.wz = nn.Linear(2 * d, d, bias=False)    # z = sigmoid([h1; h2] Wz)
        self.layers = nn.ModuleList(DecoderLayer(self.spec, i) for i in range(blocks))
        cos, sin = rope_tables(self.spec, self.spec.max_position)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @classmethod
    def for_target(cls, target, blocks: int, seed: int = 0) -> "DgfDrafter":
        """An untrained drafter sharing copies of ``target``'s embedding and LM head."""
        torch.manual_seed(seed)
        drafter = cls(target.spec, blocks, target.model.embed_tokens.weight, target.lm_head.weight)
        with torch.no_grad():   # the blocks start as copies of the target's last layers (EAGLE-style warm start)
            for i, layer in enumerate(drafter.layers):
                src = target.model.layers[max(len(target.model.layers) - blocks + i, 0)]
                layer.load_state_dict(src.state_dict())
            for lin in (drafter.w1, drafter.w2, drafter.wz):
                nn.init.normal_(lin.weight, std=0.02)
        return drafter.to(target.lm_head.weight.device)

    def new_cache(self, max_len: int) -> KVCache:
        p = self.lm_head.weight
        return KVCache(self.spec, max_len, 1, dtype=p.dtype, device=p.device)

    def fuse(self, tokens: Tensor, feats: Tensor) -> Tensor:
        """DGF of ``feats [b, q, d]`` (target hidden states) and the embeddings of ``tokens [b, q]``."""
        h1 = self.w1(feats)
        h2 = F.silu(self.w2(self.embed_norm(self.embed(tokens))))
        z = torch.sigmoid(self.wz(torch.cat([h1, h2], dim=-1)))
        return z * h1 + (1.0 - z) * h2

    def forward(self, tokens: Tensor, feats: Tensor, cache: KVCache | None = None, positions: Tensor | None = None,
                tree_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``tokens [b, q]`` with the target's hidden states of the positions before them ``feats
        [b, q, d]`` -> (logits ``[b, q, V]``, predicted hidden states ``[b, q, d]``).

        Cache semantics are :meth:`real.model.transformer.Transformer.forward`'s (pending slots, ``tree_mask``
        ``[q, pending + q]``, None = causal); ``positions [q]`` default to the cache slots.
        """
        b, q = tokens.shape
        start = cache.reserve(q) if cache is not None else 0
        if positions is None:
            positions = torch.arange(start, start + q, device=tokens.device)
        if int(positions.max()) >= self.spec.max_position:
            raise HetSpecError(f"position {int(positions.max())} exceeds max_position {self.spec.max_position}")
        cos = self.rope_cos[positions].view(1, 1, q, -1)
        sin = self.rope_sin[positions].view(1, 1, q, -1)
        if cache is None:
            mask = None
        elif tree_mask is not None:
            prefix = torch.ones(q, cache.length, dtype=torch.bool, device=tokens.device)
            mask = torch.cat([prefix, tree_mask.to(device=tokens.device, dtype=torch.bool)], dim=1)
        else:
            mask = torch.ones(q, start + q, dtype=torch.bool, device=tokens.device).tril(diagonal=start) if q > 1 else None
        x = self.fuse(tokens, feats)
        for layer in self.layers:
            x = layer(x, cos, sin, cache, start, mask)
        if cache is not None:
            cache.pending += q
        return self.lm_head(x), x

    # ------------------------------------------------------------------ files
    def trained_state(self) -> dict[str, Tensor]:
        """The trained tensors (the embedding and LM head are the target's)."""
        return {k: v.detach().cpu().contiguous().clone() for k, v in self.state_dict().items()
                if not k.startswith(("embed.", "lm_head."))}

    def save(self, folder: str | Path, meta: dict) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = {"blocks": self.blocks, "hidden_size": self.spec.hidden, "vocab_size": self.spec.vocab,
                  "target": self.target_spec.name, **meta}
        write_text(folder / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
        save_safetensors(self.trained_state(), folder / WEIGHTS_FILE)
        return folder

    @classmethod
    def load(cls, folder: str | Path, target) -> "DgfDrafter":
        """A drafter saved by :meth:`save` for ``target``; shapes are checked, one line if they differ."""
        folder = Path(folder)
        cfg_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
        for path in (cfg_path, weights):
            if not path.exists():
                raise HetSpecError(f"DGF drafter {folder}: {path.name} does not exist "
                                   "(train it with `hetspec train-demo --dgf`)")
        try:
            blocks = int(json.loads(cfg_path.read_text())["blocks"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise HetSpecError(f"{cfg_path}: needs an integer 'blocks'") from None
        drafter = cls(target.spec, blocks, target.model.embed_tokens.weight, target.lm_head.weight)
        expected = {k: tuple(v.shape) for k, v in drafter.state_dict().items()
                    if not k.startswith(("embed.", "lm_head."))}
        state = {}
        with open_safetensors(weights) as f:
            names = set(f.keys())
            for name, shape in expected.items():
                if name not in names:
                    raise HetSpecError(f"DGF drafter {weights}: tensor {name} is missing (expected shape {list(shape)})")
                found = tuple(f.get_slice(name).get_shape())
                if found != shape:
                    raise HetSpecError(f"DGF drafter {weights}: tensor {name} has shape {list(found)}, "
                                       f"expected {list(shape)} for target {target.spec.name}")
                state[name] = f.get_tensor(name)
        drafter.load_state_dict(state, strict=False)
        return drafter.to(target.lm_head.weight.device).eval().requires_grad_(False)


# ---------------------------------------------------------------------------- training
def dgf_examples(data) -> tuple[Tensor, Tensor, Tensor]:
    """Teacher-forcing triples from the target's continuations ``data``
    (:class:`real.train.generate.Continuations`): drafter position j = 1 .. L-2 reads token j and
    the target's hidden state at j-1 and learns the hidden state at j (whose LM head gives token
    j+1). Returns ``tokens [n, L-2]``, ``feats_in [n, L-2, d]``, ``feats_out [n, L-2, d]``."""
    tokens, hidden = data.tokens, data.hidden                  # [n, L], [n, L-1, d]
    if hidden.shape[1] < 2:
        raise HetSpecError("DGF training needs continuations of at least 3 tokens")
    return tokens[:, 1:-1], hidden[:, :-1], hidden[:, 1:]


def dgf_loss(drafter: DgfDrafter, tokens: Tensor, feats_in: Tensor, feats_out: Tensor) -> tuple[Tensor, Tensor]:
    """(loss, token top-1 agreement) of one teacher-forced batch (causal, no cache)."""
    logits, pred = drafter(tokens, feats_in)
    with torch.no_grad():
        target_p = torch.softmax(drafter.lm_head(feats_out).float(), dim=-1)
    feature = F.smooth_l1_loss(pred.float(), feats_out.float())
    token = -(target_p * torch.log_softmax(logits.float(), dim=-1)).sum(-1).mean()
    agree = (logits.argmax(-1) == target_p.argmax(-1)).float().mean()
    return FEATURE_WEIGHT * feature + TOKEN_WEIGHT * token, agree


def train_dgf(drafter: DgfDrafter, data, cfg: TrainConfig, desc: str = "dgf drafter", progress: bool = True):
    """Train the fusion and the blocks on the target's continuations (``cfg.batch`` sequences a step)."""
    tokens, feats_in, feats_out = dgf_examples(data)
    n = tokens.shape[0]
    drafter.train()
    order: list[Tensor] = []

    def loss_fn(step: int, gen: torch.Generator):
        if not order or order[0].numel() < min(cfg.batch, n):
            order[:] = [torch.randperm(n, generator=gen)]
        idx, order[0] = order[0][:cfg.batch], order[0][cfg.batch:]
        loss, _ = dgf_loss(drafter, tokens[idx], feats_in[idx], feats_out[idx])
        return loss, int(idx.numel() * tokens.shape[1])

    result = _run([p for p in drafter.parameters() if p.requires_grad], loss_fn, cfg, desc, progress)
    drafter.eval()
    return result


def dgf_folder(demo) -> Path:
    return Path(demo.folder) / DGF_DIR


def cached_dgf_key(folder: Path) -> dict | None:
    try:
        return json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def save_dgf(drafter: DgfDrafter, folder: Path, key: dict, summary: dict) -> dict:
    """Write the drafter (config, weights) and then ``summary.json`` with their content hashes; returns the
    summary as written. The summary comes last: a run killed before it leaves hashes that do not match."""
    from real.train.cache_hashes import file_hash

    folder = Path(folder)
    drafter.save(folder, key)
    summary = {**summary, "files": {name: file_hash(folder / name) for name in (CONFIG_FILE, WEIGHTS_FILE)}}
    write_text(folder / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def load_cached_dgf(folder: Path, target) -> tuple[DgfDrafter, dict]:
    """The drafter cached in ``folder`` and its summary, once every file matches the content hash the summary
    recorded at training; one line naming the damaged, missing or unhashed file otherwise."""
    from real.train.cache_hashes import check_content_hashes

    folder = Path(folder)
    summary_path = folder / SUMMARY_FILE
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HetSpecError(f"{summary_path} cannot be read ({type(exc).__name__})") from None
    if not isinstance(summary, dict):
        raise HetSpecError(f"{summary_path}: top level must be an object")
    check_content_hashes(folder, summary.get("files"), summary_path)
    return DgfDrafter.load(folder, target), summary


def ensure_dgf(demo, force: bool = False, progress: bool = True) -> tuple[DgfDrafter, dict]:
    """The DGF drafter of a loaded demo preset: from ``<demo folder>/dgf`` when it was trained for
    these demo models with this recipe and its files match their content hashes, else trained now (a few
    minutes; a damaged cache with a line naming the file) and cached there."""
    from real.train import corpus
    from real.train.generate import greedy_continuations

    recipe = get_dgf_recipe(demo.preset)
    folder = dgf_folder(demo)
    key = {"demo_fingerprint": demo.summary.get("fingerprint"), "recipe": recipe.key()}
    cached = cached_dgf_key(folder)
    if not force and cached is not None and all(cached.get(k) == v for k, v in key.items()):
        try:
            return load_cached_dgf(folder, demo.target)
        except HetSpecError as exc:            # a damaged, edited or unhashed file: retrain, saying which
            print(f"hetspec: the DGF drafter cache is damaged ({exc}); retraining it", file=sys.stderr)
    t0 = time.perf_counter()
    if progress:
        print(f"[train-demo {demo.preset}] DGF drafter: {recipe.blocks} block(s) of the target's shape, "
              f"{recipe.train.steps} steps on the target's continuations of {recipe.prompts} train prompts",
              file=sys.stderr, flush=True)
    train_prompts = corpus.prompts(demo.tokenizer, "train", recipe.prompts, recipe.prompt_tokens, seed=recipe.train.seed)
    data = greedy_continuations(demo.target, train_prompts, recipe.new_tokens, progress=progress,
                                desc="target continuations (DGF)")
    drafter = DgfDrafter.for_target(demo.target, recipe.blocks, seed=recipe.train.seed)
    result = train_dgf(drafter, data, recipe.train, progress=progress)
    eval_prompts = corpus.prompts(demo.tokenizer, "evaluation", recipe.eval_prompts, recipe.prompt_tokens, seed=0)
    eval_data = greedy_continuations(demo.target, eval_prompts, recipe.new_tokens)
    with torch.no_grad():
        _, agree = dgf_loss(drafter.eval(), *dgf_examples(eval_data))
    summary = {"blocks": recipe.blocks, "params": sum(p.numel() for p in drafter.parameters() if p.requires_grad),
               "final_train_loss": result.final_loss, "train_s": round(time.perf_counter() - t0, 1),
               "eval_top1_agreement": float(agree),
               "eval": f"teacher-forced top-1 agreement with the target's next token on {recipe.eval_prompts} "
                       f"evaluation continuations"}
    drafter.requires_grad_(False)
    return drafter, save_dgf(drafter, folder, key, summary)
