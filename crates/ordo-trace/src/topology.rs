//! Topology files (`--topology FILE`): a cluster's network as a tree of levels
//! ([`ordo_core::Topology`]), from Slurm's `topology.conf` (the `topology/tree` switches or the
//! `topology/block` blocks) or ordo's TOML file (docs/TOPOLOGY.md). Errors name the file, the
//! line and what was expected; no input panics (fuzzed: `fuzz/fuzz_targets/topology.rs`).

use crate::hostlist::hostlist;
use ordo_core::topology::Slowdown;
use ordo_core::{ClusterSpec, Topology};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Most names one host list in a topology file may expand to.
const MAX_NAMES: usize = 1_000_000;

/// Why a topology file could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{}: {why}", if *line > 0 { format!(":{line}") } else { String::new() })]
pub struct TopologyFileError {
    /// Path of the file.
    pub file: String,
    /// 1-based line (0: the whole file).
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// Reads a topology file for `cluster`: ordo's TOML when the name ends in `.toml`, otherwise
/// Slurm's `topology.conf`.
pub fn load_topology(path: &Path, cluster: &ClusterSpec) -> Result<Topology, TopologyFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TopologyFileError {
        file: file.clone(),
        line: 0,
        why: format!("cannot read: {e}"),
    })?;
    if file.to_ascii_lowercase().ends_with(".toml") {
        parse_topology_toml(&text, &file, cluster)
    } else {
        parse_topology_conf(&text, &file, cluster)
    }
}

/// Node name -> index in the cluster.
fn node_index(cluster: &ClusterSpec) -> HashMap<&str, u32> {
    cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i as u32)).collect()
}

fn names_of(cluster: &ClusterSpec) -> Vec<String> {
    cluster.nodes.iter().map(|n| n.name.clone()).collect()
}

/// Level names of a `topology/tree` file by height: leaf switches, then the switches above.
fn tree_level_name(h: usize) -> String {
    match h {
        0 => "switch".to_string(),
        1 => "spine".to_string(),
        2 => "core".to_string(),
        h => format!("level{h}"),
    }
}

/// One `Key=Value ...` line of `topology.conf`.
struct ConfLine<'a> {
    line: usize,
    fields: Vec<(String, &'a str)>,
}

/// Parses Slurm's `topology.conf` for `cluster` (`file` names it in errors):
/// `SwitchName=s0 Nodes=n[0-7]` and `SwitchName=s2 Switches=s[0-1]` (`topology/tree`: levels
/// `switch` for the switches with nodes, `spine`, `core`, `level3`... above, by height), or
/// `BlockName=b0 Nodes=n[0-17]` with an optional `BlockSizes=18,72` (`topology/block`: level
/// `block`, and one level `blockN` per larger size, grouping consecutive blocks).
/// `LinkSpeed` is read and ignored.
pub fn parse_topology_conf(text: &str, file: &str, cluster: &ClusterSpec) -> Result<Topology, TopologyFileError> {
    let err = |line: usize, why: String| TopologyFileError { file: file.to_string(), line, why };
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let mut fields = Vec::new();
        for tok in l.split_whitespace() {
            let (k, v) = tok
                .split_once('=')
                .ok_or_else(|| err(i + 1, format!("`{tok}`: expected Key=Value (such as SwitchName=s0)")))?;
            let k = k.to_ascii_lowercase();
            if !["switchname", "nodes", "switches", "linkspeed", "blockname", "blocksizes"].contains(&k.as_str()) {
                return Err(err(
                    i + 1,
                    format!(
                        "unknown key `{k}`: expected SwitchName, Nodes, Switches, LinkSpeed, BlockName or BlockSizes"
                    ),
                ));
            }
            if v.is_empty() {
                return Err(err(i + 1, format!("`{k}` has no value")));
            }
            fields.push((k, v));
        }
        lines.push(ConfLine { line: i + 1, fields });
    }
    let tree = lines.iter().any(|l| l.fields[0].0 == "switchname");
    let block = lines.iter().any(|l| l.fields[0].0 == "blockname" || l.fields[0].0 == "blocksizes");
    if tree && block {
        return Err(err(
            0,
            "both SwitchName (topology/tree) and BlockName (topology/block) lines; one kind only".into(),
        ));
    }
    if !tree && !block {
        return Err(err(0, "no SwitchName or BlockName line: not a topology.conf".into()));
    }
    if tree {
        conf_tree(&lines, file, cluster)
    } else {
        conf_block(&lines, file, cluster)
    }
}

