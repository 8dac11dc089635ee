//! `ordo slurm` on a real Slurm with a network topology: the third dev cluster of
//! `scripts/slurm-dev-cluster.sh start DIR --topology` (Slurm 22.05, `topology/tree`: leaf
//! switch s0 over n1 and n2 (8 GPUs each), s1 over n3 (4 GPUs), s2 above both). ordo reads the
//! topology from the controller's `scontrol show topology`, and a job submitted with
//! `sbatch --switches=1` waits in ordo's plan, as in Slurm, until one leaf switch holds it.
//! `$ORDO_SLURM_TOPO_CONF` names that cluster's slurm.conf (`.ci/run` starts it); skipped
//! without it, except under `CI=true`.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod slurm_common;

use ordo_slurm::job::{JobState, SlurmJob};
use ordo_slurm::squeue::{parse_squeue, squeue_format};
use slurm_common::wait_for;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// The tests share one cluster: one at a time.
static LOCK: Mutex<()> = Mutex::new(());

/// The topology dev cluster's slurm.conf, or `None` after saying why (a failure under CI=true).
fn topo_cluster() -> Option<PathBuf> {
    let conf = std::env::var_os("ORDO_SLURM_TOPO_CONF").map(PathBuf::from).filter(|p| p.is_file());
    if conf.is_none() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI must start the topology dev cluster (scripts/slurm-dev-cluster.sh start DIR --topology) and set ORDO_SLURM_TOPO_CONF"
        );
        eprintln!(
            "skipped: no Slurm with a topology (scripts/slurm-dev-cluster.sh start DIR --topology; ORDO_SLURM_TOPO_CONF=DIR/slurm.conf)"
        );
    }
    conf
}

/// A Slurm client command on that cluster (bounded: a client waits for a controller that does
/// not answer); its standard output.
fn slurm(conf: &Path, cmd: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("30")
        .arg(cmd)
        .args(args)
        .env("SLURM_CONF", conf)
        .env("TZ", "UTC")
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn ordo(conf: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).env("SLURM_CONF", conf).output().unwrap();
    assert!(
        out.status.success(),
        "ordo {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The controller's jobs as the driver reads them (`squeue -O`, the driver's own format).
fn jobs(conf: &Path) -> Vec<SlurmJob> {
    let format = squeue_format();
    parse_squeue(&slurm(conf, "squeue", &["-h", "--all", "-t", "PD,R,CF,CG", "-O", &format])).unwrap()
}

/// Jobs submitted by a test; cancelled when it ends, however it ends.
struct Jobs<'a>(&'a Path, Vec<u64>);

impl Jobs<'_> {
    fn sbatch(&mut self, args: &[&str]) -> u64 {
        let mut all = vec!["--parsable", "-o", "/dev/null", "-D", "/tmp"];
        all.extend_from_slice(args);
        let id: u64 = slurm(self.0, "sbatch", &all).trim().split(';').next().unwrap().parse().unwrap();
        self.1.push(id);
        id
    }
}

impl Drop for Jobs<'_> {
    fn drop(&mut self) {
        if !self.1.is_empty() {
            let ids: Vec<String> = self.1.iter().map(u64::to_string).collect();
            let _ = Command::new("timeout").arg("30").arg("scancel").args(&ids).env("SLURM_CONF", self.0).output();
        }
    }
}

/// `ordo slurm topology` reads the controller's tree as the script's topology.conf gives it.
#[test]
fn reads_the_topology_from_scontrol_show_topology() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(conf) = topo_cluster() else { return };
    // What the controller prints (each switch with its level; s2 lists its nodes and switches).
    let raw = slurm(&conf, "scontrol", &["show", "topology"]);
    assert!(raw.contains("SwitchName=s2 Level=1") && raw.contains("Switches=s[0-1]"), "{raw}");
    let doc: serde_json::Value = serde_json::from_str(&ordo(&conf, &["slurm", "topology", "--json"])).unwrap();
    assert_eq!(doc["source"], "scontrol show topology");
    let levels: Vec<(String, ordo_slurm::topology::Units)> = doc["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let units = l["units"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| {
                    let nodes = u["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string());
                    (u["name"].as_str().unwrap().to_string(), nodes.collect())
                })
                .collect();
            (l["level"].as_str().unwrap().to_string(), units)
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        levels,
        vec![
            ("switch".to_string(), vec![("s0".to_string(), s(&["n1", "n2"])), ("s1".to_string(), s(&["n3"]))]),
            ("spine".to_string(), vec![("s2".to_string(), s(&["n1", "n2", "n3"]))]),
        ]
    );
    let text = ordo(&conf, &["slurm", "topology"]);
    assert!(text.starts_with("tree from scontrol show topology: 2 switch, 1 spine (3 nodes)"), "{text}");
}

