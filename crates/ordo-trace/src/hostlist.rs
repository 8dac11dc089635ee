//! Slurm host lists (`n[1-3,7],gpu-a[01-02]b,login`), as `sinfo`, `squeue` and
//! `topology.conf` write them.

/// Splits at the commas outside brackets and parentheses.
pub fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// Expands a Slurm host list such as `n[1-3,7],gpu-a[01-02]b,login` into node names, in the
/// order written. `None` on text that is not a host list or names more than `limit` hosts.
pub fn hostlist(text: &str, limit: usize) -> Option<Vec<String>> {
    let text = text.trim();
    let mut out = Vec::new();
    if text.is_empty() || text == "(null)" || text == "N/A" {
        return Some(out);
    }
    for item in split_top(text) {
        let item = item.trim();
        if item.is_empty() {
            return None;
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    if rest.contains(']') {
                        return None;
                    }
                    names.iter_mut().for_each(|n| n.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..].find(']')? + open;
                    let (prefix, ranges) = (&rest[..open], &rest[open + 1..close]);
                    if prefix.contains(']') {
                        return None;
                    }
                    let mut suffixes = Vec::new();
                    for r in ranges.split(',') {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        let (lo, hi): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                        if hi < lo || !a.bytes().all(|c| c.is_ascii_digit()) {
                            return None;
                        }
                        if (hi - lo) as usize >= limit {
                            return None;
                        }
                        for v in lo..=hi {
                            suffixes.push(format!("{v:0width$}", width = a.len()));
                            if suffixes.len() > limit {
                                return None;
                            }
                        }
                    }
                    let mut next = Vec::with_capacity(names.len() * suffixes.len());
                    for n in &names {
                        for s in &suffixes {
                            next.push(format!("{n}{prefix}{s}"));
                        }
                    }
                    if next.len() > limit {
                        return None;
                    }
                    names = next;
                    rest = &rest[close + 1..];
                }
            }
        }
        out.extend(names);
        if out.len() > limit {
            return None;
        }
    }
    Some(out)
}
