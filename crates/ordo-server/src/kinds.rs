//! GPU models, GPU memory and node features as the agent reports them and jobs ask for them
//! (`ordo agent --gpu-model --gpu-mem --feature`, `ordo submit --gpu-model --gpu-mem
//! --feature`): their names, bounds and checks, shared by the agent, the server and the CLI, and
//! how a job's models are matched to the nodes' (a family name such as `a100` matches
//! `a100-sxm4-80gb`). The scheduling itself is ordo-core's (`ordo_core::pools`): the server only
//! turns what it stores into `GpuNeeds` and node kinds.

use ordo_core::pools::PoolKey;
use ordo_core::GpuNeeds;

/// Most features one node may report, or one job ask for.
pub const MAX_FEATURES: usize = 32;
/// Most bytes of one feature's name.
pub const MAX_FEATURE_BYTES: usize = 64;
/// Most GPU models one job may accept.
pub const MAX_JOB_MODELS: usize = 16;
/// Most GPU memory a GPU may report, or a job ask for, MiB (16 TiB).
pub const MAX_GPU_MEM_MIB: u64 = 16 << 20;

/// A GPU model's name as ordo keeps it: lowercased, a leading `nvidia ` or `tesla ` (as NVML
/// names begin) dropped, runs of spaces made one `-`: `NVIDIA H200` is `h200`, `NVIDIA
/// A100-SXM4-80GB` is `a100-sxm4-80gb`, `Tesla T4` is `t4`. An error in words
/// for an empty name, one longer than [`crate::api::MAX_GPU_MODEL_BYTES`], or one with a
/// character other than ASCII letters, digits, spaces and `. _ + -`.
pub fn model_name(raw: &str) -> Result<String, String> {
    let max = crate::api::MAX_GPU_MODEL_BYTES;
    if raw.len() > max {
        return Err(format!("{} bytes, more than the limit of {max}", raw.len()));
    }
    if let Some(c) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || " ._+-".contains(*c))) {
        return Err(format!(
            "`{}` has the character {c:?}; a GPU model is ASCII letters, digits, spaces and . _ + -",
            raw.escape_debug()
        ));
    }
    let lower = raw.trim().to_ascii_lowercase();
    let mut rest = lower.as_str();
    for prefix in ["nvidia ", "tesla "] {
        if let Some(r) = rest.strip_prefix(prefix) {
            rest = r.trim_start();
        }
    }
    let name = rest.split_whitespace().collect::<Vec<_>>().join("-");
    if name.is_empty() {
        return Err("an empty GPU model name".to_string());
    }
    Ok(name)
}

