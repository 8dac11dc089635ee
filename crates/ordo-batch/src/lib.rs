//! ordo-batch: ordo's scheduling ideas applied to requests for OpenAI-compatible AI APIs.
//! Reads batch-input JSONL, estimates tokens, groups and orders requests, plans, splits, runs
//! live, and submits to providers' batch APIs (OpenAI, Anthropic), resumably.

pub mod budget;
pub mod clock;
pub mod config;
pub mod convert;
pub mod deadline;
pub mod error;
pub mod http;
pub mod input;
pub mod plan;
pub mod provider;
pub mod report;
pub mod results;
pub mod run;
pub mod source;
pub mod split;
pub mod state;
pub mod submit;
pub mod tokens;
pub mod usage;
pub mod window;

#[cfg(feature = "test-server")]
pub mod testserver;

mod bucket;
mod hash;

pub use bucket::RateLimiter;
pub use config::{Limits, ModelLimits, ModelPrice, Prices};
pub use error::{BatchError, LineError};
pub use input::{load_bytes, load_path, Endpoint, LoadOptions, Loaded, Request};
pub use plan::{make_plan, order_requests, Order, Plan, PlanOptions};
pub use run::{run, RunOptions, RunSummary};
pub use split::{split, SplitSummary};
pub use tokens::{TokenEstimator, TokenMode};
