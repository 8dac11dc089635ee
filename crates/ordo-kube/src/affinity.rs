//! Which nodes a pod may go to, decided as kube-scheduler's filters decide it: the pod's
//! `nodeSelector`, its required node affinity
//! (`affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`) and the node's
//! `NoSchedule`/`NoExecute` taints against the pod's tolerations. Pure: no IO; when a node does
//! not qualify it says which term failed, in words.
//!
//! The semantics follow the Kubernetes documentation and the code it describes:
//! - nodeSelector and node affinity: <https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/>
//!   ("the node must have each of the indicated key-value pairs as labels"; terms of
//!   `nodeSelectorTerms` are ORed, the `matchExpressions` of one term ANDed; both nodeSelector
//!   and node affinity must hold; the operator table: `Gt`/`Lt` parse the values as integers
//!   and "will not work with non-integer values"), as implemented by apimachinery's
//!   `labels.Requirement.Matches` (`NotIn` holds where the label is absent; `Gt`/`Lt` need the
//!   label and parse both sides with `strconv.ParseInt(s, 10, 64)`) and component-helpers'
//!   `nodeaffinity.LazyErrorNodeSelector` (an empty term matches no node, a term that cannot
//!   be parsed matches no node; `matchFields` knows only `metadata.name`, with `In`/`NotIn` of
//!   one value).
//! - taints and tolerations: <https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/>
//!   ("an empty key with operator Exists matches all keys, values and effects"; "an empty
//!   effect matches all effects"; `Equal` compares the value, the default operator), as
//!   `v1.Toleration.ToleratesTaint` implements it; only `NoSchedule` and `NoExecute` taints
//!   keep a pod off a node (`PreferNoSchedule` is a preference).

use std::collections::BTreeMap;
use std::fmt;

/// A taint that keeps pods off a node (`NoSchedule` or `NoExecute`; others are not kept).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// `NoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    /// Whether a taint with this effect keeps untolerating pods off its node.
    pub fn effect_filters(effect: &str) -> bool {
        effect == "NoSchedule" || effect == "NoExecute"
    }
}

impl fmt::Display for Taint {
    /// As `kubectl taint` writes it: `key=value:Effect`, or `key:Effect` without a value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// A pod's toleration, as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Toleration {
    /// Key (empty: every key, with `Exists`).
    pub key: String,
    /// `Exists`, `Equal`, or empty (which means `Equal`).
    pub operator: String,
    /// Value, for `Equal`.
    pub value: String,
    /// Effect (empty: every effect).
    pub effect: String,
}

impl Toleration {
    /// Whether it tolerates `t`, as `v1.Toleration.ToleratesTaint` decides.
    pub fn tolerates(&self, t: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != t.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != t.key {
            return false;
        }
        match self.operator.as_str() {
            "" | "Equal" => self.value == t.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// One requirement of a node selector term: `key operator values`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// A label key (`matchExpressions`) or a field (`matchFields`: `metadata.name`).
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, as written.
    pub operator: String,
    /// Values.
    pub values: Vec<String>,
}

impl fmt::Display for Requirement {
    /// `gpu In [A100, H100]`, `dedicated DoesNotExist`, `gpu.memory Gt 40000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator.as_str() {
            "Exists" | "DoesNotExist" if self.values.is_empty() => write!(f, "{} {}", self.key, self.operator),
            "Gt" | "Lt" if self.values.len() == 1 => write!(f, "{} {} {}", self.key, self.operator, self.values[0]),
            _ => write!(f, "{} {} [{}]", self.key, self.operator, self.values.join(", ")),
        }
    }
}

/// The integer of a `Gt`/`Lt` operand, as Go's `strconv.ParseInt(s, 10, 64)` reads it: an
/// optional sign and decimal digits, within 64 bits.
fn parse_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

