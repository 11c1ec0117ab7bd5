#!/usr/bin/env bash
# Installs the Debian packages the test suite uses when they are missing, as root with apt-get
# (CI runs as root on a fresh machine). Without root or apt-get it only says what is missing:
# the tests that need a package then print a SKIPPED line with the reason.
#   libjemalloc2, libgoogle-perftools4  malloc replacements preloaded beside libmlprof.so
#   faketime                            libfaketime shifts one collector's wall clock in the
#                                       two-node merge test (tests/tests/scale.rs)
#   openjdk-17-jre-headless             Java for PySpark, which reads `mlprof export --parquet`
#                                       in tests/tests/scale.rs
#   chromium                            renders the HTML report headless (tests/tests/report.rs)
#   strace                              the reference counts of the strace-shaped view and of
#                                       complete mode (tests/tests/syscalls.rs, all_syscalls.rs)
set -euo pipefail
packages=(libjemalloc2 libgoogle-perftools4 faketime openjdk-17-jre-headless chromium strace)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: missing ${missing[*]} (not root or no apt-get): the tests that need them will be skipped" >&2
    exit 0
fi
echo "system-deps: installing ${missing[*]}" >&2
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        echo "system-deps: could not install ${missing[*]}: the tests that need them will be skipped" >&2
fi
