//! The zone's configuration from the image's `solaris` section (the runtime spec's, carried
//! in the `org.reddwarf.zone.solaris` label) and the zone manifest's limits: each mapping
//! against an expected zonecfg file in `tests/data/golden/zonecfg/`, byte for byte, and every
//! field that cannot be mapped refused with its path.
//!
//! Set `UPDATE_GOLDEN=1` to rewrite the expected files after a deliberate change, then review
//! the diff.

use std::path::{Path, PathBuf};

use validator::Digest;
use worker_runtime::provision::illumos::{smf_manifest, smf_stop_exec, zonecfg_script};
use worker_runtime::provision::zonecfg::{SOLARIS_LABEL, ZoneConfig, ZonePolicy};
use worker_runtime::{IpRange, ResourceLimits, ZoneDescription};

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/golden/zonecfg")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 once)", path.display()));
    assert_eq!(
        actual.as_bytes(),
        expected.as_slice(),
        "{name} differs from {}:\n{actual}",
        path.display()
    );
}

fn description(zone_config: ZoneConfig, limits: ResourceLimits) -> ZoneDescription {
    ZoneDescription {
        zone: "web".into(),
        brand: "nlipkg".into(),
        image: "registry.example:5000/apps/web:1.4".into(),
        manifest_digest: Digest::sha256(b"manifest"),
        config_digest: Digest::sha256(b"config"),
        chain_id: None,
        entrypoint: vec!["/usr/bin/app".into()],
        cmd: vec![],
        env: vec![],
        user: None,
        working_dir: None,
        stop_signal: "SIGTERM".into(),
        stop_timeout_secs: 10,
        smf_stop_exec: smf_stop_exec("SIGTERM"),
        limits,
        zone_config,
        zonepath: PathBuf::from("/zones/web"),
        volumes: Vec::new(),
    }
}

fn limits(cpus: Option<f64>, memory: Option<&str>) -> ResourceLimits {
    ResourceLimits {
        cpus,
        memory: memory.map(str::to_owned),
        disk: None,
    }
}

