#!/usr/bin/env bash
# Build P4Testgen (p4c's backends/p4tools, module testgen) with its bmv2 and Tofino targets from
# bare git mirrors, offline, on Debian 12 (../shared/p4tools/BUILD.md sections 4, 8 and 10).
#
#   toolchain/p4testgen/build.sh MIRRORS_DIR PREFIX
#
# MIRRORS_DIR holds one bare mirror per repository at OWNER+NAME/repo: p4lang+p4c,
# abseil+abseil-cpp, p4lang+p4runtime, gabime+spdlog, pantor+inja.
# PREFIX receives bin/p4testgen, the P4 include files and a VERSION file.
# The build directory is $P4TESTGEN_BUILD (default /root/p4testgen-build), ccache is
# $CCACHE_DIR (default /root/.ccache); both stay outside the repository.
# Each step's wall time goes to $P4TESTGEN_BUILD/steps.log. A step that has finished is
# skipped when the script runs again (marker files in $P4TESTGEN_BUILD/done), so a failed
# build resumes where it stopped; delete the build directory to start from nothing.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 MIRRORS_DIR PREFIX" >&2
  exit 2
fi
MIRRORS=$(realpath "$1")
PREFIX=$(realpath -m "$2")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=${P4TESTGEN_BUILD:-/root/p4testgen-build}
export CCACHE_DIR=${CCACHE_DIR:-/root/.ccache}
JOBS=${P4TESTGEN_JOBS:-2}

# Commits: p4c as in the other bundles (BUILD.md "Sources"), the rest as p4c pins them
# (abseil and p4runtime as BUILD.md section 2, inja the GIT_TAG of testgen's CMakeLists,
# spdlog the version backends/tofino/cmake/spdlog.cmake asks for).
P4C_COMMIT=${P4C_COMMIT:-34b86e9bacb932c799aaf1b83495ce1e386ea047}
ABSEIL_REF=20240722.1
P4RUNTIME_COMMIT=ec4eb5ef70dbcbcbf2f8357a4b2b8c2f218845a5
INJA_COMMIT=3741c73ba78babd2ed88f2acf2fcd6dafdb878e8
SPDLOG_REF=v1.8.3
Z3_WHEEL=z3-solver==4.11.2.0

for repo in p4lang+p4c abseil+abseil-cpp p4lang+p4runtime gabime+spdlog pantor+inja; do
  if ! git --git-dir="$MIRRORS/$repo/repo" rev-parse --git-dir >/dev/null 2>&1; then
    echo "error: no bare mirror at $MIRRORS/$repo/repo" >&2
    exit 2
  fi
done

mkdir -p "$BUILD/done" "$CCACHE_DIR" "$PREFIX"
STEPS="$BUILD/steps.log"

# Runs one named step once, logging its start, end and duration.
step() {
  local name=$1
  shift
  if [[ -e "$BUILD/done/$name" ]]; then
    echo "== $name: done before, skipped" | tee -a "$STEPS"
    return 0
  fi
  local t0
  t0=$(date +%s)
  echo "== $name: start $(date -u +%FT%TZ)" | tee -a "$STEPS"
  # A subshell outside any `if`, so that errexit holds inside the step's function.
  local rc=0
  set +e
  ( set -e; "$@" )
  rc=$?
  set -e
  if [[ $rc -eq 0 ]]; then
    echo "== $name: ok in $(( $(date +%s) - t0 )) s ($(date -u +%FT%TZ))" | tee -a "$STEPS"
    touch "$BUILD/done/$name"
  else
    echo "== $name: FAILED (exit $rc) after $(( $(date +%s) - t0 )) s ($(date -u +%FT%TZ))" | tee -a "$STEPS"
    exit "$rc"
  fi
}

apt_install() {
  # The dpkg lock may be held by another user of the machine: wait for it.
  local tries=0
  until DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; do
    tries=$((tries + 1))
    [[ $tries -lt 30 ]] || return 1
    echo "apt-get install failed (lock?), retry $tries in 20 s"
    sleep 20
  done
}

packages() {
  apt-get update
  apt_install build-essential cmake ccache pkg-config bison flex libfl-dev libboost-dev \
    libboost-graph-dev libboost-iostreams-dev libboost-program-options-dev \
    libboost-filesystem-dev libboost-thread-dev libboost-system-dev libgc-dev \
    libprotobuf-dev protobuf-compiler libprotoc-dev git xz-utils python3-venv python3-dev \
    rapidjson-dev nlohmann-json3-dev cpp
}

