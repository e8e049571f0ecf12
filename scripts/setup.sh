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
command -v cpp >/dev/null || apt_packages+=(cpp)                # p4c's preprocessor
[ -d /usr/lib/python3/dist-packages/thrift ] || apt_packages+=(python3-thrift)  # simple_switch_CLI
command -v tshark >/dev/null || apt_packages+=(tshark)          # the Lua dissector's test
command -v yosys >/dev/null || apt_packages+=(yosys)            # FPGA synthesis, sta and smtbmc proofs
command -v cvc4 >/dev/null || apt_packages+=(cvc4)              # yosys-smtbmc's solver (fpga/tb/test_rtl_formal.py; Debian's z3 4.8.12 cannot load the model)
command -v openssl >/dev/null || apt_packages+=(openssl)        # certificates for the mutual-TLS tests
python3 -c 'import ensurepip' 2>/dev/null || apt_packages+=(python3-venv)
if [ ${#apt_packages[@]} -gt 0 ]; then
    echo "setup: installing ${apt_packages[*]} with apt"
    sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi

# The P4 toolchains (p4c, bmv2 in its logging and its fast -O3 build, p4c-barefoot) are not in any registry: they come as
# archives in ../shared/p4tools/ beside the checkout. Unpack them into the ignored
# .p4tools/ after checking their hashes; without them the P4 tests skip with the reason.
p4tools_src=../shared/p4tools
if [ -f "$p4tools_src/SHA256SUMS" ]; then
    stamp_p4=.p4tools/.unpacked
    if [ ! -f "$stamp_p4" ] || [ "$p4tools_src/SHA256SUMS" -nt "$stamp_p4" ]; then
        echo "setup: checking and unpacking the P4 toolchains from $p4tools_src"
        (cd "$p4tools_src" && sha256sum --quiet -c SHA256SUMS)
        rm -rf .p4tools && mkdir -p .p4tools
        for archive in p4tools-bundle.tar.xz bf-p4c-bundle.tar.xz bmv2-fast-bundle.tar.xz; do
            [ -f "$p4tools_src/$archive" ] && tar xJf "$p4tools_src/$archive" -C .p4tools
        done
        touch "$stamp_p4"
    fi
fi

stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev,ray]'
    touch "$stamp"
fi
