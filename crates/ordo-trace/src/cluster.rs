//! Cluster descriptions beyond `64x8`: a TOML file of node groups, and the node lists published
//! with traces (Alibaba 2023 and 2026, PAI 2020, Lucid's and Helios's virtual clusters), each
//! becoming an [`ordo_core::ClusterSpec`].

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
    /// Memory per GPU (MiB, or with a unit: `"80G"`).
    gpu_memory: Option<Memory>,
    /// Node features (Slurm's `Features`, labels).
    #[serde(default)]
    features: Vec<String>,
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
/// `[[groups]] count = 32, gpus = 8, gpu_model = "A100", gpu_memory = "80G", features = ["ib"],
/// cpus = 128, memory = "1T"` (`count` and `gpus` required; memories in MiB or with a unit
/// K/M/G/T; `name` a node-name prefix, default `g<group number>-`; a GPU model's memory, when
/// not given, from its name where that tells, e.g. `V100M32`, `a100-80g`, `t4`).
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
        let mem = |m: &Option<Memory>, what: &str| -> Result<Option<u64>, ClusterError> {
            Ok(match m {
                None => None,
                Some(Memory::Mib(m)) => Some(*m),
                Some(Memory::Text(t)) => {
                    Some(parse_mem_mib(t.trim_end_matches("iB").trim_end_matches("ib")).ok_or_else(|| {
                        bad(format!("node group {}: {what} {t:?}: expected MiB or a size like \"512G\"", gi + 1))
                    })?)
                }
            })
        };
        let mem_mib = mem(&g.memory, "memory")?;
        let model = g.gpu_model.as_ref().map(|m| m.trim().to_string()).filter(|m| !m.is_empty());
        let gpu_mem_mib =
            mem(&g.gpu_memory, "gpu_memory")?.or_else(|| model.as_deref().and_then(ordo_core::speed::known_memory_mib));
        let features: Vec<String> =
            g.features.iter().map(|f| f.trim().to_ascii_lowercase()).filter(|f| !f.is_empty()).collect();
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
                gpu_model: model.clone(),
                gpu_mem_mib,
                features: features.clone(),
            });
        }
    }
    if nodes.is_empty() {
        return Err(ClusterError::Empty { file });
    }
    Ok(ClusterSpec { nodes })
}

/// The layouts of a node list `.csv` (docs/TRACES.md, "Cluster specs").
#[derive(Debug, Clone, Copy, PartialEq)]
enum NodeList {
    /// Alibaba 2023 `openb_node_list_*.csv`: `sn,cpu_milli,memory_mib,gpu,model`.
    Openb,
    /// Alibaba 2026 spot `node_info_df.csv`: `gpu_model,gpu_capacity_num,cpu_num,node_name`.
    Spot2026,
    /// PAI 2020 `pai_machine_spec.csv`, headerless: `machine,gpu_type,cap_cpu,cap_mem,cap_gpu`
    /// (memory in GB).
    PaiSpec,
    /// The Lucid simulator's `vc_config.csv`: `,num`, one virtual cluster and its 8-GPU nodes a row.
    LucidVc,
    /// Helios `cluster_gpu_number.csv`: `date,vc...,total`, GPUs per virtual cluster per day.
    HeliosGpus,
}

const PAI_SPEC: [&str; 5] = ["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"];

