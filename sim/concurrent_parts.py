"""Compute parts on several devices at once, in closed form: their end times under the engine's fluid
contention for a shared memory domain (:mod:`sim.engine` rule 4), vectorised over configurations. What a
column split across two devices (``hcmp``, :mod:`sim.strategies.hcmp_step`) prices; one device's step is
:mod:`sim.closed_form`.
"""

from __future__ import annotations

import numpy as np

from hwmodels.contention import standalone_bw
from hwmodels.errors import HetSpecError
from hwmodels.platform import Platform


def max_min_shares(ceiling, demands) -> np.ndarray:
    """Max-min fair shares of ``ceiling`` over the last axis of ``demands`` (vectorised
    :func:`hwmodels.contention.share_bandwidth`): nobody gets more than its demand, the rest is
    split equally among the unsatisfied."""
    d = np.asarray(demands, dtype=float)
    cap = np.broadcast_to(np.asarray(ceiling, dtype=float), d.shape[:-1]).copy()
    n = d.shape[-1]
    order = np.argsort(d, axis=-1, kind="stable")
    sorted_d = np.take_along_axis(d, order, axis=-1)
    shares_sorted = np.zeros_like(sorted_d)
    remaining = cap
    for j in range(n):
        fair = remaining / (n - j)
        take = np.minimum(sorted_d[..., j], fair)
        shares_sorted[..., j] = take
        remaining = remaining - take
    out = np.empty_like(d)
    np.put_along_axis(out, order, shares_sorted, axis=-1)
    return out


def concurrent_seconds(platform: Platform, devices: tuple[str, ...], fixed_s, compute_s, nbytes) -> np.ndarray:
    """End times of compute parts that start together, one per device, under the engine's fluid
    contention (:mod:`sim.engine` rule 4), vectorised over leading axes.

    ``devices[i]`` runs part i (distinct devices); ``fixed_s``, ``compute_s``, ``nbytes`` have shape
    ``[..., n]``. Each part spends ``fixed_s`` without bandwidth, then its body progresses at
    ``min(1 / compute_s, share / nbytes)``, where shares are recomputed whenever a body starts or
    ends. This is exactly what the engine does with these tasks, so a strategy whose step is a
    sequence of such groups separated by barriers (a column split with a sync after each
    operator) has a closed form equal to its engine time.
    """
    if len(set(devices)) != len(devices):
        raise HetSpecError("concurrent_seconds: one part per device")
    fixed = np.asarray(fixed_s, dtype=float)
    comp = np.asarray(compute_s, dtype=float)
    byt = np.asarray(nbytes, dtype=float)
    fixed, comp, byt = np.broadcast_arrays(fixed, comp, byt)
    n = len(devices)
    if fixed.shape[-1] != n:
        raise HetSpecError(f"concurrent_seconds: {n} devices but arrays end in {fixed.shape[-1]}")
    alone = np.array([standalone_bw(platform, d) for d in devices])
    safe_c = np.where(comp > 0, comp, 1.0)
    with np.errstate(over="ignore"):
        demand = np.where(byt <= 0, 0.0, np.where(comp > 0, np.minimum(alone, byt / safe_c), alone))
    if n == 2:
        dom0, dom1 = platform.domain_of(devices[0]), platform.domain_of(devices[1])
        shared = dom0 is not None and dom1 is not None and dom0.name == dom1.name
        ceiling = dom0.bw_bytes_per_s * dom0.contention_efficiency if shared else np.inf
        return _two_parts(fixed, comp, byt, demand, ceiling)
    domains: dict[str, list[int]] = {}
    for i, d in enumerate(devices):
        dom = platform.domain_of(d)
        domains.setdefault(dom.name if dom else f"<own:{d}>", []).append(i)
    ceilings = {m.name: m.bw_bytes_per_s * m.contention_efficiency for m in platform.memory_domains}

    t = np.zeros(fixed.shape[:-1])
    wait = fixed.copy()                                   # fixed time still to spend
    left = np.where((comp > 0) | (byt > 0), 1.0, 0.0)     # body work still to do (fraction)
    end = np.where((left == 0) & (wait == 0), 0.0, np.nan)
    for _ in range(2 * n + 1):
        running = (wait <= 0) & (left > 0)
        share = np.where(running, demand, 0.0)
        for name, idx in domains.items():
            if name not in ceilings or len(idx) < 2:
                continue
            sub = share[..., idx]
            streaming = (sub > 0).sum(axis=-1)
            fair = max_min_shares(ceilings[name], sub)
            contended = (streaming >= 2) & (sub.sum(axis=-1) > ceilings[name])
            share[..., idx] = np.where(contended[..., None], fair, sub)
        rate = np.full(fixed.shape, np.inf)
        rate = np.where(comp > 0, 1.0 / safe_c, rate)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rate = np.minimum(rate, np.where(byt > 0, share / np.where(byt > 0, byt, 1.0), np.inf))
        until = np.where(wait > 0, wait, np.where(left > 0, left / np.where(rate > 0, rate, np.nan), np.inf))
        step = np.nanmin(np.where(np.isnan(until), np.inf, until), axis=-1)
        active = np.isfinite(step)
        if not active.any():
            break
        dt = np.where(active, step, 0.0)[..., None]
        was_waiting = wait > 0
        wait = np.where(was_waiting, np.maximum(wait - dt, 0.0), wait)
        # a body whose remaining time is the step ends now (exactly, even at an infinite rate)
        finishing = running & (until <= dt * (1.0 + 1e-12))
        with np.errstate(invalid="ignore"):
            progressed = np.where(running, np.where(finishing, 0.0, np.maximum(left - rate * dt, 0.0)), left)
        progressed = np.where(running & (progressed <= 1e-12), 0.0, progressed)
        t = t + dt[..., 0]
        newly_done = np.isnan(end) & (wait <= 0) & (progressed == 0)
        end = np.where(newly_done, t[..., None], end)
        left = progressed
    return end


