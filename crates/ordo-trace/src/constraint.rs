//! Slurm's node-feature constraints: a job's `--constraint` (`Features` in `scontrol show job`
//! and `squeue -O Feature`, `features` in slurmrestd, `Constraints` in `sacct`), read into a
//! [`Constraint`] that says which nodes may hold the job and which features every such node has.
//!
//! The syntax is Slurm's: feature names joined by `&` (AND; `,` is read as AND too, as Slurm
//! itself rewrites it) and `|` (OR), grouped by `(...)` and by `[...]` (Slurm's "matching OR":
//! all the job's nodes take the same alternative), a name or a bracket may carry a count `*N`
//! (Slurm: at least N of the job's nodes have it). Slurm evaluates a level left to right without
//! precedence (`a|b&c` is `(a|b)&c`), and so does [`Constraint::holds`]. Counts cannot be told
//! apart from one node's features: a counted feature is read as required on every node, which
//! asks no less than Slurm does. Names are compared lowercased, as everywhere in ordo.

use std::fmt;

/// Longest constraint text read (Slurm's own limit on a job's features is of this order).
const MAX_LEN: usize = 4096;
/// Deepest nesting of `(...)` and `[...]` read.
const MAX_DEPTH: usize = 32;

/// A parsed constraint (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// As written.
    text: String,
    root: Expr,
}

/// One level: operands joined left to right.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expr {
    first: Operand,
    rest: Vec<(Op, Operand)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    And,
    Or,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Operand {
    /// A feature name, lowercased.
    Feature(String),
    /// `(...)` or `[...]`.
    Group(Box<Expr>),
}

/// Why a constraint could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintError {
    /// The text.
    pub text: String,
    /// What is wrong, with the character position (from 1) where it applies.
    pub why: String,
}

impl fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "constraint `{}`: {}", self.text, self.why)
    }
}

impl std::error::Error for ConstraintError {}

/// Characters of a feature name: letters, digits, `-`, `_`, `.`, `:`, `/` (ordo's names of
/// models and features everywhere).
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.:/".contains(c)
}

struct Parser<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
    at: usize,
}

impl Parser<'_> {
    fn fail(&self, why: String) -> ConstraintError {
        ConstraintError { text: self.text.to_string(), why }
    }

    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.1.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.at).map(|c| c.1)
    }

    fn pos(&self) -> usize {
        self.chars.get(self.at).map_or(self.text.chars().count() + 1, |_| self.at + 1)
    }

    /// `expr := operand (op operand)*`, up to `close` (or the end when `None`).
    fn expr(&mut self, depth: usize, close: Option<char>) -> Result<Expr, ConstraintError> {
        let first = self.operand(depth)?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                None if close.is_none() => break,
                None => return Err(self.fail(format!("`{}` is missing at the end", close.unwrap_or(')')))),
                Some(c) if Some(c) == close => break,
                Some('&' | ',') => Op::And,
                Some('|') => Op::Or,
                Some(c) => {
                    let end = close.map_or("the end".to_string(), |x| format!("`{x}`"));
                    return Err(self.fail(format!(
                        "expected `&`, `|` or {end} after a feature at character {}, found `{c}`",
                        self.pos()
                    )));
                }
            };
            self.at += 1;
            rest.push((op, self.operand(depth)?));
        }
        Ok(Expr { first, rest })
    }

    /// `operand := NAME count? | '(' expr ')' count? | '[' expr ']' count?`.
    fn operand(&mut self, depth: usize) -> Result<Operand, ConstraintError> {
        let op = match self.peek() {
            Some(open @ ('(' | '[')) => {
                if depth >= MAX_DEPTH {
                    return Err(self.fail(format!("nested deeper than {MAX_DEPTH} groups")));
                }
                self.at += 1;
                let close = if open == '(' { ')' } else { ']' };
                let e = self.expr(depth + 1, Some(close))?;
                self.at += 1; // the closing mark, which `expr` stopped at
                Operand::Group(Box::new(e))
            }
            Some(c) if name_char(c) => {
                let from = self.at;
                while self.chars.get(self.at).is_some_and(|c| name_char(c.1)) {
                    self.at += 1;
                }
                Operand::Feature(self.chars[from..self.at].iter().map(|c| c.1.to_ascii_lowercase()).collect())
            }
            Some(c) => {
                return Err(self.fail(format!("expected a feature name at character {}, found `{c}`", self.pos())))
            }
            None => return Err(self.fail("expected a feature name at the end".into())),
        };
        if self.peek() == Some('*') {
            self.at += 1;
            self.skip_space();
            let from = self.at;
            while self.chars.get(self.at).is_some_and(|c| c.1.is_ascii_digit()) {
                self.at += 1;
            }
            if self.at == from {
                return Err(self.fail(format!("a count `*` needs a number at character {}", self.pos())));
            }
        }
        Ok(op)
    }
}

