//! Cluster descriptions beyond `64x8`: a TOML file of node groups, and the Alibaba node list
//! (`openb_node_list_gpu_node.csv`), each becoming an [`ordo_core::ClusterSpec`].

use crate::csvread::parse_mem_mib;
use crate::error::ClusterError;
use ordo_core::{ClusterSpec, NodeSpec};
use serde::Deserialize;
use std::path::Path;

/// Reads `--cluster`: a path to a `.toml` file ([`load_cluster_toml`]) or a `.csv` node list
/// ([`load_cluster_nodes`]) when such a file exists, otherwise a `COUNTxGPUS[,COUNTxGPUS...]`
/// spec ([`ClusterSpec::parse`]).
pub fn load_cluster(arg: &str) -> Result<ClusterSpec, ClusterError> {
    let path = Path::new(arg);
    let lower = arg.to_ascii_lowercase();
    if lower.ends_with(".toml") || (path.is_file() && !lower.ends_with(".csv")) {
        return load_cluster_toml(path);
    }
    if lower.ends_with(".csv") {
        return load_cluster_nodes(path);
    }
    Ok(ClusterSpec::parse(arg)?)
}

/// One node group of a TOML cluster file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    count: u32,
    gpus: u32,
    gpu_model: Option<String>,
    cpus: Option<u32>,
    memory: Option<Memory>,
    name: Option<String>,
}

/// Memory as MiB (an integer) or with a unit (`"512G"`, `"1T"`, `"64GiB"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Memory {
    Mib(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    #[serde(alias = "group")]
    groups: Vec<Group>,
}

/// Reads a TOML cluster file: a list of node groups, in order, each
/// `[[groups]] count = 32, gpus = 8, gpu_model = "A100", cpus = 128, memory = "1T"` (`count`
/// and `gpus` required; `memory` in MiB or with a unit K/M/G/T; `name` a node-name prefix,
/// default `g<group number>-`).
pub fn load_cluster_toml(path: &Path) -> Result<ClusterSpec, ClusterError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ClusterError::Io { file: file.clone(), err })?;
    let parsed: ClusterFile = toml::from_str(&text)
        .map_err(|e| ClusterError::Toml { file: file.clone(), why: e.to_string().trim().to_string() })?;
    let mut nodes = Vec::new();
    for (gi, g) in parsed.groups.iter().enumerate() {
        let bad = |why: String| ClusterError::Node { file: file.clone(), line: gi as u64 + 1, why };
        if g.count == 0 || g.count > 1_000_000 {
            return Err(bad(format!("node group {}: count must be 1..=1000000, got {}", gi + 1, g.count)));
        }
        if g.gpus > 1024 {
            return Err(bad(format!("node group {}: gpus must be at most 1024, got {}", gi + 1, g.gpus)));
        }
        let mem_mib = match &g.memory {
            None => None,
            Some(Memory::Mib(m)) => Some(*m),
            Some(Memory::Text(t)) => {
                Some(parse_mem_mib(t.trim_end_matches("iB").trim_end_matches("ib")).ok_or_else(|| {
                    bad(format!("node group {}: memory {t:?}: expected MiB or a size like \"512G\"", gi + 1))
                })?)
            }
        };
        let prefix = g.name.clone().unwrap_or_else(|| format!("g{}-", gi + 1));
        if nodes.len() + g.count as usize > 1_000_000 {
            return Err(bad("more than 1,000,000 nodes".to_string()));
        }
        for i in 0..g.count {
            nodes.push(NodeSpec {
                name: format!("{prefix}{i}"),
                gpus: g.gpus,
                cpus: g.cpus,
                mem_mib,
                gpu_model: g.gpu_model.clone(),
            });
        }
    }
    if nodes.is_empty() {
        return Err(ClusterError::Empty { file });
    }
    Ok(ClusterSpec { nodes })
}

/// Reads an Alibaba node list (`sn,cpu_milli,memory_mib,gpu,model`): one node per row, named
/// `sn`, with `gpu` GPUs of model `model`, `cpu_milli / 1000` CPUs (rounded down: a node cannot
/// offer part of a core it lacks) and `memory_mib` MiB.
pub fn load_cluster_nodes(path: &Path) -> Result<ClusterSpec, ClusterError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|err| ClusterError::Io { file: file.clone(), err })?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(f);
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| ClusterError::Node { file: file.clone(), line: 1, why: e.to_string() })?
        .iter()
        .map(|h| h.trim().trim_start_matches('\u{feff}').to_string())
        .collect();
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| ClusterError::Node {
            file: file.clone(),
            line: 1,
            why: format!("missing column `{name}` (expected the header sn,cpu_milli,memory_mib,gpu,model)"),
        })
    };
    let (sn, cpu, mem, gpu, model) = (col("sn")?, col("cpu_milli")?, col("memory_mib")?, col("gpu")?, col("model")?);
    let mut nodes = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| ClusterError::Node {
            file: file.clone(),
            line: e.position().map_or(0, |p| p.line()),
            why: e.to_string(),
        })?;
        let line = rec.position().map_or(0, |p| p.line());
        let get = |i: usize| rec.get(i).unwrap_or_default().trim();
        let bad = |i: usize, what: &str| ClusterError::Node {
            file: file.clone(),
            line,
            why: format!("field `{}`: expected {what}, found {:?}", header.get(i).map_or("?", String::as_str), get(i)),
        };
        if rec.len() != header.len() {
            return Err(ClusterError::Node {
                file: file.clone(),
                line,
                why: format!("expected {} fields (as in the header), found {}", header.len(), rec.len()),
            });
        }
        let gpus: u32 = get(gpu).parse().ok().filter(|&g| g <= 1024).ok_or_else(|| bad(gpu, "a GPU count 0..=1024"))?;
        let cpu_milli: u64 = get(cpu).parse().map_err(|_| bad(cpu, "CPU thousandths (a whole number)"))?;
        let mem_mib: u64 = get(mem).parse().map_err(|_| bad(mem, "MiB (a whole number)"))?;
        let name = get(sn);
        nodes.push(NodeSpec {
            name: if name.is_empty() { format!("node{}", nodes.len()) } else { name.to_string() },
            gpus,
            cpus: Some(u32::try_from(cpu_milli / 1000).unwrap_or(u32::MAX)),
            mem_mib: Some(mem_mib),
            gpu_model: Some(get(model).to_string()).filter(|m| !m.is_empty()),
        });
        if nodes.len() > 1_000_000 {
            return Err(ClusterError::Node { file: file.clone(), line, why: "more than 1,000,000 nodes".into() });
        }
    }
    if nodes.is_empty() {
        return Err(ClusterError::Empty { file });
    }
    Ok(ClusterSpec { nodes })
}