fn get<'a>(l: &ConfLine<'a>, key: &str) -> Option<&'a str> {
    l.fields.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

fn expand(file: &str, line: usize, what: &str, text: &str) -> Result<Vec<String>, TopologyFileError> {
    hostlist(text, MAX_NAMES).ok_or_else(|| TopologyFileError {
        file: file.to_string(),
        line,
        why: format!("{what} `{text}`: expected a host list such as n[0-7],gpu01 (at most {MAX_NAMES} names)"),
    })
}

fn conf_tree(lines: &[ConfLine], file: &str, cluster: &ClusterSpec) -> Result<Topology, TopologyFileError> {
    let err = |line: usize, why: String| TopologyFileError { file: file.to_string(), line, why };
    let index = node_index(cluster);
    struct Switch {
        line: usize,
        nodes: Vec<u32>,
        children: Vec<String>,
    }
    let mut switches: Vec<(String, Switch)> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for l in lines {
        let name = get(l, "switchname")
            .ok_or_else(|| err(l.line, "expected SwitchName=NAME first on the line".into()))?
            .to_string();
        if l.fields[0].0 != "switchname" {
            return Err(err(l.line, "SwitchName must come first on its line".into()));
        }
        if by_name.contains_key(&name) {
            return Err(err(
                l.line,
                format!("switch `{name}` is defined twice (first at line {})", switches[by_name[&name]].1.line),
            ));
        }
        let mut sw = Switch { line: l.line, nodes: Vec::new(), children: Vec::new() };
        if let Some(n) = get(l, "nodes") {
            for node in expand(file, l.line, "Nodes", n)? {
                let &i = index.get(node.as_str()).ok_or_else(|| {
                    err(l.line, format!("switch `{name}`: node `{node}` is not a node of the cluster"))
                })?;
                sw.nodes.push(i);
            }
        }
        if let Some(s) = get(l, "switches") {
            sw.children = expand(file, l.line, "Switches", s)?;
        }
        if sw.nodes.is_empty() && sw.children.is_empty() {
            return Err(err(l.line, format!("switch `{name}` has neither Nodes= nor Switches=")));
        }
        if !sw.nodes.is_empty() && !sw.children.is_empty() {
            return Err(err(l.line, format!("switch `{name}` has both Nodes= and Switches=; a switch links one kind")));
        }
        by_name.insert(name.clone(), switches.len());
        switches.push((name, sw));
    }
    // Parents, each switch at most one.
    let mut parent: Vec<Option<usize>> = vec![None; switches.len()];
    for (p, (pname, sw)) in switches.iter().enumerate() {
        for c in &sw.children {
            let &ci = by_name
                .get(c)
                .ok_or_else(|| err(sw.line, format!("switch `{pname}`: switch `{c}` is not defined in the file")))?;
            if let Some(q) = parent[ci] {
                if q != p {
                    return Err(err(
                        sw.line,
                        format!(
                            "switch `{c}` is under two switches, `{}` (line {}) and `{pname}`",
                            switches[q].0, switches[q].1.line
                        ),
                    ));
                }
            }
            parent[ci] = Some(p);
        }
    }
    // Heights, with cycles found: a walk up from any switch must end within switches.len() steps.
    for (i, (name, sw)) in switches.iter().enumerate() {
        let mut cur = i;
        let mut path = vec![name.as_str()];
        for _ in 0..=switches.len() {
            match parent[cur] {
                None => break,
                Some(p) => {
                    path.push(switches[p].0.as_str());
                    if p == i {
                        return Err(err(sw.line, format!("switches form a cycle: {}", path.join(" -> "))));
                    }
                    cur = p;
                }
            }
        }
        if path.len() > switches.len() + 1 {
            return Err(err(sw.line, format!("switch `{name}` is above a cycle of switches")));
        }
    }
    let mut height: Vec<Option<usize>> = vec![None; switches.len()];
    fn h(
        i: usize,
        sw: &[(String, Switch)],
        by: &HashMap<String, usize>,
        memo: &mut [Option<usize>],
        depth: usize,
    ) -> usize {
        if let Some(x) = memo[i] {
            return x;
        }
        let x = if sw[i].1.children.is_empty() || depth > sw.len() {
            0
        } else {
            1 + sw[i].1.children.iter().map(|c| h(by[c], sw, by, memo, depth + 1)).max().unwrap_or(0)
        };
        memo[i] = Some(x);
        x
    }
    for i in 0..switches.len() {
        h(i, &switches, &by_name, &mut height, 0);
    }
    let levels = height.iter().flatten().max().map_or(1, |m| m + 1);
    if levels > ordo_core::topology::MAX_LEVELS {
        return Err(err(
            0,
            format!("{levels} levels of switches; ordo models at most {}", ordo_core::topology::MAX_LEVELS),
        ));
    }
    // Each node's leaf switch, at most one.
    let mut leaf: Vec<Option<usize>> = vec![None; cluster.nodes.len()];
    for (si, (name, sw)) in switches.iter().enumerate() {
        for &n in &sw.nodes {
            if let Some(o) = leaf[n as usize] {
                if o != si {
                    return Err(err(
                        sw.line,
                        format!(
                            "node `{}` is under two switches, `{}` (line {}) and `{name}`",
                            cluster.nodes[n as usize].name, switches[o].0, switches[o].1.line
                        ),
                    ));
                }
            }
            leaf[n as usize] = Some(si);
        }
    }
    let paths: Vec<Vec<Option<String>>> = leaf
        .iter()
        .map(|l| match l {
            None => Vec::new(),
            Some(s) => {
                let mut cur = Some(*s);
                (0..levels)
                    .map(|lv| {
                        while let Some(c) = cur {
                            if height[c].unwrap_or(0) >= lv {
                                break;
                            }
                            cur = parent[c];
                        }
                        cur.map(|c| switches[c].0.clone())
                    })
                    .collect()
            }
        })
        .collect();
    let names: Vec<String> = (0..levels).map(tree_level_name).collect();
    Topology::from_paths(names, &names_of(cluster), &paths).map_err(|e| err(0, e.to_string()))
}

