//! ordo-sim: the discrete-event simulator (it owns time; the policy owns decisions), the
//! metrics computed from a run, and the built-in workload generators.

pub mod asrun;
pub mod engine;
pub mod metrics;
pub mod reclaim;
pub mod transform;
pub mod workload;

pub use engine::{
    simulate, simulate_with_changes, Declared, JobRecord, PreemptionRules, SimConfig, SimError, SimOutput,
};
pub use metrics::Metrics;
