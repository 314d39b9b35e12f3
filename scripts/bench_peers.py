#!/usr/bin/env python3
"""bench_peers.py runs detour side by side with what users would pick instead.

Every overlay (none, kernel VXLAN, tinc 1.0, VXLAN over WireGuard, EasyTier
with --latency-first, detour) is brought up in turn on identical testbeds
and measured the same way:

  1. leon-japan over the WAN emulator: the host RTT Fujisawa -> Seoul after
     the overlay has settled (32 ms direct, 21 ms through Inagi): does it
     find Inagi?
  2. azure-16 over the emulator: the host RTT of every pair of sites,
     against the offline optimum (the best path of at most 3 links on the
     configured one-way delays, `detour-lab testbed truth`, as
     test/overlay_test.go's checkOracle computes it, both directions
     added): pairs within max(0.5 ms, 2 %) of it, pairs relayed (RTT
     clearly below the direct path's, which only a relay gives) and the
     one-way ms saved over the direct paths.
  3. leon-japan on the kernel underlay (no emulated delay): TCP x1 and x4,
     64-byte and large UDP with the loss at 80 %, idle and loaded RTT and
     what the overlay adds to the raw underlay's, CPU seconds per GB of
     each gateway's daemon, its RSS (bench_overlays.py's measurements).
  4. leon-japan over the emulator: reroute time, p50 and p95 over --trials
     trials, after the Inagi -> Seoul link slows by 40 ms each way (the
     relayed path becomes 101 ms against 32 direct), after the relay
     Inagi is cut off (every link of Inagi loses 100 %) and after the
     relay's daemon is killed (SIGKILL by its recorded PID; restarted
     between trials with `detour-lab testbed restart-agent`), from a
     100 Hz ping Fujisawa -> Seoul; only for the overlays that relay.
     Then the route changes during --jitter-secs (600) of 1 ms jitter on
     every link of azure-16: detour's from its agents' logs, EasyTier's
     from its route tables (easytier-cli route polled); the overlays that
     never relay change no route by construction. The same on leon-japan
     (step jitterleon), with the path of 10 Hz pings Fujisawa -> Seoul
     told by their RTT.
  6. lanman2017 (`detour-lab experiment lanman2017 --overlays OVERLAY`):
     ZooKeeper's read and write latency through the leader in phases (a)
     idle, (b) loaded, (c) loaded with rerouting free, per overlay.

Peers measure what a host sees: only RTTs, never an overlay's own view.
It writes peers.md (the table, with the version of every overlay),
peers.json (every sample) and peers.png to --out (default docs/peers).
Everything runs in the testbed's namespaces (198.18.0.0/15) and is torn
down, by PID, even on failure.

usage: bench_peers.py --bin bin/detour [--lab bin/detour-lab] [--overlays ...] [--steps ...] [--trials 10]
                      [--kinds slow,cut,kill] [--jitter-secs 600] [--out DIR] [--merge peers.json]
"""

import argparse
import atexit
import concurrent.futures
import datetime
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_overlays as bo  # noqa: E402

# Every overlay's hosts have an MTU of at least 1380 (EasyTier's TUN; VXLAN
# over WireGuard 1390): the largest UDP payload that none of them fragments.
bo.LARGE = 1380 - 28

OVERLAYS = ["none", "vxlan", "tinc", "wireguard", "easytier", "detour"]
ROUTING = ("easytier", "detour")
PREFIX = "dpe-"
PEERS_DIR = os.environ.get("DETOUR_PEERS_DIR", "/opt/detour")
LAYER = {"none": "raw underlay (gateways)", "vxlan": "L2", "tinc": "L2", "wireguard": "L2 (VXLAN over WG)",
         "easytier": "L3 only (hosts routed)", "detour": "L2"}


def log(m):
    print(m, file=sys.stderr, flush=True)