/// Reads a node list `.csv`, recognised by its header: an Alibaba 2023 node list
/// (`sn,cpu_milli,memory_mib,gpu,model`: one node per row, `cpu_milli / 1000` CPUs rounded down,
/// since a node cannot offer part of a core it lacks), an Alibaba 2026 spot node list
/// (`gpu_model,gpu_capacity_num,cpu_num,node_name`), PAI 2020's headerless machine spec
/// (`machine,gpu_type,cap_cpu,cap_mem,cap_gpu`, memory in GB), the Lucid simulator's
/// `vc_config.csv` (`,num`: per virtual cluster its number of 8-GPU nodes) or Helios's
/// `cluster_gpu_number.csv` (`date,vc...,total`: the day with the most GPUs, as 8-GPU nodes).
pub fn load_cluster_nodes(path: &Path) -> Result<ClusterSpec, ClusterError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|err| ClusterError::Io { file: file.clone(), err })?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(f);
    let mut records = rdr.records();
    let bad_line = |line: u64, why: String| ClusterError::Node { file: file.clone(), line, why };
    let first = match records.next() {
        None => return Err(ClusterError::Empty { file }),
        Some(r) => r.map_err(|e| bad_line(1, e.to_string()))?,
    };
    let first: Vec<String> = first.iter().map(|h| h.trim().trim_start_matches('\u{feff}').to_string()).collect();
    let has = |n: &str| first.iter().any(|h| h == n);
    let layout = if has("sn") && has("cpu_milli") {
        NodeList::Openb
    } else if has("gpu_capacity_num") && has("node_name") {
        NodeList::Spot2026
    } else if first.len() == 2 && first[1] == "num" {
        NodeList::LucidVc
    } else if first.first().is_some_and(|h| h == "date") && first.last().is_some_and(|h| h == "total") {
        NodeList::HeliosGpus
    } else if first.len() == 5 && first[2..].iter().all(|x| x.parse::<f64>().is_ok()) {
        NodeList::PaiSpec
    } else {
        return Err(bad_line(
            1,
            format!(
                "unknown node list: header {:?} (expected sn,cpu_milli,memory_mib,gpu,model; \
                 gpu_model,gpu_capacity_num,cpu_num,node_name; PAI's headerless machine,gpu_type,cap_cpu,cap_mem,cap_gpu; \
                 Lucid's `,num`; or Helios's date,...,total)",
                first.join(",")
            ),
        ));
    };
    let header: Vec<String> =
        if layout == NodeList::PaiSpec { PAI_SPEC.iter().map(|s| s.to_string()).collect() } else { first.clone() };
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| ClusterError::Node {
            file: file.clone(),
            line: 1,
            why: format!("missing column `{name}` (header: {:?})", header.join(",")),
        })
    };
    let cols: Vec<usize> = match layout {
        NodeList::Openb => vec![col("sn")?, col("cpu_milli")?, col("memory_mib")?, col("gpu")?, col("model")?],
        NodeList::Spot2026 => vec![col("node_name")?, col("cpu_num")?, col("gpu_capacity_num")?, col("gpu_model")?],
        NodeList::PaiSpec => vec![0, 2, 3, 4, 1],
        NodeList::LucidVc | NodeList::HeliosGpus => vec![],
    };
    let mut nodes = Vec::new();
    let mut best_day: Option<(u64, u64)> = None; // Helios: (GPUs, line) of the day with the most
    let pai_first = (layout == NodeList::PaiSpec).then(|| csv::StringRecord::from(first.clone()));
    for (i, rec) in pai_first.into_iter().map(Ok).chain(records).enumerate() {
        let rec = rec.map_err(|e| bad_line(e.position().map_or(0, |p| p.line()), e.to_string()))?;
        let line = i as u64 + if layout == NodeList::PaiSpec { 1 } else { 2 };
        let get = |i: usize| rec.get(i).unwrap_or_default().trim();
        let bad = |i: usize, what: &str| {
            bad_line(
                line,
                format!("field `{}`: expected {what}, found {:?}", header.get(i).map_or("?", String::as_str), get(i)),
            )
        };
        if rec.len() == 1 && get(0).is_empty() {
            continue;
        }
        if rec.len() != header.len() {
            return Err(bad_line(
                line,
                format!("expected {} fields (as in the header), found {}", header.len(), rec.len()),
            ));
        }
        let count = |i: usize, max: u32, what: &str| -> Result<u32, ClusterError> {
            let v: f64 = get(i).parse().map_err(|_| bad(i, what))?;
            (v >= 0.0 && v.fract() == 0.0 && v <= f64::from(max)).then_some(v as u32).ok_or_else(|| bad(i, what))
        };
        let name = |i: usize, nodes: &Vec<NodeSpec>| {
            Some(get(i).to_string()).filter(|n| !n.is_empty()).unwrap_or_else(|| format!("node{}", nodes.len()))
        };
        match layout {
            NodeList::Openb => {
                let gpus = count(cols[3], 1024, "a GPU count 0..=1024")?;
                let cpu_milli: u64 =
                    get(cols[1]).parse().map_err(|_| bad(cols[1], "CPU thousandths (a whole number)"))?;
                let mem_mib: u64 = get(cols[2]).parse().map_err(|_| bad(cols[2], "MiB (a whole number)"))?;
                nodes.push(NodeSpec {
                    name: name(cols[0], &nodes),
                    gpus,
                    cpus: Some(u32::try_from(cpu_milli / 1000).unwrap_or(u32::MAX)),
                    mem_mib: Some(mem_mib),
                    gpu_model: Some(get(cols[4]).to_string()).filter(|m| !m.is_empty()),
                    gpu_mem_mib: ordo_core::speed::known_memory_mib(get(cols[4])),
                    features: Vec::new(),
                });
            }
            NodeList::Spot2026 | NodeList::PaiSpec => {
                let gpu_col = if layout == NodeList::PaiSpec { cols[3] } else { cols[2] };
                let gpus = count(gpu_col, 1024, "a GPU count 0..=1024")?;
                let cpus = count(cols[1], 1 << 20, "a whole number of CPU cores")?;
                let mem_mib = if layout == NodeList::PaiSpec {
                    Some(u64::from(count(cols[2], 1 << 24, "memory in GB (a whole number)")?) * 1024)
                } else {
                    None
                };
                let model_col = if layout == NodeList::PaiSpec { cols[4] } else { cols[3] };
                nodes.push(NodeSpec {
                    name: name(cols[0], &nodes),
                    gpus,
                    cpus: Some(cpus),
                    mem_mib,
                    gpu_model: Some(get(model_col).to_string()).filter(|m| !m.is_empty()),
                    gpu_mem_mib: ordo_core::speed::known_memory_mib(get(model_col)),
                    features: Vec::new(),
                });
            }
            NodeList::LucidVc => {
                let n = count(1, 100_000, "a number of 8-GPU nodes")?;
                let vc = get(0);
                for k in 0..n {
                    nodes.push(NodeSpec::new(format!("{vc}-{k}"), 8));
                }
            }
            NodeList::HeliosGpus => {
                let last = header.len() - 1;
                let total = u64::from(count(last, 8_000_000, "a whole number of GPUs")?);
                if best_day.is_none_or(|(g, _)| total > g) {
                    best_day = Some((total, line));
                }
            }
        }
        if nodes.len() > 1_000_000 {
            return Err(bad_line(line, "more than 1,000,000 nodes".into()));
        }
    }
    if let Some((gpus, _)) = best_day {
        for k in 0..gpus.div_ceil(8) {
            nodes.push(NodeSpec::new(format!("n{k}"), 8));
        }
    }
    if nodes.is_empty() {
        return Err(ClusterError::Empty { file });
    }
    Ok(ClusterSpec { nodes })
}
