//! ordo-slurm: meets a Slurm cluster where it is. Reads its nodes and queue through Slurm's own
//! clients or slurmrestd, orders the queue with `ordo-core` (the simulator's code) and applies
//! that order as job priorities, recording every change in an audit log.
//!
//! - [`client::Backend`] is what the driver needs from Slurm: [`SlurmCli`] (`sinfo`, `squeue`,
//!   `scontrol` with updates batched through one process, `sacct`, each bounded by a timeout)
//!   or [`SlurmRest`] (slurmrestd with a JWT over one kept-alive connection; between full reads
//!   it reads job states only and fetches the records of new and changed jobs, [`jobcache`]);
//! - [`squeue`] and [`json`] read what they print into [`SlurmNode`]s and [`SlurmJob`]s (with
//!   [`values`] for gres, TRES, host lists and array task lists); [`config`] reads the
//!   controller's priority plugin and weights, which set ordo's [`config::PriorityRange`];
//! - [`order::intended_order`] plans each partition with an `ordo_core::Scheduler` (running
//!   jobs on its nodes, its pending jobs, arrays task by task) and merges the plans into one
//!   ranked list with reasons; [`priorities::assign`] maps it to sparse priorities, changing
//!   as few as it can;
//! - [`drive::Driver`] does the passes (paced by [`pace::Pace`], logged by [`audit`]), leaving
//!   alone what people set by hand; [`release::release`] hands the priorities back.
//!
//! ordo never cancels, holds, requeues or edits anything but a pending job's priority.

pub mod audit;
pub mod cli;
pub mod client;
pub mod config;
pub mod drive;
pub mod emulate;
pub mod error;
pub mod job;
pub mod jobcache;
pub mod json;
pub mod order;
pub mod pace;
pub mod priorities;
pub mod release;
pub mod rest;
pub mod squeue;
pub mod topology;
pub mod values;

pub use audit::AuditRecord;
pub use cli::SlurmCli;
pub use client::Backend;
pub use drive::{DriveConfig, Driver, PassReport, TopologyFrom};
pub use error::SlurmError;
pub use job::{JobState, SlurmJob, SlurmNode};
pub use order::{intended_order, Intended, PlanSpec, Ranked};
pub use release::{release, ReleaseOutcome, ReleaseReport};
pub use rest::SlurmRest;
pub use topology::SlurmTopology;
