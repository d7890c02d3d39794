//! Upstream compatibility: an upstream `scheduling.k8s.io` spec (k8s-openapi's v1beta1 / v1alpha3 types,
//! Kubernetes 1.37) serialised to JSON reads as the Phalanx type, and the Phalanx type writes back the same
//! JSON, so nothing is lost in either direction. Compared as serde_json::Value.

use k8s_openapi::api::scheduling::{v1alpha3 as up3, v1beta1 as up};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// upstream -> JSON -> ours -> JSON must equal the upstream JSON, and JSON -> upstream must give the
/// original upstream value back.
fn assert_lossless<Up, Ours>(upstream: &Up)
where
    Up: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    Ours: Serialize + DeserializeOwned,
{
    let up_json = serde_json::to_value(upstream).expect("serialise upstream");
    let ours: Ours =
        serde_json::from_value(up_json.clone()).expect("upstream JSON reads as the Phalanx type");
    let ours_json = serde_json::to_value(&ours).expect("serialise ours");
    assert_eq!(ours_json, up_json, "the Phalanx type changes upstream's JSON");
    let back: Up = serde_json::from_value(ours_json).expect("Phalanx JSON reads as the upstream type");
    assert_eq!(
        &back, upstream,
        "upstream value changed after a round trip through the Phalanx type"
    );
}

fn empty() -> Value {
    json!({})
}

fn full_pod_group_template(name: &str) -> up::PodGroupTemplate {
    up::PodGroupTemplate {
        name: name.into(),
        scheduling_policy: up::PodGroupSchedulingPolicy {
            basic: None,
            gang: Some(up::GangSchedulingPolicy { min_count: 4 }),
        },
        scheduling_constraints: Some(up::PodGroupSchedulingConstraints {
            topology: Some(vec![up::TopologyConstraint {
                key: "topology.kubernetes.io/rack".into(),
            }]),
        }),
        resource_claims: Some(vec![
            up::PodGroupResourceClaim {
                name: "gpus".into(),
                resource_claim_name: None,
                resource_claim_template_name: Some("gpu-template".into()),
            },
            up::PodGroupResourceClaim {
                name: "shared".into(),
                resource_claim_name: Some("shared-claim".into()),
                resource_claim_template_name: None,
            },
        ]),
        disruption_mode: Some(up::DisruptionMode {
            single: None,
            all: Some(up::AllDisruptionMode(empty())),
        }),
        priority_class_name: Some("high".into()),
        priority: Some(1000),
        preemption_policy: Some("Never".into()),
    }
}

fn basic_pod_group_template(name: &str) -> up::PodGroupTemplate {
    up::PodGroupTemplate {
        name: name.into(),
        scheduling_policy: up::PodGroupSchedulingPolicy {
            basic: Some(up::BasicSchedulingPolicy(empty())),
            gang: None,
        },
        ..Default::default()
    }
}

#[test]
fn pod_group_spec_with_every_field() {
    let spec = up::PodGroupSpec {
        parent_composite_pod_group_name: Some("leaders".into()),
        workload_ref: Some(up::WorkloadReference {
            workload_name: "train".into(),
            template_name: "workers".into(),
        }),
        scheduling_policy: up::PodGroupSchedulingPolicy {
            basic: None,
            gang: Some(up::GangSchedulingPolicy { min_count: 8 }),
        },
        scheduling_constraints: Some(up::PodGroupSchedulingConstraints {
            topology: Some(vec![up::TopologyConstraint {
                key: "topology.kubernetes.io/zone".into(),
            }]),
        }),
        resource_claims: Some(vec![up::PodGroupResourceClaim {
            name: "gpus".into(),
            resource_claim_name: Some("claim".into()),
            resource_claim_template_name: None,
        }]),
        disruption_mode: Some(up::DisruptionMode {
            single: Some(up::SingleDisruptionMode(empty())),
            all: None,
        }),
        priority_class_name: Some("high".into()),
        priority: Some(1_000_000_000),
        preemption_policy: Some("PreemptLowerPriority".into()),
    };
    assert_lossless::<_, phalanx_api::v1beta1::PodGroupSpec>(&spec);
}

#[test]
fn minimal_basic_pod_group_spec() {
    let spec = up::PodGroupSpec {
        scheduling_policy: up::PodGroupSchedulingPolicy {
            basic: Some(up::BasicSchedulingPolicy(empty())),
            gang: None,
        },
        ..Default::default()
    };
    assert_lossless::<_, phalanx_api::v1beta1::PodGroupSpec>(&spec);
}

#[test]
fn pod_group_status() {
    let status = up::PodGroupStatus {
        conditions: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "PodGroupInitiallyScheduled".into(),
            status: "False".into(),
            reason: "Unschedulable".into(),
            message: "0/8 nodes are available".into(),
            observed_generation: Some(3),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-30T01:02:03Z".parse().expect("timestamp"),
            ),
        }]),
        resource_claim_statuses: Some(vec![up::PodGroupResourceClaimStatus {
            name: "gpus".into(),
            resource_claim_name: Some("pg-gpus-abcde".into()),
        }]),
    };
    assert_lossless::<_, phalanx_api::v1beta1::PodGroupStatus>(&status);
}