impl Constraint {
    /// Reads a constraint; `Ok(None)` for no constraint (empty, `(null)`, `N/A`).
    pub fn parse(text: &str) -> Result<Option<Constraint>, ConstraintError> {
        let t = text.trim();
        if t.is_empty() || t == "(null)" || t == "N/A" {
            return Ok(None);
        }
        if t.len() > MAX_LEN {
            return Err(ConstraintError {
                text: format!("{}...", t.chars().take(40).collect::<String>()),
                why: format!("longer than {MAX_LEN} characters"),
            });
        }
        let mut p = Parser { text: t, chars: t.char_indices().collect(), at: 0 };
        let root = p.expr(0, None)?;
        Ok(Some(Constraint { text: t.to_string(), root }))
    }

    /// As written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a node with the features `has` says it has (lowercased names) may hold the job.
    pub fn holds(&self, has: &dyn Fn(&str) -> bool) -> bool {
        self.root.holds(has)
    }

    /// The features every node that may hold the job has (lowercased, sorted): all of them for
    /// a constraint of `&` only, what all the alternatives share where there are `|`.
    pub fn required(&self) -> Vec<String> {
        let mut v = self.root.required();
        v.sort();
        v.dedup();
        v
    }

    /// Every feature it names (lowercased, sorted).
    pub fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        self.root.names(&mut v);
        v.sort();
        v.dedup();
        v
    }

    /// True when it has no alternative (`|`): then it asks exactly for [`Constraint::required`].
    pub fn is_conjunction(&self) -> bool {
        self.root.is_conjunction()
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Operand {
    fn holds(&self, has: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Operand::Feature(n) => has(n),
            Operand::Group(e) => e.holds(has),
        }
    }

    fn required(&self) -> Vec<String> {
        match self {
            Operand::Feature(n) => vec![n.clone()],
            Operand::Group(e) => e.required(),
        }
    }
}

impl Expr {
    fn holds(&self, has: &dyn Fn(&str) -> bool) -> bool {
        self.rest.iter().fold(self.first.holds(has), |acc, (op, x)| match op {
            Op::And => acc && x.holds(has),
            Op::Or => acc || x.holds(has),
        })
    }

    /// Left to right, as [`Expr::holds`]: every node satisfying `a & b` has what each requires;
    /// one satisfying `a | b`, what both require (names only, no negation: exact).
    fn required(&self) -> Vec<String> {
        self.rest.iter().fold(self.first.required(), |acc, (op, x)| {
            let r = x.required();
            match op {
                Op::And => acc.into_iter().chain(r).collect(),
                Op::Or => acc.into_iter().filter(|f| r.contains(f)).collect(),
            }
        })
    }

    fn names(&self, out: &mut Vec<String>) {
        for x in std::iter::once(&self.first).chain(self.rest.iter().map(|r| &r.1)) {
            match x {
                Operand::Feature(n) => out.push(n.clone()),
                Operand::Group(e) => e.names(out),
            }
        }
    }

