//! How fast a job runs on each GPU model: the throughput matrix (job class x GPU model ->
//! relative speed, as Gavel's), and the rule that picks among the models a job accepts.
//! A job's run time on a model is its base run time divided by the speed there; a trace's run
//! time measured on model `m` is `speed(m)` base units long. Without a matrix every speed is 1.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The row for classes the matrix does not list.
pub const DEFAULT_ROW: &str = "*";

/// Relative speeds by job class and GPU model (names lowercased). Rows are classes (`*`: every
/// class not listed); a row names every GPU model of the cluster (checked by
/// [`Speeds::check_models`]). Empty: every speed is 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Speeds {
    rows: BTreeMap<String, BTreeMap<String, f64>>,
}

/// A bad entry in a speed matrix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("speed of class `{class}` on `{model}`: {why}")]
pub struct SpeedError {
    /// The class (row).
    pub class: String,
    /// The GPU model (column).
    pub model: String,
    /// What is wrong.
    pub why: String,
}

impl Speeds {
    /// Sets one entry; the speed must be finite and above 0.
    pub fn set(&mut self, class: &str, model: &str, speed: f64) -> Result<(), SpeedError> {
        if !(speed.is_finite() && speed > 0.0) {
            return Err(SpeedError {
                class: class.to_string(),
                model: model.to_string(),
                why: format!("expected a number above 0, found {speed}"),
            });
        }
        self.rows.entry(class.to_ascii_lowercase()).or_default().insert(model.to_ascii_lowercase(), speed);
        Ok(())
    }

    /// True when it holds no entry (every speed 1).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows' class names, the default row first when present.
    pub fn classes(&self) -> Vec<String> {
        let mut v: Vec<String> = self.rows.keys().filter(|k| *k != DEFAULT_ROW).cloned().collect();
        v.insert(0, DEFAULT_ROW.to_string());
        v
    }

    /// The largest speed in the matrix (1 when empty).
    pub fn max(&self) -> f64 {
        self.rows.values().flat_map(|r| r.values().copied()).fold(1.0, f64::max)
    }

    /// The row index ([`Speeds::classes`]) a job of `class` reads: its own row, else the default.
    pub fn row_of(&self, class: Option<&str>) -> u16 {
        let Some(c) = class.map(str::to_ascii_lowercase) else { return 0 };
        self.rows.keys().filter(|k| *k != DEFAULT_ROW).position(|k| *k == c).map_or(0, |i| i as u16 + 1)
    }

    /// Speed of row `row` on `model` (1 where the matrix says nothing: no matrix, no model, or
    /// a class without a row and no default row).
    pub fn speed(&self, row: u16, model: Option<&str>) -> f64 {
        let Some(model) = model else { return 1.0 };
        let name = if row == 0 {
            DEFAULT_ROW.to_string()
        } else {
            match self.rows.keys().filter(|k| *k != DEFAULT_ROW).nth(row as usize - 1) {
                Some(k) => k.clone(),
                None => return 1.0,
            }
        };
        self.rows.get(&name).and_then(|r| r.get(&model.to_ascii_lowercase())).copied().unwrap_or(1.0)
    }

    /// Whether row `row` (or, for a class without a row, the default row) gives `model` a speed.
    pub fn has(&self, row: u16, model: &str) -> bool {
        let name = if row == 0 {
            Some(DEFAULT_ROW.to_string())
        } else {
            self.rows.keys().filter(|k| *k != DEFAULT_ROW).nth(row as usize - 1).cloned()
        };
        name.and_then(|n| self.rows.get(&n)).is_some_and(|r| r.contains_key(&model.to_ascii_lowercase()))
    }

    /// Speed of a job of `class` on `model`.
    pub fn of(&self, class: Option<&str>, model: Option<&str>) -> f64 {
        self.speed(self.row_of(class), model)
    }

    /// Checks that every row names every model of the cluster (`models`) and no other: a
    /// missing entry would silently read as 1.
    pub fn check_models(&self, models: &[String]) -> Result<(), SpeedError> {
        for (class, row) in &self.rows {
            for m in models {
                if !row.contains_key(m) {
                    return Err(SpeedError {
                        class: class.clone(),
                        model: m.clone(),
                        why: "missing: every row must give a speed for every GPU model of the cluster".into(),
                    });
                }
            }
            if let Some(extra) = row.keys().find(|k| !models.contains(k)) {
                return Err(SpeedError {
                    class: class.clone(),
                    model: extra.clone(),
                    why: format!("no node has this GPU model (the cluster has {})", models.join(", ")),
                });
            }
        }
        Ok(())
    }
}

