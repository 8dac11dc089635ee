//! The cluster's topology as the server keeps it: each node's place (`ordo agent --topology
//! block=nvl0,switch=leaf3`), the server's levels (`ordo server --topology-levels
//! block,switch`, lowest first) and jobs' asks (`ordo submit --topology required:block`). The
//! placement is ordo-core's (`ordo_core::topology`): the server builds an
//! `ordo_core::Topology` over the nodes it schedules on and resolves each job's ask against it.

use ordo_core::{TopoAsk, Topology};
use std::collections::BTreeMap;

/// Most levels a server, or entries a node's place, may have (ordo-core's limit).
pub const MAX_LEVELS: usize = 8;
/// Most bytes of a level's or unit's name.
pub const MAX_NAME_BYTES: usize = 64;

/// A level's or unit's name: 1 to [`MAX_NAME_BYTES`] bytes of ASCII letters, digits and
/// `. _ - : /`; a level's is lowercased, and the server's own levels are also level names as
/// ordo-core takes them ([`levels`]).
fn name(raw: &str, what: &str) -> Result<(), String> {
    if raw.is_empty() {
        return Err(format!("an empty {what} name"));
    }
    if raw.len() > MAX_NAME_BYTES {
        return Err(format!("a {what} name of {} bytes, more than the limit of {MAX_NAME_BYTES}", raw.len()));
    }
    if let Some(c) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-:/".contains(*c))) {
        return Err(format!(
            "{what} `{}` has the character {c:?}; a name is ASCII letters, digits and . _ - : /",
            raw.escape_debug()
        ));
    }
    Ok(())
}

/// The server's levels, lowest first: each a name, lowercased, no repeats, at most
/// [`MAX_LEVELS`].
pub fn levels(raw: &[String]) -> Result<Vec<String>, String> {
    if raw.len() > MAX_LEVELS {
        return Err(format!("{} levels, more than the limit of {MAX_LEVELS}", raw.len()));
    }
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for l in raw {
        name(l, "level")?;
        // A level a job's ask cannot name (`required:a/b`) would be one no job could require.
        if !ordo_core::topology::is_level_name(l) {
            return Err(format!(
                "level `{}`: a level name is ASCII letters, digits, `-`, `_` or `.`, as `--topology required:LEVEL` \
                 names it",
                l.escape_debug()
            ));
        }
        let l = l.to_ascii_lowercase();
        if out.contains(&l) {
            return Err(format!("level `{l}` is given twice"));
        }
        out.push(l);
    }
    Ok(out)
}

/// A node's place as the server keeps it: levels lowercased, every level one of `levels` (the
/// server's), every name bounded. An error in words otherwise.
pub fn place(raw: &BTreeMap<String, String>, levels: &[String]) -> Result<BTreeMap<String, String>, String> {
    if raw.len() > MAX_LEVELS {
        return Err(format!("{} entries, more than the limit of {MAX_LEVELS}", raw.len()));
    }
    let mut out = BTreeMap::new();
    for (l, u) in raw {
        name(l, "level")?;
        name(u, "unit")?;
        let l = l.to_ascii_lowercase();
        if !levels.contains(&l) {
            return Err(if levels.is_empty() {
                format!(
                    "level `{l}`: the server has no topology levels (start it with --topology-levels, e.g. \
                     block,switch)"
                )
            } else {
                format!("level `{l}` is not one of the server's topology levels ({})", levels.join(", "))
            });
        }
        if out.insert(l.clone(), u.clone()).is_some() {
            return Err(format!("level `{l}` is given twice"));
        }
    }
    Ok(out)
}

/// `block=nvl0,switch=leaf3` as a place (the agent's `--topology` and the database's column).
pub fn parse_place(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((l, u)) = part.split_once('=') else {
            return Err(format!("`{part}`: expected LEVEL=UNIT, as in block=nvl0,switch=leaf3"));
        };
        if out.insert(l.trim().to_string(), u.trim().to_string()).is_some() {
            return Err(format!("level `{}` is given twice", l.trim()));
        }
    }
    Ok(out)
}

