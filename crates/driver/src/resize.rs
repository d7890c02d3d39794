//! Holding a gang whose owner is being resized (Phalanx addition; upstream 1.37 has no owner integration).
//!
//! An annotated Deployment scaled from 5 to 60 creates its 55 new pods before the owner integration raises the
//! PodGroup's `minCount`: against the old quorum (5, already bound) they would bind one by one where they fit, and
//! a gang meant to run as 60 would start as 8. The integration records on the PodGroup the owner generation its
//! `minCount` was computed from ([`OWNER_GENERATION`]); while the owner's cached generation is newer, the group's
//! pending pods are held at PreEnqueue ([`phalanx_scheduler::GroupInfo::resizing`]). Once the PodGroup is
//! rewritten for the new generation, the new members are placed with the new quorum, all or nothing; a scale-down
//! lowers `minCount` the same way, and the pods still pending then bind together.
//!
//! What is left: the owner's watch and the pods' watch are two streams, so pods that reach the scheduler before
//! the owner's new generation does are not held (the owner controller writes the owner before it creates pods, so
//! this window is the difference of two watch latencies).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use phalanx_api::owners::OWNER_GENERATION;
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::Store;
use phalanx_store::owners::{Lookup, OwnerRef};

/// The PodGroup's controlling owner, when the group records the generation it was sized at.
pub(crate) fn sized_owner(pg: &PodGroup) -> Option<(OwnerRef, i64)> {
    let generation = pg.annotations().get(OWNER_GENERATION)?.parse::<i64>().ok()?;
    let o: &OwnerReference = pg
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    Some((
        OwnerRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            namespace: pg.namespace().unwrap_or_default(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        },
        generation,
    ))
}

/// The hold message for `pg` ([`phalanx_scheduler::GroupInfo::resizing`]): `Some` while its owner's cached
/// generation is newer than the one the group was sized at.
pub(crate) fn resizing(store: &Store, pg: &PodGroup) -> Option<String> {
    let (owner, sized) = sized_owner(pg)?;
    let Lookup::Found(meta) = store.owner_meta(&owner) else {
        return None;
    };
    let now = meta.generation?;
    (now > sized).then(|| {
        format!(
            "waiting for minCount to follow {} {}: it changed (generation {now}) since the group was sized \
             (generation {sized})",
            owner.kind, owner.name
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_owner_comes_from_the_controller_reference_and_the_annotation() {
        let mut pg = PodGroup::new("web-deployment", Default::default());
        pg.metadata.namespace = Some("ns".into());
        assert!(sized_owner(&pg).is_none(), "no annotation");
        pg.metadata.annotations = Some(BTreeMap::from([(OWNER_GENERATION.to_string(), "7".to_string())]));
        assert!(sized_owner(&pg).is_none(), "no controller");
        pg.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "u1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        let (o, g) = sized_owner(&pg).expect("owner");
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.namespace.as_str(), g),
            ("Deployment", "web", "ns", 7)
        );
        pg.metadata.annotations = Some(BTreeMap::from([(OWNER_GENERATION.to_string(), "x".to_string())]));
        assert!(sized_owner(&pg).is_none(), "a bad value holds nothing");
    }
}
