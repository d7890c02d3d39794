//! The pure part of the ProvisioningRequest controller: the request's names, its PodTemplates built from the gang's
//! members, the retry backoff, and the PodGroup condition `CapacityProvisioned` that mirrors Cluster Autoscaler's
//! answer (upstream conditions: `cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use phalanx_api::conditions::capacity;

use super::types::{BOOKING_EXPIRED, FAILED, MAX_POD_SETS, PROVISIONED, ProvisioningRequest};

/// The first retry's delay; each later one doubles it, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest delay between a failed (or expired) request and the next one.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How long after request `attempt` (1-based) failed or expired the next one is made: 5 s, 10 s, 20 s, … capped at
/// 5 min.
pub fn backoff(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// The name of a PodGroup's request of `attempt` (1-based): `<group>-<attempt>`, the group's name cut so that the
/// request's PodTemplates (`<request>-<i>`) stay DNS subdomains of at most 253 characters.
pub fn request_name(group: &str, attempt: u32) -> String {
    let mut base: String = group.chars().take(240).collect();
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    format!("{base}-{attempt}")
}

/// The name of the `index`-th PodTemplate of request `request`.
pub fn template_name(request: &str, index: usize) -> String {
    format!("{request}-{index}")
}

/// What Cluster Autoscaler says of a request, by precedence: an expired booking, a failure, a provisioning, else
/// pending (with the message of its latest condition, e.g. `Accepted`, if any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No verdict yet.
    Pending(Option<String>),
    /// `Provisioned=True`: the capacity is booked for the gang.
    Provisioned(String),
    /// `Failed=True`.
    Failed(String),
    /// `BookingExpired=True`.
    BookingExpired(String),
}

impl Outcome {
    /// Reads `pr`'s conditions.
    pub fn of(pr: &ProvisioningRequest) -> Outcome {
        if let Some(c) = pr.true_condition(BOOKING_EXPIRED) {
            return Outcome::BookingExpired(c.message.clone());
        }
        if let Some(c) = pr.true_condition(FAILED) {
            return Outcome::Failed(c.message.clone());
        }
        if let Some(c) = pr.true_condition(PROVISIONED) {
            return Outcome::Provisioned(c.message.clone());
        }
        let latest = pr
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().max_by_key(|c| c.last_transition_time.0))
            .map(|c| format!("{} {}: {}", c.type_, c.status, c.message));
        Outcome::Pending(latest)
    }

    /// Whether the request is done for and a new one must follow.
    pub fn is_over(&self) -> bool {
        matches!(self, Outcome::Failed(_) | Outcome::BookingExpired(_))
    }

    /// The request's condition whose transition starts the backoff (`Failed` or `BookingExpired`).
    pub fn condition_type(&self) -> Option<&'static str> {
        match self {
            Outcome::Failed(_) => Some(FAILED),
            Outcome::BookingExpired(_) => Some(BOOKING_EXPIRED),
            _ => None,
        }
    }
}

/// The `CapacityProvisioned` condition a PodGroup should carry: status True only when provisioned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// `"True"` or `"False"`.
    pub status: &'static str,
    /// One of [`phalanx_api::conditions::capacity`].
    pub reason: &'static str,
    /// Names the request (`namespace/name`, attempt) and repeats Cluster Autoscaler's message.
    pub message: String,
}

impl Wanted {
    fn new(status: &'static str, reason: &'static str, message: String) -> Wanted {
        Wanted {
            status,
            reason,
            message: crate::context::truncate(message, 1024),
        }
    }