impl Requirement {
    /// Why it cannot be evaluated (kube's parse error), for a label requirement.
    fn label_problem(&self) -> Option<String> {
        match self.operator.as_str() {
            "In" | "NotIn" if self.values.is_empty() => Some(format!("{} needs at least one value", self.operator)),
            "Exists" | "DoesNotExist" if !self.values.is_empty() => Some(format!("{} takes no values", self.operator)),
            "Gt" | "Lt" if self.values.len() != 1 || parse_int(&self.values[0]).is_none() => {
                Some(format!("{} needs exactly one integer value, found [{}]", self.operator, self.values.join(", ")))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => None,
            op => Some(format!("`{op}` is not an operator (In, NotIn, Exists, DoesNotExist, Gt, Lt)")),
        }
    }

    /// Why it cannot be evaluated, for a field requirement (`matchFields`).
    fn field_problem(&self) -> Option<String> {
        match self.operator.as_str() {
            "In" | "NotIn" if self.values.len() == 1 => None,
            "In" | "NotIn" => {
                Some(format!("matchFields {} needs exactly one value, found {}", self.operator, self.values.len()))
            }
            op => Some(format!("`{op}` is not an operator of matchFields (In, NotIn)")),
        }
    }

    /// Whether a node's labels satisfy it (it has no problem).
    fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        let got = labels.get(&self.key);
        match self.operator.as_str() {
            "In" => got.is_some_and(|v| self.values.contains(v)),
            "NotIn" => got.is_none_or(|v| !self.values.contains(v)),
            "Exists" => got.is_some(),
            "DoesNotExist" => got.is_none(),
            "Gt" | "Lt" => {
                let (Some(have), Some(want)) =
                    (got.and_then(|v| parse_int(v)), self.values.first().and_then(|v| parse_int(v)))
                else {
                    return false;
                };
                if self.operator == "Gt" {
                    have > want
                } else {
                    have < want
                }
            }
            _ => false,
        }
    }

    /// Whether a node's fields satisfy it: only `metadata.name` is a field; any other reads as
    /// empty (as a `fields.Set` without it does).
    fn matches_fields(&self, name: &str) -> bool {
        let have = if self.key == "metadata.name" { name } else { "" };
        let want = self.values.first().map(String::as_str).unwrap_or("");
        match self.operator.as_str() {
            "In" => have == want,
            "NotIn" => have != want,
            _ => false,
        }
    }
}

/// One term of `nodeSelectorTerms`: every expression and every field must hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Term {
    /// `matchExpressions` (on labels).
    pub exprs: Vec<Requirement>,
    /// `matchFields` (on `metadata.name`).
    pub fields: Vec<Requirement>,
}

impl Term {
    /// Why the term cannot hold on any node, if so: empty, or a requirement kube cannot parse.
    fn problem(&self) -> Option<String> {
        if self.exprs.is_empty() && self.fields.is_empty() {
            return Some("an empty term matches no node".into());
        }
        self.exprs
            .iter()
            .find_map(|r| r.label_problem().map(|p| format!("{r} is invalid: {p}")))
            .or_else(|| self.fields.iter().find_map(|r| r.field_problem().map(|p| format!("{r} is invalid: {p}"))))
    }

    /// `None` when it holds on the node, else its first requirement that does not (or why the
    /// term never holds).
    fn first_unmet(&self, name: &str, labels: &BTreeMap<String, String>) -> Option<TermUnmet> {
        if let Some(p) = self.problem() {
            return Some(TermUnmet::Never(p));
        }
        if let Some(r) = self.exprs.iter().find(|r| !r.matches_labels(labels)) {
            return Some(TermUnmet::Req(r.to_string()));
        }
        self.fields.iter().find(|r| !r.matches_fields(name)).map(|r| TermUnmet::Req(r.to_string()))
    }
}

/// Why one term of a required node affinity does not hold on a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TermUnmet {
    /// Its first requirement the node does not meet (`gpu In [a100]`).
    Req(String),
    /// It holds on no node: empty, or a requirement kube cannot evaluate (why).
    Never(String),
}

impl fmt::Display for TermUnmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TermUnmet::Req(r) | TermUnmet::Never(r) => f.write_str(r),
        }
    }
}

