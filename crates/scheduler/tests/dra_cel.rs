//! CEL device selectors in the environment upstream gives them: driver, attributes and capacity by domain, an
//! empty map for a domain the device lacks, quantities and semantic versions.

use phalanx_scheduler::dra::cel::compile;
use phalanx_scheduler::dra::{AttributeValue, Device, DeviceId};

fn device() -> Device {
    let mut d = Device::new(DeviceId::new("gpu.example.com", "node-a", "gpu-0"))
        .with_attribute("model", AttributeValue::String("h100".into()))
        .with_attribute("cores", AttributeValue::Int(132))
        .with_attribute("nvlink", AttributeValue::Bool(true))
        .with_attribute("driverVersion", AttributeValue::Version("1.10.0".into()))
        .with_attribute("pci.example.com/root", AttributeValue::String("pci-0".into()));
    d.capacity.insert("gpu.example.com/memory".into(), 80 * (1 << 30));
    d
}

fn eval(expr: &str) -> Result<bool, String> {
    let s = compile(expr).map_err(|e| e.0)?;
    s.matches(&device()).map_err(|e| e.0)
}

#[test]
fn attributes_by_domain_with_the_driver_as_the_default_domain() {
    assert_eq!(eval(r#"device.driver == "gpu.example.com""#), Ok(true));
    assert_eq!(
        eval(r#"device.attributes["gpu.example.com"].model == "h100""#),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.attributes["gpu.example.com"].model == "a100""#),
        Ok(false)
    );
    assert_eq!(
        eval(
            r#"device.attributes["gpu.example.com"].cores >= 100 && device.attributes["gpu.example.com"].nvlink"#
        ),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.attributes["pci.example.com"].root == "pci-0""#),
        Ok(true)
    );
}

#[test]
fn a_domain_the_device_lacks_is_an_empty_map() {
    assert_eq!(
        eval(r#"has(device.attributes["nic.example.com"].speed)"#),
        Ok(false)
    );
    assert_eq!(
        eval(r#"has(device.attributes["gpu.example.com"].model)"#),
        Ok(true)
    );
    let e = eval(r#"device.attributes["nic.example.com"].speed == 100"#).unwrap_err();
    assert!(
        e.contains("speed"),
        "a missing attribute used without has() is an error naming it: {e}"
    );
}

#[test]
fn quantities_compare_by_value() {
    assert_eq!(
        eval(r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("100Gi"))"#),
        Ok(false)
    );
    assert_eq!(
        eval(r#"device.capacity["gpu.example.com"].memory.isLessThan(quantity("81Gi"))"#),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.capacity["gpu.example.com"].memory.asInteger() == 85899345920"#),
        Ok(true)
    );
    assert!(eval(r#"quantity("lots") == 1"#).is_err());
}

#[test]
fn versions_compare_as_semantic_versions_not_strings() {
    // As strings "1.10.0" < "1.9.0"; as versions it is greater.
    assert_eq!(
        eval(r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.9.0"))"#),
        Ok(true)
    );
    assert_eq!(
        eval(r#"semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))"#),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.attributes["gpu.example.com"].driverVersion.minor() == 10"#),
        Ok(true)
    );
    assert!(
        eval(r#"semver("1.0") == "1.0""#).is_err(),
        "an invalid version is an error"
    );
}

#[test]
fn a_syntax_error_fails_at_compile_and_a_non_bool_at_evaluation() {
    let e = compile("device.driver ==").unwrap_err();
    assert!(e.0.starts_with("compilation failed"), "{}", e.0);
    let e = eval("device.driver").unwrap_err();
    assert!(e.contains("must evaluate to bool"), "{e}");
}
