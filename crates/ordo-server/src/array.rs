//! Job array specs as Slurm writes them (`ordo submit --array 0-999%50`): indices as ranges
//! `A-B`, stepped ranges `A-B:S`, single indices and comma lists of those (`1,3,5-7`), with an
//! optional `%N`, the most elements running at once. Parsed on the server (the CLI parses too,
//! for an early error); every bound is checked, nothing panics on user input.

/// Most elements one array may have.
pub const MAX_ARRAY_ELEMENTS: usize = 100_000;
/// Largest index an element may have.
pub const MAX_ARRAY_INDEX: u32 = 9_999_999;
/// Most bytes of a spec.
pub const MAX_ARRAY_SPEC_BYTES: usize = 4096;

/// A parsed array spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// The element indices, ascending, each once.
    pub indices: Vec<u32>,
    /// The most elements running at once (`%N`), when given.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// The spec in its canonical form: runs of consecutive indices as `A-B`, the rest as a
    /// comma list, then `%N` (`0-999%50`, `1,3,5-7`).
    pub fn canonical(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.indices.len() {
            let a = self.indices[i];
            let mut j = i;
            while j + 1 < self.indices.len() && self.indices[j + 1] == self.indices[j] + 1 {
                j += 1;
            }
            let b = self.indices[j];
            parts.push(if a == b { a.to_string() } else { format!("{a}-{b}") });
            i = j + 1;
        }
        let mut s = parts.join(",");
        if let Some(m) = self.max_running {
            s.push_str(&format!("%{m}"));
        }
        s
    }
}

/// Parses a spec; the error names what is wrong (the caller adds the field's name).
pub fn parse_array(spec: &str) -> Result<ArraySpec, String> {
    if spec.len() > MAX_ARRAY_SPEC_BYTES {
        return Err(format!("{} bytes, more than the limit of {MAX_ARRAY_SPEC_BYTES}", spec.len()));
    }
    let (list, max) = match spec.split_once('%') {
        Some((l, m)) => (l, Some(m)),
        None => (spec, None),
    };
    let max_running = match max {
        None => None,
        Some(m) => match number(m) {
            Some(0) => return Err("`%0`: at most 0 elements running would never run any; give %1 or more".into()),
            Some(n) => Some(n),
            None => return Err(format!("`%{m}`: expected the most elements running at once, a whole number")),
        },
    };
    if list.trim().is_empty() {
        return Err("no indices: give a range such as 0-99, a list such as 1,3,5-7, or both".into());
    }
    let mut indices: Vec<u32> = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => match number(s) {
                Some(0) => return Err(format!("`{part}`: a step of 0")),
                Some(s) => (r, s),
                None => return Err(format!("`{part}`: the step `{s}` is not a whole number")),
            },
            None => (part, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (number(a), number(b)),
            None if part.contains(':') => {
                return Err(format!("`{part}`: a step needs a range (A-B:STEP)"));
            }
            None => (number(range), number(range)),
        };
        let (Some(a), Some(b)) = (a, b) else {
            return Err(format!("`{part}`: expected an index (N), a range (A-B) or a stepped range (A-B:STEP)"));
        };
        if a > b {
            return Err(format!("`{part}`: the range is reversed ({a} > {b})"));
        }
        if b > MAX_ARRAY_INDEX {
            return Err(format!("`{part}`: index {b} is above the largest allowed, {MAX_ARRAY_INDEX}"));
        }
        let count = (b - a) / step + 1;
        if indices.len() + count as usize > MAX_ARRAY_ELEMENTS {
            return Err(format!("more than {MAX_ARRAY_ELEMENTS} elements"));
        }
        indices.extend((a..=b).step_by(step as usize));
    }
    indices.sort_unstable();
    indices.dedup();
    Ok(ArraySpec { indices, max_running })
}

/// A whole number with digits only (no sign, no spaces inside), below 2^32.
fn number(s: &str) -> Option<u32> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A job or element as users name it: `123` or `123_7` (element 7 of array 123).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    /// A job id; when it is an array's id, the whole array.
    Job(u64),
    /// One element of an array: the array's id and the element's index.
    Element(u64, u32),
}

