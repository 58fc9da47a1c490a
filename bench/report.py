"""Turning a run's figures into what people read: goals, tables, the plot and the result files.

:func:`report` prints the table and the goals and writes ``latest.json``; :func:`render` writes
``latest.md`` and ``latest.png`` from that JSON document, so ``python -m bench.run --render`` can
redraw them without measuring (:func:`figure_from_json` reads the figures back). The goals are
reported, never enforced: a missed goal does not fail the run. ``bench/peers.py`` reuses the
table functions and :func:`run_line` for its own files.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._harness import DOCS_PLOT, RESULTS, Figure, Settings, find
from .crawl import crawl_goals
from .fleet import fleet_goals
from .main_content import main_goals

# -- goals ----------------------------------------------------------------------------------------


def goals(
    figures: Sequence[Figure], s: Settings, peer_best: float | None = None
) -> list[dict[str, Any]]:
    """The issue's goals, each with the measured value and whether it was met (reported only)."""
    out: list[dict[str, Any]] = []

    def add(goal: str, value: float, met: bool, detail: str) -> None:
        out.append({"goal": goal, "value": value, "met": met, "detail": detail})

    def times(goal: str, value: float, base: float, what: str) -> None:
        """A goal of ``value`` at least 1.8x ``base``, the figure of the run named ``what``."""
        ratio = value / base
        add(goal, ratio, ratio >= 1.8, f"{ratio:.2f}x the {what} ({base:,.0f}/s)")

    try:
        w1 = find(figures, "W1", "sqlite", "trio-batch", "throughput").median
        add("W1 on SQLite >= 15,000 targets/s", w1, w1 >= 15_000, f"{w1:,.0f} targets/s")
        try:
            bare = find(figures, "W1", "sqlite", "bare", "throughput").median
            times(
                "W1 on SQLite >= 1.8x the bare baseline (the fallback goal)",
                w1,
                bare,
                "bare baseline",
            )
        except KeyError:
            pass
        if peer_best is not None:
            add(
                "W1 on SQLite >= 6x the best peer",
                w1 / peer_best,
                w1 / peer_best >= 6,
                f"{w1 / peer_best:.1f}x",
            )
    except KeyError:
        pass
    try:
        pg = find(figures, "W1", "postgres", "trio-batch", "throughput").median
        add("W1 on PostgreSQL >= 3,000 targets/s", pg, pg >= 3_000, f"{pg:,.0f} targets/s")
        # Issue 35 states the goal against "PostgreSQL's own per-write baseline" and describes
        # the bare one (a commit a write); its figures imply a baseline of 2,000-2,100/s, the
        # bare one's rate here. The baseline through the store is no goal: it is the engine's
        # overhead over the store's own write path (the "vs baseline" column), ~1x once a
        # single outcome no longer read the whole targets index (1,150-1,450/s before).
        base = find(figures, "W1", "postgres", "bare", "throughput").median
        times("W1 on PostgreSQL >= 1.8x its bare baseline (issue 35)", pg, base, "bare baseline")
    except KeyError:
        pass
    try:
        pg_p99 = find(figures, "W3", "postgres", "trio-batch", "small job p99").median
        sqlite_p99 = find(figures, "W3", "sqlite", "trio-batch", "small job p99").median
        add(
            "W3 p99 on PostgreSQL within 1.15x SQLite's (issue 35)",
            pg_p99 / sqlite_p99,
            pg_p99 / sqlite_p99 <= 1.15,
            f"{pg_p99 / sqlite_p99:.2f}x ({pg_p99:.2f} against {sqlite_p99:.2f})",
        )
    except KeyError:
        pass
    try:
        floor = find(figures, "W2", "none", "floor", "efficiency").median
    except KeyError:
        floor = 0.97
    for fig in figures:
        if fig.workload == "W2" and fig.system == "trio-batch":
            add(
                f"W2 efficiency >= 0.97 or the no-store floor ({fig.store})",
                fig.median,
                fig.median >= min(0.97, floor),
                f"{fig.median:.3f} (floor {floor:.3f})",
            )
        if fig.workload == "W3" and fig.name == "small job p99":
            bound = fig.extra["bound"]
            add(
                f"W3 p99 within the round-robin bound ({fig.store})",
                fig.median,
                fig.median <= bound,
                f"{fig.median:.2f} <= {bound:.2f} target durations",
            )
        if fig.workload == "W4" and fig.name.startswith("ratio"):
            add(
                f"W4 time per target {fig.name} <= 1.3 ({fig.store})",
                fig.median,
                fig.median <= 1.3,
                f"{fig.median:.2f}x",
            )
    for goal, value, met, detail in [
        *fleet_goals(figures),
        *main_goals(figures),
        *crawl_goals(figures),
    ]:
        add(goal, value, met, detail)
    return out