/// A place as text (`block=nvl0,switch=leaf3`), `None` when empty.
pub fn place_text(p: &BTreeMap<String, String>) -> Option<String> {
    (!p.is_empty()).then(|| p.iter().map(|(l, u)| format!("{l}={u}")).collect::<Vec<_>>().join(","))
}

/// A job's ask as the server keeps it (`required:block`), its level one of `levels`.
pub fn ask(raw: &str, levels: &[String]) -> Result<String, String> {
    if raw.len() > 2 * MAX_NAME_BYTES {
        return Err(format!("{} bytes, more than the limit of {}", raw.len(), 2 * MAX_NAME_BYTES));
    }
    let a: TopoAsk = raw.parse()?;
    if !levels.contains(&a.level) {
        return Err(if levels.is_empty() {
            format!("the server has no topology levels, so `{raw}` cannot be met (ordo server --topology-levels)")
        } else {
            format!("level `{}` is not one of the server's topology levels ({})", a.level, levels.join(", "))
        });
    }
    Ok(a.to_string())
}

/// The topology of `nodes` (names and places, in the scheduler's node order) by `levels`: a
/// node without a unit at a level is a unit of its own there. `None` without levels; an error
/// in words when a unit would be under two parents.
pub fn build<'a>(
    levels: &[String],
    nodes: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> Result<Option<Topology>, String> {
    if levels.is_empty() {
        return Ok(None);
    }
    let (names, paths): (Vec<String>, Vec<Vec<Option<String>>>) =
        nodes.into_iter().map(|(n, p)| (n.to_string(), levels.iter().map(|l| p.get(l).cloned()).collect())).unzip();
    Topology::from_paths(levels.to_vec(), &names, &paths).map(Some).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lv() -> Vec<String> {
        vec!["block".into(), "switch".into()]
    }

    #[test]
    fn places_are_bounded_and_their_levels_known() {
        let p = parse_place("Block=b0, switch=s0").unwrap();
        assert_eq!(place_text(&place(&p, &lv()).unwrap()).unwrap(), "block=b0,switch=s0");
        assert!(parse_place("block").unwrap_err().contains("LEVEL=UNIT"));
        assert!(parse_place("block=a,block=b").unwrap_err().contains("twice"));
        let e = place(&parse_place("rack=r1").unwrap(), &lv()).unwrap_err();
        assert_eq!(e, "level `rack` is not one of the server's topology levels (block, switch)");
        assert!(place(&parse_place("block=b0").unwrap(), &[]).unwrap_err().contains("--topology-levels"));
        let long = format!("block={}", "x".repeat(65));
        assert!(place(&parse_place(&long).unwrap(), &lv()).unwrap_err().contains("limit of 64"));
        assert!(place(&parse_place("block=a b").unwrap(), &lv()).unwrap_err().contains("character ' '"));
        let many: BTreeMap<String, String> = (0..9).map(|i| (format!("l{i}"), "u".to_string())).collect();
        assert!(place(&many, &lv()).unwrap_err().contains("9 entries"));
        assert!(levels(&["a".into(), "A".into()]).unwrap_err().contains("twice"));
        assert!(levels(&["rack:a".into()]).unwrap_err().contains("as `--topology required:LEVEL` names it"));
    }

    #[test]
    fn asks_name_a_level_of_the_server() {
        assert_eq!(ask("required:Block", &lv()).unwrap(), "required:block");
        assert!(ask("required:rack", &lv()).unwrap_err().contains("(block, switch)"));
        assert!(ask("needs:block", &lv()).is_err());
        assert!(ask("required:block", &[]).unwrap_err().contains("no topology levels"));
    }

    #[test]
    fn a_unit_under_two_parents_is_refused() {
        let a = parse_place("block=b0,switch=s0").unwrap();
        let b = parse_place("block=b0,switch=s1").unwrap();
        let none = BTreeMap::new();
        let t = build(&lv(), [("n0", &a), ("n1", &none)]).unwrap().unwrap();
        assert_eq!(t.levels(), &lv()[..]);
        assert_eq!(t.crossed([0, 1]), 2);
        let e = build(&lv(), [("n0", &a), ("n1", &b)]).unwrap_err();
        assert!(e.contains("under two units of level switch"), "{e}");
        assert!(build(&[], [("n0", &a)]).unwrap().is_none());
    }
}
