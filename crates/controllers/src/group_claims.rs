//! A PodGroup's own ResourceClaims (`spec.resourceClaims`, KEP-5729): the claim generated for each entry that
//! names a ResourceClaimTemplate, recorded in `status.resourceClaimStatuses`.
//!
//! Upstream, kube-controller-manager's resourceclaim controller does this for `scheduling.k8s.io` PodGroups
//! (`pkg/controller/resourceclaim/controller.go`, gate `DRAWorkloadResourceClaims`). It does not know Phalanx's
//! PodGroups, so this controller does it for them:
//! - The claim is created from the template's `spec` (labels and annotations of the template's `metadata` too),
//!   with the annotation `resource.kubernetes.io/pod-claim-name: <entry>` and a controller owner reference to the
//!   PodGroup, so that the garbage collector deletes it with the group.
//! - Its name is fixed, `<podgroup>-<entry>` ([`generated_claim_name`]), where upstream generates one: kube-controller-manager
//!   creates a per-pod claim for every pod entry that names a template, so member pods must name the group's
//!   claim by `resourceClaimName`, and a name they can write before the claim exists is what lets them.
//! - A claim of that name that this group does not own is reported on the group (`Valid=False`,
//!   [`CLAIM_CONFLICT`]), never adopted or replaced; a template that does not exist is [`TEMPLATE_NOT_FOUND`].
//!
//! The scheduler allocates such a claim once, in the group's cycle, and reserves it for every member that uses it
//! (kubelet checks each pod against `reservedFor`); kube-controller-manager removes finished pods from
//! `reservedFor` and deallocates the claim when no pod reserves it any more.

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use phalanx_api::v1beta1::{PodGroup, PodGroupResourceClaimStatus, generated_claim_name};

use crate::context::Ctx;
use crate::error::Result;
use crate::status::Problem;

/// The annotation upstream's resourceclaim controller puts on a generated claim: the entry's `name`.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// `Valid=False` reason: a claim of the generated name exists and is not the group's.
pub const CLAIM_CONFLICT: &str = "ResourceClaimConflict";
/// `Valid=False` reason: an entry's ResourceClaimTemplate does not exist (yet).
pub const TEMPLATE_NOT_FOUND: &str = "ResourceClaimTemplateNotFound";
/// `Valid=False` reason: the server does not serve `resource.k8s.io/v1`.
pub const CLAIMS_NOT_SERVED: &str = "ResourceClaimsNotServed";

/// What [`ensure`] found: the status entries to record, and a problem to report on the group.
#[derive(Debug, Default)]
pub struct GroupClaims {
    /// One entry per template-based `spec.resourceClaims` entry whose claim exists and is this group's.
    pub statuses: Vec<PodGroupResourceClaimStatus>,
    /// A template that does not exist, a claim of the name that is not the group's, or DRA not served.
    pub problem: Option<Problem>,
}

/// Creates the missing claims of `pg`'s template-based entries and returns what to record.
///
/// # Errors
/// The create call failed for another reason than "already exists" (that one is picked up by the next
/// reconcile, when the watch has the claim).
pub async fn ensure(ctx: &Ctx, pg: &PodGroup) -> Result<GroupClaims> {
    let mut out = GroupClaims::default();
    let entries = pg.spec.resource_claims.as_deref().unwrap_or_default();
    if entries.is_empty() {
        return Ok(out);
    }
    let Some(dra) = ctx.store.dra() else {
        out.problem = Some(Problem::new(
            CLAIMS_NOT_SERVED,
            "spec.resourceClaims: resource.k8s.io/v1 is not served by the API server, so the group's claims cannot be \
             allocated",
        ));
        return Ok(out);
    };
    let (Some(ns), Some(uid)) = (pg.namespace(), pg.uid()) else {
        return Ok(out);
    };
    // (reason, message): the first reason names the condition, every message is kept.
    let mut problems: Vec<(&str, String)> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Some(template) = &entry.resource_claim_template_name else {
            continue;
        };
        let name = generated_claim_name(&pg.name_any(), &entry.name);
        let field = format!("spec.resourceClaims[{i}]");
        if let Some(claim) = dra.claims.get(&ObjectRef::new(&name).within(&ns)) {
            if claim.owner_references().iter().any(|o| o.uid == uid) {
                out.statuses.push(PodGroupResourceClaimStatus {
                    name: entry.name.clone(),
                    resource_claim_name: Some(name),
                });
            } else {
                problems.push((
                    CLAIM_CONFLICT,
                    format!(
                        "{field} ({}): ResourceClaim {name:?} exists and was not generated for this PodGroup",
                        entry.name
                    ),
                ));
            }
            continue;
        }
        let Some(t) = dra
            .templates
            .get(&ObjectRef::new(template).within(&ns))
            .and_then(|t| t.spec.clone())
        else {
            problems.push((
                TEMPLATE_NOT_FOUND,
                format!(
                    "{field}.resourceClaimTemplateName: ResourceClaimTemplate {template:?} not found in namespace \
                     {ns:?}; the group's claim {name:?} is created once it exists"
                ),
            ));
            continue;
        };
        let claim = generated_claim(pg, &uid, &entry.name, &name, t);
        let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &ns);
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => tracing::info!(podgroup = %pg.name_any(), namespace = %ns, claim = %name,
                "created the group's ResourceClaim from template {template}"),
            // Created by an earlier reconcile whose watch event has not arrived, or by someone else: the next
            // reconcile tells which.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some((reason, _)) = problems.first() {
        let message: Vec<String> = problems.iter().map(|(_, m)| m.clone()).collect();
        out.problem = Some(Problem::new(reason, message.join("; ")));
    }
    Ok(out)
}

/// The claim for one entry, as upstream's controller builds a pod's claim from a template.
fn generated_claim(
    pg: &PodGroup,
    uid: &str,
    entry: &str,
    name: &str,
    t: ResourceClaimTemplateSpec,
) -> ResourceClaim {
    let meta = t.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(POD_CLAIM_NAME_ANNOTATION.into(), entry.into());
    ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: pg.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: PodGroup::api_version(&()).into_owned(),
                kind: PodGroup::kind(&()).into_owned(),
                name: pg.name_any(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: t.spec,
        status: None,
    }
}
