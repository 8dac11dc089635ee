//! Slurm's small value languages: gres and TRES strings, host lists (`n[1-3,7]`), array task
//! expressions (`1-9:2,20%4`). Every reader returns `None` on text it cannot read, never panics.

/// One `gpu` item of a gres string: its type (`gpu:a100:4`; `None` for `gpu:4`) and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresGpu {
    /// The GPU type (Slurm's `Type=` in gres.conf), as written.
    pub kind: Option<String>,
    /// How many.
    pub count: u32,
}

/// The `gpu` items of a gres string such as `gpu:8`, `gpu:a100:4(S:0-1)`, `gpu:2,mps:100`,
/// `gres:gpu:a100:1`, `gres/gpu:2`, `gpu:a100:4,gpu:v100:2` or `(null)`. `None` if a `gpu`
/// item has no readable count.
pub fn gres_gpu_items(gres: &str) -> Option<Vec<GresGpu>> {
    let mut out = Vec::new();
    for item in split_top(gres.trim()) {
        let item = item.split('(').next().unwrap_or("").trim();
        let item = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        if item != "gpu" && !item.starts_with("gpu:") {
            continue;
        }
        let parts: Vec<&str> = item.split(':').collect();
        let count: u32 = if parts.len() == 1 { 1 } else { parts[parts.len() - 1].parse().ok()? };
        // `gpu:TYPE:COUNT`, with Slurm's `no_consume` flag possibly before the count.
        let kind = parts
            .get(1..parts.len().saturating_sub(1))
            .unwrap_or(&[])
            .iter()
            .find(|p| !p.is_empty() && **p != "no_consume")
            .map(|p| p.to_string());
        out.push(GresGpu { kind, count });
    }
    Some(out)
}

/// GPUs in a gres string (see [`gres_gpu_items`]). `None` if a `gpu` item has no readable count.
pub fn gres_gpus(gres: &str) -> Option<u32> {
    gres_gpu_items(gres)?.iter().try_fold(0u32, |t, g| t.checked_add(g.count))
}

/// The distinct GPU types of a gres string, in order (none for untyped GPUs). `None` if a
/// `gpu` item has no readable count.
pub fn gres_types(gres: &str) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for g in gres_gpu_items(gres)? {
        if let Some(k) = g.kind {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    Some(out)
}

/// The distinct GPU types of a TRES string's typed entries (`gres/gpu:a100=2`), in order.
pub fn tres_types(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in text.split(',') {
        let Some((k, _)) = item.split_once('=') else { continue };
        if let Some(t) = k.trim().strip_prefix("gres/gpu:").map(str::trim).filter(|t| !t.is_empty()) {
            if !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
    }
    out
}

/// The GPU types a job asks for: the typed items of its gres requests per job and per node
/// (`gres:gpu:a100:2` in 22.05, `gres/gpu:a100:2` in 24.11), else the typed entries of its
/// requested TRES (`gres/gpu:a100=2`, where typed GPUs are accounted). Empty: any type. `None`
/// if a request's GPU count is unreadable.
pub fn asked_types(per_job: &str, per_node: &str, req_tres: &str) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    let mut named_gpus = false;
    for text in [per_job, per_node] {
        if !text.contains("gpu") {
            continue;
        }
        for g in gres_gpu_items(text)? {
            named_gpus = true;
            if let Some(k) = g.kind {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
    }
    if !named_gpus {
        out = tres_types(req_tres);
    }
    Some(out)
}

/// Splits on commas outside parentheses and brackets.
use ordo_trace::hostlist::split_top;

/// What a TRES string such as `cpu=4,mem=16G,node=1,billing=4,gres/gpu=2` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tres {
    /// GPUs: the untyped `gres/gpu` count if present, else the sum of typed ones
    /// (`gres/gpu:a100=4`); 0 if none.
    pub gpus: u32,
    /// CPUs (`cpu=`), 0 if absent.
    pub cpus: u32,
    /// Memory in MiB (`mem=` with unit K, M, G, T; M when none), 0 if absent.
    pub mem_mib: u64,
    /// Nodes (`node=`), 0 if absent.
    pub nodes: u32,
}

/// Reads a TRES string (empty or `N/A`: nothing asked). `None` if a counted item is unreadable.
pub fn tres(text: &str) -> Option<Tres> {
    let text = text.trim();
    let mut t = Tres::default();
    if text.is_empty() || text == "N/A" || text == "(null)" {
        return Some(t);
    }
    let mut untyped = None;
    let mut typed = 0u32;
    for item in text.split(',') {
        let Some((k, v)) = item.split_once('=') else { continue };
        let v = v.trim();
        match k.trim() {
            "gres/gpu" => untyped = Some(v.parse::<u32>().ok()?),
            k if k.starts_with("gres/gpu:") => typed = typed.checked_add(v.parse::<u32>().ok()?)?,
            "cpu" => t.cpus = v.parse().ok()?,
            "node" => t.nodes = v.parse().ok()?,
            "mem" => t.mem_mib = mem_mib(v)?,
            _ => {}
        }
    }
    t.gpus = untyped.unwrap_or(typed);
    Some(t)
}

/// GPUs in a TRES string (see [`tres`]).
pub fn tres_gpus(text: &str) -> Option<u32> {
    tres(text).map(|t| t.gpus)
}

/// A memory size as Slurm writes it: `4000M`, `16G`, `512K`, `1.5T`, plain numbers in MiB.
pub fn mem_mib(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, unit) = match v.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&v[..i], &v[i..]),
        None => (v, "M"),
    };
    let x: f64 = num.parse().ok()?;
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    let mib = match unit {
        "K" => x / 1024.0,
        "M" => x,
        "G" => x * 1024.0,
        "T" => x * 1024.0 * 1024.0,
        "P" => x * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    (mib < 1e15).then(|| mib.ceil() as u64)
}

