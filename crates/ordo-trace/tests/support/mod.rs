//! Lookups the trace tests share: a job by name, and its user's and group's names.

use ordo_core::{Job, Workload};

/// The loaded job named `name`; panics when there is none.
pub fn job<'a>(w: &'a Workload, name: &str) -> &'a Job {
    w.jobs.iter().find(|j| j.name == name).unwrap_or_else(|| panic!("job {name} not loaded"))
}

/// The name of `j`'s user.
pub fn user(w: &Workload, j: &Job) -> String {
    w.users[j.user as usize].clone()
}

/// The name of `j`'s group.
pub fn group(w: &Workload, j: &Job) -> String {
    w.groups[j.group as usize].clone()
}