python_tools() {
  # Z3 4.11 (p4c's cmake/Z3.cmake refuses >= 4.12, Debian has 4.8.12) from its PyPI wheel,
  # which ships libz3.so and the C/C++ headers; jsl and jsonschema for bf-p4c's logging code
  # generator. Debian's python3 so that the venv's layout is python3.11.
  rm -rf "$BUILD/z3venv"
  /usr/bin/python3 -m venv "$BUILD/z3venv"
  "$BUILD/z3venv/bin/pip" install --quiet "$Z3_WHEEL" jsl jsonschema
}

archive() {  # archive MIRROR REF PREFIX [PATHS...]
  local git_dir=$1 ref=$2 prefix=$3
  shift 3
  git --git-dir="$git_dir" archive --prefix="$prefix" "$ref" "$@" | tar -x -C "$BUILD/src"
}

sources() {
  rm -rf "$BUILD/src"
  mkdir -p "$BUILD/src"
  local g=$MIRRORS/p4lang+p4c/repo
  if ! git --git-dir="$g" cat-file -e "$P4C_COMMIT^{commit}" 2>/dev/null; then
    echo "error: the p4c mirror has no commit $P4C_COMMIT" >&2
    return 1
  fi
  # The snapshot lacks the blobs of docs/*.pptx and `git archive` with an exclude pathspec
  # still aborts: archive everything but docs/, then docs/ without the slides.
  # shellcheck disable=SC2046
  archive "$g" "$P4C_COMMIT" p4c/ $(git --git-dir="$g" ls-tree --name-only "$P4C_COMMIT" | grep -v '^docs$')
  # shellcheck disable=SC2046
  archive "$g" "$P4C_COMMIT" p4c/ $(git --git-dir="$g" ls-tree --name-only "$P4C_COMMIT" docs/ | grep -v '\.pptx$')
  archive "$MIRRORS/abseil+abseil-cpp/repo" "$ABSEIL_REF" abseil-cpp/
  archive "$MIRRORS/p4lang+p4runtime/repo" "$P4RUNTIME_COMMIT" p4runtime/
  archive "$MIRRORS/pantor+inja/repo" "$INJA_COMMIT" inja/
  # spdlog is not a submodule: backends/tofino/cmake/spdlog.cmake uses this folder if present.
  archive "$MIRRORS/gabime+spdlog/repo" "$SPDLOG_REF" p4c/backends/tofino/third_party/spdlog/
  git --git-dir="$g" rev-parse --short=7 "$P4C_COMMIT" >"$BUILD/src/p4c-short-sha"
}

# Applies a sed expression and fails if the file did not change (the fix no longer matches).
sed_fix() {
  local file=$1 expr=$2
  local before
  before=$(sha256sum "$file")
  sed -i "$expr" "$file"
  if [[ "$(sha256sum "$file")" == "$before" ]]; then
    echo "error: fix '$expr' changed nothing in $file" >&2
    return 1
  fi
}

fixes() {
  local s=$BUILD/src/p4c
  local sha
  sha=$(cat "$BUILD/src/p4c-short-sha")
  # 0. The tree has no .git: put the commit into the version string (P4C_VERSION from the
  #    environment would also become the project VERSION of backends/p4tools, which CMake
  #    rejects when it is more than numbers).
  sed_fix "$s/CMakeLists.txt" "s/(SHA: \${P4C_GIT_SHA} BUILD/(SHA: $sha BUILD/"
  # 1. GCC 12: erase_if lambdas take the element by const reference.
  sed_fix "$s/ir/visitor.cpp" 's/\[this\](flow_join_points_t::value_type &el)/[this](const flow_join_points_t::value_type \&el)/'
  # 2. Debian's libgc-dev has no libcord.
  sed_fix "$s/cmake/BDWGC.cmake" 's/set(LIBGC_LIBRARIES gc gctba cord)/set(LIBGC_LIBRARIES gc gctba)/'
  # 3. Debian's protobuf 3.21 has no CMake config package: CMake's FindProtobuf, then the
  #    replacement protobuf_generate() of fix 4.
  sed_fix "$s/cmake/Protobuf.cmake" 's/find_package(Protobuf ${P4C_PROTOBUF_VERSION} CONFIG ${P4C_PROTOBUF_PATHS})/find_package(Protobuf MODULE)/; s/find_package(Protobuf REQUIRED CONFIG ${P4C_PROTOBUF_PATHS})/find_package(Protobuf REQUIRED MODULE)/; s/^\(    find_program(Protobuf_PROTOC_EXECUTABLE protoc)\)$/\1\n    include(P4CProtobufGenerateCompat)/'
  grep -q 'include(P4CProtobufGenerateCompat)' "$s/cmake/Protobuf.cmake"
  # 4 and 5. The two CMake files kept beside this script.
  cp "$HERE/P4CProtobufGenerateCompat.cmake" "$HERE/P4CProtobufPostprocess.cmake" "$s/cmake/"
  # 6. The Tofino backend's own p4info.proto is generated by a plain custom command: run the
  #    post-processing of fix 5 on its header too.
  sed_fix "$s/backends/tofino/bf-p4c/CMakeLists.txt" 's|^  DEPENDS ${BFN_P4RUNTIME_INFO_PROTO}$|  COMMAND ${CMAKE_COMMAND} -DPB_HEADER=${BFN_P4RUNTIME_INFO_GEN_HDRS} -P ${P4C_SOURCE_DIR}/cmake/P4CProtobufPostprocess.cmake\n  DEPENDS ${BFN_P4RUNTIME_INFO_PROTO} ${P4C_SOURCE_DIR}/cmake/P4CProtobufPostprocess.cmake|'
}

