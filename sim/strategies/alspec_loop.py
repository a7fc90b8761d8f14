"""ALSpec's Alg. 1 as HetSpec's real path runs it: ``alspec`` option ``loop="hetspec"``.

The paper's closed form (App. F, :mod:`sim.strategies.alspec_formulas`) prices the kernels of its
TT-Metalium implementation: the exact attention reuses the approximation as the first chunk of a
speculative flash decode, a hit swaps the groups' roles, and the receiver also starts the next
layer's pre-attention operators. HetSpec's real path (:mod:`real.hetero.alspec`, two CPU worker
threads in one memory) departs from that in three marked ways, and this prices what it does. Per
layer of a one-token step, sender ``device``, receiver ``draft_device``:

- the sender runs the pre-attention operators (norm, Q/K/V, RoPE) and the approximate attention
  over the first and last ``S`` cached tokens (``min(s, 2S)`` keys, gathered by two copies), and
  hands it to the receiver (one hop of the link between the workers);
- the receiver runs the post-attention operators (O-proj, residual, norm, MLP, residual) on it and
  hands the layer's output back (one hop);
- meanwhile the sender computes the exact attention over the ``s`` cached keys on its own and the
  check ``||A~ - A|| < lambda ||A||`` (a difference and two norms), then waits for the receiver;
- a miss (probability ``1 - r_k``, the layer's measured hit rate) runs the post-attention operators
  again on the sender from the exact attention.

The two workers' Python seldom runs at once here (unlike the sides of ``hcmp``'s split step): the
sender's exact attention and check are a few operators, mostly done before the receiver, woken by the
hand-off, starts; so no share of the host's two-thread contention is priced (measured on the tiny
models under one calibration: the loop without it within 10 % of the runs, with it 30 % slow).

``layer_k = pre + approx + max(exact + check, hop + post + hop) + (1 - r_k) post``; the step adds
the embedding, the final norm and the LM head, and the host-side work of the autoregressive loop
around it (the ``ar`` loop costs of the sender: the same argmax, commit and emit per token). Every
operator is priced by the step graph on its worker (cache residency, fixed costs, as the other
strategies); the hops are the link's latency plus the bytes. Without speculation (``sp=0``) a layer
is ``pre + exact + post``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.roofline import roofline_time
from sim.closed_form import op_seconds
from sim.plan import StepPlan, Task, delay_task
from sim.strategies.base import Estimate, Problem, StrategyConfig, host_seconds

#: The real path's loop options (``alspec`` option ``loop``).
LOOPS = ("paper", "hetspec")
#: Operators before the attention; the attention's own (the rest of a layer comes after it).
PRE_OPS = ("attn_norm", "q_proj", "k_proj", "v_proj", "rope")
ATTENTION_OPS = ("attn_score", "tree_score", "softmax", "attn_value", "tree_value")
#: Step-graph operators' worth of fixed cost of the check ||A~ - A|| < lambda ||A|| (a difference, two vector
#: norms and two scalar reads: about the four torch operators a step-graph operator stands for, by the
#: calibration's count of ~60 torch operators per 14 step-graph operators of a layer).
CHECK_LAUNCHES = 1
#: ... of the two concatenations that gather the sink and the window's keys and values.
GATHER_LAUNCHES = 1


@dataclass(frozen=True)
class LoopCosts:
    """Seconds of one token's parts on the two workers (one layer's unless said)."""

    embed_s: float
    final_s: float       # final norm + LM head
    pre_s: float
    approx_s: float      # sink + window attention with its gather
    exact_s: float
    check_s: float
    post_s: float        # on the sender (a miss)
    post_receiver_s: float
    hop_to_s: float
    hop_back_s: float
    host_s: float        # the loop around the step
    layers: int

    def hit_layer_s(self) -> float:
        return self.pre_s + self.approx_s + max(self.exact_s + self.check_s,
                                                self.hop_to_s + self.post_receiver_s + self.hop_back_s)

    def step_s(self, hit_rates, sp: bool = True) -> float:
        """Expected seconds of one token with per-layer hit rates ``hit_rates``."""
        if not sp:
            return self.embed_s + self.layers * (self.pre_s + self.exact_s + self.post_s) + self.final_s + self.host_s
        misses = float(np.sum(1.0 - np.asarray(hit_rates, dtype=float)))
        return self.embed_s + self.layers * self.hit_layer_s() + misses * self.post_s + self.final_s + self.host_s


def _sections(problem: Problem, device: str, context: int) -> dict[str, float]:
    """Seconds of one instance of the step's operator groups (one token over ``context`` keys) on ``device``."""
    model = problem.model
    poly, per_op = op_seconds(model, problem.platform, device, 1, context, problem.batch)
    names, sections = list(poly.names), list(poly.sections)
    L = model.n_layers
    out = {"pre": 0.0, "attention": 0.0, "post": 0.0, "embed": 0.0, "final": 0.0}
    for name, section, t in zip(names, sections, per_op):
        if section == "layer":
            key = "pre" if name in PRE_OPS else "attention" if name in ATTENTION_OPS else "post"
            out[key] += float(t) / L
        else:
            out["embed" if section == "pre" else "final"] += float(t)
    return out


