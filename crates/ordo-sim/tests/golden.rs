//! Golden tests: tiny traces whose schedules were worked out by hand (each file says why in its
//! header comment). A file holds `# key: value` settings (cluster, placement, policy and
//! optionally overhead in seconds, node_cpus and node_mem_mib), a generic-format CSV, and after `# expect: job_id,start,end
//! [,placement][,preemptions]` the expected first start, completion (seconds) and the named
//! columns of every job. Optional checks of the run's metrics: `# idle: HOL,FRAG,EMPTY` (idle
//! GPU-seconds by cause: head-of-line, fragmentation, empty queue), `# estimates: LABEL` and
//! `# jobs_without_estimate: N`. Quotas: `# quotas: LINE` lines make up a quota file's TOML
//! (docs/SERVER.md); `# never: ID ID ...` lists the jobs whose dependencies can never be met.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

use ordo_core::time::to_secs_f64;
use ordo_core::{ClusterSpec, Placement, PolicySpec};
use ordo_sim::engine::validate;
use ordo_sim::{simulate, SimConfig};
use ordo_trace::{load_reader, Format, LoadOptions};
use std::collections::BTreeMap;
use std::path::Path;

fn run_case(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut meta = BTreeMap::new();
    let (mut csv, mut expect) = (String::new(), Vec::new());
    let mut in_expect = false;
    let mut cols: Vec<String> = Vec::new();
    let mut quotas = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# quotas: ") {
            quotas.push_str(rest);
            quotas.push('\n');
        } else if let Some(rest) = line.strip_prefix("# expect:") {
            in_expect = true;
            cols = rest.trim().split(',').map(str::to_string).collect();
        } else if let Some(rest) = line.strip_prefix("# ") {
            if let Some((k, v)) = rest.split_once(": ") {
                meta.insert(k.trim().to_string(), v.trim().to_string());
            }
        } else if in_expect {
            expect.push(line.split(',').map(str::to_string).collect::<Vec<_>>());
        } else {
            csv.push_str(line);
            csv.push('\n');
        }
    }
    let mut cluster = ClusterSpec::parse(&meta["cluster"]).map_err(|e| e.to_string())?;
    // Optional per-node CPUs and memory (every node alike).
    for n in &mut cluster.nodes {
        n.cpus = meta.get("node_cpus").map(|v| v.parse()).transpose().map_err(|e| format!("node_cpus: {e}"))?;
        n.mem_mib =
            meta.get("node_mem_mib").map(|v| v.parse()).transpose().map_err(|e| format!("node_mem_mib: {e}"))?;
    }
    let placement: Placement = meta["placement"].parse()?;
    let policy: PolicySpec = meta["policy"].parse().map_err(|e: ordo_core::policy::PolicyParseError| e.to_string())?;
    let opts = LoadOptions::new(Format::Generic);
    let w = load_reader(csv.as_bytes(), "golden", &opts).map_err(|e| e.to_string())?.workload;
    let mut cfg = SimConfig::new(cluster.clone(), placement, policy);
    cfg.check_invariants = true;
    if let Some(o) = meta.get("overhead") {
        cfg.preemption_overhead = o.parse::<i64>().map_err(|e| e.to_string())? * 1000;
    }
    if !quotas.is_empty() {
        cfg.quotas = Some(ordo_trace::parse_quotas(&quotas, "golden quotas").map_err(|e| e.to_string())?);
    }
    let out = simulate(&w, &cfg).map_err(|e| e.to_string())?;
    let never: Vec<&str> = out.never_satisfied.iter().map(|r| w.jobs[r.job.idx()].name.as_str()).collect();
    let want_never: Vec<&str> = meta.get("never").map(|v| v.split_whitespace().collect()).unwrap_or_default();
    if never != want_never {
        return Err(format!("never satisfied: expected {want_never:?}, got {never:?} ({:?})", out.never_satisfied));
    }
    validate(&w, &cluster, &out, cfg.preemption_overhead)?;
    let m = &out.metrics;
    if let Some(want) = meta.get("idle") {
        let c = &m.idle_causes;
        let got: Vec<String> = [c.head_of_line_gpu_hours, c.fragmentation_gpu_hours, c.empty_queue_gpu_hours]
            .iter()
            .map(|h| format!("{}", (h * 3600.0 * 1000.0).round() / 1000.0))
            .collect();
        if got.join(",") != *want {
            return Err(format!("idle GPU-seconds by cause: expected {want}, got {}", got.join(",")));
        }
    }
    if let Some(want) = meta.get("estimates") {
        if m.estimates != *want {
            return Err(format!("estimates: expected {want}, got {}", m.estimates));
        }
    }
    if let Some(want) = meta.get("jobs_without_estimate") {
        if m.jobs_without_estimate.to_string() != *want {
            return Err(format!("jobs_without_estimate: expected {want}, got {}", m.jobs_without_estimate));
        }
    }
    if expect.len() != out.records.len() {
        return Err(format!("{} jobs expected, {} ran", expect.len(), out.records.len()));
    }
    for e in &expect {
        let r = out
            .records
            .iter()
            .find(|r| w.jobs[r.job.idx()].name == e[0])
            .ok_or_else(|| format!("job {} did not run", e[0]))?;
        let got = (to_secs_f64(r.start), to_secs_f64(r.end));
        let want: (f64, f64) = (e[1].parse().unwrap(), e[2].parse().unwrap());
        if got != want {
            return Err(format!("job {}: expected start,end {want:?}, got {got:?}", e[0]));
        }
        for (c, want) in cols.iter().zip(e).skip(3) {
            let got = match c.as_str() {
                "placement" => r.placement_label(&cluster),
                "preemptions" => r.preemptions.to_string(),
                other => return Err(format!("unknown expect column {other}")),
            };
            if &got != want {
                return Err(format!("job {}: expected {c} {want}, got {got}", e[0]));
            }
        }
    }
    Ok(())
}

#[test]
fn golden_schedules() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "golden cases missing in {}", dir.display());
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| run_case(f).err().map(|e| format!("{}: {e}", f.file_name().unwrap().to_string_lossy())))
        .collect();
    assert!(failures.is_empty(), "golden failures:\n{}", failures.join("\n"));
}
