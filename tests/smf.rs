//! The SMF manifests in `smf/` (parsed as XML): each service is disabled by default, runs with
//! a method context, starts rdctl with flags it has and the config file property, stops with
//! SIGTERM and a timeout longer than the service's own shutdown, follows the DTD's element
//! order, and its sample configuration loads; docs/operations.md installs them by these names.

use roxmltree::{Document, Node, ParsingOptions};

use crate::util::{ok, rdctl, root};

struct Service {
    /// File under smf/.
    file: &'static str,
    /// The service FMRI.
    name: &'static str,
    /// The rdctl subcommand the start method runs.
    command: [&'static str; 2],
    /// The user the method context runs as.
    user: &'static str,
    /// The sample configuration under smf/.
    sample: &'static str,
    /// The config/file property's default.
    config_file: &'static str,
}

const SERVICES: [Service; 2] = [
    Service {
        file: "registry.xml",
        name: "site/rdctl/registry",
        command: ["registry", "serve"],
        user: "daemon",
        sample: "registry.toml",
        config_file: "/etc/rdctl/registry.toml",
    },
    Service {
        file: "worker.xml",
        name: "site/rdctl/worker",
        command: ["worker", "run"],
        user: "root",
        sample: "worker.toml",
        config_file: "/etc/rdctl/worker.toml",
    },
];

fn child<'a, 'i>(n: Node<'a, 'i>, tag: &str) -> Node<'a, 'i> {
    n.children()
        .find(|c| c.has_tag_name(tag))
        .unwrap_or_else(|| panic!("<{}> has no <{tag}>", n.tag_name().name()))
}

fn attr<'a>(n: Node<'a, '_>, name: &str) -> &'a str {
    n.attribute(name)
        .unwrap_or_else(|| panic!("<{}> has no {name}", n.tag_name().name()))
}

fn method<'a, 'i>(service: Node<'a, 'i>, name: &str) -> Node<'a, 'i> {
    service
        .children()
        .find(|c| c.has_tag_name("exec_method") && c.attribute("name") == Some(name))
        .unwrap_or_else(|| panic!("no {name} method"))
}

fn propval<'a>(service: Node<'a, '_>, group: &str, name: &str) -> (&'a str, &'a str) {
    let pg = service
        .children()
        .find(|c| c.has_tag_name("property_group") && c.attribute("name") == Some(group))
        .unwrap_or_else(|| panic!("no property group {group}"));
    let pv = pg
        .children()
        .find(|c| c.has_tag_name("propval") && c.attribute("name") == Some(name))
        .unwrap_or_else(|| panic!("no property {group}/{name}"));
    (attr(pv, "type"), attr(pv, "value"))
}

#[test]
fn smf_manifests_are_disabled_with_context_config_and_bounded_stop() {
    let operations = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    for s in SERVICES {
        let path = root().join("smf").join(s.file);
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = Document::parse_with_options(
            &text,
            ParsingOptions {
                allow_dtd: true,
                ..ParsingOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let bundle = doc.root_element();
        assert_eq!(bundle.tag_name().name(), "service_bundle");
        assert_eq!(attr(bundle, "type"), "manifest");
        let service = child(bundle, "service");
        assert_eq!(attr(service, "name"), s.name, "{}", s.file);

        // service_bundle.dtd.1 order: create_default_instance?, single_instance?, restarter?,
        // dependency*, dependent*, method_context?, exec_method*, property_group*, instance*,
        // stability?, template?
        let order = [
            "create_default_instance",
            "single_instance",
            "restarter",
            "dependency",
            "dependent",
            "method_context",
            "exec_method",
            "property_group",
            "instance",
            "stability",
            "template",
        ];
        let ranks: Vec<usize> = service
            .children()
            .filter(Node::is_element)
            .map(|c| {
                let tag = c.tag_name().name();
                order
                    .iter()
                    .position(|&o| o == tag)
                    .unwrap_or_else(|| panic!("{}: <{tag}> is not a service child", s.file))
            })
            .collect();
        assert!(
            ranks.is_sorted(),
            "{}: children out of DTD order: {ranks:?}",
            s.file
        );

        assert_eq!(
            attr(child(service, "create_default_instance"), "enabled"),
            "false",
            "{}",
            s.file
        );

        let ctx = child(service, "method_context");
        assert!(attr(ctx, "working_directory").starts_with("/var/lib/rdctl"));
        let cred = child(ctx, "method_credential");
        assert_eq!(attr(cred, "user"), s.user, "{}", s.file);
        assert!(
            child(ctx, "method_environment")
                .children()
                .any(|e| e.attribute("name") == Some("RDCTL_LOG")),
            "{}",
            s.file
        );

        // The start method runs this rdctl subcommand with the config property and only
        // flags the subcommand has.
        let start = attr(method(service, "start"), "exec");
        let prefix = format!("/opt/rdctl/bin/rdctl {} {} ", s.command[0], s.command[1]);
        assert!(start.starts_with(&prefix), "{}: {start}", s.file);
        assert!(start.contains("--config %{config/file}"), "{start}");
        let help = ok(rdctl().args([s.command[0], s.command[1], "--help"]));
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in start.split_whitespace().filter(|w| w.starts_with("--")) {
            assert!(
                help.contains(flag),
                "{}: {flag} is not a flag of rdctl {} {}",
                s.file,
                s.command[0],
                s.command[1]
            );
        }
        let start_timeout: u64 = attr(method(service, "start"), "timeout_seconds")
            .parse()
            .unwrap();
        assert!(start_timeout > 0);

        // Stop: SIGTERM, with a timeout longer than the service's own shutdown.
        let stop = method(service, "stop");
        assert_eq!(attr(stop, "exec"), ":kill -TERM", "{}", s.file);
        let stop_timeout: u64 = attr(stop, "timeout_seconds").parse().unwrap();
        if s.command[0] == "registry" {
            // svcadm refresh sends SIGHUP, which reloads the TLS files.
            assert_eq!(attr(method(service, "refresh"), "exec"), ":kill -HUP");
        }
        let sample = root().join("smf").join(s.sample);
        let needed = match s.command[0] {
            "registry" => registry::ServeConfig::load_with_env(Some(&sample), &|_| None)
                .unwrap()
                .shutdown_timeout
                .as_secs(),
            _ => {
                // The sample loads; the worker stops between passes, within a minute.
                worker_runtime::WorkerConfig::load(&sample).unwrap();
                60
            }
        };
        assert!(
            stop_timeout > needed,
            "{}: SMF would kill the service after {stop_timeout} s, before its {needed} s shutdown",
            s.file
        );

        assert_eq!(propval(service, "startd", "duration"), ("astring", "child"));
        assert_eq!(
            propval(service, "config", "file"),
            ("astring", s.config_file),
            "{}",
            s.file
        );

        // docs/operations.md installs and enables this manifest under this name.
        for line in [
            format!("svccfg import smf/{}", s.file),
            format!("svcadm enable {}", s.name),
        ] {
            assert!(
                operations.contains(&line),
                "docs/operations.md lacks `{line}`"
            );
        }
    }
}
