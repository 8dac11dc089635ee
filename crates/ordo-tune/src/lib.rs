//! ordo-tune: searches the policy space (orders x backfill x parameters x starvation guard) on a
//! workload by simulation, under constraints, and picks a recommendation from the Pareto front.
//!
//! [`space`] enumerates the candidates, [`search`] runs them in parallel within a budget, and
//! [`select`] holds the constraint, Pareto-front and recommendation logic (pure functions).

pub mod search;
pub mod select;
pub mod space;

pub use search::{tune, Dropped, Evaluated, StopReason, TuneOptions, TuneResult};
pub use select::{summarize, Constraints, Limit, Objective, Summary};
pub use space::{topology_rules, Candidate, Space, TopoRule};

/// Why tuning failed.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A simulation failed (an internal inconsistency of the simulator).
    #[error("simulating `{policy}`: {source}")]
    Sim {
        /// The policy.
        policy: String,
        /// The simulator's error.
        source: ordo_sim::SimError,
    },
    /// A candidate of the search space is not a policy name `PolicySpec` accepts (a bug in the
    /// space's tables).
    #[error("search space produced an unparsable policy: {0}")]
    Space(#[from] ordo_core::policy::PolicyParseError),
}

/// Why a constraint or objective given as text could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{text}`: {why}")]
pub struct ParseError {
    /// The text given.
    pub text: String,
    /// What was wrong.
    pub why: String,
}
