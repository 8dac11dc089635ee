//! ordo-kube: ordo as a Kubernetes scheduler for GPU batch pods, like Volcano's and KAI's.
//! Watches pods and nodes, orders and places with ordo-core, binds, explains, audits, imports.

pub mod affinity;
pub mod audit;
pub mod client;
pub mod engine;
pub mod gang;
pub mod import;
pub mod objects;
pub mod quantity;
pub mod run;
pub mod topology;
pub mod watch;
pub mod words;

pub use engine::{Engine, EngineConfig, PassOut, Stats};
