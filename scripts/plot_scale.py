#!/usr/bin/env python3
"""plot_scale.py plots the control traffic per site against the number of
sites for the old and the new measurement scheme, from the JSON reports of
detour-lab sim (one file per run, as scripts/bench-scale.sh writes them,
named SCHEME-SITES.json) and, optionally, rows computed from the old
scheme's message sizes where it was too slow to simulate (a JSON list of
{"scheme", "sites", "control_kbit_per_site", "computed": true}).

usage: plot_scale.py DIR OUT.png [COMPUTED.json]
"""

import glob
import json
import os
import re
import sys


def load(d):
    rows = []
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        if not re.fullmatch(r"(old|new)-\d+\.json", os.path.basename(f)):
            continue  # other runs kept beside them (in-band, jitter, loss)
        try:
            r = json.load(open(f))
        except (OSError, ValueError):
            continue
        if isinstance(r, dict) and "control_kbit_per_site" in r:
            rows.append(r)
    return rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = [r for r in load(sys.argv[1]) if not r.get("loss_percent")]
    if len(sys.argv) > 3:
        rows += json.load(open(sys.argv[3]))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 6))
    styles = {"old": ("tab:red", "old: every link at one rate, whole rows every second"),
              "new": ("tab:blue", "new: relays probed often, others slowly; delta link state")}
    for scheme, (colour, label) in styles.items():
        sim = sorted((r["sites"], r["control_kbit_per_site"], r["control_kbit_per_site_max"]) for r in rows
                     if r["scheme"] == scheme and not r.get("computed"))
        for r in rows:
            if r["scheme"] == scheme and not r.get("computed") and r.get("pairs_outside_bound"):
                ax.annotate("%d of %d pairs\noutside the bound" % (r["pairs_outside_bound"], r["pairs"]),
                            (r["sites"], r["control_kbit_per_site"]), textcoords="offset points", xytext=(8, -4),
                            fontsize=7, color=colour)
        comp = sorted((r["sites"], r["control_kbit_per_site"]) for r in rows if r["scheme"] == scheme and r.get("computed"))
        if sim:
            xs, ys, mx = zip(*sim)
            ax.plot(xs, ys, "o-", color=colour, label=label + " (mean)")
            ax.plot(xs, mx, "v:", color=colour, alpha=0.6, label=scheme + ": largest site")
        if comp:
            xs, ys = zip(*comp)
            before = [p for p in sim if p[0] < xs[0]]
            if before:
                xs, ys = (before[-1][0],) + xs, (before[-1][1],) + ys
            ax.plot(xs, ys, "s--", color=colour, alpha=0.5, mfc="none", label=scheme + ": computed from message sizes")
    ax.plot([100], [300], "k*", ms=10, label="targets: 300 kbit/s at 100, 1 Mbit/s at 300")
    ax.plot([300], [1000], "k*", ms=10)
    ax.set_xlabel("sites")
    ax.set_ylabel("control traffic per site, kbit/s on the wire")
    ax.set_yscale("log")
    ax.set_xticks([10, 54, 100, 200, 300])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax.set_title("detour control traffic per site (simulator, azure-based topology, 1 ms jitter)", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
