#!/usr/bin/env bash
# Builds the Debian package of the `ordo` binary: target/debian/ordo_VERSION-1_ARCH.deb.
# The binary (release, locked), then its completions and man pages from the clap definitions
# (`ordo generate`), then `cargo deb` packs them with the units and sample configuration
# (crates/ordo/Cargo.toml, [package.metadata.deb]; deploy/debian, deploy/etc). Needs cargo-deb
# (`cargo install cargo-deb --locked`; .ci/run installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p ordo --bin ordo
rm -rf "$TARGET/release/assets"
"$TARGET/release/ordo" generate --out "$TARGET/release/assets"
# Debian ships man pages gzipped (cargo-deb compresses only assets it did not build).
gzip -9n "$TARGET/release/assets/man/"*.1
cargo deb -p ordo --no-build --locked "$@"
