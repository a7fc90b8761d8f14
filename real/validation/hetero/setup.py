"""What the heterogeneous experiments of ``hetspec validate`` share: their settings, the workers
they run on, the platform devices those workers stand for, and prompts and progress bars."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from hwmodels.errors import HetSpecError

#: Output files of the section (next to report.md).
JSON_FILE = "hetero.json"
MARKDOWN_FILE = "hetero.md"


@dataclass(frozen=True)
class HeteroSettings:
    eval_prompts: int
    prompt_tokens: int
    max_new_tokens: int
    repeats: int
    ratios: tuple[float, ...]
    hcmp_width: int                 # Medusa tree tokens verified per step (the real path's default)
    dovetail_width: int
    dovetail_depth: int
    dovetail_top_k: int
    tau_prompts: int                # calibration prompts the dovetail tokens per round are measured on
    alspec_lambdas: tuple[float, ...]
    alspec_windows: tuple[int, ...]
    alspec_prompts: int
    stream_prompts: int
    all_core_placements: bool = True   # dovetail placements with ``cpu`` (all cores) as drafter or verifier
    label: str = "quick"
    alspec_calib_prompts: int = 4      # calibration prompts the alspec hit rates and agreement are measured on
    alspec_repeats: int = 3            # interleaved repeats of the alspec timings
    alspec_agreement: float = 0.99     # agreement floor: (S, lambda) that keep at least this share of exact tokens
    stream_fractions: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25, 0.0)   # shares of the target's layers resident
    calibration_prompts: int = 48      # acceptance of --hetero-only on its own (as the main validation's)
    stream_probe_rounds: int = 5       # rounds of the storage and streaming-loop probes re-run before the streaming
    fresh_processes: bool = True       # hcmp, dovetail, alspec: each repeat in a process of its own (real.run.repeats)
    contention_guard: bool = False     # hcmp, dovetail, alspec on CPU workers: retake a run the cores were slowed under


#: 11 ratios (0, 0.1, ..., 1), Dovetail's tree (top-k 10, depth 7, 16 tokens), ALSpec's lambda range
#: (Table 1: 0.05-0.25; 0 = exact) and windows from 4 to 32 tokens of the ~100-token demo contexts.
QUICK = HeteroSettings(eval_prompts=4, prompt_tokens=64, max_new_tokens=64, repeats=3,
                       ratios=tuple(round(0.1 * i, 1) for i in range(11)), hcmp_width=16,
                       dovetail_width=16, dovetail_depth=7, dovetail_top_k=10, tau_prompts=8,
                       alspec_lambdas=(0.0, 0.05, 0.1, 0.2, 0.3), alspec_windows=(4, 8, 16, 32), alspec_prompts=3,
                       stream_prompts=2, label="quick")
#: Full: 48 evaluation prompts in 3 interleaved repeats (tokens per step of a dozen prompts differ from the
#: calibration prompts' by several percent from the prompt sample alone: the hcmp section's tokens-per-step
#: check); Dovetail's tokens per round from the main validation's 64 calibration prompts (16 gave 6.28 where the
#: evaluation prompts decoded 5.96 in one run); weight
#: streaming, slower per token, decodes 24 (12 gave 4.10 tokens per round against 3.80 from the calibration
#: prompts in the same run).
FULL = replace(QUICK, eval_prompts=48, max_new_tokens=96, repeats=3, tau_prompts=96, alspec_prompts=6,
               stream_prompts=24, alspec_calib_prompts=8, calibration_prompts=64, stream_probe_rounds=9, label="full",
               contention_guard=True)


def settings_for(quick: bool) -> HeteroSettings:
    return QUICK if quick else FULL


# ---------------------------------------------------------------------------- workers and platforms
def default_pair() -> tuple[str, str]:
    """The two workers of the ratio sweep: ``cuda:0`` + ``cpu`` where CUDA exists, else the first two cores."""
    from real.run.worker import allowed_cores, cuda_devices

    if cuda_devices():
        return "cuda:0", "cpu"
    cores = allowed_cores()
    if len(cores) < 2:
        raise HetSpecError("the heterogeneous validation needs two workers: this process may use one core")
    return f"cpu{cores[0]}", f"cpu{cores[1]}"


def placements(pair: tuple[str, str], all_cores: bool = True) -> tuple[tuple[str, str], ...]:
    """(drafter, verifier) placements compared for dovetail (``all_cores``: also with ``cpu`` = every core)."""
    a, b = pair
    if a.startswith("cuda"):
        return ((a, b), (b, a), (a, a), (b, b))
    return ((a, b), (b, a), (a, a)) + ((("cpu", "cpu"), (a, "cpu"), ("cpu", a)) if all_cores else ())


def with_worker_links(platform, latency_s: float | None = None):
    """``platform`` plus a unified link between every two devices of one memory domain that have none
    (latency: ``latency_s`` or that of the platform's first unified link; zero-copy bandwidth = the domain's)."""
    from hwmodels.platform import Link

    unified = [l for l in platform.links if l.kind == "unified"]
    base = unified[0] if unified else None
    lat_us = latency_s * 1e6 if latency_s is not None else (base.latency_us if base else 0.0)
    added = []
    for domain in platform.memory_domains:
        devs = list(domain.devices)
        for i, a in enumerate(devs):
            for b in devs[i + 1:]:
                if not platform.has_link(a, b, "unified"):
                    added.append(Link(name=f"{a}-{b}", kind="unified", src=a, dst=b,
                                      description="zero-copy hand-over between worker threads (added by validation)",
                                      bw_gbps=domain.bw_gbps, latency_us=lat_us, efficiency=1.0,
                                      sources={"latency_us": "the platform's calibrated hand-off between threads"}))
    return replace(platform, links=tuple(platform.links) + tuple(added))


def with_sync_latency(platform, a: str, b: str, latency_s: float):
    """``platform`` with the unified link between ``a`` and ``b`` at ``latency_s`` (the split step's barrier)."""
    links = tuple(replace(l, latency_us=latency_s * 1e6,
                          sources={**l.sources, "latency_us": "measured: PairBarrier round trip between the two "
                                                              "workers (real.hetero.workers.barrier_round_trip_s)"})
                  if l.kind == "unified" and l.connects(a, b) else l for l in platform.links)
    return replace(platform, links=links)


def default_cpu_pair() -> tuple[str, str]:
    from real.run.worker import allowed_cores

    cores = allowed_cores()
    return (f"cpu{cores[0]}", f"cpu{cores[-1]}") if len(cores) > 1 else ("cpu", f"cpu{cores[0]}")


# ---------------------------------------------------------------------------- helpers
def with_repeats(settings: HeteroSettings, repeats: int | None) -> HeteroSettings:
    """``settings`` with ``repeats`` interleaved repeats of every timed section (the ALSpec grid's too);
    unchanged for None."""
    return settings if repeats is None else replace(settings, repeats=int(repeats), alspec_repeats=int(repeats))


def fresh_processes(settings: HeteroSettings, pair) -> bool:
    """Whether a section measures each repeat in a process of its own: on CPU workers only (a GPU run
    measures in this process, as the single-device validation does)."""
    return settings.fresh_processes and not any(str(w).startswith("cuda") for w in pair)


def section_guard(settings: HeteroSettings, pair, platform, guard=None):
    """The contention guard of the timed sections (:mod:`real.run.contention`): ``guard``, else one on the
    process's torch threads with its reference timed now; None
    where the settings ask for none or a worker is a GPU."""
    import torch

    from real.validation.trust import contention_guard

    if not settings.contention_guard or any(str(w).startswith("cuda") for w in pair):
        return None
    if guard is not None:
        return guard
    threads = torch.get_num_threads()
    return contention_guard(threads)


def split_prompts(models, split: str, n: int, tokens: int) -> list[list[int]]:
    from real.train.corpus import prompts as corpus_prompts

    return [list(p) for p in corpus_prompts(models.tokenizer, split, n, tokens, seed=0)]


def progress_bar(total: int, desc: str, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="run", disable=not progress, file=sys.stderr)


def timed_sweep(settings: HeteroSettings, pair, n: int, repeats: int, measure, payload, desc: str, guard,
                progress: bool) -> tuple[list, dict | None]:
    """A section's timed runs: ``measure(payload, i, repeat, first)`` for each of ``n`` settings, ``repeats``
    times, interleaved (:func:`real.run.repeat_processes.interleaved_repeats`; each repeat in a process of its own on
    CPU workers), guarded by ``guard``, with a progress bar. The samples by setting, and what the guard did
    (:func:`real.run.contention.guard_summary`; None without a guard)."""
    from real.run.contention import guard_summary
    from real.run.repeat_processes import interleaved_repeats

    log: list = []
    with progress_bar(n * repeats, desc, progress) as bar:
        samples = interleaved_repeats(n, repeats, measure, payload, bar.update, fresh_processes(settings, pair),
                                      guard=guard, log=log)
    return samples, guard_summary(guard, log)
