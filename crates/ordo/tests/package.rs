//! What the package and the image ship, checked without installing them (scripts/deb-check.sh
//! installs the package; docs/INSTALL.md): the sample /etc/ordo files are valid for the units'
//! command lines, and the image definition agrees with deploy/deployment.yaml and with what the
//! binary needs (distroless `cc`'s libraries, a non-root user).

mod harness;

use harness::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The units run `ordo server --config /etc/ordo/server.toml` and `ordo agent --config
/// /etc/ordo/agent.toml`; the shipped samples must be accepted as they are.
#[test]
fn units_run_the_sample_configs() {
    let server_unit = read("deploy/debian/ordo-server.service");
    let agent_unit = read("deploy/debian/ordo-agent.service");
    assert!(server_unit.contains("\nExecStart=/usr/bin/ordo server --config /etc/ordo/server.toml\n"));
    assert!(server_unit.contains("\nUser=ordo\n") && server_unit.contains("\nStateDirectory=ordo\n"));
    assert!(agent_unit.contains("\nExecStart=/usr/bin/ordo agent --config /etc/ordo/agent.toml\n"));
    assert!(agent_unit.contains("\nDelegate=yes\n") && agent_unit.contains("\nUser=root\n"));
    // The sample's database is in the unit's state directory.
    assert!(read("deploy/etc/server.toml").contains("\ndb = \"/var/lib/ordo/ordo.db\"\n"));

    // The server's sample, as it is (only the database and port moved to a test directory).
    let dir = tempdir("package-samples");
    let mut c = Command::new(ORDO);
    c.args(["server", "--config"])
        .arg(repo("deploy/etc/server.toml"))
        .arg("--db")
        .arg(dir.join("ordo.db"))
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::null());
    let (server, url) = listening(c);
    assert!(url.starts_with("http://127.0.0.1:"), "the sample server.toml: {url}");
    drop(server);

    // The agent's sample: past its configuration to the point where it looks for its server
    // (fake GPUs and no cgroup here: the test machine may have neither NVML nor root).
    let tok = secret_file(&dir.join("agent.token"), "ordo_1_0000");
    let log = dir.join("agent.log");
    let mut c = Command::new(ORDO)
        .args(["agent", "--config"])
        .arg(repo("deploy/etc/agent.toml"))
        .arg("--token-file")
        .arg(&tok)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .args(["--gpus", "1", "--no-cgroup", "--name", "sample"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start agent");
    wait_for("the agent to try its server", Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("cannot reach the server at https://ordo.example:7700")
            || c.try_wait().ok().flatten().is_some()
    });
    let still_running = c.try_wait().expect("wait").is_none();
    let _ = c.kill();
    let _ = c.wait();
    assert!(
        still_running,
        "the agent stopped on the sample agent.toml: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// deploy/Containerfile and deploy/deployment.yaml agree: the binary's path, the user, the
/// command; and the deployment's arguments are ones `ordo kube schedule` takes.
#[test]
fn image_definition_matches_the_deployment() {
    let cf = read("deploy/Containerfile");
    let dep = read("deploy/deployment.yaml");
    assert!(cf.contains("\nFROM gcr.io/distroless/cc-debian12:nonroot\n"));
    assert!(cf.contains("\nUSER 65532:65532\n") && dep.contains("runAsUser: 65532"));
    assert!(cf.contains("\nENTRYPOINT [\"/usr/local/bin/ordo\"]\n"));
    assert!(cf.contains("cargo build --release --locked -p ordo --bin ordo"));
    let args: Vec<String> = dep
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- ").map(str::to_string))
        .collect();
    assert_eq!(args[..2], ["kube", "schedule"], "{args:?}");
    let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
    a.push("--help");
    let out = ordo(&a);
    assert!(out.status.success(), "ordo {a:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The binary needs only libraries that distroless `cc` has (NVML is loaded at run time, not
/// linked), and runs as the image's user 65532 with its database in a directory it owns.
#[test]
fn binary_fits_the_image() {
    let Ok(out) = Command::new("ldd").arg(ORDO).output() else {
        assert!(!under_ci(), "ldd is missing");
        eprintln!("skipped: ldd is missing");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let have = [
        "linux-vdso.so.1",
        "libgcc_s.so.1",
        "libm.so.6",
        "libc.so.6",
        "ld-linux-x86-64.so.2",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
    ];
    for l in text.lines() {
        let lib = l.split_whitespace().next().unwrap_or("");
        let name = Path::new(lib).file_name().and_then(|n| n.to_str()).unwrap_or(lib);
        assert!(have.contains(&name), "the binary links {name}, which distroless cc does not have: {text}");
    }
    if runas_ordo_user_impossible() {
        return;
    }
    // A copy of the binary where uid 65532 can reach it (the checkout's folders may be closed
    // to other users), as the image has it at a path of its own.
    let dir = tempdir("package-nonroot");
    let bin = dir.join("ordo");
    std::fs::copy(ORDO, &bin).expect("copy the binary");
    let state = dir.join("state");
    std::fs::create_dir(&state).expect("state dir");
    std::os::unix::fs::chown(&state, Some(65532), Some(65532)).expect("chown");
    let mut c = Command::new("setpriv");
    c.args(["--reuid", "65532", "--regid", "65532", "--clear-groups"])
        .arg(&bin)
        .args(["server", "--listen", "127.0.0.1:0", "--db"])
        .arg(state.join("ordo.db"))
        .stderr(Stdio::null());
    let (server, url) = listening(c);
    assert!(url.starts_with("http://127.0.0.1:"), "as uid 65532: {url}");
    drop(server);
    let meta = std::fs::metadata(state.join("ordo.db")).expect("the database");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.uid(), 65532);
}

/// Running as another user needs root and `setpriv` (util-linux), and the binary readable by
/// that user; says why when it cannot.
fn runas_ordo_user_impossible() -> bool {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
    if root && setpriv {
        return false;
    }
    assert!(!under_ci(), "CI runs as root with setpriv");
    eprintln!("skipped: running as uid 65532 needs root and setpriv");
    true
}
