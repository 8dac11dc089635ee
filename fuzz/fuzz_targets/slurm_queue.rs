//! Fuzzes what `ordo slurm drive` reads from Slurm: `squeue` and `sinfo` text, `squeue --json`
//! and slurmrestd's nodes document. Arbitrary bytes must never panic: each reader answers
//! with records or an error naming where.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(jobs) = ordo_slurm::squeue::parse_squeue(&text) {
        assert!(jobs.iter().all(|j| j.id > 0));
    }
    let _ = ordo_slurm::squeue::parse_sinfo(&text);
    let _ = ordo_slurm::json::parse_jobs(&text, "fuzz");
    if let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) {
        let _ = ordo_slurm::json::parse_nodes(&doc);
    }
});