    /// The condition while request `request` (`namespace/name`) of `attempt` has `outcome`; `retry_in` is the time
    /// left before the next attempt when the request is over.
    pub fn of(request: &str, attempt: u32, outcome: &Outcome, retry_in: Duration) -> Wanted {
        let said = |m: &str| {
            if m.is_empty() {
                String::new()
            } else {
                format!(": {m}")
            }
        };
        let next = format!(
            "; attempt {} in {} s",
            attempt + 1,
            retry_in.as_secs() + u64::from(retry_in.subsec_nanos() > 0)
        );
        match outcome {
            Outcome::Provisioned(m) => Wanted::new(
                "True",
                capacity::PROVISIONED,
                format!("ProvisioningRequest {request} is Provisioned{}", said(m)),
            ),
            Outcome::Failed(m) => Wanted::new(
                "False",
                capacity::FAILED,
                format!("ProvisioningRequest {request} failed{}{next}", said(m)),
            ),
            Outcome::BookingExpired(m) => Wanted::new(
                "False",
                capacity::BOOKING_EXPIRED,
                format!(
                    "the booking of ProvisioningRequest {request} expired before the gang was placed{}{next}",
                    said(m)
                ),
            ),
            Outcome::Pending(latest) => {
                let latest = latest
                    .as_deref()
                    .map(|m| format!(" (last: {m})"))
                    .unwrap_or_default();
                if attempt <= 1 {
                    Wanted::new(
                        "False",
                        capacity::PENDING,
                        format!("ProvisioningRequest {request} waits for Cluster Autoscaler{latest}"),
                    )
                } else {
                    Wanted::new(
                        "False",
                        capacity::RETRYING,
                        format!(
                            "ProvisioningRequest {request} (attempt {attempt}, the previous one failed or expired) \
                             waits for Cluster Autoscaler{latest}"
                        ),
                    )
                }
            }
        }
    }
}

/// The scheduling-relevant part of a member pod, as a PodTemplate of the request: what Cluster Autoscaler
/// simulates the pod with (containers' names, images, resources and ports; node selector, affinity,
/// tolerations, topology spread, priority, runtime class, overhead, scheduler name, host network). Volumes,
/// environment, commands and node name are left out: they do not change where the pod fits, and would tie the
/// template to one pod.
pub fn shape_of(pod: &Pod) -> PodSpec {
    let spec = pod.spec.clone().unwrap_or_default();
    let slim = |c: &Container| Container {
        name: c.name.clone(),
        image: c.image.clone(),
        resources: c.resources.clone(),
        ports: c.ports.clone(),
        restart_policy: c.restart_policy.clone(),
        ..Container::default()
    };
    PodSpec {
        containers: spec.containers.iter().map(slim).collect(),
        init_containers: spec
            .init_containers
            .as_ref()
            .map(|cs| cs.iter().map(slim).collect()),
        node_selector: spec.node_selector,
        affinity: spec.affinity,
        tolerations: spec.tolerations,
        topology_spread_constraints: spec.topology_spread_constraints,
        priority_class_name: spec.priority_class_name,
        priority: spec.priority,
        preemption_policy: spec.preemption_policy,
        runtime_class_name: spec.runtime_class_name,
        overhead: spec.overhead,
        scheduler_name: spec.scheduler_name,
        host_network: spec.host_network,
        resources: spec.resources,
        ..PodSpec::default()
    }
}