def run(args, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def versions(binary):
    """The version of every overlay's program."""
    def first(args, pat=r"(\S*\d+\.\d+\S*)"):
        try:
            r = run(args, 10)
            m = re.search(pat, r.stdout + r.stderr)
            return m.group(1) if m else "?"
        except (OSError, subprocess.SubprocessError):
            return "not installed"
    wg_stamp = "?"
    try:
        with open(os.path.join(PEERS_DIR, "peers/bin/wireguard-go.version")) as f:
            wg_stamp = f.read().strip()
    except OSError:
        pass
    kernel = os.uname().release
    return {
        "none": f"Linux {kernel}",
        "vxlan": f"Linux {kernel} VXLAN",
        "tinc": "tinc " + first(["tincd", "--version"]),
        "wireguard": f"wireguard-go {first([os.path.join(PEERS_DIR, 'peers/bin/wireguard-go'), '--version'])} ({wg_stamp}), "
                     f"wg {first(['wg', '--version'])}, Linux VXLAN",
        "easytier": "easytier-core " + first([os.path.join(PEERS_DIR, "easytier/bin/easytier-core"), "--version"]),
        "detour": first([binary, "version"], r"detour (.+)") + f" at commit {commit()}",
    }


def commit():
    """The source tree's commit, with + when it has changes."""
    try:
        c = run(["git", "rev-parse", "--short", "HEAD"], 10).stdout.strip()
        dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], 10).stdout.strip()
        return c + ("+" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


class Bed(bo.Testbed):
    """bench_overlays' testbed with the status and the truth kept."""

    def up(self, scenario, overlay, underlay):
        super().up(scenario, overlay, underlay)
        st = json.loads(subprocess.run([self.lab, "testbed", "status", "--json"], env=self.env, check=True,
                                       capture_output=True, timeout=30).stdout)
        self.order = [s["name"] for s in st["sites"]]

    def truth(self):
        out = subprocess.run([self.lab, "testbed", "truth", "--json"], env=self.env, check=True,
                             capture_output=True, timeout=30).stdout
        idx = {n: i for i, n in enumerate(self.order)}
        n = len(self.order)
        d = [[0.0] * n for _ in range(n)]
        for link in json.loads(out)["links"]:
            d[idx[link["from"]]][idx[link["to"]]] = link["delay_ms"]
        return d

    def link(self, a, b, *flags):
        subprocess.run([self.lab, "testbed", "link", "set", a, b, *flags], env=self.env, check=True,
                       capture_output=True, timeout=30)

    def refresh(self):
        """Reads the recorded processes again (a restart changes a PID)."""
        st = json.loads(subprocess.run([self.lab, "testbed", "status", "--json"], env=self.env, check=True,
                                       capture_output=True, timeout=30).stdout)
        self.procs = {p["name"]: p["pid"] for p in st.get("procs") or []}
        self.proc_start = {p["name"]: p.get("start") for p in st.get("procs") or []}

    def kill_daemon(self, site):
        """SIGKILLs the overlay daemon of site's gateway, by the PID the
        testbed recorded, after checking that the PID is still that
        process (its start time, /proc/PID/stat field 22)."""
        self.refresh()
        pid = self.daemon_pid(site)
        name = next(n for n, p in self.procs.items() if p == pid)
        with open(f"/proc/{pid}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        if self.proc_start.get(name) not in (None, start):
            raise RuntimeError(f"pid {pid} is no longer {name}")
        os.kill(pid, signal.SIGKILL)
        log(f"bench-peers: killed {name} (pid {pid})")

    def restart_daemon(self, site):
        """Starts site's killed daemon again (`testbed restart-agent`,
        which finds it by its recorded PID) and returns how long that
        took, ms."""
        t = time.time()
        subprocess.run([self.lab, "testbed", "restart-agent", site], env=self.env, check=True,
                       capture_output=True, timeout=60)
        self.refresh()
        return (time.time() - t) * 1000

    def logs(self, prefix):
        """The testbed's log files of the processes whose names start with prefix."""
        return [os.path.join(self.state, n + ".log") for n in self.procs if n.startswith(prefix)]

    def ends(self, overlay, src, dst):
        """(source namespace, destination address): gateways for none, else the first hosts."""
        if overlay == "none":
            return self.gw(src), self.sites[dst]["underlay"]
        return self.host(src)["ns"], self.host(dst)["addr"]


def best_h(d, s, h=3):
    """Lowest total delay from s to every site over at most h links (checkOracle's bestH)."""
    n = len(d)
    dist = [math.inf] * n
    dist[s] = 0.0
    for _ in range(h):
        nxt = list(dist)
        for u in range(n):
            for v in range(n):
                if u != v and dist[u] + d[u][v] < nxt[v]:
                    nxt[v] = dist[u] + d[u][v]
        dist = nxt
    return dist


def ping_rtts(ns, addr, count, interval="0.1"):
    r = run(bo.netns(ns, "ping", "-n", "-c", str(count), "-i", interval, "-W", "1", addr), count + 15)
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", r.stdout)]


def settle(bed, overlay, secs):
    """Waits for the routing overlays to measure and converge."""
    if overlay in ROUTING:
        time.sleep(secs)


# ---- 1. leon-japan: does it find Inagi? ----

# leon-japan RTTs Fujisawa <-> Seoul: 21 ms through Inagi both ways, 26.6
# or 26.4 through Inagi one way only, 32 direct; the bounds between them.
VIA_BOTH, VIA_ONE = 24.0, 29.5


def leon_path(rtt):
    if rtt < VIA_BOTH:
        return "via Inagi"
    if rtt < VIA_ONE:
        return "via Inagi one way only"
    return "direct"


def leon(bed, overlay, args):
    bed.up("leon-japan", overlay, "emulator")
    try:
        settle(bed, overlay, args.settle)
        ns, addr = bed.ends(overlay, "Fujisawa", "Seoul")
        ping_rtts(ns, addr, 3)
        rtts = ping_rtts(ns, addr, 50, "0.05")
        res = {"rtts": rtts}
        if overlay != "none":
            res["through_inagi"] = through_inagi(bed, ns, addr)
        if overlay == "easytier":
            res["route"] = easytier_routes(bed, "Fujisawa")
        return res
    finally:
        bo.CHILDREN.stop_all()
        bed.down()


def through_inagi(bed, ns, addr, n=40):
    """How many of n large pings Fujisawa -> Seoul Inagi's gateway saw
    arrive from Fujisawa (requests relayed) and from Seoul (replies
    relayed), counting only underlay packets larger than 250 bytes: the
    pings carry 300 bytes, the overlays' own probes and keepalives less."""
    u = {s: bed.sites[s]["underlay"] for s in ("Fujisawa", "Inagi", "Seoul")}
    dump = subprocess.Popen(bo.netns(bed.gw("Inagi"), "tcpdump", "-l", "-n", "-q", "-i", "wan0",
                                     f"udp and greater 250 and dst host {u['Inagi']}"),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    bo.CHILDREN.procs.append(dump)
    time.sleep(1)
    run(bo.netns(ns, "ping", "-n", "-q", "-c", str(n), "-i", "0.05", "-s", "300", addr), n + 10)
    time.sleep(0.5)
    dump.send_signal(signal.SIGINT)
    try:
        out = dump.communicate(timeout=5)[0]
    finally:
        bo.CHILDREN.stop(dump)
    req = sum(1 for line in out.splitlines() if f" {u['Fujisawa']}." in line.split(">")[0])
    rep = sum(1 for line in out.splitlines() if f" {u['Seoul']}." in line.split(">")[0])
    return {"pings": n, "requests": req, "replies": rep}


def easytier_routes(bed, site):
    cli = os.path.join(PEERS_DIR, "easytier/bin/easytier-cli")
    try:
        return run(bo.netns(bed.gw(site), cli, "-p", "127.0.0.1:15888", "route"), 10).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)


# ---- 2. azure-16: every pair against the offline optimum ----

def azure(bed, overlay, args):
    bed.up("azure-16", overlay, "emulator")
    try:
        d = bed.truth()
        names = bed.order
        n = len(names)
        best = [best_h(d, s) for s in range(n)]
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]

        def measure(p, count):
            i, j = p
            ns, addr = bed.ends(overlay, names[i], names[j])
            return ping_rtts(ns, addr, count)

        # Few pings at once: the 16 sites' emulator shares two cores.
        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            list(ex.map(lambda p: measure(p, 2), pairs))  # ARP, FDB, first contact
            settle(bed, overlay, args.settle)
            got = list(ex.map(lambda p: measure(p, 10), pairs))
        rows = []
        for (i, j), rtts in zip(pairs, got):
            rows.append({"a": names[i], "b": names[j], "rtts": rtts, "direct": d[i][j] + d[j][i],
                         "optimum": best[i][j] + best[j][i]})
        return {"pairs": rows}
    finally:
        bo.CHILDREN.stop_all()
        bed.down()


def azure_summary(res):
    """Pairs within max(0.5 ms, 2 %) of the optimum RTT, pairs relayed, one-way ms saved.

    Each pair's RTT is the lowest of its pings: the delay of the path the
    overlay uses. The machine is shared, and a process descheduled for
    tens or hundreds of milliseconds (the emulator included) delays a few
    pings of every overlay alike; the medians are in the JSON."""
    within = relayed = oracle_relayed = missing = 0
    saved = oracle_saved = 0.0
    excess = []
    rows = res["pairs"]
    for r in rows:
        if not r["rtts"]:
            missing += 1
            continue
        m = min(r["rtts"])
        if m - r["optimum"] <= max(0.5, 0.02 * r["optimum"]):
            within += 1
        if m < r["direct"] - max(0.5, 0.02 * r["direct"]):
            relayed += 1
        if r["optimum"] < r["direct"] - max(0.5, 0.02 * r["direct"]):
            oracle_relayed += 1
        saved += r["direct"] - m
        oracle_saved += r["direct"] - r["optimum"]
        excess.append(m - r["optimum"])
    # Each unordered pair's RTT saving is the sum of the one-way savings
    # of its two ordered pairs.
    ordered = 2 * len(rows)
    return {"pairs": len(rows), "within": within, "relayed": relayed, "oracle_relayed": oracle_relayed,
            "missing": missing, "saved_ms_per_pair": saved / ordered, "oracle_saved_ms_per_pair": oracle_saved / ordered,
            "worst_excess_ms": max(excess) if excess else None}


# ---- 3. the data path on the kernel underlay ----

def dataplane(bed, overlay, args):
    """bench_overlays' measurements, each one on its own: a failing one
    (EasyTier's TCP proxy resets iperf3's control connection now and then)
    is recorded and the others still run."""
    try:
        bed.up("leon-japan", overlay, "kernel")
        if overlay == "none":
            ends = (bed.gw(bo.SRC), bed.gw(bo.DST), bed.sites[bo.DST]["underlay"])
        else:
            ends = (bed.host(bo.SRC)["ns"], bed.host(bo.DST)["ns"], bed.host(bo.DST)["addr"])
        pids = {s: bed.daemon_pid(s) for s in (bo.SRC, bo.DST) if bed.daemon_pid(s)}
        bo.ping_avg(ends[0], ends[2], 5)
        runs, errors = [], []

        def attempt(r, what, f):
            try:
                f(r)
            except (subprocess.SubprocessError, RuntimeError, OSError, ValueError, KeyError) as e:
                errors.append(f"{what}: {str(e)[-160:]}")
            finally:
                bo.CHILDREN.stop_all()

        def tcp1(r):
            r["tcp1"], r["rtt_load"], r["cpu"] = bo.tcp_with_load_ping(bed, ends, args.secs, pids)

        def tcp4(r):
            out = bo.iperf(ends[0], ends[1], ends[2], ["-P", "4"], args.secs)
            r["tcp4"] = out["end"]["sum_received"]["bits_per_second"] / 1e9

        def udp(size, k):
            def f(r):
                r["udp" + k], r["loss" + k] = bo.udp_pps(ends, size, args.udp_secs,
                                                        bo.CoreLayout(pids.values(), args.udp_layout == "pinned"))
            return f
        for _ in range(args.runs):
            r = {"rtt_idle": bo.ping_avg(ends[0], ends[2], 100)}
            attempt(r, "TCP×1", tcp1)
            attempt(r, "TCP×4", tcp4)
            attempt(r, "UDP 64", udp(64, "64"))
            attempt(r, f"UDP {bo.LARGE}", udp(bo.LARGE, "L"))
            runs.append(r)
        return {"runs": runs, "rss_mb": {s: bo.rss_mb(p) for s, p in pids.items()}, "errors": errors}
    finally:
        bo.CHILDREN.stop_all()
        bed.down()


# ---- 4. reroute time ----

class Pinger:
    """A ping (100 Hz unless told) whose replies carry their receive time (-D)."""

    def __init__(self, ns, addr, secs, interval="0.01"):
        # Into a file, not a pipe: a pipe nobody reads fills after about
        # 850 replies (8.5 s at 100 Hz), and ping then blocks, sending
        # nothing more.
        self.out = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(bo.netns(ns, "ping", "-D", "-n", "-i", interval, "-W", "1", "-w", str(secs), addr),
                                  stdout=self.out, text=True)
        bo.CHILDREN.procs.append(self.p)

    def samples(self):
        """(send time, rtt ms) of every reply so far, once stopped.

        SIGINT, not SIGTERM: ping flushes its block-buffered output only
        when it exits by itself or on SIGINT."""
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=5)
        finally:
            bo.CHILDREN.stop(self.p)
        self.out.seek(0)
        out = self.out.read()
        self.out.close()
        res = []
        for m in re.finditer(r"\[([\d.]+)\].*time=([\d.]+) ms", out):
            rx, rtt = float(m.group(1)), float(m.group(2))
            res.append((rx - rtt / 1000, rtt))
        return res


