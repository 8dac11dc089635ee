//! Quota files for the simulator (`--quotas FILE`): the `[quotas]` table of a TOML file, the
//! same table the server's configuration holds (a server's config file works as it is).

use crate::error::QuotaError;
use ordo_core::QuotaConfig;
use serde::Deserialize;
use std::path::Path;

/// A file with a `[quotas]` table; other top-level keys (a server's settings) are ignored.
#[derive(Debug, Deserialize)]
struct QuotaFile {
    quotas: Option<QuotaConfig>,
}

/// Reads the `[quotas]` table of `path` (docs/SERVER.md, "Quotas and shares"). Unknown keys
/// inside it and bad values are errors naming the file, the line and the field.
pub fn load_quotas(path: &Path) -> Result<QuotaConfig, QuotaError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| QuotaError::Io { file: file.clone(), err })?;
    parse_quotas(&text, &file)
}

/// [`load_quotas`] on text already read; `file` names it in errors.
pub fn parse_quotas(text: &str, file: &str) -> Result<QuotaConfig, QuotaError> {
    let parsed: QuotaFile = toml::from_str(text)
        .map_err(|e| QuotaError::Toml { file: file.to_string(), why: e.to_string().trim().to_string() })?;
    let q = parsed.quotas.ok_or_else(|| QuotaError::Invalid {
        file: file.to_string(),
        why: "no [quotas] table (e.g. `[quotas.default_user]` with `max_running_gpus = \"1/3\"`)".into(),
    })?;
    q.check().map_err(|why| QuotaError::Invalid { file: file.to_string(), why })?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_quotas_table_and_names_bad_fields() {
        let q = parse_quotas(
            "policy = \"fifo\"\n[quotas.default_user]\nmax_running_gpus = \"1/3\"\n[quotas.users.ann]\nshare = 2\n",
            "q.toml",
        )
        .unwrap();
        assert_eq!(q.default_user.max_running_gpus.map(|l| l.on(24)), Some(8));
        assert_eq!(q.users["ann"].share, Some(2.0));
        let e = parse_quotas("[quotas.users.ann]\nmax_gpus = 3\n", "q.toml").unwrap_err().to_string();
        assert!(e.starts_with("q.toml: TOML parse error at line 2"), "{e}");
        assert!(e.contains("unknown field `max_gpus`"), "{e}");
        let e = parse_quotas("[quotas.default_user]\nmax_running_gpus = \"lots\"\n", "q.toml").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("not a GPU count"), "{e}");
        let e = parse_quotas("policy = \"fifo\"\n", "q.toml").unwrap_err().to_string();
        assert!(e.contains("no [quotas] table"), "{e}");
    }
}
