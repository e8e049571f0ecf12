#!/usr/bin/env bash
# One-time set-up on a fresh Debian 12 machine (run as root, or with sudo for apt):
# system packages that are missing, a .venv, and the project with its dev extras.
# --no-install-recommends keeps Open vSwitch out: the switches are our own processes or bmv2.
# Idempotent: a second run only reinstalls when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=()
command -v iverilog >/dev/null || apt_packages+=(iverilog)      # Icarus for the FPGA benches
command -v ip >/dev/null || apt_packages+=(iproute2)            # namespaces for interface-mode tests
command -v mnexec >/dev/null || apt_packages+=(mininet)         # the testbed (olaf testbed, bmv2_topologies/)
command -v ethtool >/dev/null || apt_packages+=(ethtool)        # checksum offload off on testbed hosts
python3 -c 'import ensurepip' 2>/dev/null || apt_packages+=(python3-venv)
if [ ${#apt_packages[@]} -gt 0 ]; then
    echo "setup: installing ${apt_packages[*]} with apt"
    sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi

stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev]'
    touch "$stamp"
fi
