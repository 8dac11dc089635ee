//! The cluster's network topology as the driver knows it: read from `scontrol show topology`
//! (the controller's `topology/tree` switches or `topology/block` blocks) or from a
//! `topology.conf` file, by `ordo_trace::parse_topology_conf` (the same reader as
//! `ordo simulate --topology`), and kept by node name, so that each partition's scheduler gets
//! the topology of its own nodes ([`SlurmTopology::for_cluster`]).
//!
//! `scontrol show topology` prints one line per switch, `topology.conf`'s keys with more:
//!
//! ```text
//! SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-2]
//! SwitchName=s2 Level=1 LinkSpeed=1 Nodes=n[1-3] Switches=s[0-1]
//! ```
//!
//! (a switch above others lists every node under it as well), and for `topology/block` (Slurm
//! 23.02 and later) `BlockName=b1 BlockIndex=0 Nodes=n[01-18] BlockSize=18`. [`from_scontrol`]
//! drops what `topology.conf` does not have (`Level`, `BlockIndex`, `BlockSize`, an upper
//! switch's `Nodes`), line for line, and reads the rest as `topology.conf`: errors name the
//! line of scontrol's output. Blocks come as the base blocks only (level `block`): Slurm does
//! not print the larger `BlockSizes`; give the `topology.conf` file for those.

use crate::error::SlurmError;
use ordo_core::{ClusterSpec, NodeSpec, Topology};
use std::collections::HashMap;

/// A level's units, each with its nodes.
pub type Units = Vec<(String, Vec<String>)>;

/// Most node names one topology may name.
const MAX_NAMES: usize = 1_000_000;

/// A Slurm cluster's topology by node name: its levels (lowest first) and, for each node it
/// names, the unit of each level the node is in (`None`: in no unit of that level).
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmTopology {
    /// Where it was read (`scontrol show topology`, a file's path).
    pub source: String,
    /// Level names, lowest first (`switch`, `spine`, ...; `block`, ...).
    pub levels: Vec<String>,
    /// Each node's path, by node name.
    paths: HashMap<String, Vec<Option<String>>>,
    /// The nodes in the order the topology names them.
    nodes: Vec<String>,
}

impl SlurmTopology {
    /// Reads `topology.conf` text (`source` names it in errors): the nodes are those it names.
    pub fn from_conf(text: &str, source: &str) -> Result<SlurmTopology, SlurmError> {
        let nodes = named_nodes(text);
        let cluster = ClusterSpec { nodes: nodes.iter().map(|n| NodeSpec::new(n.clone(), 0)).collect() };
        let t = ordo_trace::parse_topology_conf(text, source, &cluster).map_err(|e| SlurmError::Parse {
            source_name: e.file.clone(),
            location: if e.line > 0 { format!("line {}", e.line) } else { "the whole topology".into() },
            what: e.why,
        })?;
        let paths = nodes
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let own = format!("({name})");
                let path = (0..t.levels().len())
                    .map(|l| {
                        let u = t.unit_name(l, t.unit_of(l, i as u32));
                        (u != own).then(|| u.to_string())
                    })
                    .collect();
                (name.clone(), path)
            })
            .collect();
        Ok(SlurmTopology { source: source.to_string(), levels: t.levels().to_vec(), paths, nodes })
    }

    /// The nodes it names, in its order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The units of level `l` and their nodes, in the order the topology names the nodes.
    pub fn units(&self, l: usize) -> Units {
        let mut out: Units = Vec::new();
        for n in &self.nodes {
            let Some(Some(u)) = self.paths.get(n).and_then(|p| p.get(l)) else { continue };
            match out.iter_mut().find(|(x, _)| x == u) {
                Some((_, v)) => v.push(n.clone()),
                None => out.push((u.clone(), vec![n.clone()])),
            }
        }
        out
    }

    /// In words: `tree from scontrol show topology: 2 switch, 1 spine`.
    pub fn describe(&self) -> String {
        let kind = if self.levels.first().is_some_and(|l| l == "block") { "blocks" } else { "tree" };
        let counts: Vec<String> =
            (0..self.levels.len()).map(|l| format!("{} {}", self.units(l).len(), self.levels[l])).collect();
        format!("{kind} from {}: {}", self.source, counts.join(", "))
    }

    /// As a `topology.conf` with each node renamed by `rename` (a node it gives no name is
    /// left out: a unit of its own): leaf switches with `Nodes=`, the switches above with
    /// `Switches=`, or one `BlockName=` line per block; `None` for a block topology of several
    /// levels (the larger blocks are not written), or when no node is left.
    pub fn to_conf(&self, rename: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        let blocks = self.levels.first().is_some_and(|l| l == "block");
        if blocks && self.levels.len() > 1 {
            return None;
        }
        let key = if blocks { "BlockName" } else { "SwitchName" };
        let mut out =
            format!("# The network topology `ordo slurm import` read ({}), on the simulated nodes.\n", self.source);
        let mut any = false;
        for l in 0..self.levels.len() {
            for (unit, nodes) in self.units(l) {
                if l == 0 {
                    let names: Vec<String> = nodes.iter().filter_map(|n| rename(n)).collect();
                    if !names.is_empty() {
                        any = true;
                        out.push_str(&format!("{key}={unit} Nodes={}\n", names.join(",")));
                    }
                } else {
                    // The units of the level below with a node in this one that is written.
                    let mut below: Vec<String> = Vec::new();
                    for n in &nodes {
                        if let Some(Some(b)) = self.paths.get(n).and_then(|p| p.get(l - 1)) {
                            if !below.contains(b) && rename(n).is_some() {
                                below.push(b.clone());
                            }
                        }
                    }
                    if !below.is_empty() {
                        out.push_str(&format!("{key}={unit} Switches={}\n", below.join(",")));
                    }
                }
            }
        }
        any.then_some(out)
    }

    /// The topology of `cluster`'s nodes, in its node order (nodes the topology does not name
    /// are each a unit of their own); `None` when it names none of them.
    pub fn for_cluster(&self, cluster: &ClusterSpec) -> Option<Result<Topology, String>> {
        if !cluster.nodes.iter().any(|n| self.paths.contains_key(&n.name)) {
            return None;
        }
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let paths: Vec<Vec<Option<String>>> =
            names.iter().map(|n| self.paths.get(n).cloned().unwrap_or_default()).collect();
        Some(Topology::from_paths(self.levels.clone(), &names, &paths).map_err(|e| e.to_string()))
    }
}

