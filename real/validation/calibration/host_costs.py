"""Host-side work of HetSpec's decode loops beyond their forwards, fitted from the probe loops of
``hetspec calibrate``: per method, per step, per draft pass or per verified token.

What is fitted is what the validation measures as host work: the probe decode's time outside its
traced forwards (its acceptance records plus untraced Python, :attr:`real.decode.common.DecodeResult.host_s`).
The forwards themselves, the Python inside a draft pass included, are priced by the device's fixed
costs per operator (``cache_loop_op_overhead_us`` for a resident model's passes in a loop), so the
per-pass Python is not counted twice. A sample without the measure (an older calibration, a GPU's loops) falls
back to the loop's time beyond the model's price of its forwards (the residual). Dovetail's loop, a
heterogeneous probe, is fitted the same way with its own terms and price
(:mod:`real.validation.calibration.dovetail_probe`).

On a roofline device the loop's traced forwards also cost more, or less, than the roofline prices them
(a draft-tree's passes run between the Python of its tree, which leaves the caches and threads colder than
a forward in a loop of its own): what they take beyond that price (a round's first pass priced with the lag
it fed, as the strategies price it), read against the ``ar`` loop of the same rounds (the forwards divided
by ar's over their price, so a probe that ran as a whole faster or slower than its price leaves none), is
fitted by the same terms as ``<method>_forward_<term>`` (:data:`hwmodels.platform.FORWARD_COST`, at least
0: a loop whose forwards run faster than priced keeps the price; ``ar`` has none), which only a roofline
device's pricing adds (:func:`sim.strategies.base.host_seconds`); a profiled device measures its passes
inside the loop itself."""

from __future__ import annotations

from hwmodels.platform import FORWARD_COST, Device, Platform
from sim.op_timing import is_profiled

#: Host costs fitted per method: which per-step counts explain the loop's time beyond its forwards.
#: (chain and draft-tree: passes and verified tokens move together, so the per-token part is folded
#: into the per-pass one; medusa has no draft passes.)
HOST_COST_TERMS = {"ar": ("step",), "chain": ("step", "pass"), "draft-tree": ("step", "pass"),
                   "medusa": ("step", "node")}


def _model_price(device: Device, sample, context: int, dtype: str | None = None) -> float:
    """What the model prices for the forwards (and heads) of one probe decode step on ``device``, the probe
    models in ``dtype`` (the one their loops ran in; None: the probe's own, fp32)."""
    from real.validation.calibration.microbench import LOOP_SHAPES, probe_specs
    from sim.pricing import forward_seconds, medusa_heads_seconds

    spec, draft = probe_specs(LOOP_SHAPES[sample.shape])
    if dtype is not None:      # e.g. a GPU's fp16 profile: its device has no fp32 peak to price fp32 with
        spec, draft = spec.with_dtype(dtype), draft.with_dtype(dtype)
    # the probe models have a demo target's width: priced by the rules every model's passes are
    platform = Platform(name="probe", description="", devices={device.name: device})
    q = max(int(round(sample.nodes)), 1)
    price = float(forward_seconds(spec, platform, device.name, q, context))
    one, two = (float(forward_seconds(draft, platform, device.name, t, context)) for t in (1, 2))
    # each pass feeds one token; a round's first pass after one that accepted everything feeds two (the lag)
    price += sample.passes * one + sample.lag_tokens * (two - one)
    if sample.heads:
        price += medusa_heads_seconds(spec, platform, device.name, 1, sample.heads, batched=True)
    return price


def _tokens(rows) -> str:
    """The new tokens the probe loops of ``rows`` decoded (one number when they agree)."""
    return "/".join(str(n) for n in sorted({s.new_tokens for s in rows}))


def _nonneg_fit(xs, ys, terms: tuple[str, ...]) -> dict[str, float]:
    """Least squares ``y = a + b x`` (or ``y = a``) with a, b >= 0."""
    import numpy as np

    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(terms) == 1 or np.ptp(xs) == 0:
        return {terms[0]: max(float(np.mean(ys)), 0.0)}
    b, a = np.polyfit(xs, ys, 1)
    if b < 0:
        return {terms[0]: max(float(np.mean(ys)), 0.0), terms[1]: 0.0}
    if a < 0:
        return {terms[0]: 0.0, terms[1]: max(float(np.dot(xs, ys) / np.dot(xs, xs)), 0.0)}
    return {terms[0]: float(a), terms[1]: float(b)}


def _host_seconds(device: Device, sample, context: int, dtype: str | None, price) -> tuple[float, str]:
    """Seconds per step of ``sample``'s loop to fit as host work, and what they are."""
    if sample.host_s is None:
        return sample.step_s - price(device, sample, context, dtype), "residual"
    return sample.host_s, "measured"


