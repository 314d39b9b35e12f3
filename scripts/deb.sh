#!/usr/bin/env bash
# Builds the Debian package of the gateway: bin/detour_VERSION_ARCH.deb,
# with dpkg-deb only (no debhelper). Contents:
#   /usr/bin/detour                        the daemon and the operator's CLI
#   /lib/systemd/system/detour.service     dist/detour.service, for /usr/bin
#   /etc/detour/site.example.yaml          a conffile; the unit runs site.yaml,
#                                          which the operator writes
#   /usr/share/doc/detour/                 README, operations and install notes
#   /var/lib/detour                        the run-time state (mode 0700)
# postinst creates the system group detour (the API socket's operators) and
# reloads systemd if it runs; it enables nothing, since there is no
# configuration yet. Usage: scripts/deb.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
out=${1:-bin}
arch=$(dpkg --print-architecture)
rev=$(git describe --always --dirty 2>/dev/null || echo dev)
# A Debian version must start with a digit: 0.0 until the first release,
# then the commit date and hash (sortable by date).
date=$(git log -1 --format=%cd --date=format:%Y%m%d%H%M 2>/dev/null || date -u +%Y%m%d%H%M)
version="0.0~git${date}.${rev//-/.}"
root=$(mktemp -d)
chmod 0755 "$root"
trap 'rm -rf "$root"' EXIT

install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/detour" \
	"$root/usr/share/doc/detour" "$root/var/lib/detour"
chmod 0700 "$root/var/lib/detour"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/detour-overlay/detour/internal/cli/command.Version=$rev" \
	-o "$root/usr/bin/detour" ./cmd/detour
sed -e 's#/usr/local/bin/detour#/usr/bin/detour#g' \
	-e 's#^\# Install: .*#\# Installed by the detour package: write /etc/detour/site.yaml (see site.example.yaml), then#' \
	-e 's#^\#          mkdir -p /etc/detour .*#\#          detour agent --config /etc/detour/site.yaml --check#' \
	-e 's#^\#          detour agent --config /etc/detour/site.yaml --check && systemctl enable --now detour#\#          systemctl enable --now detour#' \
	dist/detour.service >"$root/lib/systemd/system/detour.service"
install -m 0644 dist/site.example.yaml "$root/etc/detour/site.example.yaml"
install -m 0644 README.md docs/operations.md "$root/usr/share/doc/detour/"
cat >"$root/usr/share/doc/detour/copyright" <<'END'
detour, a latency-aware L2 overlay for multi-site clouds.
Source: https://github.com/detour-overlay/detour
END
echo /etc/detour/site.example.yaml >"$root/DEBIAN/conffiles"
size=$(du -sk "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<END
Package: detour
Version: $version
Architecture: $arch
Maintainer: detour developers <detour@localhost>
Installed-Size: $size
Section: net
Priority: optional
Recommends: iproute2
Homepage: https://github.com/detour-overlay/detour
Description: latency-aware L2 overlay for multi-site clouds
 detour joins the Layer-2 networks of several sites over the Internet and
 forwards every frame over the fastest measured path, relaying through a
 third site when that is faster. One binary: the gateway daemon
 (detour agent) and the operator's CLI. The service is not enabled: write
 /etc/detour/site.yaml first (see site.example.yaml).
END
cat >"$root/DEBIAN/postinst" <<'END'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	# Members of group detour may change the overlay through the API's
	# unix socket (detour net, detour route, detour reload).
	getent group detour >/dev/null || addgroup --system detour >/dev/null 2>&1 || groupadd --system detour
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload >/dev/null 2>&1 || true
	fi
fi
exit 0
END
cat >"$root/DEBIAN/postrm" <<'END'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
	rm -rf /var/lib/detour
fi
exit 0
END
cat >"$root/DEBIAN/prerm" <<'END'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl stop detour.service >/dev/null 2>&1 || true
	systemctl disable detour.service >/dev/null 2>&1 || true
fi
exit 0
END
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm" "$root/DEBIAN/prerm"
mkdir -p "$out"
deb="$out/detour_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