def _body_rate(comp: np.ndarray, byt: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Work fraction per second of a body: min(1 / compute_s, share / nbytes) (inf if no work)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r_c = np.where(comp > 0, 1.0 / np.where(comp > 0, comp, 1.0), np.inf)
        r_m = np.where(byt > 0, share / np.where(byt > 0, byt, 1.0), np.inf)
    return np.minimum(r_c, r_m)


def _two_parts(fixed: np.ndarray, comp: np.ndarray, byt: np.ndarray, demand: np.ndarray, ceiling: float) -> np.ndarray:
    """:func:`concurrent_seconds` for two parts, in closed form (same result, no event loop).

    The first body to start runs alone until the second starts; both then run at their contended
    rates until one ends; the other finishes alone.
    """
    a, b = fixed[..., 0], fixed[..., 1]
    ca, cb, ba, bb = comp[..., 0], comp[..., 1], byt[..., 0], byt[..., 1]
    da, db = demand[..., 0], demand[..., 1]
    has_a, has_b = (ca > 0) | (ba > 0), (cb > 0) | (bb > 0)
    ra, rb = _body_rate(ca, ba, da), _body_rate(cb, bb, db)            # alone
    both_stream = (da > 0) & (db > 0) & (da + db > ceiling)
    lo = np.minimum(da, db)
    s_lo = np.minimum(lo, ceiling / 2.0)
    s_hi = np.minimum(np.maximum(da, db), ceiling - s_lo)
    sa = np.where(both_stream, np.where(da <= db, s_lo, s_hi), da)
    sb = np.where(both_stream, np.where(da <= db, s_hi, s_lo), db)
    qa, qb = _body_rate(ca, ba, sa), _body_rate(cb, bb, sb)            # together
    with np.errstate(divide="ignore", invalid="ignore"):
        ta, tb = np.where(has_a, 1.0 / ra, 0.0), np.where(has_b, 1.0 / rb, 0.0)   # alone durations

        def finish(first_start, first_alone, first_rate_alone, first_rate_tog, second_start, second_rate_alone,
                   second_rate_tog, has_second):
            """End times when the 'first' body starts no later than the 'second'."""
            gap = second_start - first_start
            first_done_alone = (~has_second) | (first_alone <= gap)
            left_first = np.maximum(1.0 - first_rate_alone * gap, 0.0)
            t_first_tog = left_first / first_rate_tog          # time to finish the first if both run
            t_second_tog = 1.0 / second_rate_tog
            first_ends_first = t_first_tog <= t_second_tog
            end_first_tog = np.where(first_ends_first, second_start + t_first_tog,
                                     second_start + t_second_tog
                                     + np.maximum(left_first - first_rate_tog * t_second_tog, 0.0) / first_rate_alone)
            end_second_tog = np.where(first_ends_first,
                                      second_start + t_first_tog
                                      + np.maximum(1.0 - second_rate_tog * t_first_tog, 0.0) / second_rate_alone,
                                      second_start + t_second_tog)
            end_first = np.where(first_done_alone, first_start + first_alone, end_first_tog)
            end_second = np.where(first_done_alone, second_start + (1.0 / second_rate_alone), end_second_tog)
            return end_first, end_second

        a_first = a <= b
        ea1, eb1 = finish(a, ta, ra, qa, b, rb, qb, has_b)             # A starts first
        eb2, ea2 = finish(b, tb, rb, qb, a, ra, qa, has_a)             # B starts first
    end_a = np.where(has_a, np.where(a_first, ea1, ea2), a)
    end_b = np.where(has_b, np.where(a_first, eb1, eb2), b)
    return np.stack([end_a, end_b], axis=-1)
