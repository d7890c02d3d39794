//! Kubernetes objects in and out of YAML/JSON files: manifests for `phalanx simulate` (multi-document YAML, `kind:
//! List` documents expanded as `kubectl apply -f` does) and the `v1 List` that `phalanx snapshot` writes.

use anyhow::{Context, bail};
use phalanx_store::ClusterState;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Reads every object of `text` (YAML, one or more documents; JSON is YAML too) into `state`, appending per kind.
/// `source` names the input in errors (a file name or `-`). Documents that are empty are skipped; a `List`'s items
/// are read in order.
///
/// Errors: YAML that does not parse, a document without `apiVersion`/`kind`, a kind the scheduler does not read
/// (e.g. a Deployment: simulate places pods, not their controllers), or an object that does not match its kind's
/// schema; each names `source`, the document number (from 1) and, where known, the object and the field.
pub fn read_objects(text: &str, source: &str, state: &mut ClusterState) -> anyhow::Result<()> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).with_context(|| format!("{source}: not valid YAML"))?;
    for (i, doc) in docs.into_iter().enumerate() {
        add_value(doc, &format!("{source}: document {}", i + 1), state)?;
    }
    Ok(())
}

fn add_value(doc: Value, at: &str, state: &mut ClusterState) -> anyhow::Result<()> {
    if doc.is_null() {
        return Ok(());
    }
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<no name>")
        .to_owned();
    let at = format!("{at} ({kind} {name:?})");
    match (api_version.as_str(), kind.as_str()) {
        (_, "") | ("", _) => bail!("{at}: an object needs apiVersion and kind"),
        ("v1", "List") => {
            let Some(Value::Array(items)) = doc.get("items").cloned() else {
                bail!("{at}: a List needs items")
            };
            for (j, item) in items.into_iter().enumerate() {
                add_value(item, &format!("{at} item {}", j + 1), state)?;
            }
        }
        ("v1", "Pod") => state.pods.push(typed(doc, &at)?),
        ("v1", "Node") => state.nodes.push(typed(doc, &at)?),
        ("scheduling.phalanx.dev/v1beta1", "PodGroup") => state.pod_groups.push(typed(doc, &at)?),
        ("scheduling.phalanx.dev/v1alpha3", "CompositePodGroup") => {
            state.composite_pod_groups.push(typed(doc, &at)?)
        }
        ("scheduling.phalanx.dev/v1beta1", "Workload") => state.workloads.push(typed(doc, &at)?),
        // Upstream's own groups: checked against upstream's schema (no Phalanx-only field passes), then read into
        // Phalanx's types, whose fields are upstream's (as the store holds them, `phalanx_store::upstream`), with
        // errors that name the field. Manifests that carry them simulate a cluster that serves upstream's API.
        ("scheduling.k8s.io/v1beta1", "PodGroup") => {
            typed::<k8s_openapi::api::scheduling::v1beta1::PodGroup>(doc.clone(), &at)?;
            let g = typed(doc, &at)?;
            state
                .upstream
                .get_or_insert_with(Default::default)
                .pod_groups
                .push(g);
        }
        (v @ ("scheduling.k8s.io/v1beta1" | "scheduling.k8s.io/v1alpha3"), "CompositePodGroup") => {
            // k8s-openapi 0.29 knows v1alpha3 only; v1beta1 has the same fields (1.38).
            let mut alpha = doc.clone();
            alpha["apiVersion"] = Value::from("scheduling.k8s.io/v1alpha3");
            typed::<k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup>(alpha, &at)?;
            let g = typed(doc, &at)?;
            let up = state.upstream.get_or_insert_with(Default::default);
            up.composites_served = true;
            up.composites_v1beta1 |= v.ends_with("v1beta1");
            up.composite_pod_groups.push(g);
        }
        ("scheduling.k8s.io/v1", "PriorityClass") => state.priority_classes.push(typed(doc, &at)?),
        ("policy/v1", "PodDisruptionBudget") => state.pdbs.push(typed(doc, &at)?),
        ("v1", "PersistentVolumeClaim") => state.volumes.claims.push(typed(doc, &at)?),
        ("v1", "PersistentVolume") => state.volumes.volumes.push(typed(doc, &at)?),
        ("storage.k8s.io/v1", "StorageClass") => state.volumes.classes.push(typed(doc, &at)?),
        ("storage.k8s.io/v1", "CSINode") => state.volumes.csi_nodes.push(typed(doc, &at)?),
        ("storage.k8s.io/v1", "CSIDriver") => state.volumes.csi_drivers.push(typed(doc, &at)?),
        ("storage.k8s.io/v1", "CSIStorageCapacity") => state.volumes.capacities.push(typed(doc, &at)?),
        (v, k) => bail!(
            "{at}: {v} {k} is not read by the simulator (it reads Pods, PodGroups, CompositePodGroups (Phalanx's and \
             scheduling.k8s.io's), Workloads, Nodes, PriorityClasses, PodDisruptionBudgets, PersistentVolumeClaims, PersistentVolumes, \
             StorageClasses, CSINodes, CSIDrivers and CSIStorageCapacities)"
        ),
    }
    Ok(())
}