impl JobRef {
    /// Parses `123` or `123_7`.
    pub fn parse(s: &str) -> Result<JobRef, String> {
        let bad = || {
            format!("`{s}` is not a job id (a whole number, or ARRAY_INDEX such as 123_7 for one element of an array)")
        };
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        match s.split_once('_') {
            Some((a, i)) if digits(a) && digits(i) => {
                Ok(JobRef::Element(a.parse().map_err(|_| bad())?, i.parse().map_err(|_| bad())?))
            }
            None if digits(s) => Ok(JobRef::Job(s.parse().map_err(|_| bad())?)),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Job(id) => write!(f, "{id}"),
            JobRef::Element(a, i) => write!(f, "{a}_{i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> ArraySpec {
        parse_array(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn ranges_steps_lists_and_limits() {
        let a = ok("0-999%50");
        assert_eq!(a.indices.len(), 1000);
        assert_eq!((a.indices[0], a.indices[999], a.max_running), (0, 999, Some(50)));
        assert_eq!(ok("1,3,5-7").indices, vec![1, 3, 5, 6, 7]);
        assert_eq!(ok("0-20:5").indices, vec![0, 5, 10, 15, 20]);
        assert_eq!(ok("0-21:5").indices, vec![0, 5, 10, 15, 20]);
        assert_eq!(ok("7").indices, vec![7]);
        assert_eq!(ok("3-3").indices, vec![3]);
        // Overlaps count once, in order.
        assert_eq!(ok("5-7,1,6").indices, vec![1, 5, 6, 7]);
        assert_eq!(ok(" 1 , 2 ").indices, vec![1, 2]);
        assert_eq!(ok("0-5%2").canonical(), "0-5%2");
        assert_eq!(ok("1,3,5-7,9-10").canonical(), "1,3,5-7,9-10");
        assert_eq!(ok("0-4:2").canonical(), "0,2,4");
        assert_eq!(ok(&format!("0-{}", MAX_ARRAY_ELEMENTS - 1)).indices.len(), MAX_ARRAY_ELEMENTS);
        assert_eq!(ok(&format!("{MAX_ARRAY_INDEX}")).indices, vec![MAX_ARRAY_INDEX]);
    }

    #[test]
    fn bad_specs_are_refused_with_what_is_wrong() {
        let err = |s: &str| parse_array(s).expect_err(s);
        assert!(err("5-1").contains("reversed"), "{}", err("5-1"));
        assert!(err("0-10:0").contains("step of 0"));
        assert!(err("0-9%0").contains("%0"));
        assert!(err("0-9%").contains("whole number"));
        assert!(err("0-9%x").contains("whole number"));
        assert!(err("").contains("no indices"));
        assert!(err("%5").contains("no indices"));
        assert!(err(&format!("0-{}", MAX_ARRAY_ELEMENTS)).contains("more than 100000 elements"));
        assert!(err("0-99999,200000-200001").contains("more than"));
        assert!(err(&format!("0-{}", MAX_ARRAY_INDEX + 1)).contains("above the largest"));
        assert!(err("99999999999999999999").contains("expected an index"));
        assert!(err("-1").contains("expected an index"));
        assert!(err("1-").contains("expected an index"));
        assert!(err("a-b").contains("expected an index"));
        assert!(err("1,,2").contains("expected an index"));
        assert!(err("+1").contains("expected an index"));
        assert!(err("5:2").contains("needs a range"));
        assert!(err("1-5:x").contains("not a whole number"));
        assert!(err("1-5%2%3").contains("whole number"));
        assert!(err(&"1,".repeat(3000)).contains("bytes"));
    }

    #[test]
    fn job_refs() {
        assert_eq!(JobRef::parse("123"), Ok(JobRef::Job(123)));
        assert_eq!(JobRef::parse("123_7"), Ok(JobRef::Element(123, 7)));
        for bad in ["", "_", "1_", "_1", "1_2_3", "x", "-1", "1_-2", "1_99999999999"] {
            assert!(JobRef::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(JobRef::Element(4, 2).to_string(), "4_2");
    }
}