fn conf_block(lines: &[ConfLine], file: &str, cluster: &ClusterSpec) -> Result<Topology, TopologyFileError> {
    let err = |line: usize, why: String| TopologyFileError { file: file.to_string(), line, why };
    let index = node_index(cluster);
    let mut blocks: Vec<(String, usize)> = Vec::new();
    let mut of_node: Vec<Option<usize>> = vec![None; cluster.nodes.len()];
    let mut sizes: Option<(usize, Vec<u64>)> = None;
    for l in lines {
        match l.fields[0].0.as_str() {
            "blocksizes" => {
                if l.fields.len() > 1 {
                    return Err(err(l.line, "BlockSizes= stands alone on its line".into()));
                }
                let v: Result<Vec<u64>, _> = l.fields[0].1.split(',').map(|x| x.trim().parse::<u64>()).collect();
                let v = v.map_err(|_| {
                    err(l.line, format!("BlockSizes `{}`: expected node counts such as 18,72", l.fields[0].1))
                })?;
                if v.is_empty() || v.contains(&0) || v.windows(2).any(|w| w[1] <= w[0] || w[1] % w[0] != 0) {
                    return Err(err(
                        l.line,
                        format!(
                            "BlockSizes `{}`: each size must be a larger multiple of the one before",
                            l.fields[0].1
                        ),
                    ));
                }
                if v.len() > ordo_core::topology::MAX_LEVELS {
                    return Err(err(l.line, format!("at most {} block sizes", ordo_core::topology::MAX_LEVELS)));
                }
                sizes = Some((l.line, v));
            }
            "blockname" => {
                let name = l.fields[0].1.to_string();
                if let Some((_, line)) = blocks.iter().find(|b| b.0 == name) {
                    return Err(err(l.line, format!("block `{name}` is defined twice (first at line {line})")));
                }
                let nodes = get(l, "nodes").ok_or_else(|| err(l.line, format!("block `{name}` has no Nodes=")))?;
                for node in expand(file, l.line, "Nodes", nodes)? {
                    let &i = index.get(node.as_str()).ok_or_else(|| {
                        err(l.line, format!("block `{name}`: node `{node}` is not a node of the cluster"))
                    })?;
                    if let Some(o) = of_node[i as usize] {
                        return Err(err(
                            l.line,
                            format!(
                                "node `{node}` is in two blocks, `{}` (line {}) and `{name}`",
                                blocks[o].0, blocks[o].1
                            ),
                        ));
                    }
                    of_node[i as usize] = Some(blocks.len());
                }
                if l.fields.iter().any(|(k, _)| k != "blockname" && k != "nodes") {
                    return Err(err(l.line, "a BlockName line takes Nodes= only".into()));
                }
                blocks.push((name, l.line));
            }
            _ => return Err(err(l.line, "expected BlockName= or BlockSizes= first on the line".into())),
        }
    }
    if blocks.is_empty() {
        return Err(err(0, "BlockSizes without any BlockName line".into()));
    }
    let sizes = sizes.map(|s| s.1).unwrap_or_default();
    let mut levels = vec!["block".to_string()];
    let mut groups: Vec<u64> = Vec::new(); // blocks per unit, per higher level
    for &s in sizes.iter().skip(1) {
        levels.push(format!("block{s}"));
        groups.push(s / sizes[0]);
    }
    let paths: Vec<Vec<Option<String>>> = of_node
        .iter()
        .map(|b| match b {
            None => Vec::new(),
            Some(b) => std::iter::once(Some(blocks[*b].0.clone()))
                .chain(groups.iter().map(|&g| {
                    let first = (*b as u64 / g) * g;
                    let last = (first + g - 1).min(blocks.len() as u64 - 1);
                    Some(format!("{}..{}", blocks[first as usize].0, blocks[last as usize].0))
                }))
                .collect(),
        })
        .collect();
    Topology::from_paths(levels, &names_of(cluster), &paths).map_err(|e| err(0, e.to_string()))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    levels: toml::Spanned<Vec<String>>,
    #[serde(default)]
    units: BTreeMap<String, BTreeMap<String, toml::Spanned<String>>>,
    #[serde(default)]
    slowdown: Option<toml::Spanned<toml::Table>>,
}