    fn is_conjunction(&self) -> bool {
        self.rest.iter().all(|(op, _)| *op == Op::And)
            && std::iter::once(&self.first).chain(self.rest.iter().map(|r| &r.1)).all(|x| match x {
                Operand::Feature(_) => true,
                Operand::Group(e) => e.is_conjunction(),
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    fn c(t: &str) -> Constraint {
        Constraint::parse(t).unwrap().unwrap()
    }

    fn on(t: &str, feats: &[&str]) -> bool {
        c(t).holds(&|f| feats.contains(&f))
    }

    /// The expressions Slurm 22.05 and 24.11 accepted from `sbatch --constraint` on the dev
    /// cluster (`ib,nvme` is shown back by Slurm as `ib&nvme`).
    #[test]
    fn reads_what_slurm_accepts() {
        assert_eq!(c("ib&nvme").required(), ["ib", "nvme"]);
        assert!(c("ib&nvme").is_conjunction());
        assert_eq!(c("ib,nvme").required(), ["ib", "nvme"]);
        assert_eq!(c("[ib|nvme]").required(), Vec::<String>::new());
        assert!(!c("[ib|nvme]").is_conjunction());
        assert_eq!(c("ib*1").required(), ["ib"]);
        assert_eq!(c("(ib|nvme)&ib").required(), ["ib"]);
        assert_eq!(c("[ib*1&nvme*1]").required(), ["ib", "nvme"]);
        assert_eq!(c("(IB|nvme)&gpu").names(), ["gpu", "ib", "nvme"]);
        assert_eq!(c(" ib & nvme ").text(), "ib & nvme");
        for none in ["", "  ", "(null)", "N/A"] {
            assert_eq!(Constraint::parse(none), Ok(None), "{none}");
        }
    }

    #[test]
    fn evaluates_left_to_right_as_slurm() {
        assert!(on("ib&nvme", &["ib", "nvme"]) && !on("ib&nvme", &["ib"]));
        assert!(on("ib|nvme", &["nvme"]) && !on("ib|nvme", &["gpu"]));
        // No precedence: `a|b&c` is `(a|b)&c`, `a&b|c` is `(a&b)|c`.
        assert!(!on("a|b&c", &["a"]) && on("a|b&c", &["a", "c"]));
        assert!(on("a&b|c", &["c"]) && !on("a&(b|c)", &["c"]));
        assert_eq!(c("a|b&c").required(), ["c"]);
        assert_eq!(c("a&b|c").required(), Vec::<String>::new());
        assert_eq!(c("a&(b|c)").required(), ["a"]);
        assert!(on("[rack1|rack2]*2", &["rack2"]));
        assert!(on("IB", &["ib"]), "names compare lowercased");
    }

    #[test]
    fn bad_text_is_an_error_naming_the_place() {
        for (bad, word) in [
            ("ib&", "at the end"),
            ("&ib", "character 1"),
            ("(ib|nvme", "`)` is missing"),
            ("ib)", "character 3"),
            ("[ib|nvme)", "or `]` after a feature at character 9"),
            ("!ib", "character 1"),
            ("ib*", "needs a number"),
            ("ib nvme", "character 4"),
        ] {
            let e = Constraint::parse(bad).unwrap_err().to_string();
            assert!(e.contains(word) && e.contains(bad.trim()), "{bad}: {e}");
        }
        let deep = format!("{}ib{}", "(".repeat(100), ")".repeat(100));
        assert!(Constraint::parse(&deep).unwrap_err().why.contains("nested deeper"));
        assert!(Constraint::parse(&"a&".repeat(3000)).unwrap_err().why.contains("longer than"));
    }

    proptest::proptest! {
        /// On any text of Slurm's marks and a few names: no panic; a node satisfying a
        /// constraint has every feature it says is required; a node with every named feature
        /// satisfies it; a conjunction is satisfied by its required features alone.
        #[test]
        fn required_features_hold_on_every_satisfying_node(
            text in "[abcd&|,()\\[\\]*2 ]{0,24}",
            node in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "c", "d"]), 0..4),
        ) {
            let Ok(Some(c)) = Constraint::parse(&text) else { return Ok(()) };
            let required = c.required();
            if c.holds(&|f| node.contains(&f)) {
                proptest::prop_assert!(required.iter().all(|f| node.contains(&f.as_str())), "{text} on {node:?}");
            }
            let names = c.names();
            proptest::prop_assert!(c.holds(&|f| names.iter().any(|n| n == f)));
            if c.is_conjunction() {
                proptest::prop_assert!(c.holds(&|f| required.iter().any(|n| n == f)));
            }
        }
    }
}
