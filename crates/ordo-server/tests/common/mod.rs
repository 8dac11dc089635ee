//! Helpers shared by the state-machine tests: temporary directories, principals, and the
//! requests a test sends (a 1-minute job, a fake-GPU node's registration).

#![allow(dead_code)] // each test file uses some of them

use ordo_server::api::*;
use ordo_server::auth::{Principal, Role};
use ordo_server::ServerConfig;
use std::path::PathBuf;

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-state-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

pub fn cfg(dir: &std::path::Path, policy: &str) -> ServerConfig {
    let mut c = ServerConfig { db: dir.join("ordo.db"), ..ServerConfig::default() };
    c.set_policy("test", policy).expect("policy");
    c
}

pub fn user(name: &str) -> Principal {
    Principal { user: name.into(), role: Role::User }
}

pub fn agent(node: &str) -> Principal {
    Principal { user: node.into(), role: Role::Agent }
}

pub fn job(gpus: u32) -> SubmitRequest {
    SubmitRequest {
        name: None,
        command: vec!["true".into()],
        cwd: None,
        gpus,
        cpus: None,
        mem_mib: None,
        time_limit_ms: Some(60_000),
        priority: None,
        on_node_failure: None,
        no_preempt: None,
        umask: None,
        after: vec![],
        array: None,
        nodes: None,
        output: None,
        gpu_models: vec![],
        gpu_mem_mib: None,
        features: vec![],
        preempt: None,
        topology: None,
    }
}

pub fn reg(node: &str, gpus: u32) -> RegisterRequest {
    RegisterRequest {
        node: node.into(),
        gpus,
        fake: true,
        gpu_model: None,
        gpu_mem_mib: None,
        features: vec![],
        topology: Default::default(),
        cpus: None,
        mem_mib: None,
        mem_limits: false,
        clock: None,
        addr: None,
    }
}