/// With n2's 8 GPUs taken, a 10-GPU job submitted with `--switches=1` fits no leaf switch (s0
/// has 8 free, s1 4): Slurm holds it, ordo reads its ask and its plan holds it too, naming the
/// switch; planned without the topology, ordo would start it on n1 and n3.
#[test]
fn a_job_with_switches_1_waits_for_one_leaf_switch_in_ordos_plan() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(conf) = topo_cluster() else { return };
    wait_for("an idle cluster", Duration::from_secs(120), || {
        jobs(&conf).iter().all(|j| !matches!(j.state, JobState::Pending | JobState::Running))
    });
    let mut submitted = Jobs(&conf, Vec::new());
    let blocker = submitted.sbatch(&["-w", "n2", "--gres=gpu:8", "--time=5", "--wrap", "sleep 240"]);
    wait_for("the blocker to run", Duration::from_secs(30), || {
        jobs(&conf).iter().any(|j| j.id == blocker && j.state == JobState::Running)
    });
    let gang = submitted.sbatch(&["--switches=1", "--gpus=10", "-N2", "--time=5", "--wrap", "sleep 5"]);
    std::thread::sleep(Duration::from_secs(3)); // a scheduling pass or two
    let q = jobs(&conf);
    let j = q.iter().find(|j| j.id == gang).unwrap();
    // Slurm holds it (the default max_switch_wait is 5 minutes) and ordo reads its ask.
    assert_eq!(j.state, JobState::Pending, "{j:?}");
    assert_eq!((j.gpus, j.switches, j.switch_wait_s), (10, 1, 300), "{j:?}");

    let audit = std::env::temp_dir().join(format!("ordo-slurm-topology-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&audit);
    let audit = audit.display().to_string();
    let row = |out: &str| -> String {
        let id = format!(" {gang} ");
        out.lines()
            .find(|l| l.contains(&id) && l.contains("  10  "))
            .unwrap_or_else(|| panic!("job {gang}: {out}"))
            .into()
    };
    // By the controller's topology (the default where it has one): it waits for one switch.
    let out = ordo(&conf, &["slurm", "drive", "--policy", "fifo+easy", "--dry-run", "--once", "--audit-log", &audit]);
    assert!(out.contains("topology: tree from scontrol show topology: 2 switch, 1 spine"), "{out}");
    assert!(out.contains("by topology (switch, spine)"), "{out}");
    let r = row(&out);
    assert!(
        r.contains(
            "first in line; waits for resources (needs 10 GPUs within one switch; the most free in any switch is 8)"
        ) && r.contains("--switches=1 (required:switch)"),
        "{r}"
    );
    // The same with --placement topology, and with the topology given as a file.
    let dir = conf.parent().unwrap();
    let file = dir.join("topology.conf").display().to_string();
    for extra in [vec!["--placement", "topology"], vec!["--topology", file.as_str()]] {
        let mut args = vec!["slurm", "drive", "--policy", "fifo+easy", "--dry-run", "--once", "--audit-log", &audit];
        args.extend(extra.iter().copied());
        let r = row(&ordo(&conf, &args));
        assert!(r.contains("within one switch") && r.contains("--switches=1 (required:switch)"), "{extra:?}: {r}");
    }
    // Without the topology ordo would start it across the switches, on n1 and n3.
    let out = ordo(
        &conf,
        &[
            "slurm",
            "drive",
            "--policy",
            "fifo+easy",
            "--dry-run",
            "--once",
            "--audit-log",
            &audit,
            "--placement",
            "consolidated",
        ],
    );
    assert!(!out.contains("by topology"), "{out}");
    let r = row(&out);
    assert!(r.contains("starts now (fits: n1:8,n3:2)") && !r.contains("switches"), "{r}");
    // Slurm still holds it: ordo's plan and Slurm agree.
    let j = jobs(&conf).into_iter().find(|j| j.id == gang).unwrap();
    assert_eq!(j.state, JobState::Pending, "{j:?}");
    let _ = std::fs::remove_file(&audit);
}

/// Without a Slurm: a topology.conf given with `--topology` is read (and a bad one refused with
/// its file and line) before Slurm is asked anything, and placements that cannot use it are
/// refused.
#[test]
fn a_topology_file_is_read_and_bad_ones_are_refused_before_slurm_is_asked() {
    let dir = std::env::temp_dir().join(format!("ordo-slurm-topology-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("topology.conf");
    std::fs::write(&good, "SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n3\nSwitchName=s2 Switches=s[0-1]\n")
        .unwrap();
    let bad = dir.join("bad.conf");
    std::fs::write(&bad, "SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n2\n").unwrap();
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_ordo")).args(args).output().unwrap();
    let out = run(&["slurm", "topology", "--topology", good.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 switch, 1 spine (3 nodes)") && text.contains("switch s0: n1,n2 (2 nodes)"), "{text}");
    let out = run(&["slurm", "topology", "--topology", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}: line 2: node `n2` is under two switches, `s0` (line 1) and `s1`", bad.display())),
        "{err}"
    );
    let drive = |extra: &[&str]| {
        let mut args = vec!["slurm", "drive", "--policy", "fifo", "--once", "--dry-run"];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = drive(&["--topology", bad.to_str().unwrap()]);
    assert!(err.contains("line 2") && err.contains("two switches"), "{err}");
    let err = drive(&["--topology", good.to_str().unwrap(), "--placement", "pooled"]);
    assert!(err.contains("use it with --placement topology"), "{err}");
    let err = drive(&["--cluster", "2x8", "--placement", "topology"]);
    assert!(err.contains("--cluster plans for nodes that are not Slurm's"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ordo slurm import` writes the controller's topology beside the trace, on the simulated
/// cluster's node names, and the command it prints next runs `compare` with and without it.
#[test]
fn import_writes_the_topology_on_the_simulated_nodes_for_compare() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(conf) = topo_cluster() else { return };
    let dir = conf.parent().unwrap().to_path_buf();
    let mut submitted = Jobs(&conf, Vec::new());
    let id = submitted.sbatch(&["--gres=gpu:1", "--time=1", "--wrap", "sleep 1"]);
    let log = dir.join("log").join("jobcomp.txt");
    wait_for("the job in the job completion log", Duration::from_secs(60), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().any(|l| l.starts_with(&format!("JobId={id} "))))
    });
    let out_dir = std::env::temp_dir().join(format!("ordo-slurm-topology-import-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let trace = out_dir.join("hist.csv");
    let out = ordo(&conf, &["slurm", "import", "--jobcomp", log.to_str().unwrap(), "--out", trace.to_str().unwrap()]);
    let written = out_dir.join("hist.topology.conf");
    assert!(
        out.contains(&format!(
            "topology: tree from scontrol show topology: 2 switch, 1 spine, written on the simulated nodes' names: {}",
            written.display()
        )),
        "{out}"
    );
    // sinfo's n1, n2, n3 are the simulated n0, n1, n2 of --cluster 2x8,1x4.
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(
        text.contains("SwitchName=s0 Nodes=n0,n1\nSwitchName=s1 Nodes=n2\nSwitchName=s2 Switches=s0,s1\n"),
        "{text}"
    );
    let next = out.lines().find_map(|l| l.strip_prefix("next: ordo ")).unwrap_or_else(|| panic!("{out}"));
    assert!(next
        .ends_with(&format!("--cluster 2x8,1x4 --topology {} --placement consolidated,topology", written.display())));
    let args: Vec<&str> = next.split_whitespace().collect();
    let compared = ordo(&conf, &args);
    assert!(compared.contains("fifo @consolidated") && compared.contains("fifo @topology"), "{compared}");
    let _ = std::fs::remove_dir_all(&out_dir);
}