def wait_rtt(ns, addr, ok, limit):
    """Waits up to limit seconds until one ping's RTT satisfies ok."""
    end = time.time() + limit
    while time.time() < end:
        r = ping_rtts(ns, addr, 3, "0.05")
        if r and ok(statistics.median(r)):
            return True
    return False


def reroute(bed, overlay, args):
    relayed = lambda rtt: rtt < VIA_ONE  # noqa: E731 -- through Inagi in at least one direction

    def start():
        bed.up("leon-japan", overlay, "emulator")
        settle(bed, overlay, args.settle)
        ns, addr = bed.ends(overlay, "Fujisawa", "Seoul")
        return ns, addr, wait_rtt(ns, addr, relayed, 30)

    try:
        ns, addr, ok = start()
        if not ok:
            return {"error": "does not take Inagi to begin with"}
        kinds = args.kinds.split(",")
        res = {k: [] for k in kinds}
        res["back"] = args.back
        for kind in kinds:
            for _ in range(args.trials):
                if not wait_rtt(ns, addr, relayed, args.back):
                    # Not back on Inagi --back seconds after the links
                    # were restored (or the relay's daemon restarted): the
                    # next trial starts from a fresh overlay, so that one
                    # trial's aftermath cannot stop the rest.
                    res.setdefault(kind + "_not_back", 0)
                    res[kind + "_not_back"] += 1
                    log(f"bench-peers: {overlay} {kind}: not back on the relay within {args.back:g} s; a fresh overlay")
                    bo.CHILDREN.stop_all()
                    bed.down()
                    ns, addr, ok = start()
                    if not ok:
                        res[kind + "_stopped"] = "a fresh overlay did not take the relay within 30 s"
                        log(f"bench-peers: {overlay} {kind}: {res[kind + '_stopped']}")
                        break
                # A stable route: detour damps a switch that follows
                # another by less than 10 s (MinSwitchInterval), as a
                # flapping link's would be; the gap lets every overlay
                # start each trial from a route it has kept a while.
                time.sleep(args.gap)
                ping = Pinger(ns, addr, math.ceil(args.limit) + 2)
                time.sleep(0.5)
                if kind == "slow":
                    bed.link("Inagi", "Seoul", "--delay", "48.5ms", "--both")  # 8.3/8.7 -> 48.5 both ways
                elif kind == "cut":
                    bed.link("Fujisawa", "Inagi", "--loss", "100%", "--both")
                    bed.link("Inagi", "Seoul", "--loss", "100%", "--both")
                else:
                    bed.kill_daemon("Inagi")
                # From when the change is in force: a packet sent while
                # the command ran may still have taken the old path.
                t0 = time.time()
                wait_rtt(ns, addr, lambda rtt: rtt < 40, args.limit)
                time.sleep(0.3)
                got = ping.samples()
                log(f"bench-peers: {len(got)} replies, first after the change: {[x for x in got if x[0] >= t0][:2]}")
                # Rerouted at the send time of the first packet after the
                # change that came back over the direct path (< 40 ms),
                # not the slowed relay (about 101 ms); with the relay cut
                # off or killed, the first that came back at all.
                after = [(t, rtt) for t, rtt in got if t >= t0]
                fixed = [t for t, rtt in after if rtt < 40]
                # Replies before the change (about 50 at 100 Hz, all via
                # Inagi if the trial started from the relay) and after it.
                counts = {"before": len(got) - len(after),
                          "before_via_inagi": sum(1 for t, rtt in got if t < t0 and rtt < VIA_ONE), "after": len(after)}
                res.setdefault(kind + "_replies", []).append(counts)
                took = (fixed[0] - t0) * 1000 if fixed else None
                if counts["before_via_inagi"] < 25:
                    # Not on the relay when the change came (it left it,
                    # or lost the pings, in the gap): no trial.
                    res.setdefault(kind + "_invalid", []).append({"ms": took, **counts})
                    log(f"bench-peers: {overlay} {kind}: not on the relay at the change, trial left out: {counts}")
                    took = "invalid"
                else:
                    res[kind].append(took)
                if kind == "slow":
                    bed.link("Inagi", "Seoul", "--delay", "8.3ms")
                    bed.link("Seoul", "Inagi", "--delay", "8.7ms")
                elif kind == "cut":
                    bed.link("Fujisawa", "Inagi", "--loss", "0%", "--both")
                    bed.link("Inagi", "Seoul", "--loss", "0%", "--both")
                else:
                    res.setdefault("kill_restart_ms", []).append(bed.restart_daemon("Inagi"))
                log(f"bench-peers: {overlay} {kind} trial: {took}")
        return res
    finally:
        bo.CHILDREN.stop_all()
        bed.down()


