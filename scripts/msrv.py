#!/usr/bin/env python3
"""MSRV check: every crate in the build graph must build with the workspace's `rust-version`.

This machine has one Rust toolchain and cannot fetch another, so the check has two parts that
need none: clippy's `incompatible_msrv` lint (denied in Cargo.toml) catches our own uses of
std APIs newer than `rust-version`, and this script catches dependencies (and members) that
declare a newer `rust-version` than ours. Where a toolchain of exactly that version is
installed (`rustup toolchain list`), it also runs `cargo +VERSION check --workspace`.
"""

import json
import subprocess
import sys


def version(text):
    return tuple(int(part) for part in text.split("."))


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    members = {p["id"]: p for p in meta["packages"] if p["id"] in meta["workspace_members"]}
    ours = {p.get("rust_version") for p in members.values()}
    if len(ours) != 1 or None in ours:
        sys.exit(f"msrv: every workspace member must declare the workspace rust-version; found {ours}")
    msrv = ours.pop()
    used = {node["id"] for node in meta["resolve"]["nodes"]}
    newer = [
        f"{p['name']} {p['version']} needs Rust {p['rust_version']}"
        for p in meta["packages"]
        if p["id"] in used and p.get("rust_version") and version(p["rust_version"]) > version(msrv)
    ]
    if newer:
        sys.exit(f"msrv: rust-version is {msrv}, but:\n  " + "\n  ".join(sorted(newer)))
    print(f"msrv: every crate in the build graph accepts Rust {msrv}")
    toolchains = subprocess.run(["rustup", "toolchain", "list"], capture_output=True, text=True).stdout
    if any(line.startswith(msrv) for line in toolchains.splitlines()):
        subprocess.run(["cargo", f"+{msrv}", "check", "--workspace", "--locked"], check=True)
        print(f"msrv: cargo +{msrv} check passed")
    else:
        print(
            f"msrv: no {msrv} toolchain installed here; `cargo +{msrv} check --workspace` runs where one is"
        )


if __name__ == "__main__":
    main()
