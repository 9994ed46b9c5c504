#!/usr/bin/env bash
# Install the Prometheus server binary that the `prometheus`-marked tests start themselves
# (tests/prom/conftest.py). Debian's package is used because it needs no internet access beyond
# the apt mirror and is a real server, not a mock.
#
# Idempotent: does nothing when a `prometheus` binary is already on PATH or at /usr/bin/prometheus.
# Safe in CI containers: runs without stdin, and never starts (or leaves running) the system
# service -- the tests start their own server on 127.0.0.1 with a temporary storage directory.
#
# Usage (as root, or with sudo available):  scripts/install_prometheus.sh
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; then
    echo "prometheus already installed: $(command -v prometheus || echo /usr/bin/prometheus)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_prometheus.sh: needs root (or sudo) to run apt-get." >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive

# The package's maintainer scripts call invoke-rc.d / deb-systemd-invoke to start
# prometheus.service. In a container there is no init system, and on a workstation we do not
# want a second Prometheus listening on :9090. A policy-rc.d that answers 101 ("action
# forbidden") makes invoke-rc.d skip the start; we remove it again afterwards unless it was
# already there.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod 755 "$POLICY"
    CREATED_POLICY=1
fi
cleanup() {
    if [ "$CREATED_POLICY" -eq 1 ]; then
        $SUDO rm -f "$POLICY"
    fi
}
trap cleanup EXIT

$SUDO apt-get update </dev/null
if ! $SUDO apt-get install -y --no-install-recommends prometheus </dev/null; then
    # A postinst that still fails to (re)start the service leaves the package half-configured
    # even though the binary is in place; finish configuration and tolerate only that failure.
    echo "install_prometheus.sh: apt-get install reported an error; retrying configuration" >&2
    $SUDO dpkg --configure -a </dev/null || true
fi

# Belt and braces: if some init system did start the service, stop and disable it.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi

if [ -x /usr/bin/prometheus ]; then
    /usr/bin/prometheus --version 2>&1 | head -n 1
else
    echo "install_prometheus.sh: /usr/bin/prometheus missing after install" >&2
    exit 1
fi