# ---- 4. route changes under 1 ms of jitter ----

def jitter(bed, overlay, args, scenario=""):
    """Route changes while every link of --jitter-scenario has 1 ms of
    jitter for --jitter-secs, after --jitter-settle seconds without.

    detour: the agents' own record, one "route changed" line in an
    agent's log per change of any destination's route. EasyTier: its
    route table (`easytier-cli route` on every gateway, every
    --jitter-poll seconds), a change being a destination whose next hop
    differs from the previous poll's; row 1 shows that this table need not
    be the path its data takes. The overlays that never relay change no
    route by construction and are not run.

    On leon-japan a host also pings Fujisawa -> Seoul ten times a second
    throughout, and the path each reply took is told by its RTT (21 ms
    via Inagi, 26.5 one way only, 32 direct): what the hosts saw, for
    every overlay alike."""
    scenario = scenario or args.jitter_scenario
    bed.up(scenario, overlay, "emulator")
    try:
        time.sleep(args.jitter_settle)
        links = json.loads(subprocess.run([bed.lab, "testbed", "truth", "--json"], env=bed.env, check=True,
                                          capture_output=True, timeout=30).stdout)["links"]
        for link in links:
            bed.link(link["from"], link["to"], "--jitter", args.jitter)
        log(f"bench-peers: {overlay}: {args.jitter} of jitter on {len(links)} links for {args.jitter_secs:.0f} s")
        res = {"scenario": scenario, "jitter": args.jitter, "secs": args.jitter_secs,
               "links": len(links), "sites": len(bed.order)}
        ping = None
        if scenario == "leon-japan":
            ns, addr = bed.ends(overlay, "Fujisawa", "Seoul")
            ping = Pinger(ns, addr, math.ceil(args.jitter_secs), "0.1")
        if overlay == "detour":
            bed.refresh()
            before = {f: route_changes(f) for f in bed.logs("agent-")}
            time.sleep(args.jitter_secs)
            after = {f: route_changes(f) for f in bed.logs("agent-")}
            res["changes"] = [line for f in after for line in after[f][len(before.get(f, [])):]]
            # The changes while settling, before the jitter: they show
            # that the logs were read.
            res["before"] = sum(len(v) for v in before.values())
            res["source"] = "agents' logs"
        else:
            res["changes"], res["entries"], res["first_tables"] = easytier_changes(bed, args.jitter_secs, args.jitter_poll)
            res["source"] = f"easytier-cli route on every gateway every {args.jitter_poll:.0f} s"
        res["count"] = len(res["changes"])
        log(f"bench-peers: {overlay}: {res['count']} route changes in {args.jitter_secs:.0f} s")
        if ping:
            time.sleep(1)
            res["host_path"] = path_changes([rtt for _, rtt in ping.samples()])
            log(f"bench-peers: {overlay}: host path {res['host_path']['classes']}, {res['host_path']['changes']} changes")
        return res
    finally:
        bo.CHILDREN.stop_all()
        bed.down()


