#!/usr/bin/env python3
"""Plot the results of `detour-lab experiment lanman2017`.

Usage: plot_experiment.py RESULTS_DIR

Reads samples.csv, continuous.csv, routes.csv and truth.csv from the
directory and writes:
  boxplots-OVERLAY.png  read (R) and write (W) latency per server, one panel
                        per phase, as in Figure 6 of the LANMAN 2017 paper
                        (box: quartiles, with the median written above it;
                        whiskers: the span of 99 % of the values; points:
                        the rest), on a logarithmic axis so that a local
                        read of 1 ms, a 65 ms read and a 900 ms outlier all
                        show
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

# matplotlib comes from the system Python or from the environment
# scripts/install-deps.sh makes in /opt/detour/python; without it here, the
# script runs itself again with that environment's Python.
PLOT_VENV = "/opt/detour/python"
try:
    import matplotlib
except ImportError:
    venv_python = os.path.join(PLOT_VENV, "bin", "python3")
    if os.path.exists(venv_python) and os.path.realpath(sys.prefix) != os.path.realpath(PLOT_VENV):
        os.execv(venv_python, [venv_python] + sys.argv)
    raise

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

SERVERS = ["CLU", "BOR", "LAN"]
# The phases and their plain titles: the load is TCP cross traffic filling
# the link between CLU (the leader) and LAN (the client).
PHASES = [
    ("a", "idle"),
    ("b", "CLU-LAN loaded, direct paths"),
    ("c", "CLU-LAN loaded, detour may reroute"),
]
# Latency ticks of the logarithmic axes, in ms, and denser ones for an
# axis spanning less than a factor of 30.
TICKS = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
DENSE_TICKS = [5, 10, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 1500, 2000, 3000, 5000]


def log_axis(ax, lo, hi):
    """A logarithmic latency axis from lo to hi ms with plain-number ticks."""
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ticks = DENSE_TICKS if hi / lo < 30 else TICKS
    ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if lo <= t <= hi]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax.yaxis.set_minor_locator(NullLocator())


def y_range(values):
    """The y range of a log axis holding every value, with some room above
    for the median labels."""
    vals = [x for v in values for x in v if x > 0]
    if not vals:
        return 0.5, 1000
    lo = max(min(TICKS), min(vals) * 0.7)
    hi = max(vals) * 1.8
    return lo, hi


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


def box_panel(ax, cells, phase, title, yr):
    """One phase: a box per server and operation, its median written above."""
    values, labels, positions = [], [], []
    for i, server in enumerate(SERVERS):
        for j, op in enumerate(["read", "write"]):
            v = cells.get((phase, server, op), [])
            if not v:
                continue
            values.append(v)
            labels.append("%s %s" % ("R" if op == "read" else "W", server))
            positions.append(i * 3 + j)
    if values:
        bp = ax.boxplot(values, positions=positions, whis=(0.5, 99.5), widths=0.8, patch_artist=True,
                        medianprops={"color": "black"}, flierprops={"markersize": 3})
        for k, box in enumerate(bp["boxes"]):
            box.set_facecolor("#9ecae1" if labels[k].startswith("R") else "#fdae6b")
        for pos, v in zip(positions, values):
            s = sorted(v)
            med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
            q3 = s[min(len(s) - 1, (3 * len(s)) // 4)]
            ax.text(pos, q3 * 1.15, "%.0f" % med if med >= 10 else "%.1f" % med,
                    ha="center", va="bottom", fontsize=8, fontweight="bold",
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})
        ax.set_xticks(positions)
        ax.set_xticklabels(labels, fontsize=8)
    log_axis(ax, *yr)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def phase_title(ov, phase, title):
    """The panel title: phase (c) is a repeat of (b) for an overlay that
    has no other path to take."""
    if phase == "c" and ov != "detour":
        return "CLU-LAN loaded, again (%s has no other path)" % ov
    return title


def plot_boxes(data, overlays, out):
    yr = y_range([v for ov in overlays for v in data[ov].values()])
    note = "median in ms above each box; R = read, W = write through that server; log scale"
    fig, axes = plt.subplots(len(overlays), 3, figsize=(13, 3.2 * len(overlays) + 0.8), sharey=True, squeeze=False)
    for row, ov in enumerate(overlays):
        for col, (phase, title) in enumerate(PHASES):
            box_panel(axes[row][col], data[ov], phase, "%s: %s" % (ov, phase_title(ov, phase, title)), yr)
        axes[row][0].set_ylabel("latency (ms)")
    fig.suptitle("ZooKeeper latency from a client at LAN, leader CLU\n" + note, fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "boxplots.png"), dpi=110)
    plt.close(fig)
    for ov in overlays:
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
        for col, (phase, title) in enumerate(PHASES):
            box_panel(axes[col], data[ov], phase, phase_title(ov, phase, title), yr)
        axes[0].set_ylabel("latency (ms)")
        fig.suptitle("%s: ZooKeeper latency from a client at LAN, leader CLU\n%s" % (ov, note), fontsize=10)
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
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
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
        log_axis(ax, *y_range([[float(r["latency_ms"]) for r in s]]))
        ax.text(load, ax.get_ylim()[1] * 0.9, " cross traffic starts", fontsize=8, va="top")
        ax.set_ylabel("latency (ms, log scale)")
        ax.set_title("%s: reads and writes from LAN through CLU, the leader, one after the other" % ov)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
        ax.grid(alpha=0.3)
        if changes:
            plot_routes(axes[1], changes, t_end)
        links = defaultdict(list)
        for r in truth:
            if r["overlay"] == ov:
                links["%s->%s" % (r["from"], r["to"])].append((float(r["t_s"]), float(r["expected_ms"])))
        for name, pts in sorted(links.items()):
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=name, linewidth=1)
        ax2.set_ylabel("link delay (ms)")
        ax2.set_xlabel("time (s)")
        ax2.set_title("one-way delay of the links, as the emulator applies it", fontsize=9)
        ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, frameon=False)
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
