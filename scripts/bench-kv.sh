#!/usr/bin/env bash
# bench-kv.sh: the side-by-side memcached comparison of issue 17 on the
# lanman2017 WAN (scenario lanman2017-kv: memcached 1.6 at BOR, CLU and
# NEU, the client at LAN), with the lab's load generator (kvload, HDR
# histograms) at a fixed number of outstanding requests:
#
#   (a) client-side ketama straight to the servers (binary over UDP; the floor)
#   (b) detour's virtual address (binary over UDP, routed by key at LAN's gateway)
#   (c) detour's virtual address over TCP (ASCII; terminated at LAN's gateway,
#       one connection per outstanding request, as clients with a connection
#       per thread use it)
#   (d) twemproxy on a second host at the client's site (LAN h2; ASCII over TCP)
#   (e) twemproxy at another site, a central proxy (NEU h2; ASCII over TCP)
#   (m) memaslap to the three servers, (n) memaslap at the virtual address
#       (a second, independent load generator; ASCII over UDP)
#   (t) other traffic beside the pool: iperf3 TCP from LAN to NEU, alone and
#       with kvload at the virtual address, alternated three times
#
# each with gets/sets 50/50 and 90/10. twemproxy speaks neither UDP nor
# the binary protocol, so (d) and (e) use ASCII over TCP. The table (p50,
# p99 in ms and their difference from (a) in µs, requests/s, and the CPU
# time the agents spent per request: LAN's, which routes by key, and all
# four together) goes to results/bench-kv-DATE.md; copy it into
# docs/kv.md with the date and the machine's load. Needs root; the
# testbed and nutcracker are removed on exit (nutcracker killed by PID).
#
#   usage: scripts/bench-kv.sh   (KV_DURATION=10s KV_OUTSTANDING=16;
#          KV_UNDERLAY=kernel for the zero-delay case, plain kernel links
#          instead of the WAN emulator; KV_CASES=ac runs only those cases)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
kvl=$(dirname "$bin")/kvload
mkdir -p "$(dirname "$bin")"
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
go build -o "$kvl" ./internal/lab/kvload/cmd/kvload
command -v nutcracker >/dev/null || { echo "bench-kv: nutcracker is not installed (scripts/install-deps.sh)" >&2; exit 1; }
export DETOUR_BIN=$bin DETOUR_LAB_BIN=$lab
export DETOUR_TESTBED_STATE=${DETOUR_TESTBED_STATE:-/run/detour/bench-kv} DETOUR_TESTBED_PREFIX=${DETOUR_TESTBED_PREFIX:-bkv-}
dur=${KV_DURATION:-10s}
out=${KV_OUTSTANDING:-16}
cases=${KV_CASES:-abcdemnt}
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	"$lab" testbed down >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
"$lab" testbed up lanman2017-kv --overlay detour-plain --underlay "${KV_UNDERLAY:-emulator}"
"$lab" testbed status --json >"$work/status.json"
eval "$(python3 - "$work/status.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
site = {s["name"]: s for s in st["sites"]}
p = st["kv_pools"][0]
print("vip=%s:%d" % (p["address"], p["port"]))
print("servers=%s" % ",".join(s["address"] for s in p["servers"]))
print("client=%s" % site["LAN"]["hosts"][0]["ns"])
print("lanproxy_ns=%s lanproxy=%s" % (site["LAN"]["hosts"][1]["ns"], site["LAN"]["hosts"][1]["addr"]))
print("neuproxy_ns=%s neuproxy=%s" % (site["NEU"]["hosts"][1]["ns"], site["NEU"]["hosts"][1]["addr"]))
PY
)"
# twemproxy: md5 + ketama over the same servers (the placement detour uses).
nutcracker_at() { # NS ADDR
	local conf=$work/nc-$1.yml
	{
		echo "pool:"
		echo "  listen: $2:22121"
		echo "  hash: md5"
		echo "  distribution: ketama"
		echo "  auto_eject_hosts: false"
		echo "  servers:"
		for s in ${servers//,/ }; do echo "    - $s:1"; done
	} >"$conf"
	ip netns exec "$1" nutcracker -c "$conf" -o "$work/nc-$1.log" &
	pids+=($!)
	disown "$!"
}
[[ $cases == *d* ]] && nutcracker_at "$lanproxy_ns" "$lanproxy"
[[ $cases == *e* ]] && nutcracker_at "$neuproxy_ns" "$neuproxy"
sleep 3 # the pool's servers pass their gateways' health checks; nutcracker listens
# agent_ticks prints "SITE TICKS" for every agent: its user and system time
# in clock ticks (/proc/PID/stat fields 14 and 15), checked against the
# start time the testbed recorded so a recycled PID is never read.
agent_ticks() {
	python3 - "$DETOUR_TESTBED_STATE/state.json" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))["procs"]:
    if not p["name"].startswith("agent-"):
        continue
    try:
        f = open("/proc/%d/stat" % p["pid"]).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if int(f[19]) == p["start"]:
        print(p["name"][6:].upper(), int(f[11]) + int(f[12]))