def path_changes(rtts, least=10):
    """The leon-japan path of every reply (leon_path), and how often the
    path changed: a change is counted between runs of at least least
    consecutive replies (1 s at 10 Hz) on one path; shorter runs (a ping
    delayed by the jitter or by a stalled emulator) are left out."""
    classes = {}
    runs = []
    for rtt in rtts:
        c = leon_path(rtt)
        classes[c] = classes.get(c, 0) + 1
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    kept = [c for c, n in runs if n >= least]
    changes = sum(1 for a, b in zip(kept, kept[1:]) if a != b)
    return {"replies": len(rtts), "classes": classes, "changes": changes,
            "p10_ms": pct(rtts, 0.1), "median_ms": statistics.median(rtts) if rtts else None}


def change_reasons(lines, burst=5, after=16):
    """detour's route changes by reason; how many of them fell in seconds
    with at least burst changes (of any site): a burst is many paths
    found dead at once, which a stalled emulator or agent gives (every
    probe of a second late), not a link's jitter; and how many fell
    neither in a burst nor in the after seconds that follow one (when the
    routes return to the paths they left)."""
    reasons, secs, times = {}, {}, []
    for line in lines:
        m = re.search(r'reason="([a-z ]+)', line)
        r = m.group(1).strip() if m else "?"
        reasons[r] = reasons.get(r, 0) + 1
        t = re.search(r"time=(\S+?)Z", line)
        if t:
            ts = datetime.datetime.strptime(t.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
            times.append(ts)
            secs[int(ts)] = secs.get(int(ts), 0) + 1
    bursts = [sec for sec, n in secs.items() if n >= burst]
    quiet = [t for t in times if not any(0 <= t - b < after for b in bursts)]
    return {"reasons": reasons, "in_bursts": sum(secs[b] for b in bursts), "bursts": len(bursts), "quiet": len(quiet)}


def route_changes(path):
    """The "route changed" lines of an agent's log."""
    try:
        with open(path, errors="replace") as f:
            return [line.strip() for line in f if "route changed" in line]
    except OSError:
        return []


def easytier_table(bed, site):
    """{destination hostname: next hop} from easytier-cli route on site's gateway."""
    out = easytier_routes(bed, site)
    table = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 6 and cells[1] and cells[1] != "hostname" and cells[3] != "-":
            table[cells[1]] = cells[3] + (" " + cells[4] if cells[4] else "")
    return table


def easytier_changes(bed, secs, poll):
    """Next-hop changes in every gateway's EasyTier route table, polled
    every poll seconds for secs."""
    sites = list(bed.order)
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        prev = dict(zip(sites, ex.map(lambda s: easytier_table(bed, s), sites)))
        # How many routes the first poll read, all gateways together: it
        # shows that the tables were read.
        entries = sum(len(t) for t in prev.values())
        first = {k: dict(v) for k, v in prev.items()}
        changes = []
        end = time.time() + secs
        while time.time() < end:
            time.sleep(max(0.0, min(poll, end - time.time())))
            now = dict(zip(sites, ex.map(lambda s: easytier_table(bed, s), sites)))
            t = time.time() - (end - secs)
            for s in sites:
                for dest, hop in now[s].items():
                    old = prev[s].get(dest)
                    # A destination missing from one poll (a table read
                    # in the middle of an update) is not a change.
                    if old is not None and old != hop:
                        changes.append(f"t={t:.0f}s {s} -> {dest}: {old} => {hop}")
                prev[s].update(now[s])
    return changes, entries, first


# ---- 6. the lanman2017 ZooKeeper phases ----

def lanman(bed, overlay, args):
    """`detour-lab experiment lanman2017` on this one overlay (no
    continuous run): the median latency per phase, operation and server
    from its summary.csv; its whole output stays in OUT/lanman/OVERLAY."""
    out = os.path.join(args.out, "lanman", overlay)
    env = dict(bed.env, DETOUR_TESTBED_STATE=bed.state + "-lanman", DETOUR_TESTBED_PREFIX="dpz-")
    cmd = [bed.lab, "experiment", "lanman2017", "--overlays", overlay, "--continuous", "none",
           "--out", out, "--plot", "none", "--detour-bin", bed.bin]
    if args.lanman_ops:
        cmd += ["--ops", str(args.lanman_ops)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout)[-400:]}
    cells = {}
    with open(os.path.join(out, "summary.csv")) as f:
        head = f.readline().strip().split(",")
        for line in f:
            row = dict(zip(head, line.strip().split(",")))
            cells[f"{row['phase']} {row['op']} {row['server']}"] = {
                "median_ms": float(row["median_ms"]), "p95_ms": float(row["p95_ms"]),
                "n": int(row["n"]), "errors": int(row["errors"]), "predicted_ms": row["predicted_truth_ms"]}
    return {"cells": cells, "dir": out}


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# ---- the table and the plot ----

def fmt(x, digits=2, unit=""):
    return "–" if x is None else f"{x:.{digits}f}{unit}"


