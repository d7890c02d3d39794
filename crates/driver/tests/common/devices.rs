//! Devices for the real-cluster tests: a DeviceClass and ResourceSlices published as a DRA driver would, claim
//! templates and claims, and what was allocated.

use std::collections::HashMap;

use anyhow::Context as _;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::cluster::Ctx;

pub const DRIVER: &str = "gpu.example.com";

/// The cluster-scoped objects of one test (a DeviceClass and the slices), named after its namespace and deleted
/// at its end.
pub struct Devices<'a> {
    ctx: &'a Ctx,
    pub class: String,
    slices: Vec<String>,
}

impl<'a> Devices<'a> {
    /// A DeviceClass `<ns>-gpu` selecting the driver's devices.
    pub async fn new(ctx: &'a Ctx) -> anyhow::Result<Devices<'a>> {
        let class = format!("{}-gpu", ctx.ns);
        let obj: DeviceClass = serde_json::from_value(json!({
            "metadata": { "name": class },
            "spec": { "selectors": [{ "cel": { "expression": format!("device.driver == \"{DRIVER}\"") } }] },
        }))?;
        Api::<DeviceClass>::all(ctx.client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .context("creating the DeviceClass")?;
        Ok(Devices {
            ctx,
            class,
            slices: Vec::new(),
        })
    }

    /// Publishes `models.len()` devices `gpu-<i>` on `node`, with a `model` and a `pcieRoot` attribute (devices
    /// 0-1 on root `r0`, 2-3 on `r1`, ...), as a driver's kubelet plugin would.
    pub async fn slice(&mut self, node: &str, models: &[&str]) -> anyhow::Result<()> {
        let devices: Vec<_> = models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                json!({ "name": format!("gpu-{i}"), "attributes": {
                    "model": { "string": m },
                    "pcieRoot": { "string": format!("r{}", i / 2) },
                }})
            })
            .collect();
        let obj: ResourceSlice = serde_json::from_value(json!({
            "metadata": { "name": node },
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": { "name": node, "generation": 1, "resourceSliceCount": 1 },
                "devices": devices,
            },
        }))?;
        Api::<ResourceSlice>::all(self.ctx.client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .context("creating a ResourceSlice")?;
        self.slices.push(node.to_string());
        Ok(())
    }

    /// A ResourceClaimTemplate `name` for `count` devices of the class, with an optional CEL selector and a
    /// `matchAttribute` constraint.
    pub async fn template(
        &self,
        name: &str,
        count: i64,
        selector: Option<&str>,
        match_attribute: Option<&str>,
    ) -> anyhow::Result<()> {
        let obj: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "spec": self.claim_spec(count, selector, match_attribute) },
        }))?;
        Api::<ResourceClaimTemplate>::namespaced(self.ctx.client.clone(), &self.ctx.ns)
            .create(&PostParams::default(), &obj)
            .await
            .context("creating a ResourceClaimTemplate")?;
        Ok(())
    }

    /// A ResourceClaim `name` for `count` devices of the class.
    pub async fn claim(&self, name: &str, count: i64) -> anyhow::Result<()> {
        let obj: ResourceClaim = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": self.claim_spec(count, None, None),
        }))?;
        claims(self.ctx)
            .create(&PostParams::default(), &obj)
            .await
            .context("creating a ResourceClaim")?;
        Ok(())
    }

    fn claim_spec(
        &self,
        count: i64,
        selector: Option<&str>,
        match_attribute: Option<&str>,
    ) -> serde_json::Value {
        let mut exactly = json!({ "deviceClassName": self.class, "count": count });
        if let Some(s) = selector {
            exactly["selectors"] = json!([{ "cel": { "expression": s } }]);
        }
        let mut devices = json!({ "requests": [{ "name": "gpu", "exactly": exactly }] });
        if let Some(a) = match_attribute {
            devices["constraints"] = json!([{ "matchAttribute": a }]);
        }
        json!({ "devices": devices })
    }

    pub async fn cleanup(self) -> anyhow::Result<()> {
        let dp = DeleteParams::default();
        for s in &self.slices {
            let _ = Api::<ResourceSlice>::all(self.ctx.client.clone())
                .delete(s, &dp)
                .await;
        }
        let _ = Api::<DeviceClass>::all(self.ctx.client.clone())
            .delete(&self.class, &dp)
            .await;
        Ok(())
    }
}

pub fn claims(ctx: &Ctx) -> Api<ResourceClaim> {
    Api::namespaced(ctx.client.clone(), &ctx.ns)
}

/// Allocated claims of the namespace: name → (node of the allocation, devices, reserved pod names).
pub async fn allocations(
    ctx: &Ctx,
) -> anyhow::Result<HashMap<String, (Option<String>, Vec<String>, Vec<String>)>> {
    let list = claims(ctx).list(&ListParams::default()).await?;
    let mut out = HashMap::new();
    for c in list.items {
        let Some(st) = &c.status else { continue };
        let Some(a) = &st.allocation else { continue };
        let node = a
            .node_selector
            .as_ref()
            .and_then(|s| s.node_selector_terms.first())
            .and_then(|t| t.match_fields.as_ref())
            .and_then(|f| f.first())
            .and_then(|f| f.values.as_ref())
            .and_then(|v| v.first().cloned());
        let devices = a
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| format!("{}/{}", r.pool, r.device))
            .collect();
        let reserved = st.reserved_for.iter().flatten().map(|r| r.name.clone()).collect();
        out.insert(c.name_any(), (node, devices, reserved));
    }
    Ok(out)
}
