#!/usr/bin/env python3
"""Plot the results of `detour-lab experiment locality`.

Usage: plot_locality.py RESULTS_DIR

Reads summary.csv, samples.csv and events.csv from the directory and
writes:
  fetch_vs_size.png  median fetch time against object size for each tier
                     (local disk, nearby memory, remote memory, and local
                     memory as a baseline), the band from p50 to p99
                     shaded, with each policy's median marked and coloured
                     by where its reads went, as in Figures 1 and 3 of the
                     data-locality paper
  tiers_100k.png     the 100 KB fetch time of every tier and policy (p50
                     bar, p99 tick), as in the paper's Figure 1
  dynamics.png       the dynamics phase, when it ran: every read's latency
                     over time per policy row, coloured by the replica
                     that served it, with the changes marked
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

TIERS = [("local-disk", "tab:red", "local disk (capped)"),
         ("nearby-memory", "tab:blue", "nearby memory (MXP)"),
         ("remote-memory", "tab:gray", "remote memory (IAD)"),
         ("local-memory", "tab:green", "local memory (baseline)")]
CLASS_COLOUR = {"local": "tab:red", "nearby": "tab:blue", "remote": "tab:gray"}
POLICY_MARKER = {"predicted": "*", "local-first": "s", "static-zone": "^", "nearest-rtt": "v"}


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def where(row):
    """The class most of a summary row's reads went to."""
    counts = {c: int(row["reads_" + c]) for c in ("local", "nearby", "remote")}
    return max(counts, key=counts.get)


def fetch_vs_size(summary, out):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    by = defaultdict(list)
    for r in summary:
        by[(r["policy"], r["mode"])].append(r)
    for name, colour, label in TIERS:
        rows = sorted(by.get((name, "tier"), []), key=lambda r: int(r["size_bytes"]))
        if not rows:
            continue
        x = [int(r["size_bytes"]) for r in rows]
        p50 = [float(r["p50_ms"]) for r in rows]
        p99 = [float(r["p99_ms"]) for r in rows]
        style = "--" if name == "local-memory" else "-"
        ax.plot(x, p50, style, color=colour, marker="o", label=label)
        ax.fill_between(x, p50, p99, color=colour, alpha=0.12)
    # Policies: detour's own rows when the run had them, else the client's.
    modes = {m for (_, m) in by}
    mode = "detour" if "detour" in modes else "client"
    for policy, marker in POLICY_MARKER.items():
        rows = by.get((policy, mode), [])
        for i, r in enumerate(sorted(rows, key=lambda r: int(r["size_bytes"]))):
            ax.scatter([int(r["size_bytes"]) * (1.08 + 0.06 * list(POLICY_MARKER).index(policy))],
                       [float(r["p50_ms"])], marker=marker, s=110 if marker == "*" else 55,
                       color=CLASS_COLOUR[where(r)], edgecolor="black", zorder=5,
                       label=f"{policy} ({mode})" if i == 0 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("object size (bytes)")
    ax.set_ylabel("fetch time, p50 (ms); band to p99")
    ax.set_title("Fetch time by tier and size, client at ZRH\n(markers: policies, coloured by the replica they read)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fetch_vs_size.png"), dpi=120)
    plt.close(fig)


def tiers_100k(summary, out):
    rows = [r for r in summary if r["size_bytes"] == "100000"]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [f'{r["policy"]}\n({r["mode"]})' for r in rows]
    p50 = [float(r["p50_ms"]) for r in rows]
    p99 = [float(r["p99_ms"]) for r in rows]
    colours = [CLASS_COLOUR[where(r)] for r in rows]
    ax.bar(range(len(rows)), p50, color=colours)
    ax.scatter(range(len(rows)), p99, marker="_", s=300, color="black", label="p99")
    for i, v in enumerate(p50):
        ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("fetch time of 100 KB (ms)")
    ax.set_title("100 KB from every tier and policy (bar: p50, coloured by replica; tick: p99)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tiers_100k.png"), dpi=120)
    plt.close(fig)


def dynamics(samples, events, out):
    dyn = [s for s in samples if s["phase"] != "static" and not s["error"]]
    if not dyn:
        return
    t0 = min(int(s["start_unix_ns"]) for s in dyn)
    modes = {s["mode"] for s in dyn}
    mode = "detour" if "detour" in modes else "client"
    policies = [p for p in POLICY_MARKER if any(s["policy"] == p and s["mode"] == mode for s in dyn)]
    fig, axes = plt.subplots(len(policies), 1, figsize=(9, 2.2 * len(policies) + 0.5), sharex=True, squeeze=False)
    for ax, policy in zip(axes[:, 0], policies):
        pts = [s for s in dyn if s["policy"] == policy and s["mode"] == mode]
        for cls, colour in CLASS_COLOUR.items():
            sel = [s for s in pts if s["class"] == cls]
            ax.scatter([(int(s["start_unix_ns"]) - t0) / 1e9 for s in sel], [float(s["latency_ms"]) for s in sel],
                       s=8, color=colour, label=cls)
        for e in events:
            x = (int(e["at_unix_ns"]) - t0) / 1e9
            ax.axvline(x, color="black", lw=0.8, ls=":")
            ax.text(x, ax.get_ylim()[1] if ax.get_yscale() == "linear" else 1, e["event"], rotation=90, fontsize=7, va="bottom")
        ax.set_yscale("log")
        ax.set_ylabel(f"{policy}\n({mode}) ms", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper right", title="replica", title_fontsize=7)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle("Dynamics: read latency and the replica that served each read")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "dynamics.png"), dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    summary = read_csv(os.path.join(out, "summary.csv"))
    fetch_vs_size(summary, out)
    tiers_100k(summary, out)
    dynamics(read_csv(os.path.join(out, "samples.csv")), read_csv(os.path.join(out, "events.csv")), out)


if __name__ == "__main__":
    main()