def table(res, overlays, vers):
    cols = overlays
    rows = [("overlay (version)", [f"**{o}** ({vers.get(o, '?')})" for o in cols]),
            ("layer", [LAYER[o] for o in cols])]

    def cell(o, key, f):
        r = res.get(o, {}).get(key)
        if r is None:
            return "not run"
        if isinstance(r, dict) and "error" in r:
            return "failed: " + r["error"].strip().splitlines()[-1][-80:]
        try:
            return f(r)
        except (KeyError, TypeError, ValueError, statistics.StatisticsError) as e:
            return f"– ({type(e).__name__})"

    def leon_cell(r):
        # The path's delay: the 10th percentile of 50 pings, above the
        # rare fast outlier and below the stalls of a shared machine.
        m = pct(r["rtts"], 0.1)
        t = r.get("through_inagi")
        via = f"; Inagi relayed {t['requests']}/{t['pings']} requests, {t['replies']}/{t['pings']} replies" if t else ""
        return f"{m:.1f} ms (median {statistics.median(r['rtts']):.1f}), {leon_path(m)}{via}"
    rows.append(("1. leon-japan host RTT Fujisawa→Seoul, p10 of 50 pings (32 direct, 21 via Inagi)", [cell(o, "leon", leon_cell) for o in cols]))

    def az(f):
        return lambda r: f(azure_summary(r))
    rows.append(("2. azure-16: pairs within max(0.5 ms, 2 %) of the optimum RTT (lowest of 10 pings)",
                 [cell(o, "azure", az(lambda s: f"{s['within']}/{s['pairs']}" + (f" ({s['missing']} unreachable)" if s["missing"] else ""))) for o in cols]))
    rows.append(("2. azure-16: pairs relayed (optimum relays N)",
                 [cell(o, "azure", az(lambda s: f"{s['relayed']} ({s['oracle_relayed']})")) for o in cols]))
    rows.append(("2. azure-16: one-way ms saved per ordered pair (optimum)",
                 [cell(o, "azure", az(lambda s: f"{s['saved_ms_per_pair']:.2f} ({s['oracle_saved_ms_per_pair']:.2f})")) for o in cols]))
    rows.append(("2. azure-16: worst RTT excess over the optimum, ms",
                 [cell(o, "azure", az(lambda s: fmt(s["worst_excess_ms"]))) for o in cols]))

    raw = res.get("none", {}).get("dataplane")

    def dp(key, scale=1.0, digits=2, add=False):
        def f(r):
            s = bo.stat(r["runs"], key)
            if s is None:
                return "–"
            txt = bo.fmt(s, scale, digits)
            if add and raw and "runs" in raw and bo.stat(raw["runs"], key):
                txt += f" (+{s[0] - bo.stat(raw['runs'], key)[0]:.3f})"
            return txt
        return f
    rows.append(("3. TCP×1 Gbit/s (kernel underlay)", [cell(o, "dataplane", dp("tcp1")) for o in cols]))
    rows.append(("5. TCP×4 Gbit/s", [cell(o, "dataplane", dp("tcp4")) for o in cols]))
    rows.append(("5. UDP 64 B kpps / loss at 80 %", [cell(o, "dataplane", lambda r: f"{dp('udp64', 1e-3, 0)(r)} / {dp('loss64', 1, 1)(r)} %") for o in cols]))
    rows.append((f"5. UDP {bo.LARGE} B kpps / loss at 80 %", [cell(o, "dataplane", lambda r: f"{dp('udpL', 1e-3, 0)(r)} / {dp('lossL', 1, 1)(r)} %") for o in cols]))
    rows.append(("3. idle RTT ms (+ added to the raw underlay)", [cell(o, "dataplane", dp("rtt_idle", 1, 3, True)) for o in cols]))
    rows.append(("3. RTT under TCP×1 ms (+ added)", [cell(o, "dataplane", dp("rtt_load", 1, 3, True)) for o in cols]))
    rows.append(("3. CPU s/GB per gateway daemon (Fuj / Seo)", [cell(o, "dataplane", lambda r, o=o: bo.cpu_cell(dict(r, overlay=o))) for o in cols]))
    rows.append(("3. RSS MB (largest gateway daemon)", [cell(o, "dataplane", bo.rss_cell) for o in cols]))
    rows.append(("3./5. data-path measurements that failed", [cell(o, "dataplane", lambda r: "; ".join(r.get("errors") or []) or "none") for o in cols]))

    def rr(kind):
        def f(r):
            if kind not in r:
                return "not run"
            xs = r[kind]
            ok = [x for x in xs if x is not None]
            miss = len(xs) - len(ok)
            stopped = f"; then {r[kind + '_stopped']}" if r.get(kind + "_stopped") else ""
            if r.get(kind + "_not_back"):
                n = r[kind + "_not_back"]
                stopped += (f"; {n} trial{'s' if n > 1 else ''} began on a fresh overlay: not back on the relay "
                            f"{r.get('back', 60):g} s after the one before")
            if r.get(kind + "_invalid"):
                n = len(r[kind + "_invalid"])
                stopped += f"; {n} more trial{'s' if n > 1 else ''} left out: not on the relay when the change came"
            if not xs:
                return "no trial could start" + (f": {r[kind + '_stopped']}" if stopped else "")
            if not ok:
                return f"not within {args_limit[0]:.0f} s in {len(xs)} trials{stopped}"
            return (f"{pct(ok, 0.5):.0f} / {pct(ok, 0.95):.0f} ms (n={len(ok)}"
                    + (f", {miss} more not within {args_limit[0]:.0f} s" if miss else "") + f"){stopped}")
        return f
    rows.append(("4. reroute after Inagi→Seoul slows by 40 ms, p50 / p95", [cell(o, "reroute", rr("slow")) if o in ROUTING else "does not reroute" for o in cols]))
    rows.append(("4. reroute after the relay Inagi is cut off, p50 / p95", [cell(o, "reroute", rr("cut")) if o in ROUTING else "does not reroute" for o in cols]))

    def killed(r):
        txt = rr("kill")(r)
        if r.get("kill_restart_ms"):
            txt += f"; `testbed restart-agent` took {statistics.median(r['kill_restart_ms']):.0f} ms (median)"
        return txt
    rows.append(("4. reroute after the relay Inagi's daemon is killed (SIGKILL), p50 / p95", [cell(o, "reroute", killed) if o in ROUTING else "does not reroute" for o in cols]))

    def jit(r):
        txt = f"{r['count']} (from the {r['source']})"
        if r["source"] == "agents' logs" and r["count"]:
            c = change_reasons(r["changes"])
            why = ", ".join(f"{n} {k}" for k, n in sorted(c["reasons"].items(), key=lambda x: -x[1]))
            txt += (f": {why}; {c['in_bursts']} of them in {c['bursts']} seconds with ≥ 5 changes each, "
                    f"{c['quiet']} neither in such a second nor in the 15 s after one")
        return txt
    j = next((res[o]["jitter"] for o in cols if isinstance(res.get(o, {}).get("jitter"), dict) and "secs" in res[o]["jitter"]), None)
    span = (f"{j['secs'] / 60:.0f} min" if j and j["secs"] >= 60 else f"{j['secs']:.0f} s") if j else ""
    jname = (f"4. route changes in {span} of {j['jitter']} jitter on every link of {j['scenario']}" if j
             else "4. route changes under 1 ms of jitter")
    rows.append((jname, [cell(o, "jitter", jit) if o in ROUTING else "0 (never relays: by construction)" for o in cols]))

    def jitl(r):
        h = r["host_path"]
        share = ", ".join(f"{c} {100 * n / h['replies']:.0f} %" for c, n in sorted(h["classes"].items(), key=lambda x: -x[1]))
        return (f"host path changes: {h['changes']} ({h['replies']} replies: {share}); "
                f"route changes: {r['count']} (from the {r['source']})")
    jl = next((res[o]["jitterleon"] for o in cols if isinstance(res.get(o, {}).get("jitterleon"), dict)
               and "secs" in res[o]["jitterleon"]), None)
    jlname = (f"4. leon-japan, {jl['secs'] / 60:.0f} min of {jl['jitter']} jitter on every link: path changes of "
              "10 Hz pings Fujisawa→Seoul (runs of ≥ 1 s), and route changes" if jl else "4. leon-japan under jitter")
    rows.append((jlname, [cell(o, "jitterleon", jitl) if o in ROUTING else "0 (never relays: by construction)" for o in cols]))

    def zk(phase):
        def f(r):
            c = r["cells"]
            rd, wr = c[f"{phase} read CLU"], c[f"{phase} write CLU"]
            return f"{rd['median_ms']:.1f} / {wr['median_ms']:.1f}"
        return f
    for phase, what in (("a", "(a) idle WAN"), ("b", "(b) CLU↔LAN loaded, detour held direct"),
                        ("c", "(c) loaded, rerouting free")):
        rows.append((f"6. ZooKeeper (lanman2017) {what}: read / write via the leader CLU from LAN, median ms",
                     [cell(o, "lanman", zk(phase)) if o != "none" else "– (no overlay: the sites' hosts share no network)"
                      for o in cols]))
    head = "| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    body = "\n".join("| " + name + " | " + " | ".join(cells) + " |" for name, cells in rows[1:])
    ver = "\n".join(f"- **{o}**: {vers.get(o, '?')}" for o in cols)
    return ver, head + body