/// Parses ordo's TOML topology (`file` names it in errors):
///
/// ```toml
/// levels = ["block", "switch"]      # lowest first
/// [units.block]
/// b0 = "n[0-3]"                     # the nodes of each unit of the lowest level
/// b1 = "n[4-7]"
/// [units.switch]
/// s0 = "b[0-1]"                     # the units of the level below, above it
/// [slowdown]                        # factor per level crossed, every job
/// block = 1.3
/// [slowdown.class.lm]
/// block = 4.34
/// ```
pub fn parse_topology_toml(text: &str, file: &str, cluster: &ClusterSpec) -> Result<Topology, TopologyFileError> {
    let line_of = |pos: usize| text[..pos.min(text.len())].matches('\n').count() + 1;
    let err = |line: usize, why: String| TopologyFileError { file: file.to_string(), line, why };
    let parsed: TomlFile = toml::from_str(text)
        .map_err(|e| err(e.span().map_or(0, |s| line_of(s.start)), e.message().trim().to_string()))?;
    let levels_line = line_of(parsed.levels.span().start);
    let levels: Vec<String> = parsed.levels.get_ref().iter().map(|l| l.trim().to_ascii_lowercase()).collect();
    if levels.is_empty() || levels.len() > ordo_core::topology::MAX_LEVELS {
        return Err(err(levels_line, format!("levels: 1 to {} names, lowest first", ordo_core::topology::MAX_LEVELS)));
    }
    for l in &levels {
        if !ordo_core::topology::is_level_name(l) {
            return Err(err(levels_line, format!("level `{l}`: 1-64 letters, digits, `-`, `_` or `.` only")));
        }
    }
    for (k, v) in &parsed.units {
        if !levels.contains(&k.to_ascii_lowercase()) {
            let line = v.values().next().map_or(0, |s| line_of(s.span().start));
            return Err(err(line, format!("[units.{k}]: `{k}` is not one of the levels ({})", levels.join(", "))));
        }
    }
    let index = node_index(cluster);
    let units_of = |l: &str| parsed.units.iter().find(|(k, _)| k.eq_ignore_ascii_case(l)).map(|(_, v)| v);
    // Level 0: nodes -> unit.
    let mut paths: Vec<Vec<Option<String>>> = vec![vec![None; levels.len()]; cluster.nodes.len()];
    let mut where_: HashMap<u32, (String, usize)> = HashMap::new();
    if let Some(us) = units_of(&levels[0]) {
        for (u, list) in us {
            let line = line_of(list.span().start);
            for node in expand(file, line, "nodes", list.get_ref())? {
                let &i = index.get(node.as_str()).ok_or_else(|| {
                    err(line, format!("{} `{u}`: node `{node}` is not a node of the cluster", levels[0]))
                })?;
                if let Some((o, ol)) = where_.get(&i) {
                    return Err(err(
                        line,
                        format!("node `{node}` is in two {} units, `{o}` (line {ol}) and `{u}`", levels[0]),
                    ));
                }
                where_.insert(i, (u.clone(), line));
                paths[i as usize][0] = Some(u.clone());
            }
        }
    }
    // Higher levels: child unit -> parent.
    for l in 1..levels.len() {
        let mut parent: HashMap<String, (String, usize)> = HashMap::new();
        let known: std::collections::HashSet<String> = paths.iter().filter_map(|p| p[l - 1].clone()).collect();
        if let Some(us) = units_of(&levels[l]) {
            for (u, list) in us {
                let line = line_of(list.span().start);
                for c in expand(file, line, &levels[l - 1], list.get_ref())? {
                    if !known.contains(&c) {
                        return Err(err(
                            line,
                            format!("{} `{u}`: `{c}` is not a {} unit with nodes", levels[l], levels[l - 1]),
                        ));
                    }
                    if let Some((o, ol)) = parent.get(&c) {
                        return Err(err(
                            line,
                            format!(
                                "{} `{c}` is in two {} units, `{o}` (line {ol}) and `{u}`",
                                levels[l - 1],
                                levels[l]
                            ),
                        ));
                    }
                    parent.insert(c, (u.clone(), line));
                }
            }
        }
        for p in &mut paths {
            p[l] = p[l - 1].as_ref().and_then(|c| parent.get(c)).map(|x| x.0.clone());
        }
    }
    let mut topo =
        Topology::from_paths(levels.clone(), &names_of(cluster), &paths).map_err(|e| err(0, e.to_string()))?;
    if let Some(sd) = &parsed.slowdown {
        let line = line_of(sd.span().start);
        topo.slowdown = slowdown_of(sd.get_ref(), &levels).map_err(|why| err(line, why))?;
        topo.slowdown.check(&levels).map_err(|e| err(line, e.to_string()))?;
    }
    Ok(topo)
}