PY
}
run() { # CASE MIX ARGS...
	local c=$1 mix=$2
	shift 2
	[[ $cases == *$c* ]] || return 0
	agent_ticks >"$work/$c-$mix.cpu0"
	ip netns exec "$client" "$kvl" -duration "$dur" -outstanding "$out" -get-ratio "$mix" -keys 2000 "$@" >"$work/$c-$mix.json"
	agent_ticks >"$work/$c-$mix.cpu1"
}
echo "bench-kv: uptime before: $(uptime)"
for mix in 0.5 0.9; do
	run a "$mix" -protocol binary-udp -servers "$servers"
	run b "$mix" -protocol binary-udp -target "$vip"
	run c "$mix" -protocol ascii-tcp -target "$vip" -connections "$out"
	run d "$mix" -protocol ascii-tcp -target "$lanproxy:22121" -connections 4
	run e "$mix" -protocol ascii-tcp -target "$neuproxy:22121" -connections 4
done
# memaslap (Debian's libmemcached-tools calls it memcaslap), a second load
# generator: ASCII over UDP, 64-byte keys and 32-byte values, 3 threads of
# 5 connections each, one request in flight per connection, (m) to the
# three servers (memaslap gives each thread one server) and (n) to the
# virtual address. It runs after kvload's cases, so ARP and the gateways'
# server addresses are warm: memaslap aborts when a UDP reply comes after
# its timeout.
memaslap=$(command -v memcaslap || command -v memaslap || true)
mrun() { # CASE MIX SERVERS
	[[ $cases == *$1* ]] || return 0
	if [ -z "$memaslap" ]; then
		echo "bench-kv: memaslap (libmemcached-tools) is not installed; case $1 skipped" >&2
		return 0
	fi
	printf 'key\n64 64 1\nvalue\n32 32 1\ncmd\n0 %s\n1 %s\n' "$(python3 -c "print(round(1-$2,2))")" "$2" >"$work/ms-$2.cfg"
	agent_ticks >"$work/$1-$2.cpu0"
	ip netns exec "$client" "$memaslap" -s "$3" -U -T 3 -c 15 -t "$dur" -S "$dur" -F "$work/ms-$2.cfg" >"$work/$1-$2.ms" 2>&1 || true
	agent_ticks >"$work/$1-$2.cpu1"
}
for mix in 0.5 0.9; do
	mrun m "$mix" "$servers"
	mrun n "$mix" "$vip"
done
# (t) other traffic beside the pool: an iperf3 TCP flow from LAN's second
# host to NEU's second host (through the same gateways as the pool's
# requests) for $dur, alone and with kvload (50/50, $out outstanding) at
# the virtual address beside it, alternated three times.
if [[ $cases == *t* ]]; then
	ip netns exec "$neuproxy_ns" iperf3 -s -p 5201 -B "$neuproxy" >"$work/iperf3-server.log" 2>&1 &
	pids+=($!)
	sleep 1
	tcp() { # NAME
		ip netns exec "$lanproxy_ns" iperf3 -c "$neuproxy" -p 5201 -t "${dur%s}" -J >"$work/$1.json" 2>&1 || true
	}
	for round in 1 2 3; do
		tcp "t-alone-$round"
		ip netns exec "$client" "$kvl" -duration "$dur" -outstanding "$out" -get-ratio 0.5 -keys 2000 -protocol binary-udp -target "$vip" >"$work/t-kv-$round.json" &
		kp=$!
		tcp "t-beside-$round"
		wait "$kp" || true
	done
fi
echo "bench-kv: uptime after: $(uptime)"
mkdir -p results
res=results/bench-kv-$(date +%Y%m%d-%H%M%S).md
python3 - "$work" "$dur" "$out" "$cases" >"$res" <<'PY'
import json, sys, os, re
work, dur, out, cases = sys.argv[1:5]
names = {"a": "(a) client-side ketama, binary/UDP", "b": "(b) detour VIP, binary/UDP",
         "c": "(c) detour VIP, ASCII/TCP",
         "d": "(d) twemproxy at LAN, ASCII/TCP", "e": "(e) twemproxy at NEU, ASCII/TCP"}
