"""What a measured operator profile says about itself in words: the notes ``hetspec calibrate --device D``
writes into the profile (the graph replay, the contention guard) and the summary it prints
(:mod:`real.validation.profiler.profile_device` measures and writes the profile)."""

from __future__ import annotations

from pathlib import Path


def replay_note(prof) -> str:
    """What one replay of a CUDA graph costs beyond its kernels, as the profile's notes and summary say it
    (``prof``: a :class:`real.validation.profiler.profile_device.DeviceProfile`)."""
    return (f"graph replay: one replay of a graph holding a one-element add took {prof.graph_replay_us:.1f} us beyond "
            "the add's time inside a graph; a replayed forward pays it once, and the step graph does not price it")


def contention_note(summary: dict) -> str:
    """What the contention guard did to the operator rows and the models' forwards, as the profile's notes and
    summary say it."""
    from real.run.contention import guard_counts, guard_head

    return (f"{guard_head(summary)}; the operator rows and the models' whole forwards measured in batches of "
            f"about 2 s, a batch per measurement: {guard_counts(summary)}")


def summary_lines(prof, csv_path: Path, toml_path: Path) -> list[str]:
    """The lines ``hetspec calibrate --device D`` prints about the profile it measured and wrote (``prof``: a
    :class:`real.validation.profiler.profile_device.DeviceProfile`)."""
    lines = [f"{prof.name} ({prof.device}), {prof.dtype}: {len(prof.rows)} operator rows in {prof.seconds:.0f} s",
             f"  launch: eager {prof.launch_us['eager']:.2f} us"
             + (f", graph {prof.launch_us['graph']:.2f} us per operator inside a graph (a replay "
                f"{prof.graph_replay_us:.1f} us)" if "graph" in prof.launch_us else " (no graphs on this device)")
             + ("" if prof.forward_launch_us is None else
                f"; inside the real forward {prof.forward_launch_us:.2f} us per launch (what the rows carry)"),
             f"  copy {prof.copy_gbps:.1f} GB/s, best one-token linear {prof.gemv_gbps:.1f} GB/s, "
             f"best linear {prof.gemm_tflops * 1e3:.1f} GFLOP/s"]
    lines += [f"  {k}: {v['latency_us']:.1f} us, {v['bw_gbps']:.1f} GB/s" for k, v in prof.links.items()]
    if prof.phase_seconds:
        lines.append("  time: " + ", ".join(f"{k} {v:.0f} s" for k, v in prof.phase_seconds.items()))
    lines += forward_rest_lines(csv_path)
    lines += [f"  {op} of {spec.name} inside the decode loop ({context} cached tokens), by pass of a round, times "
              "the same pass standalone: " + ", ".join(f"{x:.2f}" for x in ratios)
              + f"; {target.name}'s verification {verify:.2f}"
              for op, target, spec, context, ratios, verify in prof.draft_passes]
    lines += loop_cost_lines(toml_path)
    lines += [f"  {contention_note(prof.contention)}"] if prof.contention else []
    lines += [f"wrote {csv_path} and {toml_path}"]
    return lines


def forward_rest_lines(csv_path: Path) -> list[str]:
    """One line per model with ``forward_rest`` rows in the written profile: what its eager forward took beyond its
    operators' rows, at a few token counts."""
    from hwmodels.profile import read_profile

    lines = []
    for (table, shape), tab in sorted(read_profile(csv_path).tables.items()):
        if table != "forward_rest":
            continue
        _, tokens, _, eager, _ = tab.lines[0]
        shown = [i for i, t in enumerate(tokens) if t in (1, 2, 4, 8, 16, 64, 256)] or [0, len(tokens) - 1]
        lines.append(f"  eager forward of {shape} beyond its rows: "
                     + ", ".join(f"{eager[i]:.0f} us at {tokens[i]}" for i in shown) + " tokens")
    return lines


def loop_cost_lines(toml_path: Path) -> list[str]:
    """One line per device of the written platform with loop costs: the decode loops' host work per method."""
    from hwmodels.loader import load_platform_file

    return [f"  decode loops beyond their forwards on {name}, us: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(costs.costs_us.items()))
            for name, costs in load_platform_file(toml_path).loop_costs.items()]
