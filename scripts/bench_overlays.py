#!/usr/bin/env python3
"""bench_overlays.py measures the data planes side by side on the testbed.

For each underlay (plain kernel links, then the user-space WAN emulator for
reference) it brings up the leon-japan sites once per overlay (none = the
raw underlay between gateways, kernel VXLAN, tinc, detour encrypted,
detour-plain) and measures from Fujisawa to Seoul, directly and, for detour,
through the relay Inagi (pinned with `detour route pin` on both ends):

  - TCP throughput, one flow and four flows (iperf3),
  - UDP datagrams per second received with 64-byte and large payloads
    (iperf3 -b 0), and the loss when sending at 80 % of that maximum,
    with the gateways' overlay processes on one CPU and both iperf3 on the
    others (CoreLayout; --udp-layout free leaves them to the scheduler),
  - ping RTT at idle and under the single TCP flow,
  - CPU seconds per GB carried by each gateway's overlay process
    (/proc/PID/stat; kernel overlays work in softirq context and are not
    attributed), and the resident memory of each daemon.

Each figure is measured --runs times; the table shows the median and the
range. It is written, with the raw samples and a plot, to
results/bench/DATE/ and printed. Everything runs in the testbed's own
namespaces (198.18.0.0/15) and is torn down, by PID, even on failure.

usage: bench_overlays.py --bin bin/detour [--lab bin/detour-lab] [--runs 3] [--secs 3] [--udp-layout pinned|free] [--out DIR]
"""

