//! ordo-core: the pure scheduling core shared by the simulator, the server and the Slurm driver.
//! It never does IO and never reads a clock: `now` is always a parameter.

pub mod capacity;
pub mod checkpoint;
pub mod deps;
mod dynamic;
pub mod gpuids;
pub mod model;
mod nodeset;
pub mod policy;
pub mod pools;
mod profile;
pub mod quota;
pub mod scheduler;
pub mod speed;
mod sumset;
pub mod time;
mod tiresias;
pub mod topology;
mod whatif;
pub mod words;

pub use capacity::{Allocation, Capacity, Demand, Detail, Placement};
pub use checkpoint::{Checkpoint, CheckpointRules};
pub use deps::{Dep, DepKind, DepState, Dependencies};
pub use gpuids::GpuIds;
pub use model::{ClusterParseError, ClusterSpec, GpuNeeds, Job, JobId, NodeSpec, Workload};
pub use policy::{Backfill, FairParams, GittinsParams, LasParams, Order, PolicySpec};
pub use pools::{Elig, Pools};
pub use quota::{GpuLimit, ModelLimit, QuotaConfig, QuotaScope, Quotas};
pub use scheduler::{Plan, Reason, Scheduler, Start};
pub use speed::{ModelPick, Speeds};
pub use time::Time;
pub use topology::{TopoAsk, TopoNeed, Topology};