#[test]
fn workload_spec_with_pod_group_templates() {
    let spec = up::WorkloadSpec {
        controller_ref: Some(up::TypedLocalObjectReference {
            api_group: Some("batch".into()),
            kind: "Job".into(),
            name: "train".into(),
        }),
        pod_group_templates: Some(vec![
            full_pod_group_template("workers"),
            basic_pod_group_template("driver"),
        ]),
        composite_pod_group_templates: None,
    };
    assert_lossless::<_, phalanx_api::v1beta1::WorkloadSpec>(&spec);
}

#[test]
fn workload_spec_with_a_four_level_composite_tree() {
    let level3 = up::CompositePodGroupTemplate {
        name: "rack".into(),
        scheduling_policy: up::CompositePodGroupSchedulingPolicy {
            basic: Some(up::CompositeBasicSchedulingPolicy(empty())),
            gang: None,
        },
        pod_group_templates: Some(vec![full_pod_group_template("workers")]),
        ..Default::default()
    };
    let level2 = up::CompositePodGroupTemplate {
        name: "block".into(),
        scheduling_policy: up::CompositePodGroupSchedulingPolicy {
            basic: None,
            gang: Some(up::CompositeGangSchedulingPolicy { min_group_count: 2 }),
        },
        disruption_mode: Some(up::CompositeDisruptionMode {
            single: None,
            all: Some(up::AllCompositeDisruptionMode(empty())),
        }),
        composite_pod_group_templates: Some(vec![level3]),
        pod_group_templates: Some(vec![basic_pod_group_template("leader")]),
        ..Default::default()
    };
    let level1 = up::CompositePodGroupTemplate {
        name: "job".into(),
        scheduling_policy: up::CompositePodGroupSchedulingPolicy {
            basic: None,
            gang: Some(up::CompositeGangSchedulingPolicy { min_group_count: 1 }),
        },
        scheduling_constraints: Some(up::CompositePodGroupSchedulingConstraints {
            topology: Some(vec![up::TopologyConstraint {
                key: "topology.kubernetes.io/zone".into(),
            }]),
        }),
        disruption_mode: Some(up::CompositeDisruptionMode {
            single: Some(up::SingleCompositeDisruptionMode(empty())),
            all: None,
        }),
        priority_class_name: Some("high".into()),
        priority: Some(100),
        preemption_policy: Some("PreemptLowerPriority".into()),
        composite_pod_group_templates: Some(vec![level2]),
        pod_group_templates: None,
    };
    let spec = up::WorkloadSpec {
        controller_ref: None,
        pod_group_templates: None,
        composite_pod_group_templates: Some(vec![level1]),
    };
    assert_lossless::<_, phalanx_api::v1beta1::WorkloadSpec>(&spec);
}

#[test]
fn composite_pod_group_spec_with_every_field() {
    let spec = up3::CompositePodGroupSpec {
        parent_composite_pod_group_name: Some("root".into()),
        workload_ref: up3::WorkloadReference {
            workload_name: "train".into(),
            template_name: "rack".into(),
        },
        scheduling_policy: up3::CompositePodGroupSchedulingPolicy {
            basic: None,
            gang: Some(up3::CompositeGangSchedulingPolicy { min_group_count: 3 }),
        },
        scheduling_constraints: Some(up3::CompositePodGroupSchedulingConstraints {
            topology: Some(vec![up3::TopologyConstraint {
                key: "topology.kubernetes.io/rack".into(),
            }]),
        }),
        disruption_mode: Some(up3::CompositeDisruptionMode {
            single: None,
            all: Some(up3::AllCompositeDisruptionMode(empty())),
        }),
        priority_class_name: Some("high".into()),
        priority: Some(7),
        preemption_policy: Some("Never".into()),
    };
    assert_lossless::<_, phalanx_api::v1alpha3::CompositePodGroupSpec>(&spec);
}

#[test]
fn composite_pod_group_status() {
    let status = up3::CompositePodGroupStatus {
        conditions: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "CompositePodGroupInitiallyScheduled".into(),
            status: "True".into(),
            reason: "Scheduled".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-30T01:02:03Z".parse().expect("timestamp"),
            ),
        }]),
    };
    assert_lossless::<_, phalanx_api::v1alpha3::CompositePodGroupStatus>(&status);
}

/// Whole objects: only apiVersion changes (scheduling.k8s.io -> scheduling.phalanx.dev).
#[test]
fn whole_pod_group_object_differs_only_in_api_version() {
    let upstream = up::PodGroup {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("pg".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: up::PodGroupSpec {
            scheduling_policy: up::PodGroupSchedulingPolicy {
                basic: None,
                gang: Some(up::GangSchedulingPolicy { min_count: 2 }),
            },
            ..Default::default()
        },
        status: None,
    };
    let mut json = serde_json::to_value(&upstream).expect("serialise");
    assert_eq!(json["apiVersion"], "scheduling.k8s.io/v1beta1");
    json["apiVersion"] = json!("scheduling.phalanx.dev/v1beta1");
    let ours: phalanx_api::v1beta1::PodGroup = serde_json::from_value(json.clone()).expect("reads as ours");
    assert_eq!(ours.spec.scheduling_policy.min_count(), Some(2));
    assert_eq!(serde_json::to_value(&ours).expect("serialise ours"), json);
}