pub use ordo_trace::hostlist::hostlist;

/// The pending tasks of a job array as Slurm writes them (`0-49`, `2-49%5`, `1-10:3,20`,
/// `1,4,7`): how many tasks, and the throttle (`%N`: at most N running at once) if any.
/// `None` on text that is not a task expression. A list Slurm cut short (ending in `...`)
/// counts the tasks it shows.
pub fn array_tasks(text: &str) -> Option<(u64, Option<u32>)> {
    let text = text.trim().trim_start_matches('[').trim_end_matches(']');
    let (list, throttle) = match text.split_once('%') {
        Some((l, t)) => (l, Some(t.trim().parse::<u32>().ok()?)),
        None => (text, None),
    };
    let list = list.trim().trim_end_matches("...").trim_end_matches(',');
    let mut count = 0u64;
    for item in list.split(',') {
        let item = item.trim();
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => (r, s.parse::<u64>().ok().filter(|&s| s > 0)?),
            None => (item, 1),
        };
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (lo, hi): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if hi < lo {
            return None;
        }
        count = count.checked_add((hi - lo) / step + 1)?;
    }
    Some((count, throttle.filter(|&t| t > 0)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn reads_gres_and_tres() {
        assert_eq!(gres_gpus("gpu:8"), Some(8));
        assert_eq!(gres_gpus("gpu:a100:4(S:0-1)"), Some(4));
        assert_eq!(gres_gpus("gpu:2(IDX:0,1),mps:100"), Some(2));
        assert_eq!(gres_gpus("(null)"), Some(0));
        assert_eq!(gres_gpus("gres:gpu:4"), Some(4));
        assert_eq!(gres_gpus("gres/gpu:4"), Some(4));
        assert_eq!(gres_gpus("gpu:x"), None);
        assert_eq!(tres_gpus("cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4"), Some(4));
        assert_eq!(tres_gpus("cpu=1,gres/gpu:a100=2,gres/gpu:v100=1"), Some(3));
        assert_eq!(tres_gpus("cpu=1,gres/gpu=2,gres/gpu:a100=2"), Some(2));
        assert_eq!(tres_gpus("cpu=1"), Some(0));
        assert_eq!(tres_gpus("gres/gpu=lots"), None);
        let t = tres("cpu=4,mem=16G,node=2,billing=4,gres/gpu=2").unwrap();
        assert_eq!(t, Tres { gpus: 2, cpus: 4, mem_mib: 16_384, nodes: 2 });
        assert_eq!(tres("N/A"), Some(Tres::default()));
        assert_eq!(tres("cpu=x"), None);
        assert_eq!(mem_mib("512K"), Some(1));
        assert_eq!(mem_mib("1.5G"), Some(1536));
        assert_eq!(mem_mib("100"), Some(100));
        assert_eq!(mem_mib("3Q"), None);
        assert_eq!(mem_mib("-1M"), None);
    }

    /// Gres and TRES as Slurm 22.05 and 24.11 print them on the dev cluster with typed GPUs.
    #[test]
    fn reads_gpu_types() {
        assert_eq!(gres_types("gpu:a100:8"), Some(vec!["a100".to_string()]));
        assert_eq!(gres_types("gpu:a100:4(S:0-1),gpu:v100:2(S:1)"), Some(vec!["a100".into(), "v100".into()]));
        assert_eq!(gres_types("gpu:8"), Some(vec![]));
        assert_eq!(gres_types("gpu:tesla:no_consume:2"), Some(vec!["tesla".into()]));
        assert_eq!(gres_gpus("gpu:a100:4(S:0-1),gpu:v100:2(S:1)"), Some(6));
        assert_eq!(gres_gpus("gpu:no_consume:2"), Some(2));
        assert_eq!(gres_types("gpu:a100:x"), None);
        assert_eq!(tres_types("cpu=1,gres/gpu=2,gres/gpu:a100=2"), ["a100"]);
        assert_eq!(tres_types("billing=1,gres/gpu:a100=1,gres/gpu:v100=1,gres/gpu=2"), ["a100", "v100"]);
        // 22.05's per-node request, 24.11's per-job one, an untyped request, typed TRES only.
        assert_eq!(asked_types("", "gres:gpu:a100:2", "gres/gpu=2,gres/gpu:a100=2"), Some(vec!["a100".into()]));
        assert_eq!(asked_types("gres/gpu:v100:2", "N/A", ""), Some(vec!["v100".into()]));
        assert_eq!(asked_types("N/A", "gres:gpu:2", "cpu=1,gres/gpu=2"), Some(vec![]));
        assert_eq!(asked_types("", "", "cpu=1,gres/gpu=2,gres/gpu:a100=2"), Some(vec!["a100".into()]));
        assert_eq!(asked_types("", "gres:gpu:a100:1,gres:gpu:v100:1", ""), Some(vec!["a100".into(), "v100".into()]));
        assert_eq!(asked_types("", "gres/gpu:a100:many", ""), None);
    }

    #[test]
    fn expands_host_lists() {
        assert_eq!(hostlist("n[1-3]", 100).unwrap(), ["n1", "n2", "n3"]);
        assert_eq!(hostlist("n[1-2,7],login", 100).unwrap(), ["n1", "n2", "n7", "login"]);
        assert_eq!(hostlist("gpu-a[08-10]b", 100).unwrap(), ["gpu-a08b", "gpu-a09b", "gpu-a10b"]);
        assert_eq!(hostlist("r[1-2]n[1-2]", 100).unwrap(), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(hostlist("", 100).unwrap(), Vec::<String>::new());
        assert_eq!(hostlist("(null)", 100).unwrap(), Vec::<String>::new());
        for bad in ["n[1-", "n[3-1]", "n]1[", "n[a-b]", "n[1-3]]", ",", "n[-1]"] {
            assert_eq!(hostlist(bad, 100), None, "{bad}");
        }
        assert_eq!(hostlist("n[1-1000000000]", 1000), None, "over the limit, not allocated");
    }

    #[test]
    fn counts_array_tasks() {
        assert_eq!(array_tasks("0-49"), Some((50, None)));
        assert_eq!(array_tasks("2-49%5"), Some((48, Some(5))));
        assert_eq!(array_tasks("1-10:3,20"), Some((5, None)));
        assert_eq!(array_tasks("1,4,7,10,20"), Some((5, None)));
        assert_eq!(array_tasks("[3-4]"), Some((2, None)));
        assert_eq!(array_tasks("1,3,5,..."), Some((3, None)));
        for bad in ["", "a", "5-1", "1-9:0", "1%x"] {
            assert_eq!(array_tasks(bad), None, "{bad}");
        }
    }
}
