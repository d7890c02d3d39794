//! phalanx-testenv: the harness that gives Phalanx's integration tests a real Kubernetes v1.37.2 control plane.
//!
//! [`TestEnv::shared`] starts, once per test binary, etcd (data on tmpfs), kube-apiserver (own CA, RBAC on),
//! kube-controller-manager (garbage collection, namespaces, service accounts; node controllers off) and kwok (fake
//! nodes; bound pods turn Running, deletions complete) through `hack/cluster.sh`, from the binaries that
//! `hack/build-bins.sh` caches (it runs the build when they are missing). The control plane dies with the test
//! binary: `cluster.sh --watch-pid` tears it down once the test process exits. Set `PHALANX_TEST_KUBECONFIG` to
//! reuse a running cluster instead (for example one from `make cluster-up`).
//!
//! Each test creates its own namespace ([`create_namespace`]) and its own [`kube::Client`] ([`TestEnv::client`];
//! a client belongs to the tokio runtime it was created in, and every `#[tokio::test]` has its own runtime).
//! Nodes are cluster-scoped and shared by all tests of a binary: name them after the test namespace and label them
//! with [`TEST_NS_LABEL`] ([`FakeNode::test_namespace`] does both).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use phalanx_testenv::{TestEnv, FakeNode, create_namespace};
//! let env = TestEnv::shared();
//! let client = env.client().await?;
//! let ns = create_namespace(&client, "demo").await?;
//! let node = FakeNode::new(format!("{ns}-n1")).cpu("4").memory("8Gi").resource("nvidia.com/gpu", "8")
//!     .test_namespace(&ns).create(&client).await?;
//! # Ok(()) }
//! ```
//! How the control plane is built and run, its logs and how to debug it: `docs/testing.md`.

mod admission;
mod crds;
mod env;
mod names;
mod namespace;
mod node;
mod pods;
mod registry;
mod wait;

pub use admission::{ADMISSION_POLICIES_YAML, apply_admission_policies, remove_admission_policies};
pub use crds::apply_crds;
pub use env::{REUSE_KUBECONFIG_ENV, REUSE_LOG_DIR_ENV, TestEnv};
pub use namespace::{TESTENV_NAMESPACE_LABEL, create_namespace};
pub use node::{FakeNode, KWOK_NODE_ANNOTATION, TEST_NS_LABEL};
pub use pods::{bind_pod, create_pod};
pub use registry::{LoopbackRegistry, crane_binary};
pub use wait::wait_for;
