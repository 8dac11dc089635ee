//! ordo-report: what a cluster's history looks like under each policy, side by side, for the
//! people who decide: one self-contained HTML page (inline SVG charts), Markdown or JSON.
//!
//! [`Report::build`] derives everything from simulation outputs into one serde struct; the HTML
//! and Markdown renderers in [`render`] only format that struct, so no number can disagree.

pub mod chart;
pub mod equiv;
pub mod fmt;
pub mod headline;
pub mod model;
pub mod page;
pub mod periods;
pub mod render;
pub mod sections;
pub mod series;

pub use headline::{headline, AsRun, Headline, InputInfo, Load, Regression, Why};
pub use model::{equivalent_gpus, Equivalent, OwnerBy, Price, Report, ReportError, ReportOptions};