z3_dir() {
  echo "$BUILD/z3venv/lib/python3.11/site-packages/z3"
}

env_for_build() {
  export PATH="$BUILD/z3venv/bin:$PATH"
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}
  unset P4C_VERSION
}

configure() {
  env_for_build
  local z
  z=$(z3_dir)
  mkdir -p "$BUILD/src/p4c/build"
  cd "$BUILD/src/p4c/build"
  # -O1 as in BUILD.md section 8: a shorter build; the generator's answers do not depend on it.
  nice -n 19 cmake .. -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1" -DCMAKE_C_FLAGS_RELEASE="-O1" \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DENABLE_TEST_TOOLS=ON -DENABLE_TOFINO=ON -DENABLE_GMP=OFF \
    -DENABLE_BMV2=OFF -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF -DENABLE_DPDK=OFF -DENABLE_P4TC=OFF \
    -DENABLE_P4TEST=OFF -DENABLE_P4FMT=OFF -DENABLE_GTESTS=OFF -DENABLE_DOCS=OFF \
    -DENABLE_TOOLS_TARGET_EBPF=OFF -DENABLE_TOOLS_TARGET_PNA=OFF \
    -DP4C_USE_PREINSTALLED_PROTOBUF=ON -DENABLE_PROTOBUF_STATIC=OFF \
    -DP4C_USE_PREINSTALLED_BDWGC=ON \
    -DUSE_PREINSTALLED_Z3=ON -DZ3_INCLUDE_DIR="$z/include" -DZ3_LIBRARY="$z/lib/libz3.so" \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    -DFETCHCONTENT_SOURCE_DIR_ABSEIL="$BUILD/src/abseil-cpp" \
    -DFETCHCONTENT_SOURCE_DIR_P4RUNTIME="$BUILD/src/p4runtime" \
    -DFETCHCONTENT_SOURCE_DIR_INJA="$BUILD/src/inja"
}

make_target() {
  env_for_build
  cd "$BUILD/src/p4c/build"
  nice -n 19 make -j"$JOBS" "$@"
}

install_prefix() {
  local s=$BUILD/src/p4c
  mkdir -p "$PREFIX/bin" "$PREFIX/lib" "$PREFIX/share/p4c"
  local bin
  bin=$(find "$s/build" -name p4testgen -type f -perm -u+x | head -n 1)
  [[ -n "$bin" ]] || { echo "error: no p4testgen binary in $s/build" >&2; return 1; }
  cp "$bin" "$PREFIX/bin/p4testgen"
  # libz3 next to the binary, so that the venv is not needed at run time.
  cp -L "$(z3_dir)/lib/libz3.so" "$PREFIX/lib/"
  ln -sf libz3.so "$PREFIX/lib/libz3.so.4.11"
  rm -rf "$PREFIX/share/p4c/p4include"
  cp -r "$s/p4include" "$PREFIX/share/p4c/p4include"
  cp -r "$s/backends/tofino/bf-p4c/p4include/." "$PREFIX/share/p4c/p4include/"
  ln -sfn share/p4c/p4include "$PREFIX/p4include"
  {
    echo "p4c commit: $P4C_COMMIT"
    echo "inja: $INJA_COMMIT  spdlog: $SPDLOG_REF  abseil: $ABSEIL_REF  p4runtime: $P4RUNTIME_COMMIT"
    echo "z3: $Z3_WHEEL"
    LD_LIBRARY_PATH="$PREFIX/lib" "$PREFIX/bin/p4testgen" --target tofino --arch tna --version 2>&1 || true
  } >"$PREFIX/VERSION"
  cat "$PREFIX/VERSION"
}

echo "== build of P4Testgen: mirrors $MIRRORS, prefix $PREFIX, build $BUILD, -j$JOBS" | tee -a "$STEPS"
step packages packages
step python-tools python_tools
step sources sources
step fixes fixes
step configure configure
step build-p4testgen make_target p4testgen
step install install_prefix
echo "== all steps done; ccache: $(ccache -s 2>/dev/null | grep -i 'hit' | head -n 2 | tr '\n' ' ')" | tee -a "$STEPS"
