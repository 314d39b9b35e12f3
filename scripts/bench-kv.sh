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
#
# each with gets/sets 50/50 and 90/10. twemproxy speaks neither UDP nor
# the binary protocol, so (d) and (e) use ASCII over TCP. The table (p50,
# p99 in ms, requests/s) goes to results/bench-kv-DATE.md; copy it into
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
cases=${KV_CASES:-abcde}
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
run() { # CASE MIX ARGS...
	local c=$1 mix=$2
	shift 2
	[[ $cases == *$c* ]] || return 0
	ip netns exec "$client" "$kvl" -duration "$dur" -outstanding "$out" -get-ratio "$mix" -keys 2000 "$@" >"$work/$c-$mix.json"
}
echo "bench-kv: uptime before: $(uptime)"
for mix in 0.5 0.9; do
	run a "$mix" -protocol binary-udp -servers "$servers"
	run b "$mix" -protocol binary-udp -target "$vip"
	run c "$mix" -protocol ascii-tcp -target "$vip" -connections "$out"
	run d "$mix" -protocol ascii-tcp -target "$lanproxy:22121" -connections 4
	run e "$mix" -protocol ascii-tcp -target "$neuproxy:22121" -connections 4
done
echo "bench-kv: uptime after: $(uptime)"
mkdir -p results
res=results/bench-kv-$(date +%Y%m%d-%H%M%S).md
python3 - "$work" "$dur" "$out" "$cases" >"$res" <<'PY'
import json, sys, os
work, dur, out, cases = sys.argv[1:5]
names = {"a": "(a) client-side ketama, binary/UDP", "b": "(b) detour VIP, binary/UDP",
         "c": "(c) detour VIP, ASCII/TCP",
         "d": "(d) twemproxy at LAN, ASCII/TCP", "e": "(e) twemproxy at NEU, ASCII/TCP"}
print("%s per case, %s outstanding, 2,000 keys, 32-byte values, prefilled, underlay %s\n" % (dur, out, os.environ.get("KV_UNDERLAY", "emulator")))
print("| case | gets/sets | p50 ms | p99 ms | requests/s | timeouts | errors | p50 / (a) |")
print("|---|---|---|---|---|---|---|---|")
for mix in ("0.5", "0.9"):
    base = json.load(open(os.path.join(work, "a-%s.json" % mix)))["latency_us"]["p50"]
    for c in "abcde":
        if c not in cases:
            continue
        r = json.load(open(os.path.join(work, "%s-%s.json" % (c, mix))))
        l = r["latency_us"]
        print("| %s | %d/%d | %.2f | %.2f | %.0f | %d | %d | %.2f |" % (names[c], round(float(mix) * 100), round(100 - float(mix) * 100),
              l["p50"] / 1e3, l["p99"] / 1e3, r["throughput"], r["timeouts"], r["errors"], l["p50"] / base))
PY
cat "$res"
