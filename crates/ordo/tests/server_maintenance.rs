//! Day-to-day operation without destroying work: an agent restarted (or upgraded) mid-job
//! takes its running jobs over instead of killing them. Real server, agent and job processes.

mod harness;

use harness::*;
use std::process::Command;
use std::time::Duration;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// An agent stopped (SIGTERM, as `systemctl restart` does, and then kill -9) while its job runs,
/// and started again: the job goes on, uninterrupted, runs exactly once, and completes (before:
/// the node went down and its jobs were requeued and restarted from the beginning).
#[test]
fn an_agent_restart_keeps_its_running_jobs() {
    if !needs(is_root(), "root, for the agent's cgroups") {
        return;
    }
    let dir = tempdir("agent-restart");
    let (admin, alice) = tokens(&dir);
    let (_srv, url) = server(&dir, "127.0.0.1:0", "fifo");
    let work = dir.join("work-gpu1");
    let start_agent = || {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent-gpu1.log")).expect("log");
        Proc(
            Command::new(ORDO)
                .args(["agent", "--server", &url, "--name", "gpu1", "--gpus", "1", "--grace", "500ms"])
                .args(["--run-as", &whoami()])
                .arg("--token-file")
                .arg(dir.join("token-gpu1"))
                .arg("--work-dir")
                .arg(&work)
                .stderr(log)
                .spawn()
                .expect("agent"),
        )
    };
    let tok = token(&dir.join("ordo.db"), "gpu1", Some("--agent"));
    secret_file(&dir.join("token-gpu1"), &tok);
    let stamps = dir.join("ticks");
    let script =
        format!("for i in $(seq 1 40); do echo \"$ORDO_RESTARTS $i\" >> {}; sleep 0.1; done", stamps.display());
    for how in ["TERM", "KILL"] {
        let mut agent = start_agent();
        wait_for("gpu1 up", Duration::from_secs(30), || {
            cli_json(&url, &admin, &["nodes"]).as_array().is_some_and(|a| a.iter().any(|n| n["state"] == "up"))
        });
        let _ = std::fs::remove_file(&stamps);
        let id =
            cli_json(&url, &alice, &["submit", "--gpus", "1", "--", "sh", "-c", &script])["id"].as_u64().expect("id");
        wait_for("the job ticks", Duration::from_secs(30), || {
            std::fs::read_to_string(&stamps).is_ok_and(|t| t.lines().count() >= 5)
        });
        Command::new("kill").args([&format!("-{how}"), &agent.0.id().to_string()]).status().expect("kill");
        let _ = agent.0.wait();
        std::thread::sleep(Duration::from_millis(300));
        let _again = start_agent();
        let j = wait_ended(&url, &alice, id, Duration::from_secs(60));
        assert_eq!(j["state"], "completed", "{how}: {j}");
        assert_eq!(j["restarts"], 0, "{how}: the job was not restarted: {j}");
        let ticks: Vec<String> = std::fs::read_to_string(&stamps).expect("ticks").lines().map(str::to_string).collect();
        let want: Vec<String> = (1..=40).map(|i| format!("0 {i}")).collect();
        assert_eq!(ticks, want, "{how}: it ran once, every tick in order, none twice");
        drop(_again);
        std::thread::sleep(Duration::from_millis(300));
    }
}
