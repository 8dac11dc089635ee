//! `ordo agent --config FILE`: the agent's settings in a TOML file (so that a service unit's
//! command line is `ordo agent --config /etc/ordo/agent.toml`), with command-line flags laid
//! over it. Every field is optional and named as its flag (`token_file` for `--token-file`;
//! `cgroup = false` for `--no-cgroup`); an unknown field, or a value its flag would refuse, is
//! an error naming the file, the line and the field.

use crate::config::{parse_size_mib, ConfigError};
use ordo_core::policy::parse_duration;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The file as written. Values are kept as text (the flags' own parsers read them once merged);
/// [`AgentFile::read`] checks each with that parser first, so that a bad one names the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    pub server: Option<String>,
    pub token_file: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub run_as: Option<String>,
    pub user_map: Option<PathBuf>,
    pub pass_env: Option<Vec<String>>,
    /// `"auto"` or a number of fake GPUs (a TOML string or integer).
    gpus: Option<Spanned<toml::Value>>,
    pub name: Option<String>,
    pub work_dir: Option<PathBuf>,
    pub grace: Option<Spanned<String>>,
    pub cpus: Option<u32>,
    pub mem: Option<Spanned<String>>,
    pub gpu_activity: Option<Spanned<String>>,
    pub activity_every: Option<Spanned<String>>,
    pub addr: Option<String>,
    pub master_ports: Option<Spanned<String>>,
    /// `--gpu-model`.
    pub gpu_model: Option<Spanned<String>>,
    /// `--gpu-mem`.
    pub gpu_mem: Option<Spanned<String>>,
    /// `--feature`: a list of names.
    features: Option<Spanned<Vec<String>>>,
    /// `--topology`: `block=nvl0,switch=leaf3`.
    pub topology: Option<Spanned<String>>,
    /// `false`: `--no-cgroup`.
    pub cgroup: Option<bool>,
    pub max_output: Option<Spanned<String>>,
    pub min_free: Option<Spanned<String>>,
}

/// The 1-based line of a byte offset.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

impl AgentFile {
    /// Reads and checks a file.
    pub fn read(path: &Path) -> Result<AgentFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        AgentFile::parse(&text, path)
    }

    /// Checks the text of a file (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<AgentFile, ConfigError> {
        let f: AgentFile =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        let bad = |field: &'static str, span: std::ops::Range<usize>, why: String| ConfigError::Field {
            where_: format!("{}: line {}", path.display(), line_of(text, span.start)),
            field,
            why,
        };
        if let Some(g) = &f.gpus {
            let s = value_text(g.get_ref());
            s.parse::<crate::agent::GpuSpec>().map_err(|e| bad("gpus", g.span(), e))?;
        }
        for (field, v) in [("grace", &f.grace), ("activity_every", &f.activity_every)] {
            if let Some(v) = v {
                parse_duration(v.get_ref()).filter(|&t| t > 0).ok_or_else(|| {
                    bad(field, v.span(), format!("`{}`: expected a duration such as 10s", v.get_ref()))
                })?;
            }
        }
        for (field, v) in
            [("mem", &f.mem), ("max_output", &f.max_output), ("min_free", &f.min_free), ("gpu_mem", &f.gpu_mem)]
        {
            if let Some(v) = v {
                parse_size_mib(v.get_ref()).ok_or_else(|| {
                    bad(field, v.span(), format!("`{}`: expected a size such as 16G, 512M", v.get_ref()))
                })?;
            }
        }
        if let Some(v) = &f.gpu_activity {
            v.get_ref().parse::<crate::activity::ActivitySource>().map_err(|e| bad("gpu_activity", v.span(), e))?;
        }
        // Names are checked as the server checks them.
        if let Some(m) = &f.gpu_model {
            crate::kinds::model_name(m.get_ref()).map_err(|e| bad("gpu_model", m.span(), e))?;
        }
        if let Some(v) = &f.features {
            crate::kinds::feature_list(v.get_ref()).map_err(|e| bad("features", v.span(), e))?;
        }
        if let Some(v) = &f.topology {
            crate::topo::parse_place(v.get_ref()).map_err(|e| bad("topology", v.span(), e))?;
        }
        if let Some(v) = &f.master_ports {
            v.get_ref().parse::<crate::agent::PortRange>().map_err(|e| bad("master_ports", v.span(), e))?;
        }
        Ok(f)
    }

    /// `features` as `--feature` takes it.
    pub fn features(&self) -> Option<Vec<String>> {
        self.features.as_ref().map(|v| v.get_ref().clone())
    }

    /// `gpus` as its flag takes it.
    pub fn gpus(&self) -> Option<String> {
        self.gpus.as_ref().map(|g| value_text(g.get_ref()))
    }
}