print("%s per case, %s outstanding, 2,000 keys, 32-byte values, prefilled, underlay %s\n" % (dur, out, os.environ.get("KV_UNDERLAY", "emulator")))
tick = os.sysconf("SC_CLK_TCK")
def cpu(c, mix, n):
    """CPU µs per request (n requests) of LAN's agent and of all agents,
    formatted, from the ticks before and after the case (10 ms
    resolution: read it over 10 s runs); "–" where unknown."""
    def read(ext):
        try:
            return dict((l.split()[0], int(l.split()[1])) for l in open(os.path.join(work, "%s-%s.%s" % (c, mix, ext))))
        except OSError:
            return {}
    t0, t1 = read("cpu0"), read("cpu1")
    used = {k: (t1[k] - t0[k]) / tick for k in t1 if k in t0}
    per = lambda x: "–" if x is None or n == 0 else "%.1f" % (x * 1e6 / n)
    return per(used.get("LAN")), per(sum(used.values()) if used else None)
def memaslap(c, mix):
    """The run's requests/s, mean and geometric mean latency in µs, and UDP
    timeouts, from memaslap's report (None when it did not finish)."""
    try:
        text = open(os.path.join(work, "%s-%s.ms" % (c, mix))).read()
    except OSError:
        return None
    tps = re.search(r"Run time: \S+ Ops: (\d+) TPS: (\d+)", text)
    tot = re.search(r"Total Statistics.*?Avg:\s+(\d+).*?Geo:\s+([\d.]+)", text, re.S)
    to = re.search(r"udp_timeout: (\d+)", text)
    if not tps or not tot:
        return None
    return int(tps.group(1)), int(tps.group(2)), int(tot.group(1)), float(tot.group(2)), int(to.group(1)) if to else 0
print("| case | gets/sets | p50 ms | p99 ms | p50 − (a) µs | p99 − (a) µs | requests/s | timeouts | errors | p50 / (a) | LAN agent µs CPU per request | all agents µs per request |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for mix in ("0.5", "0.9"):
    base = json.load(open(os.path.join(work, "a-%s.json" % mix)))["latency_us"]
    for c in "abcde":
        if c not in cases:
            continue
        r = json.load(open(os.path.join(work, "%s-%s.json" % (c, mix))))
        l = r["latency_us"]
        n = r["requests"] + 2000  # the 2,000 prefill sets fall inside the CPU window too
        lan, total = cpu(c, mix, n)
        print("| %s | %d/%d | %.2f | %.2f | %+.0f | %+.0f | %.0f | %d | %d | %.2f | %s | %s |" % (names[c], round(float(mix) * 100), round(100 - float(mix) * 100),
              l["p50"] / 1e3, l["p99"] / 1e3, l["p50"] - base["p50"], l["p99"] - base["p99"], r["throughput"], r["timeouts"], r["errors"], l["p50"] / base["p50"], lan, total))
if "t" in cases:
    def mbps(name):
        try:
            r = json.load(open(os.path.join(work, name + ".json")))
            return r["end"]["sum_received"]["bits_per_second"] / 1e6
        except (OSError, ValueError, KeyError):
            return None
    print("\nTCP beside the pool: iperf3 from LAN h2 to NEU h2 for %s, alone and with kvload (50/50, %s outstanding) at the VIP:\n" % (dur, out))
    print("| round | alone Mbit/s | beside the pool's load Mbit/s | ratio | kvload requests/s |")
    print("|---|---|---|---|---|")
    for rnd in (1, 2, 3):
        a, b = mbps("t-alone-%d" % rnd), mbps("t-beside-%d" % rnd)
        try:
            kvr = "%.0f" % json.load(open(os.path.join(work, "t-kv-%d.json" % rnd)))["throughput"]
        except (OSError, ValueError, KeyError):
            kvr = "–"
        f = lambda x: "–" if x is None else "%.1f" % x
        print("| %d | %s | %s | %s | %s |" % (rnd, f(a), f(b), "–" if not a or b is None else "%.3f" % (b / a), kvr))
if "m" in cases or "n" in cases:
    print("\nmemaslap, ASCII over UDP, 3 threads × 5 connections, 64-byte keys, 32-byte values:\n")
    print("| case | gets/sets | mean µs | geometric mean µs | requests/s | UDP timeouts | LAN agent µs CPU per request | all agents µs per request |")
    print("|---|---|---|---|---|---|---|---|")
    mnames = {"m": "(m) memaslap to the three servers", "n": "(n) memaslap at detour's VIP"}
    for mix in ("0.5", "0.9"):
        for c in "mn":
            if c not in cases:
                continue
            r = memaslap(c, mix)
            if r is None:
                print("| %s | %d/%d | did not finish (see its output) | | | | | |" % (mnames[c], round(float(mix) * 100), round(100 - float(mix) * 100)))
                continue
            ops, tps, avg, geo, to = r
            lan, total = cpu(c, mix, ops)
            print("| %s | %d/%d | %d | %.0f | %d | %d | %s | %s |" % (mnames[c], round(float(mix) * 100), round(100 - float(mix) * 100), avg, geo, tps, to, lan, total))
PY
cat "$res"