/// `[slowdown]`: `LEVEL = factor` for every job, `[slowdown.class.NAME]` per class over it;
/// levels not given keep the published defaults ([`Slowdown::published`]).
fn slowdown_of(t: &toml::Table, levels: &[String]) -> Result<Slowdown, String> {
    let mut s = Slowdown::published(levels.len());
    let row = |t: &toml::Table, base: &[f64], what: &str| -> Result<Vec<f64>, String> {
        let mut r = base.to_vec();
        for (k, v) in t {
            let l = levels
                .iter()
                .position(|x| x.eq_ignore_ascii_case(k))
                .ok_or_else(|| format!("{what}: `{k}` is not one of the levels ({})", levels.join(", ")))?;
            r[l] = match v {
                toml::Value::Float(f) => *f,
                toml::Value::Integer(i) => *i as f64,
                _ => return Err(format!("{what}.{k}: expected a number such as 1.3")),
            };
        }
        Ok(r)
    };
    let mut plain = toml::Table::new();
    for (k, v) in t {
        if k == "class" {
            continue;
        }
        plain.insert(k.clone(), v.clone());
    }
    // A level's factor under [slowdown] is every class's, unless its class table says otherwise.
    s.default = row(&plain, &s.default, "[slowdown]")?;
    for c in &mut s.classes {
        c.1 = row(&plain, &c.1, "[slowdown]")?;
    }
    if let Some(c) = t.get("class") {
        let c = c.as_table().ok_or("[slowdown.class]: expected tables such as [slowdown.class.lm]")?;
        for (name, v) in c {
            let v = v.as_table().ok_or_else(|| format!("[slowdown.class.{name}]: expected a table"))?;
            let base =
                s.classes.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map_or(s.default.clone(), |x| x.1.clone());
            let r = row(v, &base, &format!("[slowdown.class.{name}]"))?;
            s.classes.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
            s.classes.push((name.to_ascii_lowercase(), r));
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(n: u32) -> ClusterSpec {
        ClusterSpec::uniform(n, 8)
    }

    #[test]
    fn a_tree_gives_levels_by_height() {
        let conf =
            "# two leaves under one spine\nSwitchName=s0 Nodes=n[0-1] LinkSpeed=100\nSwitchName=s1 Nodes=n[2-3]\n\
                    SwitchName=top Switches=s[0-1]\n";
        let t = parse_topology_conf(conf, "topology.conf", &cluster(5)).unwrap();
        assert_eq!(t.levels(), ["switch", "spine"]);
        assert_eq!(t.crossed([0, 1]), 0);
        assert_eq!(t.crossed([1, 2]), 1);
        // n4 is in no switch: it shares no unit with any other node.
        assert_eq!(t.crossed([3, 4]), 2);
    }

    #[test]
    fn an_unbalanced_tree_puts_a_leaf_under_its_nearest_higher_switch() {
        let conf = "SwitchName=a Nodes=n[0-1]\nSwitchName=b Nodes=n[2-3]\nSwitchName=c Nodes=n[4-5]\n\
                    SwitchName=m Switches=a,b\nSwitchName=r Switches=m,c\n";
        let t = parse_topology_conf(conf, "t.conf", &cluster(6)).unwrap();
        assert_eq!(t.levels(), ["switch", "spine", "core"]);
        assert_eq!(t.crossed([0, 3]), 1);
        assert_eq!(t.crossed([0, 5]), 2);
        assert_eq!(t.unit_name(1, t.unit_of(1, 4)), "r");
    }

    #[test]
    fn blocks_and_block_sizes() {
        let conf = "BlockName=b0 Nodes=n[0-1]\nBlockName=b1 Nodes=n[2-3]\nBlockName=b2 Nodes=n[4-5]\n\
                    BlockName=b3 Nodes=n[6-7]\nBlockSizes=2,4\n";
        let t = parse_topology_conf(conf, "t.conf", &cluster(8)).unwrap();
        assert_eq!(t.levels(), ["block", "block4"]);
        assert_eq!(t.crossed([0, 3]), 1);
        assert_eq!(t.crossed([0, 4]), 2);
        assert_eq!(t.unit_name(1, t.unit_of(1, 7)), "b2..b3");
    }

    #[test]
    fn bad_files_say_file_line_and_why() {
        let c = cluster(4);
        let e = |text: &str| parse_topology_conf(text, "topology.conf", &c).unwrap_err().to_string();
        assert_eq!(
            e("SwitchName=s0 Nodes=n[0-1]\nSwitchName=s1 Nodes=n9\n"),
            "topology.conf:2: switch `s1`: node `n9` is not a node of the cluster"
        );
        assert_eq!(
            e("SwitchName=s0 Nodes=n[0-1]\nSwitchName=s1 Nodes=n1\n"),
            "topology.conf:2: node `n1` is under two switches, `s0` (line 1) and `s1`"
        );
        assert_eq!(
            e("SwitchName=a Switches=b\nSwitchName=b Switches=a\nSwitchName=c Nodes=n0\n"),
            "topology.conf:1: switches form a cycle: a -> b -> a"
        );
        assert_eq!(
            e("SwitchName=a Nodes=n0\nSwitchName=b Switches=a\nSwitchName=c Switches=a\n"),
            "topology.conf:3: switch `a` is under two switches, `b` (line 2) and `c`"
        );
        assert_eq!(
            e("SwitchName=a Switches=zz\n"),
            "topology.conf:1: switch `a`: switch `zz` is not defined in the file"
        );
        assert_eq!(e("SwitchName=a Nodez=n0\n"), "topology.conf:1: unknown key `nodez`: expected SwitchName, Nodes, Switches, LinkSpeed, BlockName or BlockSizes");
        assert_eq!(e("SwitchName=a Nodes=n[0-\n").split(':').nth(1), Some("1"));
        assert_eq!(
            e("BlockName=b0 Nodes=n0\nBlockName=b1 Nodes=n0\n"),
            "topology.conf:2: node `n0` is in two blocks, `b0` (line 1) and `b1`"
        );
        assert_eq!(
            e("BlockName=b0 Nodes=n0\nBlockSizes=4,6\n"),
            "topology.conf:2: BlockSizes `4,6`: each size must be a larger multiple of the one before"
        );
        assert!(e("\n# nothing\n").contains("not a topology.conf"));
    }

    #[test]
    fn toml_units_slowdown_and_errors() {
        let text = "levels = [\"block\", \"switch\"]\n[units.block]\nb0 = \"n[0-1]\"\nb1 = \"n[2-3]\"\n\
                    [units.switch]\ns0 = \"b[0-1]\"\n[slowdown]\nblock = 1.5\nswitch = 1.2\n[slowdown.class.lm]\nblock = 4\n";
        let t = parse_topology_toml(text, "t.toml", &cluster(4)).unwrap();
        assert_eq!(t.crossed([0, 3]), 1);
        assert!((t.factor(None, 2) - 1.8).abs() < 1e-12);
        assert_eq!(t.factor(Some("lm"), 1), 4.0);
        assert_eq!(t.factor(Some("lm"), 2), 4.0 * 1.2);
        let e = |text: &str| parse_topology_toml(text, "t.toml", &cluster(4)).unwrap_err().to_string();
        assert_eq!(
            e("levels = [\"block\"]\n[units.block]\nb0 = \"n[0-1]\"\nb1 = \"n[1-2]\"\n"),
            "t.toml:4: node `n1` is in two block units, `b0` (line 3) and `b1`"
        );
        assert_eq!(
            e("levels = [\"block\", \"switch\"]\n[units.block]\nb0 = \"n0\"\n[units.switch]\ns0 = \"b0,b7\"\n"),
            "t.toml:5: switch `s0`: `b7` is not a block unit with nodes"
        );
        assert_eq!(
            e("levels = [\"block\"]\n[units.block]\nb0 = \"n0\"\n[slowdown]\nblock = 0.5\n"),
            "t.toml:4: slowdown factor 0.5 for crossing block: expected a number from 1 to 100"
        );
        assert!(e("levels = [\"block\"]\n[units.rack]\nr0 = \"n0\"\n").starts_with("t.toml:3: [units.rack]"));
        assert!(e("levels = 3\n").starts_with("t.toml:1:"));
    }
}