def fit_host_costs(device: Device, loops, statistic: str, by: str, on: str,
                   dtype: str | None = None, terms: dict | None = None, price=None,
                   shape: str = "wide") -> tuple[dict, dict]:
    """The loop costs of ``device`` (:class:`hwmodels.platform.LoopCosts`) and their sources: per method,
    the probe loops' time outside their traced forwards (a sample without it: the step time minus the
    model's price of its forwards and heads, the probe priced in ``dtype``, the one its loops ran in;
    None: the probe's fp32), fitted per step / per pass / per verified token; on a roofline device also the
    traced forwards' time beyond its price of them (``<method>_forward_<term>``, see the module docstring).
    ``statistic``: how the sources name the samples' statistic (e.g. "median of 3 interleaved rounds x 2").
    ``terms`` (default :data:`HOST_COST_TERMS`) and ``price(device, sample, context, dtype)`` (default: the
    single-device loops' forwards and heads) fit another loop's samples the same way. ``shape``: the probe
    (:data:`real.validation.calibration.microbench.LOOP_SHAPES` key) whose samples are fitted."""
    from real.decode import ALL_DECODER_MODULES
    from real.validation.calibration.microbench import LOOP_PROMPT_TOKENS, LOOP_SHAPES, REFERENCE_LAYERS

    probe = LOOP_SHAPES[shape]

    # the forwards' excess over their price: the single-device loops priced by a roofline device
    roofline = terms is None and price is None and not is_profiled(device)
    price = price or _model_price
    costs, sources = {}, {}
    # the ar loop's traced forwards over their price, timed in the same rounds as the others: a loop's forwards
    # are read against it, so a probe that ran as a whole faster or slower than the micro-benchmarks that
    # priced it leaves no excess (a speedup over ar is what the excess moves)
    ar = next((s for s in loops if s.method == "ar" and s.shape == shape and s.host_s is not None), None)
    ar_rate = ((ar.step_s - ar.host_s) / price(device, ar, LOOP_PROMPT_TOKENS + ar.new_tokens // 2, dtype)
               if roofline and ar is not None else None)
    for method, terms in (HOST_COST_TERMS if terms is None else terms).items():
        rows = [s for s in loops if s.method == method and s.shape == shape]
        if not rows:
            continue
        host = [_host_seconds(device, s, LOOP_PROMPT_TOKENS + s.new_tokens // 2, dtype, price) for s in rows]
        seconds = [h for h, _ in host]
        measured = all(kind == "measured" for _, kind in host)
        what = ("its time outside the traced forwards (acceptance records and untraced Python)" if measured
                else "minus the model's price of its forwards and heads, the rest")
        forwards = roofline and measured and method != "ar" and ar_rate is not None
        x = [s.passes if "pass" in terms else s.nodes for s in rows]
        knobs = ", ".join(str(s.knob) for s in rows) if method != "ar" else "-"
        loop = (f"measured {by}: HetSpec's {method} decode loop ({ALL_DECODER_MODULES[method][0]}) on probe models "
                f"(hidden {probe['hidden']}, vocabulary {probe['vocab']}: "
                f"a {REFERENCE_LAYERS}-layer target, a 1-layer draft; configs {knobs}; "
                f"{_tokens(rows)} new tokens after a {LOOP_PROMPT_TOKENS}-token prompt) costs "
                + ", ".join(f"{1e6 * s.step_s:.1f}" for s in rows) + " us per step; ")
        parts = [("", what, seconds)]
        if forwards:
            beyond = [(s.step_s - h) / ar_rate - price(device, s, LOOP_PROMPT_TOKENS + s.new_tokens // 2, dtype)
                      for s, h in zip(rows, seconds)]
            parts.append((FORWARD_COST, f"its traced forwards over the ar loop's forwards' share of their price "
                                        f"({ar_rate:.3f}, the same rounds), beyond the roofline's price of them",
                          beyond))
        for infix, text, ys in parts:
            for term, value in _nonneg_fit(x, ys, terms).items():
                key = f"{method}{infix or '_'}{term}"
                costs[key] = round(value * 1e6, 3)
                sources[key] = (loop + f"{text} (" + ", ".join(f"{1e6 * r:.1f}" for r in ys)
                                + f" us) is fitted as {' + '.join(terms)} (least squares, >= 0; {statistic}) {on}")
    return costs, sources


def loop_costs_of(device: Device, loops, statistic: str, by: str, on: str, dtype: str | None = None):
    """The :class:`hwmodels.platform.LoopCosts` of ``device`` from its probe ``loops``: the wide probe's fit, and
    the narrow probe's where the loops ran on it (None without loops)."""
    from hwmodels.platform import LoopCosts
    from real.validation.calibration.microbench import LOOP_SHAPES, probe_specs

    if not loops:
        return None
    fits = {shape: fit_host_costs(device, loops, statistic, by, on, dtype, shape=shape) for shape in ("wide", "narrow")}
    if not fits["wide"][0]:
        return None
    lm_head = {shape: probe_specs(LOOP_SHAPES[shape])[0].lm_head_params for shape in fits}
    sources = {}
    for shape, prefix in (("wide", ""), ("narrow", "narrow.")):
        s = LOOP_SHAPES[shape]
        sources |= {f"{prefix}{k}": v for k, v in fits[shape][1].items()} | {f"{prefix}probe_lm_head": (
            f"vocabulary {s['vocab']} x hidden {s['hidden']}: the LM head of the {shape} decode-loop probe "
            "(real.validation.calibration.microbench.LOOP_SHAPES) whose loops these costs were fitted on")}
    narrow = fits["narrow"][0]
    return LoopCosts(device=device.name, costs_us=fits["wide"][0], sources=sources, lm_head=lm_head["wide"],
                     narrow_us=narrow, narrow_lm_head=lm_head["narrow"] if narrow else None)
