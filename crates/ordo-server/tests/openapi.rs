//! docs/openapi.yaml and the server's router must list the same routes: every (method, path)
//! in the router is documented, and every documented one exists.

use std::collections::BTreeSet;

fn documented() -> BTreeSet<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(path).expect("docs/openapi.yaml is readable");
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_paths = line.trim_end() == "paths:";
            current = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(p) = line.strip_prefix("  /") {
            current = Some(format!("/{}", p.trim_end().trim_end_matches(':')));
        } else if let (Some(rest), Some(p)) = (line.strip_prefix("    "), &current) {
            let m = rest.trim_end().trim_end_matches(':');
            if ["get", "post", "put", "delete", "patch"].contains(&m) && !rest.starts_with(' ') {
                out.insert((m.to_string(), p.clone()));
            }
        }
    }
    out
}

#[test]
fn router_and_openapi_list_the_same_routes() {
    let code: BTreeSet<(String, String)> =
        ordo_server::http::routes().into_iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    let doc = documented();
    assert!(code.len() >= 10, "router has {} routes", code.len());
    let missing: Vec<_> = code.difference(&doc).collect();
    let extra: Vec<_> = doc.difference(&code).collect();
    assert!(missing.is_empty(), "routes in the router but not in docs/openapi.yaml: {missing:?}");
    assert!(extra.is_empty(), "routes in docs/openapi.yaml but not in the router: {extra:?}");
}
