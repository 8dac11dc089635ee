//! The cluster's topology from node labels (`--topology-labels`): which label names a node's
//! unit at each level, lowest level first, e.g. `nvidia.com/gpu.clique=block,
//! example.com/rack=rack,topology.kubernetes.io/zone=zone`; and the ordo-core [`Topology`] of
//! the nodes the engine schedules on. Off unless configured.

use crate::objects::NodeInfo;
use ordo_core::topology::{Topology, TopologyError, MAX_LEVELS};
use std::fmt;

/// Level names of well-known labels, used when a label is given without `=LEVEL`.
pub const KNOWN_LABELS: [(&str, &str); 3] = [
    // NVIDIA GPU feature discovery: the NVLink domain (GB200 NVL72's "clique").
    ("nvidia.com/gpu.clique", "block"),
    ("topology.kubernetes.io/zone", "zone"),
    ("topology.kubernetes.io/region", "region"),
];

/// One level: the node label whose value names a node's unit there, and the level's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelLabel {
    /// The node label key (`example.com/rack`).
    pub label: String,
    /// The level's name, lowercased (`rack`): what a pod's `ordo.dev/topology` names.
    pub level: String,
}

/// The labels that give the topology, lowest level first; empty: no topology (the default).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologyLabels {
    /// The levels, lowest first.
    pub levels: Vec<LevelLabel>,
}

/// A label key as Kubernetes takes it: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 letters, digits, `-`, `_` and `.` that starts and ends with a letter or digit.
fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let edge = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    let name_ok =
        name.len() <= 63 && edge(name) && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let prefix_ok = prefix.is_none_or(|p| {
        p.len() <= 253 && edge(p) && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
    });
    name_ok && prefix_ok
}

impl TopologyLabels {
    /// Reads `LABEL[=LEVEL],...` (lowest level first). A label without `=LEVEL` is named by
    /// [`KNOWN_LABELS`], else by its name after the last `/` (`example.com/rack`: `rack`). An
    /// empty text: no topology. The error says which entry and what was expected.
    pub fn parse(s: &str) -> Result<TopologyLabels, String> {
        let mut levels: Vec<LevelLabel> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (label, level) = match part.split_once('=') {
                Some((k, l)) => (k.trim(), Some(l.trim())),
                None => (part, None),
            };
            if !valid_label_key(label) {
                return Err(format!(
                    "`{part}`: `{label}` is not a node label key (expected LABEL[=LEVEL], such as `example.com/rack=rack`)"
                ));
            }
            let level = match level {
                Some(l) => l.to_ascii_lowercase(),
                None => KNOWN_LABELS
                    .iter()
                    .find(|(k, _)| *k == label)
                    .map(|(_, l)| l.to_string())
                    .unwrap_or_else(|| label.rsplit('/').next().unwrap_or(label).to_ascii_lowercase()),
            };
            if !ordo_core::topology::is_level_name(&level) {
                return Err(format!(
                    "`{part}`: the level name `{level}` must be 1-64 letters, digits, `-`, `_` or `.` (give LABEL=LEVEL)"
                ));
            }
            if let Some(o) = levels.iter().find(|o| o.label == label) {
                return Err(format!("`{part}`: label `{label}` is given twice (levels `{}` and `{level}`)", o.level));
            }
            if levels.iter().any(|o| o.level == level) {
                return Err(format!("`{part}`: level `{level}` is named twice"));
            }
            levels.push(LevelLabel { label: label.to_string(), level });
        }
        if levels.len() > MAX_LEVELS {
            return Err(format!("{} levels given; a topology has at most {MAX_LEVELS}", levels.len()));
        }
        Ok(TopologyLabels { levels })
    }

    /// Whether no topology is read.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// The topology of `nodes`, in their order (the engine's node order): at each level, the
    /// node's unit is the value of that level's label; a node without the label (or with an
    /// empty value) is a unit of its own there. An error when the labels put one unit under two
    /// parents (a rack whose nodes carry two zones). `None` when no labels are configured.
    pub fn build(&self, nodes: &[&NodeInfo]) -> Option<Result<Topology, TopologyError>> {
        if self.is_empty() {
            return None;
        }
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let paths: Vec<Vec<Option<String>>> = nodes
            .iter()
            .map(|n| {
                self.levels
                    .iter()
                    .map(|l| n.labels.get(&l.label).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()))
                    .collect()
            })
            .collect();
        let levels = self.levels.iter().map(|l| l.level.clone()).collect();
        Some(Topology::from_paths(levels, &names, &paths))
    }
}

impl fmt::Display for TopologyLabels {
    /// `LABEL=LEVEL,...`, which [`TopologyLabels::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.levels.iter().map(|l| format!("{}={}", l.label, l.level)).collect();
        f.write_str(&parts.join(","))
    }
}