def loop_costs(problem: Problem, config: StrategyConfig) -> LoopCosts:
    """The parts of a resolved ``alspec`` config with ``loop="hetspec"`` (see the module docstring)."""
    model, platform = problem.model, problem.platform
    sender, receiver = config.device, config.draft_device or config.device
    s = max(int(problem.context), 1)
    window = int(config.option("window"))
    dt = DTYPE_BYTES[model.dtype]
    mine = _sections(problem, sender, s)
    theirs = _sections(problem, receiver, s) if receiver != sender else mine
    approx = _sections(problem, sender, min(s, 2 * window))["attention"]
    dev = platform.device(sender)
    if s > 2 * window:      # two concatenations gather the sink and the window's keys and values
        gather = 2 * 2 * 2 * window * model.kv_dim * dt * problem.batch
        approx += roofline_time(dev, 0.0, gather, model.dtype, launches=GATHER_LAUNCHES).time_s
    width = model.n_heads * model.head_dim * problem.batch
    check = roofline_time(dev, 4.0 * width, 4.0 * width * dt, model.dtype, launches=CHECK_LAUNCHES).time_s
    hop_to = hop_back = 0.0
    if receiver != sender:
        link = platform.link(sender, receiver)
        hop_to, hop_back = link.transfer_s(width * dt), link.transfer_s(model.hidden * dt * problem.batch)
    host = float(host_seconds(problem, "ar", sender, nodes=1, forwards=False))
    return LoopCosts(embed_s=mine["embed"], final_s=mine["final"], pre_s=mine["pre"], approx_s=approx,
                     exact_s=mine["attention"], check_s=check, post_s=mine["post"], post_receiver_s=theirs["post"],
                     hop_to_s=hop_to, hop_back_s=hop_back, host_s=host, layers=model.n_layers)


def layer_rates(config: StrategyConfig, layers: int) -> np.ndarray:
    """Per-layer hit rates of a resolved config (a measured profile's, else the mean hit rate everywhere)."""
    rates = config.option("hit_rates") or (config.option("hit_rate", 0.0),) * layers
    return np.asarray(rates, dtype=float)


def estimate(problem: Problem, config: StrategyConfig) -> Estimate:
    c = loop_costs(problem, config)
    sp = bool(config.option("sp"))
    rates = layer_rates(config, c.layers)
    step = c.step_s(rates, sp)
    return Estimate(step_s=step, tokens_per_step=1.0, proposed_per_step=0.0,
                    breakdown={"embed": c.embed_s, "final": c.final_s, "pre": c.layers * c.pre_s,
                               "approx": c.layers * c.approx_s if sp else 0.0, "exact": c.layers * c.exact_s,
                               "check": c.layers * c.check_s if sp else 0.0,
                               "post": c.layers * c.post_s if not sp else float(np.sum(1.0 - rates)) * c.post_s,
                               "post_receiver": c.layers * c.post_receiver_s if sp else 0.0,
                               "hops": c.layers * (c.hop_to_s + c.hop_back_s) if sp else 0.0, "host": c.host_s,
                               "hit_layers": float(rates.sum()) if sp else 0.0})


def plan(problem: Problem, config: StrategyConfig, rng: np.random.Generator | None = None) -> StepPlan:
    """One token as tasks: per layer the sender's part, the receiver's in parallel with the exact attention,
    and on a miss the sender's post-attention operators (without ``rng``: their expected share)."""
    c = loop_costs(problem, config)
    sp = bool(config.option("sp"))
    rates = layer_rates(config, c.layers)
    a, b = config.device, config.draft_device or config.device
    tasks: list[Task] = []

    def work(name: str, device: str, seconds: float, phase: str, deps) -> str:
        tasks.append(Task(name=name, kind="compute", resource=device, phase=phase, fixed_s=max(seconds, 0.0),
                          deps=tuple(deps), op=name.split("/")[-1]))
        return name

    last = work("embed", a, c.embed_s, "decode", ())
    for k in range(c.layers):
        if not sp:
            last = work(f"L{k}/layer", a, c.pre_s + c.exact_s + c.post_s, "decode", (last,))
            continue
        last = work(f"L{k}/pre_approx", a, c.pre_s + c.approx_s, "decode", (last,))
        exact = work(f"L{k}/exact_check", a, c.exact_s + c.check_s, "attention", (last,))
        tasks.append(delay_task(f"L{k}/to_receiver", c.hop_to_s, "transfer", (last,)))
        spec = work(f"L{k}/post_speculative", b, c.post_receiver_s, "draft", (f"L{k}/to_receiver",))
        tasks.append(delay_task(f"L{k}/to_sender", c.hop_back_s, "transfer", (spec,)))
        miss = (1.0 - rates[k]) if rng is None else float(rng.random() >= rates[k])
        last = work(f"L{k}/post_exact", a, miss * c.post_s, "recompute", (exact, f"L{k}/to_sender"))
    last = work("final", a, c.final_s, "decode", (last,))
    if c.host_s > 0:
        tasks.append(delay_task("host", c.host_s, "accept", (last,), a))
    return StepPlan(tasks=tuple(tasks), tokens_accepted=1, tokens_proposed=0, count_phase="decode", count_device=a)