# -- tables ---------------------------------------------------------------------------------------


def fmt(value: float, unit: str) -> str:
    """``value`` with as many digits as its ``unit`` deserves."""
    if unit in ("targets/s", "reads/s", "bytes"):
        return f"{value:,.0f}"
    if unit == "µs":
        return f"{value:,.1f}"
    if unit in ("ideal/wall", "x", "target durations"):
        return f"{value:.3f}" if unit == "ideal/wall" else f"{value:.2f}"
    return f"{value:.4g}"


def table_rows(figures: Sequence[Figure]) -> list[list[str]]:
    """One row per figure under ``HEADER``; W1/W2 engine rows carry their ratio to the baseline."""
    rows = []
    for fig in figures:
        ratio = ""
        if fig.system == "trio-batch" and fig.workload in ("W1", "W2"):
            try:
                base = find(figures, fig.workload, fig.store, "baseline", fig.name).median
                ratio = f"{fig.median / base:.2f}"
            except KeyError:
                pass
        rows.append(
            [
                fig.workload,
                fig.store,
                fig.system,
                fig.name,
                fmt(fig.median, fig.unit),
                fmt(min(fig.values), fig.unit),
                fmt(max(fig.values), fig.unit),
                fig.unit,
                ratio,
            ]
        )
    return rows


