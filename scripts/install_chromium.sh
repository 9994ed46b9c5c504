#!/usr/bin/env bash
# Install Debian's Chromium, the headless browser the plan report's test opens the page in
# (tests/test_report_browser.py, driven by the playwright package with executable_path=/usr/bin/chromium:
# playwright's own browser download is never used, and fails on machines that reach only package registries).
#
# Idempotent: does nothing when /usr/bin/chromium is already there. Waits for another apt run
# (scripts/install_prometheus.sh runs beside it in scripts/setup.sh) instead of failing on dpkg's lock.
#
# Usage (as root, or with sudo available):  scripts/install_chromium.sh
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_chromium.sh: needs root (or sudo) to run apt-get." >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -o DPkg::Lock::Timeout=900)
$SUDO "${apt[@]}" update </dev/null
$SUDO "${apt[@]}" install -y --no-install-recommends chromium fonts-dejavu-core </dev/null

if [ -x /usr/bin/chromium ]; then
    /usr/bin/chromium --version 2>/dev/null | head -n 1 || echo "chromium installed at /usr/bin/chromium"
else
    echo "install_chromium.sh: /usr/bin/chromium missing after install" >&2
    exit 1
fi