def plot(res, overlays, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 5, figsize=(21, 4.2))
    xs = range(len(overlays))
    # leon-japan RTT
    ax = axes[0]
    vals = [pct(res[o]["leon"]["rtts"], 0.1) if res.get(o, {}).get("leon", {}).get("rtts") else 0 for o in overlays]
    ax.bar(xs, vals, color="tab:blue")
    ax.axhline(32, color="grey", ls="--", lw=1)
    ax.axhline(21, color="green", ls="--", lw=1)
    ax.set_title("leon-japan RTT Fujisawa→Seoul, p10, ms\n(grey: direct 32, green: via Inagi 21)", fontsize=9)
    # azure-16 within
    ax = axes[1]
    within, saved = [], []
    for o in overlays:
        a = res.get(o, {}).get("azure")
        s = azure_summary(a) if a and "pairs" in a else None
        within.append(s["within"] if s else 0)
        saved.append(s["saved_ms_per_pair"] if s else 0)
    ax.bar(xs, within, color="tab:orange")
    ax.set_title("azure-16: pairs within max(0.5 ms, 2 %)\nof the optimum RTT (of 120)", fontsize=9)
    # TCP x1
    ax = axes[2]
    tcp = []
    for o in overlays:
        d = res.get(o, {}).get("dataplane")
        s = bo.stat(d["runs"], "tcp1") if d and "runs" in d else None
        tcp.append(s[0] if s else 0)
    ax.bar(xs, tcp, color="tab:purple")
    ax.set_title("TCP×1 Gbit/s, kernel underlay", fontsize=9)
    # reroute
    ax = axes[3]
    kinds = (("slow", "tab:red"), ("cut", "tab:brown"), ("kill", "tab:grey"))
    for k, (kind, color) in enumerate(kinds):
        p50, p95 = [], []
        for o in overlays:
            r = res.get(o, {}).get("reroute")
            ok = [x for x in (r or {}).get(kind, []) or [] if x is not None] if isinstance(r, dict) else []
            p50.append(pct(ok, 0.5) or 0)
            p95.append(pct(ok, 0.95) or 0)
        pos = [x + (k - 1) * 0.27 for x in xs]
        ax.bar(pos, p50, 0.27, color=color, label=f"{kind} p50 (p95 whisker)",
               yerr=[[0] * len(p50), [b - a for a, b in zip(p50, p95)]], capsize=2)
    ax.set_yscale("symlog")
    ax.legend(fontsize=7)
    ax.set_title("reroute time ms (slow link, relay cut off, relay killed)", fontsize=9)
    # ZooKeeper: read through the leader per phase
    ax = axes[4]
    for k, (phase, color) in enumerate((("a", "tab:green"), ("b", "tab:olive"), ("c", "tab:cyan"))):
        vals = []
        for o in overlays:
            z = res.get(o, {}).get("lanman")
            cells = z.get("cells", {}) if isinstance(z, dict) else {}
            vals.append(cells.get(f"{phase} read CLU", {}).get("median_ms", 0))
        ax.bar([x + (k - 1) * 0.27 for x in xs], vals, 0.27, color=color, label=f"phase ({phase})")
    ax.legend(fontsize=7)
    ax.set_title("ZooKeeper (lanman2017): read via the leader CLU\nfrom LAN, median ms", fontsize=9)
    for ax in axes:
        ax.set_xticks(list(xs))
        ax.set_xticklabels(overlays, fontsize=8, rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


# The reroute trials' limit, for the table.
args_limit = [15.0]

STEPS = {"leon": leon, "azure": azure, "dataplane": dataplane, "reroute": reroute, "jitter": jitter,
         "jitterleon": lambda bed, o, args: jitter(bed, o, args, "leon-japan"), "lanman": lanman}

# The steps an overlay takes part in: only the routing overlays reroute
# or change routes; lanman2017 needs an overlay between the sites' hosts.
ONLY = {"reroute": ROUTING, "jitter": ROUTING, "jitterleon": ROUTING, "lanman": tuple(o for o in OVERLAYS if o != "none")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="bin/detour")
    ap.add_argument("--lab", default="")
    ap.add_argument("--overlays", default=",".join(OVERLAYS))
    ap.add_argument("--steps", default="leon,azure,dataplane,reroute,jitter,jitterleon,lanman")
    ap.add_argument("--kinds", default="slow,cut,kill", help="reroute trials: slow (a link slows), cut (the relay is cut off), "
                    "kill (the relay's daemon is SIGKILLed, then restarted)")
    ap.add_argument("--jitter", default="1ms", help="jitter on every link in the jitter step")
    ap.add_argument("--jitter-secs", type=float, default=600, help="how long the jitter step counts route changes")
    ap.add_argument("--jitter-scenario", default="azure-16")
    ap.add_argument("--jitter-settle", type=float, default=60, help="seconds without jitter before counting")
    ap.add_argument("--jitter-poll", type=float, default=5, help="seconds between reads of EasyTier's route tables")
    ap.add_argument("--lanman-ops", type=int, default=0, help="lanman2017's --ops (default its own, 40)")
    ap.add_argument("--merge", default="", help="keep the results of a peers.json and replace only the steps run")
    ap.add_argument("--settle", type=float, default=20, help="seconds the routing overlays get to converge")
    ap.add_argument("--trials", type=int, default=10, help="reroute trials of each kind")
    ap.add_argument("--limit", type=float, default=15, help="seconds a reroute trial waits")
    ap.add_argument("--gap", type=float, default=12, help="seconds the route stays on the relay before each trial")
    ap.add_argument("--back", type=float, default=30, help="seconds an overlay gets to return to the relay after a trial "
                    "before the next trial starts from a fresh overlay")
    ap.add_argument("--runs", type=int, default=3, help="data-path runs")
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--udp-secs", type=int, default=2)
    ap.add_argument("--udp-layout", choices=("pinned", "free"), default="pinned")
    ap.add_argument("--out", default="docs/peers")
    ap.add_argument("--table-from", default="", help="only write the table and plot again from a peers.json")
    args = ap.parse_args()
    args_limit[0] = args.limit
    overlays = args.overlays.split(",")
    if args.table_from:
        with open(args.table_from) as f:
            saved = json.load(f)
        ver, md = table(saved["results"], overlays, saved["versions"])
        with open(os.path.join(args.out, "peers.md"), "w") as f:
            f.write(f"# detour and its peers, measured side by side\n\n{saved.get('note', '')}\n\nVersions:\n\n{ver}\n\n{md}\n")
        plot(saved["results"], overlays, os.path.join(args.out, "peers.png"))
        print(md)
        return
    steps = args.steps.split(",")
    binary = os.path.abspath(args.bin)
    lab = os.path.abspath(args.lab or os.path.join(os.path.dirname(binary), "detour-lab"))
    os.makedirs(args.out, exist_ok=True)
    bo.PREFIX = PREFIX
    state = tempfile.mkdtemp(prefix="detour-peers-")
    bed = Bed(binary, lab, state)
    bed.env["DETOUR_TESTBED_PREFIX"] = PREFIX
    restore = bo.raise_sockbuf_max()

    def cleanup(*sig):
        bo.CHILDREN.stop_all()
        bed.down()
        restore()
        if sig:
            sys.exit(1)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, cleanup)
    signal.signal(signal.SIGINT, cleanup)

    t0 = time.time()
    vers = versions(binary)
    res = {o: {} for o in overlays}
    earlier = None
    shown = overlays
    if args.merge:
        with open(args.merge) as f:
            earlier = json.load(f)
        # The table keeps every overlay of the earlier run; the steps run
        # here replace only the listed overlays' results.
        shown = [o for o in OVERLAYS if o in overlays or o in earlier["results"]]
        for o in shown:
            res[o] = dict(earlier["results"].get(o, {}))
            if o in overlays:
                res[o] = {k: v for k, v in res[o].items() if k not in steps}
    load = [os.getloadavg()[0]]
    for step in steps:
        for o in overlays:
            if step in ONLY and o not in ONLY[step]:
                continue
            t1 = time.time()
            try:
                res[o][step] = STEPS[step](bed, o, args)
                old = (earlier or {}).get("results", {}).get(o, {}).get(step)
                if step == "reroute" and isinstance(old, dict) and "error" not in old and "error" not in res[o][step]:
                    # Only the kinds of trials run here replace the earlier ones.
                    res[o][step] = {**{k: v for k, v in old.items() if k.split("_")[0] not in args.kinds.split(",")},
                                    **res[o][step]}
            except (subprocess.SubprocessError, RuntimeError, OSError, ValueError, KeyError) as e:
                msg = e.stderr[-400:] if isinstance(e, subprocess.CalledProcessError) and e.stderr else str(e)
                if isinstance(msg, bytes):
                    msg = msg.decode(errors="replace")
                res[o][step] = {"error": msg or type(e).__name__}
                bo.CHILDREN.stop_all()
                bed.down()
            load.append(os.getloadavg()[0])
            log(f"bench-peers: {step}/{o} done in {time.time() - t1:.0f} s")
            # Not over the --merge file until the run is complete.
            partial = "peers.json" if not args.merge else "peers.partial.json"
            with open(os.path.join(args.out, partial), "w") as f:
                json.dump({"versions": vers, "results": res}, f, indent=1)
    if earlier:
        for o, v in earlier.get("versions", {}).items():
            if o not in overlays:
                vers[o] = v  # every row of it is of the earlier run
            elif o in vers and v != vers[o]:
                vers[o] += f" (the rows not of this run: {v})"
    ver, md = table(res, shown, vers)
    machine = (f"{os.uname().sysname} {os.uname().release}, {os.cpu_count()} CPUs shared with other work, "
               f"load average {min(load):.1f}–{max(load):.1f} during the run")
    note = (f"One run of `scripts/bench-peers.sh {' '.join(sys.argv[1:])}`".rstrip() + f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"took {time.time() - t0:.0f} s. {machine}. Routing overlays settle {args.settle:.0f} s before measuring; "
            f"data path: {args.runs} runs (median, range).")
    if earlier:
        note += (f" Only the steps {', '.join(steps)} ran here; the other rows are those of {args.merge}: "
                 + earlier.get("note", "").replace("\n", " "))
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(f"# detour and its peers, measured side by side\n\n{note}\n\nVersions:\n\n{ver}\n\n{md}\n")
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        out = {"note": note, "versions": vers, "results": res}
        # An earlier run's other records (corrections made by hand) stay.
        for k, v in (earlier or {}).items():
            out.setdefault(k, v)
        json.dump(out, f, indent=1)
    if args.merge and os.path.exists(os.path.join(args.out, "peers.partial.json")):
        os.remove(os.path.join(args.out, "peers.partial.json"))
    plotted = plot(res, shown, os.path.join(args.out, "peers.png"))
    print(f"{note}\n\n{ver}\n\n{md}")
    print(f"\nwritten to {args.out}/peers.md, peers.json" + (", peers.png" if plotted else ""))


if __name__ == "__main__":
    main()
