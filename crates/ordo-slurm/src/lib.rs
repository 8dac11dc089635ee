//! ordo-slurm: meets a Slurm cluster where it is. Reads its nodes and queue through Slurm's own
//! clients, orders the queue with `ordo-core` (the simulator's code) and applies that order as
//! job priorities, recording every change in an audit log.
//!
//! - [`client::SlurmCli`] runs `sinfo`, `squeue --json`, `scontrol` and `sacct`, each call
//!   bounded by a timeout (Slurm clients hang while no controller answers); [`client::SlurmRest`]
//!   does the same through slurmrestd with a JWT; both are a [`client::Backend`];
//! - [`parse`] reads their output into [`SlurmNode`]s and [`SlurmJob`]s;
//! - [`order::intended_order`] commits running jobs to an `ordo_core::Scheduler` on the nodes
//!   Slurm gave them, submits the orderable pending jobs, and turns one explained scheduling
//!   pass into a ranked list with reasons; [`order::assign_priorities`] maps it to strictly
//!   descending priorities, changing nothing when Slurm's order already matches;
//! - [`drive::drive_once`] does one pass and logs every change; [`drive::release`] hands the
//!   priorities back to Slurm.
//!
//! ordo never cancels, holds, requeues or edits anything but a pending job's priority.

pub mod client;
pub mod drive;
pub mod error;
pub mod order;
pub mod parse;

pub use client::{Backend, SlurmCli, SlurmRest};
pub use drive::{drive_once, release, AuditRecord, DriveConfig, PassReport, ReleaseOutcome};
pub use error::SlurmError;
pub use order::{intended_order, Intended, Ranked};
pub use parse::{JobState, SlurmJob, SlurmNode};
