//! The API server restarts under a running scheduler, and its watches expire (410 Gone): the
//! scheduler relists and goes on, binding nothing twice. Its own test binary, because it
//! restarts the API server that the other tests share.
#![allow(clippy::unwrap_used)]

mod common;
use common::{bound, Cluster};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_expires_the_watches_and_the_scheduler_relists() {
    let Some(c) = Cluster::new("apirestart").await else { return };
    c.node("n1", 4).await;
    let s = c.start("fifo").await;
    c.pod("a", 2, json!({})).await;
    c.wait_for("a bound", 20, |s| bound(s) == ["a"]).await;
    c.pod("b", 4, json!({})).await;
    c.wait_for("b's reason", 20, |s| s["b"].1.is_some()).await;
    let before = s.stats();
    assert_eq!(before.stats.pod_lists, 1, "{before:?}");
    // A write the scheduler does not watch: after the restart, the API server's watch cache
    // starts past the scheduler's last resourceVersion, so resuming the watch is refused with
    // 410 Gone (as when a watch expires) and the scheduler must list again.
    let cms: Api<ConfigMap> = Api::namespaced(c.admin.clone(), &c.name);
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "bump"}})).unwrap())
        .await
        .unwrap();
    let out = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/k8s-dev-apiserver.sh"))
        .arg("restart")
        .arg(&c.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "restart: {}", String::from_utf8_lossy(&out.stderr));
    // The watches come back through a relist.
    let t0 = Instant::now();
    while s.stats().stats.pod_lists < 2 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no relist after the restart: {:?}", s.stats());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Scheduling goes on: a ends, b is bound; a is not bound again.
    c.set_phase("a", "Succeeded").await;
    c.wait_for("b bound", 30, |s| s["b"].0.is_some()).await;
    let st = s.stats();
    assert_eq!((st.stats.binds, st.stats.conflicts), (2, 0), "{st:?}");
    assert!(st.watch_errors >= 1, "{st:?}");
    c.assert_no_overcommit().await;
    s.stop().await;
    c.cleanup().await;
}