/// Which of the GPU models a job accepts it goes on, when several have room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelPick {
    /// The model where the job runs fastest (by its class's row), ties in cluster order.
    #[default]
    Fastest,
    /// The slowest model that serves it: keeps fast GPUs for the jobs that gain most or need them.
    Slowest,
    /// Cluster order, whatever the speeds (heterogeneity-agnostic: a baseline).
    First,
    /// Comparative advantage: the model where the job's speed, over the mean speed of every
    /// class (row) there, is highest; so jobs that gain most from a fast model get it, and the
    /// others leave it to them (Gavel's insight, placement only).
    Relative,
}

impl fmt::Display for ModelPick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelPick::Fastest => "fastest",
            ModelPick::Slowest => "slowest",
            ModelPick::First => "first",
            ModelPick::Relative => "relative",
        })
    }
}

impl FromStr for ModelPick {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fastest" => Ok(ModelPick::Fastest),
            "slowest" => Ok(ModelPick::Slowest),
            "first" => Ok(ModelPick::First),
            "relative" => Ok(ModelPick::Relative),
            _ => Err(format!("unknown model pick `{s}`: expected `fastest`, `slowest`, `first` or `relative`")),
        }
    }
}

/// Memory per GPU of common models, MiB, for names that say it unambiguously (Alibaba's
/// `V100M32`, `a100-80g`, `t4`); `None` when the name does not tell (plain `a100`).
pub fn known_memory_mib(model: &str) -> Option<u64> {
    let m = model.to_ascii_lowercase();
    // An explicit size in the name: `...m16`, `...m32`, `...-80g`, `...80gb`.
    let digits_before = |suffix: &str| -> Option<u64> {
        let stem = m.strip_suffix(suffix)?;
        let d: String = stem.chars().rev().take_while(|c| c.is_ascii_digit()).collect();
        let d: String = d.chars().rev().collect();
        d.parse::<u64>().ok().filter(|&g| (4..=512).contains(&g)).map(|g| g * 1024)
    };
    if let Some(g) = digits_before("gb").or_else(|| digits_before("g")) {
        return Some(g);
    }
    if let Some(rest) = m.strip_prefix("v100m") {
        return rest.parse::<u64>().ok().filter(|&g| g == 16 || g == 32).map(|g| g * 1024);
    }
    let table: &[(&str, u64)] = &[
        ("k80", 12),
        ("p100", 16),
        ("v100", 32),
        ("t4", 16),
        ("a10", 24),
        ("a30", 24),
        ("l4", 24),
        ("l40", 48),
        ("l40s", 48),
        ("h100", 80),
        ("h200", 141),
        ("b200", 180),
        ("a800", 80),
        ("h800", 80),
    ];
    table.iter().find(|(n, _)| *n == m).map(|&(_, g)| g * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_default_and_checks() {
        let mut s = Speeds::default();
        assert_eq!(s.of(Some("x"), Some("v100")), 1.0);
        s.set("*", "k80", 1.0).unwrap();
        s.set("*", "V100", 3.0).unwrap();
        s.set("resnet", "k80", 1.0).unwrap();
        s.set("resnet", "v100", 6.0).unwrap();
        assert_eq!(s.of(None, Some("v100")), 3.0);
        assert_eq!(s.of(Some("ResNet"), Some("v100")), 6.0);
        assert_eq!(s.of(Some("other"), Some("v100")), 3.0);
        assert_eq!(s.of(Some("resnet"), None), 1.0);
        assert_eq!(s.classes(), vec!["*".to_string(), "resnet".to_string()]);
        assert!(s.check_models(&["k80".into(), "v100".into()]).is_ok());
        let e = s.check_models(&["k80".into(), "v100".into(), "a100".into()]).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        assert!(s.check_models(&["k80".into()]).unwrap_err().to_string().contains("no node has"));
        assert!(s.set("*", "a100", 0.0).is_err());
        assert!(s.set("*", "a100", f64::NAN).is_err());
        assert!(s.set("*", "a100", -1.0).is_err());
    }

    #[test]
    fn memory_from_names() {
        assert_eq!(known_memory_mib("V100M16"), Some(16 * 1024));
        assert_eq!(known_memory_mib("v100m32"), Some(32 * 1024));
        assert_eq!(known_memory_mib("a100-80g"), Some(80 * 1024));
        assert_eq!(known_memory_mib("A100-SXM4-40GB"), Some(40 * 1024));
        assert_eq!(known_memory_mib("t4"), Some(16 * 1024));
        assert_eq!(known_memory_mib("a100"), None);
        assert_eq!(known_memory_mib("g2"), None);
    }

    #[test]
    fn picks_parse() {
        for p in [ModelPick::Fastest, ModelPick::Slowest, ModelPick::First, ModelPick::Relative] {
            assert_eq!(p.to_string().parse::<ModelPick>().unwrap(), p);
        }
        assert!("best".parse::<ModelPick>().is_err());
    }
}