/// The node names in `Nodes=` of a `topology.conf` text, in order, each once (unreadable host
/// lists are left for the parser to report).
fn named_nodes(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.split('#').next().unwrap_or("");
        for tok in l.split_whitespace() {
            let Some((k, v)) = tok.split_once('=') else { continue };
            if !k.eq_ignore_ascii_case("nodes") {
                continue;
            }
            for n in ordo_trace::hostlist::hostlist(v, MAX_NAMES).unwrap_or_default() {
                if seen.insert(n.clone()) {
                    out.push(n);
                }
            }
        }
    }
    out
}

/// Reads `scontrol show topology` output: `None` when the controller has no topology (it prints
/// nothing), else the topology (see the module documentation). Errors name the line.
pub fn from_scontrol(text: &str) -> Result<Option<SlurmTopology>, SlurmError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let conf: Vec<String> = text.lines().map(conf_line).collect();
    SlurmTopology::from_conf(&conf.join("\n"), "scontrol show topology").map(Some)
}

/// One line of scontrol's output as a `topology.conf` line.
fn conf_line(line: &str) -> String {
    let toks: Vec<&str> = line.split_whitespace().collect();
    let key = |t: &&str| t.split_once('=').map_or(String::new(), |(k, _)| k.to_ascii_lowercase());
    let has_switches = toks.iter().any(|t| key(t) == "switches");
    toks.iter()
        .filter(|t| {
            let k = key(t);
            !(k == "level" || k == "blockindex" || k == "blocksize" || (k == "nodes" && has_switches))
        })
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    fn cluster(names: &[&str]) -> ClusterSpec {
        ClusterSpec { nodes: names.iter().map(|n| NodeSpec::new(*n, 8)).collect() }
    }

    /// `scontrol show topology` as Slurm 22.05 prints it for the dev cluster started with
    /// `scripts/slurm-dev-cluster.sh start DIR --topology`.
    const DEV: &str = "\
SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-2]
SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n3
SwitchName=s2 Level=1 LinkSpeed=1 Nodes=n[1-3] Switches=s[0-1]
";

    #[test]
    fn reads_scontrol_tree() {
        let t = from_scontrol(DEV).unwrap().unwrap();
        assert_eq!(t.levels, ["switch", "spine"]);
        assert_eq!(t.nodes(), ["n1", "n2", "n3"]);
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(t.units(0), vec![("s0".to_string(), s(&["n1", "n2"])), ("s1".to_string(), s(&["n3"]))]);
        assert_eq!(t.units(1), vec![("s2".to_string(), s(&["n1", "n2", "n3"]))]);
        assert_eq!(t.describe(), "tree from scontrol show topology: 2 switch, 1 spine");
        // A partition of n3 and n1 (in that order), and a node the topology does not name.
        let topo = t.for_cluster(&cluster(&["n3", "x9", "n1"])).unwrap().unwrap();
        assert_eq!(topo.nodes(), 3);
        assert_eq!(topo.unit_name(0, topo.unit_of(0, 0)), "s1");
        assert_eq!(topo.unit_name(0, topo.unit_of(0, 2)), "s0");
        assert_eq!(topo.unit_name(1, topo.unit_of(1, 0)), "s2");
        assert_ne!(topo.unit_of(0, 1), topo.unit_of(0, 0));
        assert!(t.for_cluster(&cluster(&["x1", "x2"])).is_none());
        // Nothing printed: no topology plugin.
        assert_eq!(from_scontrol("").unwrap(), None);
    }

    /// Written back as `topology.conf` on other node names, it reads as the same tree.
    #[test]
    fn writes_topology_conf_on_other_names() {
        let t = from_scontrol(DEV).unwrap().unwrap();
        let conf = t.to_conf(&|n| Some(format!("x{}", &n[1..]))).unwrap();
        assert!(
            conf.contains("SwitchName=s0 Nodes=x1,x2\nSwitchName=s1 Nodes=x3\nSwitchName=s2 Switches=s0,s1\n"),
            "{conf}"
        );
        let back = SlurmTopology::from_conf(&conf, "written").unwrap();
        assert_eq!(back.levels, t.levels);
        assert_eq!(back.units(1), vec![("s2".to_string(), vec!["x1".to_string(), "x2".to_string(), "x3".to_string()])]);
        // Nodes left out; none left.
        let only = t.to_conf(&|n| (n != "n3").then(|| n.to_string())).unwrap();
        assert!(!only.contains("s1 Nodes") && only.contains("SwitchName=s2 Switches=s0\n"), "{only}");
        assert_eq!(t.to_conf(&|_| None), None);
    }

    /// The block plugin's lines (as documented for Slurm 23.02 and later: `BlockName`,
    /// `BlockIndex`, `Nodes`, `BlockSize`).
    #[test]
    fn reads_scontrol_blocks() {
        let text = "BlockName=b1 BlockIndex=0 Nodes=g[01-02] BlockSize=2\nBlockName=b2 BlockIndex=1 Nodes=g[03-04] BlockSize=2\n";
        let t = from_scontrol(text).unwrap().unwrap();
        assert_eq!(t.levels, ["block"]);
        assert_eq!(t.units(0).len(), 2);
        assert_eq!(t.describe(), "blocks from scontrol show topology: 2 block");
    }

    #[test]
    fn bad_output_names_the_line() {
        let e = from_scontrol(&DEV.replace("Switches=s[0-1]", "Switches=s[0-4]")).unwrap_err().to_string();
        assert!(e.contains("scontrol show topology: line 3") && e.contains("`s2`"), "{e}");
        let e =
            from_scontrol("SwitchName=s0 Level=0 Nodes=n1\nSwitchName=s1 Level=0 Nodes=n1\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("two switches"), "{e}");
        let e = from_scontrol("SwitchName=s0 Weird=1 Nodes=n1\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("unknown key `weird`"), "{e}");
        let e = from_scontrol("Topology=t1\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    proptest::proptest! {
        /// Whatever scontrol prints (lines of keys ordo knows and does not, host lists good and
        /// bad, cycles, nodes under two switches), reading it gives a topology or an error
        /// naming a line or the whole, never a panic; and a topology read is one whose
        /// partitions' topologies build.
        #[test]
        fn scontrol_output_never_panics(lines in proptest::collection::vec(
            (0usize..3, 0u8..4, proptest::sample::select(vec![
                "Nodes=n[1-2]", "Nodes=n3", "Nodes=n[1-", "Nodes=", "Switches=s[0-1]", "Switches=s0",
                "Switches=s9", "Level=1", "LinkSpeed=1", "BlockIndex=0", "BlockSize=2", "Weird=x", "junk",
            ]), proptest::sample::select(vec!["", "Nodes=n[1-3]", "Switches=s2", "BlockSize=18"])),
            0..6,
        )) {
            let text: String = lines
                .iter()
                .map(|(kind, name, a, b)| {
                    let head = ["SwitchName", "BlockName", "Topology"][*kind];
                    format!("{head}=s{name} {a} {b}\n")
                })
                .collect();
            match from_scontrol(&text) {
                Ok(Some(t)) => {
                    let names: Vec<&str> = t.nodes().iter().map(String::as_str).collect();
                    let topo = t.for_cluster(&cluster(&names));
                    proptest::prop_assert!(names.is_empty() || matches!(topo, Some(Ok(_))), "{text}: {topo:?}");
                }
                Ok(None) => proptest::prop_assert!(text.trim().is_empty()),
                Err(e) => {
                    let e = e.to_string();
                    proptest::prop_assert!(e.starts_with("scontrol show topology: "), "{e}");
                }
            }
        }
    }
}