/// What limits a pod to some nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Constraints {
    /// `spec.nodeSelector`: every pair must be a label of the node.
    pub node_selector: BTreeMap<String, String>,
    /// `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms` (ORed), if given.
    pub required: Option<Vec<Term>>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
}

/// Why a node does not qualify for a pod, the first failing check in kube-scheduler's filter
/// order (TaintToleration, then NodeAffinity: nodeSelector, then required affinity).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Unmet {
    /// A `NoSchedule`/`NoExecute` taint no toleration matches.
    Taint(Taint),
    /// A nodeSelector pair the node's labels lack.
    Selector {
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// No term of the required node affinity holds: for each term, its first unmet requirement.
    Affinity(Vec<TermUnmet>),
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::Taint(t) => write!(f, "untolerated taint {t}"),
            Unmet::Selector { key, value } => write!(f, "node selector {key}={value} not met"),
            Unmet::Affinity(terms) => match terms.as_slice() {
                [] => write!(f, "node affinity without terms never met"),
                [TermUnmet::Req(r)] => write!(f, "node affinity {r} not met"),
                [TermUnmet::Never(p)] => write!(f, "node affinity never met: {p}"),
                _ => {
                    let each: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
                    write!(f, "node affinity not met by any of its {} terms ({})", terms.len(), each.join("; "))
                }
            },
        }
    }
}

impl Constraints {
    /// Whether there is nothing to check beyond taints (no selector, no required affinity).
    pub fn selects_nothing(&self) -> bool {
        self.node_selector.is_empty() && self.required.is_none()
    }

    /// Whether the pod may go to the node `name` with `labels` and `taints` (the `NoSchedule`
    /// and `NoExecute` ones; others are ignored here too), or the first check that fails.
    pub fn check(&self, name: &str, labels: &BTreeMap<String, String>, taints: &[Taint]) -> Result<(), Unmet> {
        if let Some(t) =
            taints.iter().find(|t| Taint::effect_filters(&t.effect) && !self.tolerations.iter().any(|o| o.tolerates(t)))
        {
            return Err(Unmet::Taint(t.clone()));
        }
        if let Some((k, v)) = self.node_selector.iter().find(|(k, v)| labels.get(*k) != Some(*v)) {
            return Err(Unmet::Selector { key: k.clone(), value: v.clone() });
        }
        if let Some(terms) = &self.required {
            let mut unmet = Vec::with_capacity(terms.len());
            for t in terms {
                match t.first_unmet(name, labels) {
                    None => return Ok(()),
                    Some(u) => unmet.push(u),
                }
            }
            return Err(Unmet::Affinity(unmet));
        }
        Ok(())
    }
}

