//! Prints the Phalanx CRDs as multi-document YAML (`phalanx_api::crds::to_yaml`) to stdout.
//! Used by `hack/gen-crds.sh`: `cargo run -q -p phalanx-api --example crdgen > crds/phalanx.yaml`.

fn main() {
    print!("{}", phalanx_api::crds::to_yaml());
}
