#!/usr/bin/env python3
"""Plot the results of `detour experiment lanman2017`.

Usage: plot_experiment.py RESULTS_DIR

Reads samples.csv, continuous.csv, routes.csv and truth.csv from the
directory and writes:
  boxplots-OVERLAY.png  read (R) and write (W) latency per server, one panel
                        per phase, as in Figure 6 of the LANMAN 2017 paper
                        (box: quartiles; whiskers: the span of 99 % of the
                        values; points: the rest)
  boxplots.png          the same for every overlay, one row each
  timeseries-OVERLAY.png the continuous run, as in Figure 7: every
                        operation's latency over time, the start of the
                        cross traffic, the path detour used in each
                        direction between LAN and CLU, and the emulator's
                        delay of the loaded links
"""

import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERVERS = ["CLU", "BOR", "LAN"]
PHASES = [("a", "(a) idle WAN"), ("b", "(b) CLU<->LAN loaded (detour: direct pinned)"), ("c", "(c) loaded, nobody touches the overlay")]


def y_cap(data):
    """A common y limit: 1.15 times the largest 99th percentile of any cell,
    so that a few multi-second outliers do not flatten every box; the
    points above it are counted in each panel's title."""
    cap = 0
    for cells in data.values():
        for v in cells.values():
            s = sorted(v)
            if s:
                cap = max(cap, s[min(len(s) - 1, int(0.99 * len(s)))])
    return cap * 1.15 if cap else None


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def static_samples(rows):
    """Returns {overlay: {(phase, server, op): [latency_ms]}} and the overlays in order."""
    data = defaultdict(lambda: defaultdict(list))
    overlays = []
    for r in rows:
        if r["phase"] == "continuous" or r["error"]:
            continue
        if r["overlay"] not in overlays:
            overlays.append(r["overlay"])
        data[r["overlay"]][(r["phase"], r["server"], r["op"])].append(float(r["latency_ms"]))
    return data, overlays


def box_panel(ax, cells, phase, title, cap=None):
    values, labels, positions = [], [], []
    above = 0
    for i, server in enumerate(SERVERS):
        for j, op in enumerate(["read", "write"]):
            v = cells.get((phase, server, op), [])
            if not v:
                continue
            values.append(v)
            if cap:
                above += sum(1 for x in v if x > cap)
            labels.append("%s %s" % ("R" if op == "read" else "W", server))
            positions.append(i * 3 + j)
    if values:
        bp = ax.boxplot(values, positions=positions, whis=(0.5, 99.5), widths=0.8, patch_artist=True)
        for k, box in enumerate(bp["boxes"]):
            box.set_facecolor("#9ecae1" if labels[k].startswith("R") else "#fdae6b")
        ax.set_xticks(positions)
        ax.set_xticklabels(labels, rotation=45, fontsize=8)
    if cap:
        ax.set_ylim(0, cap)
        if above:
            title += " [%d above %.0f ms]" % (above, cap)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def plot_boxes(data, overlays, out):
    cap = y_cap(data)
    fig, axes = plt.subplots(len(overlays), 3, figsize=(13, 3.4 * len(overlays)), sharey=True, squeeze=False)
    for row, ov in enumerate(overlays):
        for col, (phase, title) in enumerate(PHASES):
            box_panel(axes[row][col], data[ov], phase, "%s: %s" % (ov, title), cap)
        axes[row][0].set_ylabel("latency (ms)")
    fig.suptitle("ZooKeeper from a client at LAN through each server (leader CLU)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "boxplots.png"), dpi=110)
    plt.close(fig)
    for ov in overlays:
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
        for col, (phase, title) in enumerate(PHASES):
            box_panel(axes[col], data[ov], phase, title, cap)
        axes[0].set_ylabel("latency (ms)")
        fig.suptitle("%s: ZooKeeper read (R) and write (W) latency from LAN" % ov)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "boxplots-%s.png" % ov), dpi=110)
        plt.close(fig)


def route_steps(changes, key, t_end):
    """Returns the step series (times, path labels) of one direction."""
    ts, labels = [], []
    for r in changes:
        if (r["from"], r["to"]) != key:
            continue
        path = r["path"].split(">")
        ts.append(float(r["t_s"]))
        labels.append("direct" if len(path) <= 2 else "via " + "+".join(path[1:-1]))
    if ts:
        ts.append(t_end)
        labels.append(labels[-1])
    return ts, labels


def plot_routes(ax, changes, t_end):
    """Draws each direction's path over time as a step line on categories."""
    series = [route_steps(changes, k, t_end) for k in [("LAN", "CLU"), ("CLU", "LAN")]]
    cats = ["direct"] + sorted({l for _, ls in series for l in ls if l != "direct"})
    for (ts, ls), name, color, off in zip(series, ["LAN->CLU", "CLU->LAN"], ["#31a354", "#756bb1"], [0.06, -0.06]):
        if ts:
            ax.step(ts, [cats.index(l) + off for l in ls], where="post", color=color, label=name, linewidth=1.3)
    ax.set_yticks(range(len(cats)))
    ax.set_yticklabels(cats, fontsize=8)
    ax.set_ylim(-0.5, len(cats) - 0.5)
    ax.set_ylabel("detour's path")
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    ax.grid(alpha=0.3)


def plot_timeseries(out):
    samples = read_csv(os.path.join(out, "continuous.csv"))
    routes = read_csv(os.path.join(out, "routes.csv"))
    truth = read_csv(os.path.join(out, "truth.csv"))
    for ov in sorted({r["overlay"] for r in samples}):
        s = [r for r in samples if r["overlay"] == ov and not r["error"]]
        if not s:
            continue
        changes = [r for r in routes if r["overlay"] == ov]
        rows = 3 if changes else 2
        ratios = [3, 1, 1.4] if changes else [3, 1.4]
        fig, axes = plt.subplots(rows, 1, figsize=(11, 7.5 if changes else 6.5), sharex=True,
                                 gridspec_kw={"height_ratios": ratios})
        ax, ax2 = axes[0], axes[-1]
        for op, marker, color in [("read", "o", "#3182bd"), ("write", "^", "#e6550d")]:
            pts = [(float(r["t_s"]), float(r["latency_ms"])) for r in s if r["op"] == op]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=9, marker=marker, color=color, label=op)
        load = float(s[0]["load_start_s"])
        t_end = max(float(r["t_s"]) for r in s)
        for a in axes:
            a.axvline(load, color="black", linestyle="--", linewidth=1)
        ax.text(load, ax.get_ylim()[1] * 0.97, " cross traffic started", fontsize=8, va="top")
        ax.set_ylabel("latency (ms)")
        ax.set_title("%s: alternating reads and writes LAN -> CLU (leader)" % ov)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
        if changes:
            plot_routes(axes[1], changes, t_end)
        links = defaultdict(list)
        for r in truth:
            if r["overlay"] == ov:
                links["%s->%s" % (r["from"], r["to"])].append((float(r["t_s"]), float(r["expected_ms"])))
        for name, pts in sorted(links.items()):
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=name, linewidth=1)
        ax2.set_ylabel("one-way delay (ms)\n(emulator truth)")
        ax2.set_xlabel("time (s)")
        ax2.legend(loc="upper left", fontsize=7, ncol=4)
        ax2.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "timeseries-%s.png" % ov), dpi=110)
        plt.close(fig)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    data, overlays = static_samples(read_csv(os.path.join(out, "samples.csv")))
    if overlays:
        plot_boxes(data, overlays, out)
    plot_timeseries(out)
    print("plots written to %s" % out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
