//! ordo-server: scheduling for real. The HTTP/JSON server, the node agent and the client.
//! The server decides with `ordo-core`'s `Scheduler`, the same code the simulator runs.

pub mod activity;
pub mod activity_api;
pub mod agent;
pub mod agent_file;
pub mod api;
pub mod array;
pub mod auth;
pub mod cgroup;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod db;
pub mod gate;
pub mod http;
pub mod kinds;
pub mod listen;
pub mod live;
pub mod metrics;
pub mod notify;
pub mod runas;
pub mod state;
pub mod supervise;
pub mod topo;
pub mod usage;

pub use config::ServerConfig;
pub use http::{bind, run, ServerError};