impl std::str::FromStr for TopologyLabels {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TopologyLabels::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            alloc: crate::objects::Ask { gpus: 8, ..Default::default() },
            cordoned: false,
            ready: true,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            taints: vec![],
            gpu_model: None,
            gpu_mem_mib: None,
            invalid: None,
            warning: None,
        }
    }

    #[test]
    fn labels_are_read_lowest_first_with_levels_given_or_known() {
        let t = TopologyLabels::parse(
            " nvidia.com/gpu.clique=block, example.com/rack = Rack ,topology.kubernetes.io/zone=zone",
        )
        .unwrap();
        let got: Vec<(&str, &str)> = t.levels.iter().map(|l| (l.label.as_str(), l.level.as_str())).collect();
        assert_eq!(
            got,
            [("nvidia.com/gpu.clique", "block"), ("example.com/rack", "rack"), ("topology.kubernetes.io/zone", "zone")]
        );
        // Written back as read.
        assert_eq!(TopologyLabels::parse(&t.to_string()).unwrap(), t);
        // Without =LEVEL: the known labels' names, else the key's name.
        let t = TopologyLabels::parse("nvidia.com/gpu.clique,example.com/rack,topology.kubernetes.io/zone").unwrap();
        let levels: Vec<&str> = t.levels.iter().map(|l| l.level.as_str()).collect();
        assert_eq!(levels, ["block", "rack", "zone"]);
        // Empty: off.
        assert!(TopologyLabels::parse("").unwrap().is_empty());
        assert!(TopologyLabels::parse(" , ").unwrap().is_empty());
        assert_eq!(TopologyLabels::default().to_string(), "");
    }

    #[test]
    fn bad_labels_are_refused_saying_which_and_what_was_expected() {
        let err = |s: &str| TopologyLabels::parse(s).unwrap_err();
        assert_eq!(
            err("rack=rack,bad key=x"),
            "`bad key=x`: `bad key` is not a node label key (expected LABEL[=LEVEL], such as `example.com/rack=rack`)"
        );
        assert!(err("=block").contains("is not a node label key"), "{}", err("=block"));
        assert!(err("Example.com/rack").contains("is not a node label key"));
        assert_eq!(
            err("rack=my level"),
            "`rack=my level`: the level name `my level` must be 1-64 letters, digits, `-`, `_` or `.` (give LABEL=LEVEL)"
        );
        assert_eq!(err("rack=a,rack=b"), "`rack=b`: label `rack` is given twice (levels `a` and `b`)");
        assert_eq!(err("a=rack,b=RACK"), "`b=RACK`: level `rack` is named twice");
        let nine: Vec<String> = (0..9).map(|i| format!("l{i}")).collect();
        assert_eq!(err(&nine.join(",")), "9 levels given; a topology has at most 8");
    }

    #[test]
    fn the_topology_follows_the_nodes_and_a_missing_label_is_a_unit_of_its_own() {
        let t = TopologyLabels::parse("example.com/block=block,example.com/rack=rack").unwrap();
        let nodes = [
            node("n0", &[("example.com/block", "b1"), ("example.com/rack", "r1")]),
            node("n1", &[("example.com/block", "b1"), ("example.com/rack", "r1")]),
            node("n2", &[("example.com/block", "b2"), ("example.com/rack", "r1")]),
            node("n3", &[("example.com/rack", "r2")]),
            node("n4", &[("example.com/block", " "), ("example.com/rack", "r2")]),
        ];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let topo = t.build(&refs).unwrap().unwrap();
        assert_eq!(topo.levels(), ["block", "rack"]);
        assert_eq!(topo.nodes(), 5);
        // Blocks: b1, b2, and n3 and n4 each on their own.
        assert_eq!(topo.units(0), 4);
        assert_eq!(topo.unit_of(0, 0), topo.unit_of(0, 1));
        assert_ne!(topo.unit_of(0, 3), topo.unit_of(0, 4));
        assert_eq!(topo.unit_name(0, topo.unit_of(0, 3)), "(n3)");
        assert_eq!(topo.units(1), 2);
        assert_eq!(topo.unit_name(1, topo.unit_of(1, 2)), "r1");
        assert_eq!(topo.crossed([0, 1]), 0);
        assert_eq!(topo.crossed([0, 2]), 1);
        assert_eq!(topo.crossed([3, 4]), 1);
        assert_eq!(topo.crossed([0, 3]), 2);
        // No labels configured: no topology.
        assert!(TopologyLabels::default().build(&refs).is_none());
    }

    #[test]
    fn a_unit_under_two_parents_is_an_error_naming_both() {
        let t = TopologyLabels::parse("example.com/block=block,example.com/rack=rack").unwrap();
        let nodes = [
            node("n0", &[("example.com/block", "b1"), ("example.com/rack", "r1")]),
            node("n1", &[("example.com/block", "b1"), ("example.com/rack", "r2")]),
        ];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let e = t.build(&refs).unwrap().unwrap_err().to_string();
        assert_eq!(
            e,
            "block `b1` is under two units of level rack, `r1` (node `n0`) and `r2` (node `n1`); each unit has one parent"
        );
    }
}