/// The PodTemplates of a gang's request, with their counts: the first `min_count` members by name, grouped by
/// [`shape_of`] (first appearance first), each template carrying the labels all its pods share (pod-specific
/// labels such as a Job's completion index drop out). The counts add up to `min_count`, or to the members there
/// are when fewer. More than [`MAX_POD_SETS`] shapes are folded into the last one's count (Cluster Autoscaler
/// accepts at most 32 podSets).
pub fn templates(members: &[Pod], min_count: usize) -> Vec<(PodTemplateSpec, i32)> {
    let mut chosen: Vec<&Pod> = members.iter().collect();
    chosen.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    chosen.truncate(min_count);
    let mut out: Vec<(PodSpec, BTreeMap<String, String>, i32)> = Vec::new();
    for pod in chosen {
        let shape = shape_of(pod);
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if let Some((_, common, count)) = out.iter_mut().find(|(s, _, _)| *s == shape) {
            common.retain(|k, v| labels.get(k) == Some(v));
            *count += 1;
        } else if out.len() == MAX_POD_SETS {
            if let Some(last) = out.last_mut() {
                last.2 += 1;
            }
        } else {
            out.push((shape, labels, 1));
        }
    }
    out.into_iter()
        .map(|(spec, labels, count)| {
            let template = PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: (!labels.is_empty()).then_some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(spec),
            };
            (template, count)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provisioning::types::ProvisioningRequestStatus;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    fn pod(name: &str, cpu: &str, index: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([
                    ("app".to_string(), "train".to_string()),
                    ("index".to_string(), index.to_string()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("busybox".into()),
                    command: Some(vec![format!("run-{name}")]),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([("cpu".to_string(), Quantity(cpu.into()))])),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn one_template_per_shape_counting_min_count_members() {
        let members = [
            pod("w-3", "1", "3"),
            pod("w-0", "1", "0"),
            pod("w-1", "1", "1"),
            pod("w-2", "1", "2"),
        ];
        let t = templates(&members, 4);
        assert_eq!(t.len(), 1, "same shape: commands and node names do not count");
        assert_eq!(t[0].1, 4);
        let meta = t[0].0.metadata.as_ref().unwrap();
        assert_eq!(
            meta.labels.as_ref().unwrap(),
            &BTreeMap::from([("app".to_string(), "train".to_string())]),
            "only the labels every member shares"
        );
        let spec = t[0].0.spec.as_ref().unwrap();
        assert!(spec.node_name.is_none() && spec.containers[0].command.is_none());

        let mixed = [
            pod("a-0", "4", "0"),
            pod("a-1", "1", "1"),
            pod("a-2", "1", "2"),
            pod("a-9", "8", "9"),
        ];
        let t = templates(&mixed, 3);
        let counts: Vec<i32> = t.iter().map(|(_, c)| *c).collect();
        assert_eq!(
            counts,
            [1, 2],
            "the first minCount members by name, grouped by shape"
        );
        assert_eq!(t.iter().map(|(_, c)| c).sum::<i32>(), 3);
        assert_eq!(templates(&mixed[..2], 3).iter().map(|(_, c)| c).sum::<i32>(), 2);
    }

    #[test]
    fn backoff_doubles_from_five_seconds_up_to_five_minutes() {
        let secs: Vec<u64> = (1..=8).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn names_stay_dns_subdomains() {
        assert_eq!(request_name("train", 2), "train-2");
        let long = format!("{}-x", "a".repeat(239));
        let r = request_name(&long, 12);
        assert!(r.len() <= 243 && !r.contains("--"), "{r}");
        assert!(template_name(&r, 31).len() <= 253);
    }

    fn cond(type_: &str, status: &str, message: &str, secs: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: type_.into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::from_second(secs).unwrap()),
            observed_generation: None,
        }
    }

    fn request(conditions: Vec<Condition>) -> ProvisioningRequest {
        ProvisioningRequest {
            status: Some(ProvisioningRequestStatus { conditions }),
            ..ProvisioningRequest::default()
        }
    }

    #[test]
    fn conditions_map_to_the_group_condition() {
        let pending = Outcome::of(&request(vec![cond("Accepted", "True", "accepted", 1)]));
        assert_eq!(pending, Outcome::Pending(Some("Accepted True: accepted".into())));
        let w = Wanted::of("ns/g-1", 1, &pending, Duration::ZERO);
        assert_eq!((w.status, w.reason), ("False", capacity::PENDING));
        assert!(w.message.contains("ns/g-1"), "{}", w.message);
        assert_eq!(
            Wanted::of("ns/g-2", 2, &pending, Duration::ZERO).reason,
            capacity::RETRYING
        );

        let failed = Outcome::of(&request(vec![
            cond("Accepted", "True", "", 1),
            cond("Failed", "True", "out of quota", 2),
        ]));
        assert!(failed.is_over());
        let w = Wanted::of("ns/g-1", 1, &failed, Duration::from_millis(4500));
        assert_eq!((w.status, w.reason), ("False", capacity::FAILED));
        assert!(
            w.message.contains("out of quota") && w.message.contains("attempt 2 in 5 s"),
            "{}",
            w.message
        );

        let done = Outcome::of(&request(vec![cond("Provisioned", "True", "nodes ready", 3)]));
        let w = Wanted::of("ns/g-1", 1, &done, Duration::ZERO);
        assert_eq!((w.status, w.reason), ("True", capacity::PROVISIONED));

        let expired = Outcome::of(&request(vec![
            cond("Provisioned", "True", "", 3),
            cond("BookingExpired", "True", "10m passed", 4),
        ]));
        assert_eq!(expired.condition_type(), Some(BOOKING_EXPIRED));
        assert_eq!(
            Wanted::of("ns/g-1", 1, &expired, Duration::ZERO).reason,
            capacity::BOOKING_EXPIRED
        );
        assert_eq!(
            Outcome::of(&request(vec![cond("Failed", "False", "", 1)])),
            Outcome::Pending(Some("Failed False: ".into()))
        );
    }
}