import argparse
import atexit
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PREFIX = "dbo-"
SRC, RELAY, DST = "Fujisawa", "Inagi", "Seoul"
OVERLAYS = ["none", "vxlan", "tinc", "detour", "detour-plain"]
# The hosts' MTU is 1400 on every overlay: the largest UDP payload that is
# not fragmented is 1400 - 28.
LARGE = 1372
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Hooks for other engineers: every executable scripts/bench-overlays.d/*
# runs with the testbed up, after the built-in measurements of a case, and
# may print one JSON object per line {"metric": NAME, "value": NUMBER}.
HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-overlays.d")


class Testbed:
    """A testbed brought up with the detour-lab binary (lab), whose agents
    run the detour binary (bin), always torn down."""

    def __init__(self, binary, lab, state):
        self.bin, self.lab, self.state = binary, lab, state
        self.env = dict(os.environ, DETOUR_TESTBED_STATE=state, DETOUR_TESTBED_PREFIX=PREFIX, DETOUR_BIN=binary)
        self.up_now = False

    def up(self, scenario, overlay, underlay):
        cmd = [self.lab, "testbed", "up", scenario, "--overlay", overlay, "--underlay", underlay]
        self.up_now = True
        subprocess.run(cmd, env=self.env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        st = json.loads(subprocess.run([self.lab, "testbed", "status", "--json"], env=self.env, check=True,
                                       capture_output=True, timeout=30).stdout)
        self.sites = {s["name"]: s for s in st["sites"]}
        self.procs = {p["name"]: p["pid"] for p in st.get("procs") or []}

    def down(self):
        if self.up_now:
            subprocess.run([self.lab, "testbed", "down"], env=self.env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
            self.up_now = False

    def gw(self, site):
        return self.sites[site]["gateway"]

    def host(self, site):
        return self.sites[site]["hosts"][0]

    def daemon_pid(self, site):
        """The PID of the overlay process on a site's gateway, if any."""
        name = site.lower().replace("-", "_")
        for prefix in ("agent-", "tinc-", "wg-", "easytier-"):
            if self.procs.get(prefix + name):
                return self.procs[prefix + name]
        return None


class Children:
    """Background processes started by the harness, stopped by PID."""

    def __init__(self):
        self.procs = []

    def start(self, args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p)


CHILDREN = Children()


def netns(ns, *args):
    return ["ip", "netns", "exec", ns, *args]


def cpu_ticks(pid):
    """utime + stime of a process in clock ticks (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


PORT = [5300]


def iperf(src_ns, dst_ns, dst_addr, args, secs, prefix=()):
    """Runs one iperf3 test, each iperf3 behind the command prefix, and returns its JSON result."""
    PORT[0] += 1
    port = str(PORT[0])
    srv = CHILDREN.start(netns(dst_ns, *prefix, "iperf3", "-s", "-1", "-p", port))
    try:
        for _ in range(50):
            r = subprocess.run(netns(src_ns, *prefix, "iperf3", "-c", dst_addr, "-p", port, "-t", str(secs), "-J", *args),
                               capture_output=True, timeout=secs + 20)
            out = json.loads(r.stdout or b"{}")
            if "end" in out and "error" not in out:
                return out
            if "refused" not in out.get("error", ""):
                raise RuntimeError(f"iperf3 {args}: {out.get('error', r.stderr.decode()[-300:])}")
            time.sleep(0.05)
        raise RuntimeError("iperf3 server did not start")
    finally:
        CHILDREN.stop(srv)


def ping_avg(ns, addr, count, interval="0.01"):
    r = subprocess.run(netns(ns, "ping", "-n", "-q", "-c", str(count), "-i", interval, "-W", "1", addr),
                       capture_output=True, text=True, timeout=count + 10)
    for line in r.stdout.splitlines():
        if "min/avg" in line:
            return float(line.split("=")[1].split("/")[1])
    return None


def tcp_with_load_ping(tb, ends, secs, pids):
    """One TCP flow, with a ping alongside it and CPU accounting."""
    src_ns, dst_ns, dst_addr = ends
    before = {s: cpu_ticks(p) for s, p in pids.items()}
    n = max(10, int(secs * 50))
    pinger = subprocess.Popen(netns(src_ns, "ping", "-n", "-q", "-c", str(n), "-i", "0.02", "-W", "1", dst_addr),
                              stdout=subprocess.PIPE, text=True)
    CHILDREN.procs.append(pinger)
    try:
        out = iperf(src_ns, dst_ns, dst_addr, [], secs)
        ptxt = pinger.communicate(timeout=secs + 10)[0]
    finally:
        CHILDREN.stop(pinger)
    after = {s: cpu_ticks(p) for s, p in pids.items()}
    rx = out["end"]["sum_received"]
    gb = rx["bytes"] / 1e9
    cpu = {s: (after[s] - before[s]) / CLK_TCK / gb for s in pids} if gb > 0 else {}
    load = None
    for line in ptxt.splitlines():
        if "min/avg" in line:
            load = float(line.split("=")[1].split("/")[1])
    return rx["bits_per_second"] / 1e9, load, cpu


# UDP_SOCKBUF is the socket buffer iperf3 asks for in the UDP tests (-w),
# for every overlay alike. With the default 208 KB the receiving iperf3,
# sharing two cores with the sender and the gateways, drops datagrams
# whenever it is descheduled for a millisecond or two: those losses are
# the measuring tool's, not the overlay's. raise_sockbuf_max lets the
# kernel grant it.
UDP_SOCKBUF = 4 << 20


def raise_sockbuf_max():
    """Raises net.core.{r,w}mem_max to UDP_SOCKBUF if lower; returns a restore function."""
    old = {}
    for key in ("rmem_max", "wmem_max"):
        path = f"/proc/sys/net/core/{key}"
        with open(path) as f:
            cur = int(f.read())
        if cur < UDP_SOCKBUF:
            old[path] = cur
            with open(path, "w") as f:
                f.write(str(UDP_SOCKBUF))

    def restore():
        for path, cur in old.items():
            with open(path, "w") as f:
                f.write(str(cur))
    return restore


class CoreLayout:
    """Runs the gateways' overlay processes on one core and the hosts on the others.

    On a real deployment a gateway does not share its CPU with the hosts
    that send and receive through it. On this two-core testbed it does, and
    left to the scheduler the receiving chain (the receiving gateway woken by
    the sender's packets, then the receiving iperf3) wakes on the sending
    gateway's core and keeps it from its TAP for milliseconds, while the
    sending iperf3, itself held back, catches up in a burst of 300-500 kpps:
    the TAP's queue overflows at rates far below the top one. In the UDP
    tests of an overlay with gateway processes, they run on the last CPU and
    both iperf3 on the others. Kernel overlays have no such process (they
    run in the hosts' system calls and softirqs) and run unpinned; so does
    everything with --udp-layout free or on one CPU."""

    def __init__(self, daemons, enabled):
        cpus = sorted(os.sched_getaffinity(0))
        self.daemons = [p for p in daemons if p]
        self.on = enabled and bool(self.daemons) and len(cpus) > 1
        self.gw, self.rest = {cpus[-1]}, set(cpus[:-1])
        self.saved = {}

    def __enter__(self):
        if self.on:
            for pid in self.daemons:
                self._pin(pid, self.gw)
        return self

    def __exit__(self, *_):
        for pid, mask in self.saved.items():
            self._pin(pid, mask)  # threads started meanwhile too
        self.saved = {}

    def _pin(self, pid, cpus):
        """Sets the CPUs of every thread of pid, remembering the process's own."""
        try:
            self.saved.setdefault(pid, os.sched_getaffinity(pid))
            for t in os.listdir(f"/proc/{pid}/task"):
                try:
                    os.sched_setaffinity(int(t), cpus)
                except OSError:
                    pass  # the thread has exited
        except OSError:
            pass  # the process has exited

    def prefix(self):
        """The command prefix that runs a program on the test's other CPUs."""
        if not self.on:
            return []
        return ["taskset", "-c", ",".join(str(c) for c in sorted(self.rest))]


def udp_pps(ends, size, secs, layout):
    """Received datagrams per second at full speed, then the loss at 80 %."""
    src_ns, dst_ns, dst_addr = ends
    buf = ["-w", str(UDP_SOCKBUF)]
    with layout:
        out = iperf(src_ns, dst_ns, dst_addr, ["-u", "-b", "0", "-l", str(size), *buf], secs, layout.prefix())
        rx = out["end"]["sum_received"]
        pps = rx["bytes"] / size / rx["seconds"]
        rate = int(pps * 0.8 * size * 8)
        out = iperf(src_ns, dst_ns, dst_addr, ["-u", "-b", str(rate), "-l", str(size), *buf], secs, layout.prefix())
    return pps, out["end"]["sum_received"]["lost_percent"]


def run_hooks(tb, ends):
    res = {}
    if not os.path.isdir(HOOK_DIR):
        return res
    for name in sorted(os.listdir(HOOK_DIR)):
        path = os.path.join(HOOK_DIR, name)
        if not os.access(path, os.X_OK):
            continue
        env = dict(tb.env, BENCH_SRC_NS=ends[0], BENCH_DST_NS=ends[1], BENCH_DST_ADDR=ends[2])
        r = subprocess.run([path], env=env, capture_output=True, text=True, timeout=120)
        for line in r.stdout.splitlines():
            try:
                m = json.loads(line)
                res[f"{name}:{m['metric']}"] = m["value"]
            except (ValueError, KeyError):
                pass
    return res


def measure(tb, overlay, path, args, full):
    """All figures of one case, args.runs times."""
    if overlay == "none":
        ends = (tb.gw(SRC), tb.gw(DST), tb.sites[DST]["underlay"])
    else:
        ends = (tb.host(SRC)["ns"], tb.host(DST)["ns"], tb.host(DST)["addr"])
    sites = [SRC, RELAY, DST] if path == "relay" else [SRC, DST]
    pids = {s: tb.daemon_pid(s) for s in sites if tb.daemon_pid(s)}
    ping_avg(ends[0], ends[2], 5)  # learn addresses and routes first
    runs = []
    for _ in range(args.runs if full else 1):
        r = {"rtt_idle": ping_avg(ends[0], ends[2], 100)}
        r["tcp1"], r["rtt_load"], r["cpu"] = tcp_with_load_ping(tb, ends, args.secs, pids)
        if full:
            r["tcp4"] = iperf(ends[0], ends[1], ends[2], ["-P", "4"], args.secs)["end"]["sum_received"]["bits_per_second"] / 1e9
            layout = lambda: CoreLayout(pids.values(), args.udp_layout == "pinned")
            r["udp64"], r["loss64"] = udp_pps(ends, 64, args.udp_secs, layout())
            r["udpL"], r["lossL"] = udp_pps(ends, LARGE, args.udp_secs, layout())
            r.update(run_hooks(tb, ends))
        runs.append(r)
    rss = {s: rss_mb(p) for s, p in pids.items()}
    return {"runs": runs, "rss_mb": rss}


def pin_path(tb, path):
    """Pins Fujisawa <-> Seoul to the direct path or through Inagi, both ways.

    Both paths are pinned: with zero delay on every link, a flood that
    queues the probes of the direct link makes the relay look better,
    and the benchmark measures the data path, not the routing."""
    via = [RELAY] if path == "relay" else []
    for a, b in ((SRC, DST), (DST, SRC)):
        subprocess.run(netns(tb.gw(a), tb.bin, "route", "pin", b, *via), check=True, capture_output=True, timeout=10)
    time.sleep(0.3)


ZERO_DELAY = """name: leon-japan-zero
description: the leon-japan sites with zero delay and no rate limit (the emulator's own cost)
sites: [{name: Fujisawa}, {name: Inagi}, {name: Seoul}]
links:
  default: {delay: 0ms}
"""


def run_underlay(tb, underlay, args, full, results, log):
    scenario = args.scenario
    if underlay == "emulator":
        scenario = os.path.join(tb.state, "zero.yaml")
        with open(scenario, "w") as f:
            f.write(ZERO_DELAY)
    for overlay in args.overlays:
        paths = ["direct", "relay"] if overlay.startswith("detour") and full else ["direct"]
        t0 = time.time()
        try:
            try:
                tb.up(scenario, overlay, underlay)
            except subprocess.CalledProcessError:
                # tinc 1.0 sometimes waits out a 5 s reconnect back-off
                # longer than the testbed's 20 s; one more try.
                log(f"bench: {underlay}/{overlay} did not come up; trying again")
                tb.down()
                tb.up(scenario, overlay, underlay)
            for path in paths:
                if overlay.startswith("detour"):
                    pin_path(tb, path)
                key = f"{underlay}/{overlay}/{path}"
                results[key] = dict(measure(tb, overlay, path, args, full), underlay=underlay, overlay=overlay, path=path)
                log(f"bench: {key} done ({time.time() - t0:.0f}s)")
        except (subprocess.SubprocessError, RuntimeError, OSError, ValueError) as e:
            msg = e.stderr.decode()[-400:] if isinstance(e, subprocess.CalledProcessError) and e.stderr else str(e)
            log(f"bench: {underlay}/{overlay} failed: {msg}")
            results[f"{underlay}/{overlay}/failed"] = {"underlay": underlay, "overlay": overlay, "path": "failed", "error": msg, "runs": []}
        finally:
            CHILDREN.stop_all()
            tb.down()


# ---- statistics and the table ----

def stat(runs, key):
    xs = [r[key] for r in runs if r.get(key) is not None]
    if not xs:
        return None
    return statistics.median(xs), min(xs), max(xs)


def fmt(s, scale=1.0, digits=2):
    if s is None:
        return "–"
    med, lo, hi = (x * scale for x in s)
    if hi - lo < 10 ** -digits:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def cpu_cell(case):
    if case["overlay"] in ("none", "vxlan"):
        return "kernel (softirq)"
    per = {}
    for r in case["runs"]:
        for s, v in r.get("cpu", {}).items():
            per.setdefault(s, []).append(v)
    return " / ".join(f"{s[:3]} {statistics.median(v):.1f}" for s, v in per.items()) or "–"


def rss_cell(case):
    v = [x for x in case.get("rss_mb", {}).values() if x]
    return f"{max(v):.0f}" if v else "–"


def ratio(case, cases, overlay, key):
    ref = cases.get(f"{case['underlay']}/{overlay}/direct")
    a, b = stat(case["runs"], key), ref and stat(ref["runs"], key)
    if not a or not b or b[0] == 0:
        return "–"
    return f"{a[0] / b[0]:.2f}×"


def added(case, cases, key):
    raw = cases.get(f"{case['underlay']}/none/direct")
    a, b = stat(case["runs"], key), raw and stat(raw["runs"], key)
    if not a or not b:
        return ""
    return f" (+{a[0] - b[0]:.3f})"


def table(cases):
    head = ["underlay", "overlay", "path", "TCP×1 Gbit/s", "TCP×4 Gbit/s", "UDP 64 B kpps", "loss @80 %",
            f"UDP {LARGE} B kpps", "loss @80 %", "RTT idle ms (+vs raw)", "RTT load ms (+vs raw)",
            "CPU s/GB per gateway", "RSS MB", "TCP×1 vs tinc", "TCP×1 vs VXLAN", "UDP 64 vs tinc"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, c in cases.items():
        if c["path"] == "failed":
            rows.append(f"| {c['underlay']} | {c['overlay']} | failed | {c['error'].strip().splitlines()[-1][-120:]} |")
            continue
        rn = c["runs"]
        cells = [c["underlay"], "raw underlay" if c["overlay"] == "none" else c["overlay"], c["path"],
                 fmt(stat(rn, "tcp1")), fmt(stat(rn, "tcp4")), fmt(stat(rn, "udp64"), 1e-3, 0),
                 fmt(stat(rn, "loss64"), 1, 1) + (" %" if stat(rn, "loss64") else ""),
                 fmt(stat(rn, "udpL"), 1e-3, 0), fmt(stat(rn, "lossL"), 1, 1) + (" %" if stat(rn, "lossL") else ""),
                 fmt(stat(rn, "rtt_idle"), 1, 3) + added(c, cases, "rtt_idle"),
                 fmt(stat(rn, "rtt_load"), 1, 3) + added(c, cases, "rtt_load"),
                 cpu_cell(c), rss_cell(c), ratio(c, cases, "tinc", "tcp1"), ratio(c, cases, "vxlan", "tcp1"),
                 ratio(c, cases, "tinc", "udp64")]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(cases, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ok = [c for c in cases.values() if c["path"] != "failed" and c["runs"]]
    labels = [f"{c['overlay']}\n{c['path']}\n{c['underlay']}" for c in ok]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, len(ok) * 1.3), 4.5))
    for ax, keys, unit, scale in ((axes[0], ("tcp1", "tcp4"), "Gbit/s", 1), (axes[1], ("udp64", "udpL"), "kpps", 1e-3)):
        width = 0.4
        for j, k in enumerate(keys):
            med, err = [], [[], []]
            for c in ok:
                s = stat(c["runs"], k) or (0, 0, 0)
                med.append(s[0] * scale)
                err[0].append((s[0] - s[1]) * scale)
                err[1].append((s[2] - s[0]) * scale)
            xs = [i + (j - 0.5) * width for i in range(len(ok))]
            ax.bar(xs, med, width, yerr=err, capsize=2, label=k)
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel(unit)
        ax.legend()
    axes[0].set_title("TCP throughput (median, range)")
    axes[1].set_title("UDP datagrams received per second")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="bin/detour", help="the detour binary (the agents, route pin)")
    ap.add_argument("--lab", default="", help="the detour-lab binary (default: detour-lab beside --bin)")
    ap.add_argument("--scenario", default="leon-japan")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=3, help="seconds per TCP test")
    ap.add_argument("--udp-secs", type=int, default=2, help="seconds per UDP test")
    ap.add_argument("--udp-layout", choices=("pinned", "free"), default="pinned",
                    help="pinned: in the UDP tests the gateways' processes run on one CPU, the hosts on the others (see CoreLayout)")
    ap.add_argument("--overlays", default=",".join(OVERLAYS))
    ap.add_argument("--no-emulator", action="store_true", help="skip the reference run over the emulator")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.overlays = args.overlays.split(",")
    binary = os.path.abspath(args.bin)
    lab = os.path.abspath(args.lab or os.path.join(os.path.dirname(binary), "detour-lab"))
    out = args.out or os.path.join("results", "bench", datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    state = tempfile.mkdtemp(prefix="detour-bench-")
    tb = Testbed(binary, lab, state)

    restore_sockbuf = raise_sockbuf_max()

    def cleanup(*_):
        CHILDREN.stop_all()
        tb.down()
        restore_sockbuf()
        if _:
            sys.exit(1)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, cleanup)
    signal.signal(signal.SIGINT, cleanup)

    log = lambda m: print(m, file=sys.stderr, flush=True)
    t0 = time.time()
    cases = {}
    run_underlay(tb, "kernel", args, True, cases, log)
    if not args.no_emulator:
        run_underlay(tb, "emulator", args, False, cases, log)
    md = table(cases)
    machine = f"{os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    note = (f"Fujisawa → Seoul on {args.scenario}; {args.runs} runs on the kernel underlay (median, range), "
            f"one over the emulator (same sites, zero delay) for TCP×1 and RTT. {machine}. "
            f"detour pinned to the direct path, and for Relay through {RELAY}. CPU from /proc/PID/stat of each gateway's daemon "
            f"(Fuj/Ina/Seo). UDP tests with --udp-layout {args.udp_layout}"
            + (f" (the gateways' overlay processes on CPU {max(os.sched_getaffinity(0))}, both iperf3 on the others)"
               if args.udp_layout == "pinned" else "") + f". Took {time.time() - t0:.0f} s.")
    with open(os.path.join(out, "overlays.md"), "w") as f:
        f.write(f"# Overlay data planes\n\n{note}\n\n{md}\n")
    with open(os.path.join(out, "overlays.json"), "w") as f:
        json.dump({"note": note, "cases": cases}, f, indent=1)
    plotted = plot(cases, os.path.join(out, "overlays.png"))
    print(note + "\n\n" + md)
    print(f"\nwritten to {out}/overlays.md, overlays.json" + (", overlays.png" if plotted else ""))


if __name__ == "__main__":
    main()
