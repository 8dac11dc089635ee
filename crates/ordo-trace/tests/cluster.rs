//! Cluster specs: TOML node-group files, the Alibaba node list, and `COUNTxGPUS`, with their
//! errors.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_trace::{load_cluster, load_cluster_toml};
use std::path::PathBuf;

fn temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ordo-trace-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn toml_node_groups() {
    let p = temp(
        "c.toml",
        "[[groups]]\ncount = 2\ngpus = 8\ngpu_model = \"A100\"\ncpus = 128\nmemory = \"1T\"\n\n\
         [[groups]]\ncount = 3\ngpus = 4\nmemory = 262144\nname = \"v100-\"\n",
    );
    let c = load_cluster(p.to_str().unwrap()).unwrap();
    assert_eq!((c.nodes.len(), c.total_gpus(), c.describe()), (5, 28, "2x8:A100,3x4".to_string()));
    let a = &c.nodes[0];
    assert_eq!((a.name.as_str(), a.gpus, a.cpus, a.mem_mib), ("g1-0", 8, Some(128), Some(1024 * 1024)));
    assert_eq!(a.gpu_model.as_deref(), Some("A100"));
    let b = &c.nodes[4];
    assert_eq!(
        (b.name.as_str(), b.gpus, b.cpus, b.mem_mib, b.gpu_model.clone()),
        ("v100-2", 4, None, Some(262_144), None)
    );
}

#[test]
fn toml_errors() {
    let p = temp("typo.toml", "[[groups]]\ncount = 2\ngpu = 8\n");
    let e = load_cluster_toml(&p).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: ", p.display())) && e.contains("unknown field `gpu`"), "{e}");
    let p = temp("zero.toml", "[[groups]]\ncount = 0\ngpus = 8\n");
    let e = load_cluster_toml(&p).unwrap_err().to_string();
    assert_eq!(e, format!("{}:1: node group 1: count must be 1..=1000000, got 0", p.display()));
    let p = temp("mem.toml", "[[groups]]\ncount = 1\ngpus = 8\nmemory = \"lots\"\n");
    let e = load_cluster_toml(&p).unwrap_err().to_string();
    assert!(e.ends_with("memory \"lots\": expected MiB or a size like \"512G\""), "{e}");
    let p = temp("empty.toml", "groups = []\n");
    assert_eq!(load_cluster_toml(&p).unwrap_err().to_string(), format!("{}: the cluster has no nodes", p.display()));
    let e = load_cluster("/nonexistent/c.toml").unwrap_err().to_string();
    assert!(e.starts_with("/nonexistent/c.toml: cannot read: "), "{e}");
}

#[test]
fn specs_and_node_lists() {
    assert_eq!(load_cluster("32x8,16x4").unwrap().total_gpus(), 320);
    let e = load_cluster("32y8").unwrap_err().to_string();
    // The message is the parser's; the command adds which flag it was (`--cluster: ...`).
    assert!(e.starts_with("cluster spec term `32y8`: expected COUNTxGPUS"), "{e}");
    let p = temp("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,V100M32\nn1,64500,262144,2,P100\n");
    let c = load_cluster(p.to_str().unwrap()).unwrap();
    assert_eq!((c.nodes.len(), c.total_gpus()), (2, 10));
    assert_eq!((c.nodes[1].cpus, c.nodes[1].gpu_model.as_deref()), (Some(64), Some("P100")));
    let p = temp("bad-nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,eight,V100M32\n");
    let e = load_cluster(p.to_str().unwrap()).unwrap_err().to_string();
    assert_eq!(e, format!("{}:2: field `gpu`: expected a GPU count 0..=1024, found \"eight\"", p.display()));
}