fn typed<K: DeserializeOwned + serde::Serialize>(doc: Value, at: &str) -> anyhow::Result<K> {
    let obj: K = serde_path_to_error::deserialize(doc.clone())
        .map_err(|e| anyhow::anyhow!("{at}: field {}: {}", e.path(), e.inner()))?;
    // The API server refuses unknown fields (strict decoding, `kubectl apply` says "unknown field"); serde drops
    // them. A dropped `resources.limit` or `schedulingConstraint` would make the simulation answer for a different
    // object, so a field that does not come back when the object is written out again is an error here too.
    let back = serde_json::to_value(&obj).context("serialising an object")?;
    let mut unknown = Vec::new();
    unknown_fields(&doc, &back, "", &mut unknown);
    if !unknown.is_empty() {
        let shown: Vec<String> = unknown.iter().take(5).map(|f| format!("{f:?}")).collect();
        let more = unknown.len().saturating_sub(5);
        bail!(
            "{at}: unknown field{} {}{} (the API server would refuse the object: strict decoding)",
            if unknown.len() > 1 { "s" } else { "" },
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    Ok(obj)
}

/// Paths (`spec.containers[0].resources.limit`) of keys in `input` that `output` (the typed object written out
/// again) lacks. Keys holding null, `{}` or `[]` are not reported: an empty value may be dropped on the way out.
fn unknown_fields(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    Some(ov) => unknown_fields(v, ov, &p, out),
                    None => {
                        let empty = v.is_null()
                            || v.as_object().is_some_and(|m| m.is_empty())
                            || v.as_array().is_some_and(|a| a.is_empty());
                        if !empty {
                            out.push(p);
                        }
                    }
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                unknown_fields(iv, ov, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// `state` as one `v1 List` (what `kubectl get -o yaml` prints for several objects), each item with its
/// `apiVersion` and `kind`; kinds in the order of [`ClusterState`]'s fields. [`read_objects`] reads it back.
pub fn to_list(state: &ClusterState) -> anyhow::Result<Value> {
    let mut items = Vec::new();
    push_all(&mut items, &state.nodes)?;
    push_all(&mut items, &state.pods)?;
    push_all(&mut items, &state.pod_groups)?;
    push_all(&mut items, &state.composite_pod_groups)?;
    push_all(&mut items, &state.workloads)?;
    push_all(&mut items, &state.priority_classes)?;
    push_all(&mut items, &state.pdbs)?;
    let v = &state.volumes;
    push_all(&mut items, &v.claims)?;
    push_all(&mut items, &v.volumes)?;
    push_all(&mut items, &v.classes)?;
    push_all(&mut items, &v.csi_nodes)?;
    push_all(&mut items, &v.csi_drivers)?;
    push_all(&mut items, &v.capacities)?;
    Ok(serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))
}

fn push_all<K: serde::Serialize>(items: &mut Vec<Value>, objects: &[K]) -> anyhow::Result<()> {
    for o in objects {
        items.push(serde_json::to_value(o).context("serialising an object")?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelled_field_is_refused_and_named() {
        let yaml = r#"
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {a: b}}
spec:
  schedulrName: phalanx-scheduler
  containers: [{name: c, image: x, resources: {limit: {cpu: "1"}}}]
"#;
        let err = read_objects(yaml, "m.yaml", &mut ClusterState::default()).expect_err("unknown fields");
        let msg = format!("{err:#}");
        assert!(msg.contains("\"spec.schedulrName\""), "{msg}");
        assert!(msg.contains("\"spec.containers[0].resources.limit\""), "{msg}");
        let ok = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {limits: {cpu: '1'}}}], tolerations: []}\n";
        read_objects(ok, "ok.yaml", &mut ClusterState::default()).expect("known fields only");
    }

    #[test]
    fn multi_doc_and_list_are_read_and_round_trip() {
        let yaml = r#"
apiVersion: scheduling.phalanx.dev/v1beta1
kind: PodGroup
metadata: {name: g, namespace: ns}
spec:
  schedulingPolicy: {gang: {minCount: 2}}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: p1, namespace: ns}
  spec: {containers: [{name: c, image: x}]}
"#;
        let mut s = ClusterState::default();
        read_objects(yaml, "m.yaml", &mut s).expect("reads");
        assert_eq!((s.pod_groups.len(), s.pods.len()), (1, 1));
        let back = serde_json::to_string(&to_list(&s).expect("list")).expect("json");
        let mut again = ClusterState::default();
        read_objects(&back, "snap", &mut again).expect("reads back");
        assert_eq!((again.pod_groups.len(), again.pods.len()), (1, 1));
        assert_eq!(again.pod_groups[0].spec, s.pod_groups[0].spec);
    }

    #[test]
    fn bad_input_names_the_document_and_field() {
        let mut s = ClusterState::default();
        let e = read_objects(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
            "f.yaml",
            &mut s,
        )
        .expect_err("unsupported kind");
        assert!(
            e.to_string().contains("f.yaml: document 1 (Deployment \"d\")"),
            "{e}"
        );
        let e = read_objects(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n",
            "f.yaml",
            &mut s,
        )
        .expect_err("bad field");
        assert!(e.to_string().contains("field spec.containers"), "{e}");
        let e = read_objects("a: [", "f.yaml", &mut s).expect_err("bad yaml");
        assert!(e.to_string().contains("f.yaml: not valid YAML"), "{e}");
        let e = read_objects("metadata: {name: x}\n", "f.yaml", &mut s).expect_err("no kind");
        assert!(e.to_string().contains("needs apiVersion and kind"), "{e}");
    }
}
