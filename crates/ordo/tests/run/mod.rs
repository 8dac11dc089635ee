//! Running the `ordo` binary built for the integration tests of this crate.

/// Runs the `ordo` binary built for these tests.
pub fn ordo(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).output().expect("ordo runs")
}

/// Its standard output, after checking that it succeeded.
pub fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "ordo failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}