/// A text field's value, as its flag takes it.
pub fn text(v: &Option<Spanned<String>>) -> Option<String> {
    v.as_ref().map(|v| v.get_ref().clone())
}

/// A TOML string as it is, an integer in digits (`gpus = 4`), anything else as its type's name
/// (which the flag's parser then refuses, quoting it).
fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        other => format!("a {}", other.type_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<AgentFile, ConfigError> {
        AgentFile::parse(text, Path::new("agent.toml"))
    }

    #[test]
    fn every_field_reads() {
        let f = read(
            "server = \"https://ordo.lab:7700\"\ntoken_file = \"/etc/ordo/agent.token\"\nca = \"/etc/ordo/ca.pem\"\n\
             user_map = \"/etc/ordo/users.toml\"\npass_env = [\"PATH\"]\ngpus = 4\nname = \"gpu1\"\n\
             work_dir = \"/var/lib/ordo-agent\"\ngrace = \"10s\"\ncpus = 8\nmem = \"64G\"\ngpu_activity = \"off\"\n\
             activity_every = \"5s\"\naddr = \"gpu1.lab\"\nmaster_ports = \"29500-30499\"\ncgroup = true\n\
             max_output = \"1G\"\nmin_free = \"16M\"\ngpu_model = \"a100\"\ngpu_mem = \"80G\"\nfeatures = [\"ib\", \"nvme\"]\n",
        )
        .expect("valid");
        assert_eq!(text(&f.gpu_model).as_deref(), Some("a100"));
        assert_eq!(text(&f.gpu_mem).as_deref(), Some("80G"));
        assert_eq!(f.features(), Some(vec!["ib".to_string(), "nvme".to_string()]));
        assert_eq!(f.gpus().as_deref(), Some("4"));
        assert_eq!(text(&f.grace).as_deref(), Some("10s"));
        assert_eq!(f.cgroup, Some(true));
        assert_eq!(read("gpus = \"auto\"\n").expect("auto").gpus().as_deref(), Some("auto"));
    }

    #[test]
    fn bad_values_name_file_line_and_field() {
        let e = read("server = \"http://x\"\n\ngrace = \"soon\"\n").expect_err("bad grace").to_string();
        assert!(e.contains("agent.toml: line 3: field `grace`: `soon`"), "{e}");
        let e = read("gpus = \"many\"\n").expect_err("bad gpus").to_string();
        assert!(e.contains("line 1: field `gpus`"), "{e}");
        let e = read("master_ports = \"80-90\"\n").expect_err("bad ports").to_string();
        assert!(e.contains("field `master_ports`"), "{e}");
        let e = read("token = \"ordo_1_x\"\n").expect_err("unknown field").to_string();
        assert!(e.contains("unknown field `token`") && e.contains("line 1"), "{e}");
        let e = read("gpus = 2\n\ngpu_model = \"a100\\n\"\n").expect_err("bad model").to_string();
        assert!(e.contains("line 3: field `gpu_model`") && e.contains("character"), "{e}");
        let e = read("gpu_mem = \"lots\"\n").expect_err("bad size").to_string();
        assert!(e.contains("line 1: field `gpu_mem`: `lots`"), "{e}");
        let many: Vec<String> = (0..40).map(|i| format!("\"f{i}\"")).collect();
        let e = read(&format!("features = [{}]\n", many.join(", "))).expect_err("too many").to_string();
        assert!(e.contains("line 1: field `features`: 40 features, more than the limit of 32"), "{e}");
        let e = read("cpus = \"eight\"\n").expect_err("wrong type").to_string();
        assert!(e.contains("cpus") && e.contains("line 1"), "{e}");
    }
}
