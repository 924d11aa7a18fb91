//! The SMF manifest and its sample configuration agree with the code: the service is disabled
//! by default, starts `rdctl registry serve --config` with flags the CLI has, stops with SIGTERM
//! and waits longer than the registry's drain, and the sample TOML loads.

use std::path::Path;

use registry::ServeConfig;

fn smf_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/smf"))
}

/// The value of attribute `attr` on the first element that contains `marker`.
fn attr<'a>(xml: &'a str, marker: &str, attr: &str) -> &'a str {
    let at = xml
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in the manifest"));
    let elem = &xml[xml[..=at].rfind('<').unwrap()..];
    let elem = &elem[..elem.find('>').unwrap()];
    let key = format!("{attr}=\"");
    let v = &elem[elem
        .find(&key)
        .unwrap_or_else(|| panic!("no {attr} in {elem}"))
        + key.len()..];
    &v[..v.find('"').unwrap()]
}

#[test]
fn smf_manifest_is_disabled_and_matches_the_cli() {
    let xml = std::fs::read_to_string(smf_dir().join("registry.xml")).unwrap();
    assert_eq!(attr(&xml, "<create_default_instance", "enabled"), "false");
    let start = attr(&xml, "name=\"start\"", "exec");
    assert!(
        start.contains(" registry serve --config %{config/file}"),
        "{start}"
    );
    assert!(start.contains("--log-json"), "{start}");
    assert_eq!(attr(&xml, "name=\"stop\"", "exec"), ":kill");
    let stop_timeout: u64 = attr(&xml, "name=\"stop\"", "timeout_seconds")
        .parse()
        .unwrap();
    let drain = ServeConfig::default().shutdown_timeout.as_secs();
    assert!(
        stop_timeout > drain,
        "SMF would kill the registry before its {drain} s drain"
    );
    assert_eq!(attr(&xml, "name=\"duration\"", "value"), "child");
    // Well-formed enough: every opened element is closed.
    for tag in [
        "service_bundle",
        "service",
        "property_group",
        "template",
        "method_context",
    ] {
        assert_eq!(
            xml.matches(&format!("<{tag} ")).count() + xml.matches(&format!("<{tag}>")).count(),
            xml.matches(&format!("</{tag}>")).count(),
            "<{tag}> not balanced"
        );
    }
}

#[test]
fn sample_configuration_loads() {
    let none = |_: &str| None;
    let c = ServeConfig::load_with_env(Some(&smf_dir().join("registry.toml")), &none).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:5000");
    assert_eq!(c.data, Path::new("/var/lib/reddwarf/registry"));
    assert!(c.delete_enabled);
    assert_eq!(c.shutdown_timeout.as_secs(), 30);
}
