//! Speed (throughput) matrix files: `--speeds FILE`, a TOML table per job class giving each
//! GPU model's relative speed (docs/TRACES.md, "GPU models and constraints").
//!
//! ```toml
//! [speeds."*"]        # every class without a row of its own
//! k80 = 1.0
//! v100 = 3.3
//! [speeds.resnet50]
//! k80 = 1.0
//! v100 = 5.8
//! ```

use ordo_core::Speeds;
use std::collections::BTreeMap;
use std::path::Path;

/// Why a speed file could not be used: file, line and what was expected.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {why}")]
pub struct SpeedFileError {
    /// Path of the file.
    pub file: String,
    /// 1-based line (0: the whole file).
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    speeds: BTreeMap<String, BTreeMap<String, toml::Spanned<toml::Value>>>,
}

/// Reads a speed file.
pub fn load_speeds(path: &Path) -> Result<Speeds, SpeedFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SpeedFileError {
        file: file.clone(),
        line: 0,
        why: format!("cannot read: {e}"),
    })?;
    parse_speeds(&text, &file)
}

/// Parses the text of a speed file (`file` names it in errors).
pub fn parse_speeds(text: &str, file: &str) -> Result<Speeds, SpeedFileError> {
    let line_of = |pos: usize| text[..pos.min(text.len())].matches('\n').count() + 1;
    let parsed: File = toml::from_str(text).map_err(|e| SpeedFileError {
        file: file.to_string(),
        line: e.span().map_or(0, |s| line_of(s.start)),
        why: format!(
            "{} (expected tables `[speeds.CLASS]` of `MODEL = SPEED`, `[speeds.\"*\"]` for every other class)",
            e.message().trim()
        ),
    })?;
    let mut s = Speeds::default();
    for (class, row) in &parsed.speeds {
        for (model, v) in row {
            let line = line_of(v.span().start);
            let bad = |why: String| SpeedFileError { file: file.to_string(), line, why };
            let x = match v.get_ref() {
                toml::Value::Float(f) => *f,
                toml::Value::Integer(i) => *i as f64,
                other => {
                    return Err(bad(format!(
                        "speeds.{class}.{model}: expected a number above 0, found {}",
                        other.type_str()
                    )))
                }
            };
            s.set(class, model, x).map_err(|e| bad(format!("speeds.{class}.{model}: {}", e.why)))?;
        }
    }
    if s.is_empty() {
        return Err(SpeedFileError {
            file: file.to_string(),
            line: 0,
            why: "no speeds: expected `[speeds.CLASS]` tables".into(),
        });
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rows_and_names_bad_lines() {
        let s = parse_speeds("[speeds.\"*\"]\nk80 = 1\nv100 = 3.5\n[speeds.ResNet]\nk80 = 1.0\nv100 = 6\n", "f.toml")
            .unwrap();
        assert_eq!(s.of(Some("resnet"), Some("v100")), 6.0);
        assert_eq!(s.of(Some("x"), Some("v100")), 3.5);
        let e = parse_speeds("[speeds.a]\nk80 = 1\nv100 = 0\n", "f.toml").unwrap_err();
        assert_eq!((e.line, e.file.as_str()), (3, "f.toml"));
        assert!(e.why.contains("above 0"), "{e}");
        let e = parse_speeds("[speeds.a]\nk80 = \"fast\"\n", "f.toml").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("found string"), "{e}");
        let e = parse_speeds("[speed.a]\nk80 = 1\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("expected tables"), "{e}");
        assert!(parse_speeds("", "f.toml").is_err());
    }
}
