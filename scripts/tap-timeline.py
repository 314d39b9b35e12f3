#!/usr/bin/env python3
"""tap-timeline.py shows, every 2 ms, what a gateway's TAP was offered and read.

Run it inside a gateway namespace while traffic flows through it:

  ip netns exec dbo-fujisawa scripts/tap-timeline.py --secs 3 --port h1 --tap detour0

Every 2 ms it reads three counters of that namespace: the packets the host
port of the bridge received from the host (what the sending host offered),
the packets the overlay process read from the TAP (the TAP's tx_packets,
counted as they are read) and the TAP's tx_dropped (frames that found the
TAP's queue full). It prints, around every interval with drops, the rate
offered, the rate read and the drops.
"""

import argparse
import time


def counter(dev, name):
    with open(f"/sys/class/net/{dev}/statistics/{name}") as f:
        return int(f.read())


def sample(port, tap, secs, step):
    out = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        out.append((time.monotonic(), counter(port, "rx_packets"), counter(tap, "tx_packets"),
                    counter(tap, "tx_dropped")))
        time.sleep(step)
    return out


def rows(samples):
    """One row per interval: start offset, offered and read rates, drops."""
    t0, res = samples[0][0], []
    for a, b in zip(samples, samples[1:]):
        dt = b[0] - a[0]
        res.append((a[0] - t0, (b[1] - a[1]) / dt, (b[2] - a[2]) / dt, b[3] - a[3]))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--secs", type=float, default=3)
    ap.add_argument("--port", default="h1", help="the bridge port of the sending host")
    ap.add_argument("--tap", default="detour0")
    ap.add_argument("--context", type=int, default=6, help="intervals shown before each one with drops")
    args = ap.parse_args()
    rs = rows(sample(args.port, args.tap, args.secs, 0.002))
    total = sum(r[3] for r in rs)
    print(f"{len(rs)} intervals, {total} frames dropped at the TAP")
    shown = -1
    for i, r in enumerate(rs):
        if r[3] == 0:
            continue
        if i - args.context > shown + 1:
            print("--")
        for j in range(max(shown + 1, i - args.context), i + 2):
            if j < len(rs):
                t, offered, read, dropped = rs[j]
                print(f"t={t:6.3f}s offered {offered / 1e3:4.0f} kpps  read {read / 1e3:4.0f} kpps  dropped {dropped:4d}")
                shown = j


if __name__ == "__main__":
    main()