#[test]
fn each_solaris_field_and_the_manifest_limits_map_onto_zonecfg() {
    // (expected file, the image's solaris section, the manifest's limits)
    let cases: &[(&str, Option<&str>, ResourceLimits)] = &[
        ("none.zonecfg", None, limits(None, None)),
        (
            "manifest-limits.zonecfg",
            None,
            limits(Some(2.0), Some("1g")),
        ),
        (
            "capped-cpu.zonecfg",
            Some(r#"{"cappedCPU": {"ncpus": "0.5"}}"#),
            limits(None, None),
        ),
        (
            "capped-memory.zonecfg",
            Some(r#"{"cappedMemory": {"physical": "512m", "swap": "1g"}}"#),
            limits(None, None),
        ),
        (
            "swap-only.zonecfg",
            Some(r#"{"cappedMemory": {"swap": "2g"}}"#),
            limits(None, None),
        ),
        // The manifest's caps win over the image's; the image's swap stays.
        (
            "limits-over-image.zonecfg",
            Some(
                r#"{"cappedCPU": {"ncpus": "8"}, "cappedMemory": {"physical": "8g", "swap": "1g"}}"#,
            ),
            limits(Some(1.5), Some("512m")),
        ),
        (
            "limitpriv.zonecfg",
            Some(r#"{"limitpriv": "default,dtrace_proc,!proc_info"}"#),
            limits(None, None),
        ),
        (
            "max-shm-memory.zonecfg",
            Some(r#"{"maxShmMemory": "256m"}"#),
            limits(None, None),
        ),
        (
            "anet.zonecfg",
            Some(
                r#"{"anet": [
                    {"linkname": "net0", "lowerLink": "igb0", "allowedAddress": "10.0.0.2/24",
                     "configureAllowedAddress": "true", "defrouter": "10.0.0.1",
                     "macAddress": "02:08:20:AB:cd:0e"},
                    {"linkname": "net1", "lowerLink": "auto", "macAddress": "random"},
                    {"linkname": "net2", "allowedAddress": "fd00::2/64,10.1.0.2",
                     "defrouter": "fd00::1", "macAddress": "auto"}
                ]}"#,
            ),
            limits(None, None),
        ),
        (
            "everything.zonecfg",
            Some(
                r#"{"milestone": "svc:/milestone/multi-user:default",
                    "limitpriv": "default", "maxShmMemory": "1g",
                    "cappedCPU": {"ncpus": "2"}, "cappedMemory": {"physical": "2g"},
                    "anet": [{"linkname": "web0", "lowerLink": "e1000g0",
                              "macAddress": "factory"}]}"#,
            ),
            limits(None, Some("1g")),
        ),
    ];
    for (file, label, lim) in cases {
        let c = ZoneConfig::from_image(*label, lim).unwrap_or_else(|e| panic!("{file}: {e}"));
        golden(file, &zonecfg_script(&description(c, lim.clone())));
    }
}

#[test]
fn the_milestone_becomes_a_dependency_of_the_entrypoint_service() {
    let c = ZoneConfig::from_image(
        Some(r#"{"milestone": "svc:/milestone/multi-user:default"}"#),
        &ResourceLimits::default(),
    )
    .unwrap();
    // Not a zonecfg property: the zone's configuration is unchanged by it.
    assert_eq!(
        zonecfg_script(&description(c.clone(), ResourceLimits::default())),
        zonecfg_script(&description(
            ZoneConfig::default(),
            ResourceLimits::default()
        ))
    );
    golden(
        "milestone-entrypoint.xml",
        &smf_manifest(&description(c, ResourceLimits::default())).unwrap(),
    );
}

#[test]
fn what_cannot_be_mapped_is_refused_naming_the_field() {
    let lim = ResourceLimits::default();
    for (label, want) in [
        (
            r#"{"anet": [{"linkname": "net0"}, {"linkname": "net1", "macAddress": "zz"}]}"#,
            r#"solaris.anet[1].macAddress: "zz" is not a MAC address"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "macAddress": "03:00:00:00:00:01"}]}"#,
            r#"solaris.anet[0].macAddress: "03:00:00:00:00:01" is a multicast address"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "configureAllowedAddress": "false", "allowedAddress": "10.0.0.2"}]}"#,
            r#"solaris.anet[0].configureAllowedAddress: "false" cannot be mapped: illumos configures an allowed address in the zone itself"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "configureAllowedAddress": "yes"}]}"#,
            r#"solaris.anet[0].configureAllowedAddress: "yes" is not "true" or "false""#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "linkProtection": "mac-nospoof"}]}"#,
            r#"solaris.anet[0].linkProtection: "mac-nospoof" cannot be mapped: link protection is a datalink property (dladm set-linkprop -p protection), not zonecfg; allowedAddress already limits the zone to its addresses"#,
        ),
        (
            r#"{"anet": [{"lowerLink": "igb0"}]}"#,
            "solaris.anet[0].linkname: missing; zonecfg needs a name",
        ),
        (
            r#"{"anet": [{"linkname": "net-0"}]}"#,
            r#"solaris.anet[0].linkname: "net-0" is not a datalink name (a letter, then letters, digits or _, ending in a digit; at most 31)"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0"}, {"linkname": "net0"}]}"#,
            r#"solaris.anet[1].linkname: "net0" is also anet[0]'s name"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "lowerLink": "igb"}]}"#,
            r#"solaris.anet[0].lowerLink: "igb" is not a datalink name or "auto""#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "allowedAddress": "10.0.0.300"}]}"#,
            r#"solaris.anet[0].allowedAddress: "10.0.0.300" is not an IP address with an optional /prefix"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "allowedAddress": "10.0.0.2", "defrouter": "gw"}]}"#,
            r#"solaris.anet[0].defrouter: "gw" is not an IP address"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "defrouter": "10.0.0.1"}]}"#,
            "solaris.anet[0].defrouter: zonecfg takes a default router only with allowedAddress",
        ),
        (
            r#"{"anet": [{"linkname": "net0", "mtu": "9000"}]}"#,
            "solaris.anet[0].mtu: unknown key; expected one of linkname, lowerLink, allowedAddress, configureAllowedAddress, defrouter, linkProtection, macAddress",
        ),
        (
            r#"{"anet": {"linkname": "net0"}}"#,
            r#"solaris.anet: {"linkname":"net0"} is not a list"#,
        ),
        (
            r#"{"cappedCPU": {"ncpus": "lots"}}"#,
            r#"solaris.cappedCPU.ncpus: "lots" is not a number of CPUs in (0, 1024] such as "1.5""#,
        ),
        (
            r#"{"cappedCPU": {"ncpus": 2}}"#,
            "solaris.cappedCPU.ncpus: 2 is not a string",
        ),
        (
            r#"{"cappedMemory": {"physical": "1.5g"}}"#,
            r#"solaris.cappedMemory.physical: "1.5g" is not a size like 512m or 2g"#,
        ),
        // zonecfg's own minimums (illumos-gate usr/src/cmd/zonecfg/zonecfg.c), refused
        // before a zone is made rather than by zonecfg.
        (
            r#"{"cappedCPU": {"ncpus": "0.005"}}"#,
            r#"solaris.cappedCPU.ncpus: "0.005" is below 0.01, the least capped-cpu ncpus zonecfg takes"#,
        ),
        (
            r#"{"cappedMemory": {"physical": "512k"}}"#,
            r#"solaris.cappedMemory.physical: "512k" is below 1M, the least capped-memory physical zonecfg takes"#,
        ),
        (
            r#"{"cappedMemory": {"physical": "1g", "swap": "49m"}}"#,
            r#"solaris.cappedMemory.swap: "49m" is below 50M, the least capped-memory swap zonecfg takes"#,
        ),
        (
            r#"{"cappedMemory": {"locked": "1g"}}"#,
            "solaris.cappedMemory.locked: unknown key; expected one of physical, swap",
        ),
        (
            r#"{"maxShmMemory": "0"}"#,
            r#"solaris.maxShmMemory: "0" is not a size like 512m or 2g"#,
        ),
        (
            r#"{"limitpriv": "default,proc fork"}"#,
            r#"solaris.limitpriv: "proc fork" is not a privilege name (such as default, dtrace_proc or !proc_fork)"#,
        ),
        (
            r#"{"milestone": "multi-user"}"#,
            r#"solaris.milestone: "multi-user" is not an SMF FMRI such as svc:/milestone/multi-user"#,
        ),
        (
            r#"{"cappedCpu": {"ncpus": "1"}}"#,
            "solaris.cappedCpu: unknown key; expected one of milestone, limitpriv, maxShmMemory, anet, cappedCPU, cappedMemory",
        ),
        (r#"["anet"]"#, r#"solaris: ["anet"] is not an object"#),
    ] {
        let e = ZoneConfig::from_image(Some(label), &lim).unwrap_err();
        assert_eq!(e.to_string(), want, "{label}");
    }
    let e = ZoneConfig::from_image(Some("{"), &lim).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("solaris: the {SOLARIS_LABEL} label is not JSON")),
        "{e}"
    );
}

/// A policy allowing what the golden `anet` and `limitpriv` cases ask for.
fn permissive() -> ZonePolicy {
    ZonePolicy {
        allowed_privileges: vec!["dtrace_proc".into()],
        allowed_lower_links: vec!["igb0".into(), "e1000g0".into()],
        allowed_address_ranges: ["10.0.0.0/16", "fd00::/48"]
            .iter()
            .map(|r| IpRange::parse(r).unwrap())
            .collect(),
        allow_mac_address: true,
    }
}

#[test]
fn the_default_zone_policy_allows_no_escalation_and_names_the_field_and_rule() {
    let lim = ResourceLimits::default();
    let default = ZonePolicy::default();
    // What every zone may ask for: caps, the default set (or basic) less some privileges,
    // an anet over the default link without fixed addresses.
    for ok in [
        r#"{"cappedCPU": {"ncpus": "1"}, "limitpriv": "default,!proc_info,!file_link_any"}"#,
        r#"{"limitpriv": "basic"}"#,
        r#"{"anet": [{"linkname": "net0", "lowerLink": "auto", "macAddress": "auto"}]}"#,
    ] {
        let c = ZoneConfig::from_image(Some(ok), &lim).unwrap();
        assert_eq!(c.check_policy(&default), Ok(()), "{ok}");
    }
    for (label, want) in [
        (
            r#"{"limitpriv": "default,sys_admin"}"#,
            r#"solaris.limitpriv: "sys_admin" is not in worker.toml zones.allowed_privileges (a zone gets illumos's default set and may only take from it unless the operator allows more)"#,
        ),
        (
            r#"{"limitpriv": "all"}"#,
            r#"solaris.limitpriv: "all" is not in worker.toml zones.allowed_privileges (a zone gets illumos's default set and may only take from it unless the operator allows more)"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0"}, {"linkname": "net1", "lowerLink": "igb0"}]}"#,
            r#"solaris.anet[1].lowerLink: "igb0" is not in worker.toml zones.allowed_lower_links"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "allowedAddress": "10.0.0.2/24"}]}"#,
            r#"solaris.anet[0].allowedAddress: "10.0.0.2/24" is not within worker.toml zones.allowed_address_ranges"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "macAddress": "random"}]}"#,
            r#"solaris.anet[0].macAddress: "random" is refused: worker.toml zones.allow_mac_address is false"#,
        ),
    ] {
        let c = ZoneConfig::from_image(Some(label), &lim).unwrap();
        assert_eq!(
            c.check_policy(&default).unwrap_err().to_string(),
            want,
            "{label}"
        );
    }
}

#[test]
fn an_allowing_zone_policy_admits_exactly_what_it_lists() {
    let lim = ResourceLimits::default();
    let p = permissive();
    for label in [
        r#"{"limitpriv": "default,dtrace_proc,!proc_info"}"#,
        r#"{"anet": [{"linkname": "net0", "lowerLink": "igb0", "allowedAddress": "10.0.0.2/24,10.0.200.9", "defrouter": "10.0.0.1", "macAddress": "02:08:20:AB:cd:0e"}]}"#,
        r#"{"anet": [{"linkname": "net0", "allowedAddress": "fd00::2/64"}]}"#,
    ] {
        let c = ZoneConfig::from_image(Some(label), &lim).unwrap();
        assert_eq!(c.check_policy(&p), Ok(()), "{label}");
    }
    for (label, want) in [
        (
            r#"{"limitpriv": "default,dtrace_kernel"}"#,
            r#"solaris.limitpriv: "dtrace_kernel" is not in worker.toml zones.allowed_privileges (a zone gets illumos's default set and may only take from it unless the operator allows more)"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "lowerLink": "ixgbe0"}]}"#,
            r#"solaris.anet[0].lowerLink: "ixgbe0" is not in worker.toml zones.allowed_lower_links"#,
        ),
        // Outside the range, a wider prefix than the range, the other family.
        (
            r#"{"anet": [{"linkname": "net0", "allowedAddress": "10.1.0.2"}]}"#,
            r#"solaris.anet[0].allowedAddress: "10.1.0.2" is not within worker.toml zones.allowed_address_ranges"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "allowedAddress": "10.0.0.2/8"}]}"#,
            r#"solaris.anet[0].allowedAddress: "10.0.0.2/8" is not within worker.toml zones.allowed_address_ranges"#,
        ),
        (
            r#"{"anet": [{"linkname": "net0", "allowedAddress": "fd01::2/64"}]}"#,
            r#"solaris.anet[0].allowedAddress: "fd01::2/64" is not within worker.toml zones.allowed_address_ranges"#,
        ),
    ] {
        let c = ZoneConfig::from_image(Some(label), &lim).unwrap();
        assert_eq!(c.check_policy(&p).unwrap_err().to_string(), want, "{label}");
    }
}