/// A list of node features as ordo keeps it: each lowercased, sorted, without repeats. An
/// error in words for more than [`MAX_FEATURES`], an empty one, one longer than
/// [`MAX_FEATURE_BYTES`], or one with a character other than ASCII letters, digits and
/// `. _ - : = /`.
pub fn feature_list(raw: &[String]) -> Result<Vec<String>, String> {
    if raw.len() > MAX_FEATURES {
        return Err(format!("{} features, more than the limit of {MAX_FEATURES}", raw.len()));
    }
    let mut out = Vec::with_capacity(raw.len());
    for f in raw {
        if f.is_empty() {
            return Err("an empty feature name".to_string());
        }
        if f.len() > MAX_FEATURE_BYTES {
            return Err(format!("a feature of {} bytes, more than the limit of {MAX_FEATURE_BYTES}", f.len()));
        }
        if let Some(c) = f.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-:=/".contains(*c))) {
            return Err(format!(
                "`{}` has the character {c:?}; a feature is ASCII letters, digits and . _ - : = /",
                f.escape_debug()
            ));
        }
        out.push(f.to_ascii_lowercase());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A job's list of acceptable GPU models as ordo keeps it (each [`model_name`], in the order
/// given, without repeats); an error in words for more than [`MAX_JOB_MODELS`].
pub fn model_list(raw: &[String]) -> Result<Vec<String>, String> {
    if raw.len() > MAX_JOB_MODELS {
        return Err(format!("{} GPU models, more than the limit of {MAX_JOB_MODELS}", raw.len()));
    }
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for m in raw {
        let m = model_name(m)?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// GPU memory in MiB: an error in words for 0 or more than [`MAX_GPU_MEM_MIB`].
pub fn gpu_mem(mib: u64) -> Result<u64, String> {
    if mib == 0 || mib > MAX_GPU_MEM_MIB {
        return Err(format!("{mib} MiB is outside 1..={MAX_GPU_MEM_MIB} (16 TiB)"));
    }
    Ok(mib)
}

/// Whether a job that asks for model `asked` accepts a GPU of model `node`: the same name, or
/// the node's name begins with it and a `-` (`a100` accepts `a100-sxm4-80gb`, not `a1000`).
pub fn model_matches(asked: &str, node: &str) -> bool {
    node == asked || node.strip_prefix(asked).is_some_and(|rest| rest.starts_with('-'))
}

/// A job's needs with each model it asks for widened to the models of `kinds` it matches
/// ([`model_matches`]), so that ordo-core, which compares names exactly, sees every one. A
/// model no kind matches stays as it was (the core's refusal then names it).
pub fn widen(needs: &GpuNeeds, kinds: &[PoolKey]) -> GpuNeeds {
    if needs.models.is_empty() {
        return needs.clone();
    }
    let mut models: Vec<String> = Vec::with_capacity(needs.models.len());
    for asked in &needs.models {
        let mut hit = false;
        for m in kinds.iter().filter_map(|k| k.model.as_deref()) {
            if model_matches(asked, m) {
                hit = true;
                if !models.iter().any(|x| x == m) {
                    models.push(m.to_string());
                }
            }
        }
        if !hit && !models.contains(asked) {
            models.push(asked.clone());
        }
    }
    GpuNeeds { models, ..needs.clone() }
}

/// Whether a node whose GPUs are of `model` with `mem_mib` each, with `features`, has what a
/// job with `needs` asks (the same rule as ordo-core's pools after [`widen`]).
pub fn accepts(needs: &GpuNeeds, model: Option<&str>, mem_mib: Option<u64>, features: &[String]) -> bool {
    (needs.models.is_empty() || model.is_some_and(|m| needs.models.iter().any(|a| model_matches(a, m))))
        && (needs.min_mem_mib == 0 || mem_mib.is_some_and(|m| m >= needs.min_mem_mib))
        && needs.features.iter().all(|f| features.contains(f))
}

/// An error of these checks as the API says it: 400 naming the field.
pub fn bad_field(field: &str) -> impl Fn(String) -> crate::state::ApiError + '_ {
    move |why| crate::state::ApiError::BadRequest(format!("field `{field}`: {why}"))
}

/// What a node's GPUs are, for people: `a100, 80G, ib,nvme`; `fake a100`; `fake`.
pub fn node_kind_text(fake: bool, model: Option<&str>, mem_mib: Option<u64>, features: &[String]) -> String {
    let mut parts = Vec::new();
    match (fake, model) {
        (true, Some(m)) => parts.push(format!("fake {m}")),
        (true, None) => parts.push("fake".to_string()),
        (false, Some(m)) => parts.push(m.to_string()),
        (false, None) => parts.push("gpu".to_string()),
    }
    if let Some(m) = mem_mib {
        parts.push(crate::state::fmt_mib(m));
    }
    if !features.is_empty() {
        parts.push(features.join(","));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_are_normalised_and_bounded() {
        assert_eq!(model_name("NVIDIA H200").unwrap(), "h200");
        assert_eq!(model_name("NVIDIA A100-SXM4-80GB").unwrap(), "a100-sxm4-80gb");
        assert_eq!(model_name("Tesla V100-SXM2-16GB").unwrap(), "v100-sxm2-16gb");
        assert_eq!(model_name("NVIDIA H100 80GB HBM3").unwrap(), "h100-80gb-hbm3");
        assert_eq!(model_name("NVIDIA GeForce RTX 4090").unwrap(), "geforce-rtx-4090");
        assert_eq!(model_name("  A100 ").unwrap(), "a100");
        assert!(model_name("").unwrap_err().contains("empty"));
        assert!(model_name("   ").unwrap_err().contains("empty"));
        assert_eq!(model_name("NVIDIA  ").unwrap(), "nvidia");
        assert!(model_name("a100\n").unwrap_err().contains("character"));
        assert!(model_name("a,b").unwrap_err().contains("character ','"));
        let long = "a".repeat(1_000_000);
        let e = model_name(&long).unwrap_err();
        assert!(e.contains("1000000 bytes, more than the limit of 128"), "{e}");
    }

    #[test]
    fn features_are_bounded_lowercased_and_sorted() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(feature_list(&v(&["NVMe", "ib", "ib"])).unwrap(), v(&["ib", "nvme"]));
        assert_eq!(feature_list(&v(&["zone=a", "rack/3"])).unwrap(), v(&["rack/3", "zone=a"]));
        let many: Vec<String> = (0..10_000).map(|i| format!("f{i}")).collect();
        let e = feature_list(&many).unwrap_err();
        assert!(e.contains("10000 features, more than the limit of 32"), "{e}");
        assert!(feature_list(&v(&[""])).unwrap_err().contains("empty"));
        assert!(feature_list(&v(&["a b"])).unwrap_err().contains("character ' '"));
        assert!(feature_list(&["x".repeat(65)]).unwrap_err().contains("65 bytes"));
    }

    #[test]
    fn families_match_on_a_dash() {
        assert!(model_matches("a100", "a100"));
        assert!(model_matches("a100", "a100-sxm4-80gb"));
        assert!(!model_matches("a100", "a1000"));
        assert!(!model_matches("a10", "a100"));
        assert!(!model_matches("a100-sxm4-80gb", "a100"));
        let key = |m: &str| PoolKey { model: Some(m.into()), mem_mib: None, features: vec![] };
        let kinds = [key("a100-sxm4-80gb"), key("a100-pcie-40gb"), key("v100"), key("a10")];
        let n = GpuNeeds { models: vec!["a100".into(), "t4".into()], ..GpuNeeds::default() };
        assert_eq!(widen(&n, &kinds).models, vec!["a100-sxm4-80gb", "a100-pcie-40gb", "t4"]);
        let n = GpuNeeds { models: vec!["a10".into()], ..GpuNeeds::default() };
        assert_eq!(widen(&n, &kinds).models, vec!["a10"]);
    }
}