/// `2 node selector gpu=a100 not met, 1 untolerated taint dedicated=infer:NoSchedule`: how many
/// nodes fail for each reason, the most common first (then in alphabetical order).
pub fn summarize<'a>(unmet: impl IntoIterator<Item = &'a Unmet>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for u in unmet {
        *counts.entry(u.to_string()).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().map(|(t, n)| format!("{n} {t}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement { key: key.into(), operator: op.into(), values: values.iter().map(|v| v.to_string()).collect() }
    }

    fn affinity(terms: Vec<Term>) -> Constraints {
        Constraints { required: Some(terms), ..Constraints::default() }
    }

    fn term(exprs: Vec<Requirement>) -> Term {
        Term { exprs, fields: vec![] }
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.into(), effect: effect.into() }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        Toleration { key: key.into(), operator: op.into(), value: value.into(), effect: effect.into() }
    }

    /// assign-pod-node, "nodeSelector": the node must have each pair as a label (it may have
    /// more); the docs' `disktype: ssd` example.
    #[test]
    fn node_selector_needs_every_pair() {
        let c = Constraints { node_selector: labels(&[("disktype", "ssd")]), ..Constraints::default() };
        let ssd = labels(&[("disktype", "ssd"), ("kubernetes.io/hostname", "n1")]);
        assert_eq!(c.check("n1", &ssd, &[]), Ok(()));
        let hdd = labels(&[("disktype", "hdd")]);
        let e = c.check("n2", &hdd, &[]).unwrap_err();
        assert_eq!(e.to_string(), "node selector disktype=ssd not met");
        assert!(c.check("n3", &labels(&[]), &[]).is_err());
        let two = Constraints {
            node_selector: labels(&[("disktype", "ssd"), ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB")]),
            ..Constraints::default()
        };
        assert_eq!(
            two.check("n1", &ssd, &[]).unwrap_err().to_string(),
            "node selector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB not met"
        );
    }

    /// assign-pod-node, "Node affinity": the docs' example requires
    /// `topology.kubernetes.io/zone In [antarctica-east1, antarctica-west1]`.
    #[test]
    fn in_needs_the_label_with_one_of_the_values() {
        let c = affinity(vec![term(vec![req(
            "topology.kubernetes.io/zone",
            "In",
            &["antarctica-east1", "antarctica-west1"],
        )])]);
        assert!(c.check("a", &labels(&[("topology.kubernetes.io/zone", "antarctica-west1")]), &[]).is_ok());
        let e = c.check("b", &labels(&[("topology.kubernetes.io/zone", "arctic")]), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node affinity topology.kubernetes.io/zone In [antarctica-east1, antarctica-west1] not met"
        );
        assert!(c.check("c", &labels(&[]), &[]).is_err(), "In needs the label");
    }

    /// apimachinery `Requirement.Matches`, case (4): NotIn holds where the label is absent.
    #[test]
    fn not_in_holds_without_the_label() {
        let c = affinity(vec![term(vec![req("gpu", "NotIn", &["k80", "p100"])])]);
        assert!(c.check("a", &labels(&[]), &[]).is_ok());
        assert!(c.check("b", &labels(&[("gpu", "a100")]), &[]).is_ok());
        assert_eq!(
            c.check("c", &labels(&[("gpu", "k80")]), &[]).unwrap_err().to_string(),
            "node affinity gpu NotIn [k80, p100] not met"
        );
    }

    #[test]
    fn exists_and_does_not_exist_look_at_the_key_only() {
        let e = affinity(vec![term(vec![req("ib", "Exists", &[])])]);
        assert!(e.check("a", &labels(&[("ib", "")]), &[]).is_ok(), "an empty value still exists");
        assert_eq!(e.check("b", &labels(&[]), &[]).unwrap_err().to_string(), "node affinity ib Exists not met");
        let d = affinity(vec![term(vec![req("spot", "DoesNotExist", &[])])]);
        assert!(d.check("a", &labels(&[]), &[]).is_ok());
        assert_eq!(
            d.check("b", &labels(&[("spot", "true")]), &[]).unwrap_err().to_string(),
            "node affinity spot DoesNotExist not met"
        );
    }

    /// The operator table: Gt/Lt parse as integers; "Gt and Lt operators will not work with
    /// non-integer values". The label must exist; the comparison is strict.
    #[test]
    fn gt_and_lt_compare_integers_and_refuse_the_rest() {
        let gt = affinity(vec![term(vec![req("nvidia.com/gpu.memory", "Gt", &["40000"])])]);
        let mem = |v: &str| labels(&[("nvidia.com/gpu.memory", v)]);
        assert!(gt.check("a", &mem("81920"), &[]).is_ok());
        assert!(gt.check("b", &mem("40000"), &[]).is_err(), "strictly greater");
        assert!(gt.check("c", &mem("+40001"), &[]).is_ok(), "ParseInt takes a sign");
        assert!(gt.check("d", &mem("80GB"), &[]).is_err(), "a non-integer label does not match");
        assert!(gt.check("e", &mem(" 81920"), &[]).is_err(), "nor one with spaces");
        assert!(gt.check("f", &mem("99999999999999999999"), &[]).is_err(), "nor one beyond 64 bits");
        assert!(gt.check("g", &labels(&[]), &[]).is_err(), "Gt needs the label");
        assert_eq!(
            gt.check("b", &mem("40000"), &[]).unwrap_err().to_string(),
            "node affinity nvidia.com/gpu.memory Gt 40000 not met"
        );
        let lt = affinity(vec![term(vec![req("cores", "Lt", &["-2"])])]);
        assert!(lt.check("a", &labels(&[("cores", "-3")]), &[]).is_ok());
        assert!(lt.check("b", &labels(&[("cores", "-2")]), &[]).is_err());
        // A value that is not an integer makes the term unparsable: it matches no node.
        let bad = affinity(vec![term(vec![req("cores", "Gt", &["four"])])]);
        let e = bad.check("a", &labels(&[("cores", "8")]), &[]).unwrap_err().to_string();
        assert_eq!(
            e,
            "node affinity never met: cores Gt four is invalid: Gt needs exactly one integer value, found [four]"
        );
    }

    /// "If you specify multiple terms in nodeSelectorTerms, the Pod can be scheduled onto a node
    /// if one of the specified terms can be satisfied (terms are ORed)"; "if you specify
    /// multiple expressions in a single matchExpressions field, the Pod can be scheduled onto a
    /// node only if all the expressions are satisfied (expressions are ANDed)".
    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let c = affinity(vec![
            term(vec![req("gpu", "In", &["a100"]), req("ib", "Exists", &[])]),
            term(vec![req("gpu", "In", &["h100"])]),
        ]);
        assert!(c.check("a", &labels(&[("gpu", "a100"), ("ib", "1")]), &[]).is_ok());
        assert!(c.check("b", &labels(&[("gpu", "h100")]), &[]).is_ok());
        let e = c.check("c", &labels(&[("gpu", "a100")]), &[]).unwrap_err();
        assert_eq!(
            e,
            Unmet::Affinity(vec![TermUnmet::Req("ib Exists".into()), TermUnmet::Req("gpu In [h100]".into())])
        );
        assert_eq!(e.to_string(), "node affinity not met by any of its 2 terms (ib Exists; gpu In [h100])");
    }

    /// component-helpers: "nil or empty term matches no objects"; a term that cannot be parsed
    /// is skipped, the others still decide.
    #[test]
    fn empty_and_invalid_terms_match_nothing_but_others_decide() {
        let c = affinity(vec![Term::default()]);
        assert!(c.check("a", &labels(&[("x", "y")]), &[]).is_err());
        let c = affinity(vec![term(vec![req("gpu", "Like", &["a*"])]), term(vec![req("gpu", "In", &["a100"])])]);
        assert!(c.check("a", &labels(&[("gpu", "a100")]), &[]).is_ok());
        let e = c.check("b", &labels(&[("gpu", "v100")]), &[]).unwrap_err().to_string();
        assert!(e.contains("`Like` is not an operator"), "{e}");
        let c = affinity(vec![]);
        assert_eq!(c.check("a", &labels(&[]), &[]).unwrap_err().to_string(), "node affinity without terms never met");
        let c = affinity(vec![Term::default()]);
        assert_eq!(
            c.check("a", &labels(&[]), &[]).unwrap_err().to_string(),
            "node affinity never met: an empty term matches no node"
        );
        let c = affinity(vec![term(vec![req("gpu", "In", &[])])]);
        assert!(c.check("a", &labels(&[("gpu", "")]), &[]).is_err());
    }

    /// matchFields on `metadata.name` (what DaemonSets use), In and NotIn of one value, ANDed
    /// with the term's expressions.
    #[test]
    fn match_fields_on_the_node_name() {
        let c = affinity(vec![Term { exprs: vec![], fields: vec![req("metadata.name", "In", &["node-1"])] }]);
        assert!(c.check("node-1", &labels(&[]), &[]).is_ok());
        assert_eq!(
            c.check("node-2", &labels(&[]), &[]).unwrap_err().to_string(),
            "node affinity metadata.name In [node-1] not met"
        );
        let c = affinity(vec![Term {
            exprs: vec![req("gpu", "Exists", &[])],
            fields: vec![req("metadata.name", "NotIn", &["node-1"])],
        }]);
        assert!(c.check("node-2", &labels(&[("gpu", "a")]), &[]).is_ok());
        assert!(c.check("node-1", &labels(&[("gpu", "a")]), &[]).is_err());
        assert!(c.check("node-2", &labels(&[]), &[]).is_err());
        let two = affinity(vec![Term { exprs: vec![], fields: vec![req("metadata.name", "In", &["a", "b"])] }]);
        assert!(two.check("a", &labels(&[]), &[]).is_err(), "matchFields In takes exactly one value");
    }

    /// Both nodeSelector and node affinity must hold.
    #[test]
    fn selector_and_affinity_both_hold() {
        let c = Constraints {
            node_selector: labels(&[("pool", "gpu")]),
            required: Some(vec![term(vec![req("gpu", "In", &["a100"])])]),
            tolerations: vec![],
        };
        assert!(c.check("a", &labels(&[("pool", "gpu"), ("gpu", "a100")]), &[]).is_ok());
        assert!(matches!(c.check("b", &labels(&[("gpu", "a100")]), &[]), Err(Unmet::Selector { .. })));
        assert!(matches!(c.check("c", &labels(&[("pool", "gpu")]), &[]), Err(Unmet::Affinity(_))));
    }

    /// taint-and-toleration: the docs' `key1=value1:NoSchedule` taint is tolerated by
    /// `{key1, Equal, value1, NoSchedule}` and by `{key1, Exists, NoSchedule}`; an empty key with
    /// Exists matches everything; an empty effect matches every effect; PreferNoSchedule does
    /// not keep a pod off.
    #[test]
    fn tolerations_as_the_docs_say() {
        let t = taint("key1", "value1", "NoSchedule");
        assert!(tol("key1", "Equal", "value1", "NoSchedule").tolerates(&t));
        assert!(tol("key1", "", "value1", "NoSchedule").tolerates(&t), "the default operator is Equal");
        assert!(tol("key1", "Exists", "", "NoSchedule").tolerates(&t));
        assert!(!tol("key1", "Equal", "value2", "NoSchedule").tolerates(&t));
        assert!(!tol("key1", "Exists", "", "NoExecute").tolerates(&t), "another effect");
        assert!(tol("key1", "Exists", "", "").tolerates(&t), "an empty effect matches all");
        assert!(tol("", "Exists", "", "").tolerates(&t), "empty key with Exists tolerates everything");
        assert!(tol("", "Exists", "", "").tolerates(&taint("other", "", "NoExecute")));
        assert!(!tol("key2", "Exists", "", "").tolerates(&t));
        assert!(!tol("key1", "Gte", "value1", "").tolerates(&t), "an unknown operator tolerates nothing");

        let none = Constraints::default();
        let node = [taint("dedicated", "infer", "NoSchedule")];
        assert_eq!(
            none.check("n", &labels(&[]), &node).unwrap_err().to_string(),
            "untolerated taint dedicated=infer:NoSchedule"
        );
        assert!(none.check("n", &labels(&[]), &[taint("soft", "", "PreferNoSchedule")]).is_ok());
        assert_eq!(
            none.check("n", &labels(&[]), &[taint("gpu", "", "NoExecute")]).unwrap_err().to_string(),
            "untolerated taint gpu:NoExecute"
        );
        let ok = Constraints { tolerations: vec![tol("dedicated", "Equal", "infer", "")], ..Constraints::default() };
        assert!(ok.check("n", &labels(&[]), &node).is_ok());
        // Every taint must be tolerated.
        let two = [taint("dedicated", "infer", "NoSchedule"), taint("maintenance", "", "NoExecute")];
        assert_eq!(
            ok.check("n", &labels(&[]), &two).unwrap_err().to_string(),
            "untolerated taint maintenance:NoExecute"
        );
    }

    #[test]
    fn summary_counts_nodes_per_reason() {
        let sel = Unmet::Selector { key: "nvidia.com/gpu.product".into(), value: "A100".into() };
        let t = Unmet::Taint(taint("dedicated", "infer", "NoSchedule"));
        assert_eq!(
            summarize([&t, &sel, &sel]),
            "2 node selector nvidia.com/gpu.product=A100 not met, 1 untolerated taint dedicated=infer:NoSchedule"
        );
    }
}