HEADER = ["workload", "store", "system", "figure", "median", "min", "max", "unit", "vs baseline"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """The rows in aligned columns, for the terminal."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """The rows as a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def goals_markdown(items: Sequence[dict[str, Any]]) -> str:
    """The goals as a Markdown table with their verdicts."""
    lines = ["| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {g['detail']} | {'yes' if g['met'] else 'NO'} |" for g in items]
    return "\n".join(lines)


def run_line(doc: dict[str, Any]) -> str:
    """One line saying when, how and where a run was made."""
    v, m = doc["versions"], doc["machine"]
    load = ", ".join(f"{x:.1f}" for x in m["load_average_at_start"])
    return (
        f"Run {doc['created']} ({doc['mode']}): `{doc['command']}`; trio-batch "
        f"{v['trio_batch']} (git {v.get('git', '?')}), trio {v['trio']}, SQLite {v['sqlite']}, "
        f"Python {m['python']}, {m['cpus']} CPUs ({m['cpu']}), load average at start {load}."
    )


# -- the plot -------------------------------------------------------------------------------------


def plot(figures: Sequence[Figure], path: Path, title: str) -> None:
    """Four panels: W1 throughput, W2 efficiency, W3 latency against the bound, W4 scale.

    matplotlib is imported here, not at the top: it is in the bench group only, and the table
    and the goals must work without it (``--no-plot``). Each panel is a function of its own, so
    one workload's drawing can change without reading the other three.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    stores = sorted({f.store for f in figures if f.system == "trio-batch"})

    _plot_throughput(axes[0][0], figures)
    _plot_efficiency(axes[0][1], figures)
    _plot_fairness(axes[1][0], figures, stores)
    _plot_scale(axes[1][1], figures, stores)

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bars(ax: Any, figures: Sequence[Figure], workload: str, name: str, ylabel: str) -> None:
    """One bar per system and store for the figure ``name`` of ``workload``, min to max as the
    error bar; trio-batch in blue, the baselines and peers in grey so the eye finds ours."""
    labels: list[str] = []
    meds: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for f in figures:
        if f.workload == workload and f.name == name:
            labels.append(f"{f.system}\n{f.store}")
            meds.append(f.median)
            lo.append(f.median - min(f.values))
            hi.append(max(f.values) - f.median)

    ax.bar(
        range(len(meds)),
        meds,
        yerr=[lo, hi],
        capsize=4,
        color=["tab:blue" if "trio-batch" in lb else "tab:gray" for lb in labels],
    )
    ax.set_xticks(range(len(meds)), labels, fontsize=8)
    ax.set_ylabel(ylabel)


def _plot_throughput(ax: Any, figures: Sequence[Figure]) -> None:
    """W1 on a log scale: PostgreSQL and the memory store lie more than tenfold apart."""
    _bars(ax, figures, "W1", "throughput", "targets/s (log)")
    ax.set_yscale("log")
    ax.set_title("W1 noop durable: 2,000 targets, 2 workers")


def _plot_efficiency(ax: Any, figures: Sequence[Figure]) -> None:
    """W2 against the 0.97 goal (the red line), zoomed in near 1.0 where the differences are;
    the axis reaches lower only when a repeat fell lower, so no bar is cut off."""
    _bars(ax, figures, "W2", "efficiency", "ideal / wall")
    ax.set_title("W2 I/O-bound: 20 ms targets (1.0 = ideal)")
    ax.axhline(0.97, color="tab:red", linestyle="--", linewidth=1)

    w2_low = min((min(f.values) for f in figures if f.workload == "W2"), default=0.8)
    ax.set_ylim(min(0.8, w2_low - 0.02), 1.02)


def _plot_fairness(ax: Any, figures: Sequence[Figure], stores: Sequence[str]) -> None:
    """W3's small job, p50 beside p99 per store, under the round-robin bound it must stay within
    (one line: the bound comes from the settings, so it is the same for every store)."""
    w3_stores = [k for k in stores if any(f.workload == "W3" and f.store == k for f in figures)]
    xs = range(len(w3_stores))
    p50 = [find(figures, "W3", k, "trio-batch", "small job p50") for k in w3_stores]
    p99 = [find(figures, "W3", k, "trio-batch", "small job p99") for k in w3_stores]

    ax.bar([x - 0.2 for x in xs], [f.median for f in p50], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [f.median for f in p99], width=0.4, label="p99")
    if p99:
        ax.axhline(
            p99[0].extra["bound"],
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label="round-robin bound",
        )

    ax.set_xticks(list(xs), w3_stores)
    ax.set_ylabel("target durations")
    ax.set_title("W3 fairness: small job submit-to-done")
    ax.legend(fontsize=8)


def _plot_scale(ax: Any, figures: Sequence[Figure], stores: Sequence[str]) -> None:
    """W4, one line per store of the time per target against the live jobs (log): a flat line
    is the goal, a store that slows down as jobs pile up shows as a rising one."""
    for k in stores:
        pts = sorted(
            (f.extra["live_jobs"], f.median)
            for f in figures
            if f.workload == "W4" and f.store == k and f.name.startswith("time per target")
        )
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=k)

    ax.set_xscale("log")
    ax.set_xlabel("live jobs")
    ax.set_ylabel("µs per target")
    ax.set_ylim(bottom=0)
    ax.set_title("W4 scale: 4 noop targets per job")
    ax.legend(fontsize=8)


# -- the result files -----------------------------------------------------------------------------


def report(
    figures: list[Figure],
    s: Settings,
    mode: str,
    notes: list[str],
    out_dir: Path,
    *,
    started: dict[str, Any],
    make_plot: bool = True,
) -> dict[str, Any]:
    """Print the table and write ``latest.json``, ``latest.md`` and ``latest.png``.

    ``started`` holds the machine and versions as they were when the run began (the keys
    ``machine`` and ``versions``).
    """
    rows = table_rows(figures)
    gl = goals(figures, s)
    doc: dict[str, Any] = {
        "schema": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": mode,
        "command": shlex.join(["python", "-m", "bench.run", *sys.argv[1:]]),
        "machine": started["machine"],
        "versions": started["versions"],
        "settings": dataclasses.asdict(s),
        "figures": [f.to_json() for f in figures],
        "goals": gl,
        "notes": notes,
    }
    print(text_table(HEADER, rows))
    print()
    for g in gl:
        print(f"{'met ' if g['met'] else 'MISS'}  {g['goal']}: {g['detail']}")
    for note in notes:
        print(f"note: {note}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    render(doc, figures, out_dir, make_plot=make_plot)
    return doc


def render(doc: dict[str, Any], figures: list[Figure], out_dir: Path, *, make_plot: bool) -> None:
    """Write ``latest.md`` (and ``latest.png``, copied to the docs) from a run's report."""
    rows = table_rows(figures)
    gl = doc["goals"]
    notes = doc["notes"]
    mode = doc["mode"]
    md = [
        run_line(doc),
        "",
        markdown_table(HEADER, rows),
        "",
        goals_markdown(gl),
        "",
        *[f"- {n}" for n in notes],
    ]
    (out_dir / "latest.md").write_text("\n".join(md) + "\n")
    if make_plot:
        title = f"trio-batch {mode} run {doc['created']} ({doc['versions'].get('git', '')})"
        plot(figures, out_dir / "latest.png", title)
        if out_dir.resolve() == RESULTS.resolve():
            # The docs page shows this plot beside the table of the same run (latest.md).
            DOCS_PLOT.write_bytes((out_dir / "latest.png").read_bytes())


def figure_from_json(data: dict[str, Any]) -> Figure:
    """A figure as ``Figure.to_json`` wrote it."""
    return Figure(
        data["workload"],
        data["store"],
        data["system"],
        data["name"],
        data["unit"],
        list(data["values"]),
        data["higher_is_better"],
        dict(data.get("extra", {})),
    )
